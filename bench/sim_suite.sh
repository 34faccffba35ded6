#!/usr/bin/env bash
# The simulation suite: cgp-sim against the numpy baseline (bench/numpy_baseline.py)
# on the same data files, settings and repetitions; whole processes, wall time.
#   bench/sim_suite.sh BUILD_DIR [ROW...]      (scripts/bench.sh sim builds and calls it)
# Columns (each the least of RUNS=3 runs): numpy s (one thread), cgp-sim s (--threads 1),
# speedup, cgp-sim s (all threads), query s (cgp-sim's JSON 'seconds' on one thread: the
# queries alone), noise floor s (the row's noisy values, from cgp-sim's JSON 'released', times
# the cost of one normal from the fastest generator here: build/bench/cgp_bench_coordinator
# floor, the vectorized fast noise — single normals for 1-D releases, pairs for points), and
# × floor = query s / floor s (issue 31's measure).
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
# Wall seconds of a whole process: the least of $RUNS runs (default 3), for numpy and cgp-sim
# alike — on a shared machine one run varies by up to ±30%, the least of a few much less.
RUNS="${RUNS:-3}"
seconds() {
  local best="" t
  for _ in $(seq "$RUNS"); do
    t="$(/usr/bin/time -f %e "$@" 2>&1 >/dev/null | tail -1)"
    best="$(awk -v a="$best" -v b="$t" 'BEGIN { print (a == "" || b < a) ? b : a }')"
  done
  echo "$best"
}
floor_line="$("$build/bench/cgp_bench_coordinator" floor)"
single_ns="$(sed -n 's/.*single_ns=\([0-9.]*\).*/\1/p' <<<"$floor_line")"
paired_ns="$(sed -n 's/.*paired_ns=\([0-9.]*\).*/\1/p' <<<"$floor_line")"
echo "noise floor: $floor_line"
query_seconds() { "$python" -c 'import json,sys; print(sum(r["seconds"] for r in json.load(open(sys.argv[1]))))' "$1"; }
# cgp-sim on one thread: "wall query", each the least of $RUNS runs (query: the JSON's
# 'seconds', the queries alone — no loading, ground truth or process start).
one_thread() {
  local row="$1" wall="" query="" t q
  for _ in $(seq "$RUNS"); do
    # shellcheck disable=SC2086  # the arguments are words
    t="$(/usr/bin/time -f %e "$sim" ${args[$row]} --threads 1 --json "$data/$row.json" 2>&1 \
         >/dev/null | tail -1)"
    q="$(query_seconds "$data/$row.json")"
    wall="$(awk -v a="$wall" -v b="$t" 'BEGIN { print (a == "" || b < a) ? b : a }')"
    query="$(awk -v a="$query" -v b="$q" 'BEGIN { print (a == "" || b < a) ? b : a }')"
  done
  echo "$wall $query"
}
released() { "$python" -c 'import json,sys; print(sum(r["released"] for r in json.load(open(sys.argv[1]))))' "$1"; }

rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(range-BM0 range-PM0 range-PM1 kde-PM0 kde-PM1 knn2-BM1 knn2-PM1
                                knn50-PM0 knn50-PM1 alg3-PM1)
printf '%-10s %9s %12s %8s %12s %9s %9s %8s\n' row "numpy s" "cgp-sim 1t" speedup "cgp-sim all" \
  "query s" "floor s" "x floor"
log_sum=0
for row in "${rows[@]}"; do
  numpy_s="$(seconds "$python" "$here/numpy_baseline.py" "$row" "$(numpy_file "$row")")"
  read -r one_s query_s <<<"$(one_thread "$row")"
  case "$row" in *-PM0|*-BM0) ns="$paired_ns" ;; *) ns="$single_ns" ;; esac
  floor_s="$(awk -v n="$(released "$data/$row.json")" -v ns="$ns" 'BEGIN { printf "%.3f", n * ns / 1e9 }')"
  times_floor="$(awk -v a="$query_s" -v b="$floor_s" 'BEGIN { printf "%.1f", a / b }')"
  # shellcheck disable=SC2086
  all_s="$(seconds "$sim" ${args[$row]} --threads 0)"
  speedup="$(awk -v a="$numpy_s" -v b="$one_s" 'BEGIN { printf "%.2f", a / b }')"
  log_sum="$(awk -v s="$log_sum" -v x="$speedup" 'BEGIN { print s + log(x) }')"
  printf '%-10s %9s %12s %7sx %12s %9.3f %9s %7sx\n' "$row" "$numpy_s" "$one_s" "$speedup" \
    "$all_s" "$query_s" "$floor_s" "$times_floor"
done
awk -v s="$log_sum" -v n="${#rows[@]}" 'BEGIN { printf "geometric mean speedup (1 thread): %.2fx\n", exp(s / n) }'
