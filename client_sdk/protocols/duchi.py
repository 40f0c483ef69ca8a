"""Duchi et al.'s one-bit mean mechanism (Duchi, Jordan, Wainwright 2013), discretised.

For t in [−1, 1] report one bit, 1 with probability P(t) = ½ + t(e^ε − 1)/(2(e^ε + 1)); the
server's unbiased value of a bit is ±C with C = (e^ε + 1)/(e^ε − 1), so Var = C² − t².
Ding, Kulkarni, Yekhanin (2017)'s 1BitMean, deployed in Windows telemetry, is the same
mechanism on [0, m] (``bitmean`` below: the same code under the name users know it by).

Exactness: on the input grid t_j = −1 + 2j/K the threshold is T_j = A + j·D (integers, out of
2^64, tested against a 64-bit word made of two 32-bit words), affine in j so that the debiased
value stays exactly unbiased, and symmetric (T_0 + T_K = 2^64). A is the smallest integer
with (2^64 − A)/A <= e^ε that makes 2^64 − 2A a multiple of K, D = (2^64 − 2A)/K, and the
quoted epsilon is ln((2^64 − A)/A) of those realised integers. Rounding A up to the multiple
costs at most K/(2A) of e^ε: with 64-bit words that is below 1e-9 for ε <= 20 at K = 256
(32-bit thresholds lost 1e-5 at ε = 8 and realised only 17.3 of ε = 20).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from decimal import ROUND_CEILING, Decimal, localcontext
from fractions import Fraction
from typing import Any

from ..randomness import OS_WORDS, WordSource
from ._epsilon import DIGITS, exp_at_least, log_up
from .blocks import U64, BlockProtocol, BlockReader, MeanEncoder
from .numeric import SCALE64, NumericDevice, check_grid_and_epsilon

DEFAULT_GRID = 256


def realised_epsilon(low: int) -> float:
    """ln((2^64 − A)/A) for T_0 = A, T_K = 2^64 − A, exact and rounded up (``_epsilon.log_up``)."""
    return log_up(Fraction(SCALE64 - low, low))


def _within(epsilon: float, low: int) -> bool:
    """``realised_epsilon(low) <= epsilon`` without the logarithm: log_up returns the smallest
    float ε' with e^ε' >= ratio, so it is at most ε exactly when e^ε >= ratio."""
    return exp_at_least(epsilon, Fraction(SCALE64 - low, low))


def smallest_low(epsilon: float, start: int) -> int:
    """The smallest A >= ``start`` with realised_epsilon(A) <= ε: what stepping A up by one
    from ``start`` finds (the ratio (2^64 − A)/A falls as A grows), without the steps. The float
    estimate of 2^64/(e^ε + 1) is off by up to ~2^10 near 2^63, and each step cost a logarithm
    (~0.1 ms; 100 ms per numeric ``auto`` metric): jump to the bound in DIGITS-digit decimals,
    then settle on it with the same exact test."""
    if _within(epsilon, start):
        return start
    with localcontext() as ctx:
        ctx.prec = DIGITS
        bound = Decimal(SCALE64) / (1 + Decimal(epsilon).exp())
    low = max(start + 1, int(bound.to_integral_value(rounding=ROUND_CEILING)))
    while not _within(epsilon, low):
        low += 1
    while low - 1 > start and _within(epsilon, low - 1):
        low -= 1
    return low


@dataclasses.dataclass(frozen=True)
class DuchiParams:
    epsilon: float            # target per-report budget
    grid: int = DEFAULT_GRID  # K: input grid steps over [−1, 1]

    def __post_init__(self) -> None:
        check_grid_and_epsilon(self.grid, self.epsilon, "duchi")
        if self.step < 1:
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-64 probability grid "
                             f"with {self.grid} grid steps")

    @property
    def low_threshold(self) -> int:
        """A = T_0: P(1 | t = −1) = A/2^64 >= 1/(e^ε + 1), so (2^64 − A)/A <= e^ε."""
        return (SCALE64 - self.grid * self.step) // 2  # exact: K is even

    @property
    def step(self) -> int:
        """D: the threshold grows by D per grid step; K·D <= 2^64 − 2·A_min."""
        a_min = max(1, math.ceil(SCALE64 / (2.0 + math.expm1(min(self.epsilon, 700.0)))))
        a_min = smallest_low(self.epsilon, a_min)  # the float quotient may round down
        return max(0, SCALE64 - 2 * a_min) // self.grid


class Duchi(NumericDevice):
    """Duchi et al.'s mechanism's device half (its server half: sketches.duchi)."""

    name = "duchi"

    def __init__(self, params: DuchiParams) -> None:
        super().__init__(params)
        self.low_threshold = params.low_threshold   # A = T_0, out of 2^64
        self.step = params.step                     # D: T_j = A + jD

    @functools.cached_property
    def value_list(self) -> list[float]:
        """[v(0), v(1)]: the debiased values, solving E[v | j] = t_j with P_j = (A + jD)/2^64."""
        scale = 2.0 * SCALE64 / (self.step * self.params.grid)
        return [(0.0 - self.low_threshold / SCALE64) * scale - 1.0, (1.0 - self.low_threshold / SCALE64) * scale - 1.0]

    def thresholds(self) -> list[int]:
        """T_j = A + jD for j = 0..K (all < 2^64: T_K = 2^64 − A)."""
        return [self.low_threshold + self.step * j for j in range(self.params.grid + 1)]

    def second_moments(self) -> list[float]:
        v0, v1 = self.value_list
        out = []
        for j in range(self.params.grid + 1):
            t = self.low_threshold + self.step * j
            out.append((SCALE64 - t) / SCALE64 * (v0 * v0) + t / SCALE64 * (v1 * v1))
        return out

    @property
    def grid(self) -> int:
        return self.params.grid

    @property
    def cells(self) -> int:
        return 2

    @property
    def epsilon(self) -> float:
        return realised_epsilon(self.low_threshold)

    def encoder_block(self) -> dict[str, Any]:
        # thresholds out of 2^64 as decimal strings (client_sdk.encoder_block: beyond 2^53)
        return {"grid": self.params.grid, "low": str(self.low_threshold), "step": str(self.step)}


class BitMean(Duchi):
    """Ding et al. (2017)'s 1BitMean: Duchi's mechanism under the name Windows telemetry uses."""

    name = "bitmean"
    #: the same law as Duchi's for the same params (``NumericDevice.variance_curve`` shares it)
    law_class = Duchi


OPTION_KEYS: frozenset[str] = frozenset({"grid"})


def params_from_options(epsilon: float, options: dict[str, Any]) -> DuchiParams:
    return DuchiParams(epsilon=epsilon, grid=options.get("grid", DEFAULT_GRID))


def from_options(domain_size: int | None, epsilon: float, options: dict[str, Any]) -> Duchi:
    """Build from registry fields (the domain size is not used: numeric metrics have a range)."""
    return Duchi(params_from_options(epsilon, options))


class DuchiBlock(MeanEncoder):
    """Duchi's (and 1BitMean's) one-report encoder from the block: u = W64; y = [u < A + j·D]."""

    __slots__ = ("low", "step")

    def __init__(self, block: Mapping[str, Any]) -> None:
        super().__init__(block)
        self.low = int(block["low"])     # A and D out of 2^64, decimal strings in the block
        self.step = int(block["step"])

    def randomise(self, index: int, source: WordSource = OS_WORDS) -> int:
        """One bit of grid index ``index``."""
        return int(source.word64() < self.low + self.step * index)


def check_duchi(reader: BlockReader, duchi: Any, prefix: str) -> None:
    """(11) Duchi's thresholds (the block's, or hybrid's nested ``duchi``): A + K·D ≤ 2^64."""
    grid = reader.block.get("grid")
    if not isinstance(duchi, Mapping) or duchi.get("grid") != grid:
        reader.fail(prefix + "grid", "a nested block's grid must be the block's")
    low, step = reader.u64(duchi.get("low"), prefix + "low"), reader.u64(duchi.get("step"), prefix + "step")
    if low + grid * step > U64:
        reader.fail(prefix + "step", "low + grid × step must be at most 2^64")


BLOCK = BlockProtocol(DuchiBlock, lambda reader: check_duchi(reader, reader.block, ""),
                      members=("grid", "low", "step", "range"))
