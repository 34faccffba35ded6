#!/usr/bin/env bash
# Network load benchmark (not part of ctest): DEVICES devices in SWARMS cgp-device-swarm processes
# dial one cgp-coordinator over loopback; QUERIES PM1 range queries with c = 64 go through
# cgp-analyst. Reports rounds/s, device replies/s, coordinator memory per connected device and
# p50/p99 round latency, from the coordinator's own event log.
#   bench/network_load.sh BUILD_DIR [DEVICES=10000] [SWARMS=2] [QUERIES=5]
# Knobs (environment): PER_CONNECTION devices per TCP connection (500; 1 is what phones do),
# TLS=1 (a throwaway self-signed certificate), STAGGER=1 (each swarm starts once the previous
# one is connected: no connection storm), COORDINATOR_QUEUES, SWARM_QUEUES, PROFILE=/tmp/p,
# STORM=1 (after the queries the coordinator is restarted — SIGTERM, then the same command —
# and every device comes back when its Goodbye said: time until 99% and all are back, peak CPU),
# FRAMES=1 (devices on the lean transport, TLS 1.3 frames on the coordinator's
# --device-frames-listen port, one connection each; implies TLS=1), RECONNECT_RATE (devices/s
# a stop spreads the reconnects over, the coordinator's --reconnect-rate, default 1000).
set -euo pipefail
build="$(cd "$1" && pwd)"
devices="${2:-10000}"
swarms="${3:-2}"
queries="${4:-5}"
port=$((20000 + RANDOM % 20000))
address="127.0.0.1:$port"
frames_address="127.0.0.1:$((port + 1))"
[ "${FRAMES:-0}" = 1 ] && TLS=1
# shellcheck source=bench/bench_env.sh
source "$(dirname "$0")/bench_env.sh"

"$build/bin/cgp-coordinator" credential --out analyst.key
"$build/bin/cgp-coordinator" enrol --devices devices.csv --count "$devices" \
  --secrets-out secrets.csv
# Every swarm dials from 127.0.0.1: the per-address cap (a guard against hostile peers) is
# raised to the whole fleet (bench_env.sh raised the descriptor limit).
tls_serve=(); tls_dial=()
if [ "${TLS:-0}" = 1 ]; then
  make_certificate
  tls_serve=(--tls-cert cert.pem --tls-key key.pem); tls_dial=(--tls-root cert.pem)
fi
frames_serve=(); device_address="$address"; device_transport=()
if [ "${FRAMES:-0}" = 1 ]; then
  frames_serve=(--device-frames-listen "$frames_address")
  device_address="$frames_address"; device_transport=(--transport frames)
fi
start_coordinator() {  # LOG: serves in the background, its pid in $coordinator
  "$build/bin/cgp-coordinator" serve --listen "$address" --devices devices.csv \
    --analyst-credential analyst.key --budget 0.003 --deadline-ms 10000 \
    --queues "${COORDINATOR_QUEUES:-8}" --max-connections-per-address "$((devices + 64))" \
    --reconnect-rate "${RECONNECT_RATE:-1000}" "${tls_serve[@]}" "${frames_serve[@]}" 2> "$1" &
  coordinator=$!
  pids+=("$coordinator")
}
start_coordinator coordinator.log
sleep 0.5
idle_rss=$(rss_kb "$coordinator")

per=$(( (devices + swarms - 1) / swarms ))
connect_start=$(date +%s.%N)
for ((s = 0; s < swarms; s++)); do
  offset=$((s * per)); count=$(( devices - offset < per ? devices - offset : per ))
  "$build/bin/cgp-device-swarm" --coordinator "$device_address" "${device_transport[@]}" --offset "$offset" \
    --count "$count" --secrets secrets.csv --budget 0.003 --queues "${SWARM_QUEUES:-4}" --streams-per-connection "${PER_CONNECTION:-500}" \
    "${tls_dial[@]}" 2> "swarm-$s.log" &
  pids+=("$!")
  if [ "${STAGGER:-0}" = 1 ]; then
    for _ in $(seq 1 1200); do
      [ "$(grep -c ' event=connect ' coordinator.log || true)" -ge $((offset + count)) ] && break
      sleep 0.1
    done
  fi
done
connected=0
for _ in $(seq 1 1200); do
  connected=$(grep -c ' event=connect ' coordinator.log || true)
  [ "$connected" -ge "$devices" ] && break
  sleep 0.1
done
echo "connected: $connected of $devices devices in $(awk -v a="$(date +%s.%N)" -v b="$connect_start" 'BEGIN { printf "%.1f", a - b }') s"
connected_rss=$(rss_kb "$coordinator")

[ -n "${PROFILE:-}" ] && { perf record -F 999 -g -o "$PROFILE.coordinator" -p "$coordinator" -- sleep 8 > /dev/null 2>&1 & perf record -F 999 -g -o "$PROFILE.swarm" -p "${pids[1]}" -- sleep 8 > /dev/null 2>&1 & }
swarm_cpu() {
  for pid in "${pids[@]:1}"; do cpu_seconds "$pid"; echo; done | awk '{ t += $1 } END { printf "%.2f", t }'
}
coordinator_cpu0=$(cpu_seconds "$coordinator"); swarm_cpu0=$(swarm_cpu)
start=$(date +%s.%N)
for ((q = 0; q < queries; q++)); do
  # rho 1e-6 over 64 rounds: each round asks 1.56e-8, at least what a device of budget 0.003
  # answers (0.003·2^-18 = 1.14e-8; the coordinator refuses a query whose rounds every device
  # would reject), and small enough that most users stay in for many rounds.
  "$build/bin/cgp-analyst" --coordinator "$address" --credential analyst.key "${tls_dial[@]}" \
    range --box 2000,2000,12000,12000 --rho 1e-6 --method PM1 --c 64 --id "load-$q" > /dev/null
