"""Consistency post-processing (docs/math.md §9).

Norm-Sub is the Euclidean projection of the estimated frequency vector onto the probability
simplex: f̃ = max(f̂ + δ, 0) with δ chosen so Σ f̃ = 1. It never increases the L2 error, but it
is *biased* (it shrinks large values and lifts small ones), so its output is always marked
as post-processed and never replaces the unbiased estimate by default.
"""

from __future__ import annotations

import numpy as np


def norm_sub(proportions: np.ndarray, total: float = 1.0) -> np.ndarray:
    """Project onto {f >= 0, Σf = total} in O(d log d) (sort-and-threshold)."""
    f = np.asarray(proportions, dtype=np.float64)
    if f.size == 0:
        return f.copy()
    u = np.sort(f)[::-1]
    cumulative = np.cumsum(u) - total
    ranks = np.arange(1, f.size + 1)
    # the active set is the largest prefix whose shifted values stay positive
    active = u - cumulative / ranks > 0
    rho = int(np.flatnonzero(active)[-1])
    theta = cumulative[rho] / (rho + 1)
    return np.maximum(f - theta, 0.0)
