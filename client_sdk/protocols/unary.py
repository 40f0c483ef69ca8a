"""Unary encoding, the one implementation behind OUE and SUE (docs/math.md §4).

The true value x becomes the one-hot vector B ∈ {0,1}^d; every bit is reported
independently, P[1 | Bᵢ=1] = p and P[1 | Bᵢ=0] = q, so
ε = ln(p(1−q)/((1−p)q)). The two variants differ only in how p and q follow from ε
(``THRESHOLDS``):

- OUE (Wang et al., 2017): p = ½ and q = 1/(e^ε+1), the optimal unary choice,
  Var* = n·4e^ε/(e^ε−1)². p = ½ is exact on the 2^-32 grid; q is quantised *up*, so the
  realised ε = ln((1−q')/q') is at most the target.
- SUE (basic one-time RAPPOR, Erlingsson et al., 2014): p = e^{ε/2}/(e^{ε/2}+1), q = 1−p,
  Var* = n·e^{ε/2}/(e^{ε/2}−1)². q is quantised *up* and p set to 1−q' (so p is quantised
  down, exactly, even when e^{ε/2} is huge); the realised ε = 2·ln(p'/q') is at most the target.

ε and the estimator use the realised p', q'.

Pure protocol with S(y) = {i : yᵢ = 1}: p* = p', q* = q'; the sketch is d bit counters.

Payload: ``bits``, shape (n, ⌈d/8⌉) uint8, bit i of a report at byte i//8, bit i%8
(``np.packbits(..., bitorder="little")``); padding bits beyond d are zero. Wire: one
``bytes`` object of length ⌈d/8⌉ per report, the same bytes as the payload row.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any, ClassVar

from .._lazy import np
from ..errors import InvalidPayload
from ..randomness import (
    OS_WORDS,
    SCALE,
    RandomLike,
    WordSource,
    as_random_source,
    below_threshold,
    realised,
    threshold_ceil,
)
from ._epsilon import log_up
from .base import (
    Payloads,
    PureProtocol,
    Sketch,
    check_domain_and_epsilon,
    first_bad,
    require_1d,
)

#: Words per encode/accumulate block: ~512 KiB of uint32 stays cache-resident (measured
#: ~6M reports/s at d=128 with a seeded generator, vs ~1M/s unblocked).
BLOCK_CELLS = 1 << 17
#: output_probabilities enumerates all 2^d reports; refuse beyond this d.
MAX_ENUMERATED_D = 16


def check_thresholds(d: int, epsilon: float, p_threshold: int, q_threshold: int) -> None:
    """Shared params validation: a real domain, a finite budget, and realised p' > q'."""
    check_domain_and_epsilon(d, epsilon, "unary encoding")
    if not (0 < q_threshold < p_threshold < SCALE):
        raise ValueError(f"epsilon {epsilon} is too small (or too large) for the 2^-32 probability grid")


def _oue_thresholds(epsilon: float) -> tuple[int, int]:
    """OUE: p = ½ (exact), q = 1/(e^ε+1) rounded up."""
    return SCALE // 2, threshold_ceil(1.0 / (math.exp(epsilon) + 1.0))


def _sue_thresholds(epsilon: float) -> tuple[int, int]:
    """SUE: q = 1/(e^{ε/2}+1) rounded up, p = 1 − q' (e^{ε/2}/(e^{ε/2}+1) rounded down)."""
    q_threshold = threshold_ceil(1.0 / (math.exp(epsilon / 2) + 1.0))
    return SCALE - q_threshold, q_threshold


#: variant -> ε ↦ (threshold of p = P[bit x reported as 1], threshold of q = P[other bit as 1]).
THRESHOLDS: dict[str, Callable[[float], tuple[int, int]]] = {"oue": _oue_thresholds, "sue": _sue_thresholds}


@dataclasses.dataclass(frozen=True)
class UnaryParams:
    """Domain size and target ε of a unary encoding; the subclass names the variant.

    ``variant`` is a class constant, not a field: the registry fingerprints the fields, which
    are d and ε for both variants (the protocol name is fingerprinted separately).
    """

    d: int           # domain size (number of bits)
    epsilon: float   # target per-report budget
    variant: ClassVar[str]

    def __post_init__(self) -> None:
        check_thresholds(self.d, self.epsilon, self.p_threshold, self.q_threshold)

    @property
    def p_threshold(self) -> int:
        return THRESHOLDS[self.variant](self.epsilon)[0]

    @property
    def q_threshold(self) -> int:
        return THRESHOLDS[self.variant](self.epsilon)[1]

    @property
    def p(self) -> float:
        return realised(self.p_threshold)

    @property
    def q(self) -> float:
        return realised(self.q_threshold)


