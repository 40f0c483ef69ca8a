"""L-GRR: GRR chained with GRR, the first round memoised (Arcolezi et al. 2022; docs/protocols.md).

Round 1 (memoised per value, ε∞): report x w.p. p₁ = e^{ε∞}/(e^{ε∞}+k−1), else a uniform other
value (q₁ = (1−p₁)/(k−1)); p₁ is rounded down on the 2^-32 grid.
Round 2 (fresh every report): GRR on [k] of the round-1 output with p₂, q₂ = (1−p₂)/(k−1).

One report supports v with P = p₁p₂ + (1−p₁)q₂ if x = v and Q = q₁p₂ + (1−q₁)q₂ otherwise,
so it costs ln(P/Q). Solving P/Q = e^{ε₁} for p₂ gives

    p₂ = (e^{ε₁}(1−q₁) − (1−p₁)) / (k·p₁ − 1 − e^{ε₁}(k·q₁ − 1)),

exactly ε₁ per report; the formula published with the protocol solves
(p₁p₂+q₁q₂)/(p₁q₂+q₁p₂) = e^{ε₁} instead, which is looser (≈ 0.92 realised for a target of 1
at k = 10, ε∞ = 4) and wastes utility. We take the largest p₂ threshold whose realised ε is
at most ε₁ (``longitudinal.largest_threshold``), which agrees with the closed form to 2^-32.

Sketch, estimator, wire and validation are GRR's with p* = P, q* = Q (pure protocol).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from ..randomness import realised
from ._epsilon import log_up
from .blocks import BlockProtocol, MemoEncoder
from .device import check_domain_and_epsilon
from .grr import GRR
from .grr import keep_threshold as grr_keep_threshold
from .longitudinal import (
    MemoisedDevice,
    TwoRoundChain,
    chain,
    check_epsilon_pair,
    grr_round_one,
    largest_threshold,
    log_ratio,
)


def closed_form_p2(epsilon: float, p1: float, q1: float, k: int) -> float:
    """The exact p₂ of L-GRR for one report of ε₁ (before quantisation; module docstring)."""
    e = math.exp(epsilon)
    return (e * (1 - q1) - (1 - p1)) / (k * p1 - 1 - e * (k * q1 - 1))


class GRRChain(TwoRoundChain):
    """Round 1 GRR_{ε∞} and round 2 GRR on [k], k = ``chain_size`` (L-GRR: d; LOLOHA: g).

    Mixed into a frozen params dataclass with ``epsilon`` (ε₁) and ``epsilon_inf`` (ε∞).
    """

    epsilon: float
    epsilon_inf: float

    @property
    def chain_size(self) -> int:
        raise NotImplementedError

    def check_grid(self) -> None:
        """ValueError when the 2^-32 grid cannot realise p₁ > q₁ and P > Q."""
        k = self.chain_size
        if not self.p1_threshold * k > (1 << 32):
            raise ValueError(f"epsilon_inf {self.epsilon_inf} is too small for the 2^-32 grid at {k} values")
        if not self.p > self.q:
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-32 grid at {k} values")

    @functools.cached_property
    def p1_threshold(self) -> int:
        return grr_keep_threshold(self.epsilon_inf, self.chain_size)

    @property
    def p1(self) -> float:
        return realised(self.p1_threshold)

    @property
    def q1(self) -> float:
        return (1.0 - self.p1) / (self.chain_size - 1)

    def _epsilon_at(self, threshold: int) -> float:
        p2 = realised(threshold)
        return log_ratio(*chain(self.p1, self.q1, p2, (1.0 - p2) / (self.chain_size - 1)))

    @functools.cached_property
    def p2_threshold(self) -> int:
        return largest_threshold(self._epsilon_at, self.epsilon, -(-(1 << 32) // self.chain_size))

    @property
    def p2(self) -> float:
        return realised(self.p2_threshold)

    @property
    def q2(self) -> float:
        return (1.0 - self.p2) / (self.chain_size - 1)


    @property
    def keep_threshold(self) -> int:
        return self.p2_threshold


@dataclasses.dataclass(frozen=True)
class LGRRParams(GRRChain):
    d: int               # domain size k
    epsilon: float       # ε₁: one report
    epsilon_inf: float   # ε∞: the memoised first round

    def __post_init__(self) -> None:
        check_domain_and_epsilon(self.d, self.epsilon, "L-GRR")
        check_epsilon_pair(self.epsilon, self.epsilon_inf, "lgrr")
        self.check_grid()

    @property
    def chain_size(self) -> int:
        return self.d


class GRRChainRoundsDevice(MemoisedDevice):
    """The two GRR rounds of a protocol over ``GRRChain`` params (L-GRR, LOLOHA), one report in
    plain Python (the vectorised rounds: sketches.lgrr.GRRChainServer)."""

    params: GRRChain

    @property
    def epsilon_longitudinal(self) -> float:
        return log_up(Fraction(self.params.p1) / Fraction(self.params.q1))

    #: A GRR memo: r reports of one value can reveal more than r·ε₁.
    window_charged = True

    def window_law(self) -> tuple[Any, ...] | None:
        """A GRR memo over the chain's k values (L-GRR's d, LOLOHA's g hashed cells), GRR again."""
        par = self.params
        return ("cat", int(par.chain_size), par.p1, par.q1, par.p2, par.q2)


