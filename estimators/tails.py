"""Normal quantiles and binomial upper tails without scipy, each with a bound on its error.

Importing ``scipy.special`` costs ~0.25 s of CPU, five times the floor of decoding a 10⁶-value
sketch (issue 32); a fresh `ldpt estimate` printing a table needs its z and its p-values only to
the digits the table shows. These functions compute them with numpy and ``math`` and say how far
from the true value (and so from scipy's, which is within its own few ulps of it) they can be;
``estimators.frequency`` uses them where the digits printed do not depend on that error and asks
scipy where they might (``TAIL_REL_ERROR`` is far above the errors measured against scipy on a
grid: tests/test_tails.py).

- ``normal_upper_quantile(a)``: z with P(Z > z) = a, by ``statistics.NormalDist`` (Wichura's
  AS 241, relative error ~1e-16); ``Z_REL_ERROR`` bounds its distance from ``scipy.special.ndtri``.
- ``normal_upper_tails(z)``: P(Z > z) by ``math.erfc``, the normal test of the protocols whose
  support count has no exact law (multi-cohort OLH); ``NORMAL_REL_ERROR`` bounds it.
- ``binomial_upper_tails(s, n, q)``: P(Bin(n, q) ≥ s) for integer arrays s, summing the exact
  probabilities over the central band of the law, each computed by Loader's saddle-point
  expansion (Loader, "Fast and Accurate Computation of Binomial Probabilities", 2000):

      P(X = k) = exp(δ(n) − δ(k) − δ(n−k) − D(k, nq) − D(n−k, n(1−q))) · √(n / (2π k (n−k)))

  with δ the Stirling remainder ln k! − (k+½) ln k + k − ½ ln 2π and D(x, M) = x ln(x/M) + M − x
  (a series in v = (x−M)/(x+M) near M), free of the cancellation of ln n! − ln k! − ... in
  floating point. Outside the band mean ± t, Bernstein's inequality P(|X − nq| ≥ t) ≤
  2 exp(−t²/(2(nq(1−q) + t/3))) puts less than e^−750 (below the smallest double) of mass, so
  the tail is 1 below the band and 0 above it to within ``TAIL_ABS_ERROR``.
"""

from __future__ import annotations

import math

import numpy as np

#: |z − ndtri's z| / z is below this (NormalDist and Cephes' ndtri are each within ~3 ulps).
Z_REL_ERROR = 1e-14
#: Relative error bound of a tail in the band and of scipy's answer: these tails are within
#: ~1e-15 of exact decimal arithmetic, scipy's (Boost's incomplete beta) within ~6e-11 on the
#: test grid (n = 3·10⁶, q = 10⁻⁶, s = 3): a hundredfold margin over the worse.
TAIL_REL_ERROR = 1e-8
#: |P(Z > z) − scipy's ndtr(−z)| / P(Z > z) is below this where the tail is a normal double
#: (libm's and Cephes' erfc differ by up to 6e-14 on the test grid, at z ≈ 35); below 1e-305,
#: where scipy's underflows to 0 earlier than libm's, they differ by at most NORMAL_ABS_ERROR.
NORMAL_REL_ERROR = 1e-11
NORMAL_ABS_ERROR = 1e-305
#: Absolute error bound: the mass outside the band, below e^−750.
TAIL_ABS_ERROR = 1e-320
#: Bernstein exponent of the band: P(outside) ≤ 2 e^−BAND_LOG ≤ e^−750.
BAND_LOG = 751.0
#: Bands wider than this are left to scipy (n far beyond any store: ~10¹¹ reports).
MAX_BAND = 4_000_000

__all__ = ["NORMAL_ABS_ERROR", "NORMAL_REL_ERROR", "TAIL_ABS_ERROR", "TAIL_REL_ERROR", "Z_REL_ERROR", "binomial_tail_band",
           "binomial_upper_tails", "normal_upper_quantile", "normal_upper_tails"]


def normal_upper_quantile(a: float) -> float:
    """z with P(Z > z) = a for the standard normal, 0 < a < 1 (within ``Z_REL_ERROR`` of scipy's)."""
    from statistics import NormalDist

    return -NormalDist().inv_cdf(a)


def normal_upper_tails(z: np.ndarray) -> np.ndarray:
    """P(Z > z) for each z (NaN stays NaN), by ``math.erf``/``math.erfc`` one value at a time,
    as ``scipy.special.ndtr(−z)`` splits it: ½ − ½ erf(z/√2) near 0, ½ erfc(|z|/√2) in the tails
    (within ``NORMAL_REL_ERROR`` of it, plus ``NORMAL_ABS_ERROR`` where either underflows)."""
    half_sqrt = math.sqrt(0.5)

    def one(v: float) -> float:
        if v != v:
            return v
        x = v * half_sqrt
        if abs(x) < half_sqrt:
            return 0.5 - 0.5 * math.erf(x)
        tail = 0.5 * math.erfc(abs(x))
        return tail if x > 0 else 1.0 - tail

    return np.array([one(v) for v in np.asarray(z, dtype=np.float64).tolist()], dtype=np.float64)


