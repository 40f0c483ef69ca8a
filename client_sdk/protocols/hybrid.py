"""Wang et al. (2019)'s Hybrid Mechanism: the Piecewise Mechanism with probability α, else Duchi.

Both parts run at the same ε on the same input grid (K steps). Outputs: the Piecewise cells
0..M−1, then two cells M (Duchi's bit 0) and M + 1 (bit 1). The mixture weight α is a 32-bit
threshold H (α = H/2^32) drawn independently of the input, so for every output cell the
ratio P(c | j)/P(c | j') is that of the part owning the cell: ε(HM) = max(ε(PM), ε(Duchi))
over the parts with positive weight. Each part's debiased value is unbiased for t_j, so the
mixture's is too, and E[v² | j] = α·E_PM[v² | j] + (1 − α)·E_Duchi[v² | j].

Wang et al. use α = 1 − e^{−ε/2} above ε* ≈ 0.61 and α = 0 below, which makes the continuous
variance flat in t, (a+3)/(3a(a−1)) + (e^ε+1)²/(a(e^ε−1)²) with a = e^{ε/2}: 4.29 at ε = 1,
1.04 at ε = 2, 0.219 at ε = 4 on [−1, 1]. Here α (and the Piecewise window) minimise the
exact worst-case variance of the discrete mechanism instead (a convex minimax in α, solved by
golden-section search); ``HybridParams(alpha=..., window=...)`` reproduces the paper's choice.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

from ..randomness import OS_WORDS, SCALE, WordSource
from .blocks import BlockProtocol, BlockReader, MeanEncoder
from .duchi import Duchi, DuchiBlock, DuchiParams, check_duchi
from .numeric import NumericDevice, check_grid_and_epsilon
from .piecewise import MAX_GRID, Piecewise, PiecewiseBlock, PiecewiseParams, check_piecewise

DEFAULT_GRID = 256
_GOLDEN = (math.sqrt(5) - 1) / 2


def paper_alpha(epsilon: float) -> float:
    """Wang et al. (2019)'s mixture weight: 1 − e^{−ε/2} above ε* ≈ 0.61, else 0."""
    return 1.0 - math.exp(-epsilon / 2) if epsilon > 0.61 else 0.0


def _variance_curves(pm: Piecewise, duchi: Duchi) -> tuple[list[float], list[float]]:
    """Per-report variance of each part on the fine grid ``worst_case_variance`` scans (plain
    floats: devices resolve the mixture too)."""
    return list(pm.variance_curve()), list(duchi.variance_curve())


#: Lines within this (relative) of the upper envelope somewhere on [0, 1] are kept by
#: ``_envelope_lines``: far above rounding (~1e-16), so the kept ones hold every line whose
#: computed value can be the largest at some α.
ENVELOPE_SLACK = 1e-9


def _envelope_lines(a_curve: list[float], b_curve: list[float]) -> list[int]:
    """Indices t of the lines α ↦ α·a_t + (1 − α)·b_t that come within ENVELOPE_SLACK of their
    upper envelope on [0, 1]. The envelope is convex and piecewise linear; a line's gap to it
    is convex, so it is smallest at an envelope breakpoint or an end: walking the breakpoints
    from α = 0 and measuring every gap there finds the lines that matter (usually a handful)."""
    # A line below another at both ends (a_t <= a_t', b_t <= b_t') is below it everywhere, also
    # after rounding (rounding is monotone): only the Pareto front of (a, b) can be the largest.
    front, highest_b = [], -math.inf
    # by (−a, −b), ties in index order (what a stable sort on that key gives), without a call per line
    for _, _, t in sorted(zip([-a for a in a_curve], [-b for b in b_curve], range(len(a_curve)))):
        if b_curve[t] > highest_b:
            front.append(t)
            highest_b = b_curve[t]
    a_curve, b_curve = [a_curve[t] for t in front], [b_curve[t] for t in front]
    n = len(a_curve)
    slope = [x - y for x, y in zip(a_curve, b_curve)]
    current = max(range(n), key=lambda t: (b_curve[t], slope[t]))
    points, alpha = [0.0], 0.0
    while True:  # the next line to overtake the current one, at the smallest α beyond this one
        # (x, −slope, t): the smallest crossing, then the steepest line, then the first index.
        # Along the front a falls and b rises strictly, so a − b never rises: the steeper lines
        # all come before the current one (ties in the rounded slope are still filtered out).
        b_now, s_now = b_curve[current], slope[current]
        crossings = [((b_now - b_curve[t]) / (slope[t] - s_now), -slope[t], t)
                     for t in range(current) if slope[t] > s_now]
        ahead = [c for c in crossings if alpha < c[0] < 1.0]
        if not ahead:
            break
        alpha, _, current = min(ahead)
        points.append(alpha)
    points.append(1.0)
    near: set[int] = set()
    for p in points:  # every line's value there, computed once for the envelope and the gaps
        values = [b + p * s for b, s in zip(b_curve, slope)]
        e = max(values)
        tol = ENVELOPE_SLACK * (abs(e) + 1.0)
        near.update([t for t, v in enumerate(values) if e - v <= tol])
    return sorted(front[t] for t in near)


@functools.lru_cache(maxsize=64)
def _best_threshold(epsilon: float, grid: int, window: int | None) -> int:
    return best_threshold(*_parts(epsilon, grid, window))


