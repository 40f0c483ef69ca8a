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
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from client_sdk.errors import EstimationError
from client_sdk.registry import Kind, MetricSpec
from sketches import server_half
from sketches.base import Sketch

from .frequency import _apply_consistency, estimate_frame
from .intervals import z_value
from .multiple_testing import check_control, detect

if TYPE_CHECKING:  # the frames come from estimate_frame: this module needs no pandas of its own
    import pandas as pd

#: ``attrs["range_variance"]`` of a memoised range: how its standard errors were computed.
RANGE_VARIANCE = "memoised: sum of per-window permanent SDs, squared, plus fresh variances"

__all__ = ["RANGE_VARIANCE", "is_memoised", "range_frame", "range_variance", "with_rappor_range_warning"]


def is_memoised(spec: MetricSpec) -> bool:
    """Whether ``spec``'s reports repeat permanent noise across windows (a memoised protocol: the
    server half's ``two_round``)."""
    return server_half(spec).two_round


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
    if not proto.two_round:
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
    lumps = range_lumps([proto.memo_lumps(s, e) for (_, s), e in zip(used, estimates)], proto.second_round_keep)
    freq = base[base["statistic"] == "count"].drop(columns="statistic").reset_index(drop=True) \
        if spec.is_histogram else base.copy()
    freq = _with_bound(freq, counts, variances, merged.total_reports, confidence, simultaneous,
                       alpha, control, memo=(lumps, fresh))
    if consistent:
        freq = _apply_consistency(freq, merged.total_reports)
    if spec.is_histogram:
        from .numeric import with_histogram_rows

        freq = with_histogram_rows(spec, merged, freq, variances, confidence=confidence,
                                   consistent=consistent, simultaneous=simultaneous)
    freq.attrs.update(windows=[w for w, _ in used], range_variance=RANGE_VARIANCE)
    return freq


# A NamedTuple rather than a frozen dataclass: alike here, without the methods a dataclass compiles
# as its module loads (a fresh `ldpt estimate` imports this module, issue 32).
class RangeLumps(NamedTuple):
    """A range's lumps per value (``range_lumps``): singles of size ``single_jump`` at Poisson rate
    ``single_rate``, events of size ``event_jump`` at rate ``event_rate``, and ``fresh`` — the part of
    the range's fresh variance that the lumps carry (the normal rest keeps at least the remainder)."""

    single_jump: np.ndarray
    single_rate: np.ndarray
    event_jump: np.ndarray
    event_rate: np.ndarray
    fresh: np.ndarray

    @property
    def variance(self) -> np.ndarray:
        """The lumps' variance, a²ν + b²μ."""
        return self.single_jump ** 2 * self.single_rate + self.event_jump ** 2 * self.event_rate


