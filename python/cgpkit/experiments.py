"""The experiments of cgp-sim, as pandas DataFrames with the same rows `cgp-sim --json` writes.

Every function takes the users from `data` (a CSV as cgp-sim reads it: lon,lat columns are
projected, x,y are metres; for knn any numeric columns or an IDX file), or `points` (an n x d
array in metres), or neither (the built-in data: the synthetic city, or Fashion-MNIST for knn).
`n` > 0 resamples that many users (seeded). Same defaults and seeds as cgp-sim, so that a row
here equals cgp-sim's row for the same arguments.
"""
import hashlib
import json
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from . import _cgpkit
from ._errors import Error

_METHODS = ("BM0", "BM1", "PM0", "PM1")


def _sha256(path):
    """The data file's SHA-256, recorded in every row (a file that cannot be read: named)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        raise Error("invalid_argument", "data", f"cannot read data file {path}: {e.strerror}")
    return digest.hexdigest()


def _run(query, data, points, methods, c, split, reps, beta, seed, threads, noise, projection,
         n, **sweep):
    settings = dict(
        data=data or "",
        data_sha256=_sha256(data) if data else "",
        points=np.zeros((0, 2)) if points is None else np.asarray(points, dtype=np.float64),
        methods=list(methods), c=list(c), split=list(split), reps=reps, beta=beta, seed=seed,
        threads=threads, noise=noise, projection=projection, n=n, **sweep)
    return pd.DataFrame(json.loads(_cgpkit._run_experiment(query, settings)))


def range(rho: Sequence[float], w: Sequence[float], data: Optional[str] = None,
          points=None, methods=_METHODS, c=(4,), split=("even",), reps: int = 20,
          beta: float = 0.1, seed: int = 1, threads: int = 0, noise: str = "fast",
          projection: str = "local", n: int = 0) -> pd.DataFrame:
    """Private range counting (cgp-sim range): one row per (method, c, split, rho, w).

    Squares of side w metres around query centres; error is |C^ - C| / C.
    """
    return _run("range", data, points, methods, c, split, reps, beta, seed, threads, noise,
                projection, n, rho=list(rho), param=list(w))


def kde(rho: Sequence[float], b: Sequence[float], data: Optional[str] = None, points=None,
        methods=_METHODS, c=(4,), split=("even",), reps: int = 20, beta: float = 0.1,
        seed: int = 1, threads: int = 0, noise: str = "fast", projection: str = "local",
        n: int = 0) -> pd.DataFrame:
    """Private Gaussian KDE (cgp-sim kde): one row per (method, c, split, rho, b)."""
    return _run("kde", data, points, methods, c, split, reps, beta, seed, threads, noise,
                projection, n, rho=list(rho), param=list(b))


def knn(rho: Sequence[float], k: Sequence[int], data: Optional[str] = None, points=None,
        methods=_METHODS, c=(4,), split=("even",), reps: int = 20, beta: float = 0.1,
        seed: int = 1, threads: int = 0, noise: str = "fast", projection: str = "local",
        n: int = 0) -> pd.DataFrame:
    """Private k nearest neighbours (cgp-sim knn): one row per (method, c, split, rho, k).

    Without data or points: Debian's dataset-fashion-mnist (train images as users, test images
    as queries). Error is DistErr (mean distance of the answer over the true kNN's, minus 1).
    """
    return _run("knn", data, points, methods, c, split, reps, beta, seed, threads, noise,
                projection, n, rho=list(rho), param=[int(x) for x in k])


def multi_range(budget: float, m: Sequence[int], w: float, data: Optional[str] = None,
                points=None, methods=_METHODS, c=(4,), split=("even",), reps: int = 20,
                beta: float = 0.1, seed: int = 1, threads: int = 0, noise: str = "fast",
                projection: str = "local", n: int = 0) -> pd.DataFrame:
    """Alg. 3 (cgp-sim multi-range): m range counts per repetition, each user's budget spread
    over them adaptively; one row per (method, c, split, m)."""
    return _run("multi-range", data, points, methods, c, split, reps, beta, seed, threads,
                noise, projection, n, budget=float(budget), m=[int(x) for x in m],
                width=float(w))
