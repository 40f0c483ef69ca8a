"""The contract every LDP protocol fulfils: the four verbs of docs/design.md.

A protocol object wraps a frozen params dataclass and exposes, vectorised over a batch:

1. ``encode(indices, rng, cohorts=None) -> Payloads``   device side
2. ``validate(payloads)``                                collector side, raises InvalidPayload
3. ``accumulate(sketch, payloads)``                      collector side, in place, additive
4. ``estimate(sketch) -> CountEstimate``                 estimators side, unbiased counts

plus the wire mapping (``to_wire`` / ``from_wire``) and the privacy facts (``epsilon``,
``output_probabilities`` for the exact audit). Values are always 0-based domain indices;
the metric registry owns the value <-> index map.

A sketch is ``counts[m, *cells]`` plus ``reports[m]``: m cohorts (1 for protocols without
cohorts), each with fixed-size integer counters and its number of reports. Sketches add.
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
import math
from fractions import Fraction
from typing import Any, ClassVar

from .._lazy import np
from ..errors import DomainError, InvalidPayload
from ..randomness import RandomLike
from ._epsilon import log_up
from .device import check_domain_and_epsilon  # noqa: F401 - the legacy protocols' import

Payloads = dict[str, "np.ndarray"]
"""A batch of randomised reports: named arrays sharing the leading (batch) dimension."""


@dataclasses.dataclass
class Sketch:
    """Additive aggregate: per-cohort counters and per-cohort report counts (int64)."""

    counts: np.ndarray
    reports: np.ndarray

    @property
    def total_reports(self) -> int:
        return int(self.reports.sum())

    def merge(self, other: "Sketch") -> "Sketch":
        """Sum of two sketches of the same shape (shards, collectors, windows)."""
        if self.counts.shape != other.counts.shape:
            raise ValueError(f"sketch shapes differ: {self.counts.shape} vs {other.counts.shape}")
        return Sketch(self.counts + other.counts, self.reports + other.reports)

    def copy(self) -> "Sketch":
        return Sketch(self.counts.copy(), self.reports.copy())


@dataclasses.dataclass(frozen=True)
class CountEstimate:
    """Unbiased count estimates over the domain and their (estimated) variances."""

    counts: np.ndarray      # ĉ(v), float64, shape (d,)
    variances: np.ndarray   # Var-hat[ĉ(v)], float64, shape (d,)
    n: int                  # number of reports in the sketch
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


class Protocol(abc.ABC):
    """Base class of protocol implementations; subclasses set ``name`` and ``params``."""

    name: ClassVar[str]
    #: True when the per-client cohort is part of the report (derived from the client secret).
    uses_cohorts: ClassVar[bool] = False

    def __init__(self, params: Any) -> None:
        self.params = params

    # --- shape ---------------------------------------------------------------------------
    @property
    def domain_size(self) -> int:
        """d: number of domain values (0-based indices); ``params.d`` unless a protocol says otherwise."""
        return self.params.d

    @property
    def cohorts(self) -> int:
        """m: number of cohorts in the sketch (1 when the protocol has none)."""
        return 1

    @property
    def cell_shape(self) -> tuple[int, ...]:
        """Shape of one cohort's counters: one per domain value unless a protocol says otherwise."""
        return (self.domain_size,)

    def new_sketch(self) -> Sketch:
        return Sketch(np.zeros((self.cohorts, *self.cell_shape), dtype=np.int64),
                      np.zeros(self.cohorts, dtype=np.int64))

    # --- privacy ---------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def epsilon(self) -> float:
        """Per-report epsilon, from the realised (quantised) probabilities."""

    @property
    def epsilon_longitudinal(self) -> float | None:
        """Bound for any number of reports of one value (memoised protocols), else None."""
        return None

    @abc.abstractmethod
    def output_probabilities(self, index: int) -> np.ndarray:
        """P(y | x=index) over an enumeration of all outputs (small params; for the audit).

        For cohort protocols the enumeration is over (cohort, output) pairs conditional on
        each cohort, i.e. shape (m, outputs_per_cohort), each row summing to one.
        """

    @property
    @abc.abstractmethod
    def payload_bits(self) -> int:
        """Size of one report's protocol payload on the wire, in bits (information content)."""

    # --- the four verbs ----------------------------------------------------------------------
    @abc.abstractmethod
    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        """Randomise a batch of true domain indices. ``rng=None`` uses the OS CSPRNG."""

    def encode_one(self, index: int, cohort: int | None = None) -> Any:
        """One report's wire payload from the OS CSPRNG: the SDK's hot path.

        The default runs the vectorised ``encode`` on a batch of one; protocols whose report is
        one integer override it with the same mechanism in plain Python integers (fewer
        allocations), and tests check both against ``output_probabilities``.
        """
        cohorts = None if cohort is None else np.array([cohort], dtype=np.int64)
        return self.to_wire(self.encode(np.array([index], dtype=np.int64), None, cohorts))[0]

    def randomise(self, index: int, cohort: int | None = None, source: Any = None) -> Any:
        """The one-report mechanism given its cohort, from ``source`` (the OS CSPRNG by default):
        the name a split protocol's device half gives it (client_sdk.protocols.device)."""
        return self.encode_one(index, cohort) if source is None else self.encode_one(index, cohort, source)  # type: ignore[call-arg]

    def _check_index(self, index: int) -> int:
        """Device-side check of one true index (DomainError when outside the domain)."""
        if type(index) is not int:
            index = int(self.check_indices(np.array([index]))[0])
        if not 0 <= index < self.domain_size:
            raise DomainError(f"index {index} at position 0 is outside the domain [0, {self.domain_size})")
        return index

    @abc.abstractmethod
    def validate(self, payloads: Payloads) -> None:
        """Raise InvalidPayload (with the report index) for anything an honest client can't send."""

    @abc.abstractmethod
    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        """Fold validated payloads into ``sketch`` in place."""

    def flat_cells(self, payloads: Payloads) -> tuple[np.ndarray, np.ndarray] | None:
        """What ``accumulate`` adds, as indices: (the flat counter index of every unit added,
        the cohort of every report), for protocols whose reports add one to a few counters;
        None for the others. The collector turns a small batch into a sparse delta from these
        without a sketch-sized temporary (docs/design.md, "Sparse deltas")."""
        return None

    @abc.abstractmethod
    def estimate(self, sketch: Sketch) -> CountEstimate:
        """Unbiased count estimates for every domain value, with variances."""

    @abc.abstractmethod
    def variance(self, n: int, true_counts: np.ndarray | float) -> np.ndarray:
        """Theoretical Var[ĉ(v)] for n reports when the true count of v is ``true_counts``."""

    # --- wire ------------------------------------------------------------------------------
    @abc.abstractmethod
    def to_wire(self, payloads: Payloads) -> list[Any]:
        """One msgpack-able object per report."""

    @abc.abstractmethod
    def from_wire(self, objects: list[Any]) -> Payloads:
        """Inverse of to_wire; raises InvalidPayload naming the report index on bad shape."""

    # --- helpers for subclasses ------------------------------------------------------------------
    def check_indices(self, indices: np.ndarray) -> np.ndarray:
        """Validate a batch of true indices (device side) and return them as int64."""
        arr = np.asarray(indices)
        if arr.ndim != 1:
            arr = arr.reshape(-1)
        if arr.size and (arr.dtype.kind not in "iu"):
            raise DomainError(f"domain indices must be integers, got dtype {arr.dtype}")
        arr = arr.astype(np.int64, copy=False)
        if arr.size == 1:  # SDK batch of one: a Python comparison, not two numpy reductions
            if 0 <= arr.item() < self.domain_size:
                return arr
            raise DomainError(f"index {arr.item()} at position 0 is outside the domain "
                              f"[0, {self.domain_size})")
        if arr.size and (arr.min() < 0 or arr.max() >= self.domain_size):
            bad = int(np.flatnonzero((arr < 0) | (arr >= self.domain_size))[0])
            raise DomainError(f"index {int(arr[bad])} at position {bad} is outside the domain "
                              f"[0, {self.domain_size})")
        return arr


