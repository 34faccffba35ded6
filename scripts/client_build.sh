#!/usr/bin/env bash
# The device SDK on its own: builds the client-only configuration (CGP_CLIENT_ONLY:
# common + client-sdk, protobuf, libsodium, SQLite, Boost headers) with warnings as errors, runs
# its tests, and prints the stripped sizes of the static libraries and of a minimal C app.
#   scripts/client_build.sh          this machine, in build-client/, with the device link
#                                    (CGP_DEVICE_LINK: gRPC); installs and consumes it too
#   scripts/client_build.sh arm64    cross-built for 64-bit ARM, tests under qemu-aarch64
#   scripts/client_build.sh armhf    cross-built for 32-bit ARMv7 (no __int128), under qemu-arm
#   ... --build-only                 installs and builds, runs no test (.ci/run builds the cross
#                                    targets at low priority beside the suites, then tests them)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target=native
build_only=0
for arg in "$@"; do
  case "$arg" in
    native|arm64|armhf) target=$arg ;;
    --build-only) build_only=1 ;;
    *) echo "usage: scripts/client_build.sh [arm64|armhf] [--build-only]" >&2; exit 2 ;;
  esac
done
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCGP_WERROR=ON -DCGP_CLIENT_ONLY=ON)
strip=strip
case "$target" in
  native)
    build="$root/build-client"
    flags+=(-DCGP_DEVICE_LINK=ON)
    "$root/scripts/setup.sh" ;;
  arm64|armhf)
    triple=$([ "$target" = arm64 ] && echo aarch64-linux-gnu || echo arm-linux-gnueabihf)
    build="$root/build-$target"
    export CGP_SYSROOT
    CGP_SYSROOT="$("$root/scripts/setup_cross.sh" "$target")"
    flags+=(-DCMAKE_TOOLCHAIN_FILE="$root/cmake/toolchains/$triple.cmake")
    strip=$triple-strip ;;
esac
cmake -S "$root" -B "$build" -G Ninja "${flags[@]}" >/dev/null
"$root/scripts/build_logged.sh" "client_build ($target)" "$build"
[ "$build_only" -eq 1 ] && exit 0
(cd "$build" && ctest --output-on-failure --parallel "$(nproc)" --timeout 900)

stripped_size() {
  local copy
  copy=$(mktemp)
  cp "$1" "$copy"
  "$strip" --strip-unneeded "$copy"
  stat -c %s "$copy"
  rm -f "$copy"
}
kib() { echo "$(( ($1 + 512) / 1024 )) KiB"; }
client=$(stripped_size "$build/client-sdk/libcgpkit_client.a")
common=$(stripped_size "$build/common/libcgpkit_common.a")
app=$(stripped_size "$build/examples/c/cgp-minimal-device")
echo "client_build: $target sizes (stripped): libcgpkit_client.a $(kib "$client")," \
     "libcgpkit_common.a $(kib "$common"), minimal C app (examples/c, cgpkit linked" \
     "statically, protobuf/libsodium/SQLite shared) $(kib "$app")"
if [ -f "$build/device-link/libcgpkit_link.a" ]; then
  link=$(stripped_size "$build/device-link/libcgpkit_link.a")
  check_in=$(stripped_size "$build/examples/c/cgp-check-in-device")
  echo "client_build: $target device link (stripped): libcgpkit_link.a $(kib "$link")," \
       "check-in C app (examples/c, cgpkit linked statically, gRPC and the rest shared)" \
       "$(kib "$check_in")"
fi
