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
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import math
from fractions import Fraction
from typing import Any

from .._lazy import np
from ..errors import InvalidPayload
from ..randomness import OS_WORDS, SCALE, RandomLike, RandomSource, WordSource, as_random_source
from ._epsilon import log_up
from .base import Payloads, Protocol, Sketch, first_bad, integers_from_wire, require_1d

#: Mechanisms whose probabilities need finer steps than 2^-32 test 64-bit words against them.
SCALE64 = 1 << 64


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


def exact_max_log_ratio(protocol: "NumericProtocol") -> float:
    """log_up of the worst ratio of the sampler's table (integer where available, else the
    float table taken exactly)."""
    exact = protocol.integer_table()
    weights = exact[0] if exact is not None else \
        np.vectorize(Fraction, otypes=[object])(protocol.probability_table())
    return log_up(max_column_ratio(weights))


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


#: ``NumericProtocol.variance_curve``'s cache, (class, params) -> curve; cleared when full.
_CURVES: dict[tuple[type, Any], tuple[float, ...]] = {}
_CURVES_KEPT = 64

#: Numeric mean mechanisms, in the order `ldpt plan` lists them.
NUMERIC_PROTOCOL_NAMES = ("laplace", "duchi", "bitmean", "piecewise", "hybrid")


@dataclasses.dataclass(frozen=True)
class MeanEstimate:
    """Unbiased estimate of the mean of t (normalised to [−1, 1]) and its estimated variance."""

    mean: float
    variance: float   # Var-hat of ``mean``: sample variance of the debiased reports / n
    n: int
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


def check_grid_and_epsilon(grid: int, epsilon: float, protocol: str) -> None:
    """The checks every numeric params class starts with."""
    if isinstance(grid, bool) or not isinstance(grid, int) or not 2 <= grid <= 65_536 or grid % 2:
        raise ValueError(f"{protocol}: grid must be an even integer in [2, 65536], got {grid!r}")
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError("epsilon must be a positive finite number")


