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
from typing import Any

from .._lazy import np
from ..randomness import OS_WORDS, SCALE, RandomLike, WordSource, as_random_source
from .base import Payloads
from .numeric import NumericProtocol, check_grid_and_epsilon

DEFAULT_GRID = 256
#: The probability table is (K+1) × (K+w) and the window search O(K²): cap the grid option.
MAX_GRID = 1024


def weights_for(epsilon: float, grid: int, window: int) -> tuple[int, int]:
    """Integer weights (A, B) with A/B <= e^ε, wA + KB <= 2^32, B as large as that allows."""
    ratio = math.exp(epsilon)
    b = math.floor(SCALE / (window * ratio + grid))
    while b >= 1 and window * math.floor(b * ratio) + grid * b > SCALE:
        b -= 1
    if b < 1:
        raise ValueError(f"epsilon {epsilon} is too large for 32-bit piecewise weights")
    a = math.floor(b * ratio)
    while a > b and math.log(a / b) > epsilon:  # float rounding in b·e^ε: step back
        a -= 1
    return a, b


def _report_second_moments(a: int, b: int, grid: int, window: int) -> tuple[list[float], float, float]:
    """(E[v² | j] for j = 0..K, β, c₀) for weights (A, B) and window w, in closed form.

    Plain floats (devices choose the window too); Σc and Σc² are integers, exact in binary64.
    """
    total = window * a + grid * b
    cells = grid + window
    beta = 2.0 * total / (grid * window * (a - b))
    all1 = float((cells - 1) * cells // 2)
    all2 = float((cells - 1) * cells * (2 * cells - 1) // 6)
    half, sixth = window * (window - 1) / 2.0, (window - 1) * window * (2 * window - 1) / 6.0
    mean_c, second_c = [], []
    for jj in range(grid + 1):
        j = float(jj)
        win1 = window * j + half                                       # Σ_{c in [j, j+w)} c
        win2 = window * j * j + j * window * (window - 1) + sixth
        mean_c.append((b * all1 + (a - b) * win1) / total)
        second_c.append((b * all2 + (a - b) * win2) / total)
    # v = β(c − c₀) with E[v | 0] = −1, i.e. c₀ = E[c | 0] + 1/β
    c0 = mean_c[0] + 1.0 / beta
    second_v = [beta * beta * (s - 2 * c0 * m + c0 * c0) for s, m in zip(second_c, mean_c)]
    return second_v, beta, c0


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
        worst = max(s - t for s, t in zip(_report_second_moments(a, b, grid, window)[0], t2))
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


class Piecewise(NumericProtocol):
    """Discrete Piecewise Mechanism: cell c in [0, K + w)."""

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
        self._accept = (SCALE // self._total) * self._total   # accept u < this
        self._beta_c0 = _report_second_moments(a, b, k, w)[1:]

    @functools.cached_property
    def _values(self) -> np.ndarray:
        beta, c0 = self._beta_c0
        return beta * (np.arange(self._k + self._w, dtype=np.float64) - c0)

    @functools.cached_property
    def _table(self) -> np.ndarray:
        j = np.arange(self._k + 1)[:, None]
        c = np.arange(self._k + self._w)[None, :]
        inside = (c >= j) & (c < j + self._w)
        return np.where(inside, self._a, self._b) / self._total

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
    def cells(self) -> int:
        return self._k + self._w

    @property
    def epsilon(self) -> float:
        return math.log(self._a / self._b)

    def probability_table(self) -> np.ndarray:
        return self._table

    def debiased_values(self) -> np.ndarray:
        return self._values

    def cells_from_uniform(self, j: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Cell for input j given r uniform on [0, T): the first wA values index the window."""
        inside = r < self._w * self._a
        win = j + r // self._a
        rest = np.maximum(r - self._w * self._a, 0) // self._b
        return np.where(inside, win, rest + (rest >= j) * self._w)

    def uniform_below_total(self, source, count: int) -> np.ndarray:
        """``count`` integers uniform on [0, T) from 32-bit words (rejection, no modulo bias)."""
        u = source.words(count).astype(np.int64)
        bad = np.flatnonzero(u >= self._accept)
        while bad.size:  # each word is rejected with probability < (2^32 mod T)/2^32
            u[bad] = source.words(bad.size).astype(np.int64)
            bad = bad[u[bad] >= self._accept]
        return u % self._total

    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        j = self.check_indices(indices)
        r = self.uniform_below_total(as_random_source(rng), j.shape[0])
        return {"y": self.cells_from_uniform(j, r)}

    def encode_one(self, index: int, cohort: int | None = None, source: WordSource | None = None) -> int:
        return self.cell_one(self._check_index(index), source)

    def cell_one(self, j: int, source: WordSource | None = None) -> int:
        """One report for grid index j from the OS CSPRNG, in plain Python: r uniform on the
        2^32-word rejection of ``uniform_below_total`` (u < ⌊2^32/total⌋·total), then the cell."""
        r = (source or OS_WORDS).below32(self._total)
        inside = self._w * self._a
        if r < inside:
            return j + r // self._a
        rest = (r - inside) // self._b
        return rest + self._w if rest >= j else rest


OPTION_KEYS: frozenset[str] = frozenset({"grid"})


def from_options(domain_size: int | None, epsilon: float, options: dict[str, Any]) -> Piecewise:
    """Build from registry fields (the domain size is not used: numeric metrics have a range)."""
    return Piecewise(PiecewiseParams(epsilon=epsilon, grid=options.get("grid", DEFAULT_GRID)))
