"""Estimates over a range of windows of a memoised metric: device-days, with honest intervals.

A memoised protocol (L-GRR, L-OSUE, LOLOHA, dBitFlipPM, memobitmean) draws a device's first-round
response once per memo key and repeats it in every report of that key, so the reports of one
device on different days are *not* independent: summing the windows' sketches and computing
the interval as for independent reports understates the variance (30-day coverage 0.47–0.91
instead of 0.95; docs/math.md, "Ranges of memoised metrics").

What a range estimates: ĉ(v) = Σ_t ĉ_t(v), the sum of the windows' unbiased estimates, is
unbiased for the **device-days** holding v (Σ_t c_t(v)); a mean metric's mean is the mean over
device-days. Sketches carry no device identities, so distinct devices are not estimable.

Its variance. Each window's error splits into a permanent part P_t (a function of the devices'
memoised responses and cohorts) and a fresh part F_t (second-round coins, independent of
everything else). Then, whatever the devices' values do from day to day,

    Var[Σ_t ĉ_t] = Var[Σ_t P_t] + Σ_t Var[F_t] <= (Σ_t SD[P_t])² + Σ_t Var[F_t]

(Minkowski: the SD of a sum is at most the sum of the SDs), with equality when no device's
value ever changes and every device reports every day. ``MemoisedServer.permanent_variance`` bounds
Var[P_t] per window — exactly for L-GRR and L-OSUE, by λ·Var[ĉ_t] otherwise — and the bound
grows with the permanent share, so an upper bound on it keeps the whole bound valid.

The interval is Wald on this bound; p-values and ``detected`` come from the same z. A single
window, and metrics whose protocol is not memoised, are estimated as before
(``estimators.frequency.estimate_frame``); so are per-window series (``--by window``), each
window's own estimate being exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from client_sdk.errors import EstimationError
from client_sdk.registry import Kind, MetricSpec
from sketches import server_half
from sketches.base import Sketch
from sketches.longitudinal import MemoisedServer

from .frequency import _apply_consistency, estimate_frame
from .intervals import z_value
from .multiple_testing import check_control, detect

if TYPE_CHECKING:  # the frames come from estimate_frame: this module needs no pandas of its own
    import pandas as pd

#: ``attrs["range_variance"]`` of a memoised range: how its standard errors were computed.
RANGE_VARIANCE = "memoised: sum of per-window permanent SDs, squared, plus fresh variances"

__all__ = ["RANGE_VARIANCE", "is_memoised", "range_frame", "range_variance", "with_rappor_range_warning"]


def is_memoised(spec: MetricSpec) -> bool:
    """Whether ``spec``'s reports repeat permanent noise across windows (a memoised protocol)."""
    return isinstance(server_half(spec), MemoisedServer)


def range_variance(permanent: Sequence[np.ndarray], total: Sequence[np.ndarray]) -> np.ndarray:
    """(Σ_t √P_t)² + Σ_t (V_t − P_t): the variance bound of a sum over windows (module docstring).

    ``permanent`` and ``total`` hold, per window, the (bounds on the) permanent and the total
    variance of that window's estimate (arrays of one shape)."""
    perm = [np.clip(np.asarray(p, dtype=np.float64), 0.0, None) for p in permanent]
    tot = [np.asarray(v, dtype=np.float64) for v in total]
    sd_sum = np.sum([np.sqrt(p) for p in perm], axis=0)
    fresh = np.sum([np.maximum(v - p, 0.0) for v, p in zip(tot, perm)], axis=0)
    return sd_sum * sd_sum + fresh


def _merged(spec: MetricSpec, sketches: Sequence[Sketch]) -> Sketch:
    total = server_half(spec).new_sketch()
    for s in sketches:
        total = total.merge(s)
    return total


