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
import functools
import math
from typing import Any

import numpy as np

from ..errors import InvalidPayload
from ..randomness import RandomLike, as_random_source, bernoulli, realised, secure_below, secure_word
from .base import (
    CountEstimate,
    Payloads,
    PureProtocol,
    Sketch,
    check_domain_and_epsilon,
    first_bad,
    integers_from_wire,
    pure_estimate,
    pure_variance,
    require_1d,
)
from .grr import keep_threshold as grr_keep_threshold

#: When p*+q* > 1 (g = 2), Var[ĉ] = n q*(1−q*)/(p*−q*)² − c·(p*+q*−1)/(p*−q*) *decreases* in c,
#: so the usual plug-in at ĉ narrows the interval exactly when ĉ overshoots. The plug-in is then
#: taken at ĉ − 3·sd₀ (sd₀ = √Var at c=0), clipped to [0, n] (it restored 95 % Bonferroni coverage
#: for basic HR at d=64, ε=2, n=2000); for g > 2 the usual plug-in is conservative already.
VARIANCE_SHIFT_SD = 3.0
#: Largest output alphabet K = m·g (the sketch has K counters: 32 MiB of int64).
MAX_CELLS = 1 << 22
#: Largest field size considered: g ≈ e^ε+1 stops mattering long before (e^ε ≈ 8,000).
MAX_FIELD = 8191
#: Default (g, t): the smallest sketch whose light-item variance is within this factor of the
#: best field's (docs/protocols.md, "Hadamard response").
FIELD_TIE = 1.02


@functools.lru_cache(maxsize=None)
def _primes(limit: int) -> tuple[int, ...]:
    """Primes up to ``limit`` (sieve of Eratosthenes)."""
    sieve = np.ones(limit + 1, dtype=bool)
    sieve[:2] = False
    for i in range(2, math.isqrt(limit) + 1):
        if sieve[i]:
            sieve[i * i::i] = False
    return tuple(int(p) for p in np.flatnonzero(sieve))


def is_prime(g: int) -> bool:
    return g >= 2 and all(g % p for p in range(2, math.isqrt(g) + 1))


def dimension(d: int, g: int) -> int:
    """t = ⌈log_g d⌉ (at least 1): the fewest base-g digits that index d values."""
    t, size = 1, g
    while size < d:
        t, size = t + 1, size * g
    return t


