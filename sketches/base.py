"""The server half of a protocol: the verbs the collector and the estimators run over batches.

A server half is built from a device half (client_sdk.protocols.device) and reads every
constant — params, thresholds, ε — through it; it adds what only a server needs, vectorised
with numpy (docs/design.md, "Two halves"):

1. ``encode(indices, rng, cohorts=None) -> Payloads``   simulation (the device's mechanism, batched)
2. ``validate(payloads)``                                collector side, raises InvalidPayload
3. ``accumulate(sketch, payloads)``                      collector side, in place, additive
4. ``estimate(sketch) -> CountEstimate``                 estimators side, unbiased counts

plus the wire mapping (``to_wire`` / ``from_wire``), ``flat_cells`` for sparse deltas, the
array ``variance`` and ``output_probabilities`` (the exact table the audit checks).

A sketch is ``counts[m, *cells]`` plus ``reports[m]``: m cohorts (1 for protocols without
cohorts), each with fixed-size integer counters and its number of reports. Sketches add.
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
from typing import Any, ClassVar

import numpy as np

from client_sdk.errors import DomainError, InvalidPayload
from client_sdk.protocols.device import DeviceHalf, DirectDevice

from .randomness import RandomLike

Payloads = dict[str, np.ndarray]
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
    # A scalar count in plain floats: the same IEEE operations as numpy's (and as the device
    # halves' pure_variance_one, which `auto` scores).
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


class ServerHalf(abc.ABC):
    """Base class of server halves: ``ServerHalf(device)``; ``device_type`` is the device class."""

    device_type: ClassVar[type[DeviceHalf]]

    def __init__(self, device: DeviceHalf) -> None:
        self.device = device

    # --- the device's facts, read through (never re-derived here) ------------------------------
    @property
    def name(self) -> str:
        return self.device.name

    @property
    def params(self) -> Any:
        return self.device.params

    @property
    def uses_cohorts(self) -> bool:
        return self.device.uses_cohorts

    @property
    def two_round(self) -> bool:
        """Whether reports repeat a memoised first round (the device half's; its server half is a
        ``sketches.longitudinal.MemoisedServer``): estimators/memo_range.py bounds their ranges."""
        return self.device.two_round

    @property
    def domain_size(self) -> int:
        return self.device.domain_size

    @property
    def cohorts(self) -> int:
        return self.device.cohorts

    @property
    def epsilon(self) -> float:
        return self.device.epsilon

    @property
    def epsilon_longitudinal(self) -> float | None:
        return self.device.epsilon_longitudinal

    @property
    def payload_bits(self) -> int:
        return self.device.payload_bits

    def __getattr__(self, name: str) -> Any:
        """Protocol-specific device constants (thresholds, ``randomise``, ``memo_key``, ...): the
        device half's public names only — its private ones are its own (issue 29 §2)."""
        if name.startswith("_") or name == "device":
            raise AttributeError(name)
        return getattr(self.device, name)

    # --- shape ---------------------------------------------------------------------------------
    @property
    def cell_shape(self) -> tuple[int, ...]:
        """Shape of one cohort's counters: one per domain value unless a protocol says otherwise."""
        return (self.domain_size,)

    def new_sketch(self) -> Sketch:
        """An empty sketch of this protocol's shape."""
        return Sketch(np.zeros((self.cohorts, *self.cell_shape), dtype=np.int64),
                      np.zeros(self.cohorts, dtype=np.int64))

    # --- the verbs -------------------------------------------------------------------------------
    @abc.abstractmethod
    def output_probabilities(self, index: int) -> np.ndarray:
        """P(y | x=index) over an enumeration of all outputs (small params; for the audit).

        For cohort protocols the enumeration is over (cohort, output) pairs conditional on
        each cohort, i.e. shape (m, outputs_per_cohort), each row summing to one.
        """

    @abc.abstractmethod
    def encode(self, indices: np.ndarray, rng: RandomLike = None,
               cohorts: np.ndarray | None = None) -> Payloads:
        """Randomise a batch of true domain indices. ``rng=None`` uses the OS CSPRNG."""

    @abc.abstractmethod
    def validate(self, payloads: Payloads) -> None:
        """Raise InvalidPayload (with the report index) for anything an honest client can't send."""

    @abc.abstractmethod
    def accumulate(self, sketch: Sketch, payloads: Payloads) -> None:
        """Fold validated payloads into ``sketch`` in place."""

    def flat_cells(self, payloads: Payloads) -> tuple[np.ndarray, np.ndarray] | None:
        """What ``accumulate`` adds, as indices: (the flat counter index of every unit added,
        the cohort of every report), for protocols whose reports add one to a few counters;
        None for the others (docs/design.md, "Sparse deltas")."""
        return None

    @abc.abstractmethod
    def estimate(self, sketch: Sketch) -> CountEstimate:
        """Unbiased count estimates for every domain value, with variances."""

    @abc.abstractmethod
    def variance(self, n: int, true_counts: np.ndarray | float) -> np.ndarray:
        """Theoretical Var[ĉ(v)] for n reports when the true count of v is ``true_counts``."""

    @abc.abstractmethod
    def to_wire(self, payloads: Payloads) -> list[Any]:
        """One msgpack-able object per report."""

    @abc.abstractmethod
    def from_wire(self, objects: list[Any]) -> Payloads:
        """Inverse of to_wire; raises InvalidPayload naming the report index on bad shape."""

    def check_indices(self, indices: np.ndarray) -> np.ndarray:
        """Validate a batch of true indices and return them as int64 (DomainError naming the first bad one)."""
        arr = np.asarray(indices)
        if arr.ndim != 1:
            arr = arr.reshape(-1)
        if arr.size and (arr.dtype.kind not in "iu"):
            raise DomainError(f"domain indices must be integers, got dtype {arr.dtype}")
        arr = arr.astype(np.int64, copy=False)
        if arr.size and (arr.min() < 0 or arr.max() >= self.domain_size):
            bad = int(np.flatnonzero((arr < 0) | (arr >= self.domain_size))[0])
            raise DomainError(f"index {int(arr[bad])} at position {bad} is outside the domain "
                              f"[0, {self.domain_size})")
        return arr

    # --- the audit's attacker (estimators/audit.py) ----------------------------------------------
    def audit_chain(self, x: Any, cohort: int | None) -> tuple[str, np.ndarray, float, float] | None:
        """The likelihood chain of one device in ``cohort`` holding ``x`` (a domain index; RAPPOR's
        candidate string, memobitmean's grid point), as estimators.audit.Chain's fields (kind,
        first, one, zero): "cat", P(a | x) over [k], p₂ = P(y = a), q₂; or "bit", r_i = P(a_i = 1 | x),
        s₁ = P(y_i = 1 | a_i = 1), s₀ = P(y_i = 1 | a_i = 0). None: the audit has no likelihood."""
        return None

    def report_statistics(self, payloads: Payloads) -> np.ndarray | None:
        """The audit chain's per-report sufficient statistics, (n, k): the one-hot y of a "cat"
        chain, the bit vector of a "bit" chain; None where the audit has no likelihood."""
        return None

    def audit_inputs(self, x: Any) -> list[tuple[float, Any]]:
        """(probability, ``audit_chain`` input) over what a device holding ``x`` may encode, as far
        as the attacker knows (it does not know the device's secret): ``x`` itself by default."""
        return [(1.0, x)]

    # --- a joint metric's cells (estimators/joint.py) ---------------------------------------------
    def pair_probabilities(self) -> tuple[float, float, float, float] | None:
        """(p*, q*, r₁, r₂) of one fresh report: the support probabilities and the pair
        probabilities r₁ = P(u, v ∈ S(y) | x = u), r₂ = P(u, v ∈ S(y) | x ∉ {u, v}) (u ≠ v) that
        give Cov(ĉ) (estimators/joint.py's module docstring); None where they are not derived."""
        return None

    def marginal_model(self, cells: int, n: int) -> tuple[float, float, int] | None:
        """(p*, q*, N) making the summed support count S of ``cells`` cells exactly
        Bin(c, p*) + Bin(N − c, q*), c their summed count, over n reports; None where a report's
        cells are dependent (or the pair law is not derived)."""
        return None

    def draw_support(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        """The support counts S(v) of ``counts.sum()`` reports of the true counts ``counts`` (int64,
        shape (d,)), drawn from their exact law without encoding a report (estimators/exact_sketch.py);
        None where no sampler is derived."""
        return None

    # --- a forged report's reach (estimators/poisoning.py) ----------------------------------------
    def support_probabilities(self) -> tuple[float, float] | None:
        """(p*, q*): P(v ∈ S(y) | x = v) and P(v ∈ S(y) | x ≠ v) of the count estimate's support
        (Wang et al. 2017); None for protocols without them."""
        return None

    def values_supported(self) -> int:
        """Values one forged report supports at once, each by the full gain: one by default."""
        return 1

    def forged_gain(self) -> tuple[float, float] | None:
        """(g, δ), the most one forged report raises and lowers a count, where it is not the
        support probabilities' (1 − q*)/(p* − q*) and q*/(p* − q*); None: it is (or is not derived)."""
        return None

    # --- a support count's exact law (estimators/compare.py, estimators/frequency.py) ---------------
    def support_counts(self, sketch: Sketch) -> np.ndarray | None:
        """Each value's support count S(v) = Σᵢ 1[v ∈ S(yᵢ)] where it is Bin(n, λ_v), with λ_v the
        same in two windows of fresh reports drawn from one population (the exact test of two
        windows, estimators/compare.py); None where no such count is derived."""
        return None

    def small_count_model(self, sketch: Sketch, support: np.ndarray | None = None) \
            -> tuple[np.ndarray, float, float] | None:
        """(S, p*, q*) where the estimate is the pure one (docs/math.md §2) and each value's support
        count S(v) is exactly Bin(c_v, p*) + Bin(n − c_v, q*): the exact small-count test and
        interval of docs/math.md §8 apply. ``support``: S, when the estimate has computed it
        already (HR's). None elsewhere."""
        return None

    #: Whether ``variance(n, c)`` is exactly Var[ĉ(v)] at a true count c whatever the other values'
    #: counts (a pure protocol's, docs/math.md §2), so a score test may evaluate it at a pooled
    #: count (estimators/compare.py); where False it is not a known function of the count alone.
    variance_from_count: bool = False

    # --- a count's test of "nobody holds v" (estimators/frequency.py) -------------------------------
    def sampled_support(self, sketch: Sketch) -> tuple[np.ndarray, np.ndarray, float] | None:
        """(n_v, C_v, q) where each value is seen by a random subset of the reports only: the
        reports that see v, their support of v and P(support | v not held), for the test of
        c(v) = 0 on them (docs/math.md §8); None where every report sees every value."""
        return None

    # --- a histogram's bucket covariance (estimators/numeric.py) -----------------------------------
    #: How the count estimates co-vary: "one" (one supported value a report: GRR, RR), "independent"
    #: (independent bits: the unary encodings) or "any" (no structure used: the Cauchy–Schwarz bound).
    count_structure: str = "any"

    # --- the numbers that link a device's reports (estimators/linking.py) --------------------------
    def linking_number(self) -> tuple[str, int, bool, bool] | None:
        """(what, its range, permanent (else re-derived each UTC day), one per device across all the
        metrics of this protocol) of the value-independent number each report carries; None if none."""
        return None

    # --- what a report carries in clear (collector/shuffled.py, collector/claims.py) ---------------
    #: The payload field of the cohort number a report carries in clear.
    cohort_field: str = "cohort"

    @property
    def cohort_permanent(self) -> bool:
        """Whether the cohort in clear is fixed for the device's lifetime (docs/privacy.md, "What
        leaves the device"): RAPPOR's, LOLOHA's, dBitFlipPM's window, discover's group; not OLH's,
        re-derived each UTC day. ``linking_number``'s permanence, the one place it is said."""
        number = self.linking_number()
        return number is not None and number[2]

    @property
    def clear_cohorts(self) -> int:
        """How many cohort numbers a report may carry in clear (``cohort_field``'s range; 1: none)."""
        return int(self.cohorts or 1)

    # --- what a frequency estimate of it is (estimators/frequency.py, collector/query.py) ----------
    #: Whether its estimate discovers strings (discover): ``top`` then says how many strings to
    #: find, not which page of the largest rows to answer (docs/discovery.md).
    discovers_strings: bool = False
    #: Whether its reports repeat permanent noise across windows with no range bound derived for
    #: it (RAPPOR's PRR): a summed range's intervals are too narrow (estimators/memo_range.py).
    memo_without_range_bound: bool = False

    #: Whether its sketch is google/rappor's (Erlingsson et al. 2014): per-cohort Bloom-bit counts
    #: under params k, h, m, p, q, f, which ``ldpt rappor export`` writes as that project's
    #: params.csv and counts.csv (estimators/rappor_io.py).
    exports_google_rappor: bool = False

    # --- memoisation (``ldpt metrics check``) ------------------------------------------------------
    @property
    def hashed_memo_keys(self) -> int | None:
        """g when a device memoises one response per hashed value, not per value (LOLOHA, Arcolezi
        et al. 2023): its lifetime ε is then at most g·ε∞, however many values it holds; None elsewhere."""
        return None

    # --- planning (estimators/plan.py, ``ldpt plan``) ----------------------------------------------
    def expected_empty_cohorts(self, n: int) -> float:
        """Cohorts that ``n`` reports leave empty on average where the estimate rests on every
        cohort's sketch (OLH's); 0 for protocols without such cohorts."""
        return 0.0

    def design_note(self, n: int | None = None) -> str:
        """One line on what sizes the sketch (OLH's hash family and cohorts, HR's field) and, where
        ``n`` reports leave cohorts empty, what that costs; "" where nothing needs saying."""
        return ""

    # --- shuffling (estimators/amplification.py) -------------------------------------------------
    @property
    def krr_size(self) -> int | None:
        """k when one report is k-ary randomised response of the value (the k-RR clone bound of
        Feldman, McMillan and Talwar 2021 applies); None elsewhere."""
        return None

    @property
    def held_out_groups(self) -> int:
        """G where a count is a held-out group's scaled by its expected share 1/G (discover: a
        forged report claiming that group lowers the population estimate by G·δ); 1 elsewhere."""
        return 1


class PureServer(ServerHalf):
    """A pure protocol (docs/math.md §2): ``counts[0]`` holds each value's support count and the
    device half sets the realised support probabilities ``p`` (= p*) and ``q`` (= q*)."""

    @property
    def p(self) -> float:
        return self.device.p

    @property
    def q(self) -> float:
        return self.device.q

    #: Var[ĉ(v)] = n q*(1−q*)/(p*−q*)² + c(1−p*−q*)/(p*−q*): the count alone (docs/math.md §2).
    variance_from_count = True

    def support_counts(self, sketch: Sketch) -> np.ndarray:
        """Σᵢ 1[v ∈ S(yᵢ)] for every v (the sketch itself for most pure protocols): each report of
        fresh coins supports v w.p. λ_v = q* + (p* − q*)·π_v, so S(v) is Bin(n, λ_v)."""
        return sketch.counts[0]

    def small_count_model(self, sketch: Sketch, support: np.ndarray | None = None) \
            -> tuple[np.ndarray, float, float] | None:
        """(S, p, q): a pure protocol's support count is Bin(c_v, p*) + Bin(n − c_v, q*)."""
        return (self.support_counts(sketch) if support is None else support), self.p, self.q

    def estimate(self, sketch: Sketch) -> CountEstimate:
        n = sketch.total_reports
        counts, variances = pure_estimate(self.support_counts(sketch), n, self.p, self.q)
        return CountEstimate(counts, variances, n)

    def variance(self, n: int, true_counts: np.ndarray | float) -> np.ndarray:
        return pure_variance(n, true_counts, self.p, self.q)

    def support_probabilities(self) -> tuple[float, float] | None:
        return float(self.p), float(self.q)


class DirectServer(PureServer):
    """Server half of a direct-response protocol (binary RR, GRR): S(y) = {y}, p* = p, q* = q."""

    device: DirectDevice

    #: A report supports its one value y.
    count_structure = "one"

    @property
    def krr_size(self) -> int | None:
        """k = d: one report is k-ary randomised response (binary RR: k = 2)."""
        return int(self.domain_size)

    def output_probabilities(self, index: int) -> np.ndarray:
        probs = np.full(self.domain_size, self.q)
        probs[index] = self.p
        return probs

    def audit_chain(self, x: Any, cohort: int | None) -> tuple[str, np.ndarray, float, float] | None:
        """One response y = a, a = x: P(a | x) is x's one-hot row."""
        return "cat", np.eye(self.domain_size)[x], self.p, self.q

    def report_statistics(self, payloads: Payloads) -> np.ndarray | None:
        return np.eye(self.domain_size, dtype=np.int64)[payloads["y"]]


__all__ = ["CountEstimate", "DirectServer", "Payloads", "PureServer", "ServerHalf", "Sketch",
           "add_cells", "first_bad", "int_rows_from_wire", "integers_from_wire", "pure_estimate",
           "pure_variance", "require_1d"]
