"""Estimates of numeric metrics: a mean metric's mean/sum/n, a histogram metric's quantiles and mean.

Mean metrics (no ``buckets``): the protocol's ``estimate`` gives the mean of the normalised
value t in [−1, 1] and its variance from the reports' own spread (s²/n, so the standard error
is honest for any data). In the metric's units x = lo + (t + 1)(hi − lo)/2, so

    mean_x = lo + (mean_t + 1)·(hi − lo)/2,   SE_x = SE_t·(hi − lo)/2,
    sum    = n·mean_x,                        SE_sum = n·SE_x,

with intervals that hold at every n (estimators.mean_intervals: exact Clopper–Pearson for the
two-cell mechanisms, a score interval floored by the mechanism's own variance for the others),
mapped to the metric's units and intersected with [lo, hi] (the device clips every value into
the range, so the true mean lies there and clipping the interval cannot lose coverage). The
standard error is the reports' own spread, floored at the smallest exact per-report variance
(sketches.numeric.NumericServer.estimate), so reports that happen to agree do not give a zero SE.

Histogram metrics: the bucket frequencies come from the frequency oracle (estimators.frequency);
this module adds rows for the mean and the quantiles p10 ... p99, computed from the empirical
CDF at the bucket edges, F̂(e_{k+1}) = Σ_{i<=k} ĉ_i / n (see docs/guide-analysts.md).

* Quantile point estimate: the first bucket whose cumulative share reaches q, linearly
  interpolated inside the bucket (from the Norm-Sub CDF with ``--consistent``, which is then
  monotone and ends at 1).
* Quantile interval: invert a pointwise band F̂ ± z·SE on the *unbiased* CDF. The lower bound
  is the left edge of the first bucket whose upper band reaches q, the upper bound the right
  edge of the first bucket whose lower band reaches q. The interval misses the true quantile
  Q only if the upper band fails at the first edge at or above Q, or the lower band fails at
  some edge below Q (one-sided failures; edges far below Q, where F is well below q, almost
  never fail), so coverage is close to nominal or above, at bucket resolution.
* Mean: the bucket-midpoint approximation c + Σ (m_i − c) ĉ_i / n with c the range's midpoint
  (unbiased for the mean of the midpoints for any fixed c, since E[Σ ĉ_i] = n; centring keeps
  the noise of Σ ĉ_i — not exactly n for unary encodings and hashing — from being multiplied by
  the distance of the range from zero, and keeps GRR's spread free of cancellation).
  Every value lies within half a bucket width of its midpoint, so the midpoint mean differs
  from the true mean by at most b = Σ f_i w_i / 2 ≤ max w_i / 2; the interval is widened by
  the plug-in b (from the Norm-Sub shares), and b is reported in the frame's attrs.

Variances of sums of bucket estimates (``linear_variance``) depend on the oracle's correlation
structure: GRR and RR support exactly one value per report, so Σ a_v ĉ_v has variance at most
n·Var_π̂(a)/(p − q)² (law of total variance over the reports' support shares π̂); unary
encodings report each bit independently given the value, so the variance is Σ a_v² Var(ĉ_v);
for any other oracle the Cauchy–Schwarz bound (Σ |a_v| SE_v)² holds whatever the covariances
(conservative: wider intervals, never narrower).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from client_sdk.errors import EstimationError
from client_sdk.registry import MetricSpec
from sketches import server_half
from sketches.base import Sketch
from sketches.metric_arrays import denormalise, edge_array

from .consistency import norm_sub
from .intervals import z_value
from .mean_intervals import mean_interval

MEAN_COLUMNS = ["statistic", "estimate", "std_err", "ci_low", "ci_high"]
#: Quantiles a histogram metric's estimate reports (name, level).
QUANTILES = (("p10", 0.10), ("p25", 0.25), ("p50", 0.50), ("p75", 0.75), ("p90", 0.90),
             ("p99", 0.99))


def mean_frame(spec: MetricSpec, sketch: Sketch, *, confidence: float = 0.95) -> pd.DataFrame:
    """Rows mean, sum and n of a mean metric, in the metric's units, with intervals valid at every n."""
    proto = server_half(spec)
    est = proto.estimate(sketch)
    n = est.n
    if n <= 0:
        raise EstimationError(f"metric {spec.name!r}: no reports in the selected window(s)")
    lo, hi = spec.bounds
    half_width = (hi - lo) / 2.0
    mean = float(denormalise(spec, est.mean))
    se = math.sqrt(max(est.variance, 0.0)) * half_width if math.isfinite(est.variance) else math.inf
    t_low, t_high = mean_interval(proto, sketch, confidence)   # within [−1, 1]: never inverted
    mean_low = min(max(lo, float(denormalise(spec, t_low))), hi)
    mean_high = max(min(hi, float(denormalise(spec, t_high))), mean_low)
    df = pd.DataFrame({
        "statistic": ["mean", "sum", "n"],
        "estimate": [mean, n * mean, float(n)],
        "std_err": [se, n * se, 0.0],
        "ci_low": [mean_low, n * mean_low, float(n)],
        "ci_high": [mean_high, n * mean_high, float(n)],
    }, columns=MEAN_COLUMNS)
    df.attrs.update(metric=spec.name, fingerprint=spec.fingerprint, protocol=proto.name,
                    epsilon=proto.epsilon, n_reports=n, confidence=confidence, simultaneous=False,
                    post_processed=None, kind="numeric-mean", range=[lo, hi])
    return df


