"""Did it change? Per-value differences between two windows (or ranges) with tests.

For a frequency metric (and a histogram metric's buckets) the compared quantity is the
proportion π_v of devices holding value v in the population each window's devices are drawn
from. Its estimate π̂_v = ĉ_v / n has two sources of error: the randomisation (the protocol's
variance of ĉ_v given the devices, SE(ĉ_v)²/n²) and which devices happened to report (a
multinomial draw, π_v(1 − π_v)/n). Windows A and B hold disjoint reports, randomised
independently, so

    Δ̂_v = π̂_v(B) − π̂_v(A),
    SE(Δ̂_v)² = Σ_{W=A,B} [ SE(ĉ_v(W))²/n_W² + π̃_v(W)(1 − π̃_v(W))/n_W ],   π̃ = π̂ clipped to [0, 1],

with the Wald interval Δ̂_v ± z·SE. The two-sided p-value of "π_v(A) = π_v(B)" is, for a pure
protocol's single windows with a concentrated support count (plug-in SD below 10 in either),
Fisher's exact test of the two support counts (``_exact_p_values``), else 2·(1 − Φ(|Δ̂_v| / SE₀))
with SE₀ the same formula at the pooled proportion (``_null_variance``). Δ̂_v is unbiased
because each π̂ is (the protocol's unbiased count estimator). Without the sampling term, two windows drawn from one distribution would look
different by their devices alone (at ε = 2 and d = 20 the variance of the largest value's
difference is ~25% larger than the randomisation's). If the very same devices report in both
windows, the sampling term makes the test conservative. A mean metric compares its mean the
same way; its standard error, from the reports' own spread, already holds both terms.
``changed`` applies the project's one multiple-testing control over the values
(``estimators.multiple_testing``): Holm for ``fwer`` — the chance that any unchanged value is
flagged is at most α — or Benjamini–Hochberg for ``fdr`` (docs/guide-analysts.md, "Changes").

Ranges of a memoised metric (docs/math.md §10a): the same devices repeat their permanent noise
in every window, so within a side the windows are not independent, and its SE(ĉ_v(W)) is the
range bound of ``estimators.memo_range``. Across the sides that noise is shared, never opposed
(one memo key: the same draw; different keys: independent draws), so the covariance of the two
sides' permanent errors is non-negative and leaving it out of SE(Δ̂_v)² can only widen the
interval. Summed sketches with independent-report variances flagged 0.80 of 30-day L-GRR
comparisons with values redrawn at 0.05/day (ε₁ = 2, ε∞ = 3), where nothing changed.

Power: a single test at level α detects a shift of δ standard errors with probability
≈ Φ(δ − z_{1−α/2}) (≈ 85% at δ = 3, α = 0.05, read off the ``p_value`` column); the
family-wise flag over M values needs δ ≈ z_{1−α/(2M)} + 0.84 for 80% (≈ 4.4 at M = 100).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from client_sdk.errors import EstimationError
from client_sdk.registry import Kind, MetricSpec
from sketches import server_half
from sketches.base import Sketch

from .frequency import estimate_frame
from .intervals import EXACT_BELOW_SD, z_value
from .memo_range import is_memoised, range_frame
from .multiple_testing import check_control, detect

COLUMNS = ["value", "estimate_a", "estimate_b", "difference", "std_err", "ci_low", "ci_high",
           "p_value", "changed"]
__all__ = ["COLUMNS", "compare_frame", "required_shift"]


def required_shift(n_tests: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """Shift (in standard errors of the difference) the family-wise flag detects with ``power``."""
    return float(stats.norm.isf(alpha / (2 * max(1, n_tests))) + stats.norm.ppf(power))


def _proportion_variance(count_se: np.ndarray, proportion: np.ndarray, n: int) -> np.ndarray:
    """Var(π̂) = randomisation (SE(ĉ)/n)² + sampling of the devices π̃(1 − π̃)/n."""
    clipped = np.clip(proportion, 0.0, 1.0)
    return (count_se / n) ** 2 + clipped * (1.0 - clipped) / n


def _support_counts(spec: MetricSpec, sketch: Sketch) -> np.ndarray | None:
    """Each value's support count Σᵢ 1[v ∈ S(yᵢ)] where it is Bin(n, λ_v) with λ_v the same in
    two windows drawn from one population, else None: the server half's ``support_counts`` (a
    pure protocol's; OLH's, Wang et al. 2017)."""
    counts = server_half(spec).support_counts(sketch)
    return None if counts is None else np.asarray(counts, dtype=np.float64)


def _exact_p_values(spec: MetricSpec, sketch_a: Sketch, sketch_b: Sketch, fa: pd.DataFrame, fb: pd.DataFrame,
                    windows_a: Sequence[tuple[str, Sketch]] | None,
                    windows_b: Sequence[tuple[str, Sketch]] | None) -> np.ndarray | None:
    """Fisher's exact test of "π_v(A) = π_v(B)" for a pure protocol's single windows (NaN where
    both windows' support counts have a plug-in SD of ``EXACT_BELOW_SD`` or more), else None.

    Devices drawn from a population with share π_v, each reporting once with fresh coins, support
    v independently with probability λ = q* + (p* − q*)·π_v, so a window's support count is exactly
    Bin(n_W, λ_W), and the null is λ_A = λ_B. Given the total t = S_A + S_B, S_A is then
    Hypergeometric(n_A + n_B, t, n_A) whatever λ, and the two-sided p-value 2·min(P(≤ S_A),
    P(≥ S_A)) is valid at every n (a normal test is not: a 300-report window's support counts of
    rare values are skewed, and Holm's family-wise rate over 20 values reached 0.065–0.071 with hr
    at ε = 3 against 30,000 reports).

    OLH's support counts S(v) = Σ_s T[s, H_s(v)] are binomial too (``_support_counts``), and its
    weighted least-squares estimate, though unbiased with a right standard error on average, is
    skewed at a few hundred reports (skewness 0.1–0.33 at ε = 3, d = 20, n = 300): the normal test
    flagged 0.096–0.110 of unchanged 300 vs 3,000 or 30,000 comparisons, and it takes this test."""
    if spec.is_mean or "bias_bounds" in fa.attrs or "bias_bounds" in fb.attrs:
        return None
    for windows in (windows_a, windows_b):
        if windows is not None and is_memoised(spec) and sum(s.total_reports > 0 for _, s in windows) > 1:
            return None      # a memoised range: its reports are not independent
    counts = [_support_counts(spec, sketch) for sketch in (sketch_a, sketch_b)]
    if counts[0] is None or counts[1] is None:
        return None
    s_a, s_b = (np.rint(c) for c in counts)
    n_a, n_b = int(sketch_a.total_reports), int(sketch_b.total_reports)
    total = s_a + s_b
    low = stats.hypergeom.cdf(s_a, n_a + n_b, total, n_a)
    high = stats.hypergeom.sf(s_a - 1, n_a + n_b, total, n_a)
    exact = np.minimum(1.0, 2.0 * np.minimum(low, high))
    # where both support counts are spread out the normal score test is as good and not as
    # conservative (the doubled tail of a discrete law holds its point mass twice)
    spread = np.minimum(*(np.sqrt(np.clip(s, 0, n_w) * (1 - np.clip(s, 0, n_w) / max(n_w, 1)))
                          for s, n_w in ((s_a, n_a), (s_b, n_b))))
    return np.where(spread < EXACT_BELOW_SD, exact, np.nan)


def _null_variance(spec: MetricSpec, fa: pd.DataFrame, fb: pd.DataFrame, a: np.ndarray, b: np.ndarray,
                   n_a: int, n_b: int, var: np.ndarray) -> np.ndarray:
    """Var(Δ̂_v) under "π_v(A) = π_v(B)", at the pooled π̄ = (n_A·π̂_A + n_B·π̂_B)/(n_A + n_B).

    Each side's plug-in variance at its own estimate correlates with that estimate — a small side's
    π̂ near 0 (or below it, clipped) drops its sampling term π(1 − π)/n, and for Hadamard response
    the randomisation's variance falls as the count rises — so with unequal windows the test's
    level drifted (hr, ε = 3, 300 vs 30,000 reports: 0.075–0.096 flagged, per value up to 0.083).
    Under the null both sides share π, which the pooled estimate pins down from the larger side,
    so the test's variance is evaluated there (a score test). For pure protocols the randomisation
    variance is recomputed at the pooled count; other protocols, and memoised ranges, keep each
    side's own (their variance is not a known function of the count alone: the server half's
    ``variance_from_count``)."""
    pooled = np.clip((n_a * a + n_b * b) / (n_a + n_b), 0.0, 1.0)
    proto = server_half(spec)
    ranged = "range_variance" in fa.attrs or "range_variance" in fb.attrs
    out = np.zeros(pooled.shape)
    for n_w, frame in ((n_a, fa), (n_b, fb)):
        if proto.variance_from_count and not ranged and "bias_bounds" not in frame.attrs:
            rand = proto.variance(n_w, pooled * n_w) / (n_w * n_w)
        else:
            rand = (frame["std_err"].to_numpy(float) / n_w) ** 2
        out += rand + pooled * (1.0 - pooled) / n_w
    return np.where(np.isfinite(out), out, var)


def _side_frame(spec: MetricSpec, sketch: Sketch, windows: Sequence[tuple[str, Sketch]] | None,
                confidence: float) -> pd.DataFrame:
    """One side's estimate: a memoised range through its permanent-noise bound."""
    if windows is not None and is_memoised(spec) and sum(s.total_reports > 0 for _, s in windows) > 1:
        return range_frame(spec, windows, confidence=confidence)
    return estimate_frame(spec, sketch, confidence=confidence)


