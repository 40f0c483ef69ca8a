"""Estimates of a joint metric (docs/math.md, "Joint reports"; docs/guide-analysts.md,
"Breakdowns by private attributes").

A joint metric is a categorical metric over the product of its parts' domains, so the
protocol gives unbiased cell counts ĉ. Everything an analyst asks of a breakdown is a linear
form w·ĉ (a marginal) or a ratio of two (a conditional share, a mean per category), so all
that is needed beyond the counts is their covariance Σ = Cov(ĉ). For a pure protocol with
support probabilities p* (v ∈ S(y) when x = v), q* (when x ≠ v) and the pair probabilities
r₁ = P(u, v ∈ S(y) | x = u), r₂ = P(u, v ∈ S(y) | x ∉ {u, v}) (u ≠ v), one report adds

    Cov(1[u ∈ S], 1[v ∈ S] | x) = r₂ − q*²  (x ∉ {u, v}),   r₁ − p*q*  (x ∈ {u, v}),

so  Cov(ĉ_u, ĉ_v) = [n(r₂ − q*²) + (c_u + c_v)(r₁ − p*q* − r₂ + q*²)] / (p* − q*)²,

the diagonal being the usual pure variance. GRR: r₁ = r₂ = 0 (a report supports one value: the
multinomial's negative covariance); OUE/SUE: r₁ = p*q*, r₂ = q*² (independent bits:
uncorrelated); SS: r₁ = π(s−1)/(d−1), r₂ = [π(s−1)(s−2) + (1−π)s(s−1)]/((d−1)(d−2)).

What each row estimates (docs/math.md §13). Cells and marginals are counts of *these* n
devices, as a frequency frame's rows are; their intervals and the cells' tests of "count = 0"
are the frequency frames' own — Wald, made exact from the two-binomial law of the support count
where it is too concentrated (estimators.intervals), and the exact binomial tail for the tests.
Shares, means per category, their differences and the independence test are about the
*population* the devices are drawn from (what an analyst means by "the crash rate of iOS" or
"are os and crashed independent"): their covariance adds the sampling of the devices,
n(diag π − ππᵀ) at the plug-in cell shares π̂, to the randomisation's Σ. Without it the tests
asked whether these n devices form an exactly independent table, and rejected independent
populations in 0.31 of runs at ε = 4 (grr), 0.92 at ε = 6.

Ratios use Fieller's interval (Fieller 1954): the set of R with (N − R·D)² ≤ z²·Var(N − R·D),
exact for a bivariate normal (N, D), so it keeps its coverage when the denominator is noisy
(a small category), where the delta method's symmetric interval does not; when D is not
significantly non-zero the set is unbounded and the interval is the whole admissible range,
flagged ``ci_unbounded``. The standard error shown is the delta method's (the usual first-order
summary).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from client_sdk.errors import EstimationError
from client_sdk.joint import SEPARATOR, JointDomain, JointPart
from client_sdk.registry import MetricSpec
from sketches import server_half
from sketches.base import ServerHalf, Sketch

from .intervals import count_intervals, z_value, zero_count_p_values
from .multiple_testing import detect

#: values with fewer estimated devices than this are pooled before the test of independence
POOL_BELOW = 10.0
#: ... or fewer standard errors of their estimate above 0
POOL_BELOW_SE = 4.0

JOINT_COLUMNS = ["statistic", "value", "estimate", "std_err", "ci_low", "ci_high", "p_value", "detected",
                 "ci_unbounded"]
__all__ = ["JOINT_COLUMNS", "JointEstimate", "count_covariance", "estimate_joint", "fieller",
           "joint_frame", "joint_truth", "pair_probabilities"]


def pair_probabilities(proto: ServerHalf) -> tuple[float, float, float, float]:
    """(p*, q*, r₁, r₂) of a protocol a joint metric may use (module docstring): its server
    half's ``pair_probabilities``."""
    pair = proto.pair_probabilities()
    if pair is None:
        raise EstimationError(f"protocol {proto.name!r}: the covariance of its count estimates is not derived; a "
                              "joint metric uses grr, oue, sue or ss")
    return pair


