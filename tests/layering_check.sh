#!/usr/bin/env bash
# Layers point down only (docs/design.md §7):
#   common <- client-sdk, coordinator, protocol (the wire both ends speak);
#   client-sdk + protocol <- device-link (a device's side of the network) <- tools/swarm;
#   client-sdk + coordinator <- simulation <- experiments (the paper's);
#   coordinator + protocol <- transport (the coordinator's server: no device code)
#                          <- analyst (the analyst's client);
#   common + protocol <- cluster (the live tier's PostgreSQL store);
#   everything <- tools (the programs).
# A layer may include headers of the folders listed for it (cgp/<folder>/) and link only their
# libraries. Each folder of tests/ is held to the layer it tests; tests/system (the programs and
# every layer together), tests/consumer and tests/fuzz are at the top, like tools.
# Fails on an #include of a higher layer's header or a link to a higher layer's library, naming
# the file and line (or the test target).
#   tests/layering_check.sh [ROOT]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"
status=0

# header folder -> its library. protocol_analyst stands for the Analyst service's generated code
# (cgp/v1/analyst.*), a library of its own so that a phone carries no analyst stubs.
declare -A library=(
  [common]=cgp_common [protocol]=cgp_protocol [protocol_analyst]=cgp_protocol_analyst
  [client]=cgp_client [link]=cgp_device_link [coordinator]=cgp_coordinator
  [simulation]=cgp_simulation [experiments]=cgp_experiments [transport]=cgp_transport
  [analyst]=cgp_analyst [swarm]=cgp_swarm [cluster]=cgp_cluster
  [protocol_cluster]=cgp_protocol_cluster
)
# directory | header folders it may include
layers=(
  "common|common"
  "protocol|common protocol protocol_analyst protocol_cluster"
  "client-sdk|common client"
  "device-link|common client protocol link"
  "coordinator|common coordinator"
  "simulation|common client coordinator simulation"
  "experiments|common client coordinator simulation experiments"
  "transport|common coordinator protocol protocol_analyst protocol_cluster transport"
  "analyst|common coordinator protocol protocol_analyst analyst"
  "cluster|common protocol cluster"
  "tools/swarm|common client protocol link swarm"
)
# tests/<folder> | the layer directory whose rules it follows | its test executables
test_layers=(
  "tests/support|common|"
  "tests/common|common|cgp_common_tests"
  "tests/client|client-sdk|cgp_client_tests cgp_client_portable_tests"
  "tests/consumer_client|client-sdk|"
  "tests/conformance|client-sdk|cgp_conformance_tests cgp_make_device_vectors cgp_device_vectors"
  "tests/protocol|protocol|cgp_protocol_tests"
  "tests/coordinator|coordinator|cgp_coordinator_tests cgp_reply_conformance_tests cgp_make_reply_vectors cgp_reply_vectors"
  "tests/simulation|simulation|cgp_simulation_tests"
  "tests/experiments|experiments|cgp_experiments_tests"
  "tests/transport|transport|cgp_transport_tests"
  "tests/cluster|cluster|cgp_cluster_tests"
)

allowed_of() {  # the allowed folders of a layer directory
  local entry
  for entry in "${layers[@]}"; do
    [ "${entry%%|*}" = "$1" ] && { echo "${entry#*|}"; return; }
  done
  echo "layering: no layer named $1" >&2
  exit 2
}

# Fails on each #include under `dir` (not descending into `skip` folders) of a cgp/<folder>/
# header that `allowed` does not list.
check_includes() {
  local name="$1" dir="$2" allowed="$3" hit folder
  while IFS= read -r hit; do
    folder="$(sed -E 's|.*#include [<"]cgp/([a-z_0-9]+)/.*|\1|' <<< "$hit")"
    # Generated messages: cgp/v1/cgp.pb.h is common's; device_gateway the protocol's; analyst
    # the Analyst service's.
    if [ "$folder" = v1 ]; then
      case "$hit" in
        *cgp/v1/cgp.pb.h*) folder=common ;;
        *cgp/v1/analyst*) folder=protocol_analyst ;;
        *cgp/v1/gateway_control*) folder=protocol_cluster ;;
        *) folder=protocol ;;
      esac
    fi
    if ! grep -qw -- "$folder" <<< "$allowed"; then
      echo "layering: $hit: $name may not include cgp/$folder/ (a higher layer)" >&2
      status=1
    fi
  done < <(grep -rnE '#include [<"]cgp/[a-z_0-9]+/' "$dir" --include='*.c' --include='*.h' \
             --include='*.cpp' --include='*.hpp' || true)
}

forbidden_of() {  # the libraries a layer with these allowed folders must not link
  local folder out=""
  for folder in "${!library[@]}"; do
    grep -qw -- "$folder" <<< "$1" || out="$out ${library[$folder]}"
  done
  echo "$out"
}

for layer in "${layers[@]}"; do
  IFS='|' read -r dir allowed <<< "$layer"
  [ -d "$dir" ] || { echo "layering: $dir is missing" >&2; status=1; continue; }
  check_includes "$dir" "$dir" "$allowed"
  for target in $(forbidden_of "$allowed"); do
    if grep -nw --include=CMakeLists.txt -e "$target" -r "$dir" | grep -v '^[^:]*:[0-9]*:\s*#' \
         | grep -E 'target_link_libraries|add_dependencies' >&2; then
      echo "layering: $dir links $target (a higher layer)" >&2
      status=1
    fi
  done
done

# tests/: the same rules per folder, and per test executable for what it links.
tests_cmake="$(tr '\n' ' ' < tests/CMakeLists.txt)"
for entry in "${test_layers[@]}"; do
  IFS='|' read -r dir layer targets <<< "$entry"
  [ -d "$dir" ] || continue
  allowed="$(allowed_of "$layer")"
  check_includes "$dir" "$dir" "$allowed"
  forbidden="$(forbidden_of "$allowed")"
  for test_target in $targets; do
    links="$(grep -oE "target_link_libraries\($test_target [^)]*\)" <<< "$tests_cmake" || true)"
    for target in $forbidden; do
      if grep -qw -- "$target" <<< "$links"; then
        echo "layering: tests/CMakeLists.txt: $test_target ($dir) links $target (a higher layer)" >&2
        status=1
      fi
    done
  done
done
# The coordinator's query desk is free of gRPC: the service's adapter alone maps its errors to
# gRPC statuses (transport/src/coordinator_service.cpp).
if [ -d transport/src ]; then
  while IFS= read -r hit; do
    echo "layering: $hit: the query desk may not include gRPC (the adapter speaks it)" >&2
    status=1
  done < <(grep -nE '#include [<"](grpc|grpcpp)/|\.grpc\.pb\.h' transport/src/query_desk.* || true)
fi
[ "$status" -eq 0 ] && echo "layering: every include and link points down, tests included"
exit "$status"
