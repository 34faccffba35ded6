#!/usr/bin/env bash
# Runs a libFuzzer binary over a read-only seed corpus, for ctest (tests/fuzz/CMakeLists.txt).
#   run_fuzzer.sh <fuzzer> <work dir> <seed corpus dir> [libFuzzer flags...]
# The work dir is emptied first; new inputs go to <work dir>/corpus (the first corpus dir, the
# only one libFuzzer writes to), crash/leak/timeout/oom inputs to <work dir>/artifacts/.
# Exits with the fuzzer's status (non-zero on any finding) and lists the artifacts.
set -uo pipefail
fuzzer=$1 work=$2 seeds=$3
shift 3
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
"$fuzzer" -artifact_prefix="$work/artifacts/" "$@" "$work/corpus" "$seeds"
status=$?
if [ $status -ne 0 ]; then
  echo "fuzz: $fuzzer failed with status $status; artifacts:" >&2
  ls -l "$work/artifacts" >&2
  for artifact in "$work"/artifacts/*; do
    [ -f "$artifact" ] && { echo "--- $artifact (hex)" >&2; od -A x -t x1z -v "$artifact" | head -40 >&2; }
  done
fi
exit $status
