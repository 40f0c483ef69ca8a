"""Confidence intervals for count estimates (ldp-facts.md §10).

Per item: ĉ ± z·√Var-hat, with the variance plugged in at the clipped estimate; the
interval (not the estimate) is clipped to [0, n], which keeps coverage. Simultaneous
intervals use the Bonferroni level α/d so that all d intervals hold together.
"""

from __future__ import annotations

import numpy as np
from scipy import stats


def z_value(confidence: float, family_size: int = 1) -> float:
    """Two-sided normal quantile for the confidence level, Bonferroni-split over ``family_size``."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    alpha = (1.0 - confidence) / max(1, family_size)
    return float(stats.norm.isf(alpha / 2))


def wald_interval(counts: np.ndarray, variances: np.ndarray, n: int, confidence: float = 0.95,
                  simultaneous: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) count bounds, clipped to [0, n]."""
    counts = np.asarray(counts, dtype=np.float64)
    z = z_value(confidence, counts.shape[0] if simultaneous else 1)
    half = z * np.sqrt(np.maximum(np.asarray(variances, dtype=np.float64), 0.0))
    return np.clip(counts - half, 0, n), np.clip(counts + half, 0, n)