class NumericProtocol(Protocol):
    """A discrete mean mechanism on the input grid t_j = −1 + 2j/K, j = 0..K.

    Subclasses provide ``grid`` (K), ``cells``, ``probability_table``, ``debiased_values``
    and a vectorised ``encode`` from grid indices to ``{"y": cells}``. Everything else
    (validation, sketch, wire, estimator, exact variances) is generic and lives here.
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
    def probability_table(self) -> np.ndarray:
        """P(y | j), shape (K+1, cells), float64: the realised (quantised) probabilities."""

    @abc.abstractmethod
    def debiased_values(self) -> np.ndarray:
        """v(y), shape (cells,): the server's unbiased value of each output (E[v | j] = t_j)."""

    # --- shape ----------------------------------------------------------------------------------
    @property
    def domain_size(self) -> int:
        """Input grid points (K+1); encode takes grid indices in [0, K]."""
        return self.grid + 1

    @property
    def cell_shape(self) -> tuple[int, ...]:
        return (self.cells,)

    @property
    def payload_bits(self) -> int:
        return max(1, math.ceil(math.log2(self.cells)))

    def grid_points(self) -> np.ndarray:
        """t_j for j = 0..K."""
        return -1.0 + 2.0 * np.arange(self.grid + 1) / self.grid

    # --- privacy --------------------------------------------------------------------------------
    def output_probabilities(self, index: int) -> np.ndarray:
        return self.probability_table()[index]

    def integer_table(self) -> tuple[np.ndarray, int] | None:
        """(W, S): the sampler's exact law P(y | j) = W[j, y]/S from its integer thresholds (W an
        object array of Python ints), or None where the mechanism has none."""
        return None

    @property
    def epsilon(self) -> float:
        """Per-report ε of the sampler's exact table, rounded up (``_epsilon.log_up``); from the
        float table, taken exactly, where there is no integer one."""
        cached = self.__dict__.get("_exact_epsilon")
        if cached is None:
            cached = self.__dict__["_exact_epsilon"] = exact_max_log_ratio(self)
        return cached

    # --- device side ----------------------------------------------------------------------------
    def discretise(self, t: np.ndarray, rng: RandomLike = None) -> np.ndarray:
        """Randomised rounding of normalised values (clipped to [−1, 1]) to grid indices.

        Rounds up with probability floor(frac·2^32)/2^32, so E[t_j] = t up to 2^-32 of a grid step.
        """
        pos = (np.clip(np.asarray(t, dtype=np.float64), -1.0, 1.0) + 1.0) * (self.grid / 2)
        low = np.floor(pos)
        up_threshold = np.floor((pos - low) * SCALE).astype(np.uint64)
        up = as_random_source(rng).words(pos.shape).astype(np.uint64) < up_threshold
        return np.minimum(low.astype(np.int64) + up, self.grid)

    def discretise_one(self, t: float, source: WordSource | None = None) -> int:
        """``discretise`` for one value from the OS CSPRNG, in plain Python (SDK hot path)."""
        pos = (min(1.0, max(-1.0, t)) + 1.0) * (self.grid / 2)
        low = math.floor(pos)
        if (source or OS_WORDS).word() < math.floor((pos - low) * SCALE):
            low += 1
        return min(low, self.grid)

    def encode_values(self, t: np.ndarray, rng: RandomLike = None) -> Payloads:
        """Normalised values -> randomised reports (discretise, then encode)."""
        source = as_random_source(rng)
        return self.encode(self.discretise(t, source), source)

    # --- collector side -------------------------------------------------------------------------
    def validate(self, payloads: Payloads) -> None:
        y = require_1d(payloads, "y")
        if y.dtype.kind not in "iu":
            raise InvalidPayload("a numeric report must be an integer output cell", field="y")
        bad = (y < 0) | (y >= self.cells)
        if bad.any():
            i = first_bad(bad)
            raise InvalidPayload(f"value {int(y[i])} outside [0, {self.cells})", index=i, field="y")

    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        y = np.asarray(payloads["y"], dtype=np.int64)
        sketch.counts[0] += np.bincount(y, minlength=self.cells)
        sketch.reports[0] += y.shape[0]

    def to_wire(self, payloads: Payloads) -> list[Any]:
        return [int(v) for v in payloads["y"]]

    def from_wire(self, objects: list[Any]) -> Payloads:
        return {"y": integers_from_wire(objects, self.cells, "y")}

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
        t = np.clip(np.asarray(t, dtype=np.float64), -1.0, 1.0)
        second = self.report_variance() + self.grid_points() ** 2   # E[v² | j]
        pos = (t + 1.0) * (self.grid / 2)
        low = np.minimum(np.floor(pos).astype(np.int64), self.grid - 1)
        frac = pos - low
        return (1 - frac) * second[low] + frac * second[low + 1] - t * t

    def second_moments(self) -> list[float]:
        """E[v(y)² | j] for j = 0..K as plain floats: what ``worst_case_variance`` (and with it
        ``auto``, on devices too) needs. Mechanisms compute it from their integer weights
        without numpy; this default reads the table."""
        table, v = self.probability_table(), self.debiased_values()
        return (table @ (v * v)).tolist()

    def value_variance_one(self, t: float, second: list[float]) -> float:
        """``value_variance`` of one t from ``second_moments()``, in plain floats."""
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

    def variance(self, n: int, true_counts: np.ndarray | float) -> np.ndarray:
        """Var of the mean of n reports whose values all equal t (``true_counts`` is t here)."""
        return self.value_variance(true_counts) / n


def is_numeric(protocol: Protocol) -> bool:
    return isinstance(protocol, NumericProtocol)


__all__ = ["MeanEstimate", "NumericProtocol", "NUMERIC_PROTOCOL_NAMES", "SCALE64", "check_grid_and_epsilon",
           "is_numeric", "words64"]
