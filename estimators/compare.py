"""Did it change? Per-value differences between two windows (or ranges) with tests.

For a frequency metric (and a histogram metric's buckets) the compared quantity is the
proportion π_v of devices holding value v in the population each window's devices are drawn
from. Its estimate π̂_v = ĉ_v / n has two sources of error: the randomisation (the protocol's
variance of ĉ_v given the devices, SE(ĉ_v)²/n²) and which devices happened to report (a
multinomial draw, π_v(1 − π_v)/n). Windows A and B hold disjoint reports, randomised
independently, so

    Δ̂_v = π̂_v(B) − π̂_v(A),
    SE(Δ̂_v)² = Σ_{W=A,B} [ SE(ĉ_v(W))²/n_W² + π̃_v(W)(1 − π̃_v(W))/n_W ],   π̃ = π̂ clipped to [0, 1],

with the Wald interval Δ̂_v ± z·SE and the two-sided p-value 2·(1 − Φ(|Δ̂_v| / SE)) of
"π_v(A) = π_v(B)"; Δ̂_v is unbiased because each π̂ is (the protocol's unbiased count
estimator). Without the sampling term, two windows drawn from one distribution would look
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
from client_sdk.protocols.base import Sketch
from client_sdk.registry import Kind, MetricSpec

from .frequency import estimate_frame
from .intervals import z_value
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
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, np.abs(diff) / se, np.where(diff == 0, 0.0, np.inf))
    p_value = 2 * stats.norm.sf(z)
    half = z_value(confidence, len(values) if simultaneous else 1) * se
    df = pd.DataFrame({
        "value": values, "estimate_a": a, "estimate_b": b, "difference": diff, "std_err": se,
        "ci_low": diff - half, "ci_high": diff + half, "p_value": p_value,
        "changed": detect(p_value, alpha, control),
    }, columns=COLUMNS)
    df.attrs.update(metric=spec.name, fingerprint=spec.fingerprint, protocol=spec.protocol_impl.name,
                    epsilon=spec.protocol_impl.epsilon, a=label_a, b=label_b, n_a=n_a, n_b=n_b,
                    confidence=confidence, simultaneous=simultaneous, alpha=alpha, control=control,
                    scale=scale, kind="compare")
    return df
