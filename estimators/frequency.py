"""Sketch -> estimate DataFrame, the one shape every consumer reads (CLI, collector API, docs).

Numeric metrics: a mean metric's frame has rows mean, sum, n (estimators.numeric); a
histogram metric's frame is the frequency frame over its buckets with a leading ``statistic``
column and rows for the mean and quantiles appended.

Columns: value, estimate (unbiased count), proportion, std_err (of the count), ci_low,
ci_high (count bounds), p_value (one-sided test of "count = 0": the exact binomial tail of the
support count for pure protocols, docs/math.md §8; normal otherwise), detected; with
``consistent=True`` also raw_estimate (the unbiased one) and the Norm-Sub output in
estimate/proportion. ``df.attrs`` carries metric, fingerprint, protocol, epsilon, n_reports,
confidence, simultaneous and post_processed.
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

from .columns import Columns
from .consistency import norm_sub
from .intervals import (
    exact_small_counts,
    sampled_count_intervals,
    sampled_zero_count_p_values,
    wald_interval,
    z_value,
    zero_count_p_values,
)
from .lazy_frame import LazyFrame
from .multiple_testing import CONTROLS, check_control, detect, detect_among

if TYPE_CHECKING:  # pandas loads when a caller asks for a DataFrame (estimators/columns.py)
    import pandas as pd

COLUMNS = ["value", "estimate", "proportion", "std_err", "ci_low", "ci_high", "p_value", "detected"]
__all__ = ["COLUMNS", "CONTROLS", "estimate_frame"]


def estimate_frame(spec: MetricSpec, sketch: Sketch, *, confidence: float = 0.95,
                   simultaneous: bool = False, consistent: bool = False,
                   candidates: Sequence[str] | None = None, alpha: float = 0.05,
                   control: str = "fwer", top: int | None = None,
                   rows_wanted: tuple[int, int] | None = None,
                   lazy: bool = False, columns: bool = False,
                   digits: str = "exact") -> pd.DataFrame | LazyFrame | Columns:
    """Debiased estimates with intervals for one metric's (merged) sketch.

    ``top``: how many strings a ``discover`` metric reports (other metrics ignore it; callers
    rank their rows themselves). ``rows_wanted = (offset, limit)``: only that page of the rows
    ranked by estimate, largest first (``ranked_rows``), built without a frame of every value —
    what a large domain is answered with by default; every test and the multiple-testing
    control still run over all d values, so a page's ``detected`` is the full frame's.
    ``attrs`` then say ``rows_total`` (d), ``offset``, ``limit`` and ``order``. Ignored with
    ``consistent`` (Norm-Sub needs every value) and for histograms (a few buckets). ``lazy``
    (with no ``rows_wanted``): a categorical estimate as a ``LazyFrame`` whose rows are built
    piece by piece as they are written (the collector's streamed ``full=true`` answers), the
    same rows as the DataFrame; ``columns``: a categorical estimate (not ``consistent``) as
    ``Columns``, numpy arrays without pandas (``to_frame`` gives the DataFrame; `ldpt
    estimate` prints its table from them, estimators/columns.py), with ``digits="table"``
    exact to the digits a table prints rather than to the bit (z and the binomial tails of pure
    protocols without scipy, estimators/tails.py; scipy decides any cell their error bounds
    leave open); other frames are DataFrames either way."""
    if not 0 < confidence < 1:
        raise EstimationError(f"confidence must be between 0 and 1 (exclusive), got {confidence}")
    check_control(control)
    if not 0 < alpha < 1:
        raise EstimationError(f"alpha must be between 0 and 1 (exclusive), got {alpha}")
    proto = server_half(spec)
    if spec.is_mean:
        if consistent:
            raise EstimationError(f"metric {spec.name!r} is a numeric mean metric: --consistent "
                                  "applies to frequencies and histograms (in the query API: "
                                  "consistent=true); a mean has nothing to make consistent")
        if candidates:
            raise EstimationError(f"metric {spec.name!r} is numeric: candidates are for string metrics")
        from .numeric import mean_frame

        return mean_frame(spec, sketch, confidence=confidence)
    if spec.kind is Kind.STRING and proto.discovers_strings:
        from .discovery import decode_candidates, discover  # docs/discovery.md

        if consistent:
            raise EstimationError(f"metric {spec.name!r} discovers strings: --consistent needs the "
                                  "whole domain, which a discover metric never enumerates")
        if candidates:
            df = decode_candidates(proto, sketch, list(candidates), confidence=confidence, alpha=alpha,
                                   control=control, simultaneous=simultaneous)
        else:
            df = discover(proto, sketch, top=top, confidence=confidence, alpha=alpha, control=control,
                          simultaneous=simultaneous)
        df.attrs.update(metric=spec.name, fingerprint=spec.fingerprint)
        return df
    if spec.kind is Kind.STRING:
        if not candidates:
            raise EstimationError(f"metric {spec.name!r} is a string metric: pass candidate strings "
                                  "(--candidates FILE) to decode it against")
        from .rappor import decode

        df = decode(sketch, proto, list(candidates), confidence=confidence, control=control,
                    alpha=alpha, simultaneous=simultaneous)
        df.attrs.update(metric=spec.name, fingerprint=spec.fingerprint)
        if consistent:
            df = _apply_consistency(df, int(df.attrs.get("n_reports", sketch.total_reports)))
        return df
    n = sketch.total_reports
    if n <= 0:
        raise EstimationError(f"metric {spec.name!r}: no reports in the selected window(s)")
    rows_of = FrequencyRows(spec, sketch, confidence, simultaneous, alpha, control,
                            digits if columns else "exact")
    if lazy and rows_wanted is None and not consistent and not spec.is_histogram:
        return LazyFrame(rows_of.d, COLUMNS, lambda start, stop: rows_of.frame(slice(start, stop)),
                         rows_of.attrs())
    rows = None
    if rows_wanted is not None and not consistent and not spec.is_histogram:
        rows = ranked_rows(rows_of.counts, *rows_wanted)   # the page asked for, largest first
    if columns and not consistent and not spec.is_histogram:
        out = rows_of.columns(rows)
        out.attrs.update(rows_of.attrs(rows_wanted if rows is not None else None))
        return out
    df = rows_of.frame(rows)
    df.attrs.update(rows_of.attrs(rows_wanted if rows is not None else None))
    if consistent:
        df = _apply_consistency(df, n)
    if spec.is_histogram:
        from .numeric import with_histogram_rows

        df = with_histogram_rows(spec, sketch, df, rows_of.variances, confidence=confidence,
                                 consistent=consistent, simultaneous=simultaneous)
    return df


class FrequencyRows:
    """A frequency estimate's arrays over all d values — estimates, variances, the tests and
    the multiple-testing control, which need every value — from which the rows of any subset
    are built (``frame``): a page, a piece of a streamed answer, or all of them."""

    def __init__(self, spec: MetricSpec, sketch: Sketch, confidence: float, simultaneous: bool,
                 alpha: float, control: str, digits: str = "exact") -> None:
        proto = server_half(spec)
        self.spec, self.proto, self.confidence, self.simultaneous = spec, proto, confidence, simultaneous
        self.table = digits == "table"   # to the table's digits only: z and tails without scipy
        self.n = n = sketch.total_reports
        est = proto.estimate(sketch)
        self.d = len(est.counts)
        self.counts, self.variances = est.counts, est.variances
        # an estimate with a bounded bias b ∈ [b_lo, b_hi] (OLH with empty cohorts): c = ĉ − b − noise
        self.b_lo, self.b_hi = (est.extra or {}).get("bias_bounds", (0.0, 0.0))
        self.empty = (est.extra or {}).get("empty_cohorts")
        support = est.extra.get("support") if est.extra else None   # HR's estimate computes it
        self.model = proto.small_count_model(sketch, support)   # pure protocols; one-cohort OLH is GRR
        del est, support
        self.sampled = self.ones = None
        self.p_value = self.p_bounds = self.detected = self.z_scores = self.tails = None
        sampled = proto.sampled_support(sketch)
        if sampled is not None:  # values seen by a random subset of devices (dBitFlipPM; docs/math.md §8)
            self.sampled, self.ones, q = sampled
            self.p_value = sampled_zero_count_p_values(self.ones, self.sampled, q)
        elif self.model is not None:  # the exact law of the support count (intervals.py, docs/math.md §8)
            if self.table:
                self.detected = self._table_tests(alpha, control)
            if self.detected is None:
                self.p_value = zero_count_p_values(self.model[0], n, self.model[2])
        else:
            std_all = np.sqrt(np.maximum(self.variances, 0.0))
            shifted = self.counts - self.b_hi   # under "c(v) = 0" the estimate is at most b_hi plus noise
            with np.errstate(divide="ignore", invalid="ignore"):
                z = np.where(std_all > 0, shifted / std_all, np.inf * np.sign(shifted))
            del std_all, shifted
            if self.table:
                self.p_value, self.p_bounds, self.detected = self._table_normal_tests(z, alpha, control)
            if self.p_value is None:
                self.p_value = normal_sf(z)
            del z
        if self.detected is None:
            self.detected = detect(self.p_value, alpha, control)  # Holm or Benjamini–Hochberg: over all d

    def _table_tests(self, alpha: float, control: str) -> np.ndarray | None:
        """``detected`` from the scipy-free tails (estimators/tails.py) when the detections are
        the same at both ends of their bounds — then they are the exact p-values' — else None:
        the exact path decides. Only the values whose tail's low bound can be <= α can be
        rejected (``detect_among``): the tail falls as the support count grows, so those are the
        support counts from a threshold on — a few of d = 10⁶. A shown row's p-value is read
        from the band (``tails``, ``_p_values``)."""
        from .tails import TAIL_ABS_ERROR, binomial_tail_band

        support, q = self.model[0], self.model[2]   # type: ignore[index]
        band = binomial_tail_band(self.n, q)
        if band is None:
            return None
        lo, tail, rel = band
        support = np.asarray(support)
        d = support.shape[0]
        may = tail * (1.0 - rel) <= alpha            # at each entry of the band: p's low bound <= α
        first = int(np.argmax(may))                  # the last entry (0) always may
        if first and may[first:].all():              # from one support count on: a comparison over d,
            # on the counts as they are (no rounded copy of all d): x >= K − ½ holds wherever
            # rint(x) >= K, and a candidate more only brings its own p-value along
            candidates = np.flatnonzero(support >= lo + first - 0.5)
        else:
            candidates = np.flatnonzero(may[np.clip(_rounded(support) - lo, 0, tail.shape[0] - 1)])
        p = tail[np.clip(_rounded(support[candidates]) - lo, 0, tail.shape[0] - 1)]
        low = detect_among(candidates, p * (1.0 - rel), d, alpha, control)
        high = detect_among(candidates, np.minimum(p * (1.0 + rel) + TAIL_ABS_ERROR, 1.0), d, alpha,
                            control)   # both procedures reject more as p-values fall
        if not np.array_equal(low, high):
            return None
        self.tails = (support, lo, tail, rel)
        detected = np.zeros(d, dtype=bool)
        detected[low] = True
        return detected

    def _table_normal_tests(self, z: np.ndarray, alpha: float, control: str) -> tuple:
        """``_table_tests`` for the normal test: P(Z > z) by ``math.erfc`` where it can be at most
        about α (only those p-values can be rejected, by Holm and Benjamini–Hochberg alike), 1
        elsewhere until a row is shown (``_p_values`` computes the shown rows' own)."""
        from .tails import NORMAL_ABS_ERROR, NORMAL_REL_ERROR, normal_upper_quantile, normal_upper_tails

        z_alpha = normal_upper_quantile(alpha)
        near = np.flatnonzero(~(z < z_alpha - 1e-6 * (1.0 + abs(z_alpha))))   # NaN too: P(Z > z) may be <= α
        p = np.ones(z.shape[0])
        p[near] = normal_upper_tails(z[near])
        low, high = p * (1.0 - NORMAL_REL_ERROR), np.minimum(p * (1.0 + NORMAL_REL_ERROR) + NORMAL_ABS_ERROR, 1.0)
        detected = detect(low, alpha, control)
        if not np.array_equal(detected, detect(high, alpha, control)):
            return None, None, None
        self.z_scores = z            # the shown rows' p-values are computed from these
        return p, (low, high), detected

    def frame(self, rows: np.ndarray | slice | None) -> pd.DataFrame:
        """The rows ``rows`` (indices, a slice, or None for all) as a DataFrame."""
        return self.columns(rows).to_frame()

    def columns(self, rows: np.ndarray | slice | None) -> Columns:
        """The rows ``rows`` (indices, a slice, or None for all), intervals computed for them only."""
        d, n, model = self.d, self.n, self.model
        pick = (lambda a: a) if rows is None else (lambda a: np.asarray(a)[rows])
        counts, variances = pick(self.counts), pick(self.variances)
        std = np.sqrt(np.maximum(variances, 0.0))
        low, high = self._wald(counts, variances, self.z_value())
        if self.table and not self._same_cells(low, high, counts, variances):
            low, high = self._wald(counts, variances, self.z_value(exact=True))
        if self.sampled is not None:  # Wald, exact where the bucket's bit count is too concentrated for it
            p, q = self.proto.params.p, self.proto.params.q  # type: ignore[attr-defined]
            low, high = sampled_count_intervals(counts, variances, pick(self.ones), pick(self.sampled), n, p, q,
                                                self.confidence, self.simultaneous,
                                                family_size=d if self.simultaneous else 1, low=low, high=high)
        elif model is not None:   # Wald, exact where the support count is too concentrated for it
            low, high = exact_small_counts(low, high, pick(model[0]), n, model[1], model[2], self.confidence,
                                           self.simultaneous, counts=counts,
                                           family_size=d if self.simultaneous else 1)
        columns = {
            "estimate": counts,
            "proportion": counts / n,
            "std_err": std,
            "ci_low": low,
            "ci_high": high,
            "p_value": self._p_values(rows, pick),
            "detected": pick(self.detected),
        }
        return Columns({"value": self.values(rows), **columns})

    def z_value(self, exact: bool = False) -> float:
        """The intervals' z: scipy's, or for a table its scipy-free value (tails.Z_REL_ERROR)."""
        family = self.d if self.simultaneous else 1
        if self.table and not exact:
            from .tails import normal_upper_quantile

            return normal_upper_quantile((1.0 - self.confidence) / max(1, family) / 2)
        return z_value(self.confidence, family)

    def _wald(self, counts: np.ndarray, variances: np.ndarray, z: float) -> tuple[np.ndarray, np.ndarray]:
        """Wald bounds of the rows at ``z``, shifted by the bias bounds."""
        low = wald_interval(counts - self.b_hi, variances, self.n, z=z)[0]
        high = wald_interval(counts - self.b_lo, variances, self.n, z=z)[1]
        return low, high

    def _same_cells(self, low: np.ndarray, high: np.ndarray, counts: np.ndarray, variances: np.ndarray) -> bool:
        """Whether the table shows the same bounds at both ends of z's error (then they are the
        exact z's)."""
        from .columns import same_count_texts
        from .tails import Z_REL_ERROR

        z = self.z_value()
        for zz in (z * (1.0 - Z_REL_ERROR), z * (1.0 + Z_REL_ERROR)):
            lo, hi = self._wald(counts, variances, zz)
            if not (same_count_texts(lo, low) and same_count_texts(hi, high)):
                return False
        return True

    def _p_values(self, rows: np.ndarray | slice | None, pick) -> np.ndarray:  # noqa: ANN001
        """The rows' p-values; for a table, the exact ones where the bounds of the scipy-free
        tails would print differently."""
        if self.tails is not None:   # a pure protocol's binomial tails, read from the band for these rows
            from .tails import TAIL_ABS_ERROR

            s, lo, tail, rel = self.tails
            p = tail[np.clip(_rounded(pick(s)) - lo, 0, tail.shape[0] - 1)]
            low, high = p * (1.0 - rel), np.minimum(p * (1.0 + rel) + TAIL_ABS_ERROR, 1.0)
        elif self.p_bounds is None:
            return pick(self.p_value)
        else:
            p = pick(self.p_value)
            low, high = pick(self.p_bounds[0]), pick(self.p_bounds[1])
        from .columns import p_text

        if self.z_scores is not None:   # the normal test: the shown rows' tails, and their bounds
            from .tails import NORMAL_ABS_ERROR, NORMAL_REL_ERROR, normal_upper_tails

            p = normal_upper_tails(pick(self.z_scores))
            low, high = p * (1.0 - NORMAL_REL_ERROR), p * (1.0 + NORMAL_REL_ERROR) + NORMAL_ABS_ERROR
            unsure = np.flatnonzero([p_text(a) != p_text(b) for a, b in zip(low.tolist(), high.tolist())])
            if unsure.size:
                p[unsure] = normal_sf(pick(self.z_scores)[unsure])
            return p
        unsure = np.flatnonzero([p_text(a) != p_text(b) for a, b in zip(low.tolist(), high.tolist())])
        if unsure.size:
            support = np.asarray(pick(self.model[0]), dtype=np.float64)[unsure]   # type: ignore[index]
            p = np.array(p, dtype=np.float64)
            p[unsure] = zero_count_p_values(support, self.n, self.model[2])   # type: ignore[index]
        return p

    def values(self, rows: np.ndarray | slice | None) -> list:
        """The ``value`` column of ``rows``: the domain's labels (or the indices without one)."""
        domain = self.spec.domain
        if rows is None:
            return list(domain) if domain is not None else list(range(self.d))
        if isinstance(rows, slice):
            ids = range(*rows.indices(self.d))
            return [domain[i] for i in ids] if domain is not None else list(ids)
        return [domain[i] for i in rows.tolist()] if domain is not None else rows.tolist()

    def attrs(self, page: tuple[int, int] | None = None) -> dict:
        """The frame's ``attrs``: what it estimates and how, the ``page`` (offset, limit) it
        shows of the rows ranked by estimate, and OLH's empty-cohort warning."""
        proto = self.proto
        out = dict(metric=self.spec.name, fingerprint=self.spec.fingerprint, protocol=proto.name,
                   epsilon=proto.epsilon, n_reports=self.n, confidence=self.confidence,
                   simultaneous=self.simultaneous, post_processed=None,
                   z=self.z_value())
        if page is not None:
            out.update(rows_total=self.d, offset=page[0], limit=page[1], order="estimate")
        if self.empty:
            b_lo, b_hi = self.b_lo, self.b_hi
            out.update(bias_bounds=[float(b_lo), float(b_hi)], warning=(
                f"{self.empty:,} of {proto.cohorts:,} olh cohorts have no reports: their part of each estimate "
                f"is not identified, so every estimate may be off by {b_lo:+,.1f} to {b_hi:+,.1f} (the "
                "intervals and tests include it); more reports fill the cohorts, and hr has none"))
        return out


def _rounded(counts: np.ndarray) -> np.ndarray:
    """Support counts as int64 (a float count, such as HR's transform's, to the nearest integer)."""
    counts = np.asarray(counts)
    if counts.dtype.kind in "iu":
        return counts.astype(np.int64, copy=False)
    out = np.empty(counts.shape, dtype=np.int64)
    np.rint(counts, out=out, casting="unsafe")
    return out


def ranked_rows(counts: np.ndarray, offset: int, limit: int) -> np.ndarray:
    """Indices of rows offset .. offset+limit−1 in the order of a stable sort by estimate,
    largest first (ties: the lower index first; NaN last), without sorting all d when the
    page is near the top."""
    key = np.where(np.isnan(counts), -np.inf, counts) if np.isnan(counts).any() else np.asarray(counts)
    d, k = key.shape[0], min(offset + limit, key.shape[0])
    if k <= 0 or offset >= d:
        return np.zeros(0, dtype=np.int64)
    if k >= d // 4:
        order = np.argsort(-key, kind="stable")
    else:   # the k largest: everything above the k-th value, then the first ties at it
        kth = _kth_largest(key, k)
        above = np.flatnonzero(key > kth)
        ties = np.flatnonzero(key == kth)[:k - above.size]
        top = np.concatenate([above, ties])
        order = top[np.lexsort((top, -key[top]))]
    return order[offset:k]


def _kth_largest(key: np.ndarray, k: int) -> float:
    """The k-th largest of ``key`` (1 <= k <= len). The k-th largest of a strided sample of
    √(d/k)·k values is at most it (at least k values are at or above the sample's), so only the
    values from there on are partitioned: ~2·√(dk) values instead of d."""
    d = key.shape[0]
    step = math.isqrt(d // k)
    if step >= 2:
        sample = key[::step]
        key = key[key >= np.partition(sample, sample.shape[0] - k)[sample.shape[0] - k]]
    return np.partition(key, key.shape[0] - k)[key.shape[0] - k]


def normal_sf(z: np.ndarray) -> np.ndarray:
    """P(Z > z) of the standard normal, as ``scipy.stats.norm.sf`` (scipy.special.ndtr: the
    same routine, without importing scipy.stats, ~1 s of CPU)."""
    from scipy.special import ndtr

    return ndtr(-np.asarray(z, dtype=np.float64))


def _apply_consistency(df: pd.DataFrame, n: int) -> pd.DataFrame:
    """Replace estimate/proportion by Norm-Sub output; keep the unbiased one as raw_estimate."""
    out = df.copy()
    out.insert(1, "raw_estimate", df["estimate"])
    raw = df["proportion"].to_numpy(dtype=np.float64)
    finite = np.isfinite(raw)  # RAPPOR leaves unidentifiable (aliased) candidates NaN: they stay NaN
    proportions = np.full(raw.shape, np.nan)
    proportions[finite] = norm_sub(raw[finite])
    out["proportion"] = proportions
    out["estimate"] = proportions * n
    out.attrs = dict(df.attrs, post_processed="norm-sub")
    return out

