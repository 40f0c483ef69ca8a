"""Subset selection, Ye & Barg 2018 / S. Wang et al. 2016 (ldp-facts.md §6).

Each report is a set S of s = max(1, ⌈d/(e^ε+1)⌉) distinct domain values with
Q(S | x) ∝ e^ε if x ∈ S and ∝ 1 otherwise. We sample it in two exact steps:

1. include x with probability π = s·e^ε/(s·e^ε + d − s) (the total mass of the subsets that
   contain x), quantised down by rounding 1−π up;
2. fill the remaining s−1 (or all s) places with a uniform subset of the d−1 values ≠ x.

So Q(S|x) = π'/C(d−1, s−1) for x ∈ S and (1−π')/C(d−1, s) for x ∉ S, and the realised
ε = ln(π'(d−s) / ((1−π')s)) ≤ target. Pure with S(y) = y:
p* = π', q* = π'(s−1)/(d−1) + (1−π')s/(d−1) (ldp-facts.md §6), sketch = d support counters.

Step 2 is Floyd's algorithm run across the whole batch at once: for j = N−k, …, N−1 (N = d−1
values ≠ x, k places) draw t uniform in [0, j] and add t, or j if t is already taken; that
gives a uniform k-subset. The draws are independent of the set, so all are made up front,
and the loop runs over the s positions, never over reports. Membership is a per-report
bitmap over the domain, which also yields each subset already sorted.

Payload: ``subset``, shape (n, s) uint32, each row strictly increasing. Wire: one ``bytes``
object per report holding the s sorted indices as little-endian uint16 when d <= 65536,
else little-endian uint32 (2s or 4s bytes). ``payload_bits`` is s·⌈log₂ d⌉, the bits of a
packed index list.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import numpy as np

from ..errors import InvalidPayload
from ..randomness import SCALE, RandomLike, as_random_source, bernoulli, realised, threshold_ceil
from .base import CountEstimate, Payloads, Protocol, Sketch, first_bad, pure_estimate, pure_variance, require_1d

#: Bitmap cells per encode block (bool bytes): bounds memory and keeps the bitmap in cache.
BLOCK_CELLS = 1 << 19
#: output_probabilities enumerates all C(d, s) subsets; refuse beyond this many.
MAX_ENUMERATED_SUBSETS = 1 << 20
#: Largest d whose indices travel as uint16 on the wire.
UINT16_MAX_D = 1 << 16


@dataclasses.dataclass(frozen=True)
class SSParams:
    d: int           # domain size
    epsilon: float   # target per-report budget

    def __post_init__(self) -> None:
        if self.d < 2:
            raise ValueError("subset selection needs a domain of at least 2 values")
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ValueError("epsilon must be a positive finite number")
        t = self.include_threshold
        if not (0 < SCALE - t and t * (self.d - self.s) > (SCALE - t) * self.s):
            raise ValueError(f"epsilon {self.epsilon} is too small for the 2^-32 probability grid")

    @property
    def s(self) -> int:
        """Subset size s = max(1, ⌈d/(e^ε+1)⌉)."""
        return max(1, math.ceil(self.d / (math.exp(self.epsilon) + 1.0)))

    @property
    def include_threshold(self) -> int:
        """π = s·e^ε/(s·e^ε+d−s) rounded down, via 1−π = (d−s)/(s·e^ε+d−s) rounded up."""
        s, e = self.s, math.exp(self.epsilon)
        return SCALE - threshold_ceil((self.d - s) / (s * e + self.d - s))

    @property
    def pi(self) -> float:
        """Realised π' = P(x ∈ S)."""
        return realised(self.include_threshold)

    @property
    def p_star(self) -> float:
        return self.pi

    @property
    def q_star(self) -> float:
        """P(v ∈ S | x ≠ v) = π'(s−1)/(d−1) + (1−π')s/(d−1)."""
        s, d, pi = self.s, self.d, self.pi
        return (pi * (s - 1) + (1.0 - pi) * s) / (d - 1)


