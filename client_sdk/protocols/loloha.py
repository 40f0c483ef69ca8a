"""LOLOHA: local hashing, then L-GRR on the hash range (Arcolezi, Pinzón, Palamidessi, Gambs 2023).

The client hashes its value once, h = H_s(x) ∈ [g], with the OLH hash family of
client_sdk.protocols.olh, its cohort s fixed for life (derived from the client secret; a
uniform draw in simulation). Round 1 is GRR_{ε∞} on [g] of h, memoised per *hashed value*;
round 2 is a fresh GRR on [g] with the p₂ that makes one report cost exactly ε₁ (as L-GRR,
client_sdk.protocols.lgrr). Because the memo key is h, a device spends at most g·ε∞ over its
lifetime however often its value changes (L-GRR and L-OSUE spend ε∞ per distinct value).
BiLOLOHA is g = 2: at most 2ε∞ for life.

One report (s, y) is GRR on [g] with P(y = h) = P = p₁p₂ + (1−p₁)q₂ and P(y = b) =
(1−P)/(g−1) for b ≠ h: exactly an OLH report with p' = P. The sketch, the unbiased
least-squares decoder for the fixed seed set and its variance are OLH's.

Optimal g (Arcolezi et al. 2023), with α = ε₁/ε∞:
g = max(2, round((√(e^{4ε∞} − 14e^{2ε∞} − 12e^{2ε∞(α+1)} + 12e^{ε∞(α+1)} + 12e^{ε∞(α+3)} + 1)
            − e^{2ε∞} + 6e^{ε∞} − 6e^{αε∞} + 1) / (6(e^{ε∞} − e^{αε∞}))))
That formula assumes the published (looser) p₂; with our exact p₂ the optimum can be one
larger, so ``optimal_hash_range`` compares the formula's g with its neighbours
(tests/test_longitudinal_protocols.py checks the result against a full search).

The cohort is the one value-independent, permanent part of a report: log2(m) bits that are
the same in every report of the device (as RAPPOR's cohort; docs/privacy.md).

This module is LOLOHA's device half, over OLH's and L-GRR's (no numpy); its server half — both
rounds over a batch, the memo table and the permanent variance, over OLH's sketch, decoder and
wire — is sketches.loloha.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from .blocks import BlockProtocol, PermanentCohorts
from .lgrr import GRRChain, GRRChainBlock, GRRChainRoundsDevice, closed_form_p2
from .longitudinal import chain, check_epsilon_pair
from .olh import EAGER_CHECK_MAX_DOMAIN, MAX_DOMAIN, OLH, OLHParams, default_cohorts, hash_one

#: Largest g the optimal-g formula may return (beyond it the hash range stops paying off).
MAX_HASH_RANGE = 1 << 12


def formula_hash_range(epsilon: float, epsilon_inf: float) -> int:
    """The published optimal g at (ε₁, ε∞) (module docstring), at least 2."""
    ei, alpha = epsilon_inf, epsilon / epsilon_inf
    root = (math.exp(4 * ei) - 14 * math.exp(2 * ei) - 12 * math.exp(2 * ei * (alpha + 1))
            + 12 * math.exp(ei * (alpha + 1)) + 12 * math.exp(ei * (alpha + 3)) + 1)
    num = math.sqrt(max(root, 0.0)) - math.exp(2 * ei) + 6 * math.exp(ei) - 6 * math.exp(alpha * ei) + 1
    g = round(num / (6 * (math.exp(ei) - math.exp(alpha * ei))))
    return int(min(MAX_HASH_RANGE, max(2, g)))


def random_hash_variance(g: int, epsilon: float, epsilon_inf: float) -> float:
    """n·Var[f̂] at f = 0 of LOLOHA with a uniformly random hash and our exact p₂ (unquantised):
    q*(1−q*)/(P − q*)² with q* = 1/g (Arcolezi et al. 2023)."""
    p1 = math.exp(epsilon_inf) / (math.exp(epsilon_inf) + g - 1)
    q1 = (1 - p1) / (g - 1)
    p2 = closed_form_p2(epsilon, p1, q1, g)
    big = chain(p1, q1, p2, (1 - p2) / (g - 1))[0]
    return (1 / g) * (1 - 1 / g) / (big - 1 / g) ** 2


def optimal_hash_range(epsilon: float, epsilon_inf: float) -> int:
    """The variance-minimising g with our exact p₂: the published formula was derived with the
    looser published p₂ and can be one too small, so its neighbours are compared too."""
    g0 = formula_hash_range(epsilon, epsilon_inf)
    candidates = range(max(2, g0 - 1), min(MAX_HASH_RANGE, g0 + 2) + 1)
    return min(candidates, key=lambda g: (random_hash_variance(g, epsilon, epsilon_inf), g))


@dataclasses.dataclass(frozen=True)
class LOLOHAParams(GRRChain):
    d: int               # domain size
    epsilon: float       # ε₁: one report
    epsilon_inf: float   # ε∞: the memoised first round
    m: int               # cohorts (fixed seed set, as OLH)
    g: int               # hash range

    def __post_init__(self) -> None:
        check_epsilon_pair(self.epsilon, self.epsilon_inf, "loloha")
        OLHParams(d=self.d, epsilon=self.epsilon, m=self.m, g=self.g)  # OLH's shape checks
        self.check_grid()

    @property
    def chain_size(self) -> int:
        return self.g

    @property
    def approx_inflation(self) -> float:
        n_dof = self.m * (self.g - 1)
        return n_dof / (n_dof - self.d - 1) if n_dof > self.d + 1 else math.inf


#: derive_cohort scope of a LOLOHA metric's permanent cohort (prefix of the metric name).
COHORT_SCOPE = "loloha\x00"


class LOLOHA(GRRChainRoundsDevice, OLH):
    """LOLOHA's device half over OLH's (see the module docstring); its server half, over OLH's
    sketch, decoder and wire, is sketches.loloha."""

    name = "loloha"

    def encoder_block(self) -> dict[str, Any]:
        par = self.params
        return {"d": par.d, "m": par.m, "g": par.g, "p1_threshold": par.p1_threshold,
                "p2_threshold": par.p2_threshold}

    @property
    def memo_key_space(self) -> int:
        return self.params.g

    def cohort_hash(self, s: int, x: int) -> int:
        """H_s(x), the random family's (LOLOHA hashes as OLH's random family, never linear)."""
        return hash_one(s, x, self.params.g)

    def memo_index_in_cohort(self, index: int, cohort: int | None) -> int:
        if cohort is None or not 0 <= cohort < self.params.m:
            raise ValueError(f"cohorts must be integers in [0, {self.params.m}), one per value")
        return hash_one(int(cohort), index, self.params.g)


OPTION_KEYS: frozenset[str] = frozenset({"epsilon_inf", "hash_range", "cohorts"})


def from_options(domain_size: int | None, epsilon: float | None, options: dict[str, Any]) -> LOLOHA:
    """Build from registry fields: ``epsilon`` (ε₁), ``epsilon_inf`` (ε∞), optional ``hash_range``
    (g; default the optimum, 2 for BiLOLOHA) and ``cohorts`` (m; default as OLH)."""
    if domain_size is None:
        raise ValueError("loloha needs a fixed domain (a boolean or categorical metric)")
    if domain_size > MAX_DOMAIN:
        raise ValueError(f"loloha decodes as olh and supports at most {MAX_DOMAIN} domain values")
    unknown = set(options) - OPTION_KEYS
    if unknown:
        raise ValueError(f"unknown loloha option(s) {sorted(unknown)}; loloha takes "
                         f"{', '.join(sorted(OPTION_KEYS))}")
    eps_inf = check_epsilon_pair(epsilon, options.get("epsilon_inf"), "loloha")
    for key in ("cohorts", "hash_range"):
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{key} must be an integer, got {value!r}")
    g = options.get("hash_range") or optimal_hash_range(float(epsilon), eps_inf)  # type: ignore[arg-type]
    if g < 2:
        raise ValueError(f"hash_range must be at least 2, got {g}")
    m = options.get("cohorts") or default_cohorts(domain_size, g)
    proto = LOLOHA(LOLOHAParams(d=domain_size, epsilon=float(epsilon), epsilon_inf=eps_inf, m=m, g=g))  # type: ignore[arg-type]
    if options.get("cohorts") is not None or options.get("hash_range") is not None \
            or domain_size <= EAGER_CHECK_MAX_DOMAIN:
        proto.check_design()
    return proto


class LOLOHABlock(GRRChainBlock):
    """LOLOHA's one-report encoder from the block: the device's permanent cohort s (HMAC of the
    secret and metric), the two GRR rounds on [g] of the hashed value H_s(x); the report is [s, y]."""

    __slots__ = ("cohorts",)
    name = "loloha"

    def __init__(self, block: Mapping[str, Any]) -> None:
        super().__init__(block["g"], block)
        self.cohorts = PermanentCohorts(COHORT_SCOPE, block["m"])

    def cohort(self, secret: bytes, metric: str) -> int:
        return self.cohorts.of(secret, metric)

    def memo_index(self, index: int, secret: bytes, metric: str) -> int:
        """H_s(x): the memoised response depends on the hashed value alone."""
        return hash_one(self.cohorts.of(secret, metric), index, self.k)

    def wire(self, second: int, cohort: int | None) -> list[int]:
        return [cohort, second]  # type: ignore[list-item]


BLOCK = BlockProtocol(LOLOHABlock, memoised=True, members=("d", "m", "g", "p1_threshold", "p2_threshold"))
