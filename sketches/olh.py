"""OLH's server half (docs/math.md §5): the hash over arrays, the vectorised mechanism, wire
decoding, validate, accumulate, the exact output table and the decoders — weighted least squares
over the fixed seed set (dense for the random family, one DFT over Z_g^t for the linear one) with
their sandwich variances. The device half (params, the hash of one value, the design's rank
certificate, one report) is client_sdk.protocols.olh, whose module docstring derives all of it."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np

from client_sdk.errors import EstimationError, InvalidPayload
from client_sdk.protocols.olh import GAMMA, MIX1, MIX2, OLH, SALT, hash_one

from . import projective as proj
from .base import (
    CountEstimate,
    Payloads,
    ServerHalf,
    Sketch,
    add_cells,
    first_bad,
    int_rows_from_wire,
    require_1d,
)
from .randomness import RandomLike, as_random_source, bernoulli
from .registry import register


# --- the hash family H_s over arrays (client_sdk.protocols.olh's module docstring) -----------------
def _mix_array(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on a uint64 array (wraps mod 2^64)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX2)
    return z ^ (z >> np.uint64(31))


def _reduce_array(h: np.ndarray, g: int) -> np.ndarray:
    """⌊h·g/2^64⌋ (Lemire) from 32-bit halves: hi·g + ⌊lo·g/2^32⌋ < 2^64 for g < 2^32."""
    g64 = np.uint64(g)
    hi, lo = h >> np.uint64(32), h & np.uint64(0xFFFFFFFF)
    return ((hi * g64 + ((lo * g64) >> np.uint64(32))) >> np.uint64(32)).astype(np.int64)


def cohort_seeds(m: int) -> np.ndarray:
    """seed_s = mix(SALT + (s+1)·γ) for s ∈ [m], as uint64."""
    s = np.arange(1, m + 1, dtype=np.uint64)
    return _mix_array(np.uint64(SALT) + s * np.uint64(GAMMA))


def hash_values(seeds: np.ndarray, values: np.ndarray, g: int) -> np.ndarray:
    """H_s(v) = ⌊mix(seed_s + (v+1)·γ)·g/2^64⌋, broadcasting seeds (uint64) against values."""
    v = np.asarray(values).astype(np.uint64) + np.uint64(1)
    return _reduce_array(_mix_array(np.asarray(seeds, dtype=np.uint64) + v * np.uint64(GAMMA)), g)


@dataclasses.dataclass(frozen=True)
class _Decoder:
    """Per cohort-weighting decoding matrices: B = Φ⁻¹Xᵀ (d × occupied cells) and Φ."""

    B: np.ndarray
    phi: np.ndarray


@register(OLH)
class OLHServer(ServerHalf):
    """OLH on the server: m×g counters, T[s, y] (see the device half's module docstring)."""

    device: OLH
    _DECODER_CACHE_SIZE = 2  # B is d × (occupied cells) floats: up to ~67 MB at d = MAX_DOMAIN

    def __init__(self, device: OLH) -> None:
        super().__init__(device)
        self._decoders: dict[bytes, _Decoder] = {}
        if device.design_unverified:   # the device's check left it open (OLH.check_design)
            self.check_design()

    @property
    def cell_shape(self) -> tuple[int, ...]:
        return (self.params.g,)

    # --- hashing ----------------------------------------------------------------------------------
    @functools.cached_property
    def seeds(self) -> np.ndarray:
        """seed_s for every cohort (uint64, shape (m,))."""
        return cohort_seeds(self.params.m)

    @functools.cached_property
    def hash_table(self) -> np.ndarray:
        """H_s(v) for all cohorts and values: int64, shape (m, d). Built on first use."""
        return hash_values(self.seeds[:, None], np.arange(self.params.d), self.params.g)

    def output_probabilities(self, index: int) -> np.ndarray:
        """P(y | x=index, cohort s), shape (m, g): q' everywhere except p' at y = H_s(index).

        The cohort does not depend on x, so the audit bounds the ratio within each row.
        """
        m, g = self.params.m, self.params.g
        probs = np.full((m, g), self.q)
        probs[np.arange(m), self._hash(np.arange(m), np.full(m, index))] = self.p
        return probs

    def _hash(self, s: np.ndarray, x: np.ndarray) -> np.ndarray:
        """H_s(x) for arrays of cohorts and values, in either family."""
        g = self.params.g
        if self.linear:
            t = self.params.t
            return proj.inner(proj.direction_codes(s, g, t), x, g, t)
        return hash_values(self.seeds[s], x, g)

    # --- the four verbs -----------------------------------------------------------------------------
    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        """Randomise: y = H_s(x) w.p. p', else a uniform other bucket; cohorts drawn if not given."""
        x = self.check_indices(indices)
        source = as_random_source(rng)
        n, m, g = x.shape[0], self.params.m, self.params.g
        if cohorts is None:
            s = source.below(m, n)
        else:
            s = self._check_cohorts(cohorts, x.shape)
        if n == 1:  # device path: one report, Python-integer hash (no table, no array overhead)
            h = np.array([self.cohort_hash(int(s[0]), int(x[0]))], dtype=np.int64)
        else:
            h = self._hash(s, x)
        keep = bernoulli(source, self.device.keep_threshold, n)
        other = source.below(g - 1, n)
        other += other >= h  # uniform over the g−1 buckets != H_s(x)
        return {"cohort": s, "y": np.where(keep, h, other)}


    def _check_cohorts(self, cohorts: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """Device-side cohort array (from the client secret): integers in [0, m), one per value."""
        s = np.asarray(cohorts)
        if s.shape != shape:
            s = np.broadcast_to(s, shape)
        m = self.params.m
        if s.size and s.dtype.kind not in "iu":
            raise ValueError(f"cohorts must be integers in [0, {m}), got dtype {s.dtype}")
        if s.size == 1:  # the device path: avoid two array reductions
            bad = not 0 <= int(s.flat[0]) < m
        else:
            bad = bool(s.size) and (s.min() < 0 or s.max() >= m)
        if bad:
            raise ValueError(f"cohorts must be integers in [0, {m}), one per value")
        return s.astype(np.int64, copy=False)

    def validate(self, payloads: Payloads) -> None:
        s = require_1d(payloads, "cohort")
        y = require_1d(payloads, "y", s.shape[0] if s.ndim else None)
        for arr, field, high in ((s, "cohort", self.params.m), (y, "y", self.params.g)):
            if arr.ndim != 1:
                raise InvalidPayload(f"expected a 1-d array, got shape {arr.shape}", field=field)
            if arr.size and arr.dtype.kind not in "iu":
                raise InvalidPayload(f"OLH {field} must be an integer, got dtype {arr.dtype}", field=field)
            bad = (arr < 0) | (arr >= high)
            if bad.any():
                i = first_bad(bad)
                raise InvalidPayload(f"{field} {int(arr[i])} outside [0, {high})", index=i, field=field)

    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        add_cells(sketch, *self.flat_cells(payloads))

    def flat_cells(self, payloads: Payloads) -> tuple[np.ndarray, np.ndarray]:
        s = np.asarray(payloads["cohort"], dtype=np.int64)
        return s * self.params.g + np.asarray(payloads["y"], dtype=np.int64), s

    def small_count_model(self, sketch: Sketch, support: np.ndarray | None = None) \
            -> tuple[np.ndarray, float, float] | None:
        """(support counts, p*, q*) when this OLH is a pure protocol, else None.

        The linear family with one cohort (t = 1: g >= d, H(v) = v) is GRR on [g]: support T[0, v],
        p* = p', q* = q', and its estimate is the pure one, so the estimators may use the exact
        small-count interval (docs/math.md §8) where support counts are tiny (high ε)."""
        if not (self.linear and self.params.m == 1):
            return None
        return np.asarray(sketch.counts, dtype=np.float64)[0, :self.params.d], self.p, self.q

    def support_counts(self, sketch: Sketch) -> np.ndarray | None:
        """S(v) = Σ_s T[s, H_s(v)] (Wang et al. 2017): a report in cohort s supports v when its y is
        H_s(v). Cohorts are uniform and independent of the value, so every report supports v with
        one probability λ_v = E_s[q' + (p' − q')·Σ_{u: H_s(u) = H_s(v)} π_u] and S(v) is Bin(n, λ_v).
        The random family tabulates H_s(v) (``hash_table``), the linear one only with one cohort
        (GRR on [g], ``small_count_model``); None for the others."""
        small = self.small_count_model(sketch)
        if small is not None:
            return small[0]
        if self.linear:
            return None
        table = np.asarray(sketch.counts, dtype=np.float64)
        return np.take_along_axis(table, self.hash_table, axis=1).sum(axis=0)

    def estimate(self, sketch: Sketch) -> CountEstimate:
        """Weighted least squares ĉ = Φ⁻¹ Σ_s A_sᵀ Z_s with sandwich per-item variances."""
        m, g, d = self.params.m, self.params.g, self.params.d
        n_s = np.asarray(sketch.reports, dtype=np.float64)
        if np.shape(sketch.counts) != (m, g) or n_s.shape != (m,):
            raise EstimationError(f"OLH sketch must have counts of shape {(m, g)} and reports of shape "
                                  f"{(m,)}, got {np.shape(sketch.counts)} and {n_s.shape}")
        n = sketch.total_reports
        if n == 0:
            return CountEstimate(np.zeros(d), np.zeros(d), 0, {"method": "wls"})
        if self.linear:
            return self._estimate_linear(sketch.counts, n_s, sketch)
        T = np.asarray(sketch.counts, dtype=np.float64)
        dec = self.decoder(n_s)
        rows = self.design[0]
        Z = (T - n_s[:, None] * self.q) / (self.p - self.q)  # E[Z_s] = (n_s/n) A_s c
        counts = dec.B @ Z.ravel()[rows]
        variances = self._model_variance(dec.B, counts, n_s)
        # The plain OLH support estimator (S_T(v) − n/g)/(p'−1/g), S_T(v) = Σ_s T[s, H_s(v)], has mean
        # (g(Φc)_v − n)/(g−1) on this sketch: report its frozen-collision bias at c = ĉ (docs/math.md §5).
        naive_bias = (g * (dec.phi @ counts) - n) / (g - 1) - counts
        extra = {"method": "wls", "cohort_reports": sketch.reports.copy(), "naive_collision_bias": naive_bias}
        return CountEstimate(counts, variances, n, extra)

    def variance(self, n: int, true_counts: np.ndarray | float) -> np.ndarray:
        """Theoretical Var[ĉ(v)] with equal cohorts n_s = n/m.

        ``true_counts`` of shape (d,): the exact sandwich for this design and population (O(m·g·d²)
        on first use, cached). A scalar c: the design-averaged figure for an item of count c whose
        population is otherwise spread out, N/(N−d−1) × the plain-OLH formula (docs/math.md §5).
        """
        c = float(true_counts) if isinstance(true_counts, (int, float)) else np.asarray(true_counts, dtype=np.float64)
        d = self.params.d
        if isinstance(c, float) or c.ndim == 0:
            return self.device.variance(n, float(c))  # a scalar count: the device half's plain floats
        if c.shape != (d,):
            raise ValueError(f"true_counts must be a scalar or have shape ({d},), got {c.shape}")
        if n <= 0:
            return np.zeros(d)
        m = self.params.m
        if self.linear:
            return self._linear_variance(c, np.full(m, n / m))
        return self._model_variance(self._equal_decoder.B, c, np.full(m, n / m))

    # --- wire ---------------------------------------------------------------------------------------
    def to_wire(self, payloads: Payloads) -> list[Any]:
        return np.stack([np.asarray(payloads["cohort"], dtype=np.int64),
                         np.asarray(payloads["y"], dtype=np.int64)], axis=1).tolist()

    def from_wire(self, objects: list[Any]) -> Payloads:
        arr = int_rows_from_wire(objects, 2)  # fast path; the loop below names what is wrong
        if arr is not None:
            return {"cohort": arr[:, 0].copy(), "y": arr[:, 1].copy()}
        for i, obj in enumerate(objects):
            if type(obj) not in (list, tuple) or len(obj) != 2:
                raise InvalidPayload("expected [cohort, y], a list of two integers", index=i, field="payload")
            if type(obj[0]) is not int or type(obj[1]) is not int:
                raise InvalidPayload(f"expected [cohort, y] integers, got [{type(obj[0]).__name__}, "
                                     f"{type(obj[1]).__name__}]", index=i, field="payload")
        try:
            arr = np.asarray(objects, dtype=np.int64).reshape(-1, 2)
        except OverflowError:
            i = next(i for i, obj in enumerate(objects) if not all(-2**63 <= v < 2**63 for v in obj))
            raise InvalidPayload("integer out of range", index=i, field="payload") from None
        return {"cohort": arr[:, 0].copy(), "y": arr[:, 1].copy()}

    # --- the audit's attacker (estimators/audit.py) ------------------------------------------------
    def audit_chain(self, x: Any, cohort: int | None) -> tuple[str, np.ndarray, float, float] | None:
        """One GRR over [g] of the cohort's hash of x: a = H_s(x) (p, q)."""
        g = self.params.g
        return "cat", np.eye(g)[hash_one(int(cohort or 0), x, g)], self.device.p, self.device.q

    def report_statistics(self, payloads: Payloads) -> np.ndarray | None:
        return np.eye(self.params.g, dtype=np.int64)[payloads["y"]]

    # --- linear family (module docstring) ----------------------------------------------------------
    def _estimate_linear(self, T: np.ndarray, n_s: np.ndarray, sketch: Sketch) -> CountEstimate:
        """ĉ(v) = g^(1−t) Σ_s (n/n_s) Z_s[H_s(v)] − n(m−1)/g^t by one DFT, with its sandwich variance.

        Empty cohorts (too few reports for m cohorts): a line s without reports says nothing of
        its bucket masses M_s, the g−1 characters on it are not identified, and no estimator is
        unbiased for every population. The estimate then takes the uniform mass n/g in their
        place, so its bias is b(v) = −g^(1−t) Σ_{s empty} (M_s(H_s(v)) − n/g), which 0 <= M_s <= n
        bounds to [−g^(1−t)·E·n(1−1/g), g^(1−t)·E·n/g] for E empty cohorts, whatever the
        population: ``extra["bias_bounds"]`` (estimators.frequency widens the intervals and the
        test of "c(v) = 0" by it), and the variance keeps the cohort-sampling term (conservative).
        """
        m, g, t, d = self.params.m, self.params.g, self.params.t, self.params.d
        present = n_s > 0
        empty = int(m - present.sum())
        n = float(n_s.sum())
        masses = T - n_s[:, None] * self.q    # Z_s·(n/n_s), in place: at d = 10^6 each copy is 16 MB
        masses /= self.p - self.q
        masses *= np.divide(n, n_s, out=np.zeros(m), where=present)[:, None]
        if empty:
            masses[~present] = n / g    # E[bucket mass] of a uniform population: the unidentified part
        counts = proj.line_sums(masses, g, t, d) * float(g) ** (1 - t) - n * (m - 1) / float(g) ** t
        extra = {"method": "wls-linear", "cohort_reports": sketch.reports.copy()}
        if empty:
            share = float(g) ** (1 - t) * empty * n
            extra.update(empty_cohorts=empty, bias_bounds=(-share * (1 - 1 / g), share / g))
        return CountEstimate(counts, self._linear_variance(counts, n_s, sampling=not empty), int(n), extra)

    def _linear_variance(self, c: np.ndarray, n_s: np.ndarray, sampling: bool = True) -> np.ndarray:
        """g^(2−2t) n² Σ_s π(1−π)/(n_s(p'−q')²) at π_s,H_s(v), minus c(1 − c/n) (module docstring),
        over the cohorts with reports; ``sampling=False`` keeps the cohort-sampling term (the
        variance of a population's estimate, larger: what empty cohorts use)."""
        g, t = self.params.g, self.params.t
        n = float(n_s.sum())
        pi = proj.line_masses(c, g, t)   # then q + (p − q)·M/n, clipped, and π(1 − π)/n_s, in place
        pi *= self.p - self.q
        pi /= n
        pi += self.q
        np.clip(pi, 0.0, 1.0, out=pi)
        cells = 1 - pi
        cells *= pi
        del pi
        cells *= np.divide(1.0, n_s, out=np.zeros(n_s.shape), where=n_s > 0)[:, None]
        first = proj.line_sums(cells, g, t, c.shape[0]) * (n * float(g) ** (1 - t) / (self.p - self.q)) ** 2
        if not sampling:
            return np.maximum(first, 0.0)
        c = np.clip(c, 0.0, n)
        return np.maximum(first - c * (1 - c / n), 0.0)


    # --- design ------------------------------------------------------------------------------------
    def check_design(self) -> None:
        """Raise ValueError unless Φ (equal cohorts) has full rank, i.e. every c(v) is identifiable
        (the linear family always has full rank): the device's GF(2) certificate, else numpy's
        Cholesky factor of Φ̄ decides."""
        if not self.linear and not self.device.full_rank_mod2():
            self._equal_factor  # noqa: B018 - builds and checks

    @functools.cached_property
    def design(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Occupied cells: (rows, row_of, row_cohort, cohort_start).

        Only cells some value hashes to enter the model (an empty bucket's row of X is zero), so
        X has rows = sorted flat cell ids s·g + y that occur; row_of[s, v] is the row of (s, H_s(v)),
        row_cohort the cohort of each row, cohort_start the first row of each cohort (rows are
        grouped by cohort, and every cohort has at least one occupied cell).
        """
        m, g = self.params.m, self.params.g
        flat = np.arange(m)[:, None] * g + self.hash_table
        rows, row_of = np.unique(flat.ravel(), return_inverse=True)
        row_cohort = rows // g
        return rows, row_of.reshape(flat.shape), row_cohort, np.searchsorted(row_cohort, np.arange(m))

    def _onehot(self) -> np.ndarray:
        """X = stacked A_s over occupied cells, dense 0/1 (rebuilt on demand: large and cheap)."""
        rows, row_of, _, _ = self.design
        X = np.zeros((rows.shape[0], self.params.d))
        X[row_of.ravel(), np.tile(np.arange(self.params.d), self.params.m)] = 1.0
        return X

    def _factor(self, X: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Φ = Σ_s w_s A_sᵀA_s = Xᵀ diag(w) X and its lower Cholesky factor; LinAlgError if singular.

        numpy only: the design check (``check_design``) does not pull in scipy.
        """
        phi = (X * weights[self.design[2]][:, None]).T @ X
        lower = np.linalg.cholesky(phi)
        # Collinear columns can leave a pivot of rounding size instead of failing: demand a sane one.
        # (Healthy designs have pivots of order (1 − 1/g)(1 − √(d/N))², far above this.)
        if np.min(np.diag(lower)) ** 2 < 1e-9 * np.max(np.diag(phi)):
            raise np.linalg.LinAlgError("singular collision matrix")
        return phi, lower

    @staticmethod
    def _solve(lower: np.ndarray, rhs: np.ndarray) -> np.ndarray:
        """Φ⁻¹·rhs from the Cholesky factor (server side: scipy imported on first decode)."""
        from scipy import linalg

        return linalg.cho_solve((lower, True), rhs, check_finite=False)

    @functools.cached_property
    def _equal_factor(self) -> tuple[np.ndarray, np.ndarray]:
        """Φ̄ (equal cohorts, w_s = 1/m) and its factor; ValueError if the design is rank deficient."""
        m = self.params.m
        try:
            return self._factor(self._onehot(), np.full(m, 1.0 / m))
        except np.linalg.LinAlgError:
            raise self.device.rank_deficient() from None

    @functools.cached_property
    def _equal_decoder(self) -> _Decoder:
        """Decoder at equal cohorts n_s = n/m: what ``variance`` evaluates (cached per params)."""
        phi, lower = self._equal_factor
        return _Decoder(self._solve(lower, self._onehot().T), phi)

    def decoder(self, n_s: np.ndarray) -> _Decoder:
        """Decoder for cohort sizes n_s (cached: the same sketch is usually queried repeatedly)."""
        key = n_s.tobytes()
        dec = self._decoders.get(key)
        if dec is None:
            self.check_design()
            X = self._onehot()
            try:
                phi, lower = self._factor(X, n_s / n_s.sum())
            except np.linalg.LinAlgError:
                empty = int((n_s == 0).sum())
                raise EstimationError(f"too few reports to decode: {empty} of {self.params.m} cohorts are "
                                      "empty and the others do not identify every value; collect more "
                                      "reports") from None
            dec = _Decoder(self._solve(lower, X.T), phi)
            if len(self._decoders) >= self._DECODER_CACHE_SIZE:
                self._decoders.pop(next(iter(self._decoders)))
            self._decoders[key] = dec
        return dec

    def _model_variance(self, B: np.ndarray, c: np.ndarray, n_s: np.ndarray) -> np.ndarray:
        """Var[ĉ(v)] = [B Σ_Z Bᵀ]_vv − c(v)(1 − c(v)/n) at counts c (module docstring).

        Σ_Z is blockwise multinomial, Σ_Zs = n_s(D_π − ππᵀ)/(p'−q')², at the model's cell
        probabilities π_s,y = q' + (p'−q')·Σ_{v: H_s(v)=y} c(v)/n (rows of B: occupied cells only;
        empty cells have zero columns in B and drop out).
        """
        _, row_of, row_cohort, cohort_start = self.design
        m, d = self.params.m, self.params.d
        n = float(n_s.sum())
        mass = np.bincount(row_of.ravel(), weights=np.broadcast_to(c / n, (m, d)).ravel(),
                           minlength=B.shape[1])  # Σ_{v: H_s(v)=y} f(v) per occupied cell
        # Linear in c, so unbiased at c = ĉ (clipping ĉ first would inflate every cell).
        pi = np.clip(self.q + (self.p - self.q) * mass, 0.0, 1.0)
        c = np.clip(c, 0.0, n)
        # diag(B D_T Bᵀ) − Σ_s (B_s T_s)²/n_s with T = n_s π (E[T] under the model)
        cells = n_s[row_cohort] * pi
        first = (B * B) @ cells
        u = np.add.reduceat(B * cells, cohort_start, axis=1)  # (B_s T_s)_v, shape (d, m)
        second = (u * u) @ np.divide(1.0, n_s, out=np.zeros(m), where=n_s > 0)
        return np.maximum((first - second) / (self.p - self.q) ** 2 - c * (1 - c / n), 0.0)

    def support_probabilities(self) -> tuple[float, float] | None:
        """Local hashing: p* = p', q* = 1/g (Wang et al. 2017); LOLOHA's p' is its two rounds'
        composed keep probability. One value a report (the others hashed to its cell are a 1/g
        share of the domain)."""
        return float(self.p), 1.0 / self.params.g

    def linking_number(self) -> tuple[str, int, bool, bool] | None:
        """The cohort in [0, m), re-derived every UTC day: it links the reports of one day only."""
        return "OLH cohort", int(self.params.m), False, False

    # --- planning (estimators/plan.py) --------------------------------------------------------------
    def expected_empty_cohorts(self, n: int) -> float:
        """m(1 − 1/m)^n: each of n reports falls in one of m cohorts uniformly; the decoder rests on
        every cohort (an empty one leaves its share of each value unidentified)."""
        m = self.params.m
        return m * math.exp(n * math.log1p(-1 / m)) if m > 1 else 0.0

    def design_note(self, n: int | None = None) -> str:
        """The hash family, g and the cohorts with the inflation they cost; for the linear family,
        where ``n`` reports leave cohorts empty, how many and what fills them."""
        params = self.params
        family = getattr(params, "family", "random")
        empty = self.expected_empty_cohorts(n) if n else 0.0
        if family == "linear" and empty >= 0.5:
            # E[empty] = m e^(−n/m) < 1/2 from n >= m ln(2m)
            needed = math.ceil(params.m * math.log(2 * params.m))
            return (f"linear family, g={params.g}, {params.m:,} cohorts: ~{empty:,.0f} stay empty at "
                    f"{n:,} reports ({n / params.m:.1f} per cohort), which widens every "
                    f"interval by their unidentified share; use hr (no cohorts) or >= {needed:,} reports")
        if family == "linear":
            return f"linear family, g={params.g}, {params.m:,} cohorts (inflation ~1 + m/n)"
        return f"{params.m:,} cohorts, g={params.g}, inflation {params.approx_inflation:.3f}"


OPTION_KEYS: frozenset[str] = frozenset({"cohorts", "hash_range", "hash_family"})



__all__ = ["OLHServer", "cohort_seeds", "hash_values"]
