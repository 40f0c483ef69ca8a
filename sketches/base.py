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
from typing import Any, ClassVar

import numpy as np

from client_sdk.errors import DomainError
from client_sdk.protocols.base import (  # the definitions move here with the last legacy protocol
    CountEstimate,
    DirectResponse,
    Payloads,
    Protocol,
    PureProtocol,
    Sketch,
    add_cells,
    first_bad,
    int_rows_from_wire,
    integers_from_wire,
    pure_estimate,
    pure_variance,
    require_1d,
)
from client_sdk.protocols.device import DeviceHalf, DirectDevice
from client_sdk.randomness import RandomLike


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
        """Protocol-specific device constants (thresholds, ``randomise``, ``memo_key``, ...)."""
        if name.startswith("__") or name == "device":
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


class PureServer(ServerHalf):
    """A pure protocol (docs/math.md §2): ``counts[0]`` holds each value's support count and the
    device half sets the realised support probabilities ``p`` (= p*) and ``q`` (= q*)."""

    @property
    def p(self) -> float:
        return self.device.p

    @property
    def q(self) -> float:
        return self.device.q

    def support_counts(self, sketch: Sketch) -> np.ndarray:
        """Σᵢ 1[v ∈ S(yᵢ)] for every v (the sketch itself for most pure protocols)."""
        return sketch.counts[0]

    def estimate(self, sketch: Sketch) -> CountEstimate:
        n = sketch.total_reports
        counts, variances = pure_estimate(self.support_counts(sketch), n, self.p, self.q)
        return CountEstimate(counts, variances, n)

    def variance(self, n: int, true_counts: np.ndarray | float) -> np.ndarray:
        return pure_variance(n, true_counts, self.p, self.q)


class DirectServer(PureServer):
    """Server half of a direct-response protocol (binary RR, GRR): S(y) = {y}, p* = p, q* = q."""

    device: DirectDevice

    def output_probabilities(self, index: int) -> np.ndarray:
        probs = np.full(self.domain_size, self.q)
        probs[index] = self.p
        return probs

    def audit_chain(self, x: Any, cohort: int | None) -> tuple[str, np.ndarray, float, float] | None:
        """One response y = a, a = x: P(a | x) is x's one-hot row."""
        return "cat", np.eye(self.domain_size)[x], self.p, self.q

    def report_statistics(self, payloads: Payloads) -> np.ndarray | None:
        return np.eye(self.domain_size, dtype=np.int64)[payloads["y"]]


# A protocol not yet split is one object holding both halves: it is its own server half, so
# isinstance checks against the server classes hold for it too until it moves.
ServerHalf.register(Protocol)
PureServer.register(PureProtocol)
DirectServer.register(DirectResponse)

__all__ = ["CountEstimate", "DirectServer", "Payloads", "PureServer", "ServerHalf", "Sketch",
           "add_cells", "first_bad", "int_rows_from_wire", "integers_from_wire", "pure_estimate",
           "pure_variance", "require_1d"]