def _oracle_structure(spec: MetricSpec) -> str:
    """How the oracle's bucket estimates co-vary, its server half's ``count_structure``: "one"
    (GRR/RR: one supported bucket per report), "independent" (unary encodings: independent bits),
    or "any" (bound only)."""
    return server_half(spec).count_structure


def linear_variance(spec: MetricSpec, sketch: Sketch, variances: np.ndarray,
                    weights: np.ndarray) -> float:
    """Estimated Var[Σ_v a_v ĉ_v] for the weights a (shape (d,)); see the module docstring."""
    a = np.asarray(weights, dtype=np.float64)
    structure = _oracle_structure(spec)
    if structure == "one":
        proto = server_half(spec)
        n = sketch.total_reports
        share = np.asarray(proto.support_counts(sketch), dtype=np.float64) / n   # π̂_v, sums to 1
        spread = max(float((a * a) @ share - (a @ share) ** 2), 0.0)
        return n * spread / (proto.p - proto.q) ** 2
    if structure == "independent":
        return float((a * a) @ np.maximum(variances, 0.0))
    return float(np.abs(a) @ np.sqrt(np.maximum(variances, 0.0))) ** 2


def cumulative_variance(spec: MetricSpec, sketch: Sketch, variances: np.ndarray) -> np.ndarray:
    """``linear_variance`` of every prefix sum Σ_{i<=k} ĉ_i at once, in O(d) (d up to 10,000)."""
    structure = _oracle_structure(spec)
    if structure == "one":
        proto = server_half(spec)
        n = sketch.total_reports
        share = np.cumsum(np.asarray(proto.support_counts(sketch), dtype=np.float64) / n)
        return n * np.maximum(share - share * share, 0.0) / (proto.p - proto.q) ** 2
    if structure == "independent":
        return np.cumsum(np.maximum(variances, 0.0))
    return np.cumsum(np.sqrt(np.maximum(variances, 0.0))) ** 2