def count_covariance(proto: ServerHalf, n: int, counts: np.ndarray,
                     diagonal: np.ndarray | None = None) -> np.ndarray:
    """Cov(ĉ) (d × d) at true counts ``counts`` (a plug-in when given estimates, clipped to
    [0, n]); ``diagonal`` replaces the diagonal (the protocol's own variance estimates)."""
    p, q, r1, r2 = pair_probabilities(proto)
    c = np.clip(np.asarray(counts, dtype=np.float64), 0.0, float(n))
    delta2 = (p - q) ** 2
    cov = (n * (r2 - q * q) + (c[:, None] + c[None, :]) * (r1 - p * q - r2 + q * q)) / delta2
    diag = proto.variance(n, c) if diagonal is None else diagonal  # type: ignore[attr-defined]
    np.fill_diagonal(cov, diag)
    return cov


def fieller(num: float, den: float, v_num: float, v_den: float, cov: float, z: float,
            bounds: tuple[float, float]) -> tuple[float, float, bool]:
    """Fieller's interval for num/den, intersected with ``bounds``, and whether the confidence
    set was unbounded (the denominator not significantly non-zero): then the interval is the
    whole of ``bounds``, which says nothing about the ratio."""
    a = den * den - z * z * v_den
    b = num * den - z * z * cov
    c = num * num - z * z * v_num
    disc = b * b - a * c
    if a <= 0 or disc < 0:
        return bounds[0], bounds[1], True
    root = math.sqrt(disc)
    low, high = (b - root) / a, (b + root) / a
    return max(bounds[0], min(low, bounds[1])), min(bounds[1], max(high, bounds[0])), False


def sampling_covariance(counts: np.ndarray, n: int) -> np.ndarray:
    """n(diag π − ππᵀ) at the plug-in cell shares π̂ = clip(ĉ, 0)/Σ clip(ĉ, 0): the covariance the
    draw of n devices from a population with cell shares π adds to the cell counts."""
    c = np.clip(np.asarray(counts, dtype=np.float64), 0.0, None)
    total = c.sum()
    pi = c / total if total > 0 else np.full(c.shape, 1.0 / c.size)
    return n * (np.diag(pi) - np.outer(pi, pi))


def marginal_model(proto: ServerHalf, cells: int, n: int) -> tuple[float, float, int] | None:
    """(p*, q*, N) making a sum of ``cells`` cells' support counts S ~ Bin(c, p*) + Bin(N − c, q*)
    exactly, c the marginal count (the server half's ``marginal_model``): GRR (and SS with s = 1)
    supports one cell a report, so the sum is the support of the merged value (p* + (k−1)q*, k·q*);
    unary encodings' bits are independent, N = n·k. None for SS with s ≥ 2 (a report's cells are a
    fixed-size subset: dependent)."""
    return proto.marginal_model(cells, n)


