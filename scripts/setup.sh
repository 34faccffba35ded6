#!/usr/bin/env bash
# Installs what cgpkit needs to build and test, from Debian 12 packages. Idempotent: packages
# already present are not touched and apt is not called at all when nothing is missing.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config       # toolchain
  libboost-dev                           # Boost.Geometry (polygons, projections), Boost.Math, Beast (/metrics, the console)
  libnanoflann-dev                       # k-d trees for exact kNN
  libprotobuf-dev protobuf-compiler      # cgp.v1 wire protocol
  libeigen3-dev                          # dense linear algebra
  librandom123-dev                       # ARS reference for the fast-noise tests
  libhwy-dev                             # simulations' fast noise: vectorized ARS (AES) and Box–Muller
  openmpi-bin libopenmpi-dev             # cgp-sim across processes and machines (mpirun)
  libsodium-dev                          # CSPRNG and hashing on the device
  libsqlite3-dev                         # the device ledger
  catch2                                 # tests (Catch2 v2)
  libcli11-dev nlohmann-json3-dev libfmt-dev gnuplot-nox   # cgp-sim: CLI, JSON, tables, plots
  libfast-float-dev                      # cgp-sim: data files' numbers (fast_float::from_chars)
  libgrpc++-dev protobuf-compiler-grpc   # transport between coordinator and devices
  libcpp-httplib-dev                     # the console's tests: an HTTP(S) client
  prometheus-cpp-dev                     # the coordinator's metrics (served with Boost.Beast)
  openssl libssl-dev                     # TLS material checked at start; tests make certificates
  systemd                                # tests: systemd-analyze verify deploy/*.service
  libbenchmark-dev zlib1g-dev            # benchmarks (Google Benchmark; gzip IDX files)
  clang libclang-rt-14-dev llvm          # scripts/fuzz.sh: libFuzzer, sanitizers, symbolizer
  clang-format                           # scripts/format_check.sh (CI)
  ccache                                 # .ci/run: the client-only leg reuses the release leg's objects
  pybind11-dev python3-dev python3-numpy python3-pandas   # the cgpkit Python package
  python3-grpcio python3-protobuf        # tests/conformance: the reference device of docs/protocol.md
  openjdk-17-jdk-headless libprotobuf-java   # the Java (JNI) binding of the device C ABI and its test
  postgresql-15 libpq-dev                # the live tier's durable state (cluster/); tests run their own server
  haproxy                                # the live tier's device router (TLS SNI -> gateway)
  chromium chromium-driver python3-selenium   # the console's browser tests (headless)
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${missing[*]}" >&2
for attempt in 1 2 3; do
  if $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
    exit 0
  fi
  echo "setup: apt-get failed (attempt $attempt of 3), retrying" >&2
  sleep $((attempt * 10))
done
echo "setup: could not install ${missing[*]}" >&2
exit 1
