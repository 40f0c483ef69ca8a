"""Confidence intervals for count estimates (docs/math.md §8).

Per item: ĉ ± z·√Var-hat, with the variance plugged in at the clipped estimate; the
interval (not the estimate) is clipped to [0, n], which keeps coverage. Simultaneous
intervals use the Bonferroni level α/d so that all d intervals hold together.

Wald fails when a value's support count is tiny (GRR at large d and ε, where n·q* < 1: the
count is nearly Poisson and a 95% Wald interval covers ~88%). For pure protocols the support
count of v is a sum of independent Bernoullis with mean λ = q* + (p*−q*)·f(v), so a
Clopper–Pearson interval on λ, mapped linearly, covers at least nominally (docs/math.md §8);
``exact_small_counts`` uses it for the items whose support count is below SMALL_SUPPORT.

The test of "c(v) = 0" behind ``detected`` uses the same exact law: under that null every
report supports v with probability q* independently, so Sᵥ ~ Binomial(n, q*) exactly and
``zero_count_p_values`` returns the exact upper tail P(Binomial(n, q*) ≥ Sᵥ), valid (never
below uniform) at every n, d and ε; a normal tail there is orders of magnitude too small when
n·q* is a few units (docs/math.md §8).
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


#: Support counts below this get the Clopper–Pearson interval instead of Wald.
SMALL_SUPPORT = 30


def clopper_pearson_counts(support: np.ndarray, n: int, p_star: float, q_star: float,
                           confidence: float = 0.95, family_size: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Count bounds from the exact binomial interval on λ = support/n, mapped to counts."""
    s = np.asarray(support, dtype=np.float64)
    alpha = (1.0 - confidence) / max(1, family_size)
    lam_lo = np.where(s > 0, stats.beta.ppf(alpha / 2, np.maximum(s, 1e-300), n - s + 1), 0.0)
    lam_hi = np.where(s < n, stats.beta.ppf(1 - alpha / 2, s + 1, np.maximum(n - s, 1e-300)), 1.0)
    delta = p_star - q_star
    low, high = (n * lam_lo - n * q_star) / delta, (n * lam_hi - n * q_star) / delta
    return np.clip(low, 0, n), np.clip(high, 0, n)


def exact_small_counts(low: np.ndarray, high: np.ndarray, support: np.ndarray, n: int, p_star: float,
                       q_star: float, confidence: float, simultaneous: bool,
                       family_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Replace Wald bounds by Clopper–Pearson ones where the support count is small
    (``family_size``: the values a simultaneous level is split over, default len(support))."""
    support = np.asarray(support, dtype=np.float64)
    small = support < SMALL_SUPPORT
    if not small.any():
        return low, high
    family = support.shape[0] if family_size is None else family_size
    cp_low, cp_high = clopper_pearson_counts(support[small], n, p_star, q_star, confidence,
                                             family if simultaneous else 1)
    low, high = low.copy(), high.copy()
    low[small], high[small] = cp_low, cp_high
    return low, high


def zero_count_p_values(support: np.ndarray, n: int, q_star: float) -> np.ndarray:
    """Exact one-sided p-values of "c(v) = 0" for a pure protocol: P(Binomial(n, q*) ≥ Sᵥ).

    The upper tail itself, not a mid-p: the discrete test then rejects with probability at most
    its level under the null, which Holm and Benjamini–Hochberg need. Support counts take few
    distinct values, so the tail is evaluated once per distinct count (a lookup table when the
    counts are no larger than their number, as when n is far below d).
    """
    raw = np.asarray(support)
    s = raw.astype(np.int64) if raw.dtype.kind in "iu" else np.rint(raw).astype(np.int64)
    if s.size == 0:
        return np.zeros(0)
    top = int(s.max())
    if 0 <= int(s.min()) and top < s.size:
        return stats.binom.sf(np.arange(-1, top), n, q_star)[s]
    distinct, where = np.unique(s, return_inverse=True)
    return stats.binom.sf(distinct - 1, n, q_star)[where.reshape(s.shape)]


def wald_interval(counts: np.ndarray, variances: np.ndarray, n: int, confidence: float = 0.95,
                  simultaneous: bool = False, family_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) count bounds, clipped to [0, n] (``family_size`` as in ``exact_small_counts``)."""
    counts = np.asarray(counts, dtype=np.float64)
    z = z_value(confidence, (counts.shape[0] if family_size is None else family_size) if simultaneous else 1)
    half = z * np.sqrt(np.maximum(np.asarray(variances, dtype=np.float64), 0.0))
    return np.clip(counts - half, 0, n), np.clip(counts + half, 0, n)
