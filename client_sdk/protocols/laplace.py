"""The Laplace mechanism made exact: discrete Laplace (two-sided geometric) noise on the grid.

The textbook local mechanism adds Laplace noise of scale 2/ε to t in [−1, 1]; its per-report
variance is 2·(2/ε)² = 8/ε². Floating-point Laplace noise is not ε-DP (Mironov 2012), so here
the noise is integer-valued: the discretised input j (grid t_j = −1 + 2j/K) gets
Z ~ two-sided geometric with P(Z = z) ∝ α^|z|, α = e^{−ε/K} (Ghosh, Roughgarden, Sundararajan
2009's geometric mechanism), which moves j by one grid step at a privacy cost of ε/K, i.e. the
whole range at ε. The output y = clamp(j + Z, −L, K + L) has M = K + 2L + 1 cells.

Exact integer weights (out of 2^64, drawn by inverse CDF on a 64-bit word made of two 32-bit
words): W(0) is the centre, W(z+1) = ceil(α·W(z)) for z >= 0 (so W(z)/W(z+1) <= 1/α), the
noise is clamped at ±N = ±(K + L) with a lump W(N) = ceil(α·W(N−1)/(1−α)) standing in for the
geometric tail (so every tail sum S(m) = Σ_{z>=m} W(z) also has S(m)/S(m+1) <= 1/α), and W(0)
absorbs the rounding so each row sums to exactly 2^64. Every ratio of the realised table is
then at most α^{−K}; the quoted epsilon is the table's own max ratio, and the internal ε is
adjusted (a few rebuilds) until that is <= the target and within ``EPSILON_TOLERANCE`` of it.

Window and bias. L is the smallest window with tail mass α^L/(1+α) <= ``TAIL_MASS``/2, so for
every input at most ``TAIL_MASS`` = 1e-12 of the probability is clamped. The two end cells
carry the geometric tail's memoryless mean, v = −L − α/(1−α) (and K + L + α/(1−α)), so even
that clamp is unbiased up to the integer rounding; the server half's ``bias()``
(sketches.laplace) computes the exact residual from the realised table (about 1e-13 or less;
tests/test_numeric_mechanisms.py checks it).
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import functools
import itertools
import math
import operator
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from ..randomness import OS_WORDS, WordSource
from ._epsilon import log_up
from .blocks import BlockProtocol, BlockReader, MeanEncoder
from .numeric import SCALE64, NumericDevice, check_grid_and_epsilon

DEFAULT_GRID = 32
#: Largest probability clamped into an end cell, for any input.
TAIL_MASS = 1e-12
#: Refuse parameters whose output alphabet (tiny ε) or probability table (huge grid) would
#: exceed these: the table is (K+1) × cells integers, built when the protocol is.
MAX_CELLS = 1 << 17
MAX_TABLE_ENTRIES = 1 << 23
#: The realised epsilon is within this of the target (from below).
EPSILON_TOLERANCE = 1e-6


def _window(alpha_log: float) -> int:
    """L: smallest integer with α^L/(1+α) <= TAIL_MASS/2, where ln α = alpha_log < 0."""
    alpha = math.exp(alpha_log)
    return max(1, math.ceil(math.log(TAIL_MASS / 2 * (1 + alpha)) / alpha_log))


def _noise_weights(eps_internal: float, grid: int, window: int) -> list[int]:
    """Integer weights W(z), z = −N..N (N = K + L), summing to 2^64; see the module docstring."""
    alpha = math.exp(-eps_internal / grid)
    n = grid + window
    half = [math.ceil(SCALE64 * (1 - alpha) / (1 + alpha))]
    for _ in range(1, n):
        half.append(math.ceil(alpha * half[-1]))
    lump = math.ceil(alpha * half[-1] / (1 - alpha))
    if half[-1] < 1 or lump < 1:
        raise ValueError("epsilon too small for 64-bit noise weights")
    half.append(lump)
    centre = SCALE64 - 2 * sum(half[1:])
    if centre < half[1]:
        raise ValueError("noise weights do not normalise")
    half[0] = centre
    return half[:0:-1] + half


@dataclasses.dataclass(frozen=True)
class LaplaceParams:
    epsilon: float            # target per-report budget
    grid: int = DEFAULT_GRID  # K: input grid steps over [−1, 1]

    def __post_init__(self) -> None:
        check_grid_and_epsilon(self.grid, self.epsilon, "laplace")
        if self.epsilon < 1e-3 or self.window > (MAX_CELLS - self.grid) // 2:
            raise ValueError(f"laplace: epsilon {self.epsilon} needs more than {MAX_CELLS} output cells "
                             f"with {self.grid} grid steps; use a larger epsilon or another protocol")
        if (self.grid + 1) * (self.grid + 2 * self.window + 1) > MAX_TABLE_ENTRIES:
            raise ValueError(f"laplace: grid {self.grid} at epsilon {self.epsilon} needs a probability "
                             f"table over {MAX_TABLE_ENTRIES} entries; use a smaller grid")

    @property
    def window(self) -> int:
        """L: output cells beyond each end of the input grid (from the target ε)."""
        return _window(-self.epsilon / self.grid)


class Laplace(NumericDevice):
    """Discrete Laplace mechanism's device half; output cell index c = y + L for y in [−L, K + L]
    (its server half, with the table and the vectorised inverse CDF: sketches.laplace)."""

    name = "laplace"

    def __init__(self, params: LaplaceParams) -> None:
        super().__init__(params)
        k, window = params.grid, params.window
        self._k, self._l, self._n = k, window, k + window
        self._eps_internal, self._weights, self._epsilon = self._calibrate(params.epsilon)
        # inverse CDF: noise index i in [0, 2N] is the number of boundaries <= u
        bounds, acc = [], 0
        for w in self._weights[:-1]:
            acc += w
            bounds.append(acc)
        self._bounds = bounds
        alpha = math.exp(-self._eps_internal / k)
        y = [float(v) for v in range(-window, k + window + 1)]
        y[0] -= alpha / (1 - alpha)     # memoryless mean of the clamped lower tail
        y[-1] += alpha / (1 - alpha)
        self._value_list = [-1.0 + 2.0 * v / k for v in y]

    @property
    def bounds(self) -> list[int]:
        """The inverse CDF's boundaries out of 2^64: a word u gives noise index #{bounds <= u}."""
        return self._bounds

    @property
    def noise_weights(self) -> list[int]:
        """W(z) for z = −N..N (N = K + L), out of 2^64 (module docstring)."""
        return self._weights

    @property
    def value_list(self) -> list[float]:
        """The debiased value of every output cell, the two end cells the tails' memoryless means."""
        return self._value_list

    def second_moments(self) -> list[float]:
        """E[v² | j] from the integer rows (``_integer_rows``), in plain floats."""
        sq = [v * v for v in self._value_list]
        scale = float(SCALE64)
        # each row is a slice of the weights with its two clamped ends replaced
        # (``_integer_rows``): convert the weights once, the ends per row (the same floats)
        k, window = self._k, self._l
        cells = k + 2 * window + 1
        shared = [float(w) / scale for w in self._weights]
        out = []
        for j, row in enumerate(_integer_rows(self._weights, k, window)):
            probs = shared[k - j:k - j + cells]
            probs[0], probs[-1] = float(row[0]) / scale, float(row[-1]) / scale
            out.append(sum(map(operator.mul, probs, sq)))
        return out

    # --- construction ---------------------------------------------------------------------------
    def _calibrate(self, target: float) -> tuple[float, list[int], float]:
        """Internal ε whose realised table has target − EPSILON_TOLERANCE <= ε' <= target."""
        best = None
        eps_int = target
        for _ in range(8):
            weights = _noise_weights(eps_int, self._k, self._l)
            realised = _max_log_ratio_of_weights(weights, self._k, self._l)
            if realised <= target and (best is None or realised > best[2]):
                best = (eps_int, weights, realised)
            if realised <= target and target - realised <= EPSILON_TOLERANCE:
                break
            if realised < target:
                eps_int += (target - realised) * 0.999
            else:   # at least a quarter tolerance down: ε' can exceed the target by one ulp, and a
                # step proportional to that gap would crawl down one ulp per rebuild
                eps_int -= max((realised - target) * 1.001, EPSILON_TOLERANCE / 4)
        if best is None or best[2] <= 0:
            raise ValueError(f"laplace: cannot realise epsilon {target} with {self._k} grid steps")
        return best

    # --- the mechanism ----------------------------------------------------------------------------
    @property
    def grid(self) -> int:
        return self._k

    @property
    def cells(self) -> int:
        return self._k + 2 * self._l + 1

    @property
    def window(self) -> int:
        return self._l

    @property
    def epsilon(self) -> float:
        return self._epsilon

    def encoder_block(self) -> dict[str, Any]:
        # the bounds out of 2^64 as decimal strings (client_sdk.encoder_block: beyond 2^53)
        return {"grid": self._k, "window": self._l, "bounds": [str(b) for b in self._bounds]}