@dataclasses.dataclass(frozen=True)
class JointEstimate:
    """Cell counts of a joint metric (row-major over the parts) and their covariance."""

    domain: JointDomain
    counts: np.ndarray      # ĉ, shape (d,)
    cov: np.ndarray         # Cov-hat(ĉ) from the randomisation, shape (d, d)
    n: int
    #: Cov-hat of the cells' draw from the population (``sampling_covariance``); zero by default
    sampling: np.ndarray | None = None
    #: Σᵢ 1[v ∈ S(yᵢ)] per cell and the protocol, for the exact intervals and tests of counts
    support: np.ndarray | None = None
    protocol: ServerHalf | None = None

    @functools.cached_property
    def population_cov(self) -> np.ndarray:
        """Cov-hat of ĉ about n·π (π the population's cell shares): randomisation plus sampling."""
        return self.cov if self.sampling is None else self.cov + self.sampling

    def index(self, part: int) -> np.ndarray:
        """Each cell's value index in ``part`` (shape (d,))."""
        return np.indices(self.domain.shape)[part].reshape(-1)

    def linear(self, w: np.ndarray) -> tuple[float, float]:
        """(w·ĉ, Var-hat(w·ĉ))."""
        return float(w @ self.counts), float(w @ self.cov @ w)

    def marginal(self, part: int) -> tuple[np.ndarray, np.ndarray]:
        """Counts of each value of ``part`` (sums of cells) and their variances."""
        idx = self.index(part)
        w = (idx[None, :] == np.arange(self.domain.shape[part])[:, None]).astype(np.float64)
        return w @ self.counts, np.einsum("ij,jk,ik->i", w, self.cov, w)

    def ratio(self, w_num: np.ndarray, w_den: np.ndarray, z: float,
              bounds: tuple[float, float], widen: float = 0.0) -> tuple[float, float, float, float, bool]:
        """(estimate, delta-method std err, Fieller low, high, unbounded) of (w_num·ĉ)/(w_den·ĉ)
        as an estimate of the population's ratio (``population_cov``); ``widen`` is added to both
        ends of a bounded interval (a bias bound) before clipping to ``bounds``."""
        cov = self.population_cov
        num, den = float(w_num @ self.counts), float(w_den @ self.counts)
        v_num, v_den, c = float(w_num @ cov @ w_num), float(w_den @ cov @ w_den), float(w_num @ cov @ w_den)
        if den <= 0:   # no devices in the category, as far as the data can tell
            return math.nan, math.nan, bounds[0], bounds[1], True
        r = num / den
        se = math.sqrt(max(v_num - 2 * r * c + r * r * v_den, 0.0)) / den
        low, high, unbounded = fieller(num, den, v_num, v_den, c, z, bounds)
        if widen and not unbounded:
            low, high = max(bounds[0], low - widen), min(bounds[1], high + widen)
        return min(max(r, bounds[0]), bounds[1]), se, low, high, unbounded

    def share(self, target: int, a: int, given: int, b: int, z: float) -> tuple[float, float, float, float, bool]:
        """P(part ``target`` = a | part ``given`` = b) (other parts summed over)."""
        it, ig = self.index(target), self.index(given)
        den = (ig == b).astype(np.float64)
        return self.ratio(den * (it == a), den, z, (0.0, 1.0))

    def share_difference(self, target: int, a: int, given: int, b1: int, b2: int) -> tuple[float, float, float]:
        """P(T = a | G = b1) − P(T = a | G = b2) in the population: (difference, delta-method std
        err, two-sided p-value of "the shares are equal").

        The std err is the delta method's at each share's own estimate (its gradient
        (w_N − R·w_D)/D, the cells' full covariance with the sampling term): the difference's spread
        where it is, which sizes a gap. The test is the pooled (score) form of the two-proportion test (docs/math.md, "Joint
        reports"): the gradient of each ratio N/D is (w_N − R·w_D)/D taken at the pooled share
        R₀ = (N₁ + N₂)/(D₁ + D₂), and the devices' sampling covariance at the null's fit (both
        categories' cells rescaled to the share R₀, their other proportions kept), plus the
        randomisation's Σ (GRR/SS cells covary). The Wald form, at each category's own plug-in
        share, underestimates the variance when a small category's share is estimated near 0, and
        rejected equal shares in 0.11–0.14 of runs (grr ε 8, n 500, 40 × 5; ss ε 12, n 1,000)."""
        it, ig = self.index(target), self.index(given)
        w_den = [(ig == b).astype(np.float64) for b in (b1, b2)]
        w_num = [w * (it == a) for w in w_den]
        dens = [float(w @ self.counts) for w in w_den]
        nums = [float(w @ self.counts) for w in w_num]
        if min(dens) <= 0:
            return math.nan, math.nan, math.nan
        shares = [num / den for num, den in zip(nums, dens)]
        g = sum(sign * (wn - r * wd) / den for sign, wn, wd, r, den in zip((1.0, -1.0), w_num, w_den, shares, dens))
        se = math.sqrt(max(float(g @ self.population_cov @ g), 0.0))
        r0 = min(max((nums[0] + nums[1]) / (dens[0] + dens[1]), 0.0), 1.0)
        g0 = (w_num[0] - r0 * w_den[0]) / dens[0] - (w_num[1] - r0 * w_den[1]) / dens[1]
        cov = self.cov + sampling_covariance(self._null_fit(w_num, w_den, dens, r0), self.n) \
            if self.sampling is not None else self.cov
        se0 = math.sqrt(max(float(g0 @ cov @ g0), 0.0))
        diff = shares[0] - shares[1]
        return diff, se, float(2 * stats.norm.sf(abs(diff) / se0)) if se0 > 0 else math.nan

    def _null_fit(self, w_num: list[np.ndarray], w_den: list[np.ndarray], dens: list[float],
                  r0: float) -> np.ndarray:
        """The cell counts (clipped at 0) with each category of ``w_den`` holding D·R₀ devices of
        the target value and D·(1 − R₀) of the others, spread as the estimates are (evenly where
        they are all 0): the fit of "equal shares" whose sampling law the test uses."""
        fit = np.clip(self.counts, 0.0, None)
        for num, den, total in zip(w_num, w_den, dens):
            for cells, mass in ((num > 0, total * r0), ((den > 0) & (num == 0), total * (1.0 - r0))):
                held = fit[cells].sum()
                fit[cells] = mass * (fit[cells] / held if held > 0 else 1.0 / cells.sum())
        return fit

    def mean(self, numeric: int, given: int, b: int, z: float) -> tuple[float, float, float, float, bool]:
        """Mean of part ``numeric`` among devices with part ``given`` = b, in the population.

        The estimate is the mean of the bucket midpoints; a value and its bucket's midpoint differ
        by at most half the bucket's width, so the actual mean differs from it by at most
        β = Σ_k P(k | b)·w_k/2 (w_k the widths), and the Fieller interval of the midpoint mean is
        widened by the plug-in β (shares clipped at 0 and normalised), as a histogram's mean is
        (``estimators.numeric``): the interval is for the mean an analyst reads."""
        part = self.domain.parts[numeric]
        k = self.index(numeric)
        mids = np.asarray(part.midpoints)[k]
        den = (self.index(given) == b).astype(np.float64)
        return self.ratio(den * mids, den, z, (float(part.edges[0]), float(part.edges[-1])),
                          widen=self.mean_bias(numeric, given, b))

    def mean_bias(self, numeric: int, given: int, b: int) -> float:
        """β of ``mean``: the plug-in bound on |actual mean − midpoint mean| among G = b."""
        part = self.domain.parts[numeric]
        widths = np.diff(np.asarray(part.edges, dtype=np.float64))[self.index(numeric)]
        inside = np.clip(self.counts, 0.0, None) * (self.index(given) == b)
        total = inside.sum()
        return float(inside @ widths / total) / 2.0 if total > 0 else float(widths.max()) / 2.0

    def independence(self, i: int, j: int, min_count: float = POOL_BELOW) -> tuple[float, int, float]:
        """Wald test that parts i and j are independent in the population: (statistic, df, p).

        θ_ab = f̂(a, b) − f̂(a, ·) f̂(·, b) for a < kᵢ − 1, b < kⱼ − 1 (the rest follow), with
        Cov(θ) = J Σ Jᵀ + S (delta method, J the Jacobian in ĉ, Σ the randomisation's covariance)
        and S the covariance the draw of n devices from an independent population gives θ,
        (Σᵢ ⊗ Σⱼ)/n with Σₖ = diag fₖ − fₖfₖᵀ at the estimated marginal shares (clipped at 0,
        normalised): the null's own sampling law, as in the classical test of independence.
        W = θᵀ Cov(θ)⁻¹ θ is χ² with (kᵢ − 1)(kⱼ − 1) degrees of freedom under independence.

        Values of either part whose estimated marginal count is below ``min_count`` devices, or
        less than ``POOL_BELOW_SE`` standard errors above 0, are pooled (none when ``min_count`` is
        0) into one value first (docs/math.md, "Test of
        independence"): independence of the parts implies independence of the pooled table, and
        on nearly empty rows the χ² reference fails both ways (an independent population rejected
        in 0.074 of runs for 20 × 5 grr at ε 8, n 1,000, and in 0.001 at ε 4). The df counts the
        pooled table; with fewer than two values left on a side there is nothing to test (nan).
        """
        gi, ki = self._pooled(i, min_count)
        gj, kj = self._pooled(j, min_count)
        dof = (ki - 1) * (kj - 1)
        if dof == 0:
            return math.nan, 0, math.nan
        n = float(self.n)
        fi = np.array([self.counts[gi == a].sum() for a in range(ki)]) / n
        fj = np.array([self.counts[gj == b].sum() for b in range(kj)]) / n
        thetas, rows = [], []
        for a, b in itertools.product(range(ki - 1), range(kj - 1)):
            cell = ((gi == a) & (gj == b)).astype(np.float64)
            thetas.append(self.counts @ cell / n - fi[a] * fj[b])
            rows.append((cell - (gi == a) * fj[b] - fi[a] * (gj == b)) / n)
        theta, jac = np.asarray(thetas), np.asarray(rows)
        cov = jac @ self.cov @ jac.T
        if self.sampling is not None:
            cov = cov + np.kron(_multinomial(fi)[:-1, :-1], _multinomial(fj)[:-1, :-1]) / n
        stat = float(theta @ np.linalg.lstsq(cov, theta, rcond=None)[0])
        return stat, dof, float(stats.chi2.sf(stat, dof))

    def _pooled(self, part: int, min_count: float) -> tuple[np.ndarray, int]:
        """Each cell's value index in ``part`` after pooling the values whose marginal estimate is
        below ``min_count`` or within ``POOL_BELOW_SE`` standard errors of 0 into one last value (kept only
        when it holds two values or more, or joins them to the smallest kept one), and the number
        of values left."""
        counts, variances = self.marginal(part)
        kept = (counts >= min_count) & (counts >= POOL_BELOW_SE * np.sqrt(np.maximum(variances, 0.0)))
        idx = self.index(part)
        if kept.all() or min_count <= 0:
            return idx, int(counts.size)
        order = np.flatnonzero(kept)
        new = np.full(counts.size, order.size, dtype=np.int64)
        new[order] = np.arange(order.size)
        k = order.size + 1
        if (~kept).sum() == 1 and order.size:   # a lone rare value goes in with the smallest kept one
            new[~kept] = new[order[np.argmin(counts[order])]]
            k = order.size
        return new[idx], int(k)


