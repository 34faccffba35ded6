#!/usr/bin/env bash
# cgp-sim range PM1 (c = 64) over N synthetic users generated per rank: one process on every
# core, then mpiexec with 1 and 2 ranks of one thread each. Prints each run's table, wall time,
# peak memory of the largest process and what rank 0 put into the engine's reductions, then
# checks that the three runs wrote the same rows (all fields but the wall time).
#   bench/scale_out.sh BUILD_DIR [USERS=100000000] [REPS=2]
set -euo pipefail
build="$1"
users="${2:-100000000}"
reps="${3:-2}"
sim="$build/bin/cgp-sim"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args=(range --n "$users" --rho 1e-4 --w 2000 --methods PM1 --c 64 --reps "$reps")
run() {  # run NAME THREADS LAUNCHER...
  local name="$1" threads="$2"
  shift 2
  echo "== $name"
  /usr/bin/time -f "wall %e s, peak RSS of the largest process %M KB" "$@" "$sim" "${args[@]}" \
    --threads "$threads" --json "$out/$name.json"
}
run one-process 0
run ranks-1 1 mpiexec -n 1
run ranks-2 1 mpiexec -n 2
strip_seconds() { sed -E 's/"seconds":[^,}]*,?//g' "$1"; }
if [ "$(strip_seconds "$out/one-process.json")" = "$(strip_seconds "$out/ranks-1.json")" ] &&
   [ "$(strip_seconds "$out/one-process.json")" = "$(strip_seconds "$out/ranks-2.json")" ]; then
  echo "scale_out: the three runs wrote the same rows"
else
  echo "scale_out: the rows differ" >&2
  exit 1
fi