class LGRR(GRRChainRoundsDevice, GRR):
    """L-GRR's device half, over GRR's (see the module docstring); its server half, over GRR's
    sketch, estimator and wire, is sketches.lgrr."""

    name = "lgrr"

    def encoder_block(self) -> dict[str, Any]:
        par = self.params
        return {"d": par.d, "p1_threshold": par.p1_threshold, "p2_threshold": par.p2_threshold}


OPTION_KEYS: frozenset[str] = frozenset({"epsilon_inf"})


def from_options(domain_size: int | None, epsilon: float | None, options: dict[str, Any]) -> LGRR:
    """Build from registry fields: ``epsilon`` is ε₁, ``epsilon_inf`` is ε∞ (required)."""
    if domain_size is None:
        raise ValueError("lgrr needs a fixed domain (a boolean or categorical metric)")
    unknown = set(options) - OPTION_KEYS
    if unknown:
        raise ValueError(f"unknown lgrr option(s) {sorted(unknown)}; lgrr takes epsilon_inf")
    eps_inf = check_epsilon_pair(epsilon, options.get("epsilon_inf"), "lgrr")
    return LGRR(LGRRParams(d=domain_size, epsilon=float(epsilon), epsilon_inf=eps_inf))  # type: ignore[arg-type]


class GRRChainBlock(MemoEncoder):
    """The two GRR rounds on [k] from a block's thresholds (L-GRR: k = d; LOLOHA: k = g): memo
    z = GRR_p1 of the memo input, then y = GRR_p2 of z from fresh words (the other value is drawn
    even when kept: ``grr_round_one``)."""

    __slots__ = ("k", "p1", "p2")

    def __init__(self, k: int, block: Mapping[str, Any]) -> None:
        super().__init__()
        self.k = k
        self.p1: int = block["p1_threshold"]
        self.p2: int = block["p2_threshold"]

    def first_round(self, memo_input: int, memo: Any) -> int:
        return grr_round_one(memo_input, self.k, self.p1, memo)

    def second_round(self, first: int, source: Any) -> int:
        return grr_round_one(first, self.k, self.p2, source)


class LGRRBlock(GRRChainBlock):
    """L-GRR's one-report encoder from the block (module docstring); the report is y."""

    __slots__ = ()
    name = "lgrr"

    def __init__(self, block: Mapping[str, Any]) -> None:
        super().__init__(block["d"], block)


BLOCK = BlockProtocol(LGRRBlock, memoised=True, members=("d", "p1_threshold", "p2_threshold"))