def best_threshold(pm: Piecewise, duchi: Duchi) -> int:
    """H = α·2^32 minimising max_t [α·Var_PM(t) + (1 − α)·Var_Duchi(t)] (convex in α).

    The maximum over t scans only the lines near the envelope (``_envelope_lines``): the same
    floats as scanning them all, in a fraction of the time (devices run this for ``auto``)."""
    a_curve, b_curve = _variance_curves(pm, duchi)
    kept = _envelope_lines(a_curve, b_curve)
    a_kept, b_kept = [a_curve[t] for t in kept], [b_curve[t] for t in kept]

    def worst(alpha: float) -> float:
        beta = 1 - alpha
        return max([alpha * a + beta * b for a, b in zip(a_kept, b_kept)])

    lo, hi = 0.0, 1.0
    for _ in range(60):
        m1, m2 = hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo)
        if worst(m1) <= worst(m2):
            hi = m2
        else:
            lo = m1
    candidates = {0, SCALE, round((lo + hi) / 2 * SCALE)}
    return min(candidates, key=lambda h: (worst(h / SCALE), h))


@functools.lru_cache(maxsize=64)
def _parts(epsilon: float, grid: int, window: int | None) -> tuple[Piecewise, Duchi]:
    return Piecewise(PiecewiseParams(epsilon, grid, window)), Duchi(DuchiParams(epsilon, grid))


@dataclasses.dataclass(frozen=True)
class HybridParams:
    epsilon: float               # target per-report budget
    grid: int = DEFAULT_GRID     # K: input grid steps over [−1, 1]
    alpha: float | None = None   # P(Piecewise); None = minimise the worst-case variance
    window: int | None = None    # Piecewise window; None = minimise its worst-case variance

    def __post_init__(self) -> None:
        check_grid_and_epsilon(self.grid, self.epsilon, "hybrid")
        if self.grid > MAX_GRID:
            raise ValueError(f"hybrid: grid must be at most {MAX_GRID}, got {self.grid}")
        if self.alpha is not None and not 0.0 <= self.alpha <= 1.0:
            raise ValueError("hybrid: alpha must be in [0, 1]")


class Hybrid(NumericDevice):
    """Mixture of discrete Piecewise (cells 0..M−1) and Duchi (cells M, M+1): the device half
    (its server half, sketches.hybrid, calls the parts' server halves)."""

    name = "hybrid"

    def __init__(self, params: HybridParams) -> None:
        super().__init__(params)
        self._pm, self._duchi = _parts(params.epsilon, params.grid, params.window)
        if params.alpha is None:
            self._h = _best_threshold(params.epsilon, params.grid, params.window)
        else:
            self._h = round(params.alpha * SCALE)
        self._m = self._pm.cells

    def second_moments(self) -> list[float]:
        mix = self._h / SCALE
        return [mix * a + (1 - mix) * b for a, b in zip(self._pm.second_moments(), self._duchi.second_moments())]

    @property
    def grid(self) -> int:
        return self.params.grid

    @property
    def cells(self) -> int:
        return self._m + 2

    @property
    def threshold(self) -> int:
        """H: a 32-bit word below it picks the Piecewise part (α = H/2^32)."""
        return self._h

    @property
    def alpha(self) -> float:
        """The realised mixture weight P(Piecewise) = H/2^32."""
        return self._h / SCALE

    @property
    def parts(self) -> tuple[Piecewise, Duchi]:
        return self._pm, self._duchi

    @property
    def epsilon(self) -> float:
        used = ([self._pm.epsilon] if self._h > 0 else []) + ([self._duchi.epsilon] if self._h < SCALE else [])
        return max(used)

    def encoder_block(self) -> dict[str, Any]:
        return {"grid": self.grid, "h": int(self.alpha * (1 << 32)), "piecewise": self._pm.encoder_block(),
                "duchi": self._duchi.encoder_block()}


OPTION_KEYS: frozenset[str] = frozenset({"grid"})


def from_options(domain_size: int | None, epsilon: float, options: dict[str, Any]) -> Hybrid:
    """Build from registry fields (the domain size is not used: numeric metrics have a range)."""
    return Hybrid(HybridParams(epsilon=epsilon, grid=options.get("grid", DEFAULT_GRID)))


class HybridBlock(MeanEncoder):
    """The hybrid mechanism's one-report encoder from the block: u = W32; u < h: the nested
    piecewise draw (cells 0 … K + w − 1), else K + w + the nested Duchi draw."""

    __slots__ = ("h", "piecewise", "duchi", "offset")

    def __init__(self, block: Mapping[str, Any]) -> None:
        super().__init__(block)
        self.h: int = block["h"]
        self.piecewise = PiecewiseBlock(block["piecewise"])
        self.duchi = DuchiBlock(block["duchi"])
        self.offset = self.piecewise.grid + self.piecewise.window   # Duchi's cells follow the piecewise ones

    def randomise(self, index: int, source: WordSource = OS_WORDS) -> int:
        """One output cell of grid index ``index``."""
        if source.word() < self.h:
            return self.piecewise.randomise(index, source)
        return self.offset + self.duchi.randomise(index, source)


def check_block(reader: BlockReader) -> None:
    """(10) the nested piecewise window, (11) the nested Duchi thresholds."""
    check_piecewise(reader, reader.block.get("piecewise"), "piecewise.")
    check_duchi(reader, reader.block.get("duchi"), "duchi.")


#: ``h`` is P(the piecewise part) out of 2^32.
BLOCK = BlockProtocol(HybridBlock, check_block, thresholds=("h",), members=("grid", "h", "piecewise", "duchi", "range"))