def _multinomial(f: np.ndarray) -> np.ndarray:
    """diag π − ππᵀ at the shares f clipped at 0 and normalised (one draw's covariance)."""
    c = np.clip(f, 0.0, None)
    pi = c / c.sum() if c.sum() > 0 else np.full(c.shape, 1.0 / c.size)
    return np.diag(pi) - np.outer(pi, pi)


def estimate_joint(spec: MetricSpec, sketch: Sketch) -> JointEstimate:
    """Cell counts and their plug-in covariance from a joint metric's (merged) sketch."""
    if spec.parts is None:
        raise EstimationError(f"metric {spec.name!r} is not a joint metric")
    n = sketch.total_reports
    if n <= 0:
        raise EstimationError(f"metric {spec.name!r}: no reports in the selected window(s)")
    proto = server_half(spec)
    est = proto.estimate(sketch)
    counts = np.asarray(est.counts, dtype=np.float64)
    cov = count_covariance(proto, n, counts, diagonal=est.variances)
    return JointEstimate(spec.joint, counts, cov, n, sampling=sampling_covariance(counts, n),
                         support=np.asarray(proto.support_counts(sketch), dtype=np.float64),  # type: ignore[attr-defined]
                         protocol=proto)


def _share_pairs(k: int) -> list[tuple[int, int]]:
    """(target, given) part pairs, grouped by the given part: P(crashed | os) before P(os | crashed)."""
    return sorted(itertools.permutations(range(k), 2), key=lambda tg: (tg[1], tg[0]))


