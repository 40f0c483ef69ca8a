"""Wang et al. (2019)'s Piecewise Mechanism, discretised so its probabilities are exact.

Continuous PM (Wang, Xiao, Yang, Zhao, Hui, Shin, Shin, Yu, ICDE 2019): for t in [−1, 1] and
a = e^{ε/2}, C = (a+1)/(a−1), the output is uniform on a window [l(t), r(t)] of length C − 1
with probability a/(a+1), else uniform on the rest of [−C, C]; the density ratio inside vs
outside the window is e^ε, and E[output] = t. Its per-report variance is
t²/(a−1) + (a+3)/(3(a−1)²), worst case 4a/(3(a−1)²) at t = ±1.

Discrete version on the input grid t_j = −1 + 2j/K: M = K + w output cells c = 0..M−1; for
input j the w cells [j, j+w) get integer weight A and the other K cells weight B, with
A/B <= e^ε (realised: ε' = ln(A/B)). Every row sums to T = wA + KB <= 2^32, so a cell is drawn
exactly from a 32-bit word u: reject u >= T·floor(2^32/T) (T is close to 2^32, so this
happens with probability below 1e-5 for ε <= 8), then r = u mod T is uniform on [0, T).

E[c | j] = (B·Σ_c c + (A − B)·w·(j + (w−1)/2))/T is affine in j with slope (A−B)w/T, so
v(c) = β(c − c₀) with β = 2T/(K w (A−B)) is exactly unbiased: E[v | j] = t_j.

The window w is the one minimising the exact worst-case variance over w = 1..K. Wang et al.'s
window, w/K = e^{−ε/2} (``paper_window``), reproduces the continuous 4a/(3(a−1)²) within 1%
at K = 256 for ε <= 4, but it is not the best window for the worst case: the optimised one
is lower by 3% at ε = 1, 11% at ε = 2 and 32% at ε = 4 (docs/protocols-numeric.md).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from ..randomness import OS_WORDS, SCALE, WordSource
from ._epsilon import exp_at_least, log_up
from .blocks import BlockProtocol, BlockReader, MeanEncoder
from .numeric import NumericDevice, check_grid_and_epsilon

DEFAULT_GRID = 256
#: The probability table is (K+1) × (K+w) and the window search O(K²): cap the grid option.
MAX_GRID = 1024


#: A/B below b·exp(ε)·FLOAT_MARGIN in floats is below e^ε exactly: math.exp and the two
#: products are each within a few 1e-16 (relative) of the exact values, far inside 1e-12.
FLOAT_MARGIN = 1 - 1e-12


def weights_for(epsilon: float, grid: int, window: int) -> tuple[int, int]:
    """Integer weights (A, B) with A/B <= e^ε, wA + KB <= 2^32, B as large as that allows."""
    ratio = math.exp(epsilon)
    b = math.floor(SCALE / (window * ratio + grid))
    while b >= 1 and window * math.floor(b * ratio) + grid * b > SCALE:
        b -= 1
    if b < 1:
        raise ValueError(f"epsilon {epsilon} is too large for 32-bit piecewise weights")
    a = math.floor(b * ratio)
    while a > b and not (a < b * ratio * FLOAT_MARGIN or exp_at_least(epsilon, Fraction(a, b))):
        # float rounding in b·e^ε: step back (log_up(r) <= ε exactly when e^ε >= r: log_up is
        # the smallest such float). A ratio clearly below the float e^ε needs no exact check.
        a -= 1
    return a, b


class _SecondMoments:
    """E[v² | j] of weights (A, B) and window w, one grid point at a time, in closed form.

    Plain floats (devices choose the window too); Σc and Σc² are integers, exact in binary64.
    """

    def __init__(self, a: int, b: int, grid: int, window: int) -> None:
        self.a, self.b, self.grid, self.window = a, b, grid, window
        self.total = window * a + grid * b
        cells = grid + window
        self.beta = 2.0 * self.total / (grid * window * (a - b))
        self.all1 = float((cells - 1) * cells // 2)
        self.all2 = float((cells - 1) * cells * (2 * cells - 1) // 6)
        self.half = window * (window - 1) / 2.0
        self.sixth = (window - 1) * window * (2 * window - 1) / 6.0
        # v = β(c − c₀) with E[v | 0] = −1, i.e. c₀ = E[c | 0] + 1/β
        self.c0 = self.mean_c(0) + 1.0 / self.beta

    def mean_c(self, jj: int) -> float:
        j = float(jj)
        win1 = self.window * j + self.half                            # Σ_{c in [j, j+w)} c
        return (self.b * self.all1 + (self.a - self.b) * win1) / self.total

    def at(self, jj: int) -> float:
        """E[v² | j]."""
        j, w = float(jj), self.window
        win2 = w * j * j + j * w * (w - 1) + self.sixth
        second = (self.b * self.all2 + (self.a - self.b) * win2) / self.total
        c0 = self.c0
        return self.beta * self.beta * (second - 2 * c0 * self.mean_c(jj) + c0 * c0)

    def quadratic(self) -> tuple[float, float, float]:
        """(A, B, C) with E[v² | j] − t_j² = A j² + B j + C (for pruning only: cancels in C)."""
        a, b, w, k, total, beta, c0 = self.a, self.b, self.window, self.grid, self.total, self.beta, self.c0
        m1, m0 = (a - b) * w / total, (b * self.all1 + (a - b) * self.half) / total
        s2, s1, s0 = (a - b) * w / total, (a - b) * w * (w - 1) / total, (b * self.all2 + (a - b) * self.sixth) / total
        bb = beta * beta
        return bb * s2 - 4.0 / (k * k), bb * (s1 - 2 * c0 * m1) + 4.0 / k, bb * (s0 - 2 * c0 * m0 + c0 * c0) - 1.0


def _report_second_moments(a: int, b: int, grid: int, window: int) -> tuple[list[float], float, float]:
    """(E[v² | j] for j = 0..K, β, c₀) for weights (A, B) and window w, in closed form."""
    moments = _SecondMoments(a, b, grid, window)
    return [moments.at(j) for j in range(grid + 1)], moments.beta, moments.c0


#: Grid points whose quadratic estimate is below the maximum by more than this (relative) are
#: skipped by ``_worst_excess``: far above the estimate's rounding (~1e-13), so the points kept
#: include every one whose exactly computed value could be the largest.
PRUNE_SLACK = 1e-6


def _worst_excess(moments: _SecondMoments, t2: list[float]) -> float:
    """max_j (E[v² | j] − t_j²), the same floats as scanning every j, evaluating only the grid
    points near the maximum of its quadratic in j: those reached from the ends and the vertex
    while the quadratic stays within PRUNE_SLACK of its maximum (a quadratic's upper level set
    is at most two runs of grid points, each holding an end or the vertex)."""
    qa, qb, qc = moments.quadratic()
    k = moments.grid

    def quad(j: int) -> float:
        return (qa * j + qb) * j + qc

    starts = {0, k}
    if qa < 0 and 0 < -qb / (2 * qa) < k:
        vertex = -qb / (2 * qa)
        starts.update((math.floor(vertex), math.ceil(vertex)))
    top = max(quad(j) for j in starts)
    floor = top - PRUNE_SLACK * (abs(top) + 1.0)
    near: set[int] = set()
    stack = [j for j in starts if quad(j) >= floor]
    while stack:
        j = stack.pop()
        if j in near:
            continue
        near.add(j)
        stack.extend(n for n in (j - 1, j + 1) if 0 <= n <= k and n not in near and quad(n) >= floor)
    return max(moments.at(j) - t2[j] for j in near)


@functools.lru_cache(maxsize=64)
def best_window(epsilon: float, grid: int) -> int:
    """w in 1..K minimising max_j Var[v | j] (exact, with the realised weights)."""
    t2 = [(-1.0 + 2.0 * j / grid) ** 2 for j in range(grid + 1)]
    best = None
    for window in range(1, grid + 1):
        try:
            a, b = weights_for(epsilon, grid, window)
        except ValueError:  # huge ε: wide windows do not fit 32-bit weights
            break
        if a <= b:
            continue
        moments = _SecondMoments(a, b, grid, window)
        # E[v² | 0] − 1 is one of the values _worst_excess maximises (it equals the maximum over
        # every j): a window already no better than the best at j = 0 cannot win, skip the rest
        if best is not None and moments.at(0) - t2[0] >= best[0]:
            continue
        worst = _worst_excess(moments, t2)
        if best is None or worst < best[0]:
            best = (worst, window)
    if best is None:
        raise ValueError(f"piecewise: epsilon {epsilon} is too small for the 2^-32 probability grid")
    return best[1]


def paper_window(epsilon: float, grid: int) -> int:
    """Wang et al. (2019)'s window on K steps: w/K = (C−1)/(C+1) = e^{−ε/2}."""
    return min(grid, max(1, round(grid * math.exp(-epsilon / 2))))


