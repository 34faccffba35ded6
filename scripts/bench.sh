#!/usr/bin/env bash
# Builds an optimised tree and runs the benchmarks:
#   scripts/bench.sh             device benchmarks (Google Benchmark) and library sizes
#   scripts/bench.sh coordinator the coordinator scenarios, one process each (peak memory)
#   scripts/bench.sh network     10,000 devices over loopback (bench/network_load.sh)
#   scripts/bench.sh network-tls devices with a TLS connection each, as phones connect: first on
#                                the lean transport (TLS frames), then on gRPC with TLS, each
#                                with a reconnect storm, then the floor (bench/tls_floor.sh,
#                                as many connections as frames devices) (optional:
#                                frames_devices=17000 grpc_devices=3000 queries=2)
#   scripts/bench.sh timing      device timing by |noise| bucket and by inside/outside, unpaced
#                                and paced (bench/bench_timing.cpp; optional: samples requests seed)
#   scripts/bench.sh sim         the simulation suite against a numpy baseline (bench/sim_suite.sh)
#   scripts/bench.sh scale       cgp-sim on 10^8 users: one process, 1 and 2 MPI ranks
#                                (bench/scale_out.sh; optional: users reps)
#   scripts/bench.sh cluster     the live tier (scripts/cluster.sh: PostgreSQL, HAProxy, a
#                                coordinator and its standby, 4 gateways) with 5,000 then 20,000
#                                devices, one TLS connection each (bench/cluster_load.sh;
#                                optional: gateways queries)
# The coordinator's kNN scenario needs Debian's dataset-fashion-mnist (installed here);
# locations come from ../shared/data/nyc_collisions when present, else the synthetic city.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
cmake -S "$root" -B "$root/build-release" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
if [ "${1:-}" = "network" ]; then
  cmake --build "$root/build-release" --target cgp-coordinator cgp-device-swarm cgp-analyst
  exec "$root/bench/network_load.sh" "$root/build-release" "${2:-10000}" "${3:-2}" "${4:-5}"
fi
if [ "${1:-}" = "network-tls" ]; then  # as phones connect: one TLS connection each
  cmake --build "$root/build-release" --target cgp-coordinator cgp-device-swarm cgp-analyst
  echo "== the lean device transport (TLS 1.3 frames), one connection per device"
  FRAMES=1 STAGGER=1 STORM=1 "$root/bench/network_load.sh" "$root/build-release" \
    "${2:-17000}" 2 "${4:-2}"
  echo "== gRPC with TLS (the device port), one connection per device"
  TLS=1 PER_CONNECTION=1 STAGGER=1 STORM=1 "$root/bench/network_load.sh" \
    "$root/build-release" "${3:-3000}" 2 "${4:-2}"
  echo "== the floor: TLS 1.3 echo frames on epoll, no protocol, no device work"
  cmake --build "$root/build-release" --target cgp_bench_tls_floor
  exec "$root/bench/tls_floor.sh" "$root/build-release" "${2:-17000}" 20
fi
if [ "${1:-}" = "cluster" ]; then
  cmake --build "$root/build-release" --target cgp-coordinator cgp-gateway cgp-cluster \
    cgp-device-swarm cgp-analyst
  for devices in 5000 20000; do
    "$root/bench/cluster_load.sh" "$root/build-release" "$devices" "${2:-4}" "${3:-3}"
  done
  exit 0
fi
if [ "${1:-}" = "sim" ]; then
  if ! dpkg-query -W -f='${Status}' python3-numpy 2>/dev/null | grep -q "ok installed"; then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-numpy >/dev/null
  fi
  cmake --build "$root/build-release" --target cgp-sim cgp_bench_coordinator
  exec "$root/bench/sim_suite.sh" "$root/build-release" "${@:2}"
fi
if [ "${1:-}" = "scale" ]; then
  command -v /usr/bin/time >/dev/null || {
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq time >/dev/null
  }
  cmake --build "$root/build-release" --target cgp-sim
  exec "$root/bench/scale_out.sh" "$root/build-release" "${@:2}"
fi
if [ "${1:-}" = "timing" ]; then
  cmake --build "$root/build-release" --target cgp_bench_timing
  shift
  exec "$root/build-release/bench/cgp_bench_timing" "$@"
fi
if [ "${1:-}" = "coordinator" ]; then
  if ! dpkg-query -W -f='${Status}' dataset-fashion-mnist 2>/dev/null | grep -q "ok installed"; then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq dataset-fashion-mnist >/dev/null
  fi
  cmake --build "$root/build-release" --target cgp_bench_coordinator
  cd "$root"
  for scenario in kde range alg3 knn; do
    for method in BM0 BM1 PM0 PM1; do
      "$root/build-release/bench/cgp_bench_coordinator" "$scenario" "$method"
    done
  done
  exit 0
fi
cmake --build "$root/build-release" --target cgp_bench_client cgp_client
"$root/build-release/bench/cgp_bench_client" --benchmark_min_time=1 "$@"
for lib in client-sdk/libcgpkit_client.a common/libcgpkit_common.a; do
  strip --strip-unneeded -o /tmp/cgp-stripped.a "$root/build-release/$lib"
  echo "stripped $(basename "$lib"): $(stat -c %s /tmp/cgp-stripped.a) bytes"
done
rm -f /tmp/cgp-stripped.a
