#!/usr/bin/env bash
# A whole live tier on this machine (docs/cluster.md), for a newcomer:
#   scripts/cluster.sh up      PostgreSQL (initdb into a scratch folder, run as the `postgres`
#                              user: PostgreSQL refuses root), TLS certificates for
#                              *.devices.<domain>, HAProxy with a generated configuration and
#                              shard map, a coordinator and its standby, N gateways (each kept
#                              running as systemd would: started again when it ends), and a swarm
#                              of simulated devices that dial their shard's name through HAProxy
#   scripts/cluster.sh query   a range query through the leader (cgp-analyst, JSON)
#   scripts/cluster.sh status  the cluster as PostgreSQL holds it (cgp-cluster status)
#   scripts/cluster.sh down    everything stopped, the scratch folder removed
#   scripts/cluster.sh demo    up, wait for every device, query, down (the default)
# Settings (environment): CGP_CLUSTER_DIR (/tmp/cgp-cluster), GATEWAYS (3), DEVICES (1000),
# SHARDS (4096), DOMAIN (devices.cgp.test), BASE_PORT (27100), BUILD (build: the programs are
# built there if missing), SWARM (1; 0: devices enrolled, no swarm started: bench/cluster_load.sh
# starts its own). Logs: $CGP_CLUSTER_DIR/logs/.
set -euo pipefail
ulimit -n "$(ulimit -Hn)"  # a descriptor per device connection, twice through HAProxy
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${CGP_CLUSTER_DIR:-/tmp/cgp-cluster}"
gateways="${GATEWAYS:-3}"
devices="${DEVICES:-1000}"
shards="${SHARDS:-4096}"
domain="${DOMAIN:-devices.cgp.test}"
base="${BASE_PORT:-27100}"
build="${BUILD:-$root/build}"
bin="$build/bin"
pgbin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
conninfo="host=$dir/pg port=5432 user=postgres dbname=postgres connect_timeout=5"
template="s{shard}.$domain:443"
haproxy_frames=$((base + 1)) haproxy_grpc=$((base + 2))
control=($((base + 3)) $((base + 4))) analyst=($((base + 5)) $((base + 6)))

say() { echo "cluster.sh: $*"; }
die() { echo "cluster.sh: $*" >&2; exit 1; }

