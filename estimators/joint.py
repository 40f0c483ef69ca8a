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

Ratios use Fieller's interval (Fieller 1954): the set of R with (N − R·D)² ≤ z²·Var(N − R·D),
exact for a bivariate normal (N, D), so it keeps its coverage when the denominator is noisy
(a small category), where the delta method's symmetric interval does not; when D is not
significantly non-zero the set is unbounded and the interval is the whole admissible range.
The standard error shown is the delta method's (the usual first-order summary).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from client_sdk.errors import EstimationError
from client_sdk.joint import SEPARATOR, JointDomain, JointPart
from client_sdk.protocols.base import Protocol, Sketch
from client_sdk.registry import MetricSpec

from .intervals import z_value
from .multiple_testing import detect

JOINT_COLUMNS = ["statistic", "value", "estimate", "std_err", "ci_low", "ci_high", "p_value", "detected"]
__all__ = ["JOINT_COLUMNS", "JointEstimate", "count_covariance", "estimate_joint", "fieller",
           "joint_frame", "joint_truth", "pair_probabilities"]


def pair_probabilities(proto: Protocol) -> tuple[float, float, float, float]:
    """(p*, q*, r₁, r₂) of a protocol a joint metric may use (module docstring)."""
    name, d = proto.name, proto.domain_size
    p, q = float(proto.p), float(proto.q)  # type: ignore[attr-defined]
    if name == "grr":
        return p, q, 0.0, 0.0
    if name in ("oue", "sue"):
        return p, q, p * q, q * q
    if name == "ss":
        s, pi = int(proto.s), float(proto.pi)  # type: ignore[attr-defined]
        r1 = pi * (s - 1) / (d - 1)
        r2 = (pi * (s - 1) * (s - 2) + (1 - pi) * s * (s - 1)) / ((d - 1) * (d - 2)) if d > 2 else 0.0
        return p, q, r1, r2
    raise EstimationError(f"protocol {name!r}: the covariance of its count estimates is not derived; a "
                          "joint metric uses grr, oue, sue or ss")


def count_covariance(proto: Protocol, n: int, counts: np.ndarray,
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
            bounds: tuple[float, float]) -> tuple[float, float]:
    """Fieller's interval for num/den, intersected with ``bounds`` (the whole of ``bounds``
    when the denominator is not significantly non-zero: the confidence set is unbounded)."""
    a = den * den - z * z * v_den
    b = num * den - z * z * cov
    c = num * num - z * z * v_num
    disc = b * b - a * c
    if a <= 0 or disc < 0:
        return bounds
    root = math.sqrt(disc)
    low, high = (b - root) / a, (b + root) / a
    return max(bounds[0], min(low, bounds[1])), min(bounds[1], max(high, bounds[0]))