class UnaryEncoding(PureProtocol):
    """Unary encoding over ``UnaryParams``; the variants below only name themselves."""

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self._p_threshold, self._q_threshold = params.p_threshold, params.q_threshold
        self.p, self.q = realised(self._p_threshold), realised(self._q_threshold)
        self._width = (params.d + 7) // 8  # ⌈d/8⌉ payload bytes

    @property
    def epsilon(self) -> float:
        # ε = ln(p'(1−q') / ((1−p')q')); 1−p' and 1−q' are exact (multiples of 2^-32).
        p, q = Fraction(self.p), Fraction(self.q)
        return log_up(p * (1 - q) / ((1 - p) * q))

    @property
    def payload_bits(self) -> int:
        return self.params.d

    def output_probabilities(self, index: int) -> np.ndarray:
        """P(y | x) for every report y, enumerated as the integer Σᵢ yᵢ·2^i (bit i = item i)."""
        d = self.params.d
        if d > MAX_ENUMERATED_D:
            raise ValueError(f"refusing to enumerate 2^{d} unary reports (d <= {MAX_ENUMERATED_D})")
        bits = (np.arange(1 << d, dtype=np.int64)[:, None] >> np.arange(d)) & 1
        one = np.full(d, self.q)
        one[index] = self.p
        return np.where(bits == 1, one, 1.0 - one).prod(axis=1)

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        x = self.check_indices(indices)
        source = as_random_source(rng)
        n, d = x.shape[0], self.params.d
        out = np.empty((n, self._width), dtype=np.uint8)
        block = max(1, BLOCK_CELLS // d)
        for start in range(0, n, block):  # loop over blocks of reports, vectorised inside
            xs = x[start:start + block]
            rows = np.arange(xs.shape[0])
            u = source.words((xs.shape[0], d))
            bits = below_threshold(u, self._q_threshold)        # every bit: 1 w.p. q'
            bits[rows, xs] = below_threshold(u[rows, xs], self._p_threshold)  # bit x: 1 w.p. p'
            out[start:start + block] = np.packbits(bits, axis=1, bitorder="little")
        return {"bits": out}

    def encode_one(self, index: int, cohort: int | None = None, source: WordSource | None = None) -> bytes:
        """One report in plain Python: the same threshold tests as ``encode`` on d words
        (bit i is 1 iff uᵢ < T_q, bit x iff u_x < T_p), packed little-endian as the wire."""
        x = self._check_index(index)
        return pack_bits(unary_bits((source or OS_WORDS).words(self.params.d), x,
                                    self._p_threshold, self._q_threshold), self._width)

    def validate(self, payloads: Payloads) -> None:
        bits = require_1d(payloads, "bits")
        if bits.dtype != np.uint8 or bits.ndim != 2 or bits.shape[1] != self._width:
            raise InvalidPayload(f"unary reports must be uint8 rows of {self._width} bytes, got "
                                 f"{bits.dtype} of shape {bits.shape}", field="bits")
        spare = 8 * self._width - self.params.d
        if spare:
            # Bits d..8⌈d/8⌉−1 of the last byte do not encode an item; an honest client sends 0.
            bad = (bits[:, -1] & np.uint8((0xFF << (8 - spare)) & 0xFF)) != 0
            if bad.any():
                raise InvalidPayload(f"padding bits beyond item {self.params.d - 1} are set",
                                     index=first_bad(bad), field="bits")

    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        bits = np.asarray(payloads["bits"], dtype=np.uint8)
        d = self.params.d
        block = max(1, BLOCK_CELLS // d)
        for start in range(0, bits.shape[0], block):  # blocks bound the unpacked memory
            unpacked = np.unpackbits(bits[start:start + block], axis=1, count=d, bitorder="little")
            sketch.counts[0] += unpacked.sum(axis=0, dtype=np.int64)
        sketch.reports[0] += bits.shape[0]

    def to_wire(self, payloads: Payloads) -> list[Any]:
        raw, w = np.ascontiguousarray(payloads["bits"], dtype=np.uint8).tobytes(), self._width
        return [raw[i:i + w] for i in range(0, len(raw), w)]

    def from_wire(self, objects: list[Any]) -> Payloads:
        w = self._width
        for i, obj in enumerate(objects):
            if type(obj) is not bytes:
                raise InvalidPayload(f"expected {w} bytes, got {type(obj).__name__}", index=i, field="payload")
            if len(obj) != w:
                raise InvalidPayload(f"expected {w} bytes, got {len(obj)}", index=i, field="payload")
        return {"bits": np.frombuffer(b"".join(objects), dtype=np.uint8).reshape(len(objects), w).copy()}


def unary_bits(words: list[int], x: int, p_threshold: int, q_threshold: int) -> list[int]:
    """Indices of the 1 bits of a unary report from its d words: uᵢ < T_q, and u_x < T_p for x."""
    ones = [i for i, u in enumerate(words) if u < q_threshold and i != x]
    if words[x] < p_threshold:
        ones.append(x)
    return ones


def pack_bits(ones: list[int], width: int) -> bytes:
    """``width`` bytes with the given bit indices set, bit i at byte i//8, bit i%8 (little)."""
    out = bytearray(width)
    for i in ones:
        out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


class OUEParams(UnaryParams):
    variant = "oue"


class SUEParams(UnaryParams):
    variant = "sue"


class OUE(UnaryEncoding):
    name = "oue"


class SUE(UnaryEncoding):
    name = "sue"
