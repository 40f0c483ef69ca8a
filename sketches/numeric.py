"""The server mixin of the numeric mean mechanisms (docs/protocols-numeric.md): the exact tables,
the vectorised rounding and encode, validation, the sketch of output cells, the wire, the mean
estimator and the exact per-report variances. The device mixin (grid, ε, one report and the
plain-float variance curve `auto` scores) is client_sdk.protocols.numeric.NumericDevice; its
module docstring describes the contract.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from fractions import Fraction
from typing import Any

import numpy as np

from client_sdk.errors import InvalidPayload
from client_sdk.protocols.numeric import NumericDevice
from client_sdk.randomness import SCALE

from .base import Payloads, ServerHalf, Sketch, first_bad, integers_from_wire, require_1d
from .randomness import RandomLike, RandomSource, as_random_source


def words64(source: RandomSource, count: int) -> np.ndarray:
    """``count`` uniform 64-bit words (uint64), each made of two uniform 32-bit words."""
    return np.ascontiguousarray(source.words(2 * count)).view(np.uint64)


def max_column_ratio(weights: np.ndarray) -> Fraction | float:
    """max_y max_{j,j'} W[j,y]/W[j',y] as an exact Fraction over the outputs some input can
    produce (inf when one input can produce y and another cannot). Float ratios find the
    columns within 1e-9 of the largest; only those are compared exactly."""
    w = np.asarray(weights)   # an integer dtype (exact max/min in numpy) or Python ints
    hi, lo = [int(x) for x in w.max(axis=0)], [int(x) for x in w.min(axis=0)]
    used = [i for i in range(w.shape[1]) if hi[i] > 0]
    if any(lo[i] == 0 for i in used):
        return math.inf
    approx = {i: hi[i] / lo[i] for i in used}
    top = max(approx.values())
    return max(Fraction(hi[i], lo[i]) for i in used if approx[i] >= top * (1 - 1e-9))


@dataclasses.dataclass(frozen=True)
class MeanEstimate:
    """Unbiased estimate of the mean of t (normalised to [−1, 1]) and its estimated variance."""

    mean: float
    variance: float   # Var-hat of ``mean``: sample variance of the debiased reports / n
    n: int
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


class NumericServer(ServerHalf):
    """The server half of a discrete mean mechanism: subclasses provide ``probability_table``,
    ``debiased_values`` and a vectorised ``encode`` from grid indices to ``{"y": cells}``;
    validation, sketch, wire, estimator and exact variances are generic and live here."""

    device: NumericDevice

    # --- what a mechanism defines ---------------------------------------------------------------
    @abc.abstractmethod
    def probability_table(self) -> np.ndarray:
        """P(y | j), shape (K+1, cells), float64: the realised (quantised) probabilities."""

    @abc.abstractmethod
    def debiased_values(self) -> np.ndarray:
        """v(y), shape (cells,): the server's unbiased value of each output (E[v | j] = t_j)."""

    # --- shape ----------------------------------------------------------------------------------
    @property
    def cell_shape(self) -> tuple[int, ...]:
        return (self.device.cells,)

    def grid_points(self) -> np.ndarray:
        """t_j for j = 0..K."""
        return -1.0 + 2.0 * np.arange(self.device.grid + 1) / self.device.grid

    # --- privacy --------------------------------------------------------------------------------
    def output_probabilities(self, index: int) -> np.ndarray:
        return self.probability_table()[index]

    def integer_table(self) -> tuple[np.ndarray, int] | None:
        """(W, S): the sampler's exact law P(y | j) = W[j, y]/S from its integer thresholds (W an
        object array of Python ints), or None where the mechanism has none."""
        return None

    # --- simulation -----------------------------------------------------------------------------
    def discretise(self, t: np.ndarray, rng: RandomLike = None) -> np.ndarray:
        """Randomised rounding of normalised values (clipped to [−1, 1]) to grid indices.

        Rounds up with probability floor(frac·2^32)/2^32, so E[t_j] = t up to 2^-32 of a grid step.
        """
        grid = self.device.grid
        pos = (np.clip(np.asarray(t, dtype=np.float64), -1.0, 1.0) + 1.0) * (grid / 2)
        low = np.floor(pos)
        up_threshold = np.floor((pos - low) * SCALE).astype(np.uint64)
        up = as_random_source(rng).words(pos.shape).astype(np.uint64) < up_threshold
        return np.minimum(low.astype(np.int64) + up, grid)

    def encode_values(self, t: np.ndarray, rng: RandomLike = None) -> Payloads:
        """Normalised values -> randomised reports (discretise, then encode)."""
        source = as_random_source(rng)
        return self.encode(self.discretise(t, source), source)

    # --- collector side -------------------------------------------------------------------------
    def validate(self, payloads: Payloads) -> None:
        cells = self.device.cells
        y = require_1d(payloads, "y")
        if y.dtype.kind not in "iu":
            raise InvalidPayload("a numeric report must be an integer output cell", field="y")
        bad = (y < 0) | (y >= cells)
        if bad.any():
            i = first_bad(bad)
            raise InvalidPayload(f"value {int(y[i])} outside [0, {cells})", index=i, field="y")

    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        y = np.asarray(payloads["y"], dtype=np.int64)
        sketch.counts[0] += np.bincount(y, minlength=self.device.cells)
        sketch.reports[0] += y.shape[0]

    def to_wire(self, payloads: Payloads) -> list[Any]:
        return [int(v) for v in payloads["y"]]

    def from_wire(self, objects: list[Any]) -> Payloads:
        return {"y": integers_from_wire(objects, self.device.cells, "y")}

    # --- estimators side ------------------------------------------------------------------------
    def estimate(self, sketch: Sketch) -> MeanEstimate:  # type: ignore[override]
        """Mean of the debiased reports and its variance from their own spread, max(s², v_min)/n.

        v_min = min_j Var[v | j] is the smallest per-report variance any data can have (the
        rounding between grid points only adds to it), so the floor never exceeds the true
        variance of the mean; it matters when the reports happen to agree — e.g. duchi at
        ε = 4 with every value at lo, where each report is −C with probability 0.98 and a
        sample of 30 often has s² = 0, a zero-width interval that misses the truth.
        """
        h = sketch.counts.reshape(-1).astype(np.float64)
        n = int(sketch.total_reports)
        if n <= 0:
            return MeanEstimate(math.nan, math.nan, 0)
        v = self.debiased_values()
        mean = float(h @ v) / n
        if n < 2:
            return MeanEstimate(mean, math.inf, n)
        centred = v - mean
        sample_var = float(h @ (centred * centred)) / (n - 1)
        floor = max(float(self.report_variance().min()), 0.0)
        return MeanEstimate(mean, max(sample_var, floor) / n, n)

    def report_variance(self) -> np.ndarray:
        """Exact Var[v(y) | j] for every grid point j (shape (K+1,))."""
        table = self.probability_table()
        v = self.debiased_values()
        t = self.grid_points()
        return table @ (v * v) - t * t

    def value_variance(self, t: np.ndarray | float) -> np.ndarray:
        """Exact per-report variance for raw normalised values t, randomised rounding included."""
        grid = self.device.grid
        t = np.clip(np.asarray(t, dtype=np.float64), -1.0, 1.0)
        second = self.report_variance() + self.grid_points() ** 2   # E[v² | j]
        pos = (t + 1.0) * (grid / 2)
        low = np.minimum(np.floor(pos).astype(np.int64), grid - 1)
        frac = pos - low
        return (1 - frac) * second[low] + frac * second[low + 1] - t * t

    def variance(self, n: int, true_counts: np.ndarray | float) -> np.ndarray:
        """Var of the mean of n reports whose values all equal t (``true_counts`` is t here)."""
        return self.value_variance(true_counts) / n


__all__ = ["MeanEstimate", "NumericServer", "max_column_ratio", "words64"]