@dataclasses.dataclass(frozen=True)
class JointEstimate:
    """Cell counts of a joint metric (row-major over the parts) and their covariance."""

    domain: JointDomain
    counts: np.ndarray      # ĉ, shape (d,)
    cov: np.ndarray         # Cov-hat(ĉ), shape (d, d)
    n: int

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
              bounds: tuple[float, float]) -> tuple[float, float, float, float]:
        """(estimate, delta-method std err, Fieller low, high) of (w_num·ĉ)/(w_den·ĉ)."""
        num, v_num = self.linear(w_num)
        den, v_den = self.linear(w_den)
        c = float(w_num @ self.cov @ w_den)
        if den <= 0:   # no devices in the category, as far as the data can tell
            return math.nan, math.nan, *bounds
        r = num / den
        se = math.sqrt(max(v_num - 2 * r * c + r * r * v_den, 0.0)) / den
        return min(max(r, bounds[0]), bounds[1]), se, *fieller(num, den, v_num, v_den, c, z, bounds)

    def share(self, target: int, a: int, given: int, b: int, z: float) -> tuple[float, float, float, float]:
        """P(part ``target`` = a | part ``given`` = b) (other parts summed over)."""
        it, ig = self.index(target), self.index(given)
        den = (ig == b).astype(np.float64)
        return self.ratio(den * (it == a), den, z, (0.0, 1.0))

    def share_difference(self, target: int, a: int, given: int, b1: int, b2: int) -> tuple[float, float, float]:
        """P(T = a | G = b1) − P(T = a | G = b2): (difference, delta-method std err, two-sided
        Wald p-value); the gradient of each ratio N/D is (w_N − R·w_D)/D, so the std err uses
        the cells' full covariance (both shares share no cell, but GRR/SS cells covary)."""
        it, ig = self.index(target), self.index(given)
        grads, diff = [], 0.0
        for sign, b in ((1.0, b1), (-1.0, b2)):
            w_den = (ig == b).astype(np.float64)
            w_num = w_den * (it == a)
            den = float(w_den @ self.counts)
            if den <= 0:
                return math.nan, math.nan, math.nan
            r = float(w_num @ self.counts) / den
            diff += sign * r
            grads.append(sign * (w_num - r * w_den) / den)
        g = grads[0] + grads[1]
        se = math.sqrt(max(float(g @ self.cov @ g), 0.0))
        return diff, se, float(2 * stats.norm.sf(abs(diff) / se)) if se > 0 else math.nan

    def mean(self, numeric: int, given: int, b: int, z: float) -> tuple[float, float, float, float]:
        """Mean of the bucket midpoints of part ``numeric`` among cells with part ``given`` = b."""
        part = self.domain.parts[numeric]
        mids = np.asarray(part.midpoints)[self.index(numeric)]
        den = (self.index(given) == b).astype(np.float64)
        return self.ratio(den * mids, den, z, (float(part.edges[0]), float(part.edges[-1])))

    def independence(self, i: int, j: int) -> tuple[float, int, float]:
        """Wald test that parts i and j are independent: (statistic, df, p-value).

        θ_ab = f̂(a, b) − f̂(a, ·) f̂(·, b) for a < kᵢ − 1, b < kⱼ − 1 (the rest follow), with
        Cov(θ) = J Σ Jᵀ / n² (delta method, J the Jacobian in ĉ); W = θᵀ Cov(θ)⁻¹ θ is
        χ² with (kᵢ − 1)(kⱼ − 1) degrees of freedom under independence.
        """
        ki, kj = self.domain.shape[i], self.domain.shape[j]
        ii, ij = self.index(i), self.index(j)
        n = float(self.n)
        fi = np.array([self.counts[ii == a].sum() for a in range(ki)]) / n
        fj = np.array([self.counts[ij == b].sum() for b in range(kj)]) / n
        thetas, rows = [], []
        for a, b in itertools.product(range(ki - 1), range(kj - 1)):
            cell = ((ii == a) & (ij == b)).astype(np.float64)
            thetas.append(self.counts @ cell / n - fi[a] * fj[b])
            rows.append((cell - (ii == a) * fj[b] - fi[a] * (ij == b)) / n)
        theta, jac = np.asarray(thetas), np.asarray(rows)
        cov = jac @ self.cov @ jac.T
        dof = (ki - 1) * (kj - 1)
        stat = float(theta @ np.linalg.lstsq(cov, theta, rcond=None)[0])
        return stat, dof, float(stats.chi2.sf(stat, dof))


def estimate_joint(spec: MetricSpec, sketch: Sketch) -> JointEstimate:
    """Cell counts and their plug-in covariance from a joint metric's (merged) sketch."""
    if spec.parts is None:
        raise EstimationError(f"metric {spec.name!r} is not a joint metric")
    n = sketch.total_reports
    if n <= 0:
        raise EstimationError(f"metric {spec.name!r}: no reports in the selected window(s)")
    proto = spec.protocol_impl
    est = proto.estimate(sketch)
    cov = count_covariance(proto, n, est.counts, diagonal=est.variances)
    return JointEstimate(spec.joint, np.asarray(est.counts, dtype=np.float64), cov, n)


def _share_pairs(k: int) -> list[tuple[int, int]]:
    """(target, given) part pairs, grouped by the given part: P(crashed | os) before P(os | crashed)."""
    return sorted(itertools.permutations(range(k), 2), key=lambda tg: (tg[1], tg[0]))


