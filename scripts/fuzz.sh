#!/usr/bin/env bash
# Fuzzes the device's request path (tests/fuzz/fuzz_device.cpp: the C ABI with fuzzed reply
# buffer sizes and the C++ wire path) with libFuzzer under ASan/UBSan, for a bounded time.
#
#   scripts/fuzz.sh [seconds] [--workers N] [--merge] [--regen-corpus] [--build-only]
#     seconds         how long to fuzz, in wall time (default 120)
#     --workers N     fuzz in N processes at once (libFuzzer -fork=N; default 1)
#     --merge         afterwards, add the inputs that found new coverage to tests/fuzz/corpus
#                     (libFuzzer -merge=1; only then is the repository's corpus touched)
#     --regen-corpus  rewrite the seed files of tests/fuzz/corpus from make_corpus.cpp, and stop
#     --build-only    build the fuzzer, and stop
#
# Builds in build-fuzz/ (CGP_FUZZ_BUILD_DIR overrides) with clang: CGP_FUZZ=ON, CGP_SANITIZE=ON.
# Fuzzes a copy of the corpus in <build>/fuzz-run/. Exits non-zero on a crash, a failed
# invariant (a trap), a leak, a timeout or running out of memory; the input is then in
# <build>/fuzz-run/artifacts/ and the command that replays it is printed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CGP_FUZZ_BUILD_DIR:-$root/build-fuzz}
usage() {
  echo "usage: $0 [seconds] [--workers N] [--merge] [--regen-corpus] [--build-only]" >&2
  exit 2
}
seconds=120 workers=1 merge=0 regen=0 build_only=0
while [ $# -gt 0 ]; do
  case $1 in
    --merge) merge=1 ;;
    --regen-corpus) regen=1 ;;
    --build-only) build_only=1 ;;
    --workers)
      [ $# -ge 2 ] || usage
      case $2 in ''|*[!0-9]*|0) usage ;; esac
      workers=$2
      shift ;;
    ''|*[!0-9]*) usage ;;
    *) seconds=$1 ;;
  esac
  shift
done

"$root/scripts/setup.sh"  # the fuzz packages (clang, libclang-rt-14-dev, llvm) belong in its list
command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }

if [ -f "$build/CMakeCache.txt" ] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang' "$build/CMakeCache.txt"; then
  echo "fuzz: $build was configured with another compiler; remove it or set CGP_FUZZ_BUILD_DIR" >&2
  exit 1
fi
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCGP_FUZZ=ON -DCGP_SANITIZE=ON -DCGP_BUILD_TESTS=OFF -DCGP_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" --target cgp_fuzz_device cgp_fuzz_make_corpus

fuzzer=$build/tests/fuzz/cgp_fuzz_device
corpus=$root/tests/fuzz/corpus
if [ ! -x "$fuzzer" ]; then
  echo "fuzz: $fuzzer was not built (is add_subdirectory(tests/fuzz) wired in for CGP_FUZZ?)" >&2
  exit 1
fi
[ $build_only -eq 1 ] && exit 0
if [ $regen -eq 1 ]; then
  "$build/tests/fuzz/cgp_fuzz_make_corpus" "$corpus"
  exit 0
fi

# Symbolized reports (ASan looks for llvm-symbolizer on PATH; Debian names it by version).
if ! command -v llvm-symbolizer >/dev/null && [ -x /usr/lib/llvm-14/bin/llvm-symbolizer ]; then
  export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/lsan.supp:print_suppressions=0}

run=$build/fuzz-run
rm -rf "$run"
mkdir -p "$run/corpus" "$run/artifacts"
cp "$corpus"/* "$run/corpus/"

echo "fuzz: $fuzzer for ${seconds}s in $workers process(es) over a copy of $corpus" \
  "($(ls "$corpus" | wc -l) seeds)" >&2
parallel=()
# Fork mode: the parent runs N children on the shared corpus and stops at the first crash, leak
# or timeout of any of them (-ignore_crashes stays 0), leaving its input in artifacts/.
[ "$workers" -gt 1 ] && parallel=(-fork="$workers")
set +e
"$fuzzer" "${parallel[@]}" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="$run/artifacts/" "$run/corpus" 2>&1 |
  grep -v '^#[0-9]* *\(NEW\|REDUCE\|pulse\) '
status=${PIPESTATUS[0]}
set -e

if [ "$status" -ne 0 ]; then
  echo "fuzz: FAILED (status $status). Inputs:" >&2
  for artifact in "$run"/artifacts/*; do
    [ -f "$artifact" ] || continue
    echo "  $artifact   replay: $fuzzer $artifact" >&2
    od -A x -t x1z -v "$artifact" | head -20 | sed 's/^/    /' >&2
  done
  exit "$status"
fi

if [ $merge -eq 1 ]; then
  # Adds to the repository's corpus only the inputs that add coverage (named by their SHA-1).
  before=$(ls "$corpus" | wc -l)
  "$fuzzer" -merge=1 -rss_limit_mb=2048 -timeout=10 -max_len=65536 "$corpus" "$run/corpus" \
    2>&1 | tail -2
  echo "fuzz: merged; $corpus: $before -> $(ls "$corpus" | wc -l) files" >&2
fi
echo "fuzz: OK, ${seconds}s without a finding" >&2
