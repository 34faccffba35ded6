#!/usr/bin/env bash
# Installs the dependencies, builds cgpkit and runs its main job on the built-in default:
# cgp-sim's range-counting experiment over 100,000 simulated devices in a synthetic city (the
# paper's Fig. 3 layout, as a table), then cgp-demo's range / KDE / kNN queries with every method.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" --target cgp-sim cgp-demo
echo
echo "== cgp-sim range --rho 1e-5,1e-4,1e-3 --w 1000,2000 --reps 10 --c 16 (built-in synthetic city)"
"$root/build/sim/cgp-sim" range --rho 1e-5,1e-4,1e-3 --w 1000,2000 --reps 10 --c 16
echo
echo "== cgp-demo"
"$root/build/examples/cgp-demo"
