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
from fractions import Fraction
from typing import Any

from .._lazy import np
from ..memo import MemoCache
from ..randomness import SCALE, RandomLike, as_random_source, realised, threshold_ceil
from ._epsilon import log_up
from .base import Payloads
from .longitudinal import (
    Memoised,
    SymmetricSecondRound,
    chain,
    check_epsilon_pair,
    pure_chain_permanent_variance,
)
from .unary import MAX_ENUMERATED_D, UnaryEncoding, check_thresholds, pack_bits


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



class LOSUE(Memoised, UnaryEncoding):
    name = "losue"

    def __init__(self, params: LOSUEParams) -> None:
        super().__init__(params)   # UnaryEncoding: round-1 thresholds, payload width
        self.p, self.q = params.p, params.q   # one report: the chain's support probabilities
        self._memo = MemoCache()

    @property
    def epsilon_longitudinal(self) -> float:
        return unary_epsilon(self.params.p1, self.params.q1)

    def memo_output_probabilities(self, index: int) -> np.ndarray:
        d = self.params.d
        if d > MAX_ENUMERATED_D:
            raise ValueError(f"refusing to enumerate 2^{d} unary responses (d <= {MAX_ENUMERATED_D})")
        bits = (np.arange(1 << d, dtype=np.int64)[:, None] >> np.arange(d)) & 1
        one = np.full(d, self.params.q1)
        one[index] = self.params.p1
        return np.where(bits == 1, one, 1.0 - one).prod(axis=1)

    def permanent_variance(self, sketch: Any, estimate: Any) -> np.ndarray:
        """Exact for a pure chain (``longitudinal.pure_chain_permanent_variance``)."""
        return pure_chain_permanent_variance(self.params, estimate.n, estimate.counts)

    def first_round(self, memo_inputs: np.ndarray, source: Any) -> np.ndarray:
        """OUE bits, bool (n, d): x's bit 1 w.p. p₁, every other bit w.p. q₁."""
        n, d = memo_inputs.shape[0], self.params.d
        u = source.words((n, d))
        rows = np.arange(n)
        bits = u < np.uint32(self.params.q_threshold)
        bits[rows, memo_inputs] = u[rows, memo_inputs] < np.uint32(self.params.p_threshold)
        return bits

    def second_round(self, first: np.ndarray, source: Any) -> np.ndarray:
        """SUE on every bit: 1 w.p. p₂ if the round-1 bit is 1, w.p. 1−p₂ if it is 0."""
        u = source.words(first.shape).astype(np.uint64)
        t1, t0 = np.uint64(self.params.p2_threshold), np.uint64(SCALE - self.params.p2_threshold)
        return u < np.where(first, t1, t0)

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        """Both rounds with fresh coins (each row a new client), in blocks bounding memory."""
        x = self.check_indices(indices)
        source = as_random_source(rng)
        out = np.empty((x.shape[0], self._width), dtype=np.uint8)
        block = max(1, (1 << 17) // self.params.d)
        for start in range(0, x.shape[0], block):
            bits = self.second_round(self.first_round(x[start:start + block], source), source)
            out[start:start + block] = np.packbits(bits, axis=1, bitorder="little")
        return {"bits": out}

    def first_round_one(self, memo_input: int, source: Any) -> list[bool]:
        """``first_round`` of one value: d words, bit i is uᵢ < T_q₁, bit x is u_x < T_p₁."""
        u = source.words(self.params.d)
        q1 = self.params.q_threshold
        bits = [w < q1 for w in u]
        bits[memo_input] = u[memo_input] < self.params.p_threshold
        return bits

    def second_round_one(self, first: list[bool], source: Any) -> list[int]:
        """``second_round`` of one response: the indices of the reported 1 bits."""
        t1 = self.params.p2_threshold
        t0 = SCALE - t1
        return [i for i, (b, w) in enumerate(zip(first, source.words(len(first)))) if w < (t1 if b else t0)]

    def wire_one(self, second: list[int], cohort: int | None) -> bytes:
        return pack_bits(second, self._width)

    def batch_payloads(self, second: np.ndarray, cohorts: np.ndarray | None = None) -> Payloads:
        return {"bits": np.packbits(second, axis=1, bitorder="little")}


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
