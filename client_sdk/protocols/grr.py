"""Generalised (k-ary) randomised response, a.k.a. Direct Encoding (docs/math.md §3).

Report the true value x with probability p = e^ε/(e^ε+d−1), otherwise a uniformly drawn
*other* value (each with q = (1−p)/(d−1)). p is quantised down to a 2^-32 grid, and the
epsilon we quote, ln(p'/q'), is computed from the realised p'.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from ..randomness import OS_WORDS, SCALE, WordSource, realised, threshold_floor
from .blocks import BlockProtocol, IndexEncoder, check_keep
from .device import DirectDevice, check_domain_and_epsilon


def keep_threshold(epsilon: float, k: int) -> int:
    """Threshold of P(report the true value) = e^ε/(e^ε+k−1), rounded down (docs/math.md §3).

    Shared with OLH, which runs GRR on its hash range [g].
    """
    e = math.exp(epsilon)
    return threshold_floor(e / (e + k - 1))


class GRROnRange:
    """Realised probabilities of GRR on a range [g] (OLH's hash range, HR's residues, discover's
    buckets), for params classes with ``epsilon`` and ``g``: one place for the threshold rule."""

    epsilon: float
    g: int

    @property
    def keep_threshold(self) -> int:
        return keep_threshold(self.epsilon, self.g)

    @property
    def p(self) -> float:
        """Realised P(report = the true residue / hashed value)."""
        return realised(self.keep_threshold)

    @property
    def q(self) -> float:
        """Realised P(report = b) for each other b in [g]."""
        return (1.0 - self.p) / (self.g - 1)


@dataclasses.dataclass(frozen=True)
class GRRParams:
    d: int           # domain size
    epsilon: float   # target per-report budget

    def __post_init__(self) -> None:
        check_domain_and_epsilon(self.d, self.epsilon, "GRR")
        # Realised p' > q' = (1−p')/(d−1)  ⇔  T·d > 2^32; otherwise the quantised mechanism
        # has ε' <= 0 (p' < q' leaks |ε'| > the target, p' = q' estimates nothing).
        if self.keep_threshold * self.d <= SCALE:
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-32 probability grid "
                             f"at d = {self.d}")

    @property
    def keep_threshold(self) -> int:
        return keep_threshold(self.epsilon, self.d)

    @property
    def p(self) -> float:
        """Realised P(report = x)."""
        return realised(self.keep_threshold)

    @property
    def q(self) -> float:
        """Realised P(report = v) for each v != x."""
        return (1.0 - self.p) / (self.d - 1)


class GRR(DirectDevice):
    """GRR's device half (its server half: sketches.grr)."""

    name = "grr"


OPTION_KEYS: frozenset[str] = frozenset()
#: A joint metric may use it: its count estimates' covariance is derived exactly (docs/math.md,
#: "Joint reports"; protocols.factory.carries_joint).
CARRIES_JOINT = True


def from_options(domain_size: int, epsilon: float, options: dict[str, Any]) -> GRR:
    """Build from registry fields (GRR takes no extra options)."""
    return GRR(GRRParams(d=domain_size, epsilon=epsilon))


class GRRBlock(IndexEncoder):
    """GRR's one-report encoder from its block: u = W32; keep x if u < keep, else a uniform other value."""

    __slots__ = ("d", "keep")

    def __init__(self, block: Mapping[str, Any]) -> None:
        self.d: int = block["d"]
        self.keep: int = block["keep_threshold"]

    def randomise(self, index: int, source: WordSource = OS_WORDS) -> int:
        """One report of the looked-up index."""
        if source.word() < self.keep:
            return index
        other = source.below(self.d - 1)
        return other + (other >= index)


BLOCK = BlockProtocol(GRRBlock, lambda reader: check_keep(reader.block.get("d"), reader),
                      members=("d", "keep_threshold"))
