#!/usr/bin/env python3
"""The numpy baseline of the simulation suite: what a competent numpy user would write.

The same algorithms as cgp-sim (Liang & Yi: BM0/BM1 single releases, PIE-NI for ranges and KDE,
PIE-k for kNN, Alg. 3 over range counts), vectorized over users, with Python loops only over
repetitions, queries and rounds. Continuous Gaussian noise from numpy's default generator
(PCG64 + ziggurat), no grid: the cheapest honest version of the noise.

  numpy_baseline.py data DIR      write the suite's data: DIR/city200k.csv, DIR/city20k.csv (x,y
                                  metres), DIR/vectors50.csv (20,000 x 50)
  numpy_baseline.py ROW DATA.csv                    run one row of the suite, print seconds

Rows: range-BM0 range-PM0 range-PM1 kde-PM0 kde-PM1 knn2-BM1 knn2-PM1 knn50-PM0 knn50-PM1
alg3-PM1. Run with OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 for one thread.
"""
import math
import sys
import time

import numpy as np

BETA0 = 0.1 / 4  # β₀ = β/4 (Remark 6), β = 0.1


def lam(d, beta):
    """λ(d, β) of Lemma 6.1, as cgp::privacy::gaussian_norm_bound."""
    if d == 1:
        return math.sqrt(2 * (math.log(2) - math.log(beta)))
    if d == 2:
        return math.sqrt(-2 * math.log(beta))
    return math.sqrt(d + 2 * math.sqrt(-d * math.log(beta)) - 2 * math.log(beta))


def write_data(directory):
    rng = np.random.default_rng(2026)
    n = 200_000
    # A city of 20 km x 20 km: six Gaussian hotspots over a uniform background.
    centres = rng.uniform(3000, 17000, size=(6, 2))
    which = rng.integers(0, 7, size=n)
    pts = rng.uniform(0, 20000, size=(n, 2))
    hot = which < 6
    pts[hot] = centres[which[hot]] + rng.normal(0, 1200, size=(hot.sum(), 2))
    np.savetxt(f"{directory}/city200k.csv", pts, delimiter=",", header="x,y", comments="",
               fmt="%.3f")
    np.savetxt(f"{directory}/city20k.csv", pts[:20000], delimiter=",", header="x,y",
               comments="", fmt="%.3f")
    vec = rng.normal(0, 1, size=(20_000, 50)) * 100
    header = ",".join(f"v{i}" for i in range(50))
    np.savetxt(f"{directory}/vectors50.csv", vec, delimiter=",", header=header, comments="",
               fmt="%.4f")


def load(path):
    return np.loadtxt(path, delimiter=",", skiprows=1)


def centres(pts, count, rng):
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    mid, half = (lo + hi) / 2, np.minimum(50000, (hi - lo) / 4)
    return rng.uniform(mid - half, mid + half, size=(count, 2))


def box_signed_distance(x, c, w):
    d = np.abs(x - c) - w / 2
    outside = np.sqrt((np.maximum(d, 0) ** 2).sum(axis=-1))
    inside = np.minimum(d.max(axis=-1), 0)
    return outside + inside


def pie_ni(x, phi, release_point, rho, c, nu_low, nu_high, rng):
    """PIE-NI (Alg. 4), even split: returns (s1 count, remaining ids, estimates of remaining)."""
    n, d = x.shape
    ids = np.arange(n)
    sums = np.zeros((n, d if release_point else 1))
    rho_bar = 0.0
    s1 = 0
    group = ids
    lam_d = d if release_point else 1
    for _ in range(c):
        r = rho / c
        sigma = 1 / math.sqrt(2 * r)
        g = group
        value = x[g] if release_point else phi(x[g])[:, None]
        sums[g] += r * (value + rng.normal(0, sigma, size=value.shape))
        rho_bar += r
        mean = sums[g] / rho_bar
        est = phi(mean) if release_point else mean[:, 0]
        h = lam(lam_d, BETA0 / (c * len(g))) / math.sqrt(2 * rho_bar)
        low = est < nu_low - h
        high = est > nu_high + h
        s1 += int(low.sum())
        keep = ~(low | high)
        group = g[keep]
        if len(group) == 0:
            return s1, group, est[keep]
    mean = sums[group] / rho_bar
    return s1, group, (phi(mean) if release_point else mean[:, 0])


