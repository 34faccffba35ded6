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
echo "demo: building cgp-sim and cgp-demo in build/ (log: build/build.log)" >&2
cmake --build "$root/build" --target cgp-sim cgp-demo > "$root/build/build.log" 2>&1 || {
  tail -40 "$root/build/build.log" >&2
  echo "demo: the build failed; the whole log is in build/build.log" >&2
  exit 1
}
echo
echo "== cgp-sim range --rho 1e-5,1e-4,1e-3 --w 1000,2000 --reps 10 --c 16 (built-in synthetic city)"
"$root/build/bin/cgp-sim" range --rho 1e-5,1e-4,1e-3 --w 1000,2000 --reps 10 --c 16
echo
echo "== cgp-demo"
"$root/build/examples/cgp-demo"