def range_frame(spec: MetricSpec, sketches: Sequence[tuple[str, Sketch]], *, confidence: float = 0.95,
                simultaneous: bool = False, consistent: bool = False, alpha: float = 0.05,
                control: str = "fwer") -> pd.DataFrame:
    """The estimate frame of a memoised metric over the windows ``sketches`` (label, sketch).

    Columns and attrs as ``estimate_frame``'s, plus ``attrs["windows"]`` (the windows with
    reports) and ``attrs["range_variance"]``. With one window of reports it *is* that
    window's ``estimate_frame``."""
    proto = server_half(spec)
    if not isinstance(proto, MemoisedServer):
        raise EstimationError(f"metric {spec.name!r} is not memoised: estimate its merged sketch")
    if spec.kind is Kind.STRING:
        raise EstimationError(f"metric {spec.name!r}: memoised ranges of string metrics are not supported")
    check_control(control)
    used = [(w, s) for w, s in sketches if s.total_reports > 0]
    if not used:
        raise EstimationError(f"metric {spec.name!r}: no reports in the selected window(s)")
    merged = _merged(spec, [s for _, s in used])
    base = estimate_frame(spec, merged, confidence=confidence, simultaneous=simultaneous, alpha=alpha,
                          control=control, consistent=consistent and len(used) == 1)
    if len(used) == 1:
        return base
    estimates = [proto.estimate(s) for _, s in used]
    permanent = [proto.permanent_variance(s, e) for (_, s), e in zip(used, estimates)]
    if spec.is_mean:
        return _mean_range(spec, base, estimates, permanent, [w for w, _ in used], confidence)
    total = [np.asarray(e.variances, dtype=np.float64) for e in estimates]
    variances = range_variance(permanent, total)
    fresh = np.sum([np.maximum(v - np.clip(p, 0.0, None), 0.0) for v, p in zip(total, permanent)], axis=0)
    counts = np.sum([np.asarray(e.counts, dtype=np.float64) for e in estimates], axis=0)
    jump, rate = range_memo_events([memo_events(proto, s, e) for (_, s), e in zip(used, estimates)])
    freq = base[base["statistic"] == "count"].drop(columns="statistic").reset_index(drop=True) \
        if spec.is_histogram else base.copy()
    freq = _with_bound(freq, counts, variances, merged.total_reports, confidence, simultaneous,
                       alpha, control, memo=(jump, rate, fresh))
    if consistent:
        freq = _apply_consistency(freq, merged.total_reports)
    if spec.is_histogram:
        from .numeric import with_histogram_rows

        freq = with_histogram_rows(spec, merged, freq, variances, confidence=confidence,
                                   consistent=consistent, simultaneous=simultaneous)
    freq.attrs.update(windows=[w for w, _ in used], range_variance=RANGE_VARIANCE)
    return freq


def memo_events(proto: MemoisedServer, sketch: Sketch, estimate) -> tuple[np.ndarray, np.ndarray]:
    """(J, μ) of one window under "nobody holds v": a device whose *memoised* response supports v
    moves E[ĉ(v)] by J (one report) in every window it reports with that response, and about μ
    devices do so by chance (Poisson: each of the n devices' memo draws supports a given other
    value with the small probability q₁).

    - L-GRR, L-OSUE: J = λ/(P − Q), μ = n·q₁ (λ = p₂ − q₂, the chain's P, Q);
    - LOLOHA: per cohort s, J_s = λ·B[v, (s, H_s(v))]/(p' − q') (B the least-squares decoder) and
      μ_s = n_s·q₁; returned as μ = Σ μ_s and the variance-preserving J = (Σ μ_s J_s²/μ)^½;
    - dBitFlipPM: J = λ·n/(n_v (P − Q)) and μ = n_v·q₁ (n_v reports sample v's bucket).

    Zeros where the protocol has no such events (a numeric mean)."""
    par = proto.params  # type: ignore[attr-defined]
    lam = float(proto.second_round_keep)
    n = float(sketch.total_reports)
    name = getattr(proto, "name", "")
    if name in ("lgrr", "losue"):
        d = int(par.d)
        return np.full(d, lam / (par.p - par.q)), np.full(d, n * par.q1)
    if name == "loloha":
        n_s = np.asarray(sketch.reports, dtype=np.float64)
        B = proto._decoder(n_s).B                                      # type: ignore[attr-defined]
        _, row_of, _, _ = proto._design                                # type: ignore[attr-defined]
        d = int(par.d)
        own = B[np.arange(d)[None, :], row_of] * lam / (proto.p - proto.q)   # (m, d): J_s(v)
        mu_s = n_s * par.q1
        mu = float(mu_s.sum())
        if mu <= 0:
            return np.zeros(d), np.zeros(d)
        return np.sqrt(mu_s @ (own * own) / mu), np.full(d, mu)
    if name == "dbitflip":
        n_v, _ = proto.bucket_totals(sketch)                           # type: ignore[attr-defined]
        with np.errstate(divide="ignore", invalid="ignore"):
            jump = np.where(n_v > 0, lam * n / (n_v * (par.p - par.q)), 0.0)
        return jump, n_v * par.q1
    size = np.shape(getattr(estimate, "counts", np.zeros(0)))
    return np.zeros(size), np.zeros(size)


