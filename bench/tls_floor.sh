#!/usr/bin/env bash
# Issue 29: the floor of one TLS connection per device without gRPC (bench/tls_floor.cpp),
# against which bench/network_load.sh's figures are read. Prints the server's RSS per idle
# connection and its CPU per reply (from /proc), and replies/s.
#   bench/tls_floor.sh BUILD_DIR [CONNECTIONS=6000] [ROUNDS=20]
set -euo pipefail
build="$(cd "$1" && pwd)"
connections="${2:-6000}"
rounds="${3:-20}"
# shellcheck source=bench/bench_env.sh
source "$(dirname "$0")/bench_env.sh"
make_certificate  # the same certificate as bench/network_load.sh's TLS=1
port=$((20000 + RANDOM % 20000))
"$build/bench/cgp_bench_tls_floor" serve "$port" cert.pem key.pem > server.out &
server=$!
pids+=("$server")
for _ in $(seq 1 100); do grep -q ready server.out && break; sleep 0.05; done
idle_rss=$(rss_kb "$server")
mkfifo go
"$build/bench/cgp_bench_tls_floor" dial "$port" "$connections" "$rounds" < go > dial.out &
pids+=("$!")
exec 3> go
for _ in $(seq 1 1200); do grep -q connected dial.out && break; sleep 0.1; done
grep -q connected dial.out || { echo "tls_floor: the connections did not come up" >&2; exit 1; }
sleep 1
connected_rss=$(rss_kb "$server")
cpu0=$(cpu_seconds "$server")
echo go >&3
wait "${pids[1]}"
cpu1=$(cpu_seconds "$server")
read -r _ _ _ replies _ seconds < <(grep '^rounds' dial.out)
awk -v i="$idle_rss" -v c="$connected_rss" -v n="$connections" -v a="$cpu0" -v b="$cpu1" \
    -v r="$replies" -v s="$seconds" 'BEGIN {
  printf "connections            %d, one TLS 1.3 connection each (OpenSSL on epoll, no gRPC)\n", n
  printf "server RSS             idle %.1f MiB, connected %.1f MiB: %.1f KiB per connection\n", i / 1024, c / 1024, (c - i) / n
  printf "replies                %d in %.2f s: %.0f replies/s\n", r, s, r / s
  printf "server CPU per reply   %.1f µs\n", 1e6 * (b - a) / r
}'
