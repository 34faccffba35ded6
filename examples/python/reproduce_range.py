"""Paper Fig. (range counting): CountErr and PrivSav of BM1 vs PM1 against rho, from Python.

Run: PYTHONPATH=build/python python3 examples/python/reproduce_range.py [NYC.csv]
(without a file: the built-in synthetic city). Prints the figure's numbers; ctest runs it.
"""
import sys

import cgpkit

data = sys.argv[1] if len(sys.argv) > 1 else None
rows = cgpkit.experiments.range(rho=[1e-5, 1e-4, 1e-3], w=[1000, 2000], data=data,
                                methods=["BM1", "PM1"], c=[4], reps=5, seed=1)
table = rows.pivot_table(index=["param", "rho"], columns="method",
                         values=["error_median", "privsav_mean"])
print(table.round(4).to_string())
pm1, bm1 = rows[rows.method == "PM1"], rows[rows.method == "BM1"]
assert (pm1.privsav_mean.values > 0.5).all(), "PM1 keeps most of the budget"
assert (bm1.privsav_mean.values < 1e-9).all(), "BM1 spends it all"