def _integer_rows(weights: list[int], k: int, window: int) -> list[list[int]]:
    """The server's integer table (``sketches.laplace``) as lists of Python ints (plain Python: built on devices)."""
    n, cells = k + window, k + 2 * window + 1
    prefix = list(itertools.accumulate(weights, initial=0))
    rows = []
    for j in range(k + 1):
        row = weights[k - j:k - j + cells]  # column c holds W[c + K − j]
        row[0] = prefix[n - window - j + 1]
        row[-1] = prefix[-1] - prefix[n + k + window - j]
        rows.append(row)
    return rows


def _sliding(values: list[int], width: int, pick: Any) -> list[int]:
    """pick (max or min) of every window values[c:c+width], in O(len) (a monotone deque)."""
    out, window = [], collections.deque()
    larger = pick is max   # pop the back while pick(back, v) is v and not back: v beats it
    for i, v in enumerate(values):
        while window and (values[window[-1]] < v if larger else values[window[-1]] > v):
            window.pop()
        window.append(i)
        if window[0] <= i - width:
            window.popleft()
        if i >= width - 1:
            out.append(values[window[0]])
    return out


def _max_log_ratio_of_weights(weights: list[int], k: int, window: int) -> float:
    """The exact largest log ratio of the integer table of ``weights``, in plain Python: interior column c
    holds the K+1 weights W[c .. c+K] (a sliding window), the two end columns the clamped
    tails; the largest column ratio max/min is taken exactly (``sketches.numeric.max_column_ratio``)."""
    rows = _integer_rows(weights, k, window)
    cells = k + 2 * window + 1
    highs = _sliding(weights, k + 1, max)[1:cells - 1]
    lows = _sliding(weights, k + 1, min)[1:cells - 1]
    for col in (0, cells - 1):
        column = [row[col] for row in rows]
        highs.append(max(column))
        lows.append(min(column))
    if min(lows) == 0:
        return math.inf
    # the exact largest ratio, its log rounded up (``_epsilon.log_up``): an upper bound, as quoted
    # (the largest h/lo by integer cross-multiplication: one Fraction, not one per column)
    h, lo = functools.reduce(lambda x, y: y if y[0] * x[1] > x[0] * y[1] else x, zip(highs, lows))
    return log_up(Fraction(h, lo))


