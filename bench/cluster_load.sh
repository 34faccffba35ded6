#!/usr/bin/env bash
# The live tier under load (not part of ctest; scripts/bench.sh cluster): scripts/cluster.sh
# brings up PostgreSQL, a coordinator and its standby and GATEWAYS gateways; DEVICES simulated
# devices (one TLS frames connection each) dial their shard's name through HAProxy — through
# more HAProxy processes when there are more than 7,500, since HAProxy holds two descriptors per
# device and a process here may hold 20,000. QUERIES PM1 range queries with c = 64 then run
# through the leader. Reports replies/s, CPU per reply on the gateways (and HAProxy),
# coordinator CPU per round, and PostgreSQL's WAL bytes per query (what it wrote durably).
#   bench/cluster_load.sh BUILD_DIR [DEVICES=20000] [GATEWAYS=4] [QUERIES=3]
set -euo pipefail
build="$(cd "$1" && pwd)"
devices="${2:-20000}"
gateways="${3:-4}"
queries="${4:-3}"
root="$(cd "$(dirname "$0")/.." && pwd)"
ulimit -n "$(ulimit -Hn)"
export CGP_CLUSTER_DIR="${CGP_CLUSTER_DIR:-/tmp/cgp-cluster-bench}"
export BUILD="$build" DEVICES="$devices" GATEWAYS="$gateways" SHARDS=4096 SWARM=0
export BASE_PORT="${BASE_PORT:-27300}"
dir="$CGP_CLUSTER_DIR"
cluster="$root/scripts/cluster.sh"
swarms=()
cleanup() {
  for pid in "${swarms[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$cluster" down >/dev/null 2>&1 || true
}
trap cleanup EXIT
"$cluster" down >/dev/null 2>&1 || true
"$cluster" up
pgbin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
psql() { "$pgbin/psql" -X -A -t -h "$dir/pg" -U postgres -d postgres -c "$1"; }

# Devices in halves of at most 9,000 per HAProxy: a second HAProxy with the same shard map.
per_proxy=7500  # a multiple of the swarms' 2,500, under the 9,968 a HAProxy may hold here
proxies=$(( (devices + per_proxy - 1) / per_proxy ))
template="s{shard}.devices.cgp.test:443"
ports=("$((BASE_PORT + 1))")
for ((p = 1; p < proxies; p++)); do
  port=$((BASE_PORT + 100 + p))
  ports+=("$port")
  gateway_flags=()
  for ((g = 0; g < gateways; g++)); do
    gateway_flags+=(--gateway "gw-$g=,127.0.0.1:$((BASE_PORT + 21 + 2 * g))")
  done
  "$build/bin/cgp-cluster" haproxy-config "${gateway_flags[@]}" --frames-listen "127.0.0.1:$port" \
    --admin-socket "$dir/haproxy-$p.sock" --map "$dir/shards.map" --address-template "$template" \
    --out "$dir/haproxy-$p.cfg" --max-connections 9500
done
# The map is complete once the leader gave every shard out.
for ((tries = 0; tries < 600; tries++)); do
  [ "$(wc -l < "$dir/shards.map")" -ge 4096 ] && break
  sleep 0.1
done
for ((p = 1; p < proxies; p++)); do
  "$(command -v haproxy || echo /usr/sbin/haproxy)" -f "$dir/haproxy-$p.cfg" -db -q &
  swarms+=($!)
