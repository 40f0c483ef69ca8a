"""Exact P(y | x) tables, as integers over one common denominator, from a protocol's published
integers (client_sdk.encoder_block) alone.

Each table is ``{"inputs": [...], "outputs": N, "denominator": "D", "rows": [["n", ...], ...]}``:
P(output o | input i) = rows[i][o] / D exactly (decimal strings: the numbers exceed 2^53).
Output indices are defined per protocol in docs/conformance.md ("Output index of a payload").
The generator checks every table against the reference's own floating-point
``output_probabilities``, so these rationals are the mechanism the Python SDK runs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

S32 = 1 << 32
S64 = 1 << 64


def table(inputs: Sequence[Any], outputs: int, denominator: int, row: Callable[[Any], list[int]]) -> dict[str, Any]:
    rows = []
    for x in inputs:
        r = row(x)
        assert len(r) == outputs and sum(r) == denominator and min(r) >= 0, (x, sum(r), denominator)
        rows.append([str(v) for v in r])
    return {"inputs": list(inputs), "outputs": outputs, "denominator": str(denominator), "rows": rows}


def direct(d: int, keep: int, inputs: Sequence[int] | None = None) -> dict[str, Any]:
    """GRR on [d] keeping the input w.p. keep/2^32 (rr, grr, a GRR round)."""
    if d == 2:
        return table(inputs or range(2), 2, S32, lambda x: [keep if y == x else S32 - keep for y in range(2)])
    return table(inputs or range(d), d, S32 * (d - 1),
                 lambda x: [keep * (d - 1) if y == x else S32 - keep for y in range(d)])


def bits(d: int, one_threshold: Callable[[Any, int], int], inputs: Sequence[Any]) -> dict[str, Any]:
    """Independent bits: output o = Σ y_i 2^i, P(y_i = 1 | x) = one_threshold(x, i)/2^32."""
    def row(x: Any) -> list[int]:
        t = [one_threshold(x, i) for i in range(d)]
        out = []
        for o in range(1 << d):
            num = 1
            for i in range(d):
                num *= t[i] if (o >> i) & 1 else S32 - t[i]
            out.append(num)
        return out
    return table(inputs, 1 << d, S32 ** d, row)


def subsets(d: int, s: int, include: int) -> dict[str, Any]:
    """Subset selection: outputs are the C(d, s) subsets in lexicographic order."""
    combos = list(itertools.combinations(range(d), s))
    a, b = math.comb(d - 1, s - 1), math.comb(d - 1, s)
    return table(range(d), len(combos), S32 * a * b,
                 lambda x: [include * b if x in c else (S32 - include) * a for c in combos])


def hadamard(d: int, g: int, m: int, keep: int, residue: Callable[[int, int], int]) -> dict[str, Any]:
    """HR: output s·g + b; the direction s is uniform on [m], b is GRR on [g] of residue(s, x)."""
    def row(x: int) -> list[int]:
        out = []
        for s in range(m):
            h = residue(s, x)
            out += [keep * (g - 1) if b == h else S32 - keep for b in range(g)]
        return out
    return table(range(d), m * g, S32 * m * (g - 1), row)


def seeded_grr(inputs: Sequence[Any], seeds: int, g: int, keep: int, bucket: Callable[[Any, int], int]) -> dict[str, Any]:
    """Discover: output seed·g + y; the seed is uniform on [seeds], y GRR on [g] of bucket(x, seed)."""
    def row(x: Any) -> list[int]:
        out = []
        for s in range(seeds):
            h = bucket(x, s)
            out += [keep * (g - 1) if y == h else S32 - keep for y in range(g)]
        return out
    return table(inputs, seeds * g, S32 * seeds * (g - 1), row)


def compose(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Both rounds: P(y | x) = Σ_z P(z | x) P(y | z), second's inputs being first's outputs 0..n−1."""
    d1, d2 = int(first["denominator"]), int(second["denominator"])
    srows = [[int(v) for v in r] for r in second["rows"]]
    def row_of(i: int) -> list[int]:
        f = [int(v) for v in first["rows"][i]]
        return [sum(f[z] * srows[z][y] for z in range(len(f))) for y in range(second["outputs"])]
    rows = {x: row_of(i) for i, x in enumerate(first["inputs"])}
    return table(first["inputs"], second["outputs"], d1 * d2, lambda x: rows[x])


def duchi(grid: int, low: int, step: int) -> dict[str, Any]:
    return table(range(grid + 1), 2, S64, lambda j: [S64 - (low + step * j), low + step * j])


def piecewise(grid: int, window: int, a: int, b: int) -> dict[str, Any]:
    total = window * a + grid * b
    return table(range(grid + 1), grid + window, total,
                 lambda j: [a if j <= c < j + window else b for c in range(grid + window)])


def hybrid(h: int, pm: dict[str, Any], du: dict[str, Any]) -> dict[str, Any]:
    tp, td = int(pm["denominator"]), int(du["denominator"])
    def row(j: int) -> list[int]:
        return [h * int(v) * td for v in pm["rows"][j]] + [(S32 - h) * tp * int(v) for v in du["rows"][j]]
    return table(pm["inputs"], pm["outputs"] + 2, S32 * tp * td, row)


def laplace(grid: int, window: int, bounds: Sequence[int]) -> dict[str, Any]:
    weights = [bounds[0]] + [bounds[i] - bounds[i - 1] for i in range(1, len(bounds))] + [S64 - bounds[-1]]
    cells = grid + 2 * window + 1
    def row(j: int) -> list[int]:
        out = [0] * cells
        for i, w in enumerate(weights):  # noise index i moves j by i − N, N = K + L; clamped
            out[min(max(j + i - grid, 0), cells - 1)] += w
        return out
    return table(range(grid + 1), cells, S64, row)


def flip(gamma: int) -> dict[str, Any]:
    """memobitmean's second round: the memoised bit flipped w.p. γ/2^32."""
    return table(range(2), 2, S32, lambda b: [S32 - gamma if y == b else gamma for y in range(2)])


__all__ = ["bits", "compose", "direct", "duchi", "flip", "hadamard", "hybrid", "laplace", "piecewise",
           "seeded_grr", "subsets", "table"]
