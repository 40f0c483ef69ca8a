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

from collections.abc import Callable

import numpy as np


def z_value(confidence: float, family_size: int = 1) -> float:
    """Two-sided normal quantile for the confidence level, Bonferroni-split over ``family_size``."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    from scipy import special

    alpha = (1.0 - confidence) / max(1, family_size)
    return float(-special.ndtri(alpha / 2))   # scipy.stats.norm.isf's own formula, without scipy.stats


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
    from scipy import special

    inside = (k >= 0) & (k <= size)
    kk = np.where(inside, k, 0.0)
    size = np.where(inside, size, kk)
    out = (special.gammaln(size + 1) - special.gammaln(kk + 1) - special.gammaln(size - kk + 1)
           + special.xlogy(kk, prob) + special.xlog1py(size - kk, -prob))
    return np.where(inside, out, -np.inf)


def _binom_cdf(k: np.ndarray, size: np.ndarray, prob: float) -> np.ndarray:
    """P(Bin(size, prob) <= k) for float arrays (0 below 0, 1 from size on)."""
    from scipy import special

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


def sampled_exact_counts(ones: np.ndarray, sampled: np.ndarray, n: int, p_star: float, q_star: float,
                         confidence: float = 0.95, family_size: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Exact count bounds when only a random subset reports on a value (dBitFlipPM's buckets):
    n_v of the n devices sample bucket v, a uniform subset, so the holders among them are
    H ~ Hypergeometric(n, c, n_v), and their bits sum to C ~ Bin(H, p*) + Bin(n_v − H, q*). The
    integer counts c in [0, n] that an exact two-sided test of that mixture keeps (C is
    stochastically increasing in c) cover at least nominally at every n and n_v."""
    ones = np.asarray(ones, dtype=np.float64)
    sampled = np.asarray(sampled, dtype=np.float64)
    if ones.size == 0:
        return np.zeros(0), np.zeros(0)
    alpha = (1.0 - confidence) / max(1, family_size)
    pairs = np.stack([sampled, ones], axis=1)
    distinct, where = np.unique(pairs, axis=0, return_inverse=True)
    where = where.reshape(-1)
    d_low, d_high = np.zeros(len(distinct)), np.full(len(distinct), float(n))
    for size in np.unique(distinct[:, 0]):
        if size <= 0:
            continue   # nobody sampled the bucket: the data say nothing, [0, n]
        rows = np.flatnonzero(distinct[:, 0] == size)
        lo_, hi_ = _sampled_bounds(distinct[rows, 1], int(size), n, p_star, q_star, alpha)
        d_low[rows], d_high[rows] = lo_, hi_
    return d_low[where], d_high[where]


def _sampled_cdf(x: np.ndarray, c: np.ndarray, size: int, n: int, p_star: float, q_star: float) -> np.ndarray:
    """P(C <= x) for C | H ~ Bin(H, p*) + Bin(size − H, q*), H ~ Hypergeometric(n, c, size)."""
    from scipy import stats  # ~0.7 s of CPU to import: only for the exact laws that need it

    h = np.arange(size + 1, dtype=np.int64)
    weight = stats.hypergeom.pmf(h[None, :], n, c.astype(np.int64)[:, None], size)   # (values, h)
    width = int(min(size + 1, np.ceil(size * q_star + 12 * np.sqrt(size * q_star) + 25)))
    out = np.zeros(x.shape[0])
    rows, cols = np.nonzero(weight > 1e-30)
    if rows.size:
        cdf = _two_binomial_cdf(x[rows], h[cols].astype(np.float64), float(size), p_star, q_star, width)
        out = np.bincount(rows, weights=weight[rows, cols] * cdf, minlength=x.shape[0])
    return out


def _sampled_bounds(ones: np.ndarray, size: int, n: int, p_star: float, q_star: float,
                    alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """``sampled_exact_counts`` for one bucket size n_v (bisection over c, vectorised)."""
    lo, hi = np.zeros(ones.shape), np.full(ones.shape, float(n))
    while np.any(lo < hi):        # smallest c with P_c(C >= x) > α/2
        mid = np.floor((lo + hi) / 2)
        ok = 1.0 - _sampled_cdf(ones - 1, mid, size, n, p_star, q_star) > alpha / 2
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid + 1)
    low = lo
    lo, hi = low.copy(), np.full(ones.shape, float(n))
    while np.any(lo < hi):        # largest c with P_c(C <= x) > α/2
        mid = np.ceil((lo + hi) / 2)
        ok = _sampled_cdf(ones, mid, size, n, p_star, q_star) > alpha / 2
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid - 1)
    return low, lo


