"""What the two-round longitudinal protocols share (L-GRR, L-OSUE, LOLOHA; docs/protocols.md).

Arcolezi, Couchot, Al Bouna, Xiao 2022 (L-GRR, L-OSUE) and Arcolezi, Pinzón, Palamidessi,
Gambs 2023 (LOLOHA) chain two randomisers:

1. a **memoised** first round with budget ε∞ (p₁, q₁), a deterministic function of
   (client secret, metric, memo key) — the value for L-GRR/L-OSUE, the hashed value for
   LOLOHA (client_sdk.memo) — so any number of reports of one memo key reveal at most ε∞;
2. a **fresh** second round (p₂, q₂) on the first round's output, every report.

One report is then a single randomiser with support probabilities
P = p₁p₂ + (1−p₁)q₂ and Q = q₁p₂ + (1−q₁)q₂, i.e. a pure protocol (Wang et al. 2017) with
p* = P, q* = Q, and the pure estimator ĉ = (C − nQ)/(P − Q) is the two-round estimator
f̂ = ((C/n − q₂)/(p₂−q₂) − q₁)/(p₁−q₁) (P − Q = (p₁−q₁)(p₂−q₂)). Its variance is the sum of
independent Bernoulli variances, n·σ(1−σ)/((p₁−q₁)(p₂−q₂))² at f = 0 (Arcolezi et al. 2022).

p₂ is chosen so that one report costs exactly (at most, on the grid) ε₁: the largest 2^-32
threshold whose realised chain has ε ≤ ε₁, found by integer bisection on the threshold —
ε of one report increases with p₂ — so the quoted ε₁ is computed from realised values.
"""

from __future__ import annotations

import abc
import functools
import math
from collections.abc import Callable
from typing import Any

from ..randomness import OS_WORDS, SCALE, WordSource, realised
from ._epsilon import log_up
from .device import Context


def check_epsilon_pair(epsilon: float | None, epsilon_inf: Any, protocol: str) -> float:
    """ε₁ (epsilon) and ε∞ (epsilon_inf) as given in the registry: finite, positive, ε₁ < ε∞."""
    if epsilon is None:
        raise ValueError(f"{protocol} needs epsilon (the budget of one report)")
    if epsilon_inf is None:
        raise ValueError(f"{protocol} needs epsilon_inf (the budget of the memoised response)")
    if isinstance(epsilon_inf, bool) or not isinstance(epsilon_inf, (int, float)) \
            or not math.isfinite(epsilon_inf) or not 0 < epsilon_inf <= 20:
        raise ValueError(f"epsilon_inf must be a number in (0, 20], got {epsilon_inf!r}")
    if not epsilon < epsilon_inf:
        raise ValueError(f"epsilon ({epsilon}) must be below epsilon_inf ({epsilon_inf}): one report "
                         "cannot reveal more than the memoised response it is drawn from")
    return float(epsilon_inf)


def chain(p1: float, q1: float, p2: float, q2: float) -> tuple[float, float]:
    """(P, Q): P(report supports v | x = v) and P(report supports v | x ≠ v) of the two rounds."""
    return p1 * p2 + (1 - p1) * q2, q1 * p2 + (1 - q1) * q2


def largest_threshold(epsilon_of: Callable[[int], float], target: float, low: int) -> int:
    """Largest threshold T in [low, 2^32] with ``epsilon_of(T) <= target`` (non-decreasing in T).

    ``epsilon_of(low)`` must be <= target (``low`` is where the second round is pure noise).
    """
    if epsilon_of(SCALE) <= target:
        return SCALE
    lo, hi = low, SCALE   # invariant: ε(lo) <= target < ε(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if epsilon_of(mid) <= target:
            lo = mid
        else:
            hi = mid
    return lo


def log_ratio(a: float, b: float) -> float:
    """ln(a/b) for a privacy ratio, 0 when a <= b (a second round that is noise or worse)."""
    from fractions import Fraction  # here: not on the SDK's import

    return log_up(Fraction(a) / Fraction(b)) if a > b > 0 else 0.0


def grr_round_one(x: int, k: int, threshold: int, source: WordSource) -> int:
    """``sketches.longitudinal.grr_round`` for one input in Python ints, the same words in the same order:
    the keep word (none when T = 2^32), then the other value (always drawn, as the batch does)."""
    keep = threshold >= SCALE or source.word() < threshold
    other = source.below(k - 1)
    return x if keep else other + (other >= x)


class TwoRoundChain:
    """p, q of one report through both rounds (``chain``), for params with p1, q1, p2, q2."""

    p1: float
    q1: float
    p2: float
    q2: float

    @property
    def p(self) -> float:
        """P(one report supports the true value): P(reported bit = 1 | true bit 1) for unary."""
        return chain(self.p1, self.q1, self.p2, self.q2)[0]

    @property
    def q(self) -> float:
        """P(one report supports a given other value): P(bit = 1 | true bit 0) for unary."""
        return chain(self.p1, self.q1, self.p2, self.q2)[1]