@dataclasses.dataclass(frozen=True)
class PiecewiseParams:
    epsilon: float                # target per-report budget
    grid: int = DEFAULT_GRID      # K: input grid steps over [−1, 1]
    window: int | None = None     # w: high-probability cells per input; None = the best

    def __post_init__(self) -> None:
        check_grid_and_epsilon(self.grid, self.epsilon, "piecewise")
        if self.grid > MAX_GRID:
            raise ValueError(f"piecewise: grid must be at most {MAX_GRID}, got {self.grid}")
        if self.window is not None and not (isinstance(self.window, int) and 1 <= self.window <= self.grid):
            raise ValueError(f"piecewise: window must be an integer in [1, {self.grid}]")

    @property
    def resolved_window(self) -> int:
        return best_window(self.epsilon, self.grid) if self.window is None else self.window


class Piecewise(NumericDevice):
    """Discrete Piecewise Mechanism's device half: cell c in [0, K + w) (server half: sketches.piecewise)."""

    name = "piecewise"

    def __init__(self, params: PiecewiseParams) -> None:
        super().__init__(params)
        k, w = params.grid, params.resolved_window
        a, b = weights_for(params.epsilon, k, w)
        if a <= b:
            raise ValueError(f"piecewise: epsilon {params.epsilon} is too small for the 2^-32 "
                             "probability grid")
        self._k, self._w, self._a, self._b = k, w, a, b
        self._total = w * a + k * b
        self._beta_c0 = _report_second_moments(a, b, k, w)[1:]

    def second_moments(self) -> list[float]:
        return _report_second_moments(self._a, self._b, self._k, self._w)[0]

    @property
    def grid(self) -> int:
        return self._k

    @property
    def window(self) -> int:
        return self._w

    @property
    def weights(self) -> tuple[int, int]:
        """(A, B): integer weight of a cell inside / outside the input's window."""
        return self._a, self._b

    @property
    def total(self) -> int:
        """T = wA + KB: every row's weights sum to it (a cell is drawn from r uniform on [0, T))."""
        return self._total

    @property
    def beta_c0(self) -> tuple[float, float]:
        """(β, c₀): the debiased value of cell c is β(c − c₀)."""
        return self._beta_c0

    @property
    def cells(self) -> int:
        return self._k + self._w

    @property
    def epsilon(self) -> float:
        return log_up(Fraction(self._a, self._b))

    def encoder_block(self) -> dict[str, Any]:
        return {"grid": self._k, "window": self._w, "a": self._a, "b": self._b}