done
answering() {  # how many devices a small query reaches now (the leader's announced Analyst API)
  "$build/bin/cgp-analyst" --coordinator "$(psql 'SELECT leader_analyst FROM cgp_fleet')" \
    --credential "$dir/analyst.key" --min-coverage 0 --max-missing-share 1 range \
    --box 0,0,20000,20000 --rho 1e-5 --method BM0 2>/dev/null \
    | sed -n 's/.*"answered": *\([0-9]*\).*/\1/p' | head -1 || true
}
# Swarms of at most 2,500 devices, each started once the devices before it answer: a storm of
# 20,000 TLS handshakes at once on 2 cores outlasts the Hello timeouts and never settles.
start=$(date +%s.%N)
chunk=2500
for ((offset = 0, s = 0; offset < devices; offset += chunk, s++)); do
  count=$((devices - offset < chunk ? devices - offset : chunk))
  proxy=$((offset / per_proxy))
  "$build/bin/cgp-device-swarm" --coordinator "127.0.0.1:${ports[$proxy]}" --transport frames \
    --tls-root "$dir/cert.pem" --address-template "$template" --virtual-shards 4096 \
    --count "$count" --offset "$offset" --secrets "$dir/devices.csv" --budget 1 \
    > "$dir/logs/bench-swarm-$s.log" 2>&1 &
  swarms+=($!)
  for ((tries = 0; tries < 300; tries++)); do
    answered="$(answering)"
    [ "${answered:-0}" -ge $((offset + count)) ] && break
    sleep 1
  done
done
[ "${answered:-0}" = "$devices" ] || { echo "only ${answered:-0} of $devices answer" >&2; exit 1; }
echo "all $devices devices answer, $(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { printf "%.0f", a - b }') s after the first swarm started"

cpu_of() {  # user + system CPU seconds of every process whose command line matches $1
  local total=0 pid
  for pid in $(pgrep -f -- "$1"); do
    total=$(awk -v t="$total" -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", t + ($14 + $15) / hz }' "/proc/$pid/stat")
  done
  echo "$total"
}
snapshot() {
  echo "$(cpu_of 'cgp-gateway --cluster') $(cpu_of 'cgp-coordinator cluster') $(cpu_of 'haproxy -f') $(psql 'SELECT wal_bytes FROM pg_stat_wal')"
}
read -r gw0 co0 hp0 wal0 <<<"$(snapshot)"
results=()
for ((q = 0; q < queries; q++)); do
  results+=("$("$cluster" query --box 2000,2000,12000,12000 --rho 1e-3 --method PM1 --c 64 \
    --id "bench-$q-$RANDOM")")
done
read -r gw1 co1 hp1 wal1 <<<"$(snapshot)"
gateway_rss=0  # KiB, every gateway, at the end of the queries
for pid in $(pgrep -f -- 'cgp-gateway --cluster'); do
  gateway_rss=$((gateway_rss + $(awk '/VmRSS/ {print $2}' "/proc/$pid/status")))
done
python3 - "$devices" "$gateways" "$queries" "$gw0" "$gw1" "$co0" "$co1" "$hp0" "$hp1" "$wal0" "$wal1" "$gateway_rss" "${results[@]}" <<'PY'
import json, sys
devices, gateways, queries = map(int, sys.argv[1:4])
gw0, gw1, co0, co1, hp0, hp1, wal0, wal1, rss = map(float, sys.argv[4:13])
results = [json.loads(text) for text in sys.argv[13:]]
rounds = sum(r["rounds_used"] for r in results)
replies = sum(sum(r["asked_per_round"]) for r in results)
seconds = sum(r["seconds"] for r in results)
print(f"{devices} devices, {gateways} gateways, {queries} PM1 queries (c = 64): {rounds} rounds, "
      f"{replies} replies in {seconds:.2f} s")
print(f"  replies/s                     {replies / seconds:,.0f}")
print(f"  gateway CPU per reply         {1e6 * (gw1 - gw0) / replies:.1f} µs (all gateways)")
print(f"  HAProxy CPU per reply         {1e6 * (hp1 - hp0) / replies:.1f} µs")
print(f"  coordinator CPU per round     {1e3 * (co1 - co0) / rounds:.2f} ms")
print(f"  PostgreSQL WAL per query      {(wal1 - wal0) / queries / 1024:.1f} KiB")
print(f"  gateway memory per device     {rss / devices:.1f} KiB (RSS of every gateway)")
print(f"  replies per device and query  {replies / devices / queries:.2f}")
PY
