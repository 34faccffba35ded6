#!/usr/bin/env bash
# The layering check itself fails on an upward edge: a copy of the tree with one upward
# include and one upward link must be refused, naming both.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
copy="$(mktemp -d)"
trap 'rm -rf "$copy"' EXIT
cp -r "$root/common" "$root/protocol" "$root/client-sdk" "$root/device-link" "$root/coordinator" \
  "$root/simulation" "$root/experiments" "$root/transport" "$root/analyst" "$copy/"
mkdir -p "$copy/tools" "$copy/tests"
cp -r "$root/tools/swarm" "$copy/tools/"
cp -r "$root/tests/CMakeLists.txt" "$root/tests/coordinator" "$root/tests/transport" "$copy/tests/"
echo '#include "cgp/transport/gateway.hpp"' >> "$copy/experiments/src/output.cpp"
# The analyst's client is not the coordinator's server.
echo '#include "cgp/transport/gateway.hpp"' >> "$copy/analyst/src/analyst_client.cpp"
# A layer's tests include only that layer and below, and link only those libraries.
echo '#include "cgp/simulation/simulated_fleet.hpp"' >> "$copy/tests/coordinator/test_valid_triple.cpp"
echo '#include "cgp/swarm/device_swarm.hpp"' >> "$copy/tests/transport/test_round_table.cpp"
echo 'target_link_libraries(cgp_transport_tests PRIVATE cgp_device_link)' >> "$copy/tests/CMakeLists.txt"
# The query desk speaks no gRPC.
echo '#include <grpcpp/grpcpp.h>' >> "$copy/transport/src/query_desk.cpp"
echo 'target_link_libraries(cgp_coordinator PRIVATE cgp_transport)' >> "$copy/coordinator/CMakeLists.txt"
# The coordinator (and so the coordinator service) does not depend on the device SDK.
echo '#include "cgp/client/device.hpp"' >> "$copy/coordinator/src/queries.cpp"
# The device link does not depend on the coordinator's transport.
echo '#include "cgp/transport/gateway.hpp"' >> "$copy/device-link/src/device_client.cpp"
# The wire carries no device code.
echo '#include "cgp/client/device.hpp"' >> "$copy/protocol/src/status_codec.cpp"
if bash "$root/tests/layering_check.sh" "$copy" 2> "$copy/errors.txt"; then
  echo "layering_selftest: the check passed a tree with upward edges" >&2
  exit 1
fi
for expected in "experiments may not include cgp/transport/" "analyst may not include cgp/transport/" \
    "tests/coordinator may not include cgp/simulation/" "tests/transport may not include cgp/swarm/" \
    "cgp_transport_tests (tests/transport) links cgp_device_link" \
    "the query desk may not include gRPC"; do
  grep -q "$expected" "$copy/errors.txt" || { cat "$copy/errors.txt" >&2; exit 1; }
done
grep -q "coordinator links cgp_transport" "$copy/errors.txt" || { cat "$copy/errors.txt" >&2; exit 1; }
grep -q "coordinator may not include cgp/client/" "$copy/errors.txt" || { cat "$copy/errors.txt" >&2; exit 1; }
grep -q "device-link may not include cgp/transport/" "$copy/errors.txt" || { cat "$copy/errors.txt" >&2; exit 1; }
grep -q "protocol may not include cgp/client/" "$copy/errors.txt" || { cat "$copy/errors.txt" >&2; exit 1; }
echo "layering_selftest: every upward edge refused"
