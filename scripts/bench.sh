#!/usr/bin/env bash
# Builds an optimised tree and runs the device benchmarks; prints the stripped library sizes.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
cmake -S "$root" -B "$root/build-release" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build-release" --target cgp_bench_client cgp_client
"$root/build-release/bench/cgp_bench_client" --benchmark_min_time=1 "$@"
for lib in client-sdk/libcgpkit_client.a common/libcgpkit_common.a; do
  strip --strip-unneeded -o /tmp/cgp-stripped.a "$root/build-release/$lib"
  echo "stripped $(basename "$lib"): $(stat -c %s /tmp/cgp-stripped.a) bytes"
done
rm -f /tmp/cgp-stripped.a