class SS(Protocol):
    name = "ss"

    def __init__(self, params: SSParams) -> None:
        super().__init__(params)
        self.s, self.pi = params.s, params.pi
        self.p, self.q = params.p_star, params.q_star
        self._threshold = params.include_threshold
        self._wire_dtype = np.dtype("<u2") if params.d <= UINT16_MAX_D else np.dtype("<u4")

    @property
    def domain_size(self) -> int:
        return self.params.d

    @property
    def cell_shape(self) -> tuple[int, ...]:
        return (self.params.d,)

    @property
    def epsilon(self) -> float:
        # Q(S|x∈S)/Q(S|x∉S) = [π'/C(d−1,s−1)] / [(1−π')/C(d−1,s)] = π'(d−s)/((1−π')s).
        return math.log(self.pi * (self.params.d - self.s) / ((1.0 - self.pi) * self.s))

    @property
    def payload_bits(self) -> int:
        return self.s * max(1, math.ceil(math.log2(self.params.d)))

    def output_probabilities(self, index: int) -> np.ndarray:
        """Q(S | x) over all C(d, s) subsets in ``itertools.combinations(range(d), s)`` order."""
        d, s = self.params.d, self.s
        if math.comb(d, s) > MAX_ENUMERATED_SUBSETS:
            raise ValueError(f"refusing to enumerate C({d}, {s}) subsets")
        subsets = np.array(list(itertools.combinations(range(d), s)), dtype=np.int64).reshape(-1, s)
        contains = (subsets == index).any(axis=1)
        return np.where(contains, self.pi / math.comb(d - 1, s - 1), (1.0 - self.pi) / math.comb(d - 1, s))

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        x = self.check_indices(indices)
        source = as_random_source(rng)
        n, d, s = x.shape[0], self.params.d, self.s
        highs = np.arange(d - s, d, dtype=np.int64)  # position i draws t_i ~ U[0, j_i], j_i = d−1−s+i
        if n == 1:
            include = bool(bernoulli(source, self._threshold, 1)[0])
            subset = self._floyd_one(int(x[0]), include, source.below(highs, s).tolist())[None, :]
        else:
            subset = np.empty((n, s), dtype=np.uint32)
            block = max(1, BLOCK_CELLS // d)
            for start in range(0, n, block):  # loop over blocks of reports, vectorised inside
                xs = x[start:start + block]
                m = xs.shape[0]
                include = bernoulli(source, self._threshold, m)
                subset[start:start + m] = self._floyd_block(xs, include, source.below(highs, (m, s)))
        return {"subset": subset}

    def _floyd_block(self, x: np.ndarray, include: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """Batch-wide Floyd: one vectorised step per position; returns sorted (m, s) subsets."""
        m, d, s = x.shape[0], self.params.d, self.s
        taken = np.zeros(m * d, dtype=bool)  # row r's bitmap is taken[r·d : (r+1)·d]
        base = np.arange(m, dtype=np.int64) * d
        # Position 0 (j = d−1−s), only for rows without x: the set is empty, so t is new.
        t0 = draws[:, 0]
        taken[(base + t0 + (t0 >= x))[~include]] = True  # "value ≠ x" rank t -> domain value
        for i in range(1, s):
            j = d - 1 - s + i
            t = draws[:, i]
            t = base + t + (t >= x)
            taken[np.where(taken[t], base + (j + (j >= x)), t)] = True
        taken[(base + x)[include]] = True
        return (np.flatnonzero(taken) - np.repeat(base, s)).astype(np.uint32).reshape(m, s)

    def _floyd_one(self, x: int, include: bool, draws: list[int]) -> np.ndarray:
        """The same algorithm for the SDK's single report, on Python ints (no numpy per step)."""
        s = self.s
        chosen: set[int] = {x} if include else set()
        for i in range(0 if not include else 1, s):
            j = self.params.d - 1 - s + i
            t = draws[i]
            t += t >= x
            chosen.add(j + (j >= x) if t in chosen else t)
        return np.array(sorted(chosen), dtype=np.uint32)

    def validate(self, payloads: Payloads) -> None:
        sub = require_1d(payloads, "subset")
        s = self.s
        if sub.ndim != 2 or sub.shape[1] != s or sub.dtype.kind not in "iu":
            raise InvalidPayload(f"subset reports must be integer rows of {s} indices, got "
                                 f"{sub.dtype} of shape {sub.shape}", field="subset")
        bad = ((sub < 0) | (sub >= self.params.d)).any(axis=1)
        if bad.any():
            i = first_bad(bad)
            raise InvalidPayload(f"index outside [0, {self.params.d}) in {sub[i].tolist()}", index=i, field="subset")
        if s > 1:
            bad = (np.diff(sub.astype(np.int64), axis=1) <= 0).any(axis=1)
            if bad.any():
                i = first_bad(bad)
                raise InvalidPayload(f"indices must be distinct and strictly increasing, got {sub[i].tolist()}",
                                     index=i, field="subset")

    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        sub = np.asarray(payloads["subset"])
        sketch.counts[0] += np.bincount(sub.reshape(-1).astype(np.int64), minlength=self.params.d)
        sketch.reports[0] += sub.shape[0]

    def estimate(self, sketch: Sketch) -> CountEstimate:
        n = sketch.total_reports
        counts, variances = pure_estimate(sketch.counts[0], n, self.p, self.q)
        return CountEstimate(counts, variances, n)

    def variance(self, n: int, true_counts: np.ndarray | float) -> np.ndarray:
        return pure_variance(n, true_counts, self.p, self.q)

    def to_wire(self, payloads: Payloads) -> list[Any]:
        raw = np.ascontiguousarray(payloads["subset"]).astype(self._wire_dtype).tobytes()
        w = self.s * self._wire_dtype.itemsize
        return [raw[i:i + w] for i in range(0, len(raw), w)]

    def from_wire(self, objects: list[Any]) -> Payloads:
        w = self.s * self._wire_dtype.itemsize
        for i, obj in enumerate(objects):
            if type(obj) is not bytes:
                raise InvalidPayload(f"expected {w} bytes, got {type(obj).__name__}", index=i, field="payload")
            if len(obj) != w:
                raise InvalidPayload(f"expected {w} bytes ({self.s} indices), got {len(obj)}",
                                     index=i, field="payload")
        flat = np.frombuffer(b"".join(objects), dtype=self._wire_dtype)
        return {"subset": flat.astype(np.uint32).reshape(len(objects), self.s)}


OPTION_KEYS: frozenset[str] = frozenset()


def from_options(domain_size: int, epsilon: float, options: dict[str, Any]) -> SS:
    """Build from registry fields (SS takes no extra options)."""
    return SS(SSParams(d=domain_size, epsilon=epsilon))
