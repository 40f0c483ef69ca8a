"""dBitFlipPM: histograms from d sampled buckets, memoised (Ding, Kulkarni, Yekhanin 2017).

Ding et al.'s histogram mechanism for Windows telemetry, as a two-round protocol over a
domain of k buckets (a categorical metric, or the buckets of a numeric histogram):

- each device samples d of the k buckets once, permanently: here the cyclic window
  S_s = {s, s+1, ..., s+d−1} (mod k) of its cohort s ∈ [k], derived from the secret (uniform
  in simulation). Every bucket lies in exactly d windows, so P(v ∈ S) = d/k for every v,
  independent of the value;
- it reports one bit per sampled bucket: bit i says "my value is S_s[i]". Round 1, memoised,
  is symmetric unary randomisation at ε∞ (P(1 | true) = p₁, P(1 | false) = q₁ = 1 − p₁);
  round 2 flips each bit fresh with P(1 | 1) = p₂, P(1 | 0) = q₂ = 1 − p₂.

Privacy. Changing the value changes at most two bits (one if d = 1), so one report costs
ε₁ = 2·ln(P/Q) with P = p₁p₂ + q₁q₂, Q = 1 − P (ln(P/Q) when d = 1), and the memoised round
ε∞ = 2·ln(p₁/q₁). The memoised response depends only on *which* sampled bucket holds the
value, or none: d + 1 memo keys, so a device spends at most (d+1)·ε∞ for life, however many
values it holds (Ding et al. 2017).

Estimator. n_v = reports whose window contains v, C_v = their bits for v. Given the windows
(independent of the values), f̂_v = (C_v/n_v − Q)/(P − Q) is unbiased for v's frequency among
those devices, hence for its frequency in the population; ĉ_v = n·f̂_v with
Var[f̂_v] = (f P(1−P) + (1−f) Q(1−Q))/(n_v (P−Q)²) + f(1−f)(n − n_v)/(n_v (n − 1)).

The window s is permanent: log₂ k bits that are the same in every report of the metric from
one device (as RAPPOR's cohort; docs/privacy.md).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from .._lazy import np
from ..errors import InvalidPayload
from ..memo import MemoCache
from ..randomness import SCALE, RandomLike, as_random_source, realised, threshold_floor
from .base import CountEstimate, Payloads, Protocol, Sketch, check_domain_and_epsilon, first_bad, require_1d
from .longitudinal import Memoised, SymmetricSecondRound, chain, check_epsilon_pair, log_ratio

#: Largest number of sampled buckets (a report is d bits in one integer).
MAX_SAMPLED = 32
#: output_probabilities enumerates 2^d bit patterns per window.
MAX_ENUMERATED_SAMPLED = 12
#: derive_cohort scope of a device's permanent window.
COHORT_SCOPE = "dbitflip\x00"


@dataclasses.dataclass(frozen=True)
class DBitFlipParams(SymmetricSecondRound):
    d: int               # k in the paper: buckets of the domain
    epsilon: float       # ε₁: one report
    epsilon_inf: float   # ε∞: the memoised round
    sampled: int = 1     # d in the paper: buckets each device samples

    def __post_init__(self) -> None:
        check_domain_and_epsilon(self.d, self.epsilon, "dBitFlipPM")
        check_epsilon_pair(self.epsilon, self.epsilon_inf, "dbitflip")
        if isinstance(self.sampled, bool) or not isinstance(self.sampled, int) \
                or not 1 <= self.sampled <= min(self.d, MAX_SAMPLED):
            raise ValueError(f"sampled_buckets must be an integer in [1, {min(self.d, MAX_SAMPLED)}], "
                             f"got {self.sampled!r}")
        if not (self.p1 > 0.5 and self.p > self.q):
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-32 probability grid")

    @property
    def bits_changed(self) -> int:
        """How many reported bits a change of value can flip: 2, or 1 when d = 1."""
        return 2 if self.sampled >= 2 else 1

    @functools.cached_property
    def p1_threshold(self) -> int:
        half = math.exp(self.epsilon_inf / self.bits_changed)
        return threshold_floor(half / (half + 1))

    @property
    def p1(self) -> float:
        return realised(self.p1_threshold)

    @property
    def q1(self) -> float:
        return realised(SCALE - self.p1_threshold)

    def _epsilon_at(self, threshold: int) -> float:
        p2 = realised(threshold)
        big, _ = chain(self.p1, self.q1, p2, realised(SCALE - threshold))
        return self.bits_changed * log_ratio(big, 1 - big)



class DBitFlip(Memoised, Protocol):
    name = "dbitflip"
    uses_cohorts = True

    def __init__(self, params: DBitFlipParams) -> None:
        super().__init__(params)
        self._memo = MemoCache()

    @functools.cached_property
    def _weights(self) -> np.ndarray:
        """2^i for the sampled bits i (the report's integer y = Σ bitᵢ·2^i)."""
        return np.int64(1) << np.arange(self.params.sampled, dtype=np.int64)

    # --- shape -----------------------------------------------------------------------------------
    @property
    def domain_size(self) -> int:
        return self.params.d

    @property
    def cohorts(self) -> int:
        return self.params.d

    @property
    def cell_shape(self) -> tuple[int, ...]:
        return (self.params.sampled,)

    @property
    def payload_bits(self) -> int:
        return self.params.sampled + max(1, math.ceil(math.log2(self.params.d)))

    @property
    def memo_key_space(self) -> int:
        return self.params.sampled + 1

    def windows(self, cohorts: np.ndarray) -> np.ndarray:
        """S_s for each cohort: int64 (n, d_sampled)."""
        return (np.asarray(cohorts)[:, None] + np.arange(self.params.sampled)) % self.params.d

    # --- privacy -----------------------------------------------------------------------------------
    @property
    def epsilon(self) -> float:
        return self.params.bits_changed * log_ratio(self.params.p, self.params.q)

    @property
    def epsilon_longitudinal(self) -> float:
        return self.params.bits_changed * log_ratio(self.params.p1, self.params.q1)

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

    # --- device side -----------------------------------------------------------------------------
    def cohort_of(self, secret: bytes, metric: str) -> int:
        """This device's permanent window for ``metric`` (HMAC of the secret; cached in memory)."""
        return self.permanent_cohort(secret, metric, COHORT_SCOPE, self.params.d)

    def memo_indices(self, indices: np.ndarray, cohorts: np.ndarray | None = None) -> np.ndarray:
        """Position of the value in the window, or d (none): the only thing round 1 depends on."""
        if cohorts is None:
            raise ValueError("dBitFlipPM samples buckets per device: pass cohorts")
        pos = (np.asarray(indices, dtype=np.int64) - np.asarray(cohorts, dtype=np.int64)) % self.params.d
        return np.where(pos < self.params.sampled, pos, self.params.sampled)

    def memo_index(self, index: int, secret: bytes, metric: str) -> int:
        return self.memo_index_in_cohort(index, self.cohort_of(secret, metric))

    def memo_index_in_cohort(self, index: int, cohort: int | None) -> int:
        """``memo_indices`` of one value in window ``cohort`` (plain Python)."""
        if cohort is None or not 0 <= cohort < self.params.d:
            raise ValueError(f"cohorts must be integers in [0, {self.params.d}), one per value")
        pos = (index - cohort) % self.params.d
        return pos if pos < self.params.sampled else self.params.sampled

    def first_round_one(self, memo_input: int, source: Any) -> list[bool]:
        """``first_round`` of one input: bit i is uᵢ < T₁ at the value's position, < 2^32 − T₁ elsewhere."""
        t1 = self.params.p1_threshold
        t0 = SCALE - t1
        return [u < (t1 if i == memo_input else t0) for i, u in enumerate(source.words(self.params.sampled))]

    def second_round_one(self, first: list[bool], source: Any) -> int:
        """``second_round`` of one response, as the report's integer Σ bitᵢ·2^i."""
        t2 = self.params.p2_threshold
        t0 = SCALE - t2
        y = 0
        for i, (b, u) in enumerate(zip(first, source.words(len(first)))):
            if u < (t2 if b else t0):
                y |= 1 << i
        return y

    def wire_one(self, second: int, cohort: int | None) -> list[int]:
        return [int(cohort), second]  # type: ignore[arg-type]

    def sdk_cohort(self, secret: bytes, metric: str) -> int:
        return self.cohort_of(secret, metric)

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

    # --- collector side ----------------------------------------------------------------------------
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

    # --- estimators side ------------------------------------------------------------------------------
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
        (``Memoised.permanent_variance``); the sampling part is the second term of ``_variance``."""
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


OPTION_KEYS: frozenset[str] = frozenset({"epsilon_inf", "sampled_buckets"})


def from_options(domain_size: int | None, epsilon: float | None, options: dict[str, Any]) -> DBitFlip:
    """Build from registry fields: ``epsilon`` (ε₁), ``epsilon_inf`` (ε∞), ``sampled_buckets`` (d, default 1)."""
    if domain_size is None:
        raise ValueError("dbitflip needs a fixed domain of buckets")
    unknown = set(options) - OPTION_KEYS
    if unknown:
        raise ValueError(f"unknown dbitflip option(s) {sorted(unknown)}; it takes epsilon_inf, sampled_buckets")
    eps_inf = check_epsilon_pair(epsilon, options.get("epsilon_inf"), "dbitflip")
    return DBitFlip(DBitFlipParams(d=domain_size, epsilon=float(epsilon), epsilon_inf=eps_inf,  # type: ignore[arg-type]
                                   sampled=options.get("sampled_buckets", 1)))
