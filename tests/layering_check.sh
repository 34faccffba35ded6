#!/usr/bin/env bash
# Layers point down only: common <- client-sdk, coordinator, protocol (the wire both ends speak);
# client-sdk + protocol <- device-link (a device's side of the network); client-sdk +
# coordinator <- simulation; coordinator + protocol <- transport (the coordinator's server and
# the analyst's client: no device code); simulation <- sim; everything <- tools (the programs and
# the load-test swarm, an emulator over device-link).
# The coordinator does not depend on the device SDK, and the transport not on the simulation.
# Fails on an #include of a higher layer's header or a link to a higher layer's library, naming
# the file and line.
#   tests/layering_check.sh [ROOT]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"
status=0
# directory | header folders it may include (cgp/<folder>/) | library targets it must not link
layers=(
  "common|common|cgp_protocol cgp_client cgp_device_link cgp_coordinator cgp_simulation cgp_transport cgp_swarm cgp_sim"
  "protocol|common protocol|cgp_client cgp_device_link cgp_coordinator cgp_simulation cgp_transport cgp_swarm cgp_sim"
  "client-sdk|common client|cgp_protocol cgp_device_link cgp_coordinator cgp_simulation cgp_transport cgp_swarm cgp_sim"
  "device-link|common client protocol link|cgp_coordinator cgp_simulation cgp_transport cgp_swarm cgp_sim"
  "coordinator|common coordinator|cgp_protocol cgp_client cgp_device_link cgp_simulation cgp_transport cgp_swarm cgp_sim"
  "simulation|common client coordinator simulation|cgp_protocol cgp_device_link cgp_transport cgp_swarm cgp_sim"
  "transport|common coordinator protocol transport|cgp_client cgp_device_link cgp_simulation cgp_swarm cgp_sim"
  "sim|common client coordinator simulation sim|cgp_transport cgp_swarm"
)
for layer in "${layers[@]}"; do
  IFS='|' read -r dir allowed forbidden <<< "$layer"
  while IFS= read -r hit; do
    folder="$(sed -E 's|.*#include [<"]cgp/([a-z_0-9]+)/.*|\1|' <<< "$hit")"
    # Generated messages: cgp/v1/cgp.pb.h is common's, the services' (device_gateway, analyst)
    # the protocol's.
    if [ "$folder" = v1 ]; then
      [[ "$hit" == *cgp/v1/cgp.pb.h* ]] && folder=common || folder=protocol
    fi
    if ! grep -qw -- "$folder" <<< "$allowed"; then
      echo "layering: $hit: $dir may not include cgp/$folder/ (a higher layer)" >&2
      status=1
    fi
  done < <(grep -rnE '#include [<"]cgp/[a-z_0-9]+/' "$dir" --include='*.c' --include='*.h' \
             --include='*.cpp' --include='*.hpp' || true)
  for target in $forbidden; do
    if grep -rnw --include=CMakeLists.txt -e "$target" "$dir" | grep -v '^\s*#' \
         | grep -E 'target_link_libraries|add_dependencies' >&2; then
      echo "layering: $dir links $target (a higher layer)" >&2
      status=1
    fi
  done
done
[ "$status" -eq 0 ] && echo "layering: every include and link points down"
exit "$status"
