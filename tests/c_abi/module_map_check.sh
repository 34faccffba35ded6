#!/usr/bin/env bash
# The Clang module map of cgp.h (how Swift imports the device C ABI) is valid: a C
# file (Objective-C, where `@import` is spelled; Swift's `import CGPKit` reads the same module)
# that only says `@import CGPKit;` compiles with clang -fmodules, links and runs.
# Usage: module_map_check.sh CLANG INCLUDE_DIR LIBRARIES...
set -euo pipefail
clang=$1
include=$2
shift 2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cat > "$scratch/app.c" <<'C'
@import CGPKit;
#include <stdio.h>
int main(void) {
  cgp_device* device = NULL;
  int status = cgp_device_open_cgp(NULL, 1.0, 0, &device);
  double remaining = 0;
  if (status == CGP_OK) status = cgp_device_remaining(device, &remaining);
  cgp_device_close(device);
  printf("CGPKit %s: %s, %g left\n", cgp_version_string(), cgp_status_name(status), remaining);
  return status == CGP_OK && remaining == 1.0 ? 0 : 1;
}
C
"$clang" -x objective-c -fmodules -fmodules-cache-path="$scratch/cache" \
  -fmodule-map-file="$include/cgp/module.modulemap" -I "$include" -Wall -Werror \
  -c "$scratch/app.c" -o "$scratch/app.o"
"$clang" "$scratch/app.o" "$@" -o "$scratch/app"
"$scratch/app"