OPTION_KEYS: frozenset[str] = frozenset({"grid"})


def from_options(domain_size: int | None, epsilon: float, options: dict[str, Any]) -> Piecewise:
    """Build from registry fields (the domain size is not used: numeric metrics have a range)."""
    return Piecewise(PiecewiseParams(epsilon=epsilon, grid=options.get("grid", DEFAULT_GRID)))


class PiecewiseBlock(MeanEncoder):
    """The discrete Piecewise Mechanism's one-report encoder from the block: r uniform on [0, T)
    (T = w·a + K·b, 32-bit words by rejection); r < w·a: the window cell j + ⌊r/a⌋, else the other
    cell c = ⌊(r − w·a)/b⌋ (shifted past the window when c ≥ j)."""

    __slots__ = ("window", "a", "b", "total", "inside")

    def __init__(self, block: Mapping[str, Any]) -> None:
        super().__init__(block)
        self.window: int = block["window"]
        self.a: int = block["a"]
        self.b: int = block["b"]
        self.inside = self.window * self.a
        self.total = self.inside + self.grid * self.b

    def randomise(self, index: int, source: WordSource = OS_WORDS) -> int:
        """One output cell of grid index ``index``."""
        r = source.below32(self.total)
        if r < self.inside:
            return index + r // self.a
        rest = (r - self.inside) // self.b
        return rest + self.window if rest >= index else rest


def check_piecewise(reader: BlockReader, pw: Any, prefix: str) -> None:
    """(10) the piecewise window (the block's, or hybrid's nested ``piecewise``): 1 ≤ w ≤ K, a ≥ 1,
    b ≥ 0, w·a + K·b ≤ 2^32."""
    grid = reader.block.get("grid")
    if not isinstance(pw, Mapping) or pw.get("grid") != grid:
        reader.fail(prefix + "grid", "a nested block's grid must be the block's")
    window = reader.int("window", pw)
    if not 1 <= window <= grid or reader.int("a", pw) < 1 or reader.int("b", pw) < 0:
        reader.fail(prefix + "window", f"window must be in [1, grid = {grid}], a ≥ 1 and b ≥ 0")
    if window * pw["a"] + grid * pw["b"] > SCALE:
        reader.fail(prefix + "a", "window × a + grid × b must be at most 2^32")


BLOCK = BlockProtocol(PiecewiseBlock, lambda reader: check_piecewise(reader, reader.block, ""),
                      members=("grid", "window", "a", "b", "range"))