def _cell_rows(je: JointEstimate, confidence: float) -> list[dict[str, Any]]:
    """The cells: Wald intervals made exact where the support count is concentrated, and the
    exact binomial tail of "count = 0" (the frequency frames' own, estimators.intervals)."""
    n, var = je.n, np.maximum(np.diag(je.cov), 0.0)
    proto, support = je.protocol, je.support
    p_star, q_star = (float(proto.p), float(proto.q)) if proto is not None else (None, None)  # type: ignore[attr-defined]
    low, high = count_intervals(je.counts, var, support, n, p_star, q_star, confidence)
    if support is not None and q_star is not None:
        p_value = zero_count_p_values(support, n, q_star)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            p_value = stats.norm.sf(je.counts / np.sqrt(var))
    return [dict(statistic="count", value=label, estimate=c, std_err=math.sqrt(v), ci_low=lo, ci_high=hi,
                 p_value=float(pv))
            for label, c, v, lo, hi, pv in zip(je.domain.labels(), je.counts, var, low, high, p_value)]


def _marginal_rows(je: JointEstimate, part: int, confidence: float) -> list[dict[str, Any]]:
    """A part's marginal counts: Wald on the cells' covariance, exact where the summed support
    count's law is known (``marginal_model``) and concentrated."""
    info = je.domain.parts[part]
    counts, variances = je.marginal(part)
    variances = np.maximum(variances, 0.0)
    cells = je.domain.size // je.domain.shape[part]
    model = marginal_model(je.protocol, cells, je.n) if je.protocol is not None and je.support is not None \
        else None
    if model is None:
        low, high = count_intervals(counts, variances, None, je.n, None, None, confidence)
    else:
        p_star, q_star, trials = model
        idx = je.index(part)
        support = np.array([je.support[idx == a].sum() for a in range(je.domain.shape[part])])  # type: ignore[index]
        from .intervals import exact_small_counts, wald_interval

        low, high = wald_interval(counts, variances, je.n, confidence)
        low, high = exact_small_counts(low, high, support, je.n, p_star, q_star, confidence, False,
                                       counts=counts, trials=trials)
    return [dict(statistic=f"count {info.name}", value=label, estimate=c, std_err=math.sqrt(v), ci_low=lo,
                 ci_high=hi, p_value=math.nan) for label, c, v, lo, hi in zip(info.labels, counts, variances, low, high)]


