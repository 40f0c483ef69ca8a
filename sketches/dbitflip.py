"""dBitFlipPM's server half (Ding, Kulkarni, Yekhanin 2017; client_sdk/protocols/dbitflip.py
says the mechanism and the estimator): the windows as arrays, both rounds vectorised, the exact
pattern tables, wire decoding, validate, accumulate (counts[s, i]: bit i of the reports of window
s) and the estimate from the reports whose window holds each bucket."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from client_sdk.errors import InvalidPayload
from client_sdk.protocols.dbitflip import MAX_ENUMERATED_SAMPLED, DBitFlip
from client_sdk.randomness import SCALE

from .base import CountEstimate, Payloads, ServerHalf, Sketch, first_bad, require_1d
from .longitudinal import MemoisedServer
from .randomness import RandomLike, as_random_source
from .registry import register


@register(DBitFlip)
class DBitFlipServer(MemoisedServer, ServerHalf):
    """dBitFlipPM on the server."""

    device: DBitFlip

    @functools.cached_property
    def _weights(self) -> np.ndarray:
        """2^i for the sampled bits i (the report's integer y = Σ bitᵢ·2^i)."""
        return np.int64(1) << np.arange(self.params.sampled, dtype=np.int64)

    @property
    def cell_shape(self) -> tuple[int, ...]:
        return (self.params.sampled,)

    def windows(self, cohorts: np.ndarray) -> np.ndarray:
        """S_s for each cohort: int64 (n, d_sampled)."""
        return (np.asarray(cohorts)[:, None] + np.arange(self.params.sampled)) % self.params.d

    def _pattern_table(self, index: int, one: float, zero: float) -> np.ndarray:
        """P(bit pattern | x = index, window s), shape (k, 2^d): patterns as Σ bit_i·2^i."""
        ds = self.params.sampled
        if ds > MAX_ENUMERATED_SAMPLED:
            raise ValueError(f"refusing to enumerate 2^{ds} patterns (sampled <= {MAX_ENUMERATED_SAMPLED})")
        rate = np.where(self.windows(np.arange(self.params.d)) == index, one, zero)      # (k, d)
        bits = (np.arange(1 << ds)[:, None] >> np.arange(ds)) & 1                        # (2^d, d)
        return np.where(bits[None] == 1, rate[:, None, :], 1 - rate[:, None, :]).prod(axis=2)

    def output_probabilities(self, index: int) -> np.ndarray:
        return self._pattern_table(index, self.params.p, self.params.q)

    def memo_output_probabilities(self, index: int) -> np.ndarray:
        return self._pattern_table(index, self.params.p1, self.params.q1)

    def memo_indices(self, indices: np.ndarray, cohorts: np.ndarray | None = None) -> np.ndarray:
        """Position of the value in the window, or d (none): the only thing round 1 depends on."""
        if cohorts is None:
            raise ValueError("dBitFlipPM samples buckets per device: pass cohorts")
        pos = (np.asarray(indices, dtype=np.int64) - np.asarray(cohorts, dtype=np.int64)) % self.params.d
        return np.where(pos < self.params.sampled, pos, self.params.sampled)

    def first_round(self, memo_inputs: np.ndarray, source: Any) -> np.ndarray:
        n, ds = memo_inputs.shape[0], self.params.sampled
        u = source.words((n, ds)).astype(np.uint64)
        t = np.where(np.arange(ds)[None, :] == memo_inputs[:, None],
                     np.uint64(self.params.p1_threshold), np.uint64(SCALE - self.params.p1_threshold))
        return u < t

    def second_round(self, first: np.ndarray, source: Any) -> np.ndarray:
        u = source.words(first.shape).astype(np.uint64)
        t2 = self.params.p2_threshold
        return u < np.where(first, np.uint64(t2), np.uint64(SCALE - t2))

    def batch_payloads(self, second: np.ndarray, cohorts: np.ndarray | None = None) -> Payloads:
        return {"cohort": np.asarray(cohorts, dtype=np.int64),
                "y": (second.astype(np.int64) * self._weights).sum(axis=1)}

    def sdk_cohorts(self, secret: bytes, metric: str) -> np.ndarray:
        return np.array([self.cohort_of(secret, metric)], dtype=np.int64)

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        """Both rounds with fresh coins (each row a new device); windows drawn if not given."""
        x = self.check_indices(indices)
        source = as_random_source(rng)
        s = source.below(self.params.d, x.shape[0]) if cohorts is None else np.asarray(cohorts, dtype=np.int64)
        if s.shape != x.shape or (s.size and (s.min() < 0 or s.max() >= self.params.d)):
            raise ValueError(f"cohorts must be integers in [0, {self.params.d}), one per value")
        bits = self.second_round(self.first_round(self.memo_indices(x, s), source), source)
        return self.batch_payloads(bits, s)

    def validate(self, payloads: Payloads) -> None:
        s = require_1d(payloads, "cohort")
        y = require_1d(payloads, "y", s.shape[0])
        for name, arr, high in (("cohort", s, self.params.d), ("y", y, 1 << self.params.sampled)):
            if arr.size and arr.dtype.kind not in "iu":
                raise InvalidPayload(f"{name} must be an integer", field=name)
            bad = (arr < 0) | (arr >= high)
            if bad.any():
                i = first_bad(bad)
                raise InvalidPayload(f"{name} {int(arr[i])} outside [0, {high})", index=i, field=name)

    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        s = np.asarray(payloads["cohort"], dtype=np.int64)
        y = np.asarray(payloads["y"], dtype=np.int64)
        bits = (y[:, None] >> np.arange(self.params.sampled)) & 1
        np.add.at(sketch.counts, s, bits)
        sketch.reports += np.bincount(s, minlength=self.params.d)

    def to_wire(self, payloads: Payloads) -> list[Any]:
        return [[int(s), int(y)] for s, y in zip(payloads["cohort"], payloads["y"])]

    def from_wire(self, objects: list[Any]) -> Payloads:
        for i, obj in enumerate(objects):
            if type(obj) not in (list, tuple) or len(obj) != 2 or any(type(v) is not int for v in obj):
                raise InvalidPayload("expected [window, bits] (two integers)", index=i, field="payload")
            if not 0 <= obj[0] < self.params.d:
                raise InvalidPayload(f"cohort {obj[0]} outside [0, {self.params.d})", index=i, field="cohort")
            if not 0 <= obj[1] < (1 << self.params.sampled):
                raise InvalidPayload(f"bits {obj[1]} outside [0, {1 << self.params.sampled})", index=i, field="y")
        arr = np.asarray(objects, dtype=np.int64).reshape(len(objects), 2)
        return {"cohort": arr[:, 0].copy(), "y": arr[:, 1].copy()}

    def bucket_totals(self, sketch: Sketch) -> tuple[np.ndarray, np.ndarray]:
        """(n_v, C_v): reports whose window holds v, and their bits for v."""
        k, ds = self.params.d, self.params.sampled
        buckets = self.windows(np.arange(k))                       # (k, d): bucket of (s, i)
        n_v = np.bincount(buckets.ravel(), weights=np.repeat(sketch.reports, ds), minlength=k)
        c_v = np.bincount(buckets.ravel(), weights=sketch.counts.ravel().astype(np.float64), minlength=k)
        return n_v, c_v

    def _variance(self, n: int, n_v: np.ndarray, f: np.ndarray) -> np.ndarray:
        big, small = self.params.p, self.params.q
        delta = big - small
        with np.errstate(divide="ignore", invalid="ignore"):
            noise = (f * big * (1 - big) + (1 - f) * small * (1 - small)) / (n_v * delta**2)
            sampling = f * (1 - f) * (n - n_v) / (n_v * max(n - 1, 1))
            return np.where(n_v > 0, n * n * (noise + sampling), np.inf)

    def estimate(self, sketch: Sketch) -> CountEstimate:
        n = sketch.total_reports
        n_v, c_v = self.bucket_totals(sketch)
        big, small = self.params.p, self.params.q
        with np.errstate(divide="ignore", invalid="ignore"):
            f_hat = np.where(n_v > 0, (c_v / n_v - small) / (big - small), np.nan)
        f = np.clip(np.nan_to_num(f_hat, nan=0.0), 0.0, 1.0)
        return CountEstimate(n * f_hat, self._variance(n, n_v, f), n, {"bucket_reports": n_v})

    def permanent_variance(self, sketch: Sketch, estimate: CountEstimate) -> np.ndarray:
        """λ·(randomisation part) + (sampling part): which devices' windows hold v is permanent too
        (``MemoisedServer.permanent_variance``); the sampling part is the second term of ``_variance``."""
        n = estimate.n
        n_v = np.asarray(estimate.extra["bucket_reports"], dtype=np.float64)
        f = np.clip(np.nan_to_num(np.asarray(estimate.counts, dtype=np.float64) / max(n, 1), nan=0.0), 0.0, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            sampling = np.where(n_v > 0, n * n * f * (1 - f) * (n - n_v) / (n_v * max(n - 1, 1)), 0.0)
        lam = self.second_round_keep
        return lam * np.asarray(estimate.variances, dtype=np.float64) + (1 - lam) * sampling

    def variance(self, n: int, true_counts: np.ndarray | float) -> np.ndarray:
        """Var[ĉ(v)] with the expected n_v = n·d/k."""
        f = np.asarray(true_counts, dtype=np.float64) / max(n, 1)
        return self._variance(n, np.full(np.shape(f), n * self.params.sampled / self.params.d), f)

    def audit_chain(self, x: Any, cohort: int | None) -> tuple[str, np.ndarray, float, float] | None:
        """The memoised bits of the cohort's window (x's 1 w.p. p₁, others q₁), each report's
        flip of them (p₂, q₂)."""
        pr = self.params
        window = self.windows(np.array([int(cohort or 0)]))[0]
        return "bit", np.where(window == x, pr.p1, pr.q1), pr.p2, pr.q2

    def report_statistics(self, payloads: Payloads) -> np.ndarray | None:
        """The bit pattern of the sampled buckets (y = Σ bitᵢ·2^i)."""
        return (payloads["y"][:, None] >> np.arange(self.params.sampled)) & 1

    def memo_lumps(self, sketch: Sketch, estimate: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One class: a = n/(n_v(P − Q)), ν = n_v·q₂, μ = n_v·q₁ (n_v reports sample v's bucket)."""
        par = self.params
        n = float(sketch.total_reports)
        q2 = float(par.q2)
        n_v, _ = self.bucket_totals(sketch)
        with np.errstate(divide="ignore", invalid="ignore"):
            jump = np.where(n_v > 0, n / (n_v * (par.p - par.q)), 0.0)
        return jump[None, :], (n_v * q2)[None, :], (n_v * par.q1)[None, :]

    def values_supported(self) -> int:
        """The window's sampled buckets."""
        return int(self.params.sampled)

    def forged_gain(self) -> tuple[float, float] | None:
        """ĉ_v = n(C_v/n_v − Q)/(P − Q), n_v ≈ n·d/k reports seeing v: one forged report whose window
        holds v moves it up by (k/d)(1 − Q)/(P − Q) (v's bit set) and down by (k/d)Q/(P − Q) (v's
        bit 0), at f_v = 0, to first order."""
        par = self.params
        return ((par.d / par.sampled) * (1.0 - par.q) / (par.p - par.q),
                (par.d / par.sampled) * par.q / (par.p - par.q))

    def sampled_support(self, sketch: Sketch) -> tuple[np.ndarray, np.ndarray, float] | None:
        """A bucket is seen by the devices whose window holds it: ``bucket_totals`` and q."""
        n_v, c_v = self.bucket_totals(sketch)
        return n_v, c_v, self.params.q

    def linking_number(self) -> tuple[str, int, bool, bool] | None:
        """The window (its sampled buckets) in [0, k), per metric."""
        return "dBitFlipPM window", int(self.params.d), True, False


__all__ = ["DBitFlipServer"]
