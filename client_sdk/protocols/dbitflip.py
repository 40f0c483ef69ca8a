"""dBitFlipPM: histograms from d sampled buckets, memoised (Ding, Kulkarni, Yekhanin 2017).

Ding et al.'s histogram mechanism for Windows telemetry, as a two-round protocol over a
domain of k buckets (a categorical metric, or the buckets of a numeric histogram):

- each device samples d of the k buckets once, permanently: here the cyclic window
  S_s = {s, s+1, ..., s+d−1} (mod k) of its cohort s ∈ [k], derived from the secret (uniform
  in simulation). Every bucket lies in exactly d windows, so P(v ∈ S) = d/k for every v,
  independent of the value;
- it reports one bit per sampled bucket: bit i says "my value is S_s[i]". Round 1, memoised,
  is symmetric unary randomisation at ε∞ (P(1 | true) = p₁, P(1 | false) = q₁ = 1 − p₁);
  round 2 flips each bit fresh with P(1 | 1) = p₂, P(1 | 0) = q₂ = 1 − p₂.

Privacy. Changing the value changes at most two bits (one if d = 1), so one report costs
ε₁ = 2·ln(P/Q) with P = p₁p₂ + q₁q₂, Q = 1 − P (ln(P/Q) when d = 1), and the memoised round
ε∞ = 2·ln(p₁/q₁). The memoised response depends only on *which* sampled bucket holds the
value, or none: d + 1 memo keys, so a device spends at most (d+1)·ε∞ for life, however many
values it holds (Ding et al. 2017).

Estimator. n_v = reports whose window contains v, C_v = their bits for v. Given the windows
(independent of the values), f̂_v = (C_v/n_v − Q)/(P − Q) is unbiased for v's frequency among
those devices, hence for its frequency in the population; ĉ_v = n·f̂_v with
Var[f̂_v] = (f P(1−P) + (1−f) Q(1−Q))/(n_v (P−Q)²) + f(1−f)(n − n_v)/(n_v (n − 1)).

The window s is permanent: log₂ k bits that are the same in every report of the metric from
one device (as RAPPOR's cohort; docs/privacy.md).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

from ..randomness import SCALE, realised, threshold_floor
from .blocks import BlockProtocol, BlockReader, MemoEncoder, PermanentCohorts
from .device import DeviceHalf, check_domain_and_epsilon
from .longitudinal import MemoisedDevice, SymmetricSecondRound, chain, check_epsilon_pair, log_ratio

#: Largest number of sampled buckets (a report is d bits in one integer).
MAX_SAMPLED = 32
#: The server's output_probabilities enumerates 2^d bit patterns per window.
MAX_ENUMERATED_SAMPLED = 12
#: derive_cohort scope of a device's permanent window.
COHORT_SCOPE = "dbitflip\x00"


@dataclasses.dataclass(frozen=True)
class DBitFlipParams(SymmetricSecondRound):
    d: int               # k in the paper: buckets of the domain
    epsilon: float       # ε₁: one report
    epsilon_inf: float   # ε∞: the memoised round
    sampled: int = 1     # d in the paper: buckets each device samples

    def __post_init__(self) -> None:
        check_domain_and_epsilon(self.d, self.epsilon, "dBitFlipPM")
        check_epsilon_pair(self.epsilon, self.epsilon_inf, "dbitflip")
        if isinstance(self.sampled, bool) or not isinstance(self.sampled, int) \
                or not 1 <= self.sampled <= min(self.d, MAX_SAMPLED):
            raise ValueError(f"sampled_buckets must be an integer in [1, {min(self.d, MAX_SAMPLED)}], "
                             f"got {self.sampled!r}")
        if not (self.p1 > 0.5 and self.p > self.q):
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-32 probability grid")

    @property
    def bits_changed(self) -> int:
        """How many reported bits a change of value can flip: 2, or 1 when d = 1."""
        return 2 if self.sampled >= 2 else 1

    @functools.cached_property
    def p1_threshold(self) -> int:
        half = math.exp(self.epsilon_inf / self.bits_changed)
        return threshold_floor(half / (half + 1))

    @property
    def p1(self) -> float:
        return realised(self.p1_threshold)

    @property
    def q1(self) -> float:
        return realised(SCALE - self.p1_threshold)

    def _epsilon_at(self, threshold: int) -> float:
        p2 = realised(threshold)
        big, _ = chain(self.p1, self.q1, p2, realised(SCALE - threshold))
        return self.bits_changed * log_ratio(big, 1 - big)



class DBitFlip(MemoisedDevice, DeviceHalf):
    """dBitFlipPM's device half: the window, the memo index and one report in plain Python
    (its server half: sketches.dbitflip)."""

    name = "dbitflip"
    uses_cohorts = True

    @property
    def domain_size(self) -> int:
        return self.params.d

    @property
    def cohorts(self) -> int:
        return self.params.d

    @property
    def payload_bits(self) -> int:
        return self.params.sampled + max(1, math.ceil(math.log2(self.params.d)))

    @property
    def memo_key_space(self) -> int:
        return self.params.sampled + 1

    # --- privacy -----------------------------------------------------------------------------------
    @property
    def epsilon(self) -> float:
        return self.params.bits_changed * log_ratio(self.params.p, self.params.q)

    @property
    def epsilon_longitudinal(self) -> float:
        return self.params.bits_changed * log_ratio(self.params.p1, self.params.q1)

    def encoder_block(self) -> dict[str, Any]:
        par = self.params
        return {"d": par.d, "sampled": par.sampled, "p1_threshold": par.p1_threshold,
                "p2_threshold": par.p2_threshold}

    def variance(self, n: int, true_count: float) -> float:
        """Var[ĉ(v)] with the expected n_v = n·d/k (the server's array ``variance``, one count)."""
        f = float(true_count) / max(n, 1)
        n_v = n * self.params.sampled / self.params.d
        if not n_v > 0:
            return math.inf
        big, small = self.params.p, self.params.q
        delta = big - small
        noise = (f * big * (1 - big) + (1 - f) * small * (1 - small)) / (n_v * delta**2)
        sampling = f * (1 - f) * (n - n_v) / (n_v * max(n - 1, 1))
        return n * n * (noise + sampling)

    # --- one report --------------------------------------------------------------------------------

    def memo_index_in_cohort(self, index: int, cohort: int | None) -> int:
        """Position of the value in window ``cohort``, or d (none): all round 1 depends on."""
        if cohort is None or not 0 <= cohort < self.params.d:
            raise ValueError(f"cohorts must be integers in [0, {self.params.d}), one per value")
        pos = (index - cohort) % self.params.d
        return pos if pos < self.params.sampled else self.params.sampled

    def window_law(self) -> tuple[Any, ...] | None:
        """The window's memo bits, flipped: a change of value moves two (one if d = 1)."""
        par = self.params
        return ("bit", 2 if par.sampled > 1 else 1, par.p1, par.q1, par.p2, par.q2)


OPTION_KEYS: frozenset[str] = frozenset({"epsilon_inf", "sampled_buckets"})


def from_options(domain_size: int | None, epsilon: float | None, options: dict[str, Any]) -> DBitFlip:
    """Build from registry fields: ``epsilon`` (ε₁), ``epsilon_inf`` (ε∞), ``sampled_buckets`` (d, default 1)."""
    if domain_size is None:
        raise ValueError("dbitflip needs a fixed domain of buckets")
    unknown = set(options) - OPTION_KEYS
    if unknown:
        raise ValueError(f"unknown dbitflip option(s) {sorted(unknown)}; it takes epsilon_inf, sampled_buckets")
    eps_inf = check_epsilon_pair(epsilon, options.get("epsilon_inf"), "dbitflip")
    return DBitFlip(DBitFlipParams(d=domain_size, epsilon=float(epsilon), epsilon_inf=eps_inf,  # type: ignore[arg-type]
                                   sampled=options.get("sampled_buckets", 1)))


class DBitFlipBlock(MemoEncoder):
    """dBitFlipPM's one-report encoder from the block: the device's permanent window w (HMAC of the
    secret and metric), memo bits z_i = M32 < (i = pos ? p1 : 2^32 − p1) for i < sampled, then
    y_i = u_i < (z_i ? p2 : 2^32 − p2); the report is [w, Σ y_i 2^i]."""

    __slots__ = ("d", "sampled", "p1", "p2", "cohorts")
    name = "dbitflip"

    def __init__(self, block: Mapping[str, Any]) -> None:
        super().__init__()
        self.d: int = block["d"]
        self.sampled: int = block["sampled"]
        self.p1: int = block["p1_threshold"]
        self.p2: int = block["p2_threshold"]
        self.cohorts = PermanentCohorts(COHORT_SCOPE, self.d)

    def cohort(self, secret: bytes, metric: str) -> int:
        return self.cohorts.of(secret, metric)

    def memo_index(self, index: int, secret: bytes, metric: str) -> int:
        """The value's position in the device's window, or ``sampled`` when outside it."""
        pos = (index - self.cohorts.of(secret, metric)) % self.d
        return pos if pos < self.sampled else self.sampled

    def first_round(self, memo_input: int, memo: Any) -> list[bool]:
        t1 = self.p1
        t0 = SCALE - t1
        return [u < (t1 if i == memo_input else t0) for i, u in enumerate(memo.words(self.sampled))]

    def second_round(self, first: list[bool], source: Any) -> int:
        t2 = self.p2
        t0 = SCALE - t2
        y = 0
        for i, (b, u) in enumerate(zip(first, source.words(len(first)))):
            if u < (t2 if b else t0):
                y |= 1 << i
        return y

    def wire(self, second: int, cohort: int | None) -> list[int]:
        return [cohort, second]  # type: ignore[list-item]


def check_block(reader: BlockReader) -> None:
    """(7) a window of at most d buckets."""
    if reader.int("sampled") > reader.int("d"):
        reader.fail("sampled", "sampled (buckets a device reports) must be at most d")


BLOCK = BlockProtocol(DBitFlipBlock, check_block, memoised=True,
                      members=("d", "sampled", "p1_threshold", "p2_threshold"))
