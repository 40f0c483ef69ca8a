"""Optimised unary encoding, Wang et al. USENIX Security 2017 (docs/math.md §4).

Unary encoding (see ``_unary``) with p = ½ and q = 1/(e^ε+1), the optimal UE choice:
Var* = n·4e^ε/(e^ε−1)². p = ½ is exact on the 2^-32 grid; q is quantised *up*, so the
realised ε = ln(p'(1−q')/((1−p')q')) = ln((1−q')/q') is at most the target.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..randomness import SCALE, realised, threshold_ceil
from ._unary import UnaryEncoding, check_thresholds


@dataclasses.dataclass(frozen=True)
class OUEParams:
    d: int           # domain size (number of bits)
    epsilon: float   # target per-report budget

    def __post_init__(self) -> None:
        check_thresholds(self.d, self.epsilon, self.p_threshold, self.q_threshold)

    @property
    def p_threshold(self) -> int:
        """p = ½: P(bit x reported as 1)."""
        return SCALE // 2

    @property
    def q_threshold(self) -> int:
        """q = 1/(e^ε+1), rounded up: P(any other bit reported as 1)."""
        return threshold_ceil(1.0 / (math.exp(self.epsilon) + 1.0))

    @property
    def p(self) -> float:
        return realised(self.p_threshold)

    @property
    def q(self) -> float:
        return realised(self.q_threshold)


class OUE(UnaryEncoding):
    name = "oue"


OPTION_KEYS: frozenset[str] = frozenset()


def from_options(domain_size: int, epsilon: float, options: dict[str, Any]) -> OUE:
    """Build from registry fields (OUE takes no extra options)."""
    return OUE(OUEParams(d=domain_size, epsilon=epsilon))
