#!/usr/bin/env bash
# Builds a configured build directory with its output in BUILD_DIR/build.log, showing only the
# last 40 lines (and where the log is) when the build fails. Used by test.sh, demo.sh and
# client_build.sh.
#   scripts/build_logged.sh NAME BUILD_DIR [TARGET...]   (no target: everything)
set -euo pipefail
name="$1"
build="$2"
shift 2
targets=()
[ "$#" -gt 0 ] && targets=(--target "$@")
root="$(cd "$(dirname "$0")/.." && pwd)"
echo "$name: building in ${build#$root/}/ (log: ${build#$root/}/build.log)" >&2
cmake --build "$build" "${targets[@]}" > "$build/build.log" 2>&1 || {
  tail -40 "$build/build.log" >&2
  echo "$name: the build failed; the whole log is in $build/build.log" >&2
  exit 1
}
