"""RAPPOR: Bloom filter + permanent and instantaneous randomised response (docs/math.md §7).

Erlingsson, Pihur, Korolova, CCS 2014. Parameters in the paper's symbols:

    k  Bloom filter bits          (registry key bloom_bits, default 128)
    h  hash functions per cohort  (hashes, default 2)
    m  cohorts                    (cohorts, default 64)
    f  PRR noise: B'ᵢ = 1 w.p. f/2, 0 w.p. f/2, Bᵢ w.p. 1−f      (prob_f, default 0.5)
    p  IRR: P(Sᵢ = 1 | B'ᵢ = 0)                                 (prob_p, default 0.5)
    q  IRR: P(Sᵢ = 1 | B'ᵢ = 1)                                 (prob_q, default 0.75)

Client: B = Bloom filter of the value under its cohort's h hashes (client_sdk.hashing);
B' = PRR(B), memoised per (client, metric, value); S = IRR(B'), fresh every report. Only the
cohort and S leave the device. Every coin is an integer threshold test on a uniform 32-bit
word (docs/math.md §11): f/2 rounds *up*, p up and q down (each towards more noise), and
ε₁, ε∞ and the estimator use the realised probabilities.

With a client secret (the SDK path) the cohort and the PRR coins come from
HMAC(secret, ...) (client_sdk.hashing), so the PRR of a value never changes and differs
between metrics; the IRR words come from the randomness source (the OS CSPRNG when
``rng=None``). Without a secret (simulation: each row is a distinct client reporting once)
cohorts are uniform draws and the PRR coins are fresh words — the same distribution of one
report per client.

Effective per-bit rates (one report): q* = P(Sᵢ=1 | Bᵢ=1) = (1−f/2)q + (f/2)p and
p* = P(Sᵢ=1 | Bᵢ=0) = (f/2)q + (1−f/2)p, so q* − p* = (1−f)(q−p).

Privacy (per-bit product argument): two Bloom filters with at most h ones differ in at most h
bits each way, and bits are randomised independently, so the worst ratio of any output is
the product of the worst per-bit ratios: ε₁ = h·ln(q*(1−p*)/(p*(1−q*))) for one report and
ε∞ = 2h·ln((1−f/2)/(f/2)) for the PRR, which bounds any number of reports of one value.
``worst_case_epsilon`` computes both from the realised per-bit probabilities;
``output_probabilities`` enumerates the exact distribution for small k (the audit in
tests/test_rappor.py checks the two agree, and that the encoder samples that distribution).

Sketch: counts[m, k] set-bit counts and reports[m]. ``estimate`` returns the unbiased
per-(cohort, bit) counts t̂ of true Bloom bits (flattened, m·k "cells") and their variances;
estimators/rappor.py decodes them against candidate strings.

Payload: ``cohort`` int64 (n,) and ``irr`` uint8 (n, ⌈k/8⌉), bit i at byte i//8, bit i%8
(little bit order: bit 0 is the least significant bit of byte 0, as in google/rappor);
padding bits are zero. Wire: ``[cohort, bytes]`` per report.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from .._lazy import np, numpy_types
from ..errors import DomainError, InvalidPayload
from ..hashing import (
    bloom_positions,
    bloom_positions_one,
    bloom_positions_one_list,
    check_secret,
    derive_cohort,
    prr_words_checked,
    prr_words_list,
)
from ..randomness import (
    OS_WORDS,
    SCALE,
    RandomLike,
    WordSource,
    as_random_source,
    below_threshold,
    realised,
    threshold_ceil,
    threshold_floor,
)
from ._epsilon import log_up
from .base import CountEstimate, Payloads, Protocol, Sketch, first_bad, require_1d
from .unary import pack_bits

#: Registry options and their defaults (docs/rappor.md): Google's demo noise at Chrome's k.
DEFAULT_OPTIONS: dict[str, Any] = {"bloom_bits": 128, "hashes": 2, "cohorts": 64,
                                   "prob_f": 0.5, "prob_p": 0.5, "prob_q": 0.75}
OPTION_KEYS: frozenset[str] = frozenset(DEFAULT_OPTIONS)

MAX_BLOOM_BITS = 1 << 16   # 8 KiB per report
MAX_HASHES = 64
MAX_COHORTS = 1 << 16
MAX_CELLS = 1 << 24        # m·k counters in one sketch
#: output_probabilities enumerates 2^k reports; refuse beyond this k.
MAX_ENUMERATED_K = 16
#: Words per encode/accumulate block (bounds temporary memory; stays cache friendly).
BLOCK_CELLS = 1 << 17
#: Bloom rows kept per protocol object for the SDK path ((cohort, value) -> bits; public hash).
#: derive_cohort scope of the client-level RAPPOR cohort (the same for every metric).
COHORT_SCOPE = "rappor"
BLOOM_CACHE_SIZE = 4096

#: test_privacy_audit's generic audit enumerates domain values; RAPPOR's inputs are Bloom
#: patterns and its outputs 2^k bit vectors, so it is audited in tests/test_rappor.py.


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, *numpy_types("integer"))) and not isinstance(value, (bool, *numpy_types("bool_")))


def _is_prob(value: Any) -> bool:
    return isinstance(value, (int, float, *numpy_types("integer", "floating"))) and not isinstance(value, (bool, *numpy_types("bool_"))) \
        and math.isfinite(float(value))


@dataclasses.dataclass(frozen=True)
class RapporParams:
    """k, h, m, f, p, q as declared; thresholds and realised rates derived in one place."""

    k: int      # Bloom filter bits
    h: int      # hashes per cohort
    m: int      # cohorts
    f: float    # PRR noise
    p: float    # P(IRR = 1 | PRR bit = 0)
    q: float    # P(IRR = 1 | PRR bit = 1)

    def __post_init__(self) -> None:
        for name, high in (("k", MAX_BLOOM_BITS), ("h", MAX_HASHES), ("m", MAX_COHORTS)):
            value = getattr(self, name)
            if not _is_int(value) or not 1 <= value <= high:
                raise ValueError(f"{name} must be an integer in [1, {high}], got {value!r}")
        if self.k * self.m > MAX_CELLS:
            raise ValueError(f"m·k = {self.k * self.m} counters is too many (at most {MAX_CELLS})")
        for name in ("f", "p", "q"):
            if not _is_prob(getattr(self, name)):
                raise ValueError(f"{name} must be a finite number, got {getattr(self, name)!r}")
        if not 0 <= self.f < 1:
            raise ValueError(f"f must be in [0, 1) (f = 1 reports pure noise), got {self.f}")
        if 2 * self.half_f_threshold >= SCALE:  # f/2 rounds up to ½: q* = p*, nothing to estimate
            raise ValueError(f"f = {self.f} is 1 on the 2^-32 probability grid (pure noise); use f < 1 - 1e-9")
        if not 0 <= self.p < self.q <= 1:
            raise ValueError(f"need 0 <= p < q <= 1, got p = {self.p}, q = {self.q}")
        if not self.p_threshold < self.q_threshold:
            raise ValueError(f"p = {self.p} and q = {self.q} are equal on the 2^-32 probability grid")

    # --- thresholds (the implemented mechanism) ---------------------------------------------------
    @property
    def half_f_threshold(self) -> int:
        """P(B'ᵢ forced to 1) = P(B'ᵢ forced to 0) = T/2^32 >= f/2 (rounded towards more noise)."""
        return threshold_ceil(self.f / 2)

    @property
    def p_threshold(self) -> int:
        return threshold_ceil(self.p)

    @property
    def q_threshold(self) -> int:
        return threshold_floor(self.q)

    # --- realised rates ------------------------------------------------------------------------
    @property
    def f_realised(self) -> float:
        return 2 * realised(self.half_f_threshold)

    @property
    def p_realised(self) -> float:
        return realised(self.p_threshold)

    @property
    def q_realised(self) -> float:
        return realised(self.q_threshold)

    @property
    def p_star(self) -> float:
        """P(Sᵢ = 1 | Bᵢ = 0) = (f/2)q + (1−f/2)p (docs/math.md §7)."""
        half = self.f_realised / 2
        return half * self.q_realised + (1 - half) * self.p_realised

    @property
    def q_star(self) -> float:
        """P(Sᵢ = 1 | Bᵢ = 1) = (1−f/2)q + (f/2)p."""
        half = self.f_realised / 2
        return (1 - half) * self.q_realised + half * self.p_realised

    @property
    def epsilon_one(self) -> float:
        """ε₁: one report, h·ln(q*(1−p*)/(p*(1−q*))) via the per-bit product argument."""
        return worst_case_epsilon(self.q_star, self.p_star, self.h, self.k)

    @property
    def epsilon_inf(self) -> float:
        """ε∞: the PRR, 2h·ln((1−f/2)/(f/2)); bounds any number of reports of one value."""
        half = self.f_realised / 2
        return worst_case_epsilon(1 - half, half, self.h, self.k)


def _log_ratio(a: float, b: float) -> float:
    """ln(a/b) with the conventions of a privacy ratio: 0/0 -> -inf (impossible), a/0 -> inf."""
    if a <= 0:
        return -math.inf
    if b <= 0:
        return math.inf
    ratio = Fraction(a) / Fraction(b)
    return log_up(ratio) if ratio > 1 else math.log(a / b)   # the worst (largest) ratio rounds up


def worst_case_epsilon(one_given_one: float, one_given_zero: float, h: int, k: int) -> float:
    """max over Bloom patterns x, x' (at most h ones in k bits) and outputs y of ln P(y|x)/P(y|x').

    For a mechanism that outputs each bit independently with P(1 | bit 1) = ``one_given_one``
    and P(1 | bit 0) = ``one_given_zero``: bits set in x only contribute at most
    a = maxᵧ ln P(y|1)/P(y|0) each, bits set in x' only at most b = maxᵧ ln P(y|0)/P(y|1),
    shared and unset bits cancel. So ε = max{u·a + v·b : u, v <= h, u + v <= k}, which is
    h(a + b) when k >= 2h (attained by disjoint filters of h bits each). inf if some output
    is possible under one bit value and impossible under the other.
    """
    a = max(_log_ratio(one_given_one, one_given_zero), _log_ratio(1 - one_given_one, 1 - one_given_zero))
    b = max(_log_ratio(one_given_zero, one_given_one), _log_ratio(1 - one_given_zero, 1 - one_given_one))
    best = 0.0
    for u in range(min(h, k) + 1):
        v = min(h, k - u)
        total = (u * a if u else 0.0) + (v * b if v else 0.0)
        best = max(best, total)
    return best


def bit_count_estimates(counts: np.ndarray, reports: np.ndarray,
                        params: RapporParams) -> tuple[np.ndarray, np.ndarray]:
    """Unbiased true-bit counts t̂[j, i] and their plug-in variances (docs/math.md §7).

    t̂ᵢⱼ = (cᵢⱼ − p*·Nⱼ)/(q* − p*); Var = [t·q*(1−q*) + (Nⱼ−t)·p*(1−p*)]/(q*−p*)² evaluated
    at t = clip(t̂, 0, Nⱼ).
    """
    c = np.asarray(counts, dtype=np.float64)
    n = np.asarray(reports, dtype=np.float64)[:, None]
    ps, qs = params.p_star, params.q_star
    delta = qs - ps
    t_hat = (c - ps * n) / delta
    t = np.clip(t_hat, 0.0, n)
    var = (t * qs * (1 - qs) + (n - t) * ps * (1 - ps)) / delta**2
    return t_hat, var


class Rappor(Protocol):
    """RAPPOR over string values; see the module docstring for the mechanism and the wire."""

    name = "rappor"
    uses_cohorts = True

    def __init__(self, params: RapporParams) -> None:
        super().__init__(params)
        self._t_half = params.half_f_threshold
        self._t_fake = 2 * self._t_half          # words below this are PRR noise coins
        self._t_p, self._t_q = params.p_threshold, params.q_threshold
        self._width = (params.k + 7) // 8         # ⌈k/8⌉ payload bytes
        self._bloom_cache: dict[tuple[int, str], np.ndarray] = {}
        self._cohort_cache: dict[tuple[bytes, str], int] = {}
        # PRR per (secret, metric, value): deterministic, so caching changes nothing observable;
        # in memory only (never on disk), bounded, for the SDK's repeated values.
        self._prr_cache: dict[tuple[bytes, str, str], np.ndarray] = {}

    @functools.cached_property
    def _u32_p(self) -> Any:
        return np.uint32(min(self._t_p, SCALE - 1))

    @functools.cached_property
    def _u32_q(self) -> Any:
        return np.uint32(min(self._t_q, SCALE - 1))

    # --- shape ---------------------------------------------------------------------------------
    @property
    def domain_size(self) -> int:
        """RAPPOR's values are an open set of strings; ``estimate`` covers the m·k Bloom cells."""
        return self.params.m * self.params.k

    @property
    def cohorts(self) -> int:
        return self.params.m

    @property
    def cell_shape(self) -> tuple[int, ...]:
        return (self.params.k,)

    # --- privacy -------------------------------------------------------------------------------
    @property
    def epsilon(self) -> float:
        return self.params.epsilon_one

    @property
    def epsilon_longitudinal(self) -> float:
        return self.params.epsilon_inf

    @property
    def payload_bits(self) -> int:
        return self.params.k + max(0, math.ceil(math.log2(self.params.m)))

    def bit_probabilities(self) -> dict[str, tuple[float, float]]:
        """Realised per-bit rates (P(1 | true bit 0), P(1 | true bit 1)) of one report and of the PRR."""
        half = realised(self._t_half)
        return {"report": (self.params.p_star, self.params.q_star), "prr": (half, 1.0 - half)}

    def _pattern_distribution(self, pattern: int, zero_rate: float, one_rate: float) -> np.ndarray:
        k = self.params.k
        if k > MAX_ENUMERATED_K:
            raise ValueError(f"refusing to enumerate 2^{k} reports (k <= {MAX_ENUMERATED_K})")
        if not 0 <= pattern < (1 << k):
            raise ValueError(f"Bloom pattern {pattern} is not a {k}-bit mask")
        truth = (pattern >> np.arange(k)) & 1
        one = np.where(truth == 1, one_rate, zero_rate)
        outputs = (np.arange(1 << k, dtype=np.int64)[:, None] >> np.arange(k)) & 1
        return np.where(outputs == 1, one, 1.0 - one).prod(axis=1)

    def output_probabilities(self, index: int) -> np.ndarray:
        """P(S = y | B = ``index``) for one report, y enumerated as Σᵢ yᵢ·2^i (small k only).

        ``index`` is a Bloom pattern (bit i = Bloom bit i), not a domain value: the value only
        enters through its Bloom filter, and the cohort does not depend on the value.
        """
        zero_rate, one_rate = self.bit_probabilities()["report"]
        return self._pattern_distribution(index, zero_rate, one_rate)

    def prr_output_probabilities(self, index: int) -> np.ndarray:
        """P(B' = y | B = ``index``): what unlimited reports of one value can reveal (for ε∞)."""
        zero_rate, one_rate = self.bit_probabilities()["prr"]
        return self._pattern_distribution(index, zero_rate, one_rate)

    # --- device side -------------------------------------------------------------------------------
    def check_values(self, values: Sequence[str]) -> list[str] | np.ndarray:
        """Values must be strings (DomainError naming the first that is not)."""
        if isinstance(values, str):
            raise DomainError("RAPPOR encodes a sequence of strings; wrap a single value in a list")
        if isinstance(values, np.ndarray) and values.dtype.kind == "U":
            return values.reshape(-1)
        vals = values if isinstance(values, (list, np.ndarray)) else list(values)
        if set(map(type, vals)) - {str}:
            pos = next(i for i, v in enumerate(vals) if not isinstance(v, str))
            raise DomainError(f"RAPPOR values are strings; value {vals[pos]!r} at position {pos} is "
                              f"a {type(vals[pos]).__name__}")
        return vals

    def cohort_of(self, secret: bytes, metric: str = "") -> int:
        """This client's cohort: one per client, shared by all its RAPPOR metrics (as in Chrome).

        Deriving it per metric would give a client one independent cohort per metric, and the
        tuple of cohorts would single it out across reports; a shared one reveals log2(m) bits
        in all. ``metric`` is accepted for symmetry and ignored.
        """
        key = (secret, self.params.m)
        cohort = self._cohort_cache.get(key)
        if cohort is None:
            if len(self._cohort_cache) > 64:
                self._cohort_cache.clear()
            cohort = self._cohort_cache[key] = derive_cohort(secret, COHORT_SCOPE, self.params.m)
        return cohort

    def _bloom_row(self, cohort: int, value: str) -> np.ndarray:
        """The true Bloom filter B of ``value`` in ``cohort``, bool (k,). Never leaves the encoder."""
        key = (cohort, value)
        row = self._bloom_cache.get(key)
        if row is None:
            if len(self._bloom_cache) >= BLOOM_CACHE_SIZE:
                self._bloom_cache.clear()
            row = np.zeros(self.params.k, dtype=bool)
            row[bloom_positions_one(value, cohort, self.params.k, self.params.h)] = True
            self._bloom_cache[key] = row
        return row

    def _prr_from_words(self, bloom: np.ndarray, words: np.ndarray) -> np.ndarray:
        """B'ᵢ = 1 if uᵢ < T, 0 if T <= uᵢ < 2T, else Bᵢ (T/2^32 = f/2, realised)."""
        return np.where(words < self._t_fake, words < self._t_half, bloom)

    def _irr(self, prr: np.ndarray, words: np.ndarray) -> np.ndarray:
        """Sᵢ = 1 w.p. q if B'ᵢ = 1 and w.p. p if B'ᵢ = 0 (fresh words every report)."""
        if self._t_q < SCALE:  # both thresholds fit in uint32: one select, one compare
            return words < np.where(prr, self._u32_q, self._u32_p)
        return np.where(prr, below_threshold(words, self._t_q), below_threshold(words, self._t_p))

    def _prr(self, secret: bytes, metric: str, value: str, cohort: int) -> np.ndarray:
        """The permanent randomised response of ``value`` (deterministic in secret, metric, value)."""
        words = prr_words_checked(secret, metric, value, self.params.k)
        return self._prr_from_words(self._bloom_row(cohort, value), words)

    def encode(self, values: Sequence[str], rng: RandomLike = None, cohorts: np.ndarray | None = None,
               secret: bytes | None = None, metric: str = "") -> Payloads:
        """Randomise a batch of strings. ``secret``: one client's reports (the SDK path)."""
        vals = self.check_values(values)
        source = as_random_source(rng)
        if secret is not None:
            return self._encode_client(vals, source, cohorts, check_secret(secret), metric)
        n = len(vals)
        m, k = self.params.m, self.params.k
        if cohorts is None:
            c = source.below(m, n) if n else np.zeros(0, dtype=np.int64)
        else:
            c = np.broadcast_to(np.asarray(cohorts), (n,))
            if c.size and (c.dtype.kind not in "iu" or c.min() < 0 or c.max() >= m):
                raise ValueError(f"cohorts must be integers in [0, {m})")
            c = c.astype(np.int64)
        out = np.empty((n, self._width), dtype=np.uint8)
        if n == 0:
            return {"cohort": c, "irr": out}
        # Bloom bits per distinct value (one hash per value, all cohorts), then per report.
        # Factorising with a dict is exact (numpy's fixed-width strings drop trailing NULs)
        # and the fastest way here (~50 ns a value).
        index: dict[str, int] = {}
        inverse = np.fromiter((index.setdefault(v, len(index)) for v in vals), dtype=np.int64, count=n)
        positions = bloom_positions(list(index), k, self.params.h, m)       # (U, m, h)
        block = max(1, BLOCK_CELLS // k)
        for start in range(0, n, block):  # blocks of reports, vectorised inside
            stop = min(n, start + block)
            rows = np.arange(stop - start)[:, None]
            bloom = np.zeros((stop - start, k), dtype=bool)
            bloom[rows, positions[inverse[start:stop], c[start:stop]]] = True  # B: never leaves
            prr = self._prr_from_words(bloom, source.words((stop - start, k)))  # fresh: one report per client
            out[start:stop] = np.packbits(self._irr(prr, source.words((stop - start, k))), axis=1,
                                          bitorder="little")
        return {"cohort": c, "irr": out}

    def encode_secret_one(self, value: str, secret: bytes, metric: str,
                          source: WordSource | None = None) -> list[Any]:
        """One client's report of one string, as its wire payload [cohort, IRR bytes] (SDK path).

        The same PRR (HMAC-derived, memoised) and IRR (fresh OS-CSPRNG words unless a test
        injects ``source``) as ``encode`` with a secret, in plain Python; a repeated value skips
        the HMAC and Bloom hashing.
        """
        if not isinstance(value, str):
            self.check_values([value])  # raises DomainError naming the type
        key = (secret, metric, value)
        prr = self._prr_cache.get(key)
        cohort = self.cohort_of(check_secret(secret), metric)
        if prr is None:
            if len(self._prr_cache) >= BLOOM_CACHE_SIZE:
                self._prr_cache.clear()
            bloom = set(bloom_positions_one_list(value, cohort, self.params.k, self.params.h))
            prr = self._prr_cache[key] = self.prr_one(bloom, prr_words_list(secret, metric, value, self.params.k))
        return [cohort, self.irr_one(prr, source or OS_WORDS)]

    def prr_one(self, bloom: set[int], words: list[int]) -> list[bool]:
        """``_prr_from_words`` for one value in plain Python: B'ᵢ = uᵢ < T/2 if uᵢ < T, else Bᵢ."""
        t_fake, t_half = self._t_fake, self._t_half
        return [u < t_half if u < t_fake else i in bloom for i, u in enumerate(words)]

    def irr_one(self, prr: list[bool], source: WordSource) -> bytes:
        """``_irr`` for one report, packed as the wire bytes: Sᵢ = 1 iff uᵢ < (T_q if B'ᵢ else T_p)."""
        t_p, t_q = self._t_p, self._t_q
        ones = [i for i, (b, u) in enumerate(zip(prr, source.words(self.params.k))) if u < (t_q if b else t_p)]
        return pack_bits(ones, self._width)

    def _encode_client(self, vals: Sequence[str], source: Any, cohorts: np.ndarray | None,
                       secret: bytes, metric: str) -> Payloads:
        """One client: HMAC-derived cohort and PRR, IRR words from ``source``."""
        cohort = self.cohort_of(secret, metric)
        n = len(vals)
        if cohorts is not None and np.any(np.asarray(cohorts) != cohort):
            raise ValueError("with a client secret the cohort is derived from it; do not pass other cohorts")
        k = self.params.k
        if n == 1:  # the SDK's batch of one
            prr = self._prr(secret, metric, str(vals[0]), cohort)
            irr = self._irr(prr, source.words(k))
            return {"cohort": np.array([cohort], dtype=np.int64),
                    "irr": np.packbits(irr, bitorder="little").reshape(1, self._width)}
        prr = np.stack([self._prr(secret, metric, str(v), cohort) for v in vals]) if n else \
            np.zeros((0, k), dtype=bool)
        irr = self._irr(prr, source.words((n, k))) if n else prr
        return {"cohort": np.full(n, cohort, dtype=np.int64),
                "irr": np.packbits(irr, axis=1, bitorder="little").reshape(n, self._width)}

    # --- collector side ----------------------------------------------------------------------------
    def validate(self, payloads: Payloads) -> None:
        c = require_1d(payloads, "cohort")
        if c.ndim != 1:
            raise InvalidPayload(f"expected a 1-d array of cohorts, got shape {c.shape}", field="cohort")
        irr = require_1d(payloads, "irr", c.shape[0])
        if c.size and c.dtype.kind not in "iu":
            raise InvalidPayload(f"cohort must be an integer, got dtype {c.dtype}", field="cohort")
        bad = (c < 0) | (c >= self.params.m)
        if bad.any():
            i = first_bad(bad)
            raise InvalidPayload(f"cohort {int(c[i])} outside [0, {self.params.m})", index=i, field="cohort")
        if irr.dtype != np.uint8 or irr.ndim != 2 or irr.shape[1] != self._width:
            raise InvalidPayload(f"RAPPOR reports must be uint8 rows of {self._width} bytes, got "
                                 f"{irr.dtype} of shape {irr.shape}", field="irr")
        spare = 8 * self._width - self.params.k
        if spare and irr.shape[0]:
            # bits k..8⌈k/8⌉−1 of the last byte are not Bloom bits; an honest client sends 0
            bad = (irr[:, -1] & np.uint8((0xFF << (8 - spare)) & 0xFF)) != 0
            if bad.any():
                raise InvalidPayload(f"padding bits beyond Bloom bit {self.params.k - 1} are set",
                                     index=first_bad(bad), field="irr")

    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        c = np.asarray(payloads["cohort"], dtype=np.int64)
        irr = np.asarray(payloads["irr"], dtype=np.uint8)
        m, k = self.params.m, self.params.k
        block = max(1, BLOCK_CELLS // k)
        for start in range(0, c.shape[0], block):  # blocks bound the unpacked memory
            cs = c[start:start + block]
            order = np.argsort(cs, kind="stable")
            bits = np.unpackbits(irr[start:start + block][order], axis=1, count=k, bitorder="little")
            present, first = np.unique(cs[order], return_index=True)
            sketch.counts[present] += np.add.reduceat(bits, first, axis=0, dtype=np.int64)
        sketch.reports += np.bincount(c, minlength=m).astype(np.int64)

    # --- estimators side ------------------------------------------------------------------------------
    def estimate(self, sketch: Sketch) -> CountEstimate:
        """Unbiased counts of true Bloom bits per (cohort, bit), flattened cohort-major (m·k)."""
        t_hat, var = bit_count_estimates(sketch.counts, sketch.reports, self.params)
        return CountEstimate(t_hat.reshape(-1), var.reshape(-1), sketch.total_reports,
                             {"cells": "bloom-bits", "shape": (self.params.m, self.params.k),
                              "reports_per_cohort": sketch.reports.copy()})

    def variance(self, n: int, true_counts: np.ndarray | float) -> np.ndarray:
        """Var[t̂] of one cell whose cohort has n reports, t of them with the Bloom bit set."""
        ps, qs = self.params.p_star, self.params.q_star
        t = np.asarray(true_counts, dtype=np.float64)
        return (t * qs * (1 - qs) + (n - t) * ps * (1 - ps)) / (qs - ps) ** 2

    # --- wire ------------------------------------------------------------------------------------
    def to_wire(self, payloads: Payloads) -> list[Any]:
        raw, w = np.ascontiguousarray(payloads["irr"], dtype=np.uint8).tobytes(), self._width
        return [[c, raw[i * w:(i + 1) * w]] for i, c in enumerate(np.asarray(payloads["cohort"]).tolist())]

    def from_wire(self, objects: list[Any]) -> Payloads:
        w = self._width
        for i, obj in enumerate(objects):
            if type(obj) not in (list, tuple) or len(obj) != 2:
                raise InvalidPayload("expected [cohort, bytes]", index=i, field="payload")
            if type(obj[0]) is not int:
                raise InvalidPayload(f"cohort must be an integer, got {type(obj[0]).__name__}",
                                     index=i, field="cohort")
            if type(obj[1]) is not bytes:
                raise InvalidPayload(f"expected {w} bytes of IRR bits, got {type(obj[1]).__name__}",
                                     index=i, field="irr")
            if len(obj[1]) != w:
                raise InvalidPayload(f"expected {w} bytes of IRR bits, got {len(obj[1])}", index=i, field="irr")
        n = len(objects)
        try:
            cohorts = np.array([obj[0] for obj in objects], dtype=np.int64)
        except OverflowError:
            i = next(i for i, obj in enumerate(objects) if not -(1 << 63) <= obj[0] < (1 << 63))
            raise InvalidPayload(f"cohort {objects[i][0]} outside [0, {self.params.m})", index=i,
                                 field="cohort") from None
        irr = np.frombuffer(b"".join(obj[1] for obj in objects), dtype=np.uint8).reshape(n, w).copy()
        return {"cohort": cohorts.reshape(n), "irr": irr}


def from_options(domain_size: int | None, epsilon: float | None, options: dict[str, Any]) -> Rappor:
    """Build from registry fields; ``epsilon``, when given, caps ε₁ (ValueError if exceeded).

    ``domain_size`` is ignored: RAPPOR's domain is an open set of strings.
    """
    unknown = set(options) - OPTION_KEYS
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)}; rappor takes {', '.join(sorted(OPTION_KEYS))}")
    opts = {**DEFAULT_OPTIONS, **options}
    for key in ("bloom_bits", "hashes", "cohorts"):
        if not _is_int(opts[key]):
            raise ValueError(f"{key} must be an integer, got {opts[key]!r}")
    for key in ("prob_f", "prob_p", "prob_q"):
        if not _is_prob(opts[key]):
            raise ValueError(f"{key} must be a number, got {opts[key]!r}")
    params = RapporParams(k=int(opts["bloom_bits"]), h=int(opts["hashes"]), m=int(opts["cohorts"]),
                          f=float(opts["prob_f"]), p=float(opts["prob_p"]), q=float(opts["prob_q"]))
    if params.f_realised == 0:
        raise ValueError("prob_f = 0 gives no longitudinal privacy (epsilon_infinity is infinite); "
                         "use prob_f > 0, e.g. 0.5")
    if not math.isfinite(params.epsilon_one):
        raise ValueError(f"prob_p = {params.p}, prob_q = {params.q}, prob_f = {params.f} give an infinite "
                         "per-report epsilon (a reported bit reveals the true bit); add noise")
    if epsilon is not None and params.epsilon_one > epsilon:
        raise ValueError(f"these parameters give epsilon_1 = {params.epsilon_one:.4f} per report, above "
                         f"epsilon = {epsilon}; raise prob_f or prob_p, lower prob_q or use fewer hashes "
                         "(or omit epsilon: it is computed from the parameters)")
    return Rappor(params)


__all__ = ["DEFAULT_OPTIONS", "OPTION_KEYS", "RapporParams", "Rappor", "bit_count_estimates",
           "from_options", "worst_case_epsilon"]
