#!/usr/bin/env bash
# Checks deploy/: the systemd unit passes `systemd-analyze verify` with no
# warning; the example configuration starts a real TLS coordinator that answers an analyst; the
# Containerfile lints (known instructions, COPY sources that exist, programs we build, runtime
# packages that exist in Debian 12).
#   tests/deploy_check.sh CGP_COORDINATOR CGP_ANALYST [CGP_GATEWAY]
set -euo pipefail
coordinator="$1"
analyst="$2"
gateway="${3:-}"
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  rm -rf "$work"
}
# shellcheck source=support/free_port.sh
source "$(dirname "${BASH_SOURCE[0]}")/support/free_port.sh"
trap cleanup EXIT
fail() { echo "deploy_check: $*" >&2; exit 1; }

# 1. The unit, with ExecStart pointing at this build.
mkdir -p "$work/unit"
sed "s|/usr/local/bin/cgp-coordinator|$coordinator|" "$root/deploy/cgp-coordinator.service" \
  > "$work/unit/cgp-coordinator.service"
systemd-analyze verify --man=no "$work/unit/cgp-coordinator.service" > "$work/verify.txt" 2>&1 \
  || { cat "$work/verify.txt" >&2; fail "systemd-analyze verify failed"; }
[ -s "$work/verify.txt" ] && { cat "$work/verify.txt" >&2; fail "systemd-analyze verify warned"; }
echo "unit: systemd-analyze verify clean"
if [ -n "$gateway" ]; then
  # A template unit is verified as one of its instances.
  sed "s|/usr/local/bin/cgp-gateway|$gateway|" "$root/deploy/cgp-gateway@.service" \
    > "$work/unit/cgp-gateway@gw-1.service"
  systemd-analyze verify --man=no "$work/unit/cgp-gateway@gw-1.service" > "$work/verify.txt" 2>&1 \
    || { cat "$work/verify.txt" >&2; fail "systemd-analyze verify failed (gateway)"; }
  [ -s "$work/verify.txt" ] && { cat "$work/verify.txt" >&2; fail "systemd-analyze verify warned (gateway)"; }
  echo "gateway unit: systemd-analyze verify clean"
fi
sed "s|/usr/local/bin/cgp-coordinator|$coordinator|" "$root/deploy/cgp-cluster-coordinator.service" \
  > "$work/unit/cgp-cluster-coordinator.service"
systemd-analyze verify --man=no "$work/unit/cgp-cluster-coordinator.service" > "$work/verify.txt" \
  2>&1 || { cat "$work/verify.txt" >&2; fail "systemd-analyze verify failed (round driver)"; }
[ -s "$work/verify.txt" ] && { cat "$work/verify.txt" >&2; fail "systemd-analyze verify warned (round driver)"; }
echo "round driver unit: systemd-analyze verify clean"

# 2. The example configuration, its directories moved under $work, on free loopback ports.
mkdir -p "$work/etc/tls" "$work/state"
port="$(free_port)"
sed -e "s|/var/lib/cgpkit|$work/state|g" -e "s|/etc/cgpkit|$work/etc|g" \
    -e "s|0.0.0.0:7070|127.0.0.1:$port|" -e "s|127.0.0.1:9464|127.0.0.1:0|" \
    -e "s|^drain-ms = .*|drain-ms = 200|" \
    "$root/deploy/coordinator.toml" > "$work/coordinator.toml"
"$coordinator" credential --out "$work/etc/analyst.key" >/dev/null
"$coordinator" enrol --devices "$work/state/devices.csv" --id d0 --credential-out "$work/d0.key" \
  >/dev/null
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$work/etc/tls/key.pem" \
  -out "$work/etc/tls/cert.pem" >/dev/null 2>&1
"$coordinator" --config "$work/coordinator.toml" serve 2> "$work/serve.log" &
server=$!
served=0
for attempt in $(seq 1 100); do
  if "$analyst" --coordinator "localhost:$port" --credential "$work/etc/analyst.key" \
       --tls-root "$work/etc/tls/cert.pem" status > "$work/status.json" 2>/dev/null; then
    served=1
    break
  fi
  kill -0 "$server" 2>/dev/null || break
  sleep 0.2