done
end=$(date +%s.%N)
coordinator_cpu=$(awk -v a="$(cpu_seconds "$coordinator")" -v b="$coordinator_cpu0" 'BEGIN { print a - b }')
peak_rss=$(awk '/VmHWM/ {print $2}' "/proc/$coordinator/status")
swarm_cpu=$(awk -v a="$(swarm_cpu)" -v b="$swarm_cpu0" 'BEGIN { print a - b }')
python3 - "$start" "$end" "$idle_rss" "$connected_rss" "$devices" coordinator.log \
  "$coordinator_cpu" "$swarm_cpu" "$peak_rss" <<'PY'
import re, sys
start, end, idle, connected, devices, log, coordinator_cpu, swarm_cpu, peak = sys.argv[1:]
seconds = float(end) - float(start)
latency, replies = [], 0
pattern = re.compile(r"event=round query=load-\d+ round=\d+ asked=\d+ sent=\d+ replies=(\d+) "
                     r"unanswered=\d+ .*\bsend_ms=([\d.]+) wait_ms=([\d.]+) ms=([\d.]+)")
send, wait = [], []
for line in open(log):
    m = pattern.search(line)
    if m:
        replies += int(m.group(1))
        send.append(float(m.group(2)))
        wait.append(float(m.group(3)))
        latency.append(float(m.group(4)))
# A benchmark of a fleet that did not answer measures nothing: every query must have every
# device answered (none rejected, refused or silent), or the run fails loudly.
failed = []
query = re.compile(r"event=query id=(load-\d+) .*\bunanswered=(\d+) answered=(\d+)/(\d+)")
queries_seen = 0
for line in open(log):
    m = query.search(line)
    if m:
        queries_seen += 1
        if int(m.group(2)) != 0 or m.group(3) != m.group(4):
            failed.append(line.strip())
    elif re.search(r"event=(reply-rejected|reply-refused|reply-unusable) ", line):
        failed.append(line.strip())
if failed or queries_seen == 0 or not latency:
    print("network_load: FAILED: not every device answered every query "
          f"({queries_seen} queries logged); the coordinator said:", file=sys.stderr)
    for line in failed[:20]:
        print("  " + line, file=sys.stderr)
    sys.exit(1)
latency.sort(); send.sort(); wait.sort()
pct = lambda p: latency[min(len(latency) - 1, int(p * len(latency)))]
per_device = (int(connected) - int(idle)) / int(devices)
print(f"wall time              {seconds:.2f} s")
print(f"rounds                 {len(latency)} ({len(latency) / seconds:.1f} rounds/s)")
print(f"device replies         {replies} ({replies / seconds:,.0f} replies/s)")
print(f"round latency          p50 {pct(0.5):.1f} ms, p99 {pct(0.99):.1f} ms "
      f"(p50 pushing the requests {send[len(send) // 2]:.1f} ms, "
      f"then waiting for replies {wait[len(wait) // 2]:.1f} ms)")
print(f"CPU during the queries coordinator {float(coordinator_cpu):.1f} s "
      f"({1e6 * float(coordinator_cpu) / replies:.1f} µs per reply), swarms {float(swarm_cpu):.1f} s "
      f"({1e6 * float(swarm_cpu) / replies:.1f} µs per reply)")
print(f"coordinator RSS        idle {int(idle) / 1024:.1f} MiB, with devices "
      f"{int(connected) / 1024:.1f} MiB: {per_device:.1f} KiB per connected device; "
      f"peak during the queries {int(peak) / 1024:.1f} MiB: "
      f"{(int(peak) - int(idle)) / int(devices):.1f} KiB per device")
PY

if [ "${STORM:-0}" = 1 ]; then
  # Every device dropped at once: the coordinator restarts as an operator would restart it, and
  # the fleet redials with its own backoff. CPU is sampled every 0.2 s (% of one core).
  kill -TERM "$coordinator"; wait "$coordinator" 2>/dev/null || true
  storm_start=$(date +%s.%N)
  start_coordinator coordinator-restarted.log
  cpu_prev=0; peak_cpu=0; back_99=""; back=0
  for _ in $(seq 1 1500); do
    sleep 0.2
    cpu_now=$(cpu_seconds "$coordinator")
    peak_cpu=$(awk -v a="$cpu_now" -v b="$cpu_prev" -v p="$peak_cpu" \
      'BEGIN { c = (a - b) / 0.2 * 100; printf "%.0f", (c > p ? c : p) }')
    cpu_prev=$cpu_now
    back=$(grep -c ' event=connect ' coordinator-restarted.log || true)
    elapsed=$(awk -v a="$(date +%s.%N)" -v b="$storm_start" 'BEGIN { printf "%.1f", a - b }')
    [ -z "$back_99" ] && [ "$back" -ge $(( (devices * 99 + 99) / 100 )) ] && back_99=$elapsed
    [ "$back" -ge "$devices" ] && break
  done
  refused=$(grep -c ' event=refused ' coordinator-restarted.log || true)
  # Why, if any: a storm should refuse no valid device.
  grep -o ' event=refused reason=[a-z-]*' coordinator-restarted.log | sort | uniq -c | sed 's/^/  /' || true
  echo "reconnect storm        99% of $devices devices back in ${back_99:-(not reached)} s, $back in $elapsed s; peak coordinator CPU ${peak_cpu}% of one core; $refused refusals logged"
  [ "$back" -ge "$devices" ] || { echo "network_load: FAILED: only $back of $devices devices came back" >&2; exit 1; }
fi
