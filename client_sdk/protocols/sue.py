"""Symmetric unary encoding = basic one-time RAPPOR (docs/math.md §4).

Unary encoding (see ``_unary``) with p = e^{ε/2}/(e^{ε/2}+1) and q = 1−p = 1/(e^{ε/2}+1):
Var* = n·e^{ε/2}/(e^{ε/2}−1)². q is quantised *up* and p is set to 1−q' (so p is quantised
down, exactly, even when e^{ε/2} is huge); the realised ε = 2·ln(p'/q') is at most the target.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..randomness import SCALE, realised, threshold_ceil
from ._unary import UnaryEncoding, check_thresholds


@dataclasses.dataclass(frozen=True)
class SUEParams:
    d: int           # domain size (number of bits)
    epsilon: float   # target per-report budget

    def __post_init__(self) -> None:
        check_thresholds(self.d, self.epsilon, self.p_threshold, self.q_threshold)

    @property
    def q_threshold(self) -> int:
        """q = 1/(e^{ε/2}+1), rounded up: P(a 0 bit reported as 1)."""
        return threshold_ceil(1.0 / (math.exp(self.epsilon / 2) + 1.0))

    @property
    def p_threshold(self) -> int:
        """p = 1 − q', i.e. e^{ε/2}/(e^{ε/2}+1) rounded down: P(the 1 bit reported as 1)."""
        return SCALE - self.q_threshold

    @property
    def p(self) -> float:
        return realised(self.p_threshold)

    @property
    def q(self) -> float:
        return realised(self.q_threshold)


class SUE(UnaryEncoding):
    name = "sue"


OPTION_KEYS: frozenset[str] = frozenset()


def from_options(domain_size: int, epsilon: float, options: dict[str, Any]) -> SUE:
    """Build from registry fields (SUE takes no extra options)."""
    return SUE(SUEParams(d=domain_size, epsilon=epsilon))
