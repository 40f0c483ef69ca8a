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
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .._lazy import np
from ..randomness import RandomLike, as_random_source
from .base import Payloads
from .lgrr import GRRChain, GRRChainRoundsDevice, closed_form_p2
from .longitudinal import Memoised, chain, check_epsilon_pair, grr_round
from .olh import (
    EAGER_CHECK_MAX_DOMAIN,
    MAX_DOMAIN,
    OLH,
    OLHParams,
    default_cohorts,
    hash_one,
    hash_values,
)

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


class GRRChainRounds(GRRChainRoundsDevice, Memoised):
    """Both halves of the two GRR rounds for LOLOHA until it is split: the device's rounds plus
    the vectorised ones (L-GRR's server half has them as sketches.lgrr.GRRChainServer)."""

    def first_round(self, memo_inputs: np.ndarray, source: Any) -> np.ndarray:
        return grr_round(memo_inputs, self.params.chain_size, self.params.p1_threshold, source)

    def second_round(self, first: np.ndarray, source: Any) -> np.ndarray:
        return grr_round(first, self.params.chain_size, self.params.p2_threshold, source)


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


class LOLOHA(GRRChainRounds, OLH):
    """LOLOHA over OLH's sketch, decoder and wire (see the module docstring)."""

    name = "loloha"

    def __init__(self, params: LOLOHAParams) -> None:
        super().__init__(params)
        self._init_memo()

    def memo_output_probabilities(self, index: int) -> np.ndarray:
        """P(round-1 response | x = index, cohort s), shape (m, g)."""
        m, g = self.params.m, self.params.g
        probs = np.full((m, g), self.params.q1)
        probs[np.arange(m), hash_values(self.seeds, np.full(m, index), g)] = self.params.p1
        return probs

    def permanent_variance(self, sketch: Any, estimate: Any) -> np.ndarray:
        """The cohort part plus the memoised part of the window's variance (at the plug-in ĉ).

        Two things repeat in every report of a device: its cohort s (which values share its
        hashed cell) and its memoised response r. A device of value u in cohort s adds
        B[v, (s, H_s(u))] to E[ĉ(v) | cohorts] (B the decoder, Z's scaling), and each device draws
        its cohort independently with P(s) = ρ_s = n_s/n, so the cohort part is exactly

            Var(E[ĉ(v) | cohorts]) = Σ_u c(u)·(Σ_s ρ_s B[v, (s, H_s(u))]² − 1[u = v])

        (Σ_s ρ_s B[v, (s, H_s(u))] = 1[u = v]: the decoder is unbiased); conditioning on the
        realised n_s only lowers it. (The former V − V_r, the sandwich less its randomisation
        part, folded in the sandwich's correction −n·f̂(1 − f̂) at a noisy plug-in, which for a value
        nobody holds is positive on average: its cohort part came out negative, and a LOLOHA
        7-day range flagged values nobody holds in 0.45 of runs.) The memoised part is
        V_m = λ²·E_s[Var(E[ĉ | r] | cohorts)] (round 2 keeps r w.p. λ = p₂ − q₂, else draws
        uniformly: E[a(y) | r] = λ·a(r) + const)."""
        n_s = np.asarray(sketch.reports, dtype=np.float64)
        B = self._decoder(n_s).B
        raw = np.nan_to_num(np.asarray(estimate.counts, dtype=np.float64))
        par, lam = self.params, self.second_round_keep
        _, row_of, _, _ = self._design
        rho = n_s / max(n_s.sum(), 1.0)
        weights = B[:, row_of]                                     # (d, m, d): B[v, (s, H_s(u))]
        # linear in c: the unbiased ĉ, not clipped, estimates it without bias (clipping would add
        # the positive part of every absent value's noise as phantom devices)
        cohort = np.einsum("s,vsu,u->v", rho, weights * weights, raw) - raw
        memo = lam * lam * self._cell_variance(B, raw, n_s, par.p1, par.q1)
        return np.maximum(cohort, 0.0) + memo

    def _cell_variance(self, B: np.ndarray, c: np.ndarray, n_s: np.ndarray, big: float, small: float
                       ) -> np.ndarray:
        """Σ_s n_s Σ_h m_s(h)·Var(a_s(y) | h) for y | h GRR on [g] (P(y = h) = ``big``, else
        ``small``): m_s(h) the share of the population whose value hashes to cell h in cohort s
        (at the clipped, normalised ĉ), a_s(y) = B[:, (s, y)]/(p' − q') the decoder's weight of
        output y. Empty cells have zero columns in B and drop out."""
        _, row_of, row_cohort, cohort_start = self._design
        m, d = self.params.m, self.params.d
        # linear in the shares, so the unbiased ĉ over the n reports, unclipped, estimates it without
        # bias; clipped and renormalised, the positive noise of the values nobody holds took ~70 % of
        # the mass at d = 300, n = 500 and held values' memoised variance came out ~0.7x (coverage 0.92)
        total = float(n_s.sum())
        shares = np.nan_to_num(c) / total if total > 0 else np.full(d, 1.0 / d)
        mass = np.bincount(row_of.ravel(), weights=np.broadcast_to(shares, (m, d)).ravel(),
                           minlength=B.shape[1])
        pi = small + (big - small) * mass                          # P(y) in the cell's cohort
        cells = n_s[row_cohort]
        second_moment = (B * B) @ (cells * pi)                     # Σ_s n_s Σ_y π_y a_y²
        a_sum = np.add.reduceat(B, cohort_start, axis=1)[:, row_cohort]   # A_s per cell's cohort
        cond_mean = small * a_sum + (big - small) * B              # E[a(y) | h] per cell h
        mean_square = (cond_mean * cond_mean) @ (cells * mass)     # Σ_s n_s Σ_h m(h) E[a|h]²
        return np.maximum(second_moment - mean_square, 0.0) / (self.p - self.q) ** 2

    def cohort_of(self, secret: bytes, metric: str) -> int:
        """This client's permanent cohort for ``metric`` (HMAC of the secret; cached in memory)."""
        return self.permanent_cohort(secret, metric, COHORT_SCOPE, self.params.m)

    def memo_index(self, index: int, secret: bytes, metric: str) -> int:
        """The hashed value H_s(x): the memoised response depends on nothing else."""
        return hash_one(self.cohort_of(secret, metric), index, self.params.g)

    @property
    def memo_key_space(self) -> int:
        return self.params.g

    def memo_indices(self, indices: np.ndarray, cohorts: np.ndarray | None = None) -> np.ndarray:
        """H_s(x) for a batch (simulation)."""
        if cohorts is None:
            raise ValueError("LOLOHA hashes under the client's cohort: pass cohorts")
        return hash_values(self.seeds[cohorts], indices, self.params.g)

    def batch_payloads(self, second: np.ndarray, cohorts: np.ndarray | None = None) -> Payloads:
        return {"cohort": np.asarray(cohorts, dtype=np.int64), "y": second}

    def sdk_cohorts(self, secret: bytes, metric: str) -> np.ndarray:
        return np.array([self.cohort_of(secret, metric)], dtype=np.int64)

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        """Both rounds with fresh coins (each row a new client); cohorts drawn if not given."""
        x = self.check_indices(indices)
        source = as_random_source(rng)
        s = source.below(self.params.m, x.shape[0]) if cohorts is None else self._check_cohorts(cohorts, x.shape)
        y = self.second_round(self.first_round(self.memo_indices(x, s), source), source)
        return {"cohort": s, "y": y}

    def memo_index_in_cohort(self, index: int, cohort: int | None) -> int:
        if cohort is None or not 0 <= cohort < self.params.m:
            raise ValueError(f"cohorts must be integers in [0, {self.params.m}), one per value")
        return hash_one(int(cohort), index, self.params.g)

    def sdk_cohort(self, secret: bytes, metric: str) -> int:
        return self.cohort_of(secret, metric)

    def wire_one(self, second: int, cohort: int | None) -> list[int]:
        return [int(cohort), second]  # type: ignore[arg-type]


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