class SymmetricSecondRound(TwoRoundChain):
    """Round 2 of the bit chains (L-OSUE, dBitFlipPM): each bit kept w.p. p₂, flipped w.p.
    q₂ = 1 − p₂ (SUE), p₂ the largest threshold whose realised ε (``_epsilon_at``) is <= ε₁.

    Mixed into a frozen params dataclass with ``epsilon`` and first-round ``p1``, ``q1``.
    """

    epsilon: float
    p1: float
    q1: float

    def _epsilon_at(self, threshold: int) -> float:
        raise NotImplementedError

    @functools.cached_property
    def p2_threshold(self) -> int:
        return largest_threshold(self._epsilon_at, self.epsilon, SCALE // 2)

    @property
    def p2(self) -> float:
        return realised(self.p2_threshold)

    @property
    def q2(self) -> float:
        return realised(SCALE - self.p2_threshold)



class MemoisedDevice(abc.ABC):
    """Device mixin of the two-round protocols: the memo key, the memoised first round of one
    value and the SDK's report path, in plain Python (no numpy).

    Every round is the block encoder's (``DeviceHalf.block_encoder``, a ``blocks.MemoEncoder``):
    the one home of the protocol's draw. Where the memoised response depends on less than the
    value (LOLOHA: the hashed value; dBitFlipPM: its position in the sampled window), a subclass
    gives ``memo_index_in_cohort`` for reports in a given cohort (``randomise``). The vectorised
    rounds are the server half's (``sketches.longitudinal.MemoisedServer``).
    """

    #: ``DeviceHalf.two_round``: what this mixin makes a protocol.
    two_round = True

    @property
    @abc.abstractmethod
    def epsilon_longitudinal(self) -> float:
        """ε∞: the realised budget of the memoised first round."""

    @property
    def memo_key_space(self) -> int:
        """Number of distinct memo indices (the simulation's table of memoised responses)."""
        return self.domain_size  # type: ignore[attr-defined]

    def memo_index(self, index: int, secret: bytes, metric: str) -> int:
        """The index the memoised response depends on (the value itself, unless hashed or
        windowed): the block encoder's."""
        return self.block_encoder.memo_index(index, secret, metric)  # type: ignore[attr-defined]

    def memo_key(self, index: int, secret: bytes, metric: str) -> str:
        """Ledger/memo key of a value: one ε∞ charge per distinct key over the lifetime."""
        return self.block_encoder.memo_key(index, secret, metric)  # type: ignore[attr-defined]

    def first_round_one(self, memo_input: int, source: WordSource) -> Any:
        """The first round of one memo input, the same words in the same order as the server's
        vectorised ``first_round`` (``client_sdk.memo.MemoWords`` gives the SDK the words
        ``MemoRandom`` gives a batch): the block encoder's."""
        return self.block_encoder.first_round(memo_input, source)  # type: ignore[attr-defined]

    def second_round_one(self, first: Any, source: WordSource) -> Any:
        """The fresh second round of one first-round response: the block encoder's."""
        return self.block_encoder.second_round(first, source)  # type: ignore[attr-defined]

    def wire_one(self, second: Any, cohort: int | None) -> Any:
        """The wire payload of one second-round response (``to_wire`` of a batch of one)."""
        return self.block_encoder.wire(second, cohort)  # type: ignore[attr-defined]

    def encode_secret_one(self, index: int, secret: bytes, metric: str,
                          source: WordSource | None = None) -> Any:
        """One report of one client (the SDK path): the block encoder's memoised first round from
        the secret, fresh second round from ``source`` (the OS CSPRNG unless a test injects one)."""
        x = self.check_index(index)  # type: ignore[attr-defined]
        return self.block_encoder.encode_one(x, "", Context(secret, metric, 0, source or OS_WORDS))  # type: ignore[attr-defined]

    def randomise(self, index: int, cohort: int | None = None, source: WordSource | None = None) -> Any:
        """One report with fresh coins in both rounds (a new client reporting once): the block
        encoder's rounds, the first from ``source`` instead of the memo stream."""
        x = self.check_index(index)  # type: ignore[attr-defined]
        src = source or OS_WORDS
        if self.uses_cohorts and cohort is None:  # type: ignore[attr-defined]
            cohort = src.below(self.cohorts)  # type: ignore[attr-defined]
        memo_in = self.memo_index_in_cohort(x, cohort)
        return self.wire_one(self.second_round_one(self.first_round_one(memo_in, src), src), cohort)

    def memo_index_in_cohort(self, index: int, cohort: int | None) -> int:
        """The memo index of one value in a given cohort (the value itself unless hashed)."""
        return index

    def cohort_of(self, secret: bytes, metric: str) -> int | None:
        """The device's permanent cohort for ``metric`` (None for protocols without cohorts): the
        block encoder's (HMAC of the secret, cached in memory)."""
        return self.block_encoder.cohort(secret, metric)  # type: ignore[attr-defined]

    @property
    def second_round_keep(self) -> float:
        """λ: the fresh round passes the memoised output on w.p. λ and otherwise draws an output
        independent of it (GRR on [k] and the bit flips are this mixture: λ = p₂ − q₂).

        Hence for any function a of one report, Var(E[a(y) | first round]) = λ²·Var(a(r)) and
        Var(a(y)) ≥ λ·Var(a(r)): at most a share λ of a report's variance is permanent noise that
        repeats in every report of the same memo key (docs/math.md, "Ranges of memoised metrics").
        """
        params = self.params  # type: ignore[attr-defined]
        return float(params.p2 - params.q2)

    # --- what r reports of one window reveal (client_sdk/window_charge.py) ------------------------
    #: Whether W(r), the ε of r reports in one window, can exceed r·ε₁ (a GRR memo: L-GRR, LOLOHA),
    #: so the ledger charges ``window_charge.cumulative_charges``'s figures, not ε₁ a report. L-OSUE's
    #: OUE memo is asymmetric too, but W(r) = r·ε₁ there (window_charge's concavity argument).
    window_charged: bool = False

    def window_law(self) -> tuple[Any, ...] | None:
        """(kind, k or bits, p₁, q₁, p₂, q₂): what the r-report law of one memo key depends on
        ("cat": a GRR memo over [k]; "bit": independent memo bits, ``bits`` of them moved by a
        change of value); None where window_charge has no exact law (memobitmean)."""
        return None


__all__ = ["MemoisedDevice", "SymmetricSecondRound", "TwoRoundChain", "chain", "check_epsilon_pair", "largest_threshold", "log_ratio"]