def sampled_count_intervals(counts: np.ndarray, variances: np.ndarray, ones: np.ndarray, sampled: np.ndarray,
                            n: int, p_star: float, q_star: float, confidence: float = 0.95,
                            simultaneous: bool = False, family_size: int | None = None,
                            low: np.ndarray | None = None, high: np.ndarray | None = None
                            ) -> tuple[np.ndarray, np.ndarray]:
    """dBitFlipPM's count intervals: Wald (``low``/``high`` if given) where the bucket's bit count C
    is spread out, the exact ``sampled_exact_counts`` where its plug-in SD is below
    ``EXACT_BELOW_SD`` or nobody sampled the bucket ([0, n] then). Var(C) = n_v·(f·p*(1−p*) +
    (1−f)·q*(1−q*)) + (p*−q*)²·Var(H), with Var(H) = n_v·f(1−f)(n − n_v)/(n − 1) the
    hypergeometric draw of holders."""
    ones, sampled = np.asarray(ones, dtype=np.float64), np.asarray(sampled, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    finite = np.isfinite(counts)
    family = family_size if family_size is not None else counts.shape[0] if simultaneous else 1
    if low is None or high is None:
        low, high = wald_interval(np.where(finite, counts, 0.0), np.where(finite, variances, 0.0), n,
                                  confidence, simultaneous, family_size=family)
    f = np.clip(np.nan_to_num(counts / max(n, 1)), 0.0, 1.0)
    var_c = sampled * (f * p_star * (1 - p_star) + (1 - f) * q_star * (1 - q_star)) \
        + (p_star - q_star) ** 2 * sampled * f * (1 - f) * (n - sampled) / max(n - 1, 1)
    small = (np.sqrt(var_c) < EXACT_BELOW_SD) | ~finite
    low, high = np.array(low, dtype=np.float64), np.array(high, dtype=np.float64)
    if small.any():
        ex_low, ex_high = sampled_exact_counts(ones[small], sampled[small], n, p_star, q_star, confidence, family)
        low[small], high[small] = ex_low, ex_high
    return low, high


def sampled_zero_count_p_values(ones: np.ndarray, sampled: np.ndarray, q_star: float) -> np.ndarray:
    """Exact p-values of "c(v) = 0" for dBitFlipPM: nobody holds v, so each of the n_v samplers'
    bits is 1 with probability q*: P(Bin(n_v, q*) ≥ C_v); NaN (never rejected) where n_v = 0."""
    from scipy import stats  # ~0.7 s of CPU to import: only for the exact laws that need it

    ones, sampled = np.asarray(ones, dtype=np.float64), np.asarray(sampled, dtype=np.float64)
    p = stats.binom.sf(np.rint(ones) - 1, sampled, q_star)
    return np.where(sampled > 0, p, np.nan)


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
        return binom_sf(np.arange(-1, top), n, q_star)[s]
    distinct, where = np.unique(s, return_inverse=True)
    return binom_sf(distinct - 1, n, q_star)[where.reshape(s.shape)]


def binom_sf(k: np.ndarray, n: int, prob: float) -> np.ndarray:
    """P(Bin(n, prob) > k) for integer k, the values of ``scipy.stats.binom.sf`` to the bit:
    the Boost ufunc it calls (``scipy.special._ufuncs._binom_sf``), with its answers outside the
    support (1 below 0, 0 from n on), so a frequency estimate need not import scipy.stats
    (~0.7 s of CPU in a fresh ``ldpt estimate``, issue 32). Where a SciPy release lacks that
    ufunc, ``scipy.stats.binom.sf`` itself; tests/test_intervals.py checks both agree."""
    from scipy.special import _ufuncs

    sf = getattr(_ufuncs, "_binom_sf", None)
    k = np.asarray(k, dtype=np.float64)
    if sf is None or not 0.0 <= prob <= 1.0 or int(n) != n or n < 0:
        from scipy import stats

        return stats.binom.sf(k, n, prob)
    out = np.where(k < 0, 1.0, 0.0)
    inside = (k >= 0) & (k < n)
    out[inside] = np.clip(sf(np.floor(k[inside]), float(n), prob), 0.0, 1.0)
    return out


def wald_interval(counts: np.ndarray, variances: np.ndarray, n: int, confidence: float = 0.95,
                  simultaneous: bool = False, family_size: int | None = None,
                  z: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) count bounds, clipped to [0, n] (``family_size`` as in ``exact_small_counts``;
    ``z``: the quantile to use, by default ``z_value`` of the level)."""
    counts = np.asarray(counts, dtype=np.float64)
    if z is None:
        z = z_value(confidence, (counts.shape[0] if family_size is None else family_size) if simultaneous else 1)
    half = z * np.sqrt(np.maximum(np.asarray(variances, dtype=np.float64), 0.0))
    return np.clip(counts - half, 0, n), np.clip(counts + half, 0, n)


def score_interval(counts: np.ndarray, var_at_zero: np.ndarray, slope: np.ndarray, z: float, n: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(low, high): the counts c in [0, n] with (ĉ − c)² ≤ z²·(v₀ + s·c), clipped to [0, n].

    The score (Wilson 1927) interval of an estimate whose variance grows linearly with the true
    count (v₀ at c = 0, slope s). The plug-in Wald interval puts the variance at the estimate
    itself, so a low estimate gets too short an interval and misses from below: discovery's
    held-out strings at n = 3,000 fell under their 99.9 % Wald interval 14× too often.
    An estimate so far below 0 that no c ≥ 0 qualifies gets (0, 0)."""
    counts = np.asarray(counts, dtype=np.float64)
    v0 = np.maximum(np.asarray(var_at_zero, dtype=np.float64), 0.0)
    s = np.maximum(np.asarray(slope, dtype=np.float64), 0.0)
    centre = counts + 0.5 * z * z * s
    disc = v0 + s * counts + 0.25 * z * z * s * s
    half = z * np.sqrt(np.maximum(disc, 0.0))
    empty = disc < 0
    low = np.where(empty, 0.0, np.clip(centre - half, 0, n))
    high = np.where(empty, 0.0, np.clip(centre + half, 0, n))
    return low, high


def skewed_score_interval(counts: np.ndarray, var_at_zero: np.ndarray, slope: np.ndarray,
                          skew_at_zero: np.ndarray, skew_slope: np.ndarray, z: float, n: int,
                          steps: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """``score_interval`` with the estimate's skew: the counts c in [0, n] whose Cornish–Fisher
    quantiles (Cornish, Fisher 1938) hold ĉ, i.e. |ĉ − c − (z² − 1)·κ₃(c)/(6·V(c))| ≤ z·√V(c),
    with V(c) = v₀ + s·c and the third cumulant κ₃(c) = k₀ + k₁·c.

    A sum of rare large jumps (local hashing's hits from devices that do not hold the value) is
    skewed to the right: a normal interval then misses from above (truth below it) and seldom
    from below. The bounds are found by bisection (``steps`` halvings of [0, n]): the lower on
    c + shift(c) + z·√V(c), increasing, the upper on c + shift(c) − z·√V(c) beyond the minimum of
    its unshifted part, c* = (z²s²/4 − v₀)/s. Where no c qualifies the interval is (0, 0)."""
    counts = np.asarray(counts, dtype=np.float64)
    v0 = np.maximum(np.asarray(var_at_zero, dtype=np.float64), 0.0)
    s = np.maximum(np.asarray(slope, dtype=np.float64), 0.0)
    k0 = np.asarray(skew_at_zero, dtype=np.float64)
    k1 = np.asarray(skew_slope, dtype=np.float64)
    top = float(n)

    def centre(c: np.ndarray) -> np.ndarray:
        var = v0 + s * c
        with np.errstate(divide="ignore", invalid="ignore"):
            shift = np.where(var > 0, (z * z - 1) * (k0 + k1 * c) / (6 * var), 0.0)
        return c + shift

    def plus(c: np.ndarray) -> np.ndarray:
        return centre(c) + z * np.sqrt(v0 + s * c)

    def minus(c: np.ndarray) -> np.ndarray:
        return centre(c) - z * np.sqrt(v0 + s * c)

    def first_reaching(f: Callable[[np.ndarray], np.ndarray], start: np.ndarray) -> np.ndarray:
        """The least c in [start, n] with f(c) ≥ ĉ (f increasing there): start or n at the ends."""
        lo, hi = start.copy(), np.full_like(start, top)
        for _ in range(steps):
            mid = 0.5 * (lo + hi)
            ok = f(mid) >= counts
            hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
        return np.where(f(start) >= counts, start, np.where(f(np.full_like(start, top)) < counts, top, hi))

    zero = np.zeros_like(counts)
    low = first_reaching(plus, zero)
    with np.errstate(divide="ignore", invalid="ignore"):
        turn = np.clip(np.where(s > 0, (0.25 * z * z * s * s - v0) / s, 0.0), 0.0, top)
    high = first_reaching(minus, turn)
    # the upper bound is the largest c with minus(c) <= ĉ: just below the first c beyond the turn
    # where minus exceeds ĉ; none at all when minus is above ĉ from the turn on
    empty = minus(turn) > counts
    return np.where(empty, 0.0, np.minimum(low, high)), np.where(empty, 0.0, high)
