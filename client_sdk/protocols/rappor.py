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
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from ..errors import DomainError
from ..hashing import bloom_positions_one_list, check_secret, derive_cohort, prr_words_list
from ..randomness import OS_WORDS, SCALE, WordSource, realised, threshold_ceil, threshold_floor
from ._epsilon import log_up
from .blocks import BlockEncoder, BlockProtocol, BlockReader
from .device import Context, DeviceHalf, numpy_types
from .unary import pack_bits

#: Registry options and their defaults (docs/rappor.md): Google's demo noise at Chrome's k.
DEFAULT_OPTIONS: dict[str, Any] = {"bloom_bits": 128, "hashes": 2, "cohorts": 64,
                                   "prob_f": 0.5, "prob_p": 0.5, "prob_q": 0.75}
OPTION_KEYS: frozenset[str] = frozenset(DEFAULT_OPTIONS)
#: A RAPPOR metric may leave epsilon out: ε follows from prob_f, prob_p, prob_q and the hashes.
EPSILON_OPTIONAL = True

MAX_BLOOM_BITS = 1 << 16   # 8 KiB per report
MAX_HASHES = 64
MAX_COHORTS = 1 << 16
MAX_CELLS = 1 << 24        # m·k counters in one sketch
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


class Rappor(DeviceHalf):
    """RAPPOR's device half (see the module docstring): cohort, PRR and IRR of one report in
    plain Python; the server half (batches, the collector's verbs, the exact tables) is
    sketches.rappor."""

    name = "rappor"
    uses_cohorts = True

    def __init__(self, params: RapporParams) -> None:
        super().__init__(params)
        self.half_f_threshold = params.half_f_threshold
        self.fake_threshold = 2 * self.half_f_threshold   # words below this are PRR noise coins
        self.p_threshold, self.q_threshold = params.p_threshold, params.q_threshold
        self.width = (params.k + 7) // 8                   # ⌈k/8⌉ payload bytes

    @property
    def domain_size(self) -> int:
        """RAPPOR's values are an open set of strings; ``estimate`` covers the m·k Bloom cells."""
        return self.params.m * self.params.k

    @property
    def cohorts(self) -> int:
        return self.params.m

    @property
    def epsilon(self) -> float:
        return self.params.epsilon_one

    @property
    def epsilon_longitudinal(self) -> float:
        return self.params.epsilon_inf

    @property
    def payload_bits(self) -> int:
        return self.params.k + max(0, math.ceil(math.log2(self.params.m)))

    def encoder_block(self) -> dict[str, Any]:
        par = self.params
        return {"k": par.k, "h": par.h, "m": par.m, "half_f_threshold": par.half_f_threshold,
                "p_threshold": par.p_threshold, "q_threshold": par.q_threshold}

    def variance(self, n: int, true_count: float) -> float:
        """Var[t̂] of one cell whose cohort has n reports, t of them with the Bloom bit set."""
        ps, qs = self.params.p_star, self.params.q_star
        t = float(true_count)
        return (t * qs * (1 - qs) + (n - t) * ps * (1 - ps)) / (qs - ps) ** 2

    def bit_probabilities(self) -> dict[str, tuple[float, float]]:
        """Realised per-bit rates (P(1 | true bit 0), P(1 | true bit 1)) of one report and of the PRR."""
        half = realised(self.half_f_threshold)
        return {"report": (self.params.p_star, self.params.q_star), "prr": (half, 1.0 - half)}

    def cohort_of(self, secret: bytes, metric: str = "") -> int:
        """This client's cohort: one per client, shared by all its RAPPOR metrics (as in Chrome).

        Deriving it per metric would give a client one independent cohort per metric, and the
        tuple of cohorts would single it out across reports; a shared one reveals log2(m) bits
        in all. ``metric`` is accepted for symmetry and ignored (the block encoder's cohort).
        """
        return self.block_encoder.cohort_of(secret)

    def encode_secret_one(self, value: str, secret: bytes, metric: str,
                          source: WordSource | None = None) -> list[Any]:
        """One client's report of one string, as its wire payload [cohort, IRR bytes] (SDK path):
        the block encoder's PRR (HMAC-derived, memoised) and IRR (fresh OS-CSPRNG words unless a
        test injects ``source``)."""
        return self.block_encoder.encode_one(-1, value, Context(secret, metric, 0, source or OS_WORDS))

    def encode_one(self, index: int, key: str, ctx: Context) -> list[Any]:
        """The report of the string ``key`` (``index`` unused: the values are an open set)."""
        return self.block_encoder.encode_one(index, key, ctx)

    def prr_one(self, bloom: set[int], words: list[int]) -> list[bool]:
        """The PRR of one value from its Bloom bits and PRR words: the block encoder's."""
        return self.block_encoder.prr(bloom, words)

    def irr_one(self, prr: list[bool], source: WordSource) -> bytes:
        """The IRR of one report, packed as the wire bytes: the block encoder's."""
        return self.block_encoder.irr(prr, source)


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


