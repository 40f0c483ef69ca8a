"""Binary randomised response, Warner 1965 (docs/math.md §3), for boolean metrics.

The domain is {0 = false, 1 = true}. Report the true bit with probability
p = e^ε/(1+e^ε), otherwise its negation. p is quantised down to the 2^-32 grid (by rounding
the flip probability 1−p = 1/(1+e^ε) *up*, which stays exact even when e^ε is huge), and the
epsilon we quote, ln(p'/(1−p')), is computed from the realised p'.

Pure protocol with S(y) = {y}: p* = p', q* = 1−p'. The estimator ĉ(v) = (C(v) − n q*)/(p*−q*)
is Warner's π̂ scaled to counts. Wire payload: the int 0 or 1 (a msgpack bool is rejected).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from ..randomness import OS_WORDS, SCALE, WordSource, realised, threshold_ceil
from .blocks import BlockProtocol, IndexEncoder, check_keep
from .device import DirectDevice, check_domain_and_epsilon


@dataclasses.dataclass(frozen=True)
class RRParams:
    d: int           # domain size; must be 2 (index 0 = false, 1 = true)
    epsilon: float   # target per-report budget

    def __post_init__(self) -> None:
        if self.d != 2:
            raise ValueError(f"binary RR needs a boolean domain (2 values), got {self.d}; use grr")
        check_domain_and_epsilon(self.d, self.epsilon, "binary RR")
        if self.keep_threshold <= SCALE // 2:
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-32 probability grid")

    @property
    def keep_threshold(self) -> int:
        """T with T/2^32 <= p = e^ε/(1+e^ε): the flip probability 1/(1+e^ε) rounded up."""
        return SCALE - threshold_ceil(1.0 / (1.0 + math.exp(self.epsilon)))

    @property
    def p(self) -> float:
        """Realised P(report = true bit)."""
        return realised(self.keep_threshold)

    @property
    def q(self) -> float:
        """Realised P(report = flipped bit) = 1 − p (exact: both are multiples of 2^-32)."""
        return realised(SCALE - self.keep_threshold)


class RR(DirectDevice):
    """Binary RR's device half (its server half: sketches.rr)."""

    name = "rr"


OPTION_KEYS: frozenset[str] = frozenset()


def domain_refusal(domain_size: int | None) -> str | None:
    """Why a metric of ``domain_size`` values cannot use rr (it is binary), or None."""
    if domain_size == 2:
        return None
    return ("rr is binary randomised response; it needs a boolean metric or 2 categories or buckets "
            "(use grr for more)")


def from_options(domain_size: int, epsilon: float, options: dict[str, Any]) -> RR:
    """Build from registry fields (RR takes no extra options; the domain must be boolean)."""
    return RR(RRParams(d=domain_size, epsilon=epsilon))


class RRBlock(IndexEncoder):
    """Binary RR's one-report encoder from its block: u = W32; y = x if u < keep, else 1 − x."""

    __slots__ = ("keep",)

    def __init__(self, block: Mapping[str, Any]) -> None:
        self.keep: int = block["keep_threshold"]

    def randomise(self, index: int, source: WordSource = OS_WORDS) -> int:
        """One report of the looked-up index (0 or 1)."""
        return index if source.word() < self.keep else 1 - index


BLOCK = BlockProtocol(RRBlock, lambda reader: check_keep(2, reader), members=("d", "keep_threshold"))
