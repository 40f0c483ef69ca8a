"""General Hadamard response over a prime field F_g (docs/protocols.md, "Hadamard response").

Basic Hadamard response (Acharya, Sun & Zhang, AISTATS 2019) splits its outputs in halves, so
its per-item variance n((e^ε+1)/(e^ε−1))² tends to n, not to the optimum 4n e^ε/(e^ε−1)², as ε
grows. Here the same idea runs over F_g^t instead of F_2^t, with g a prime near e^ε+1 so that
each value owns a 1/g fraction of the outputs, the fraction that optimal local hashing uses
(Wang, Blocki, Li & Jha, USENIX Security 2017):

- The domain is embedded in F_g^t (t = ⌈log_g d⌉): value x is the vector of its base-g digits.
- The client draws a *direction* a uniformly among the m = (g^t−1)/(g−1) projective points of
  F_g^t (nonzero vectors whose leading nonzero digit is 1: one per line through 0), computes
  h = ⟨a, x⟩ mod g, and reports b = h with probability p (GRR on [g], p = e^ε/(e^ε+g−1)
  quantised down to the 2^-32 grid: p'), otherwise one of the other g−1 residues (q' each).
- Output y = (a, b), K = m·g outputs, sent as the integer y = s·g + b with s the index of a.

For g = 2 the sets C_x = {(a, ⟨a,x⟩)} are the sign pattern of the Sylvester–Hadamard matrix,
hence the name; for any prime g they form a symmetric design: |C_x| = m and, for x ≠ x',
|C_x ∩ C_x'| = #{a : ⟨a, x−x'⟩ = 0} = λ = (g^(t−1)−1)/(g−1), the points of a hyperplane
(Feldman, Nelson, Nguyen & Talwar, ICML 2022 use the same projective geometry). So the
protocol is *pure* (docs/math.md §2) with S(y) = {x : y ∈ C_x},

    p* = p',    q* = (λ p' + (m − λ) q')/m        (exactly, for every x' ≠ x)

and Q(y|x) = p'/m on C_x, q'/m off it, so ε = ln(p'/q'). As t grows q* → 1/g and the variance
n q*(1−q*)/(p*−q*)² is OLH's, within 1–2 % of the optimum at g ≈ e^ε+1 (docs/protocols.md).

Support counts for all x at once. With h[a, b] the output histogram and ω = e^{2πi/g},
1[b = ⟨a,x⟩] = (1/g) Σ_k ω^{k(⟨a,x⟩−b)}, so with Ĥ[a, k] = Σ_b h[a,b] ω^{−kb} (one length-g FFT
per direction) and F(u) = Σ_{(a,k): k·a = u} Ĥ[a, k] (every nonzero u is k·a for exactly one
projective a and k ≠ 0; F(0) = n),

    S(x) = Σ_a h[a, ⟨a,x⟩] = (1/g) Σ_{u ∈ F_g^t} F(u) ω^{⟨u,x⟩} = g^(t−1) · IDFT_{Z_g^t}(F)(x),

a t-dimensional DFT of size g^t: O(g^t log g^t) time and memory for the whole domain.

Payload: ``y``, an integer in [0, K). Wire: the int y.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from ..randomness import OS_WORDS, WordSource
from ._epsilon import log_up
from .blocks import BlockProtocol, BlockReader, IndexEncoder, check_keep
from .device import DeviceHalf, check_domain_and_epsilon, numpy_types, pure_variance_one
from .grr import GRROnRange
from .projective import (
    check_field,
    dimension,
    direction_code_one,
    directions,
    hyperplane,
    inner_one,
    is_prime,
    primes,
)

#: Largest output alphabet K = m·g (the sketch has K int64 counters: d = 10⁷ fits, 256 MiB).
MAX_CELLS = 1 << 25
#: Largest field size considered: g ≈ e^ε+1 stops mattering long before (e^ε ≈ 8,000).
MAX_FIELD = 8191
#: Default (g, t): the smallest sketch whose light-item variance is within this factor of the
#: best field's (docs/protocols.md, "Hadamard response").
FIELD_TIE = 1.02


@dataclasses.dataclass(frozen=True)
class HRParams(GRROnRange):
    d: int           # domain size
    epsilon: float   # target per-report budget
    g: int           # prime field size = hash range
    t: int           # dimension: values are t base-g digits

    def __post_init__(self) -> None:
        check_domain_and_epsilon(self.d, self.epsilon, "Hadamard response")
        for name in ("g", "t"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, *numpy_types("integer"))):
                raise ValueError(f"{name} must be an integer, got {value!r}")
        if not (is_prime(self.g) and self.g <= MAX_FIELD):
            raise ValueError(f"hash_range must be a prime in [2, {MAX_FIELD}], got {self.g}")
        if self.t != dimension(self.d, self.g):
            raise ValueError(f"t must be ⌈log_g d⌉ = {dimension(self.d, self.g)}, got {self.t}")
        if self.k > MAX_CELLS:
            raise ValueError(f"hash_range {self.g} needs {self.k} outputs for d = {self.d}, above "
                             f"{MAX_CELLS}; leave hash_range unset to get the default")
        if self.keep_threshold * self.g <= 1 << 32:  # realised p' <= q'
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-32 probability grid "
                             f"at hash_range = {self.g}")

    @property
    def m(self) -> int:
        """Directions: projective points of F_g^t, (g^t − 1)/(g − 1)."""
        return directions(self.g, self.t)

    @property
    def k(self) -> int:
        """K = m·g outputs."""
        return self.m * self.g

    @property
    def lam(self) -> int:
        """λ = (g^(t−1) − 1)/(g − 1): directions a with ⟨a, u⟩ = 0 for a fixed u ≠ 0."""
        return hyperplane(self.g, self.t)

    @property
    def q_star(self) -> float:
        """q* = (λ p' + (m − λ) q')/m: P(y ∈ C_x) when the true value is any x' ≠ x."""
        return (self.lam * self.p + (self.m - self.lam) * self.q) / self.m

    def light_variance(self) -> float:
        """n·Var[f̂(v)] at f(v) = 0: q*(1−q*)/(p*−q*)² (docs/math.md §2)."""
        qs = self.q_star
        return qs * (1 - qs) / (self.p - qs) ** 2