def histogram_rows(spec: MetricSpec, sketch: Sketch, freq: pd.DataFrame, variances: np.ndarray, *,
                   confidence: float, consistent: bool, simultaneous: bool = False) -> pd.DataFrame:
    """Rows for the mean and the quantiles of a histogram metric (columns of ``freq``);
    ``simultaneous``: Bonferroni over these 7 statistics, so all their intervals hold at once."""
    n = sketch.total_reports
    edges = edge_array(spec)
    widths = np.diff(edges)
    mids = (edges[:-1] + edges[1:]) / 2.0
    raw_counts = (freq["raw_estimate"] if "raw_estimate" in freq else freq["estimate"]).to_numpy(np.float64)
    raw_share = raw_counts / n
    shares = norm_sub(raw_share)   # plug-in distribution: non-negative, sums to 1
    z = z_value(confidence, 1 + len(QUANTILES) if simultaneous else 1)
    cdf_raw = np.cumsum(raw_share)                  # entry k sums buckets 0..k: F at e_{k+1}
    cdf_se = np.sqrt(cumulative_variance(spec, sketch, variances)) / n
    cdf_point = np.cumsum(shares) if consistent else cdf_raw
    rows = []

    lo, hi = spec.bounds
    centre = (lo + hi) / 2.0   # c in c + Σ (m_v − c) ĉ_v / n: see the module docstring
    offsets = mids - centre
    mean = centre + float(offsets @ raw_share)
    mean_se = math.sqrt(linear_variance(spec, sketch, variances, offsets)) / n
    bias_bound = float(shares @ widths) / 2.0
    half = z * mean_se + bias_bound
    rows.append(("mean", mean, mean_se, min(max(lo, mean - half), hi), max(min(hi, mean + half), lo)))
    for name, q in QUANTILES:
        point = _invert(cdf_point, edges, q)
        low = edges[_first_at_least(cdf_raw + z * cdf_se, q)]
        high = edges[_first_at_least(cdf_raw - z * cdf_se, q) + 1]
        rows.append((name, point, math.nan, float(low), float(high)))

    out = pd.DataFrame([{col: _blank(col) for col in freq.columns} for _ in rows],
                       columns=freq.columns)
    for i, (name, est, se, low, high) in enumerate(rows):
        out.at[i, "statistic"] = name
        out.at[i, "estimate"] = est
        out.at[i, "std_err"] = se
        out.at[i, "ci_low"] = low
        out.at[i, "ci_high"] = high
    out.attrs["mean_bias_bound"] = bias_bound
    return out


def _blank(column: str) -> object:
    return "" if column in ("value", "statistic") else (None if column == "detected" else math.nan)


def _first_at_least(cdf: np.ndarray, q: float) -> int:
    """Index of the first bucket whose cumulative share reaches q (the last bucket if none does)."""
    hits = np.flatnonzero(cdf >= q)
    return int(hits[0]) if hits.size else len(cdf) - 1


def _invert(cdf: np.ndarray, edges: np.ndarray, q: float) -> float:
    """The q-quantile of a CDF known at bucket edges, linear inside the crossing bucket."""
    k = _first_at_least(cdf, q)
    before = cdf[k - 1] if k > 0 else 0.0
    rise = cdf[k] - before
    frac = 1.0 if rise <= 0 else min(1.0, max(0.0, (q - before) / rise))
    return float(edges[k] + frac * (edges[k + 1] - edges[k]))


def with_histogram_rows(spec: MetricSpec, sketch: Sketch, freq: pd.DataFrame, variances: np.ndarray,
                        *, confidence: float, consistent: bool, simultaneous: bool = False) -> pd.DataFrame:
    """The frequency frame of a histogram metric with a leading ``statistic`` column ("count"
    for the bucket rows) and the mean and quantile rows appended, in the metric's units."""
    freq = freq.copy()
    freq.insert(0, "statistic", "count")
    extra = histogram_rows(spec, sketch, freq, variances, confidence=confidence, consistent=consistent,
                           simultaneous=simultaneous)
    df = pd.concat([freq, extra], ignore_index=True)
    df.attrs = dict(freq.attrs, kind="numeric-histogram", range=list(spec.bounds),
                    mean_bias_bound=extra.attrs["mean_bias_bound"],
                    quantile_method="inverted pointwise CDF band at the bucket edges")
    return df


__all__ = ["MEAN_COLUMNS", "QUANTILES", "cumulative_variance", "histogram_rows", "linear_variance",
           "mean_frame",
           "with_histogram_rows"]
