"""Mean mechanisms for numeric metrics: the shared contract and its generic verbs.

A numeric metric's value x in [lo, hi] is clipped and mapped to t = 2(x − lo)/(hi − lo) − 1 in
[−1, 1] by the registry; everything here works on that normalised t.

Floating-point noise is not ε-DP (Mironov 2012: the set of doubles a textbook Laplace
sampler can reach depends on the input), so every mechanism here is *discrete*:

1. ``discretise``: t is rounded at random to the input grid t_j = −1 + 2j/K (j = 0..K), up
   with probability equal to its fractional position, so E[t_j] = t. The rounding happens
   before any privacy-relevant randomness: whatever the raw value, the report is drawn from
   one of the K+1 rows below, so the guarantee is that of the rows.
2. ``encode``: grid index j -> an output cell y in [0, cells), drawn by integer threshold
   tests on uniform words, so P(y | j) is a rational number the mechanism realises exactly.
   ``probability_table()[j, y]`` is that number; the quoted epsilon is
   ``max_y max_{j,j'} ln P(y|j)/P(y|j')`` over the realised table (the privacy audit checks it).
3. ``debiased_values()[y]``: the server's unbiased value of output y, E[v(y) | j] = t_j exactly.

The sketch of one metric and window is the histogram of output cells (``counts[0, y]``), so
it is additive and fixed-size, and validation is "an integer cell in range". The estimate of
the mean is Σ_y h_y v(y)/n; its standard error comes from the spread of the reports' own
debiased values (so it is honest for any data, not only for the worst case).

This module is the device mixin, ``NumericDevice`` (docs/design.md, "Two halves"): the grid, the
one-value rounding ``discretise_one``, the uniform one-report encoder, and what ``auto`` scores
— the per-report variance curve from each mechanism's plain-float second moments — with no
numpy at any level. The tables, the vectorised rounding and encode, validation, the sketch and
the estimator are the server mixin's, ``sketches.numeric.NumericServer``.
"""

from __future__ import annotations

import abc
import functools
import math
from typing import Any

from ..randomness import OS_WORDS, WordSource
from .device import DeviceHalf

#: Mechanisms whose probabilities need finer steps than 2^-32 test 64-bit words against them.
SCALE64 = 1 << 64


@functools.lru_cache(maxsize=8)
def fine_grid(grid: int) -> tuple[float, ...]:
    """The points ``worst_case_variance`` scans, ``linspace_list(−1, 1, 8·grid + 1)``: built once
    per grid (``auto`` scans it for every numeric mechanism, and Hybrid for both its parts)."""
    return tuple(linspace_list(-1.0, 1.0, 8 * grid + 1))


@functools.lru_cache(maxsize=8)
def _fine_steps(grid: int) -> tuple[tuple[int, float, float, float], ...]:
    """For each t of ``fine_grid(grid)``: (low, 1 − frac, frac, t·t) as ``value_variances``
    computes them (low = ⌊(t + 1)·K/2⌋, at most K − 1; frac the rest)."""
    half, last, out = grid / 2, grid - 1, []
    for t in fine_grid(grid):
        pos = (t + 1.0) * half
        low = int(pos)  # floor: pos >= 0
        if low > last:
            low = last
        frac = pos - low
        out.append((low, 1 - frac, frac, t * t))
    return tuple(out)


def linspace_list(start: float, stop: float, num: int) -> list[float]:
    """``numpy.linspace(start, stop, num)`` in plain floats, bit for bit (i·step + start, the
    last point set to stop): devices build grids and bucket edges without numpy."""
    if num == 1:
        return [float(start)]
    div = num - 1
    delta = stop - start
    step = delta / div
    out = [i * step + start for i in range(num)] if step != 0 else [i / div * delta + start for i in range(num)]
    out[-1] = float(stop)
    return out


#: ``NumericDevice.variance_curve``'s cache, (class, params) -> curve; cleared when full.
_CURVES: dict[tuple[type, Any], tuple[float, ...]] = {}
_CURVES_KEPT = 64

#: Numeric mean mechanisms, in the order `ldpt plan` lists them.
NUMERIC_PROTOCOL_NAMES = ("laplace", "duchi", "bitmean", "piecewise", "hybrid")


def check_grid_and_epsilon(grid: int, epsilon: float, protocol: str) -> None:
    """The checks every numeric params class starts with."""
    if isinstance(grid, bool) or not isinstance(grid, int) or not 2 <= grid <= 65_536 or grid % 2:
        raise ValueError(f"{protocol}: grid must be an even integer in [2, 65536], got {grid!r}")
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError("epsilon must be a positive finite number")


