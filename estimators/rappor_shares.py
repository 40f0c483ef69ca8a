"""The decoded distribution of a RAPPOR decode: empirical-Bayes shares on an honest support.

``estimators.rappor`` gives every candidate an unbiased estimate x (a proportion), its
randomised-response standard error s₀ (the noise under "π = 0") and its total standard error.
Unbiased estimates are the right input for tests, but a poor *distribution*: thresholding them
keeps only the strings far above the noise, and the kept ones are inflated by the selection
(the winner's curse). This module turns them into the shares an analyst reads
(docs/rappor.md, "The decoded distribution"):

1.  Prior. x ~ N(π, s₀²) independently, π ~ g; g is estimated by nonparametric maximum
    likelihood on a grid of [0, max(x + 3s₀)] with an atom at 0 (Kiefer and Wolfowitz, 1956;
    the EM iteration of Laird, 1978; "g-modeling", Efron, 2016). Proportions are >= 0, so g
    lives there; decoys and absent strings are its atom at 0.
2.  Shares. A candidate's share is its posterior median under ĝ. Total variation
    ½ Σ |π̂ − π| is a sum of absolute errors, and the posterior median minimises each one's
    posterior expectation, so the shares minimise the expected TV given ĝ. Posterior
    quantities are unaffected by selecting on the data (Dawid, 1994; Efron, 2011, "Tweedie's
    formula and selection bias"): a string picked for its large x is shrunk by exactly the
    amount its selection inflated it, which removes the winner's curse.
3.  Support (the *reported* strings). A share is reported when the posterior median is
    positive (P(π = 0 | x) < ½) *and* the one-sided p-value is below ``support_alpha``. The
    p-value condition bounds the false strings of the distribution whatever ĝ is: a string
    with π = 0 enters with probability at most ``support_alpha`` (0.5% by default, so at most
    one false string per 100 absent candidates on average, with a margin for the p-values'
    small miscalibration). Everything else gets share 0.
4.  Intervals of reported strings. Both conditions are thresholds on x (the posterior median
    is increasing in x), so a reported string is known to satisfy x > aᵢ, aᵢ the larger of
    the test's critical value and the x where P(π = 0 | x) = ½. Its interval is the selective
    one, inverted from N(π, sd²) truncated to (aᵢ, ∞) (Lee et al., 2016; Fithian, Sun and
    Taylor, 2014): frequentist, it covers at the nominal rate conditionally on being
    reported, whatever the prior. The share is clipped into it; a string just above its
    threshold, whose interval collapses to [0, 0], is then not reported.

Everything is vectorised over candidates; the EM fits ĝ on at most ``EM_ROWS`` candidates
(an even subsample in x order), and posteriors are computed in blocks, so memory is bounded.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import stats

#: Candidates used to fit the prior (an even subsample of the sorted estimates beyond this).
EM_ROWS = 4_000
#: EM iterations for the prior's weights (few: an early-stopped EM from the uniform start is a
#: smoother prior than the spiky full NPMLE, and gave lower TV in simulation), and the relative
#: log-likelihood change that stops them earlier.
EM_ITERATIONS = 100
EM_TOLERANCE = 1e-10
#: Grid of the prior: an atom at 0, then evenly spaced points GRID_STEP standard errors apart
#: (the median s₀: finer points cannot be told apart from 0 or each other, and let the NPMLE
#: park noise on tiny positive atoms), at least MIN_POINTS and at most MAX_POINTS of them.
GRID_STEP = 0.25
MIN_POINTS = 64
MAX_POINTS = 1_000
#: Rows per block when computing posteriors (bounds memory at BLOCK × grid floats).
BLOCK = 2_048
#: Default level of the support's test. The bar is at most 1 false string per 100 absent
#: candidates; the level is half of it because absent candidates' p-values are slightly
#: anticonservative in simulation (1.2–1.5% below 0.01 on the default set, although each one's
#: variance matches its standard error; the cause is not pinned down), and 0.005 keeps the bar
#: with a margin (docs/rappor.md).
SUPPORT_ALPHA = 0.005


@dataclasses.dataclass(frozen=True)
class Shares:
    """The decoded distribution: per-candidate share, reported flag and interval (proportions)."""

    share: np.ndarray
    reported: np.ndarray
    low: np.ndarray
    high: np.ndarray
    null_weight: float          # ĝ's mass at 0: the estimated share of candidates that are absent
    threshold: np.ndarray       # aᵢ for reported candidates (NaN elsewhere)


def prior_grid(x: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Support points of the prior: 0, then an even grid up to max(x + 3s) (constants above)."""
    top = float(np.max(x + 3 * s)) if x.size else 0.0
    if not math.isfinite(top) or top <= 0:
        return np.zeros(1)
    points = int(np.clip(math.ceil(top / (GRID_STEP * float(np.median(s)))), MIN_POINTS, MAX_POINTS))
    return np.linspace(0.0, top, points + 1)


