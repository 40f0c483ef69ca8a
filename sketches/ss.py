"""Subset selection's server half (docs/math.md §6): Floyd's algorithm across a batch (the device
half's module docstring, client_sdk.protocols.ss, describes it), validate, accumulate, the exact
output table over all C(d, s) subsets and the wire's packed index lists."""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import numpy as np

from client_sdk.errors import InvalidPayload
from client_sdk.protocols.ss import SS
from client_sdk.randomness import SCALE

from .base import Payloads, PureServer, Sketch, add_cells, first_bad, require_1d
from .randomness import RandomLike, as_random_source, bernoulli
from .registry import register

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


@register(SS)
class SSServer(PureServer):
    """Subset selection on the server: d support counters."""

    device: SS

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
            return {"subset": np.array(self.device.floyd_one(int(x[0]), u < self.device.include_threshold, draws),
                                       dtype=np.uint32)[None, :]}
        subset = np.empty((n, s), dtype=np.uint32)
        if d > SPARSE_RATIO * s:
            fill, block = self._floyd_sparse, max(1, SPARSE_BLOCK_CELLS // s)
        else:
            fill, block = self._floyd_dense, max(MIN_BLOCK_ROWS, BLOCK_CELLS // d)
        for start in range(0, n, block):  # loop over blocks of reports, vectorised inside
            xs = x[start:start + block]
            include = bernoulli(source, self.device.include_threshold, xs.shape[0])
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
        return np.dtype("<" + {"H": "u2", "I": "u4"}[self.device.wire_char])

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

    def pair_probabilities(self) -> tuple[float, float, float, float] | None:
        """r₁ = π(s−1)/(d−1), r₂ = [π(s−1)(s−2) + (1−π)s(s−1)]/((d−1)(d−2)) (0 at d = 2)."""
        d = self.domain_size
        p, q = float(self.p), float(self.q)
        s, pi = int(self.s), float(self.pi)
        r1 = pi * (s - 1) / (d - 1)
        r2 = (pi * (s - 1) * (s - 2) + (1 - pi) * s * (s - 1)) / ((d - 1) * (d - 2)) if d > 2 else 0.0
        return p, q, r1, r2

    def marginal_model(self, cells: int, n: int) -> tuple[float, float, int] | None:
        """s = 1 supports one cell a report, as GRR does: (p* + (k−1)q*, k·q*, n); None for s ≥ 2
        (a report's cells are a fixed-size subset: dependent)."""
        if int(self.s) != 1:
            return None
        p, q = float(self.p), float(self.q)
        return p + (cells - 1) * q, cells * q, n

    def draw_support(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        """Bin(c_x, π) of x's reports include x; each then holds a uniform (s−1)- or s-subset of
        the d − 1 others, scanned item by item: a group of reports with r picks left of the M items
        left includes the next w.p. r/M, so it splits binomially (d·s draws: the encoder's law)."""
        c, s, pi = counts, int(self.s), float(self.pi)
        d = c.size
        inc = rng.binomial(c, pi)
        out = inc.astype(np.int64)
        # groups[x, r]: reports of value x with r picks left among the others not yet scanned
        groups = np.zeros((d, s + 1), dtype=np.int64)
        groups[:, s - 1] += inc
        groups[:, s] += c - inc
        x = np.arange(d)
        r = np.arange(s + 1)
        for j in range(d):
            left = (d - 1 - j) + (x < j)            # others of x not yet scanned, j included
            prob = np.where(x[:, None] == j, 0.0, r[None, :] / np.maximum(left, 1)[:, None])
            take = rng.binomial(groups, np.clip(prob, 0.0, 1.0))
            out[j] += take.sum()
            groups -= take
            groups[:, :-1] += take[:, 1:]
        return out

    def values_supported(self) -> int:
        """The s chosen values."""
        return int(self.params.s)


__all__ = ["SSServer"]