def int_rows_from_wire(objects: list[Any], width: int) -> np.ndarray | None:
    """``objects`` (msgpack's lists of ``width`` ints each) as an int64 array of shape (n, width),
    or None when any is not exactly that (the caller's report-by-report pass then names it).

    Set-of-types checks over the flattened values and one ``np.fromiter``: ~3x faster than a
    per-report loop or ``np.asarray`` of nested lists, and still exact (bool is not int here)."""
    if not objects or not set(map(type, objects)) <= {list, tuple} or set(map(len, objects)) != {width}:
        return None
    flat = list(itertools.chain.from_iterable(objects))
    if set(map(type, flat)) != {int}:
        return None
    try:
        return np.fromiter(flat, dtype=np.int64, count=len(flat)).reshape(-1, width)
    except OverflowError:
        return None


def add_cells(sketch: Sketch, cells: np.ndarray, cohorts: np.ndarray) -> None:
    """``accumulate`` for protocols with ``flat_cells``: add one per flat counter index and one
    report per cohort index (bincount for large batches, no sketch-sized temporary for small)."""
    if not sketch.counts.flags.c_contiguous:  # reshape would copy: add a dense increment
        sketch.counts += np.bincount(cells, minlength=sketch.counts.size).reshape(sketch.counts.shape)
        cells = cells[:0]
    flat = sketch.counts.reshape(-1)  # a view of the counters
    for target, idx in ((flat, cells), (sketch.reports, cohorts)):
        if 8 * idx.shape[0] >= target.shape[0]:
            target += np.bincount(idx, minlength=target.shape[0])
        else:
            np.add.at(target, idx, 1)


