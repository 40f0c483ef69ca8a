"""Confidence intervals for count estimates (docs/math.md §8).

Per item: ĉ ± z·√Var-hat, with the variance plugged in at the clipped estimate; the
interval (not the estimate) is clipped to [0, n], which keeps coverage. Simultaneous
intervals use the Bonferroni level α/d so that all d intervals hold together.

Wald fails where a value's support count has too little spread for the normal shape: GRR at
large d and ε with few reports (the count of an absent value is nearly Poisson with mean
n·q* < 1: a 95 % Wald interval covers ~88 %), and GRR at ε = 10, where a held value's count is
nearly deterministic (its holders keep it with p* ≈ 0.998) and one lost report already falls
outside (0.86 at a count of 60 whatever n). For a pure protocol the support count of v is
*exactly* the sum of two independent binomials, Sᵥ ~ Bin(c, p*) + Bin(n − c, q*) (the c
holders of v, the others), so the set of integer counts c that a two-sided exact test at level
α does not reject, {c : P_c(S ≥ Sᵥ) > α/2 and P_c(S ≤ Sᵥ) > α/2}, covers at least nominally at
every n, d and ε (``exact_counts``). S is stochastically increasing in c, so the set is an
interval, found by bisection. ``exact_small_counts`` uses it where the plug-in standard
deviation of Sᵥ is below ``EXACT_BELOW_SD``: for a sum of Bernoullis |κ₃| ≤ κ₂, so the
skewness is at most 1/SD(S) — below 0.1 there, where Wald covers nominally — and the exact
computation sums at most a few hundred terms per bound.

The test of "c(v) = 0" behind ``detected`` uses the same exact law: under that null every
report supports v with probability q* independently, so Sᵥ ~ Binomial(n, q*) exactly and
``zero_count_p_values`` returns the exact upper tail P(Binomial(n, q*) ≥ Sᵥ), valid (never
below uniform) at every n, d and ε; a normal tail there is orders of magnitude too small when
n·q* is a few units (docs/math.md §8).
"""

from __future__ import annotations

import numpy as np
from scipy import special, stats


