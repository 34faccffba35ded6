# Sourced by the shell tests: free_port prints a loopback port nobody listens on (bash only: a
# minimal Debian has no python3). A connect that is refused means the port is free.
free_port() {
  local candidate
  for _ in $(seq 1 200); do
    candidate=$((20000 + RANDOM % 12000))  # below Linux's ephemeral range (32768-60999)
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}