done
[ "$served" -eq 1 ] || { cat "$work/serve.log" >&2; fail "the example configuration does not serve"; }
grep -q '"enrolled": 1' "$work/status.json" || fail "unexpected status: $(cat "$work/status.json")"
[ -f "$work/state/coordinator.state" ] || fail "no state file where the configuration says"
kill -TERM "$server"
wait "$server" || fail "the coordinator did not stop cleanly"
server=""
grep -q 'event=draining signal=15 drain_ms=200' "$work/serve.log" \
  || { cat "$work/serve.log" >&2; fail "the example configuration's drain-ms did not drain"; }
echo "config: a TLS coordinator served from deploy/coordinator.toml"

# 3. The Containerfile.
containerfile="$root/deploy/Containerfile"
known="FROM|RUN|COPY|ADD|ENV|ARG|USER|WORKDIR|EXPOSE|VOLUME|ENTRYPOINT|CMD|LABEL|HEALTHCHECK|STOPSIGNAL|SHELL"
continued=0
while IFS= read -r line; do
  if [ "$continued" -eq 0 ] && [ -n "$line" ] && [ "${line:0:1}" != "#" ]; then
    word="${line%% *}"
    [[ "$word" =~ ^($known)$ ]] || fail "Containerfile: unknown instruction '$word'"
    if [ "$word" = "COPY" ] && [[ "$line" != *"--from="* ]]; then
      read -ra parts <<< "$line"
      for source in "${parts[@]:1:${#parts[@]}-2}"; do
        [ -e "$root/$source" ] || fail "Containerfile: COPY source '$source' does not exist"
      done
    fi
  fi
  [[ "$line" == *\\ ]] && continued=1 || continued=0
done < "$containerfile"
grep -q '^ENTRYPOINT \["/usr/local/bin/cgp-coordinator"\]' "$containerfile" \
  || fail "Containerfile: ENTRYPOINT is not the coordinator"
grep -q 'COPY --from=build /opt/cgpkit/bin/cgp-coordinator' "$containerfile" \
  || fail "Containerfile: the coordinator is not copied from the build stage"
packages="$(sed -n '/apt-get install/,/rm -rf/p' "$containerfile" | tr ' \\' '\n\n' \
  | grep -E '^(lib[a-z0-9.+-]+|ca-certificates)$' || true)"
[ -n "$packages" ] || fail "Containerfile: no runtime packages found"
if apt-cache show libc6 >/dev/null 2>&1; then
  for package in $packages; do
    apt-cache show "$package" >/dev/null 2>&1 || fail "Containerfile: no Debian package '$package'"
  done
  # Every library the coordinator loads comes from a package the image installs, or one that
  # such a package depends on (apt installs those with it: libpq5 brings Kerberos and LDAP).
  closure="$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances $packages 2>/dev/null \
    | grep -E '^[a-z0-9]' | sed 's/:any$//' | sort -u || true)"
  packages="$(printf '%s\n%s\n' "$packages" "$closure")"
  for library in $(ldd "$coordinator" | awk '$3 ~ /^\// {print $3}'); do
    owner="$(dpkg -S "$(readlink -f "$library")" 2>/dev/null | cut -d: -f1 || true)"
    case "$owner" in
      ""|libc6|libgcc-s1|libstdc++6|zlib1g|libabsl*|libc-ares2|libre2-9|libupb*) ;;  # base or pulled in
      libasan*|libubsan*|liblsan*|libtsan*) ;;  # a sanitizer build's runtime, not the product's
      # A here-string, not a pipe: grep -q leaves at its first match, and under pipefail the
      # echo it cut short (SIGPIPE) would fail the check now and then.
      *) grep -qx "$owner" <<<"$packages" || fail "Containerfile: $library ($owner) not installed" ;;
    esac
  done
  echo "container: instructions, paths and $(echo "$packages" | wc -l) runtime packages check out"
else
  echo "container: instructions and paths check out (no apt lists here: packages not checked)"
fi