@dataclasses.dataclass(frozen=True)
class HRParams:
    d: int           # domain size
    epsilon: float   # target per-report budget
    g: int           # prime field size = hash range
    t: int           # dimension: values are t base-g digits

    def __post_init__(self) -> None:
        check_domain_and_epsilon(self.d, self.epsilon, "Hadamard response")
        for name in ("g", "t"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
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
        return (self.g ** self.t - 1) // (self.g - 1)

    @property
    def k(self) -> int:
        """K = m·g outputs."""
        return self.m * self.g

    @property
    def lam(self) -> int:
        """λ = (g^(t−1) − 1)/(g − 1): directions a with ⟨a, u⟩ = 0 for a fixed u ≠ 0."""
        return (self.g ** (self.t - 1) - 1) // (self.g - 1)

    @property
    def keep_threshold(self) -> int:
        return grr_keep_threshold(self.epsilon, self.g)

    @property
    def p(self) -> float:
        """Realised p' = P(b = ⟨a, x⟩)."""
        return realised(self.keep_threshold)

    @property
    def q(self) -> float:
        """Realised q' = P(b = r) for each residue r ≠ ⟨a, x⟩."""
        return (1.0 - self.p) / (self.g - 1)

    @property
    def q_star(self) -> float:
        """q* = (λ p' + (m − λ) q')/m: P(y ∈ C_x) when the true value is any x' ≠ x."""
        return (self.lam * self.p + (self.m - self.lam) * self.q) / self.m

    def light_variance(self) -> float:
        """n·Var[f̂(v)] at f(v) = 0: q*(1−q*)/(p*−q*)² (docs/math.md §2)."""
        qs = self.q_star
        return qs * (1 - qs) / (self.p - qs) ** 2


def default_params(d: int, epsilon: float) -> HRParams:
    """The field for (d, ε): among primes g (t = ⌈log_g d⌉, K <= MAX_CELLS) the smallest sketch
    whose light-item variance is within FIELD_TIE of the best one (ValueError if none fits)."""
    check_domain_and_epsilon(d, epsilon, "Hadamard response")
    limit = min(MAX_FIELD, 4 * int(math.exp(min(epsilon, 9.0))) + 8)
    found = []
    for g in _primes(limit):
        try:
            params = HRParams(d=d, epsilon=epsilon, g=g, t=dimension(d, g))
        except ValueError:
            continue
        found.append((params.light_variance(), params.k, params))
        if g >= d:  # t = 1 from here on: GRR on [g], worse as g grows
            break
    if not found:
        raise ValueError(f"epsilon {epsilon} is too small for the 2^-32 probability grid")
    best = min(v for v, _, _ in found)
    return min((f for f in found if f[0] <= FIELD_TIE * best), key=lambda f: (f[1], f[0]))[2]


def direction_codes(s: np.ndarray, g: int, t: int) -> np.ndarray:
    """Integer code Σ_i a_i g^i of the s-th projective point: the s-th integer whose leading
    base-g digit is 1, i.e. g^j + (s − (g^j−1)/(g−1)) for the j with s in that block."""
    starts = np.array([(g ** j - 1) // (g - 1) for j in range(t)], dtype=np.int64)
    j = np.searchsorted(starts, s, side="right") - 1
    powers = np.array([g ** j for j in range(t)], dtype=np.int64)
    return powers[j] + (s - starts[j])


def inner(u: np.ndarray, x: np.ndarray, g: int, t: int) -> np.ndarray:
    """⟨u, x⟩ mod g of the base-g digit vectors of u and x (int64 arrays)."""
    if g == 2:
        v = u & x
        count = getattr(np, "bitwise_count", None)
        if count is not None:
            return (count(v) & 1).astype(np.int64)
        acc = np.zeros_like(v)
        for _ in range(t):
            acc ^= v & 1
            v = v >> 1
        return acc
    acc = np.zeros(np.broadcast(u, x).shape, dtype=np.int64)
    for _ in range(t):
        acc += (u % g) * (x % g)
        u, x = u // g, x // g
    return acc % g


def _inner_one(u: int, x: int, g: int) -> int:
    acc = 0
    while u and x:
        acc += (u % g) * (x % g)
        u, x = u // g, x // g
    return acc % g


class HR(PureProtocol):
    name = "hr"

    def __init__(self, params: HRParams) -> None:
        super().__init__(params)
        self.g, self.t, self.m, self.k = params.g, params.t, params.m, params.k
        self.p, self.q = params.p, params.q_star          # p*, q* of the pure protocol
        self._q_prime = params.q
        self._threshold = params.keep_threshold
        self._starts = [(self.g ** j - 1) // (self.g - 1) for j in range(self.t)]

    @property
    def cell_shape(self) -> tuple[int, ...]:
        return (self.k,)

    @property
    def epsilon(self) -> float:
        # Q(y|x)/Q(y|x') is at most (p'/m)/(q'/m).
        return math.log(self.params.p / self._q_prime)

    @property
    def payload_bits(self) -> int:
        return max(1, math.ceil(math.log2(self.k)))

    def output_probabilities(self, index: int) -> np.ndarray:
        """Q(y | x) over y = s·g + b: p'/m where b = ⟨a_s, x⟩, q'/m elsewhere."""
        s = np.arange(self.m, dtype=np.int64)
        h = inner(direction_codes(s, self.g, self.t), np.int64(index), self.g, self.t)
        probs = np.full((self.m, self.g), self._q_prime / self.m)
        probs[s, h] = self.params.p / self.m
        return probs.ravel()

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        x = self.check_indices(indices)
        source = as_random_source(rng)
        n, g = x.shape[0], self.g
        s = source.below(self.m, n)                                 # direction, fresh per report
        h = inner(direction_codes(s, g, self.t), x, g, self.t)      # ⟨a, x⟩: true residue
        keep = bernoulli(source, self._threshold, n)
        other = source.below(g - 1, n)
        other += other >= h                                         # uniform over residues != h
        return {"y": s * g + np.where(keep, h, other)}

    def encode_one(self, index: int, cohort: int | None = None) -> int:
        """One report in Python integers: the same draws as ``encode``."""
        x = self._check_index(index)
        g = self.g
        s = secure_below(self.m)
        j = self.t - 1
        while self._starts[j] > s:
            j -= 1
        h = _inner_one(g ** j + s - self._starts[j], x, g)
        if secure_word() < self._threshold:
            return s * g + h
        other = secure_below(g - 1)
        return s * g + other + (other >= h)

    def validate(self, payloads: Payloads) -> None:
        y = require_1d(payloads, "y")
        if y.ndim != 1 or (y.size and y.dtype.kind not in "iu"):
            raise InvalidPayload("HR report must be an integer", field="y")
        bad = (y < 0) | (y >= self.k)
        if bad.any():
            i = first_bad(bad)
            raise InvalidPayload(f"value {int(y[i])} outside [0, {self.k})", index=i, field="y")

    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        y = np.asarray(payloads["y"], dtype=np.int64)
        if 8 * y.shape[0] >= self.k:
            sketch.counts[0] += np.bincount(y, minlength=self.k)
        else:  # a small batch into a large sketch: no K-sized temporary
            np.add.at(sketch.counts[0], y, 1)
        sketch.reports[0] += y.shape[0]

    def support_counts(self, sketch: Sketch) -> np.ndarray:
        """S(x) = Σ_a h[a, ⟨a,x⟩] for every x by one DFT over Z_g^t (module docstring)."""
        g, t, m = self.g, self.t, self.m
        h = sketch.counts.sum(axis=0).reshape(m, g).astype(np.float64)
        hat = np.fft.fft(h, axis=1)                                 # Ĥ[a, k]
        f = np.zeros(g ** t, dtype=np.complex128)
        f[0] = hat[:, 0].real.sum()
        codes = direction_codes(np.arange(m, dtype=np.int64), g, t)
        digits = [(codes // g ** i) % g for i in range(t)]
        for k in range(1, g):                                       # u = k·a, digit-wise mod g
            u = np.zeros(m, dtype=np.int64)
            for i, digit in enumerate(digits):
                u += (k * digit % g) * g ** i
            f[u] = hat[:, k]
        del hat
        # numpy's C-order reshape puts digit t−1−j on axis j, for F and for x alike.
        full = np.fft.ifftn(f.reshape((g,) * t)).real.ravel()[:self.params.d]
        return np.rint(full * float(g ** (t - 1)))

    def estimate(self, sketch: Sketch) -> CountEstimate:
        """Pure estimator; when p*+q* > 1 the variance is plugged in at ĉ − 3·sd₀."""
        n = sketch.total_reports
        counts, variances = pure_estimate(self.support_counts(sketch), n, self.p, self.q)
        if self.p + self.q > 1:
            sd0 = math.sqrt(float(pure_variance(n, 0.0, self.p, self.q)))
            variances = pure_variance(n, np.clip(counts - VARIANCE_SHIFT_SD * sd0, 0, n), self.p, self.q)
        return CountEstimate(counts, variances, n, {"hash_range": self.g, "dimension": self.t})

    def to_wire(self, payloads: Payloads) -> list[Any]:
        return np.asarray(payloads["y"], dtype=np.int64).tolist()

    def from_wire(self, objects: list[Any]) -> Payloads:
        return {"y": integers_from_wire(objects, self.k, "y")}


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
