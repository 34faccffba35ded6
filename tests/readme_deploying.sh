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
# shellcheck source=support/free_port.sh
source "$(dirname "${BASH_SOURCE[0]}")/support/free_port.sh"
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
