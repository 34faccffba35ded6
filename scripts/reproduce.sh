#!/usr/bin/env bash
# Reproduces the README's "Reproducing the paper" section: every experiment, its JSON and its
# figures under docs/ (SVG committed, PNG for a quick look). Needs ../shared/data (NYC
# collisions) and Debian's dataset-fashion-mnist. Run from the repository root.
#   CGP_SIM_NOISE=exact ./scripts/reproduce.sh   the device's own exact sampler (default: fast,
#                                                the same law; see the README)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
if ! dpkg-query -W -f='${Status}' dataset-fashion-mnist 2>/dev/null | grep -q "ok installed"; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq dataset-fashion-mnist >/dev/null
fi
cmake -S "$root" -B "$root/build-release" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build-release" --target cgp-sim
cd "$root"
sim="build-release/bin/cgp-sim"
nyc="../shared/data/nyc_collisions/nyc_collisions_points.csv"
# The exact bytes the tables were made from (docs/data.md); every JSON row records its own.
expected_nyc=a277e0a2092ee831b1abe5baec8f0e9d40222e42a1b6fa13809d0887ba1e5067
[ -f "$nyc" ] || { echo "reproduce: $nyc is missing (see docs/data.md)" >&2; exit 3; }
actual_nyc="$(sha256sum "$nyc" | cut -d' ' -f1)"
if [ "$actual_nyc" != "$expected_nyc" ]; then
  echo "reproduce: $nyc has SHA-256 $actual_nyc, expected $expected_nyc (docs/data.md)" >&2
  exit 3
fi
out="docs"
mkdir -p "$out"
run() {  # name, then cgp-sim arguments
  local name=$1; shift
  echo "== cgp-sim $* --json docs/$name.json --plot docs/$name" >&2
  local start=$SECONDS
  "$sim" "$@" --noise "${CGP_SIM_NOISE:-fast}" --json "$out/$name.json" --plot "$out/$name" \
    > "$out/$name.txt"
  echo "   $((SECONDS - start)) s" >&2
}
run range_nyc range --data "$nyc" --rho 1e-6,1e-5,1e-4,1e-3,1e-2 --w 500,1000,2000 --reps 30 --c 4,64
run kde_nyc kde --data "$nyc" --n 200000 --rho 1e-6,1e-5,1e-4,1e-3 --b 250,1000 --reps 20 --c 64
run knn_fmnist knn --rho 1e-4,1e-3,1e-2,1e-1 --k 1,10,50 --reps 20 --c 64 --methods BM1,PM1
run knn_fmnist_point knn --n 5000 --rho 1e-3,1e-1 --k 10 --reps 5 --c 64 --methods BM0,PM0,BM1,PM1
run multi_nyc multi-range --data "$nyc" --budget 1e-4 --m 7,14,28,56 --w 1000 --reps 5 --c 64 --methods BM1,PM1
run shift_nyc range --data "$nyc" --rho 1e-6,1e-5,1e-4,1e-3 --w 500,1000 --reps 30 --c 4 --methods BM1,PM1
run noshift_nyc range --data "$nyc" --rho 1e-6,1e-5,1e-4,1e-3 --w 500,1000 --reps 30 --c 4 --methods BM1,PM1 --no-shift
rm -f "$out"/*.png
