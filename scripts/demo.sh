#!/usr/bin/env bash
# Installs the dependencies, builds cgpkit and runs its main job on the built-in default.
# Extra arguments go to the program (cgp-demo --help).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" --target cgp-demo
exec "$root/build/examples/cgp-demo" "$@"