OPTION_KEYS: frozenset[str] = frozenset({"grid"})


def from_options(domain_size: int | None, epsilon: float, options: dict[str, Any]) -> Laplace:
    """Build from registry fields (the domain size is not used: numeric metrics have a range)."""
    return Laplace(LaplaceParams(epsilon=epsilon, grid=options.get("grid", DEFAULT_GRID)))


class LaplaceBlock(MeanEncoder):
    """Discrete Laplace's one-report encoder from the block: u = W64; i = the number of bounds ≤ u;
    y = min(max(j + i − K, 0), K + 2L)."""

    __slots__ = ("bounds", "last")

    def __init__(self, block: Mapping[str, Any]) -> None:
        super().__init__(block)
        self.bounds = [int(b) for b in block["bounds"]]   # out of 2^64, decimal strings in the block
        self.last = self.grid + 2 * block["window"]

    def randomise(self, index: int, source: WordSource = OS_WORDS) -> int:
        """One output cell of grid index ``index``."""
        i = bisect.bisect_right(self.bounds, source.word64())
        return min(max(index + i - self.grid, 0), self.last)


def check_block(reader: BlockReader) -> None:
    """(12) the inverse CDF: 2·(K + L) non-decreasing bounds out of 2^64."""
    grid = reader.block.get("grid")
    window, bounds = reader.int("window"), reader.block.get("bounds")
    if not isinstance(bounds, list) or len(bounds) != 2 * (grid + window):
        reader.fail("bounds", f"bounds must hold 2 × (grid + window) = {2 * (grid + window)} words")
    words = [reader.u64(b, "bounds") for b in bounds]
    if any(x > y for x, y in zip(words, words[1:])):
        reader.fail("bounds", "bounds must be non-decreasing")


BLOCK = BlockProtocol(LaplaceBlock, check_block, members=("grid", "window", "bounds", "range"))
