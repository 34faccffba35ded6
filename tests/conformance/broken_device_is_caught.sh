#!/bin/sh
# The live conformance run must fail a device that breaks the protocol: reference devices that
# leave DeviceReply.remaining_budget unset (docs/protocol.md §5.4's MUST) are retired by the
# coordinator after their first answer, and the runner has to say so.
#   broken_device_is_caught.sh PYTHON CGP_COORDINATOR CGP_ANALYST
python="$1"; coordinator="$2"; analyst="$3"
here="$(cd "$(dirname "$0")" && pwd)"
"$python" -c 'import grpc, google.protobuf' 2>/dev/null ||
  { echo "skipped: python3-grpcio and python3-protobuf are not installed"; exit 77; }
output="$("$python" "$here/conformance_runner.py" live --coordinator "$coordinator" \
  --analyst "$analyst" --device-command "$python $here/reference_device.py --target {target} \
--device-id {device_id} --credential-file {credential_file} --budget {budget} \
--component location={x},{y} --fault unset-remaining" 2>&1)"
code=$?
printf '%s\n' "$output" | grep -v '^ok ' | tail -8
if [ "$code" -eq 0 ]; then
  echo "FAILED: the runner passed devices that leave remaining_budget unset"; exit 1
fi
# The failure must be the one this test is about: the devices retired after their first answer
# (refused by the coordinator's mirror, so the query falls below min_coverage), or the
# coordinator's device-exhausted lines — not a port race or a coordinator that did not start.
printf '%s\n' "$output" | grep -Eq '^FAIL .*(min_coverage|device-exhausted)' ||
  { echo "FAILED: the runner failed, but not for the unset remaining_budget (exit $code)"; exit 1; }
echo "the runner failed the broken devices (exit $code), as it must"