class NumericDevice(DeviceHalf):
    """The device half of a discrete mean mechanism on the input grid t_j = −1 + 2j/K, j = 0..K.

    Subclasses provide ``grid`` (K), ``cells``, ε from their integer thresholds, ``second_moments``
    (E[v² | j] in plain floats) and an encoder block whose block encoder maps a grid index to an output cell; the server
    half (``sketches.numeric.NumericServer``) adds the tables and the vectorised verbs.
    """

    # --- what a mechanism defines ---------------------------------------------------------------
    @property
    @abc.abstractmethod
    def grid(self) -> int:
        """K: the input grid has K+1 points −1, −1 + 2/K, ..., 1."""

    @property
    @abc.abstractmethod
    def cells(self) -> int:
        """Number of distinct outputs (cells of the sketch histogram)."""

    @abc.abstractmethod
    def second_moments(self) -> list[float]:
        """E[v(y)² | j] for j = 0..K as plain floats, from the mechanism's integer weights: what
        ``worst_case_variance`` (and with it ``auto``, on devices too) needs."""

    # --- shape ----------------------------------------------------------------------------------
    @property
    def domain_size(self) -> int:
        """Input grid points (K+1); encode takes grid indices in [0, K]."""
        return self.grid + 1

    @property
    def payload_bits(self) -> int:
        return max(1, math.ceil(math.log2(self.cells)))

    # --- one report -----------------------------------------------------------------------------
    def discretise_one(self, t: float, source: WordSource | None = None) -> int:
        """Randomised rounding of one normalised value (clipped to [−1, 1]) to a grid index, in plain
        Python: the block encoder's (``blocks.MeanEncoder.discretise_one``), up with probability
        floor(frac·2^32)/2^32, so E[t_j] = t up to 2^-32 of a grid step
        (``sketches.numeric.NumericServer.discretise`` is the batch form)."""
        return self.block_encoder.discretise_one(t, source or OS_WORDS)

    def report_index(self, t: float, secret: bytes, metric: str) -> int:
        """The grid index a device reports for normalised t: randomised rounding with fresh coins
        (``discretise_one``); a memoised mean rounds by its secret instead (memobitmean)."""
        return self.discretise_one(t)

    # --- what auto scores -----------------------------------------------------------------------
    def value_variance_one(self, t: float, second: list[float]) -> float:
        """The exact per-report variance of one raw normalised t (randomised rounding included)
        from ``second_moments()``, in plain floats."""
        t = min(1.0, max(-1.0, float(t)))
        pos = (t + 1.0) * (self.grid / 2)
        low = min(math.floor(pos), self.grid - 1)
        frac = pos - low
        return (1 - frac) * second[low] + frac * second[low + 1] - t * t

    def value_variances(self, ts: list[float], second: list[float]) -> list[float]:
        """``value_variance_one`` of each t in [−1, 1] (no clipping needed), in one loop: the
        same floating-point operations, without a call per point."""
        k = self.grid
        half, last = k / 2, k - 1
        out = []
        for t in ts:
            pos = (t + 1.0) * half
            low = int(pos)  # floor: pos >= 0
            if low > last:
                low = last
            frac = pos - low
            out.append((1 - frac) * second[low] + frac * second[low + 1] - t * t)
        return out

    def variance_curve(self) -> tuple[float, ...]:
        """The per-report variance at every point of ``fine_grid(grid)``, computed once per
        (mechanism, params) in the process: ``auto`` scans Piecewise and Duchi, and Hybrid's
        mixture search then needs the same two curves (the same floats; a mechanism's law is a
        function of its class and params)."""
        try:  # a class may declare (``law_class``, not inherited) that it is another's law renamed
            key = (type(self).__dict__.get("law_class", type(self)), self.params)
            curve = _CURVES.get(key)
        except TypeError:  # unhashable params: no caching
            key, curve = None, None
        if curve is None:
            second = self.second_moments()
            # value_variances(fine_grid(grid), second), the same operations on the same floats,
            # with each point's (low, 1 − frac, frac, t²) computed once per grid
            curve = tuple([om * second[lo] + f * second[lo + 1] - tt for lo, om, f, tt in _fine_steps(self.grid)])
            if key is not None:
                if len(_CURVES) >= _CURVES_KEPT:
                    _CURVES.clear()
                _CURVES[key] = curve
        return curve

    def worst_case_variance(self) -> float:
        """max over t in [−1, 1] of the per-report variance (grid points and 8 points between),
        in plain Python (``auto`` runs it on devices)."""
        return max(self.variance_curve())

    def variance(self, n: int, true_count: float) -> float:
        """Var of the mean of n reports whose values all equal t (``true_count`` is t here), in
        plain floats (the server's array form: ``sketches.numeric.NumericServer.variance``)."""
        return self.value_variance_one(true_count, self.second_moments()) / n


__all__ = ["NUMERIC_PROTOCOL_NAMES", "SCALE64", "NumericDevice", "check_grid_and_epsilon", "fine_grid",
           "linspace_list"]