def _rows(je: JointEstimate, confidence: float) -> list[dict[str, Any]]:
    """Every statistic of the joint frame (joint_frame's docstring)."""
    z = z_value(confidence)
    parts, labels, n = je.domain.parts, je.domain.labels(), je.n
    out: list[dict[str, Any]] = []
    sd = np.sqrt(np.maximum(np.diag(je.cov), 0.0))
    for label, c, s in zip(labels, je.counts, sd):
        out.append(dict(statistic="count", value=label, estimate=c, std_err=s,
                        ci_low=max(0.0, c - z * s), ci_high=min(float(n), c + z * s),
                        p_value=float(stats.norm.sf(c / s)) if s > 0 else math.nan))
    for k, part in enumerate(parts):
        m, v = je.marginal(k)
        for label, c, var in zip(part.labels, m, v):
            s = math.sqrt(max(var, 0.0))
            out.append(dict(statistic=f"count {part.name}", value=label, estimate=c, std_err=s,
                            ci_low=max(0.0, c - z * s), ci_high=min(float(n), c + z * s), p_value=math.nan))
    for t, g in _share_pairs(len(parts)):
        for b, a in itertools.product(range(je.domain.shape[g]), range(je.domain.shape[t])):
            r, s, lo, hi = je.share(t, a, g, b, z)
            out.append(dict(statistic=f"P({parts[t].name} | {parts[g].name})",
                            value=f"{parts[t].labels[a]} {SEPARATOR} {parts[g].labels[b]}",
                            estimate=r, std_err=s, ci_low=lo, ci_high=hi, p_value=math.nan))
    for m, g in itertools.permutations(range(len(parts)), 2):
        if parts[m].kind != "numeric":
            continue
        for b in range(je.domain.shape[g]):
            r, s, lo, hi = je.mean(m, g, b, z)
            out.append(dict(statistic=f"mean {parts[m].name} | {parts[g].name}", value=parts[g].labels[b],
                            estimate=r, std_err=s, ci_low=lo, ci_high=hi, p_value=math.nan))
    for i, j in itertools.combinations(range(len(parts)), 2):
        w, dof, p = je.independence(i, j)
        out.append(dict(statistic=f"independence {parts[i].name}, {parts[j].name}",
                        value=f"chi2 (df {dof})", estimate=w, std_err=math.nan, ci_low=math.nan,
                        ci_high=math.nan, p_value=p))
    return out


def joint_frame(spec: MetricSpec, sketch: Sketch, *, confidence: float = 0.95) -> pd.DataFrame:
    """The breakdown of a joint metric as one long frame (``statistic`` tells rows apart):

    - ``count``: each cell ("ios|true"), unbiased, with its Wald interval;
    - ``count PART``: each part's marginal (a sum of cells, variance from the covariance);
    - ``P(T | G)``: the share of T = a among devices with G = b (value "a | b"), the ratio of
      the cell sums clipped to [0, 1] (empty when the category's estimate is not positive),
      delta-method std err and Fieller interval within [0, 1];
    - ``mean NUM | G``: a bucketed numeric part's mean per value of G (bucket midpoints; the
      bias from bucketing is at most half the widest bucket: ``attrs["mean_bias_bound"]``);
    - ``independence A, B``: the Wald χ² statistic and its p-value.

    ``detected``: cells whose count is non-zero by Holm's test at 5 % (as frequency frames);
    False on the other rows.
    """
    if not 0 < confidence < 1:
        raise EstimationError(f"confidence must be between 0 and 1 (exclusive), got {confidence}")
    je = estimate_joint(spec, sketch)
    df = pd.DataFrame(_rows(je, confidence), columns=JOINT_COLUMNS)
    cells = (df["statistic"] == "count").to_numpy()
    detected = np.zeros(len(df), dtype=bool)
    detected[cells] = detect(df.loc[cells, "p_value"].to_numpy(float), 0.05, "fwer")
    df["detected"] = detected
    proto = spec.protocol_impl
    df.attrs.update(metric=spec.name, fingerprint=spec.fingerprint, protocol=proto.name,
                    epsilon=proto.epsilon, n_reports=je.n, confidence=confidence, kind="joint",
                    joint_parts=[p.to_toml() for p in spec.parts or ()],
                    mean_bias_bound={p.name: max(b - a for a, b in zip(p.edges, p.edges[1:])) / 2
                                     for p in spec.parts or () if p.kind == "numeric"},
                    interval_method="Fieller (shares, means); Wald (counts)")
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
