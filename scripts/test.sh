#!/usr/bin/env bash
# Installs the dependencies, builds cgpkit with warnings as errors and runs every test (ctest).
#   scripts/test.sh             release build with assertions, in build/
#   scripts/test.sh --sanitize  AddressSanitizer + UndefinedBehaviorSanitizer, in build-sanitize/
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCGP_WERROR=ON)
select=()
case "${1:-}" in
  "") ;;
  --sanitize)
    build="$root/build-sanitize"
    flags=(-DCMAKE_BUILD_TYPE=Debug -DCGP_WERROR=ON -DCGP_SANITIZE=ON)
    # Checks of the tree and packaging (label tree-check) run in the release leg only.
    select=(-LE tree-check) ;;
  *) echo "usage: scripts/test.sh [--sanitize]" >&2; exit 2 ;;
esac
"$root/scripts/setup.sh"
cmake -S "$root" -B "$build" -G Ninja "${flags[@]}" >/dev/null
"$root/scripts/build_logged.sh" test "$build"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$root/tests/lsan.supp:print_suppressions=0}"
cd "$build"
ctest --output-on-failure --parallel "$(nproc)" --timeout 600 "${select[@]}"
