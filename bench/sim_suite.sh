#!/usr/bin/env bash
# The simulation suite: cgp-sim against the numpy baseline (bench/numpy_baseline.py)
# on the same data files, settings and repetitions; whole processes, wall time.
#   bench/sim_suite.sh BUILD_DIR [ROW...]      (scripts/bench.sh sim builds and calls it)
# Columns, each the least of RUNS=3 rounds run side by side (side_by_side): numpy s (one
# thread), cgp-sim s (--threads 1), speedup, cgp-sim s (all threads), query s (cgp-sim's JSON
# 'seconds' on one thread: the queries alone), noise floor s (the row's noisy values, from
# cgp-sim's JSON 'released', times ns/value: the cost of one value from the fastest generator
# here, build/bench/cgp_bench_coordinator floor, the vectorized fast noise in pairs — a point's
# coordinates, or two partners' 1-D releases — measured with the row), and × floor = query s /
# floor s (issue 31's measure).
set -euo pipefail
build="$(cd "$1" && pwd)"; shift
here="$(cd "$(dirname "$0")" && pwd)"
sim="$build/bin/cgp-sim"
python=/usr/bin/python3  # Debian's, with Debian's python3-numpy
data="$build/sim-suite"
mkdir -p "$data"
[ -f "$data/vectors50.csv" ] || "$python" "$here/numpy_baseline.py" data "$data"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

declare -A args=(
  [range-BM0]="range --data $data/city200k.csv --rho 1e-6 --w 4000 --methods BM0 --reps 20"
  [range-PM0]="range --data $data/city200k.csv --rho 1e-6 --w 4000 --methods PM0 --c 4 --reps 20"
  [range-PM1]="range --data $data/city200k.csv --rho 1e-6 --w 4000 --methods PM1 --c 4 --reps 20 --no-shift"
  [kde-PM0]="kde --data $data/city200k.csv --rho 1e-6 --b 1000 --methods PM0 --c 64 --reps 10"
  [kde-PM1]="kde --data $data/city200k.csv --rho 1e-6 --b 1000 --methods PM1 --c 64 --reps 10"
  [knn2-BM1]="knn --data $data/city200k.csv --rho 1e-4 --k 10 --methods BM1 --reps 20"
  [knn2-PM1]="knn --data $data/city200k.csv --rho 1e-4 --k 10 --methods PM1 --c 4 --reps 20"
  [knn50-PM0]="knn --data $data/vectors50.csv --rho 1e3 --k 10 --methods PM0 --c 4 --reps 20"
  [knn50-PM1]="knn --data $data/vectors50.csv --rho 1e3 --k 10 --methods PM1 --c 4 --reps 20"
  [alg3-PM1]="multi-range --data $data/city20k.csv --budget 1e-4 --m 24 --w 4000 --methods PM1 --c 4 --reps 20 --no-shift"
)
numpy_file() {
  case "$1" in knn50-*) echo "$data/vectors50.csv" ;; alg3-*) echo "$data/city20k.csv" ;;
    *) echo "$data/city200k.csv" ;; esac
}
RUNS="${RUNS:-3}"
least() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b < a) ? b : a }'; }
wall() { /usr/bin/time -f %e "$@" 2>&1 >/dev/null | tail -1; }
query_seconds() { "$python" -c 'import json,sys; print(sum(r["seconds"] for r in json.load(open(sys.argv[1]))))' "$1"; }
# One row, side by side: $RUNS rounds of numpy, cgp-sim on one thread, cgp-sim on every thread
# and the noise floor's generator, one after the other, so that each sees the machine as the
# others do (one run here varies by up to ±30% from minute to minute). Prints the least of
# each: "numpy one query all single_ns paired_ns" (query: cgp-sim's JSON 'seconds' on one
# thread, the queries alone — no process start, loading or ground truth).
side_by_side() {
  local row="$1" numpy="" one="" query="" all="" single="" paired="" line
  for _ in $(seq "$RUNS"); do
    numpy="$(least "$numpy" "$(wall "$python" "$here/numpy_baseline.py" "$row" "$(numpy_file "$row")")")"
    # shellcheck disable=SC2086  # the arguments are words
    one="$(least "$one" "$(wall "$sim" ${args[$row]} --threads 1 --json "$data/$row.json")")"
    query="$(least "$query" "$(query_seconds "$data/$row.json")")"
    # shellcheck disable=SC2086
    all="$(least "$all" "$(wall "$sim" ${args[$row]} --threads 0)")"
    line="$("$build/bench/cgp_bench_coordinator" floor)"
    single="$(least "$single" "$(sed -n 's/.*single_ns=\([0-9.]*\).*/\1/p' <<<"$line")")"
    paired="$(least "$paired" "$(sed -n 's/.*paired_ns=\([0-9.]*\).*/\1/p' <<<"$line")")"
  done
  echo "$numpy $one $query $all $single $paired"
}
released() { "$python" -c 'import json,sys; print(sum(r["released"] for r in json.load(open(sys.argv[1]))))' "$1"; }

echo "noise floor at the start: $("$build/bench/cgp_bench_coordinator" floor) (each row takes its own)"
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(range-BM0 range-PM0 range-PM1 kde-PM0 kde-PM1 knn2-BM1 knn2-PM1
                                knn50-PM0 knn50-PM1 alg3-PM1)
printf '%-10s %9s %12s %8s %12s %9s %9s %8s %7s\n' row "numpy s" "cgp-sim 1t" speedup "cgp-sim all" \
  "query s" "floor s" "x floor" "ns/value"
log_sum=0
for row in "${rows[@]}"; do
  read -r numpy_s one_s query_s all_s single_ns paired_ns <<<"$(side_by_side "$row")"
  # The floor is the fastest generator's cost a value, in pairs, for every row (a 1-D release
  # takes half of a pair its partner shares); single_ns, a lone cosine, is in the first line.
  ns="$paired_ns"
  floor_s="$(awk -v n="$(released "$data/$row.json")" -v ns="$ns" 'BEGIN { printf "%.3f", n * ns / 1e9 }')"
  times_floor="$(awk -v a="$query_s" -v b="$floor_s" 'BEGIN { printf "%.1f", a / b }')"
  speedup="$(awk -v a="$numpy_s" -v b="$one_s" 'BEGIN { printf "%.2f", a / b }')"
  log_sum="$(awk -v s="$log_sum" -v x="$speedup" 'BEGIN { print s + log(x) }')"
  printf '%-10s %9s %12s %7sx %12s %9.3f %9s %7sx %7s\n' "$row" "$numpy_s" "$one_s" "$speedup" \
    "$all_s" "$query_s" "$floor_s" "$times_floor" "$ns"
done
awk -v s="$log_sum" -v n="${#rows[@]}" 'BEGIN { printf "geometric mean speedup (1 thread): %.2fx\n", exp(s / n) }'
