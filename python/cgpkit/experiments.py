"""The experiments of cgp-sim, as pandas DataFrames with the same rows `cgp-sim --json` writes."""
import json
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from . import _cgpkit


def _run(query, data, points, rho, params, methods, c, split, reps, beta, seed, threads, noise,
         projection):
    array = np.zeros((0, 2)) if points is None else np.asarray(points, dtype=np.float64)
    text = _cgpkit._run_experiment(query, data or "", array, list(rho), list(params),
                                   list(methods), list(c), list(split), reps, beta, seed,
                                   threads, noise, projection)
    return pd.DataFrame(json.loads(text))


def range(rho: Sequence[float], w: Sequence[float], data: Optional[str] = None,
          points=None, methods=("BM0", "BM1", "PM0", "PM1"), c=(4,), split=("even",),
          reps: int = 20, beta: float = 0.1, seed: int = 1, threads: int = 0,
          noise: str = "fast", projection: str = "local") -> pd.DataFrame:
    """Private range counting (cgp-sim range): one row per (method, c, split, rho, w).

    data: a CSV (lon,lat or x,y) as cgp-sim reads it; or points: an n x 2 array in metres;
    neither: the built-in synthetic city. Same defaults and seeds as cgp-sim.
    """
    return _run("range", data, points, rho, w, methods, c, split, reps, beta, seed, threads,
                noise, projection)


def kde(rho: Sequence[float], b: Sequence[float], data: Optional[str] = None, points=None,
        methods=("BM0", "BM1", "PM0", "PM1"), c=(4,), split=("even",), reps: int = 20,
        beta: float = 0.1, seed: int = 1, threads: int = 0, noise: str = "fast",
        projection: str = "local") -> pd.DataFrame:
    """Private Gaussian KDE (cgp-sim kde): one row per (method, c, split, rho, b)."""
    return _run("kde", data, points, rho, b, methods, c, split, reps, beta, seed, threads, noise,
                projection)