def _stirlerr(k: np.ndarray) -> np.ndarray:
    """δ(k) = ln k! − (k + ½) ln k + k − ½ ln 2π for integers k ≥ 1 (the Stirling series above 15)."""
    k = np.asarray(k, dtype=np.float64)
    out = np.empty_like(k)
    big = k > 15
    kb = k[big]
    inv2 = 1.0 / (kb * kb)
    out[big] = (1 / 12 - inv2 * (1 / 360 - inv2 * (1 / 1260 - inv2 * (1 / 1680 - inv2 / 1188)))) / kb
    half_log_2pi = 0.5 * math.log(2 * math.pi)
    out[~big] = [math.lgamma(x + 1) - (x + 0.5) * math.log(x) + x - half_log_2pi for x in k[~big].tolist()]
    return out


def _bd0(x: np.ndarray, mean: float) -> np.ndarray:
    """D(x, M) = x ln(x/M) + M − x ≥ 0, by its series in v = (x−M)/(x+M) where |v| < 0.1."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    near = np.abs(x - mean) < 0.1 * (x + mean)
    xn = x[near]
    v = (xn - mean) / (xn + mean)
    total, term, v2 = (xn - mean) * v, 2.0 * xn * v, v * v
    for j in range(1, 12):    # |v| < 0.1: the 12th term is below 1e-22 of the first
        term = term * v2
        total = total + term / (2 * j + 1)
    out[near] = total
    xf = x[~near]
    with np.errstate(divide="ignore", invalid="ignore"):
        out[~near] = np.where(xf > 0, xf * np.log(xf / mean), 0.0) + mean - xf
    return out


def _log_pmf(k: np.ndarray, n: int, q: float) -> np.ndarray:
    """ln P(Bin(n, q) = k) for integers 0 ≤ k ≤ n, 0 < q < 1 (Loader's expansion)."""
    k = np.asarray(k, dtype=np.float64)
    out = np.empty_like(k)
    ends = (k == 0) | (k == n)
    out[k == 0] = n * math.log1p(-q)
    out[k == n] = n * math.log(q)
    ki = k[~ends]
    out[~ends] = (_stirlerr(np.array([float(n)]))[0] - _stirlerr(ki) - _stirlerr(n - ki)
                  - _bd0(ki, n * q) - _bd0(n - ki, n * (1.0 - q))
                  + 0.5 * np.log(n / (2 * math.pi * ki * (n - ki))))
    return out


def binomial_upper_tails(s: np.ndarray, n: int, q: float) -> tuple[np.ndarray, float] | None:
    """(P(Bin(n, q) ≥ s) for each integer s, its relative error bound), or None where this
    cannot answer (q outside (0, 1), a band above ``MAX_BAND``): the caller asks scipy. Each
    tail is within rel·p + ``TAIL_ABS_ERROR`` of the true one."""
    s = np.asarray(s, dtype=np.int64)
    band = binomial_tail_band(n, q)
    if band is None:
        return None
    lo, tail, rel = band
    return tail[np.clip(s - lo, 0, tail.shape[0] - 1)], rel


def binomial_tail_band(n: int, q: float) -> tuple[int, np.ndarray, float] | None:
    """(lo, tail, rel): tail[i] = P(Bin(n, q) ≥ lo + i) over the band (1 at its start), then one
    0 for everything past it — P(X ≥ s) is ``tail[clip(s − lo, 0, len(tail) − 1)]`` for any
    integer s, non-increasing in s — and the relative error bound of every entry; None as for
    ``binomial_upper_tails``."""
    n = int(n)
    if not 0.0 < q < 1.0 or n <= 0:
        return None
    mean, var = n * q, n * q * (1.0 - q)
    a = 2.0 * BAND_LOG / 3.0
    t = (a + math.sqrt(a * a + 8.0 * BAND_LOG * var)) / 2.0
    lo, hi = max(0, math.floor(mean - t)), min(n, math.ceil(mean + t))
    if hi - lo + 1 > MAX_BAND:
        return None
    k = np.arange(lo, hi + 1)
    pmf = np.exp(_log_pmf(k, n, q))
    # P(X ≥ k) over the band, then 0 past it; 1 at the band's start and below
    tail = np.append(np.minimum(np.cumsum(pmf[::-1])[::-1], 1.0), 0.0)
    tail[0] = 1.0
    # Loader's terms and scipy's answer, plus the summation: at most (band) additions of ε each
    return lo, tail, TAIL_REL_ERROR + 4.0 * tail.shape[0] * np.finfo(np.float64).eps
