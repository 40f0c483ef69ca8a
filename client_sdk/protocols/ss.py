"""Subset selection, Ye & Barg 2018 / S. Wang et al. 2016 (docs/math.md §6).

Each report is a set S of s = max(1, ⌈d/(e^ε+1)⌉) distinct domain values with
Q(S | x) ∝ e^ε if x ∈ S and ∝ 1 otherwise. We sample it in two exact steps:

1. include x with probability π = s·e^ε/(s·e^ε + d − s) (the total mass of the subsets that
   contain x), quantised down by rounding 1−π up;
2. fill the remaining s−1 (or all s) places with a uniform subset of the d−1 values ≠ x.

So Q(S|x) = π'/C(d−1, s−1) for x ∈ S and (1−π')/C(d−1, s) for x ∉ S, and the realised
ε = ln(π'(d−s) / ((1−π')s)) ≤ target. Pure with S(y) = y:
p* = π', q* = π'(s−1)/(d−1) + (1−π')s/(d−1) (docs/math.md §6), sketch = d support counters.

Step 2 is Floyd's algorithm run across the whole batch at once: for j = N−k, …, N−1 (N = d−1
values ≠ x, k places) draw t uniform in [0, j] and add t, or j if t is already taken; that
gives a uniform k-subset. The draws are independent of the set, so all are made up front,
and the loop runs over the s positions, never over reports. Rows that include x need
k = s−1: that is the same run without its first position. Membership is a per-report bitmap
over the domain when s is a sizeable fraction of d (small ε), and otherwise a stable sort
plus an s-cell bitmap (``_floyd_sparse``), so large domains cost O(s log s) per report.

Payload: ``subset``, shape (n, s) uint32, each row strictly increasing. Wire: one ``bytes``
object per report holding the s sorted indices as little-endian uint16 when d <= 65536,
else little-endian uint32 (2s or 4s bytes). ``payload_bits`` is s·⌈log₂ d⌉, the bits of a
packed index list.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from ..randomness import OS_WORDS, SCALE, WordSource, realised, threshold_ceil
from ._epsilon import log_up
from .blocks import BlockProtocol, BlockReader, IndexEncoder
from .device import DeviceHalf, check_domain_and_epsilon, pure_variance_one

#: Largest d whose indices travel as uint16 on the wire.
UINT16_MAX_D = 1 << 16


@dataclasses.dataclass(frozen=True)
class SSParams:
    d: int           # domain size
    epsilon: float   # target per-report budget

    def __post_init__(self) -> None:
        check_domain_and_epsilon(self.d, self.epsilon, "subset selection")
        t = self.include_threshold
        if not (0 < SCALE - t and t * (self.d - self.s) > (SCALE - t) * self.s):
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-32 probability grid")

    @property
    def s(self) -> int:
        """Subset size s = max(1, ⌈d/(e^ε+1)⌉)."""
        return max(1, math.ceil(self.d / (math.exp(self.epsilon) + 1.0)))

    @property
    def include_threshold(self) -> int:
        """π = s·e^ε/(s·e^ε+d−s) rounded down, via 1−π = (d−s)/(s·e^ε+d−s) rounded up."""
        s, e = self.s, math.exp(self.epsilon)
        return SCALE - threshold_ceil((self.d - s) / (s * e + self.d - s))

    @property
    def pi(self) -> float:
        """Realised π' = P(x ∈ S)."""
        return realised(self.include_threshold)

    @property
    def p_star(self) -> float:
        return self.pi

    @property
    def q_star(self) -> float:
        """P(v ∈ S | x ≠ v) = π'(s−1)/(d−1) + (1−π')s/(d−1)."""
        s, d, pi = self.s, self.d, self.pi
        return (pi * (s - 1) + (1.0 - pi) * s) / (d - 1)


class SS(DeviceHalf):
    """Subset selection's device half (its server half, Floyd's algorithm over a batch: sketches.ss)."""

    name = "ss"

    def __init__(self, params: SSParams) -> None:
        super().__init__(params)
        self.s, self.pi = params.s, params.pi
        self.p, self.q = params.p_star, params.q_star
        self.include_threshold = params.include_threshold
        self.wire_char = "H" if params.d <= UINT16_MAX_D else "I"  # struct code of one wire item

    @property
    def epsilon(self) -> float:
        # Q(S|x∈S)/Q(S|x∉S) = [π'/C(d−1,s−1)] / [(1−π')/C(d−1,s)] = π'(d−s)/((1−π')s).
        pi = Fraction(self.pi)
        return log_up(pi * (self.params.d - self.s) / ((1 - pi) * self.s))

    @property
    def payload_bits(self) -> int:
        return self.s * max(1, math.ceil(math.log2(self.params.d)))

    def encoder_block(self) -> dict[str, Any]:
        return {"d": self.params.d, "s": self.s, "include_threshold": self.include_threshold}

    def variance(self, n: int, true_count: float) -> float:
        return pure_variance_one(n, true_count, self.p, self.q)

    def floyd_one(self, x: int, include: bool, draws: list[int]) -> list[int]:
        """Floyd's algorithm for one report on Python ints: the sorted subset (module docstring)."""
        return floyd_subset(self.params.d, self.s, x, include, draws)


def floyd_subset(d: int, s: int, x: int, include: bool, draws: list[int]) -> list[int]:
    """The sorted s-subset of one report (docs/conformance.md, "Floyd"): x when ``include``, the
    other places filled by Floyd's algorithm from ``draws`` (t_i uniform in [0, d − s + i − 1])."""
    first = 1 if include else 0
    chosen: set[int] = {x} if include else set()
    for j, t in zip(range(d - 1 - s + first, d - 1), draws[first:]):
        if t >= x:  # ranks among the values ≠ x -> domain values
            t += 1
        if t in chosen:
            chosen.add(j + 1 if j >= x else j)
        else:
            chosen.add(t)
    return sorted(chosen)


OPTION_KEYS: frozenset[str] = frozenset()
#: A joint metric may use it: its count estimates' covariance is derived exactly (docs/math.md,
#: "Joint reports"; protocols.factory.carries_joint).
CARRIES_JOINT = True


def from_options(domain_size: int, epsilon: float, options: dict[str, Any]) -> SS:
    """Build from registry fields (SS takes no extra options)."""
    return SS(SSParams(d=domain_size, epsilon=epsilon))


class SSBlock(IndexEncoder):
    """Subset selection's one-report encoder from the block: s + 1 words at once (the inclusion
    word, then the Floyd draws), the subset's indices as little-endian uint16 (d ≤ 65,536) or uint32."""

    __slots__ = ("d", "s", "include", "bounds", "fmt")

    def __init__(self, block: Mapping[str, Any]) -> None:
        self.d: int = block["d"]
        self.s: int = block["s"]
        self.include: int = block["include_threshold"]
        self.bounds = [SCALE, *range(self.d - self.s, self.d)]   # h_0 = 2^32, h_i = d − s + i − 1
        self.fmt = f"<{self.s}{'H' if self.d <= UINT16_MAX_D else 'I'}"

    def randomise(self, index: int, source: WordSource = OS_WORDS) -> bytes:
        """One report of the looked-up index as its wire bytes."""
        draws = source.belows(self.bounds)
        return struct.pack(self.fmt, *floyd_subset(self.d, self.s, index, draws[0] < self.include, draws[1:]))


def check_block(reader: BlockReader) -> None:
    """(6) a subset smaller than the domain."""
    if reader.int("s") >= reader.int("d"):
        reader.fail("s", "s (subset size) must be below d")


BLOCK = BlockProtocol(SSBlock, check_block, members=("d", "s", "include_threshold"))
