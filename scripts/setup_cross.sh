#!/usr/bin/env bash
# Installs what the client-only cross build for ARCH (arm64 or armhf) needs: Debian's cross
# toolchain and qemu-user on the host, and a sysroot of the target's own libraries (protobuf,
# libsodium, SQLite, zlib; Boost and Catch2 headers) unpacked from Debian's packages for that
# architecture into build-sysroot/ARCH. The sysroot keeps the host's package set untouched: no
# dpkg --add-architecture, so that Multi-Arch version skew between a host's security updates
# and a target's index can never block the host (or this script).
#   scripts/setup_cross.sh arm64|armhf   (prints the sysroot's path)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
arch=${1:-}
case "$arch" in
  arm64) triple=aarch64-linux-gnu ;;
  armhf) triple=arm-linux-gnueabihf ;;
  *) echo "usage: scripts/setup_cross.sh arm64|armhf" >&2; exit 2 ;;
esac
sysroot="$root/build-sysroot/$arch"
stamp="$sysroot/.complete"
# The target's runtime and development packages (the -dev packages' dependencies, by name).
target_packages=(libprotobuf-dev libprotobuf32 libprotobuf-lite32 libsodium-dev libsodium23
                 libsqlite3-dev libsqlite3-0 zlib1g-dev zlib1g libboost1.74-dev)
host_packages=(g++-$triple qemu-user protobuf-compiler catch2 cmake ninja-build pkg-config)
# catch2 is taken in the host's architecture: the tests use its headers only (Catch2::Catch2).
# The sysroot is remade when this list changes (the stamp holds it).
wanted="${target_packages[*]} catch2"
complete() { [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; }

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
missing=()
for package in "${host_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
apt_for_target=(-o "APT::Architectures=$(dpkg --print-architecture),$arch")
if [ ${#missing[@]} -gt 0 ] || ! complete; then
  # The target architecture's index, for apt-get download only. A mirror whose index for one
  # architecture is broken still serves the others: the downloads below decide.
  $sudo apt-get "${apt_for_target[@]}" update -qq ||
    echo "setup_cross: apt-get update reported errors (continuing: the packages decide)" >&2
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup_cross: installing ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
if ! complete; then
  downloads="$root/build-sysroot/$arch-debs"
  rm -rf "$sysroot" "$downloads"
  mkdir -p "$sysroot" "$downloads"
  (cd "$downloads" && apt-get "${apt_for_target[@]}" download -qq \
    "${target_packages[@]/%/:$arch}" catch2)
  for deb in "$downloads"/*.deb; do dpkg-deb -x "$deb" "$sysroot"; done
  # Absolute symlinks in the packages (lib.so -> /lib/...) point into the sysroot instead.
  find "$sysroot" -type l -lname '/*' | while read -r link; do
    ln -sfn "$sysroot$(readlink "$link")" "$link"
  done
  echo "$wanted" > "$stamp"
  echo "setup_cross: sysroot for $arch in ${sysroot#$root/} ($(du -sh "$sysroot" | cut -f1))" >&2
fi
echo "$sysroot"
