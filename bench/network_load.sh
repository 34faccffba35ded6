#!/usr/bin/env bash
# Network load benchmark (not part of ctest): DEVICES devices in SWARMS cgp-device-swarm processes
# dial one cgp-coordinator over loopback; QUERIES PM1 range queries with c = 64 go through
# cgp-analyst. Reports rounds/s, device replies/s, coordinator memory per connected device and
# p50/p99 round latency, from the coordinator's own event log.
#   bench/network_load.sh BUILD_DIR [DEVICES=10000] [SWARMS=2] [QUERIES=5]
set -euo pipefail
build="$(cd "$1" && pwd)"
devices="${2:-10000}"
swarms="${3:-2}"
queries="${4:-5}"
work="$(mktemp -d)"
address="127.0.0.1:$((20000 + RANDOM % 20000))"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"

"$build/bin/cgp-coordinator" credential --out analyst.key
"$build/bin/cgp-coordinator" enrol --devices devices.csv --count "$devices" \
  --secrets-out secrets.csv
"$build/bin/cgp-coordinator" serve --listen "$address" --devices devices.csv \
  --analyst-credential analyst.key --budget 0.003 --deadline-ms 10000 --queues "${COORDINATOR_QUEUES:-8}" 2> coordinator.log &
coordinator=$!
pids+=("$coordinator")
sleep 0.5
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
idle_rss=$(rss_kb "$coordinator")

per=$(( (devices + swarms - 1) / swarms ))
for ((s = 0; s < swarms; s++)); do
  offset=$((s * per)); count=$(( devices - offset < per ? devices - offset : per ))
  "$build/bin/cgp-device-swarm" --coordinator "$address" --offset "$offset" \
    --count "$count" --secrets secrets.csv --budget 0.003 --queues "${SWARM_QUEUES:-4}" --streams-per-connection "${PER_CONNECTION:-500}" \
    2> "swarm-$s.log" &
  pids+=("$!")
done
connected=0
for _ in $(seq 1 1200); do
  connected=$(grep -c ' event=connect ' coordinator.log || true)
  [ "$connected" -ge "$devices" ] && break
  sleep 0.1
done
echo "connected: $connected of $devices devices"
connected_rss=$(rss_kb "$coordinator")

[ -n "${PROFILE:-}" ] && { perf record -F 999 -g -o "$PROFILE.coordinator" -p "$coordinator" -- sleep 8 > /dev/null 2>&1 & perf record -F 999 -g -o "$PROFILE.swarm" -p "${pids[1]}" -- sleep 8 > /dev/null 2>&1 & }
cpu_seconds() {  # user + system CPU seconds of a process
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"
}
swarm_cpu() {
  for pid in "${pids[@]:1}"; do cpu_seconds "$pid"; echo; done | awk '{ t += $1 } END { printf "%.2f", t }'
}
coordinator_cpu0=$(cpu_seconds "$coordinator"); swarm_cpu0=$(swarm_cpu)
start=$(date +%s.%N)
for ((q = 0; q < queries; q++)); do
  # rho 1e-6 over 64 rounds: each round asks 1.56e-8, at least what a device of budget 0.003
  # answers (0.003·2^-18 = 1.14e-8; the coordinator refuses a query whose rounds every device
  # would reject), and small enough that most users stay in for many rounds.
  "$build/bin/cgp-analyst" --coordinator "$address" --credential analyst.key \
    range --box 2000,2000,12000,12000 --rho 1e-6 --method PM1 --c 64 --id "load-$q" > /dev/null
done
end=$(date +%s.%N)
coordinator_cpu=$(awk -v a="$(cpu_seconds "$coordinator")" -v b="$coordinator_cpu0" 'BEGIN { print a - b }')
swarm_cpu=$(awk -v a="$(swarm_cpu)" -v b="$swarm_cpu0" 'BEGIN { print a - b }')
python3 - "$start" "$end" "$idle_rss" "$connected_rss" "$devices" coordinator.log \
  "$coordinator_cpu" "$swarm_cpu" <<'PY'
import re, sys
start, end, idle, connected, devices, log, coordinator_cpu, swarm_cpu = sys.argv[1:]
seconds = float(end) - float(start)
latency, replies = [], 0
pattern = re.compile(r"event=round query=load-\d+ round=\d+ asked=\d+ sent=\d+ replies=(\d+) "
                     r"unanswered=\d+ .*\bms=([\d.]+)")
for line in open(log):
    m = pattern.search(line)
    if m:
        replies += int(m.group(1))
        latency.append(float(m.group(2)))
latency.sort()
pct = lambda p: latency[min(len(latency) - 1, int(p * len(latency)))]
per_device = (int(connected) - int(idle)) / int(devices)
print(f"wall time              {seconds:.2f} s")
print(f"rounds                 {len(latency)} ({len(latency) / seconds:.1f} rounds/s)")
print(f"device replies         {replies} ({replies / seconds:,.0f} replies/s)")
print(f"round latency          p50 {pct(0.5):.1f} ms, p99 {pct(0.99):.1f} ms")
print(f"CPU during the queries coordinator {float(coordinator_cpu):.1f} s "
      f"({1e6 * float(coordinator_cpu) / replies:.1f} µs per reply), swarms {float(swarm_cpu):.1f} s "
      f"({1e6 * float(swarm_cpu) / replies:.1f} µs per reply)")
print(f"coordinator RSS        idle {int(idle) / 1024:.1f} MiB, with devices "
      f"{int(connected) / 1024:.1f} MiB: {per_device:.1f} KiB per connected device")
PY