def range_lumps(lumps: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], keep: float) -> RangeLumps:
    """The windows' ``MemoisedServer.memo_lumps`` as one range's two Poisson classes, each lumped as much as the
    windows allow at its variance (Bennett 1962: a centred sum of independent parts each ≤ b, of
    variance σ², has an MGF at most that of b·(Pois(σ²/b²) − σ²/b²); so its largest jump with the
    variance matched is the heaviest tail these lumps can have):

    - singles: jump a = max a⁺ over windows and classes, rate Σ ν·a⁺²/a²;
    - events of class k (a device keeping one memoised response through the range): jump
      b_k = Σ_t a⁺_t (kept in every window), variance (Σ_t λ a⁺_t √μ_t)² + Σ_t λ(1 − λ) a⁺_t² μ_t
      (the permanent part Minkowski-lumped as ``range_variance``, plus the keeps' own variance);
      then all classes at jump b = max_k b_k, rate Σ_k variance_k / b².

    Negative jumps (a decoder weight below 0) only lower the sum and are left to the normal rest."""
    lam = float(keep)
    a = [np.clip(np.asarray(x, dtype=np.float64), 0.0, None) for x, _, _ in lumps]
    nu = [np.asarray(x, dtype=np.float64) for _, x, _ in lumps]
    mu = [np.clip(np.asarray(x, dtype=np.float64), 0.0, None) for _, _, x in lumps]
    single = np.max([x.max(axis=0) for x in a], axis=0)
    single_var = np.sum([(x * x * r).sum(axis=0) for x, r in zip(a, nu)], axis=0)
    keep_fresh = np.sum([(lam * (1 - lam) * x * x * r).sum(axis=0) for x, r in zip(a, mu)], axis=0)
    event_cls = np.sum(a, axis=0)                                                 # (classes, d): b_k
    perm_sd = np.sum([lam * x * np.sqrt(r) for x, r in zip(a, mu)], axis=0)
    event_var = (perm_sd * perm_sd).sum(axis=0) + keep_fresh
    event = event_cls.max(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        single_rate = np.where(single > 0, single_var / (single * single), 0.0)
        event_rate = np.where(event > 0, event_var / (event * event), 0.0)
    return RangeLumps(single, single_rate, event, event_rate, single_var + keep_fresh)


#: Above this Poisson rate a class of lumps is treated as normal (its skewness 1/√rate < 0.05).
POISSON_EVENTS_BELOW = 400.0


def compound_poisson_sf(x: np.ndarray, single_jump: np.ndarray, single_rate: np.ndarray,
                        event_jump: np.ndarray, event_rate: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """P(a·(N − ν) + b·(M − μ) + G ≥ x) for independent N ~ Poisson(ν), M ~ Poisson(μ) and
    G ~ N(0, sd²), elementwise (a, ν = ``single_*``; b, μ = ``event_*``).

    A memoised range's estimate of a value nobody holds is such a sum (``range_lumps``): the
    reports landing in v's cells one by one, the devices whose memoised response supports v, and
    many small parts (G). A class with rate ≥ ``POISSON_EVENTS_BELOW`` is folded into G."""
    from scipy import special, stats  # imported when a memoised range is estimated, not with the module

    x, a, nu, b, mu, sd = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64)
                                                for v in (x, single_jump, single_rate, event_jump, event_rate, sd)))
    a, nu, b, mu = (np.where(np.isfinite(v), v, 0.0) for v in (a, nu, b, mu))
    var = sd * sd
    many_a = (nu >= POISSON_EVENTS_BELOW) | (a <= 0) | (nu <= 0)
    many_b = (mu >= POISSON_EVENTS_BELOW) | (b <= 0) | (mu <= 0)
    var = var + np.where(many_a, a * a * nu, 0.0) + np.where(many_b, b * b * mu, 0.0)
    nu, mu = np.where(many_a, 0.0, nu), np.where(many_b, 0.0, mu)
    total = np.sqrt(var + a * a * nu + b * b * mu)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = special.ndtr(-np.where(total > 0, x / np.where(total > 0, total, 1.0), np.inf * np.sign(x)))
    lumpy = ((nu > 0) | (mu > 0)) & np.isfinite(x)
    if not lumpy.any():
        return out
    out = out.copy()
    idx = np.flatnonzero(lumpy)
    s = np.sqrt(np.maximum(var, 1e-24 * (a * a + b * b)))
    for chunk in np.array_split(idx, max(1, idx.size // 32)):
        xs, as_, ns, bs, ms, ss = (v.flat[chunk][:, None, None] for v in (x, a, nu, b, mu, s))
        top_n = int(np.ceil(ns.max() + 12.0 * np.sqrt(ns.max()) + 30.0)) if ns.max() > 0 else 0
        top_m = int(np.ceil(ms.max() + 12.0 * np.sqrt(ms.max()) + 30.0)) if ms.max() > 0 else 0
        k = np.arange(top_n + 1, dtype=np.float64)[None, None, :]
        j = np.arange(top_m + 1, dtype=np.float64)[None, :, None]
        weight = stats.poisson.pmf(j, ms) * stats.poisson.pmf(k, ns)              # (values, M, N)
        tail = special.ndtr(-(xs - as_ * (k - ns) - bs * (j - ms)) / ss)
        mass = (weight * tail).sum(axis=(1, 2))
        # the mass beyond the sums' ends, counted as a sure exceedance (conservative)
        beyond = stats.poisson.sf(top_n, ns[:, 0, 0]) + stats.poisson.sf(top_m, ms[:, 0, 0])
        out.flat[chunk] = np.clip(mass + beyond, 0.0, 1.0)
    return out


def poisson_normal_sf(x: np.ndarray, jump: np.ndarray, rate: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """P(J·(M − μ) + G ≥ x) for M ~ Poisson(μ) and G ~ N(0, sd²), elementwise: ``compound_poisson_sf``
    with events only."""
    zero = np.zeros(np.shape(np.asarray(x)))
    return compound_poisson_sf(x, zero, zero, jump, rate, sd)


def _with_bound(df: pd.DataFrame, counts: np.ndarray, variances: np.ndarray, n: int, confidence: float,
                simultaneous: bool, alpha: float, control: str,
                memo: tuple[RangeLumps, np.ndarray] | None = None) -> pd.DataFrame:
    """``df`` (a frequency frame) with the range's estimates, SEs, Wald intervals and tests.

    ``memo`` = (the range's lumps, its fresh variance): the p-values then take the lumps as Poisson
    (``compound_poisson_sf``) and the rest of the variance bound as normal, at least the fresh
    variance the lumps do not carry (docs/math.md §10a)."""
    from scipy import stats  # imported when a memoised range is estimated, not with the module

    out = df.copy()
    std = np.sqrt(np.maximum(variances, 0.0))
    half = z_value(confidence, len(counts) if simultaneous else 1) * std
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(std > 0, counts / std, np.inf * np.sign(counts))
    p_value = stats.norm.sf(z)
    if memo is not None:
        lumps, fresh = memo
        rest = np.maximum(np.maximum(variances, 0.0) - lumps.variance, np.maximum(fresh - lumps.fresh, 0.0))
        p_value = compound_poisson_sf(counts, lumps.single_jump, lumps.single_rate, lumps.event_jump,
                                      lumps.event_rate, np.sqrt(rest))
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