def _rows(je: JointEstimate, confidence: float) -> list[dict[str, Any]]:
    """Every statistic of the joint frame (joint_frame's docstring)."""
    z = z_value(confidence)
    parts = je.domain.parts
    out = _cell_rows(je, confidence)
    for k in range(len(parts)):
        out += _marginal_rows(je, k, confidence)
    for t, g in _share_pairs(len(parts)):
        for b, a in itertools.product(range(je.domain.shape[g]), range(je.domain.shape[t])):
            r, s, lo, hi, unbounded = je.share(t, a, g, b, z)
            out.append(dict(statistic=f"P({parts[t].name} | {parts[g].name})",
                            value=f"{parts[t].labels[a]} {SEPARATOR} {parts[g].labels[b]}",
                            estimate=r, std_err=s, ci_low=lo, ci_high=hi, p_value=math.nan,
                            ci_unbounded=unbounded))
    for m, g in itertools.permutations(range(len(parts)), 2):
        if parts[m].kind != "numeric":
            continue
        for b in range(je.domain.shape[g]):
            r, s, lo, hi, unbounded = je.mean(m, g, b, z)
            out.append(dict(statistic=f"mean {parts[m].name} | {parts[g].name}", value=parts[g].labels[b],
                            estimate=r, std_err=s, ci_low=lo, ci_high=hi, p_value=math.nan,
                            ci_unbounded=unbounded))
    for i, j in itertools.combinations(range(len(parts)), 2):
        w, dof, p = je.independence(i, j)   # rare values pooled (docs/math.md §13, "Test of independence")
        out.append(dict(statistic=f"independence {parts[i].name}, {parts[j].name}",
                        value=f"chi2 (df {dof})", estimate=w, std_err=math.nan, ci_low=math.nan,
                        ci_high=math.nan, p_value=p))
    return out


