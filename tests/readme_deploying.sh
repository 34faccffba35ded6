#!/usr/bin/env bash
# Runs the README's "Deploying" block as written, in a scratch directory, with the build's
# programs on PATH; fails if any command in it fails. Usage: readme_deploying.sh README BUILD_DIR
set -euo pipefail
readme="$1"
build="$(cd "$2" && pwd)"
# The second ```sh block after "## Deploying" (the first sets PATH).
block="$(awk '/^## Deploying/ { on = 1 } on && /^```sh/ { n++; if (n == 2) { grab = 1; next } }
              grab && /^```/ { exit } grab { print }' "$readme")"
[ -n "$block" ] || { echo "no Deploying block in $readme" >&2; exit 1; }
work="$(mktemp -d)"
# The block runs in its own session: whatever it leaves running (it starts servers in the
# background) is stopped at exit, also when a command in it fails.
cleanup() {
  [ -f "$work/session" ] && pkill -s "$(cat "$work/session")" 2>/dev/null || true
  rm -rf "$work"
}
# A port nobody listens on (bash only: a minimal Debian has no python3): a connect that is
# refused means it is free.
free_port() {
  local candidate
  for _ in $(seq 1 200); do
    candidate=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}
trap cleanup EXIT
cd "$work"
export PATH="$build/bin:$PATH"
# A free port instead of the README's 7443, so that parallel test runs do not collide.
port=$(free_port)
block="${block//7443/$port}"
printf '%s\n' "$block" > deploying.sh
setsid -w bash -c 'echo $$ > session; exec bash -euo pipefail deploying.sh' > out.txt 2> err.txt || {
  echo "the Deploying block failed:" >&2; cat out.txt err.txt >&2
  for log in coordinator.log swarm.log; do [ -f "$log" ] && tail -5 "$log" >&2; done
  exit 1
}
cat out.txt
# The queries answered: a range estimate, five neighbours, no device unanswered in the first.
grep -q '"estimate"' out.txt
grep -q '"sim-\|"phone-1"' out.txt
grep -q '"connected": 501' out.txt