def default_params(d: int, epsilon: float, max_cells: int = MAX_CELLS) -> HRParams:
    """The field for (d, ε): among primes g (t = ⌈log_g d⌉, K <= ``max_cells``) the smallest sketch
    whose light-item variance is within FIELD_TIE of the best one (ValueError if none fits)."""
    check_domain_and_epsilon(d, epsilon, "Hadamard response")
    if d > max_cells:  # K >= g^t >= d for every field
        raise ValueError(f"{d:,} values need at least {d:,} sketch cells, above the limit of {max_cells:,}")
    limit = min(MAX_FIELD, 4 * int(math.exp(min(epsilon, 9.0))) + 8)
    found = []
    for g in primes(limit):
        try:
            params = HRParams(d=d, epsilon=epsilon, g=g, t=dimension(d, g))
        except ValueError:
            continue
        if params.k > max_cells:
            continue
        found.append((params.light_variance(), params.k, params))
        if g >= d:  # t = 1 from here on: GRR on [g], worse as g grows
            break
    if not found:
        raise ValueError(f"epsilon {epsilon} is too small for the 2^-32 probability grid, or no field's "
                         f"sketch for {d:,} values fits {max_cells:,} cells")
    best = min(v for v, _, _ in found)
    return min((f for f in found if f[0] <= FIELD_TIE * best), key=lambda f: (f[1], f[0]))[2]


class HR(DeviceHalf):
    """Hadamard response's device half (its server half: sketches.hr)."""

    name = "hr"

    def __init__(self, params: HRParams) -> None:
        super().__init__(params)
        self.g, self.t, self.m, self.k = params.g, params.t, params.m, params.k
        self.p, self.q = params.p, params.q_star          # p*, q* of the pure protocol
        self.q_prime = params.q                            # q': P(another residue) of the GRR step
        self.keep_threshold = params.keep_threshold

    @property
    def epsilon(self) -> float:
        # Q(y|x)/Q(y|x') is at most (p'/m)/(q'/m).
        return log_up(Fraction(self.params.p) / Fraction(self.q_prime))

    @property
    def payload_bits(self) -> int:
        return max(1, math.ceil(math.log2(self.k)))

    def encoder_block(self) -> dict[str, Any]:
        par = self.params
        return {"d": par.d, "g": par.g, "t": par.t, "m": par.m, "keep_threshold": par.keep_threshold}

    def variance(self, n: int, true_count: float) -> float:
        return pure_variance_one(n, true_count, self.p, self.q)


OPTION_KEYS: frozenset[str] = frozenset({"hash_range"})


def from_options(domain_size: int | None, epsilon: float | None, options: dict[str, Any]) -> HR:
    """Build from registry fields: optional ``hash_range`` (the prime g; default: ``default_params``)."""
    if domain_size is None:
        raise ValueError("hr needs a fixed domain (a boolean or categorical metric)")
    if epsilon is None:
        raise ValueError("hr needs epsilon")
    unknown = set(options) - OPTION_KEYS
    if unknown:
        raise ValueError(f"unknown hr option(s) {sorted(unknown)}; hr takes hash_range")
    g = options.get("hash_range")
    if g is None:
        return HR(default_params(domain_size, float(epsilon)))
    if isinstance(g, bool) or not isinstance(g, int):
        raise ValueError(f"hash_range must be an integer, got {g!r}")
    if not is_prime(g):
        raise ValueError(f"hash_range must be a prime (the field size), got {g}")
    return HR(HRParams(d=domain_size, epsilon=float(epsilon), g=g, t=dimension(domain_size, g)))


class HRBlock(IndexEncoder):
    """Hadamard response's one-report encoder from the block: s = BELOW(m), b = ⟨a_s, x⟩ mod g, then
    GRR on [g] of b; the report is s·g + the residue."""

    __slots__ = ("g", "t", "m", "keep")

    def __init__(self, block: Mapping[str, Any]) -> None:
        self.g: int = block["g"]
        self.t: int = block["t"]
        self.m: int = block["m"]
        self.keep: int = block["keep_threshold"]

    def randomise(self, index: int, source: WordSource = OS_WORDS) -> int:
        """One report of the looked-up index."""
        g = self.g
        s = source.below(self.m)
        h = inner_one(direction_code_one(s, g, self.t), index, g)
        if source.word() < self.keep:
            return s * g + h
        other = source.below(g - 1)
        return s * g + other + (other >= h)


def check_block(reader: BlockReader) -> None:
    """(3) the keep threshold on [g], (4) the projective field."""
    check_keep(reader.block.get("g"), reader)
    check_field(reader)


BLOCK = BlockProtocol(HRBlock, check_block, members=("d", "g", "t", "m", "keep_threshold"))
