"""L-OSUE: OUE chained with SUE, the first round memoised (Arcolezi et al. 2022; docs/protocols.md).

Round 1 (memoised per value, ε∞): OUE, p₁ = ½ and q₁ = 1/(e^{ε∞}+1) rounded up on the 2^-32
grid. Round 2 (fresh every report): SUE on every bit, P(1 | bit 1) = p₂, P(1 | bit 0) = q₂ = 1−p₂.

Each reported bit is 1 w.p. P = p₁p₂ + (1−p₁)q₂ if it is x's bit and Q = q₁p₂ + (1−q₁)q₂
otherwise, so one report costs ln(P(1−Q)/((1−P)Q)) (two bits differ between any two values).
Setting that to ε₁ gives p₂ = (1−e^{ε₁+ε∞})/(e^{ε₁} − e^{ε∞} − e^{ε₁+ε∞} + 1) at the exact
first-round values; we take the largest p₂ threshold whose *realised* chain has ε ≤ ε₁.
Among the two-round unary chains this one has the smallest variance (Arcolezi et al. 2022):
below L-SUE (SUE then SUE, the chain of basic RAPPOR) and L-OUE.

Sketch, estimator, wire and validation are unary encoding's with p* = P, q* = Q.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from ..randomness import SCALE, realised, threshold_ceil
from ._epsilon import log_up
from .blocks import BlockProtocol, BlockReader, MemoEncoder
from .longitudinal import MemoisedDevice, SymmetricSecondRound, chain, check_epsilon_pair
from .unary import UnaryEncoding, check_thresholds, pack_bits


def closed_form_p2(epsilon: float, epsilon_inf: float) -> float:
    """p₂ of L-OSUE before quantisation (module docstring)."""
    e1, ei = math.exp(epsilon), math.exp(epsilon_inf)
    return (1 - e1 * ei) / (e1 - ei - e1 * ei + 1)


def unary_epsilon(p: float, q: float) -> float:
    """ε of a unary report with per-bit rates p (x's bit) and q (other bits); 0 if p <= q."""
    if not 0 < q < p < 1:
        return math.inf if p >= 1 or q <= 0 else 0.0
    fp, fq = Fraction(p), Fraction(q)
    return log_up(fp * (1 - fq) / ((1 - fp) * fq))


def l_sue_rates(epsilon: float, epsilon_inf: float) -> tuple[float, float]:
    """(P, Q) of L-SUE — SUE at ε∞ memoised, then SUE at the p₂ making one report ε₁ — the
    chain of basic one-time RAPPOR (Erlingsson et al. 2014), unquantised: the baseline L-OSUE
    improves on (docs/protocols.md; bench/longitudinal.py)."""
    half = math.exp(epsilon_inf / 2)
    p1 = half / (half + 1)
    lo, hi = 0.5, 1.0
    for _ in range(100):  # ε of one report increases with p₂: bisection
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if unary_epsilon(*chain(p1, 1 - p1, mid, 1 - mid)) <= epsilon else (lo, mid)
    return chain(p1, 1 - p1, lo, 1 - lo)


@dataclasses.dataclass(frozen=True)
class LOSUEParams(SymmetricSecondRound):
    d: int               # domain size (bits)
    epsilon: float       # ε₁: one report
    epsilon_inf: float   # ε∞: the memoised first round

    def __post_init__(self) -> None:
        check_epsilon_pair(self.epsilon, self.epsilon_inf, "losue")
        check_thresholds(self.d, self.epsilon_inf, self.p_threshold, self.q_threshold)
        if not self.p > self.q:
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-32 probability grid")

    # --- round 1: OUE at ε∞ (UnaryEncoding's p_threshold / q_threshold) --------------------------
    @property
    def p_threshold(self) -> int:
        return SCALE // 2

    @property
    def q_threshold(self) -> int:
        return threshold_ceil(1.0 / (math.exp(self.epsilon_inf) + 1.0))

    @property
    def p1(self) -> float:
        return realised(self.p_threshold)

    @property
    def q1(self) -> float:
        return realised(self.q_threshold)

    # --- round 2: SUE ------------------------------------------------------------------------------
    def _epsilon_at(self, threshold: int) -> float:
        p2 = realised(threshold)
        big, small = chain(self.p1, self.q1, p2, 1.0 - p2)
        return unary_epsilon(big, small)



class LOSUE(MemoisedDevice, UnaryEncoding):
    """L-OSUE's device half: both rounds of one report in plain Python (its server half:
    sketches.losue)."""

    name = "losue"

    def __init__(self, params: LOSUEParams) -> None:
        super().__init__(params)   # UnaryEncoding: round-1 thresholds, payload width
        self.p, self.q = params.p, params.q   # one report: the chain's support probabilities

    @property
    def epsilon_longitudinal(self) -> float:
        return unary_epsilon(self.params.p1, self.params.q1)

    def encoder_block(self) -> dict[str, Any]:
        par = self.params
        return {"d": par.d, "p1_threshold": par.p_threshold, "q1_threshold": par.q_threshold,
                "p2_threshold": par.p2_threshold}

    def window_law(self) -> tuple[Any, ...] | None:
        """OUE memo bits, SUE flips: a change of value moves two of them."""
        par = self.params
        return ("bit", 2, par.p1, par.q1, par.p2, par.q2)


OPTION_KEYS: frozenset[str] = frozenset({"epsilon_inf"})


def from_options(domain_size: int | None, epsilon: float | None, options: dict[str, Any]) -> LOSUE:
    """Build from registry fields: ``epsilon`` is ε₁, ``epsilon_inf`` is ε∞ (required)."""
    if domain_size is None:
        raise ValueError("losue needs a fixed domain (a boolean or categorical metric)")
    unknown = set(options) - OPTION_KEYS
    if unknown:
        raise ValueError(f"unknown losue option(s) {sorted(unknown)}; losue takes epsilon_inf")
    eps_inf = check_epsilon_pair(epsilon, options.get("epsilon_inf"), "losue")
    return LOSUE(LOSUEParams(d=domain_size, epsilon=float(epsilon), epsilon_inf=eps_inf))  # type: ignore[arg-type]


class LOSUEBlock(MemoEncoder):
    """L-OSUE's one-report encoder from the block: memo bits z_i = M32 < (i = x ? p1 : q1), then
    y_i = u_i < (z_i ? p2 : 2^32 − p2) from fresh words, packed little-endian."""

    __slots__ = ("d", "p1", "q1", "p2", "width")
    name = "losue"

    def __init__(self, block: Mapping[str, Any]) -> None:
        super().__init__()
        self.d: int = block["d"]
        self.p1: int = block["p1_threshold"]
        self.q1: int = block["q1_threshold"]
        self.p2: int = block["p2_threshold"]
        self.width = (self.d + 7) // 8

    def first_round(self, memo_input: int, memo: Any) -> list[bool]:
        u = memo.words(self.d)
        bits = [w < self.q1 for w in u]
        bits[memo_input] = u[memo_input] < self.p1
        return bits

    def second_round(self, first: list[bool], source: Any) -> list[int]:
        t1 = self.p2
        t0 = SCALE - t1
        return [i for i, (b, w) in enumerate(zip(first, source.words(len(first)))) if w < (t1 if b else t0)]

    def wire(self, second: list[int], cohort: int | None) -> bytes:
        return pack_bits(second, self.width)


def check_block(reader: BlockReader) -> None:
    """(9) the first round is OUE's: p1 = 2^31."""
    if reader.block.get("p1_threshold") != 1 << 31:
        reader.fail("p1_threshold", "p1_threshold must be 2^31 (L-OSUE's first round)")


BLOCK = BlockProtocol(LOSUEBlock, check_block, memoised=True,
                      members=("d", "p1_threshold", "q1_threshold", "p2_threshold"))