def joint_frame(spec: MetricSpec, sketch: Sketch, *, confidence: float = 0.95) -> pd.DataFrame:
    """The breakdown of a joint metric as one long frame (``statistic`` tells rows apart):

    - ``count``: each cell ("ios|true"), unbiased, with the frequency frames' interval (Wald,
      exact where the support count is concentrated) and exact p-value of "count = 0";
    - ``count PART``: each part's marginal (a sum of cells, variance from the covariance; exact
      where the summed support count's law is known and concentrated);
    - ``P(T | G)``: the population's share of T = a among devices with G = b (value "a | b"), the
      ratio of the cell sums clipped to [0, 1] (empty when the category's estimate is not
      positive), delta-method std err and Fieller interval within [0, 1];
    - ``mean NUM | G``: a bucketed numeric part's population mean per value of G (the mean of the
      bucket midpoints; its Fieller interval widened by the plug-in bucketing bias, so it is for
      the actual mean; half the widest bucket bounds that bias: ``attrs["mean_bias_bound"]``);
    - ``independence A, B``: the Wald χ² statistic and p-value of "A and B are independent in
      the population", on the full table (``JointEstimate.independence`` with its pooling of rare
      values is the honest form on sparse tables; docs/math.md §13).

    ``detected``: cells whose count is non-zero by Holm's test at 5 % (as frequency frames);
    None (empty in CSV and the table, null in JSON) on every other row — no count test was run
    there (the independence row's test is its ``p_value``). ``ci_unbounded``: True on a share or
    mean whose Fieller confidence set is unbounded (the interval is then the whole admissible
    range, and says nothing), False on the other shares and means, None elsewhere.
    """
    if not 0 < confidence < 1:
        raise EstimationError(f"confidence must be between 0 and 1 (exclusive), got {confidence}")
    je = estimate_joint(spec, sketch)
    df = pd.DataFrame(_rows(je, confidence), columns=JOINT_COLUMNS)
    cells = (df["statistic"] == "count").to_numpy()
    detected = np.full(len(df), None, dtype=object)
    detected[cells] = [bool(x) for x in detect(df.loc[cells, "p_value"].to_numpy(float), 0.05, "fwer")]
    df["detected"] = detected
    ratio = df["statistic"].str.startswith(("P(", "mean ")).to_numpy()
    df["ci_unbounded"] = [bool(u) if r else None for u, r in zip(df["ci_unbounded"], ratio)]
    proto = server_half(spec)
    df.attrs.update(metric=spec.name, fingerprint=spec.fingerprint, protocol=proto.name,
                    epsilon=proto.epsilon, n_reports=je.n, confidence=confidence, kind="joint",
                    joint_parts=[p.to_toml() for p in spec.parts or ()],
                    mean_bias_bound={p.name: max(b - a for a, b in zip(p.edges, p.edges[1:])) / 2
                                     for p in spec.parts or () if p.kind == "numeric"},
                    interval_method="Wald, exact where a support count is concentrated (counts); Fieller, "
                                    "with the devices' sampling (shares, means; means widened by the "
                                    "bucketing bias)",
                    target="counts: these devices; shares, means, independence: their population")
    return df


def joint_truth(parts: list[dict[str, Any]], cell_counts: dict[str, float],
                statistics: list[str], values: list[str]) -> list[float]:
    """The true value of each (statistic, value) row of a joint frame, from true cell counts
    (``ldpt simulate --truth`` of a joint metric: value,count per cell)."""
    from client_sdk.joint import parts_from_tables

    try:
        domain = JointDomain(parts_from_tables(parts))
    except ValueError as exc:
        raise EstimationError(f"the frame's joint_parts are not valid: {exc}") from None
    c = np.array([cell_counts.get(label, 0.0) for label in domain.labels()], dtype=np.float64)
    truth = JointEstimate(domain, c, np.zeros((c.size, c.size)), int(round(c.sum())))
    table: dict[tuple[str, str], float] = {}
    for row in _rows_exact(truth):
        table[row[0], row[1]] = row[2]
    return [table.get((s, v), math.nan) for s, v in zip(statistics, values)]


def _rows_exact(je: JointEstimate) -> list[tuple[str, str, float]]:
    """(statistic, value, true value) of the count, share and mean rows, from exact counts."""
    parts: tuple[JointPart, ...] = je.domain.parts
    out = [("count", label, float(c)) for label, c in zip(je.domain.labels(), je.counts)]
    for k, part in enumerate(parts):
        m, _ = je.marginal(k)
        out += [(f"count {part.name}", label, float(c)) for label, c in zip(part.labels, m)]
    for t, g in itertools.permutations(range(len(parts)), 2):
        for b, a in itertools.product(range(je.domain.shape[g]), range(je.domain.shape[t])):
            out.append((f"P({parts[t].name} | {parts[g].name})",
                        f"{parts[t].labels[a]} {SEPARATOR} {parts[g].labels[b]}", je.share(t, a, g, b, 0.0)[0]))
    for m, g in itertools.permutations(range(len(parts)), 2):
        if parts[m].kind == "numeric":
            out += [(f"mean {parts[m].name} | {parts[g].name}", parts[g].labels[b], je.mean(m, g, b, 0.0)[0])
                    for b in range(je.domain.shape[g])]
    return out