class PureProtocol(Protocol):
    """A pure protocol (docs/math.md §2): ``counts[0]`` holds each value's support count and
    the subclass sets the realised support probabilities ``p`` (= p*) and ``q`` (= q*)."""

    p: float
    q: float

    def support_counts(self, sketch: Sketch) -> np.ndarray:
        """Σᵢ 1[v ∈ S(yᵢ)] for every v (the sketch itself for most pure protocols)."""
        return sketch.counts[0]

    def estimate(self, sketch: Sketch) -> CountEstimate:
        n = sketch.total_reports
        counts, variances = pure_estimate(self.support_counts(sketch), n, self.p, self.q)
        return CountEstimate(counts, variances, n)

    def variance(self, n: int, true_counts: np.ndarray | float) -> np.ndarray:
        return pure_variance(n, true_counts, self.p, self.q)


class DirectResponse(PureProtocol):
    """A pure protocol whose report is one domain value (binary RR, GRR; docs/math.md §3).

    The report is the true value with probability p and each other value with probability q,
    so S(y) = {y}, p* = p, q* = q and ε = ln(p/q). ``params`` gives the realised ``p`` and
    ``q`` and the integer ``keep_threshold`` of p.
    """

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.p, self.q = params.p, params.q
        self._threshold = params.keep_threshold

    @property
    def epsilon(self) -> float:
        return log_up(Fraction(self.p) / Fraction(self.q))   # an upper bound (protocols/_epsilon.py)

    @property
    def payload_bits(self) -> int:
        return max(1, math.ceil(math.log2(self.domain_size)))

    def output_probabilities(self, index: int) -> np.ndarray:
        probs = np.full(self.domain_size, self.q)
        probs[index] = self.p
        return probs


def integers_from_wire(objects: list, high: int, field: str) -> np.ndarray:
    """Wire payloads that are plain integers in [0, high) (bools rejected), as int64."""
    for i, obj in enumerate(objects):
        if type(obj) is not int:  # bool is a subclass of int: rejected here too
            raise InvalidPayload(f"expected an integer in [0, {high}), got {type(obj).__name__}",
                                 index=i, field=field)
        if not 0 <= obj < high:  # also keeps the int64 conversion from overflowing
            raise InvalidPayload(f"value {obj} outside [0, {high})", index=i, field=field)
    return np.asarray(objects, dtype=np.int64).reshape(-1)


def pure_estimate(support: np.ndarray, n: int, p_star: float, q_star: float) -> tuple[np.ndarray, np.ndarray]:
    """Pure-protocol estimator (docs/math.md §2): ĉ = (S − n q*)/(p* − q*) and its plug-in variance.

    The variance uses Var = n q*(1−q*)/(p*−q*)² + c(1−p*−q*)/(p*−q*) with c = clip(ĉ, 0, n).
    """
    support = np.asarray(support, dtype=np.float64)
    delta = p_star - q_star
    counts = support - n * q_star
    counts /= delta
    clipped = np.clip(counts, 0, n)
    return counts, pure_variance(n, clipped, p_star, q_star, out=clipped)


def pure_variance(n: int, true_counts: np.ndarray | float, p_star: float, q_star: float, *,
                  out: np.ndarray | None = None) -> np.ndarray:
    """Var[ĉ(v)] of a pure protocol (docs/math.md §2); ``out``: a float64 array to write it into
    (it may be ``true_counts`` itself)."""
    delta = p_star - q_star
    # A scalar count (``auto`` scores protocols this way, on devices too) in plain floats: the
    # same IEEE operations as numpy's, without importing it.
    if isinstance(true_counts, (int, float)):
        return n * q_star * (1 - q_star) / delta**2 + float(true_counts) * (1 - p_star - q_star) / delta
    # the same operations in place on one array (d = 10⁶: two 8 MB temporaries fewer)
    out = np.multiply(np.asarray(true_counts, dtype=np.float64), 1 - p_star - q_star, out=out)
    out /= delta
    out += n * q_star * (1 - q_star) / delta**2
    return out


def require_1d(payloads: Payloads, key: str, n: int | None = None) -> np.ndarray:
    """Fetch a named payload array; InvalidPayload if absent or ragged."""
    if key not in payloads:
        raise InvalidPayload(f"missing payload field {key!r}", field=key)
    arr = np.asarray(payloads[key])
    if n is not None and arr.shape[0] != n:
        raise InvalidPayload(f"field {key!r} has {arr.shape[0]} entries, expected {n}", field=key)
    return arr


def first_bad(mask: np.ndarray) -> int:
    """Index of the first True in a boolean mask (for error messages)."""
    return int(np.flatnonzero(mask)[0])
