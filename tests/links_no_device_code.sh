#!/usr/bin/env bash
# The coordinator carries no device code: no symbol of the device SDK (cgp::client) or the device
# link (cgp::link) in its binary. The device program is checked to have them, so that a broken
# check (nm missing, names changed) cannot pass.
#   tests/links_no_device_code.sh COORDINATOR DEVICE
set -euo pipefail
coordinator="$1" device="$2"
pattern='cgp::(client|link)::'
found="$(nm -C "$coordinator" | grep -cE "$pattern" || true)"
in_device="$(nm -C "$device" | grep -cE "$pattern" || true)"
echo "device-code symbols: $found in $(basename "$coordinator"), $in_device in $(basename "$device")"
if [ "$in_device" -eq 0 ]; then
  echo "links_no_device_code: no device symbol found in $device either: the check is broken" >&2
  exit 1
fi
if [ "$found" -ne 0 ]; then
  nm -C "$coordinator" | grep -E "$pattern" | head -20 >&2
  echo "links_no_device_code: $coordinator carries device code" >&2
  exit 1
fi