def z_value(confidence: float, family_size: int = 1) -> float:
    """Two-sided normal quantile for the confidence level, Bonferroni-split over ``family_size``."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    alpha = (1.0 - confidence) / max(1, family_size)
    return float(stats.norm.isf(alpha / 2))


#: Support counts whose plug-in standard deviation is below this get the exact interval
#: (their skewness may exceed 1/EXACT_BELOW_SD = 0.1); the others keep Wald.
EXACT_BELOW_SD = 10.0


def support_sd(counts: np.ndarray, n: int, p_star: float, q_star: float, trials: int | None = None) -> np.ndarray:
    """SD of the support count at the plug-in count c = clip(ĉ, 0, n):
    √(c·p*(1 − p*) + (N − c)·q*(1 − q*)), N = ``trials`` (default n: one indicator a report)."""
    c = np.clip(np.asarray(counts, dtype=np.float64), 0.0, float(n))
    big_n = float(n if trials is None else trials)
    return np.sqrt(c * p_star * (1 - p_star) + (big_n - c) * q_star * (1 - q_star))


def _log_pmf(k: np.ndarray, size: np.ndarray, prob: float) -> np.ndarray:
    """log P(Bin(size, prob) = k), −inf outside [0, size]."""
    inside = (k >= 0) & (k <= size)
    kk = np.where(inside, k, 0.0)
    size = np.where(inside, size, kk)
    out = (special.gammaln(size + 1) - special.gammaln(kk + 1) - special.gammaln(size - kk + 1)
           + special.xlogy(kk, prob) + special.xlog1py(size - kk, -prob))
    return np.where(inside, out, -np.inf)


def _binom_cdf(k: np.ndarray, size: np.ndarray, prob: float) -> np.ndarray:
    """P(Bin(size, prob) <= k) for float arrays (0 below 0, 1 from size on)."""
    inside = (k >= 0) & (k < size)
    cdf = special.betainc(np.where(inside, size - k, 1.0), np.where(inside, k + 1, 1.0), 1.0 - prob)
    return np.where(k < 0, 0.0, np.where(k >= size, 1.0, cdf))


def _two_binomial_cdf(s: np.ndarray, c: np.ndarray, trials: float, p_star: float, q_star: float,
                      width: int) -> np.ndarray:
    """P(A + B <= s) for A ~ Bin(c, p*), B ~ Bin(trials − c, q*), summing over B's first
    ``width`` values (B's mean is at most trials·q*; the window holds all but ~1e-25 of it)."""
    b = np.arange(width, dtype=np.float64)
    pmf = np.exp(_log_pmf(b, trials - c[:, None], q_star))
    rows, cols = np.nonzero(pmf > 1e-30)          # B's values that can matter
    terms = pmf[rows, cols] * _binom_cdf(s[rows] - b[cols], c[rows], p_star)
    return np.bincount(rows, weights=terms, minlength=s.shape[0])


def exact_counts(support: np.ndarray, n: int, p_star: float, q_star: float, confidence: float = 0.95,
                 family_size: int = 1, trials: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The integer counts c in [0, n] an exact two-sided test of S ~ Bin(c, p*) + Bin(N − c, q*)
    does not reject at level α (module docstring), N = ``trials`` (default n).

    ``trials`` > n serves sums of several values' support counts whose indicators are all
    independent (a marginal of unary-encoded cells: N = n·k indicators, c of them at p*)."""
    s = np.asarray(support, dtype=np.float64)
    if s.size == 0:
        return np.zeros(0), np.zeros(0)
    alpha = (1.0 - confidence) / max(1, family_size)
    big_n = float(n if trials is None else trials)
    # The bounds depend on (n, N, p*, q*, α) and S alone: remember them (repeated estimates of one
    # metric, Monte-Carlo runs), a bounded memo of a pure function.
    memo = _EXACT_MEMO.setdefault((int(n), big_n, float(p_star), float(q_star), alpha), {})
    if len(_EXACT_MEMO) > _MEMO_KEYS:
        _EXACT_MEMO.clear()
        memo = _EXACT_MEMO.setdefault((int(n), big_n, float(p_star), float(q_star), alpha), {})
    distinct, where = np.unique(s, return_inverse=True)
    missing = np.array([x for x in distinct.tolist() if x not in memo], dtype=np.float64)
    if missing.size:
        if len(memo) > _MEMO_VALUES:
            memo.clear()
        low, high = _exact_bounds(missing, n, big_n, float(p_star), float(q_star), alpha)
        memo.update(zip(missing.tolist(), zip(low.tolist(), high.tolist())))
    bounds = np.array([memo[x] for x in distinct.tolist()], dtype=np.float64).reshape(-1, 2)
    return bounds[where, 0], bounds[where, 1]


_EXACT_MEMO: dict[tuple[int, float, float, float, float], dict[float, tuple[float, float]]] = {}
_MEMO_KEYS, _MEMO_VALUES = 64, 1 << 16


def _exact_bounds(distinct: np.ndarray, n: int, big_n: float, p_star: float, q_star: float,
                  alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """``exact_counts`` for distinct support counts (bisection, vectorised over them)."""
    mean_b = big_n * q_star
    width = int(min(big_n + 1, np.ceil(mean_b + 12 * np.sqrt(mean_b) + 25)))

    def upper_tail_ok(c: np.ndarray) -> np.ndarray:      # P_c(S >= s) > α/2, increasing in c
        return 1.0 - _two_binomial_cdf(distinct - 1, c, big_n, p_star, q_star, width) > alpha / 2

    def lower_tail_ok(c: np.ndarray) -> np.ndarray:      # P_c(S <= s) > α/2, decreasing in c
        return _two_binomial_cdf(distinct, c, big_n, p_star, q_star, width) > alpha / 2

    # Both bounds lie in [L, U]: below L = S − width even B's whole window cannot reach S; above
    # U the holders alone exceed S except with probability < e^−50 (Chernoff: A's mean c·p* is
    # then at least S + 10√(c·p*) + 10).
    root = (10.0 + np.sqrt(100.0 + 4.0 * (distinct + 10.0))) / 2.0
    bracket_low = np.maximum(0.0, distinct - width)
    bracket_high = np.minimum(float(n), np.ceil(root * root / p_star) + 1.0)
    lo, hi = bracket_low.copy(), bracket_high.copy()
    while np.any(lo < hi):        # smallest c with upper_tail_ok
        mid = np.floor((lo + hi) / 2)
        ok = upper_tail_ok(mid)
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid + 1)
    # no c keeps S (a support count improbable under every count, e.g. S = n with p* < 1: the
    # confidence set is empty): the nearest count, U, stands for it
    low = np.minimum(lo, bracket_high)
    lo, hi = low.copy(), bracket_high.copy()
    while np.any(lo < hi):        # largest c with lower_tail_ok
        mid = np.ceil((lo + hi) / 2)
        ok = lower_tail_ok(mid)
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid - 1)
    return low, lo


def exact_small_counts(low: np.ndarray, high: np.ndarray, support: np.ndarray, n: int, p_star: float,
                       q_star: float, confidence: float, simultaneous: bool, counts: np.ndarray | None = None,
                       trials: int | None = None, family_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Replace Wald bounds by exact ones where the support count's plug-in SD is below
    ``EXACT_BELOW_SD`` (``counts``: the estimates ĉ; by default derived from the support)."""
    support = np.asarray(support, dtype=np.float64)
    big_n = float(n if trials is None else trials)
    if counts is None:
        counts = (support - big_n * q_star) / (p_star - q_star)
    small = support_sd(counts, n, p_star, q_star, trials) < EXACT_BELOW_SD
    if not small.any():
        return low, high
    family = family_size if family_size is not None else support.shape[0] if simultaneous else 1
    ex_low, ex_high = exact_counts(support[small], n, p_star, q_star, confidence, family, trials)
    low, high = np.array(low, dtype=np.float64), np.array(high, dtype=np.float64)
    low[small], high[small] = ex_low, ex_high
    return low, high


def count_intervals(counts: np.ndarray, variances: np.ndarray, support: np.ndarray | None, n: int,
                    p_star: float | None, q_star: float | None, confidence: float = 0.95,
                    simultaneous: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Each value's count interval: Wald, made exact where the support count is too concentrated
    for it (``exact_small_counts``) when the exact law of the support count is known (a pure
    protocol: ``support``, ``p_star``, ``q_star``; None otherwise)."""
    low, high = wald_interval(counts, variances, n, confidence, simultaneous)
    if support is None or p_star is None or q_star is None:
        return low, high
    return exact_small_counts(low, high, support, n, p_star, q_star, confidence, simultaneous, counts=counts)


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
