"""Hadamard response, Acharya, Sun & Zhang, AISTATS 2019 (docs/math.md §6).

K = 2^⌈log₂(d+1)⌉ outputs; value x owns the half C_x = {y : H_K[x+1, y] = +1} of them, with
the Sylvester matrix H[a, b] = (−1)^popcount(a & b) (row 0, all ones, is skipped). Then
|C_x| = K/2 and |C_x ∩ C_x'| = K/4 for x ≠ x', and

    Q(y | x) = 2e^ε/(K(e^ε+1)) on C_x,   2/(K(e^ε+1)) off C_x.

Sampling is exact and loop-free: y ∈ C_x with probability π = e^ε/(e^ε+1) (quantised down,
by rounding 1−π up), then y uniform on the chosen half. For the latter draw y uniform on
[0, K) and, if it lies in the wrong half, replace it by y ⊕ z with z the lowest set bit of
x+1: flipping a bit of x+1 flips the parity of popcount((x+1) & y), so y ↦ y ⊕ z is a
bijection between C_x and its complement and the result is uniform on the chosen half.

Realised ε = ln(π'/(1−π')). Pure with S(y) = {x : y ∈ C_x}: p* = π', and q* = ½ exactly
(x' ≠ x puts y in C_x' ∩ C_x for half of either half). Support counts for all x at once come
from one fast Walsh–Hadamard transform of the output histogram h (O(K log K)):
Σ_{y∈C_x} h[y] = (n + (H h)[x+1])/2. Var* = n/(4(π'−½)²) = n((e^ε+1)/(e^ε−1))², and the
pure variance's c-term is c(1−p*−q*)/(p*−q*) = −c (docs/math.md §2), which is why the
estimate's plug-in variance is taken at a conservative ĉ (``VARIANCE_SHIFT_SD``).

Payload: ``y``, an integer in [0, K). Wire: the int y.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ..errors import InvalidPayload
from ..randomness import (
    SCALE,
    RandomLike,
    as_random_source,
    bernoulli,
    realised,
    secure_below,
    secure_word,
    threshold_ceil,
)
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

#: HR's Var[ĉ] = n/(4(π'−½)²) − c *decreases* in c (p*+q* > 1), so the usual plug-in at ĉ
#: narrows the interval exactly when ĉ overshoots: Bonferroni intervals covered 94.3 % at
#: d=64, ε=2, n=2000 (R=20000, SE 0.16 %). Plugging in at ĉ − 3·sd₀ (sd₀ = √Var at c=0),
#: clipped to [0, n], restores 95.3 % for at most 3·sd₀ of extra variance (a few % of width).
VARIANCE_SHIFT_SD = 3.0


@dataclasses.dataclass(frozen=True)
class HRParams:
    d: int           # domain size
    epsilon: float   # target per-report budget

    def __post_init__(self) -> None:
        check_domain_and_epsilon(self.d, self.epsilon, "Hadamard response")
        if self.inside_threshold <= SCALE // 2:
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-32 probability grid")

    @property
    def k(self) -> int:
        """K = 2^⌈log₂(d+1)⌉: the smallest power of two with rows 1..d below it."""
        return 1 << self.d.bit_length()

    @property
    def inside_threshold(self) -> int:
        """π = e^ε/(e^ε+1) = P(y ∈ C_x), rounded down via 1−π = 1/(e^ε+1) rounded up."""
        return SCALE - threshold_ceil(1.0 / (math.exp(self.epsilon) + 1.0))

    @property
    def pi(self) -> float:
        """Realised π' = P(y ∈ C_x)."""
        return realised(self.inside_threshold)


def parity(v: np.ndarray) -> np.ndarray:
    """Boolean: popcount(v) is odd, for non-negative int64 (numpy >= 2 counts bits; else xor-folding)."""
    if _bitwise_count is not None:
        return (_bitwise_count(v) & 1).astype(bool)
    v = v ^ (v >> 32)
    v ^= v >> 16
    v ^= v >> 8
    v ^= v >> 4
    v ^= v >> 2
    v ^= v >> 1
    return (v & 1).astype(bool)


_bitwise_count = getattr(np, "bitwise_count", None)