__all__ = ["DEFAULT_OPTIONS", "EPSILON_OPTIONAL", "OPTION_KEYS", "RapporParams", "Rappor", "from_options", "worst_case_epsilon"]


class RapporBlock(BlockEncoder):
    """RAPPOR's one-report encoder from the block: the device's cohort (one per device), the
    memoised PRR of the value's Bloom bits (from the secret), then the IRR from fresh words:
    S_i = u_i < (B'_i ? q : p); the report is [cohort, bytes]."""

    __slots__ = ("k", "h", "m", "half_f", "fake", "p", "q", "width", "cohorts", "prrs")

    def __init__(self, block: Mapping[str, Any]) -> None:
        self.k: int = block["k"]
        self.h: int = block["h"]
        self.m: int = block["m"]
        self.half_f: int = block["half_f_threshold"]
        self.fake = 2 * self.half_f                      # words below this are the PRR's noise coins
        self.p: int = block["p_threshold"]
        self.q: int = block["q_threshold"]
        self.width = (self.k + 7) // 8
        self.cohorts: dict[bytes, int] = {}
        # the PRR per (secret, metric, value) is deterministic: caching it is unobservable (memory only)
        self.prrs: dict[tuple[bytes, str, str], list[bool]] = {}

    def cohort_of(self, secret: bytes) -> int:
        """The device's cohort, shared by all its RAPPOR metrics (module docstring)."""
        cohort = self.cohorts.get(secret)
        if cohort is None:
            if len(self.cohorts) > 64:
                self.cohorts.clear()
            cohort = self.cohorts[secret] = derive_cohort(secret, COHORT_SCOPE, self.m)
        return cohort

    def encode_one(self, index: int, key: str, ctx: Context) -> list[Any]:
        """One report of the string ``key`` (``index`` unused: the values are an open set)."""
        if not isinstance(key, str):
            raise DomainError(f"RAPPOR values are strings; value {key!r} at position 0 is a {type(key).__name__}")
        secret, metric = ctx.secret, ctx.metric
        cohort = self.cohort_of(check_secret(secret))
        prr = self.prrs.get((secret, metric, key))
        if prr is None:
            if len(self.prrs) >= BLOOM_CACHE_SIZE:
                self.prrs.clear()
            bloom = set(bloom_positions_one_list(key, cohort, self.k, self.h))
            prr = self.prrs[(secret, metric, key)] = self.prr(bloom, prr_words_list(secret, metric, key, self.k))
        return [cohort, self.irr(prr, ctx.words)]

    def prr(self, bloom: set[int], words: list[int]) -> list[bool]:
        """The PRR of one value: B'ᵢ = uᵢ < half_f if uᵢ < 2·half_f (noise coins), else Bᵢ."""
        fake, half = self.fake, self.half_f
        return [u < half if u < fake else i in bloom for i, u in enumerate(words)]

    def irr(self, prr: list[bool], source: WordSource) -> bytes:
        """The IRR of one PRR, packed as the wire bytes: Sᵢ = 1 iff uᵢ < (q if B'ᵢ else p)."""
        p, q = self.p, self.q
        return pack_bits([i for i, (b, u) in enumerate(zip(prr, source.words(self.k))) if u < (q if b else p)],
                         self.width)


def check_block(reader: BlockReader) -> None:
    """(5) at most k hashes per value."""
    if reader.int("h") > reader.int("k"):
        reader.fail("h", "h (hashes per value) must be at most k (Bloom filter bits)")


BLOCK = BlockProtocol(RapporBlock, check_block, memoised=True,
                      members=("k", "h", "m", "half_f_threshold", "p_threshold", "q_threshold"))
