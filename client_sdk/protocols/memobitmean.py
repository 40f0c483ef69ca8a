"""Memoised 1BitMean with α-point rounding (Ding, Kulkarni, Yekhanin 2017), two rounds.

Windows telemetry collects a counter every day from the same devices. Ding et al. make that
cheap in privacy with two devices-side tricks, both derived here from the client secret
(client_sdk.memo) so nothing is stored:

1. **α-point rounding.** The device draws α once; a normalised value t in [−1, 1] between grid
   points t_j and t_{j+1} is rounded up iff α < its fractional position. Over devices α is
   uniform, so the rounded value is unbiased, and a device whose value stays between two grid
   points always reports the *same* grid point (one memo key) instead of alternating.
2. **Memoisation.** Round 1 is 1BitMean (Duchi et al. 2013; ``duchi``) at ε∞ on the grid
   point j, drawn once per (device, j). Round 2 flips the bit with probability γ, fresh every
   report, so one report costs ε₁ < ε∞ and reports of one value are not all identical.

One report is 1 with P_j = γ + (1 − 2γ)·P1_j, P1_j = (A + jD)/2^64 (Duchi's integer
thresholds at ε∞), affine in j, so the server's values v(0), v(1) with E[v | j] = t_j are
exactly unbiased. γ is the smallest 2^-32 threshold whose realised table has ε ≤ ε₁.
The ledger charges ε₁ per report in the window and ε∞ once per distinct grid point — at most
K+1 over the lifetime, and 1 while the value stays within one grid step. Memoised histograms
use dBitFlipPM or the other L-protocols over the buckets (client_sdk.protocols.dbitflip).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from ..hashing import check_secret
from ..memo import MemoWords
from ..randomness import SCALE
from ._epsilon import log_up
from .blocks import BlockProtocol, MemoEncoder
from .duchi import DuchiParams, check_duchi
from .longitudinal import MemoisedDevice, check_epsilon_pair, largest_threshold
from .numeric import SCALE64, NumericDevice, check_grid_and_epsilon

#: Grid steps by default: fewer grid points, fewer distinct memoised responses (lifetime charge).
DEFAULT_GRID = 32
#: Memo key of the device's α (one per metric).
ALPHA_KEY = "alpha"


@dataclasses.dataclass(frozen=True)
class MemoBitMeanParams:
    epsilon: float             # ε₁: one report
    epsilon_inf: float         # ε∞: the memoised 1BitMean bit of a grid point
    grid: int = DEFAULT_GRID   # K

    def __post_init__(self) -> None:
        check_grid_and_epsilon(self.grid, self.epsilon, "memobitmean")
        check_epsilon_pair(self.epsilon, self.epsilon_inf, "memobitmean")
        if not self.epsilon_realised(self.gamma_threshold) > 0:
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-32 probability grid")

    @functools.cached_property
    def first(self) -> DuchiParams:
        """Round 1: Duchi/1BitMean at ε∞ on the same grid."""
        return DuchiParams(epsilon=self.epsilon_inf, grid=self.grid)

    def one_weights(self, gamma_threshold: int) -> list[int]:
        """P(report = 1 | j)·2^96 exactly: γ + (1 − 2γ)·P1_j with γ = G/2^32, P1_j = T_j/2^64."""
        a, d, g = self.first.low_threshold, self.first.step, gamma_threshold
        return [g * SCALE64 + (SCALE - 2 * g) * (a + d * j) for j in range(self.grid + 1)]

    def epsilon_realised(self, gamma_threshold: int) -> float:
        """ε of one report from the exact weights, rounded up (``_epsilon.log_up``)."""
        one = self.one_weights(gamma_threshold)
        total = SCALE * SCALE64
        return log_up(max(Fraction(max(one), min(one)), Fraction(total - min(one), total - max(one))))

    @functools.cached_property
    def gamma_threshold(self) -> int:
        """Smallest γ threshold (least noise) with realised ε <= ε₁: the largest h = 2^31 − G."""
        half = SCALE // 2

        def eps_of(h: int) -> float:
            return self.epsilon_realised(max(0, half - h)) if h < half else math.inf

        return half - largest_threshold(eps_of, self.epsilon, 0)


class MemoBitMean(MemoisedDevice, NumericDevice):
    """Two-round memoised 1BitMean's device half over the numeric contract: α-point rounding and the
    memoised bit from the secret, the fresh flip (its server half: sketches.memobitmean)."""

    name = "memobitmean"

    def __init__(self, params: MemoBitMeanParams) -> None:
        super().__init__(params)
        a, d = params.first.low_threshold, params.first.step   # out of 2^64 (duchi.py)
        self._t1_ints = [a + d * j for j in range(params.grid + 1)]  # round-1 thresholds, out of 2^64
        self._gamma = params.gamma_threshold

    @property
    def first_thresholds(self) -> list[int]:
        """Round 1's thresholds T₁(j) out of 2^64 (Duchi's at ε∞): the memoised bit is u64 < T₁(j)."""
        return self._t1_ints

    @property
    def gamma_threshold(self) -> int:
        """Round 2 flips the bit iff a fresh 32-bit word is below it (γ = G/2^32)."""
        return self._gamma

    @property
    def epsilon(self) -> float:
        """The realised per-report ε of the two rounds (the table's, computed without numpy)."""
        return self.params.epsilon_realised(self._gamma)

    def second_moments(self) -> list[float]:
        g = self._gamma / SCALE
        a, d = self.params.first.low_threshold, self.params.first.step
        one = [g + (1 - 2 * g) * ((a + d * j) / SCALE64) for j in range(self.params.grid + 1)]
        slope = (one[-1] - one[0]) / self.params.grid
        spread = (2.0 / self.params.grid) / slope
        v0 = -1.0 - spread * one[0]
        v1 = v0 + spread
        return [(1.0 - p) * (v0 * v0) + p * (v1 * v1) for p in one]

    @property
    def grid(self) -> int:
        return self.params.grid

    @property
    def cells(self) -> int:
        return 2

    @property
    def epsilon_longitudinal(self) -> float:
        a = self.params.first.low_threshold
        return log_up(Fraction(SCALE64 - a, a))

    @property
    def second_round_keep(self) -> float:
        """λ = 1 − 2γ: the flip keeps the bit w.p. 1 − γ = λ + (1 − λ)/2."""
        return 1.0 - 2.0 * self._gamma / SCALE

    def encoder_block(self) -> dict[str, Any]:
        first = self.params.first
        # thresholds out of 2^64 as decimal strings (client_sdk.encoder_block: beyond 2^53)
        return {"grid": self.grid, "low": str(first.low_threshold), "step": str(first.step),
                "gamma_threshold": self.params.gamma_threshold}

    # --- the device: α-point rounding and memoisation from the secret ---------------------------
    def alpha_round(self, t: float, secret: bytes, metric: str) -> int:
        """The grid index of normalised t under the device's α (fixed per secret and metric): the
        block encoder's."""
        return self.block_encoder.alpha_round(t, secret, metric)

    def report_index(self, t: float, secret: bytes, metric: str) -> int:
        """The α-rounded grid index: the same for every report of one value (what is memoised)."""
        return self.alpha_round(t, secret, metric)

    def memo_key_of_value(self, t: float, secret: bytes, metric: str) -> str:
        """The ledger's memo key of a normalised value: its α-rounded grid point."""
        return self.memo_key(self.alpha_round(t, secret, metric), secret, metric)

    def encode_value_secret_one(self, t: float, secret: bytes, metric: str) -> int:
        """One report of a normalised value (the SDK path): α-round, memoised bit, fresh flip."""
        return self.encode_secret_one(self.alpha_round(t, secret, metric), secret, metric)


OPTION_KEYS: frozenset[str] = frozenset({"epsilon_inf", "grid"})


def from_options(domain_size: int | None, epsilon: float | None, options: dict[str, Any]) -> MemoBitMean:
    """Build from registry fields: ``epsilon`` (ε₁), ``epsilon_inf`` (ε∞), optional ``grid`` (K)."""
    unknown = set(options) - OPTION_KEYS
    if unknown:
        raise ValueError(f"unknown memobitmean option(s) {sorted(unknown)}; it takes epsilon_inf, grid")
    eps_inf = check_epsilon_pair(epsilon, options.get("epsilon_inf"), "memobitmean")
    return MemoBitMean(MemoBitMeanParams(epsilon=float(epsilon), epsilon_inf=eps_inf,  # type: ignore[arg-type]
                                         grid=options.get("grid", DEFAULT_GRID)))


class MemoBitMeanBlock(MemoEncoder):
    """The memoised one-bit mean's one-report encoder from the block: the device's α-point rounding
    (no CSPRNG word), the memo bit [M64 < A + j·D] (two memo words, low first), then y = bit xor
    [W32 < gamma]."""

    __slots__ = ("grid", "low", "step", "gamma")
    name = "memobitmean"

    def __init__(self, block: Mapping[str, Any]) -> None:
        super().__init__()
        self.grid: int = block["grid"]
        self.low = int(block["low"])     # out of 2^64, decimal strings in the block
        self.step = int(block["step"])
        self.gamma: int = block["gamma_threshold"]

    def alpha_round(self, t: float, secret: bytes, metric: str) -> int:
        """The grid index of normalised t under the device's α (fixed per secret and metric)."""
        alpha = MemoWords(check_secret(secret), metric, ALPHA_KEY).word()
        pos = (min(1.0, max(-1.0, float(t))) + 1.0) * (self.grid / 2)
        low = math.floor(pos)
        return min(low + int(alpha < math.floor((pos - low) * SCALE)), self.grid)

    def first_round(self, memo_input: int, memo: Any) -> int:
        return int(memo.word64() < self.low + self.step * memo_input)

    def second_round(self, first: int, source: Any) -> int:
        return first ^ int(source.word() < self.gamma)


BLOCK = BlockProtocol(MemoBitMeanBlock, lambda reader: check_duchi(reader, reader.block, ""), memoised=True,
                      members=("grid", "low", "step", "gamma_threshold", "range"))