def compare_frame(spec: MetricSpec, sketch_a: Sketch, sketch_b: Sketch, *, label_a: str, label_b: str,
                  confidence: float = 0.95, simultaneous: bool = False, alpha: float = 0.05,
                  control: str = "fwer", windows_a: Sequence[tuple[str, Sketch]] | None = None,
                  windows_b: Sequence[tuple[str, Sketch]] | None = None) -> pd.DataFrame:
    """One row per value (or ``mean``): both estimates, their difference, interval, p-value.

    ``windows_a``/``windows_b``: the per-window sketches of a side that is a range. A range of a
    memoised metric is then estimated by ``estimators.memo_range.range_frame`` (module docstring)."""
    check_control(control)
    if not 0 < alpha < 1:
        raise EstimationError(f"alpha must be between 0 and 1 (exclusive), got {alpha}")
    if spec.kind is Kind.STRING:
        raise EstimationError(f"metric {spec.name!r} is a string metric: compare works on boolean, "
                              "categorical and numeric metrics")
    for label, sketch in ((label_a, sketch_a), (label_b, sketch_b)):
        if sketch.total_reports == 0:
            raise EstimationError(f"no reports of {spec.name!r} in {label}")
    fa, fb = (_side_frame(spec, s, w, confidence) for s, w in ((sketch_a, windows_a), (sketch_b, windows_b)))
    n_a, n_b = int(sketch_a.total_reports), int(sketch_b.total_reports)
    if spec.is_mean:
        fa, fb = (f[f["statistic"] == "mean"] for f in (fa, fb))
        values = ["mean"]
        a, b = fa["estimate"].to_numpy(float), fb["estimate"].to_numpy(float)
        var = fa["std_err"].to_numpy(float) ** 2 + fb["std_err"].to_numpy(float) ** 2
        scale = "mean"
    else:
        if spec.is_histogram:
            fa, fb = (f[f["statistic"] == "count"] for f in (fa, fb))
        values = list(fa["value"])
        a, b = fa["proportion"].to_numpy(float), fb["proportion"].to_numpy(float)
        var = _proportion_variance(fa["std_err"].to_numpy(float), a, n_a) + \
            _proportion_variance(fb["std_err"].to_numpy(float), b, n_b)
        scale = "proportion"
    diff = b - a
    se = np.sqrt(var)
    null_se = se if scale == "mean" else np.sqrt(_null_variance(spec, fa, fb, a, b, n_a, n_b, var))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(null_se > 0, np.abs(diff) / null_se, np.where(diff == 0, 0.0, np.inf))
    p_value = 2 * stats.norm.sf(z)
    exact = _exact_p_values(spec, sketch_a, sketch_b, fa, fb, windows_a, windows_b)
    if exact is not None:
        p_value = np.where(np.isnan(exact), p_value, exact)
    half = z_value(confidence, len(values) if simultaneous else 1) * se
    df = pd.DataFrame({
        "value": values, "estimate_a": a, "estimate_b": b, "difference": diff, "std_err": se,
        "ci_low": diff - half, "ci_high": diff + half, "p_value": p_value,
        "changed": detect(p_value, alpha, control),
    }, columns=COLUMNS)
    df.attrs.update(metric=spec.name, fingerprint=spec.fingerprint, protocol=server_half(spec).name,
                    epsilon=server_half(spec).epsilon, a=label_a, b=label_b, n_a=n_a, n_b=n_b,
                    confidence=confidence, simultaneous=simultaneous, alpha=alpha, control=control,
                    scale=scale, kind="compare")
    return df
