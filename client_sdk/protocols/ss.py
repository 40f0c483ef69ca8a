"""Subset selection, Ye & Barg 2018 / S. Wang et al. 2016 (docs/math.md §6).

Each report is a set S of s = max(1, ⌈d/(e^ε+1)⌉) distinct domain values with
Q(S | x) ∝ e^ε if x ∈ S and ∝ 1 otherwise. We sample it in two exact steps:

1. include x with probability π = s·e^ε/(s·e^ε + d − s) (the total mass of the subsets that
   contain x), quantised down by rounding 1−π up;
2. fill the remaining s−1 (or all s) places with a uniform subset of the d−1 values ≠ x.

So Q(S|x) = π'/C(d−1, s−1) for x ∈ S and (1−π')/C(d−1, s) for x ∉ S, and the realised
ε = ln(π'(d−s) / ((1−π')s)) ≤ target. Pure with S(y) = y:
p* = π', q* = π'(s−1)/(d−1) + (1−π')s/(d−1) (docs/math.md §6), sketch = d support counters.

Step 2 is Floyd's algorithm run across the whole batch at once: for j = N−k, …, N−1 (N = d−1
values ≠ x, k places) draw t uniform in [0, j] and add t, or j if t is already taken; that
gives a uniform k-subset. The draws are independent of the set, so all are made up front,
and the loop runs over the s positions, never over reports. Rows that include x need
k = s−1: that is the same run without its first position. Membership is a per-report bitmap
over the domain when s is a sizeable fraction of d (small ε), and otherwise a stable sort
plus an s-cell bitmap (``_floyd_sparse``), so large domains cost O(s log s) per report.

Payload: ``subset``, shape (n, s) uint32, each row strictly increasing. Wire: one ``bytes``
object per report holding the s sorted indices as little-endian uint16 when d <= 65536,
else little-endian uint32 (2s or 4s bytes). ``payload_bits`` is s·⌈log₂ d⌉, the bits of a
packed index list.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import struct
from fractions import Fraction
from typing import Any

from .._lazy import np
from ..errors import InvalidPayload
from ..randomness import (
    OS_WORDS,
    SCALE,
    RandomLike,
    WordSource,
    as_random_source,
    bernoulli,
    realised,
    threshold_ceil,
)
from ._epsilon import log_up
from .base import (
    Payloads,
    PureProtocol,
    Sketch,
    add_cells,
    check_domain_and_epsilon,
    first_bad,
    require_1d,
)

#: Domain-bitmap Floyd when d <= SPARSE_RATIO·s (small ε), else the sort-based one, whose
#: cost does not grow with d (measured crossover d/s ≈ 10–50 at d = 128…10^4).
SPARSE_RATIO = 16
#: Dense: bitmap cells per encode block (bool bytes), ~1 MiB keeps it cache-resident...
BLOCK_CELLS = 1 << 20
#: ...but a block always holds this many reports.
MIN_BLOCK_ROWS = 16
#: Sparse: draws per encode block.
SPARSE_BLOCK_CELLS = 1 << 19
#: output_probabilities enumerates all C(d, s) subsets; refuse beyond this many.
MAX_ENUMERATED_SUBSETS = 1 << 20
#: Largest d whose indices travel as uint16 on the wire.
UINT16_MAX_D = 1 << 16


@dataclasses.dataclass(frozen=True)
class SSParams:
    d: int           # domain size
    epsilon: float   # target per-report budget

    def __post_init__(self) -> None:
        check_domain_and_epsilon(self.d, self.epsilon, "subset selection")
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


class SS(PureProtocol):
    name = "ss"

    def __init__(self, params: SSParams) -> None:
        super().__init__(params)
        self.s, self.pi = params.s, params.pi
        self.p, self.q = params.p_star, params.q_star
        self._threshold = params.include_threshold
        self._wire_char = "H" if params.d <= UINT16_MAX_D else "I"  # struct code of one wire item

    @property
    def epsilon(self) -> float:
        # Q(S|x∈S)/Q(S|x∉S) = [π'/C(d−1,s−1)] / [(1−π')/C(d−1,s)] = π'(d−s)/((1−π')s).
        pi = Fraction(self.pi)
        return log_up(pi * (self.params.d - self.s) / ((1 - pi) * self.s))

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
        if n == 1:  # the SDK's single report: the same algorithm on Python ints
            # One draw call: u ~ U[0, 2^32) for the inclusion test u < T, then t_0..t_{s−1}.
            u, *draws = source.below(self._single_highs, s + 1).tolist()
            return {"subset": self._floyd_one(int(x[0]), u < self._threshold, draws)[None, :]}  # type: ignore[index]
        subset = np.empty((n, s), dtype=np.uint32)
        if d > SPARSE_RATIO * s:
            fill, block = self._floyd_sparse, max(1, SPARSE_BLOCK_CELLS // s)
        else:
            fill, block = self._floyd_dense, max(MIN_BLOCK_ROWS, BLOCK_CELLS // d)
        for start in range(0, n, block):  # loop over blocks of reports, vectorised inside
            xs = x[start:start + block]
            include = bernoulli(source, self._threshold, xs.shape[0])
            # t_i ~ U[0, j_i] with j_i = d−1−s+i, for all positions at once: shape (s, m)
            draws = np.stack([source.below(d - s + i, xs.shape[0]) for i in range(s)])
            subset[start:start + xs.shape[0]] = fill(xs, include, draws)
        return {"subset": subset}

    def _floyd_dense(self, x: np.ndarray, include: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Floyd with a per-report bitmap over the whole domain; returns sorted (m, s) subsets."""
        m, d, s = x.shape[0], self.params.d, self.s
        base = np.arange(m, dtype=np.int64) * d  # row r's bitmap is taken[r·d : (r+1)·d]
        xb = base + x
        # Rank r among the values ≠ x is the domain value r + [r >= x]; offset into the bitmap.
        t = t + base
        t += t >= xb
        j = np.arange(d - 1 - s, d - 1, dtype=np.int64)[:, None] + base  # j_i per row, mapped
        j += j >= xb
        taken = np.zeros(m * d, dtype=bool)
        taken[t[0][~include]] = True  # position 0: the set is still empty, t_0 is always new
        for i in range(1, s):
            taken[np.where(taken[t[i]], j[i], t[i])] = True  # add t_i, or j_i if t_i is taken
        taken[xb[include]] = True
        # Each row has exactly s set cells; row-major order lists them sorted within rows.
        return (np.flatnonzero(taken) - np.repeat(base, s)).astype(np.uint32).reshape(m, s)

    def _floyd_sparse(self, x: np.ndarray, include: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Floyd in O(s log s) time and O(s) memory per report, whatever d; sorted (m, s) subsets.

        With τ = N−s = j_0 ≤ every j_i, a rank r < τ can enter the set only as some t_k, never
        as a j; so the first occurrence of r among the active positions is always added and
        every later one collides: low-rank collisions are "not a first occurrence", found by
        one stable sort per report. The s high ranks [τ, N) are tracked sequentially in a
        per-report bitmap of s cells.
        """
        m, s = x.shape[0], self.s
        tau = self.params.d - 1 - s
        key = t.copy()
        key[0, include] = -1  # rows that include x skip position 0: a unique sentinel
        order = np.argsort(key, axis=0, kind="stable")
        ranked = np.take_along_axis(key, order, axis=0)
        repeat = np.zeros((s, m), dtype=bool)
        np.put_along_axis(repeat, order[1:], ranked[1:] == ranked[:-1], axis=0)
        sink = m * s  # a bitmap cell that low ranks point at; cleared after every step
        high = np.zeros(sink + 1, dtype=bool)
        offset = np.arange(m, dtype=np.int64) * s - tau  # rank r >= τ of row k -> cell k·s + r − τ
        cell = np.where(t >= tau, t + offset, sink)
        v = t.copy()
        for i in range(s):
            vi = np.where(high[cell[i]] | repeat[i], tau + i, t[i])  # t_i, or j_i on a collision
            new = np.where(vi >= tau, vi + offset, sink)
            if i == 0:
                new[include] = sink
            high[new] = True
            high[sink] = False
            v[i] = vi
        v += v >= x  # ranks among the values ≠ x -> domain values
        v[0, include] = x[include]
        return np.sort(v.T, axis=1).astype(np.uint32)

    @functools.cached_property
    def _single_highs(self) -> np.ndarray:
        """Bounds of the single-report draws: 2^32 (inclusion word), then j_i + 1 = d−s+i."""
        d, s = self.params.d, self.s
        return np.concatenate(([SCALE], np.arange(d - s, d))).astype(np.uint64)

    @functools.cached_property
    def _wire_dtype(self) -> Any:
        """numpy dtype of one wire item (little-endian uint16 up to UINT16_MAX_D values, else uint32)."""
        return np.dtype("<" + {"H": "u2", "I": "u4"}[self._wire_char])

    @functools.cached_property
    def _single_bounds(self) -> list[int]:
        """``_single_highs`` as Python ints: 2^32 (inclusion word), then d−s+i for i < s."""
        d, s = self.params.d, self.s
        return [SCALE, *range(d - s, d)]

    def encode_one(self, index: int, cohort: int | None = None, source: WordSource | None = None) -> bytes:
        """One report in plain Python, the draws of ``encode`` (one urandom call from the OS CSPRNG)."""
        x = self._check_index(index)
        draws = (source or OS_WORDS).belows(self._single_bounds)
        subset = self._floyd_one(x, draws[0] < self._threshold, draws[1:], as_list=True)
        return struct.pack(f"<{self.s}{self._wire_char}", *subset)

    def _floyd_one(self, x: int, include: bool, draws: list[int], as_list: bool = False) -> Any:
        """``_floyd_block`` for one report on Python ints (no numpy call per position)."""
        first = 1 if include else 0
        chosen: set[int] = {x} if include else set()
        for j, t in zip(range(self.params.d - 1 - self.s + first, self.params.d - 1), draws[first:]):
            if t >= x:  # ranks among the values ≠ x -> domain values
                t += 1
            if t in chosen:
                chosen.add(j + 1 if j >= x else j)
            else:
                chosen.add(t)
        ordered = sorted(chosen)
        return ordered if as_list else np.array(ordered, dtype=np.uint32)

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
        add_cells(sketch, *self.flat_cells(payloads))

    def flat_cells(self, payloads: Payloads) -> tuple[np.ndarray, np.ndarray]:
        sub = np.asarray(payloads["subset"])
        return sub.reshape(-1).astype(np.int64), np.zeros(sub.shape[0], dtype=np.int64)



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