def _likelihood(x: np.ndarray, s: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """φ((x − g)/s) for every row and grid point, each row scaled by its maximum (EM is invariant)."""
    ll = -0.5 * ((x[:, None] - grid[None, :]) / s[:, None]) ** 2
    return np.exp(ll - ll.max(axis=1, keepdims=True))


def fit_prior(x: np.ndarray, s: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """NPMLE weights of the prior on ``grid`` by EM (Laird, 1978), from at most EM_ROWS rows."""
    if grid.shape[0] == 1:
        return np.ones(1)
    if x.shape[0] > EM_ROWS:
        pick = np.argsort(x, kind="stable")[np.linspace(0, x.shape[0] - 1, EM_ROWS).astype(np.int64)]
        x, s = x[pick], s[pick]
    lik = _likelihood(x, s, grid)
    w = np.full(grid.shape[0], 1.0 / grid.shape[0])
    previous = -math.inf
    for _ in range(EM_ITERATIONS):
        mix = lik @ w
        loglik = float(np.log(np.maximum(mix, 1e-300)).sum())
        w = w * (lik.T @ (1.0 / np.maximum(mix, 1e-300))) / x.shape[0]
        w /= w.sum()
        if loglik - previous <= EM_TOLERANCE * abs(loglik):
            break
        previous = loglik
    return w


def _null_posterior(x: np.ndarray, s: np.ndarray, grid: np.ndarray, w: np.ndarray) -> np.ndarray:
    """P(π = 0 | x) for each row (grid[0] is the atom at 0)."""
    lik = _likelihood(x, s, grid) * w[None, :]
    return lik[:, 0] / np.maximum(lik.sum(axis=1), 1e-300)


def posterior_medians(x: np.ndarray, s: np.ndarray, grid: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Posterior medians under the discrete prior (w on grid), in blocks of BLOCK rows."""
    out = np.empty(x.shape[0])
    for start in range(0, x.shape[0], BLOCK):
        sl = slice(start, start + BLOCK)
        post = _likelihood(x[sl], s[sl], grid) * w[None, :]
        cdf = np.cumsum(post, axis=1)
        half = cdf[:, -1:] * 0.5
        out[sl] = grid[np.argmax(cdf >= half * (1 - 1e-12), axis=1)]
    return out


def null_crossing(s: np.ndarray, upper: np.ndarray, grid: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The x at which P(π = 0 | x) = ½ for each s (bisection below ``upper``; −∞ when w₀ = 0).

    P(π = 0 | x) decreases in x (the normal location family has monotone likelihood ratio and
    the other atoms are positive), so the posterior median is positive exactly above it.
    """
    if w[0] <= 0:
        return np.full(s.shape[0], -np.inf)
    if w[0] >= 1 or grid.shape[0] == 1:
        return np.full(s.shape[0], np.inf)
    lo, hi = np.minimum(upper, 0.0) - 40 * s, upper.astype(np.float64).copy()
    for _ in range(60):
        mid = (lo + hi) / 2
        above = _null_posterior(mid, s, grid, w) < 0.5
        lo, hi = np.where(above, lo, mid), np.where(above, mid, hi)
    return hi


def decoded_shares(x: np.ndarray, se0: np.ndarray, sd: np.ndarray, p_value: np.ndarray,
                   confidence: float, support_alpha: float = SUPPORT_ALPHA) -> Shares:
    """Shares, support and selective intervals from unbiased estimates (module docstring).

    ``x`` proportions (NaN for candidates that cannot be estimated), ``se0`` their
    randomised-response standard errors, ``sd`` their total standard errors (with the
    sampling term) and ``p_value`` the one-sided test of π = 0.
    """
    x, se0, sd, p_value = (np.asarray(v, dtype=np.float64) for v in (x, se0, sd, p_value))
    n_cand = x.shape[0]
    share = np.zeros(n_cand)
    low, high = np.full(n_cand, np.nan), np.full(n_cand, np.nan)
    threshold = np.full(n_cand, np.nan)
    ok = np.isfinite(x) & np.isfinite(se0) & (se0 > 0)
    if not ok.any():
        return Shares(share, np.zeros(n_cand, dtype=bool), low, high, math.nan, threshold)
    xs, ss = x[ok], se0[ok]
    grid = prior_grid(xs, ss)
    w = fit_prior(xs, ss, grid)
    med = posterior_medians(xs, ss, grid, w)
    reported = np.zeros(n_cand, dtype=bool)
    reported[ok] = (med > 0) & (p_value[ok] < support_alpha)
    share[ok] = np.where(reported[ok], med, 0.0)
    if reported.any():
        test_cut = stats.norm.isf(support_alpha) * se0[reported]
        crossing = null_crossing(se0[reported], x[reported], grid, w)
        threshold[reported] = np.maximum(test_cut, crossing)
        lo, hi = selective_interval(x[reported], sd[reported], threshold[reported], confidence)
        low[reported], high[reported] = np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)
        share[reported] = np.clip(share[reported], low[reported], high[reported])
        # just above its threshold a string's selective interval collapses towards [0, 0]
        # (Lee et al., 2016): clipped to a zero share, it is not reported after all
        dropped = reported & (share <= 0)
        reported &= ~dropped
        low[dropped], high[dropped], threshold[dropped] = np.nan, np.nan, np.nan
    return Shares(share, reported, low, high, float(w[0]), threshold)


def selective_interval(x: np.ndarray, sd: np.ndarray, threshold: np.ndarray,
                       confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Interval for μ from X ~ N(μ, sd²) observed *given* X > threshold (vectorised).

    G(μ) = P_μ(X ≥ x | X > a) = Φ̄((x−μ)/sd) / Φ̄((a−μ)/sd) increases in μ; the limits solve
    G = (1−confidence)/2 and G = (1+confidence)/2 (bisection in log space, 80 steps over a
    bracket of ±60 sd around [min(x, 0), max(x, 1)]: proportions live in [0, 1]).
    """
    tail = (1.0 - confidence) / 2
    x, sd, a = (np.asarray(v, dtype=np.float64) for v in (x, sd, threshold))

    def solve(log_target: float) -> np.ndarray:
        lo, hi = np.minimum(x, 0.0) - 60 * sd, np.maximum(x, 1.0) + 60 * sd
        for _ in range(80):
            mid = (lo + hi) / 2
            log_g = stats.norm.logsf((x - mid) / sd) - stats.norm.logsf((a - mid) / sd)
            below = log_g < log_target
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        return (lo + hi) / 2

    return solve(math.log(tail)), solve(math.log1p(-tail))
