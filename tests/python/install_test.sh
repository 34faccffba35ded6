#!/usr/bin/env bash
# `cmake --install` puts the cgpkit package where Debian's python3 finds it: installed
# into a scratch prefix, imported from there (not from the build tree), and the install path is
# one that python3 searches when the prefix is /usr/local.
# Usage: install_test.sh BUILD_DIR PYTHON
set -euo pipefail
build=$1
python=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" > "$prefix/install.log"
package=$(find "$prefix" -type d -name cgpkit -path '*-packages/cgpkit' | head -n 1)
[[ -n $package ]] || { echo "no cgpkit package under $prefix" >&2; exit 1; }
relative=${package#"$prefix"/}
relative=${relative%/cgpkit}
cd "$prefix"
env -u PYTHONPATH PYTHONPATH="$prefix/$relative" "$python" - "$prefix" "$relative" <<'PY'
import os, sys
prefix, relative = sys.argv[1], sys.argv[2]
import numpy as np
import cgpkit
assert cgpkit.__file__.startswith(prefix), cgpkit.__file__
assert os.path.exists(os.path.join(os.path.dirname(cgpkit.__file__), "__init__.pyi"))
fleet = cgpkit.SimulatedFleet(np.random.default_rng(17).uniform(0, 1000, (500, 2)), budget=1e-2)
assert fleet.range_count(cgpkit.box([0, 0], [500, 500]), 1e-3)["estimate"] > 0
# With the default prefix the package lands on Debian python3's own path.
default = os.path.join("/usr/local", relative)
assert default in sys.path, f"{default} is not on sys.path {sys.path}"
print(f"cgpkit {cgpkit.__version__} imported from {os.path.dirname(cgpkit.__file__)}")
PY