def fwht(h: np.ndarray) -> np.ndarray:
    """Walsh–Hadamard transform W[a] = Σ_b (−1)^popcount(a&b) h[b], len(h) a power of two.

    log₂K butterfly stages, each vectorised over all pairs: (u, v) -> (u+v, u−v) for pairs
    whose indices differ in one bit. Exact in int64.
    """
    k = h.shape[0]
    w = np.array(h, dtype=np.int64)
    half = 1
    while half < k:
        blocks = w.reshape(-1, 2, half)  # [:, 0] has the bit clear, [:, 1] has it set
        u, v = blocks[:, 0, :].copy(), blocks[:, 1, :]
        blocks[:, 0, :] += v
        np.subtract(u, v, out=blocks[:, 1, :])
        half *= 2
    return w


class HR(PureProtocol):
    name = "hr"

    def __init__(self, params: HRParams) -> None:
        super().__init__(params)
        self.k = params.k
        self.pi = params.pi
        self.p, self.q = params.pi, 0.5  # p* = π', q* = ½
        self._threshold = params.inside_threshold

    @property
    def cell_shape(self) -> tuple[int, ...]:
        return (self.k,)

    @property
    def epsilon(self) -> float:
        # Q(y|x)/Q(y|x') is at most [π'/(K/2)] / [(1−π')/(K/2)]; 1−π' is exact.
        return math.log(self.pi / (1.0 - self.pi))

    @property
    def payload_bits(self) -> int:
        return self.k.bit_length() - 1  # log₂ K

    def output_probabilities(self, index: int) -> np.ndarray:
        y = np.arange(self.k, dtype=np.int64)
        inside = ~parity((index + 1) & y)
        return np.where(inside, self.pi, 1.0 - self.pi) / (self.k // 2)

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        x = self.check_indices(indices)
        source = as_random_source(rng)
        n = x.shape[0]
        inside = bernoulli(source, self._threshold, n)   # want y ∈ C_x ?
        y = source.below(self.k, n)                       # uniform on [0, K)
        row = x + 1
        wrong = parity(row & y) == inside                 # y ∈ C_x iff popcount((x+1)&y) even
        y ^= (row & -row) * wrong                         # z = lowest set bit of x+1
        return {"y": y}

    def encode_one(self, index: int, cohort: int | None = None) -> int:
        """HR for one value in Python integers: the same draws and XOR fix-up as ``encode``."""
        x = self._check_index(index)
        inside = secure_word() < self._threshold
        y = secure_below(self.k)
        row = x + 1
        if (bin(row & y).count("1") & 1) == inside:     # y on the wrong side of C_x
            y ^= row & -row
        return y

    def validate(self, payloads: Payloads) -> None:
        y = require_1d(payloads, "y")
        if y.ndim != 1 or y.dtype.kind not in "iu":
            raise InvalidPayload("HR report must be an integer", field="y")
        bad = (y < 0) | (y >= self.k)
        if bad.any():
            i = first_bad(bad)
            raise InvalidPayload(f"value {int(y[i])} outside [0, {self.k})", index=i, field="y")

    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        y = np.asarray(payloads["y"], dtype=np.int64)
        sketch.counts[0] += np.bincount(y, minlength=self.k)
        sketch.reports[0] += y.shape[0]

    def support_counts(self, sketch: Sketch) -> np.ndarray:
        """Σ_{y∈C_x} h[y] for every x: (n + W[x+1])/2 with W the Walsh–Hadamard transform."""
        h = sketch.counts.sum(axis=0)
        return (sketch.total_reports + fwht(h)[1:self.params.d + 1]) // 2

    def estimate(self, sketch: Sketch) -> CountEstimate:
        """Pure estimator; the variance is plugged in at ĉ − 3·sd₀ (see ``VARIANCE_SHIFT_SD``)."""
        n = sketch.total_reports
        counts, _ = pure_estimate(self.support_counts(sketch), n, self.p, self.q)
        sd0 = math.sqrt(float(pure_variance(n, 0.0, self.p, self.q)))
        variances = pure_variance(n, np.clip(counts - VARIANCE_SHIFT_SD * sd0, 0, n), self.p, self.q)
        return CountEstimate(counts, variances, n)


    def to_wire(self, payloads: Payloads) -> list[Any]:
        return np.asarray(payloads["y"], dtype=np.int64).tolist()

    def from_wire(self, objects: list[Any]) -> Payloads:
        return {"y": integers_from_wire(objects, self.k, "y")}


OPTION_KEYS: frozenset[str] = frozenset()


def from_options(domain_size: int, epsilon: float, options: dict[str, Any]) -> HR:
    """Build from registry fields (HR takes no extra options)."""
    return HR(HRParams(d=domain_size, epsilon=epsilon))
