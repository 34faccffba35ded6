#!/usr/bin/env bash
# cgp.h's statuses must not be ignored (CGP_NODISCARD): a C file that checks a status
# compiles with -Werror; the same file ignoring it does not, for the reason that it is unused.
# Usage: nodiscard_check.sh CC INCLUDE_DIR
set -euo pipefail
cc=$1
include=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cat > "$scratch/checked.c" <<'C'
#include <cgp/cgp.h>
int use(cgp_device* device, double* out) { return cgp_device_remaining(device, out); }
C
cat > "$scratch/ignored.c" <<'C'
#include <cgp/cgp.h>
void use(cgp_device* device, double* out) { cgp_device_remaining(device, out); }
C
"$cc" -std=c11 -Wall -Werror -I "$include" -c "$scratch/checked.c" -o "$scratch/checked.o"
if "$cc" -std=c11 -Wall -Werror -I "$include" -c "$scratch/ignored.c" -o "$scratch/ignored.o" \
    2> "$scratch/ignored.log"; then
  echo "nodiscard_check: an ignored status compiled without a warning" >&2
  exit 1
fi
grep -q "unused-result\|warn_unused_result\|ignoring return value" "$scratch/ignored.log" || {
  echo "nodiscard_check: the ignored status failed for another reason:" >&2
  cat "$scratch/ignored.log" >&2
  exit 1
}
echo "nodiscard_check: an ignored status is a compile error under -Werror"
