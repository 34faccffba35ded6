# Sourced by the network benchmarks (network_load.sh, tls_floor.sh): a scratch folder that is
# removed on exit with every process started into `pids`, the descriptor limit raised to the
# hard one (one connection per device), and the helpers that read a process from /proc.
work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
ulimit -n "$(ulimit -Hn)"
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
cpu_seconds() {  # user + system CPU seconds of a process
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"
}
# A throwaway self-signed certificate for 127.0.0.1 and localhost (RSA 2048): cert.pem, key.pem.
make_certificate() {
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
    -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout key.pem -out cert.pem 2> /dev/null
}
