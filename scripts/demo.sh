#!/usr/bin/env bash
# Installs the dependencies, builds cgpkit and runs its main job on the built-in default:
# cgp-sim's range-counting experiment over 100,000 simulated devices in a synthetic city (the
# paper's Fig. 3 layout, as a table), then cgp-demo's range / KDE / kNN queries with every method.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
# The same configuration as scripts/test.sh: the two commands share one build in build/.
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCGP_WERROR=ON \
  >/dev/null
"$root/scripts/build_logged.sh" demo "$root/build" cgp-sim cgp-demo
echo
echo "== cgp-sim range --rho 1e-5,1e-4,1e-3 --w 1000,2000 --reps 10 --c 16 (built-in synthetic city)"
"$root/build/bin/cgp-sim" range --rho 1e-5,1e-4,1e-3 --w 1000,2000 --reps 10 --c 16
echo
echo "== cgp-demo"
"$root/build/examples/cgp-demo"