def run_range(pts, method, reps, rho, w, c, rng):
    for cen in centres(pts, reps, rng):
        phi = lambda p, cen=cen: box_signed_distance(p, cen, w)
        if method == "BM0":
            noisy = pts + rng.normal(0, 1 / math.sqrt(2 * rho), size=pts.shape)
            _ = int((phi(noisy) < 0).sum())
        else:
            s1, _, est = pie_ni(pts, phi, method == "PM0", rho, c, 0.0, 0.0, rng)
            _ = s1 + int((est < 0).sum())


def run_kde(pts, method, reps, rho, b, c, rng):
    for cen in centres(pts, reps, rng):
        phi = lambda p, cen=cen: np.sqrt(((p - cen) ** 2).sum(axis=-1))
        _, _, est = pie_ni(pts, phi, method == "PM0", rho, c, -math.inf, 6 * b, rng)
        _ = np.exp(-est * est / (2 * b * b)).sum() / len(pts)


def pie_k(x, phi, release_point, rho, c, k, rng):
    n, d = x.shape
    sums = np.zeros((n, d if release_point else 1))
    rho_bar = 0.0
    group = np.arange(n)
    lam_d = d if release_point else 1
    for _ in range(c):
        if len(group) <= k:
            break
        r = rho / c
        g = group
        value = x[g] if release_point else phi(x[g])[:, None]
        sums[g] += r * (value + rng.normal(0, 1 / math.sqrt(2 * r), size=value.shape))
        rho_bar += r
        mean = sums[g] / rho_bar
        est = phi(mean) if release_point else mean[:, 0]
        h = lam(lam_d, BETA0 / (c * len(g))) / math.sqrt(2 * rho_bar)
        kth_upper = np.partition(est + h, k - 1)[k - 1]
        group = g[est - h <= kth_upper]
    mean = sums[group] / rho_bar
    est = phi(mean) if release_point else mean[:, 0]
    return group[np.argsort(est)[:k]]


def run_knn(pts, method, reps, rho, k, c, rng):
    for _ in range(reps):
        q = int(rng.integers(0, len(pts)))
        cand = np.delete(pts, q, axis=0)
        p = pts[q]
        phi = lambda x, p=p: np.sqrt(((x - p) ** 2).sum(axis=-1))
        if method == "BM1":
            est = phi(cand) + rng.normal(0, 1 / math.sqrt(2 * rho), size=len(cand))
            _ = np.argpartition(est, k)[:k]
        else:
            _ = pie_k(cand, phi, method == "PM0", rho, c, k, rng)


def run_alg3(pts, reps, budget, m, w, c, rng):
    n = len(pts)
    for _ in range(reps):
        left = np.full(n, budget)
        share = budget / m
        for l, cen in enumerate(centres(pts, m, rng), start=1):
            gamma = 0.75 + (l - 1) / (m - 1) * 0.25
            alloc = np.clip(gamma * (left - (m - l + 1) * share) + share, 0, left)
            asked = np.nonzero(alloc > 0)[0]
            x = pts[asked]
            r_all = alloc[asked]
            phi = box_signed_distance(x, cen, w)
            sums = np.zeros(len(asked))
            rho_bar = np.zeros(len(asked))
            group = np.arange(len(asked))
            s1 = 0
            for _ in range(c):
                r = r_all[group] / c
                sums[group] += r * (phi[group] + rng.normal(size=len(group)) / np.sqrt(2 * r))
                rho_bar[group] += r
                left[asked[group]] -= r
                est = sums[group] / rho_bar[group]
                h = lam(1, BETA0 / (c * len(group))) / np.sqrt(2 * rho_bar[group])
                s1 += int((est < -h).sum())
                group = group[np.abs(est) <= h]
                if len(group) == 0:
                    break
            _ = s1 + int((sums[group] / rho_bar[group] < 0).sum())


def main():
    if sys.argv[1] == "data":
        write_data(sys.argv[2])
        return
    row, path = sys.argv[1], sys.argv[2]
    start = time.perf_counter()
    pts = load(path)
    rng = np.random.default_rng(1)
    kind, method = row.split("-")
    if kind == "range":
        run_range(pts, method, 20, 1e-6, 4000, 4, rng)
    elif kind == "kde":
        run_kde(pts, method, 10, 1e-6, 1000, 64, rng)
    elif kind == "knn2":
        run_knn(pts, method, 20, 1e-4, 10, 4, rng)
    elif kind == "knn50":
        run_knn(pts, method, 20, 1e3, 10, 4, rng)
    elif kind == "alg3":
        run_alg3(pts, 20, 1e-4, 24, 4000, 4, rng)
    print(f"{row} {time.perf_counter() - start:.3f}")


if __name__ == "__main__":
    main()
