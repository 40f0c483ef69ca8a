"""Confidence intervals for the mean of a numeric mean metric (docs/math.md §8, "Means").

Every mean mechanism is a finite-cell law: a device at t ∈ [−1, 1] reports cell y with a known
probability and the server's value v(y) is unbiased for t (client_sdk/protocols/numeric.py).
The estimate is the mean of the n reports' values, and its variance is (1/n²)·Σᵢ Var[v | tᵢ].
A Wald interval with the reports' own spread fails where one output dominates — every device
near an end of the range at high ε, where a hundred reports hold a handful of minority cells or
none, and both the spread and the normal shape are wrong (duchi at ε = 8, n = 100, values 1 %
from the end: 64 % coverage). Two constructions replace it:

- **Two cells** (duchi, bitmean, memobitmean per window). Unbiasedness fixes
  P(y = 1 | t) = (t − v₀)/(v₁ − v₀), so the count of ones is a sum of n independent Bernoullis
  whose mean probability is λ = (μ − v₀)/(v₁ − v₀), affine in the mean μ of the tᵢ. A
  Poisson-binomial count is never more dispersed in its tails than the binomial of the same
  mean (Hoeffding, 1956), so the Clopper–Pearson interval on λ (Clopper and Pearson, 1934),
  mapped by the same affine map, covers μ at least nominally for every n and every data.
- **More cells** (piecewise, hybrid, laplace). A score interval: μ is kept when
  (μ̂ − μ)² ≤ z²·V(μ)/n with V(μ) = max(s²(μ), V₋(μ)). s²(μ) = Σᵢ (vᵢ − μ)²/n is the reports'
  spread about the hypothesised mean (Wilson's device, Wilson, 1927), and V₋ is the lower
  convex envelope of the exact per-report variance t ↦ Var[v | t]: by Jensen's inequality no
  data with mean μ has an average per-report variance below V₋(μ), so the interval never
  trusts a spread that has collapsed because the minority cells happened not to be drawn.

Both are computed on the normalised scale t; ``estimators.numeric.mean_frame`` maps them to the
metric's units and intersects them with the range.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from sketches.base import Sketch
from sketches.numeric import NumericServer

#: Points of the fine input grid on which the variance envelope is built, per grid step.
ENVELOPE_POINTS_PER_STEP = 8


def mean_interval(proto: NumericServer, sketch: Sketch, confidence: float) -> tuple[float, float]:
    """(low, high) for the mean of the normalised values t, within [−1, 1]."""
    h = np.asarray(sketch.counts, dtype=np.float64).reshape(-1)
    n = int(sketch.total_reports)
    if n <= 0:
        return -1.0, 1.0
    values = np.asarray(proto.debiased_values(), dtype=np.float64)
    alpha = 1.0 - confidence
    if values.shape[0] == 2:
        low, high = binary_interval(int(round(h[1])), n, float(values[0]), float(values[1]), alpha)
    else:
        low, high = score_interval(h, n, values, variance_envelope(proto), alpha)
    # the true mean lies in [−1, 1]; an interval wholly outside (all reports in an extreme cell,
    # rejected at every mean in range) shrinks to the nearest end
    low, high = min(max(-1.0, low), 1.0), max(min(1.0, high), -1.0)
    return (low, high) if low <= high else ((-1.0, -1.0) if high <= -1.0 else (1.0, 1.0))


def binary_interval(ones: int, n: int, v0: float, v1: float, alpha: float) -> tuple[float, float]:
    """Clopper–Pearson on λ = P(y = 1) averaged over the devices, mapped to μ = v₀ + (v₁ − v₀)λ."""
    lam_lo = float(stats.beta.ppf(alpha / 2, ones, n - ones + 1)) if ones > 0 else 0.0
    lam_hi = float(stats.beta.ppf(1 - alpha / 2, ones + 1, n - ones)) if ones < n else 1.0
    ends = (v0 + (v1 - v0) * lam_lo, v0 + (v1 - v0) * lam_hi)
    return min(ends), max(ends)


def score_interval(counts: np.ndarray, n: int, values: np.ndarray, envelope: tuple[np.ndarray, np.ndarray],
                   alpha: float) -> tuple[float, float]:
    """Hull of {μ : (μ̂ − μ)² ≤ z²·max(s²(μ), V₋(μ))/n} (module docstring), solved exactly."""
    z = float(stats.norm.isf(alpha / 2))
    mean = float(counts @ values) / n
    spread = float(counts @ (values - mean) ** 2) / n               # s²(μ̂)
    # the s² branch: s²(μ) = s²(μ̂) + (μ̂ − μ)², so |μ̂ − μ| <= z·s/√(n − z²)
    half = math.inf if n <= z * z else z * math.sqrt(spread / (n - z * z))
    low, high = mean - half, mean + half
    # the V₋ branch: on each piece [x_i, x_{i+1}] of the envelope V₋(μ) = y_i + b_i(μ − x_i), and
    # (μ − μ̂)² <= c·V₋(μ) with c = z²/n is a quadratic inequality in μ: solve it piece by piece
    x, y = envelope
    c = z * z / n
    slope = np.diff(y) / np.diff(x)
    lin = 2 * mean + c * slope                                      # μ² − lin·μ + const <= 0
    const = mean * mean - c * (y[:-1] - slope * x[:-1])
    disc = lin * lin - 4 * const
    ok = disc >= 0
    root = np.sqrt(np.where(ok, disc, 0.0))
    lo_piece = np.maximum((lin - root) / 2, x[:-1])
    hi_piece = np.minimum((lin + root) / 2, x[1:])
    ok &= lo_piece <= hi_piece
    if ok.any():
        low, high = min(low, float(lo_piece[ok].min())), max(high, float(hi_piece[ok].max()))
    return low, high


def variance_envelope(proto: NumericServer) -> tuple[np.ndarray, np.ndarray]:
    """(knots, values) of V₋, the lower convex envelope of t ↦ Var[v | t] on [−1, 1] (cached per
    mechanism and parameters: the fine grid has 8K + 1 points)."""
    key = (type(proto), proto.params)
    if key not in _ENVELOPES:
        t = np.linspace(-1.0, 1.0, ENVELOPE_POINTS_PER_STEP * proto.grid + 1)
        _ENVELOPES[key] = lower_convex_envelope(t, np.asarray(proto.value_variance(t), dtype=np.float64))
    return _ENVELOPES[key]


_ENVELOPES: dict[tuple[type, object], tuple[np.ndarray, np.ndarray]] = {}


def lower_convex_envelope(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vertices of the lower convex hull of the points (x, y), x increasing (Andrew's monotone chain)."""
    hull: list[int] = []
    for i in range(x.shape[0]):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            if (x[b] - x[a]) * (y[i] - y[a]) - (y[b] - y[a]) * (x[i] - x[a]) <= 0:
                hull.pop()
            else:
                break
        hull.append(i)
    return x[hull], y[hull]