def range_memo_events(events: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The windows' (J_t, μ_t) as one range's (J, μ): a device that keeps its memoised response
    through the range and reports in every window moves the range's sum by J = Σ_t J_t, and
    μ = (Σ_t J_t √μ_t)²/J² keeps the variance of these events at the range bound's
    (Minkowski, as ``range_variance``). The fewer and larger the jumps, the heavier the upper
    tail at a given variance, so this lumps the events as much as the windows allow."""
    jumps = np.sum([np.asarray(j, dtype=np.float64) for j, _ in events], axis=0)
    sd = np.sum([np.asarray(j, dtype=np.float64) * np.sqrt(np.asarray(m, dtype=np.float64)) for j, m in events],
                axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(jumps > 0, (sd / jumps) ** 2, 0.0)
    return jumps, rate


#: Above this expected number of memoised events the range's test is the normal one (the events'
#: skewness, 1/√μ, is then below 0.05).
POISSON_EVENTS_BELOW = 400.0


def poisson_normal_sf(x: np.ndarray, jump: np.ndarray, rate: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """P(J·(M − μ) + G ≥ x) for M ~ Poisson(μ) and G ~ N(0, sd²), elementwise.

    A memoised range's estimate of a value nobody holds is a sum of rare permanent events (devices
    whose memoised response supports it, repeated in every window: ``memo_events``) and of many
    small independent parts (fresh coins, cohorts), which G stands for. The normal tail of the
    sum alone treats the events as small: with a few of them expected, two or three events of
    J ≈ 1.3 range SDs each are not rare, and Holm's 3.6-SD threshold over 295 values nobody
    held was crossed in 0.35 of 7-day LOLOHA ranges (docs/math.md §10a)."""
    from scipy import stats  # imported when a memoised range is estimated, not with the module

    x, jump, rate, sd = (np.asarray(a, dtype=np.float64) for a in (x, jump, rate, sd))
    total = np.sqrt(sd * sd + jump * jump * rate)       # many events: the sum is normal
    with np.errstate(divide="ignore", invalid="ignore"):
        out = stats.norm.sf(np.where(total > 0, x / np.where(total > 0, total, 1.0), np.inf * np.sign(x)))
    lumpy = (jump > 0) & (rate > 0) & (rate < POISSON_EVENTS_BELOW) & np.isfinite(x)
    if not lumpy.any():
        return out
    xs, js, ms, ss = x[lumpy], jump[lumpy], rate[lumpy], np.maximum(sd[lumpy], 1e-12 * jump[lumpy])
    top = int(np.ceil(ms.max() + 12.0 * np.sqrt(ms.max()) + 30.0))
    k = np.arange(top + 1, dtype=np.float64)
    weight = stats.poisson.pmf(k[None, :], ms[:, None])                  # (values, k)
    tail = stats.norm.sf((xs[:, None] - js[:, None] * (k[None, :] - ms[:, None])) / ss[:, None])
    out = out.copy()
    out[lumpy] = np.clip((weight * tail).sum(axis=1) + stats.poisson.sf(top, ms), 0.0, 1.0)
    return out


def _with_bound(df: pd.DataFrame, counts: np.ndarray, variances: np.ndarray, n: int, confidence: float,
                simultaneous: bool, alpha: float, control: str,
                memo: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
    """``df`` (a frequency frame) with the range's estimates, SEs, Wald intervals and tests.

    ``memo`` = (J, μ, fresh variance): the p-values then treat the memoised events as Poisson
    (``poisson_normal_sf``) and the rest of the variance, at least the fresh part, as normal."""
    from scipy import stats  # imported when a memoised range is estimated, not with the module

    out = df.copy()
    std = np.sqrt(np.maximum(variances, 0.0))
    half = z_value(confidence, len(counts) if simultaneous else 1) * std
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(std > 0, counts / std, np.inf * np.sign(counts))
    p_value = stats.norm.sf(z)
    if memo is not None:
        jump, rate, fresh = memo
        rest = np.maximum(np.maximum(variances, 0.0) - jump * jump * rate, fresh)
        p_value = poisson_normal_sf(counts, jump, rate, np.sqrt(rest))
    out["estimate"] = counts
    out["proportion"] = counts / n
    out["std_err"] = std
    out["ci_low"] = counts - half
    out["ci_high"] = counts + half
    out["p_value"] = p_value
    out["detected"] = detect(p_value, alpha, control)
    out.attrs = dict(df.attrs)
    return out


def _mean_range(spec: MetricSpec, base: pd.DataFrame, estimates: Sequence, permanent: Sequence,
                windows: list[str], confidence: float) -> pd.DataFrame:
    """A mean metric over windows: the device-day mean, SE from the bound on Var[Σ_t n_t·mean_t]."""
    ns = np.array([e.n for e in estimates], dtype=np.float64)
    total = [n * n * e.variance for n, e in zip(ns, estimates)]
    perm = [n * n * p for n, p in zip(ns, permanent)]
    n = float(ns.sum())
    var_sum = float(range_variance(perm, total))   # of Σ_t n_t·mean_t, normalised units
    lo, hi = spec.bounds
    se = math.sqrt(var_sum) / n * (hi - lo) / 2.0 if math.isfinite(var_sum) else math.inf
    out = base.copy()
    mean = float(out.loc[out["statistic"] == "mean", "estimate"].iloc[0])
    z = z_value(confidence)
    low, high = min(max(lo, mean - z * se), hi), max(min(hi, mean + z * se), lo)
    out.loc[out["statistic"] == "mean", ["std_err", "ci_low", "ci_high"]] = [se, low, high]
    out.loc[out["statistic"] == "sum", ["std_err", "ci_low", "ci_high"]] = [n * se, n * low, n * high]
    out.attrs = dict(base.attrs, windows=windows, range_variance=RANGE_VARIANCE)
    return out


def with_rappor_range_warning(df: pd.DataFrame, windows: int) -> pd.DataFrame:
    """A RAPPOR estimate over ``windows`` > 1 windows, with a warning in its summary: RAPPOR's
    PRR is memoised too, and its decoder has no range bound yet, so the intervals of a summed
    range treat repeated permanent noise as independent and are too narrow (docs/rappor.md)."""
    if windows <= 1:
        return df
    note = (f"this range sums {windows} windows of memoised (PRR) reports, which repeat their "
            "permanent noise every day; the intervals treat them as independent and are too narrow "
            "— estimate one window (--window) or a series (--by window)")
    summary = dict(df.attrs.get("summary") or {})
    summary["warning"] = "; ".join(w for w in (summary.get("warning"), note) if w)
    df.attrs["summary"] = summary
    return df