as_postgres() {  # PostgreSQL refuses to run as root
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

ensure_built() {
  local program
  for program in cgp-coordinator cgp-gateway cgp-cluster cgp-device-swarm cgp-analyst; do
    if [ ! -x "$bin/$program" ]; then
      say "building the programs in $build"
      "$root/scripts/setup.sh"
      cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
      cmake --build "$build" --target cgp-coordinator cgp-gateway cgp-cluster cgp-device-swarm \
        cgp-analyst
      return
    fi
  done
  command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || die "haproxy is missing: run scripts/setup.sh"
  [ -n "$pgbin" ] || die "PostgreSQL is missing: run scripts/setup.sh"
}

# NAME COMMAND...: run COMMAND again a second after each end until `down` (crash-only processes
# end on purpose: a lost lease, a new leader, moved shards).
supervise() {
  local name="$1"
  shift
  (
    trap 'kill "$child" 2>/dev/null; exit 0' TERM
    while [ ! -e "$dir/stopping" ]; do
      "$@" >>"$dir/logs/$name.log" 2>&1 &
      child=$!
      wait "$child" || true
      sleep 1
    done
  ) &
  echo $! >"$dir/pids/$name"
}

leader_port() {  # the analyst port of whichever coordinator leads (a standby does not listen)
  local port
  for port in "${analyst[@]}"; do
    if "$bin/cgp-analyst" --coordinator "127.0.0.1:$port" --credential "$dir/analyst.key" \
      status >/dev/null 2>&1; then
      echo "$port"
      return 0
    fi
  done
  return 1
}

up() {
  ensure_built
  [ ! -e "$dir/pids" ] || die "a cluster is already up in $dir (scripts/cluster.sh down)"
  rm -rf "$dir"
  mkdir -p "$dir/pg" "$dir/logs" "$dir/pids"
  [ "$(id -u)" != 0 ] || chown postgres: "$dir/pg"
  say "PostgreSQL in $dir/pg"
  as_postgres "$pgbin/initdb" -D "$dir/pg/data" --auth=trust --username=postgres --no-sync \
    -E UTF8 >"$dir/logs/initdb.log"
  as_postgres "$pgbin/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/server.log" -w -t 60 \
    -o "-c listen_addresses='' -k $dir/pg" start >/dev/null

  say "TLS certificate for *.$domain"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=$domain" \
    -addext "subjectAltName=DNS:*.$domain" -keyout "$dir/key.pem" -out "$dir/cert.pem" \
    >/dev/null 2>&1
  chmod 600 "$dir/key.pem"

  say "the fleet: $shards virtual shards, $devices devices, $gateways gateways"
  "$bin/cgp-cluster" init --cluster "$conninfo" --shards "$shards" --budget 1 >/dev/null
  "$bin/cgp-cluster" enrol --cluster "$conninfo" --count "$devices" --secrets-out \
    "$dir/devices.csv" >/dev/null
  "$bin/cgp-coordinator" credential --out "$dir/analyst.key"
  local g proxied=()
  for ((g = 0; g < gateways; g++)); do
    "$bin/cgp-cluster" add-gateway --cluster "$conninfo" --id "gw-$g" --credential-out \
      "$dir/gw-$g.key" >/dev/null
    proxied+=(--gateway "gw-$g=127.0.0.1:$((base + 20 + 2 * g)),127.0.0.1:$((base + 21 + 2 * g))")
  done

  say "HAProxy: devices on $haproxy_frames (frames) and $haproxy_grpc (gRPC)"
  : >"$dir/shards.map"
  "$bin/cgp-cluster" haproxy-config "${proxied[@]}" --frames-listen "127.0.0.1:$haproxy_frames" \
    --grpc-listen "127.0.0.1:$haproxy_grpc" --admin-socket "$dir/haproxy.sock" \
    --map "$dir/shards.map" --address-template "$template" --out "$dir/haproxy.cfg" \
    --max-connections "$(( ($(ulimit -Hn) - 64) / 2 ))"  # HAProxy needs two descriptors each
  local haproxy_program
  haproxy_program="$(command -v haproxy || echo /usr/sbin/haproxy)"
  supervise haproxy "$haproxy_program" -f "$dir/haproxy.cfg" -db -q

  say "a coordinator and its standby (analyst ports ${analyst[*]})"
  local c
  for c in 0 1; do
    supervise "coordinator-$c" "$bin/cgp-coordinator" cluster --cluster "$conninfo" \
      --analyst-credential "$dir/analyst.key" --control-listen "127.0.0.1:${control[$c]}" \
      --analyst-listen "127.0.0.1:${analyst[$c]}" --min-gateways "$gateways" \
      --haproxy-socket "$dir/haproxy.sock" --haproxy-map "$dir/shards.map" \
      --address-template "$template"
    [ "$c" = 1 ] || sleep 1  # the first leads
  done

  say "$gateways gateways"
  for ((g = 0; g < gateways; g++)); do
    supervise "gw-$g" "$bin/cgp-gateway" --cluster "$conninfo" --id "gw-$g" \
      --credential "$dir/gw-$g.key" --listen "127.0.0.1:$((base + 20 + 2 * g))" \
      --device-frames-listen "127.0.0.1:$((base + 21 + 2 * g))" --tls-cert "$dir/cert.pem" \
      --tls-key "$dir/key.pem" --lease-ttl-ms 4000
  done

  if [ "${SWARM:-1}" = 1 ]; then
    say "$devices devices, dialling s<shard>.$domain through HAProxy"
    supervise swarm "$bin/cgp-device-swarm" --coordinator "127.0.0.1:$haproxy_frames" \
      --transport frames --tls-root "$dir/cert.pem" --address-template "$template" \
      --virtual-shards "$shards" --count "$devices" --secrets "$dir/devices.csv" --budget 1
  fi

  local tries
  for ((tries = 0; tries < 120; tries++)); do
    if leader_port >/dev/null; then
      say "up: the leader's Analyst API is on 127.0.0.1:$(leader_port) (credential $dir/analyst.key)"
      return 0
    fi
    sleep 0.5
  done
  die "no coordinator leads after 60 s: see $dir/logs"
}

query() {  # a range query through the leader (arguments: cgp-analyst range's, or a default)
  local port
  port="$(leader_port)" || die "no coordinator leads: is the cluster up?"
  [ "$#" -gt 0 ] || set -- --box 2000,2000,12000,12000 --rho 1e-3 --method PM1 --c 16
  "$bin/cgp-analyst" --coordinator "127.0.0.1:$port" --credential "$dir/analyst.key" range "$@"
}

wait_for_devices() {  # until a query reaches every device (each try charges a small rho)
  local tries answered=0
  for ((tries = 0; tries < 240; tries++)); do
    answered="$(query --box 2000,2000,12000,12000 --rho 1e-5 --method BM0 2>/dev/null \
      | sed -n 's/.*"answered": *\([0-9]*\).*/\1/p' | head -1 || true)"
    if [ "${answered:-0}" = "$devices" ]; then
      say "every device answers ($devices)"
      return 0
    fi
    sleep 0.5
  done
  die "only ${answered:-0} of $devices devices answered: see $dir/logs"
}

down() {
  [ -d "$dir" ] || return 0
  touch "$dir/stopping"
  local pidfile
  for pidfile in "$dir"/pids/*; do
    [ -e "$pidfile" ] || continue
    kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  for pidfile in "$dir"/pids/*; do
    [ -e "$pidfile" ] || continue
    while kill -0 "$(cat "$pidfile")" 2>/dev/null; do sleep 0.1; done
  done
  if [ -n "$pgbin" ] && [ -d "$dir/pg/data" ]; then
    as_postgres "$pgbin/pg_ctl" -D "$dir/pg/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
  say "down"
}

case "${1:-demo}" in
  up) up ;;
  query) shift; query "$@" ;;
  status) "$bin/cgp-cluster" status --cluster "$conninfo" ;;
  down) down ;;
  demo)
    trap down EXIT
    up
    wait_for_devices
    result="$(query)"
    echo "$result"
    grep -q "\"answered\": $devices," <<<"$result" || die "the query did not reach every device"
    ;;
  *) die "usage: scripts/cluster.sh [up|query|status|down|demo]" ;;
esac
