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
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, ClassVar

from ..randomness import OS_WORDS, SCALE, WordSource, realised, threshold_ceil
from ._epsilon import log_up
from .blocks import BlockProtocol, IndexEncoder
from .device import DeviceHalf, check_domain_and_epsilon, pure_variance_one

#: The server's output_probabilities enumerates all 2^d reports; refuse beyond this d.
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


class UnaryEncoding(DeviceHalf):
    """Unary encoding's device half over ``UnaryParams`` (its server half: sketches.unary);
    the variants below only name themselves."""

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.p_threshold, self.q_threshold = params.p_threshold, params.q_threshold
        self.p, self.q = realised(self.p_threshold), realised(self.q_threshold)
        self.width = (params.d + 7) // 8  # ⌈d/8⌉ payload bytes

    @property
    def epsilon(self) -> float:
        # ε = ln(p'(1−q') / ((1−p')q')); 1−p' and 1−q' are exact (multiples of 2^-32).
        p, q = Fraction(self.p), Fraction(self.q)
        return log_up(p * (1 - q) / ((1 - p) * q))

    @property
    def payload_bits(self) -> int:
        return self.params.d

    def encoder_block(self) -> dict[str, Any]:
        par = self.params
        return {"d": par.d, "p_threshold": par.p_threshold, "q_threshold": par.q_threshold}

    def variance(self, n: int, true_count: float) -> float:
        return pure_variance_one(n, true_count, self.p, self.q)


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


class UnaryBlock(IndexEncoder):
    """OUE's and SUE's one-report encoder from the block: u_i = W32 for i = 0..d−1, bit i set iff
    u_i < (p if i = x else q), packed little-endian."""

    __slots__ = ("d", "p", "q", "width")

    def __init__(self, block: Mapping[str, Any]) -> None:
        self.d: int = block["d"]
        self.p: int = block["p_threshold"]
        self.q: int = block["q_threshold"]
        self.width = (self.d + 7) // 8

    def randomise(self, index: int, source: WordSource = OS_WORDS) -> bytes:
        """One report of the looked-up index as its ⌈d/8⌉ wire bytes."""
        return pack_bits(unary_bits(source.words(self.d), index, self.p, self.q), self.width)


BLOCK = BlockProtocol(UnaryBlock, members=("d", "p_threshold", "q_threshold"))
