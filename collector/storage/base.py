"""The sketch store contract shared by the SQLite (embedded) and PostgreSQL (shared) backends.

A store holds, per (metric, fingerprint, window, cohort), a protocol's additive counters and
its report count, plus a table of batch ids for idempotent ingestion. Everything is a sum:
loading several windows (or rows written by several collectors) adds them up.
"""

from __future__ import annotations

import abc
import dataclasses
import datetime as dt
import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from client_sdk.errors import StoreError
from client_sdk.protocols.base import Sketch

SCHEMA_VERSION = 2
APPLICATION_ID = "ldp-telemetry"

#: A commit writes a sketch delta sparsely (its non-zero cells) when those cells take at most
#: this share of the bytes its dense rows would (docs/design.md, "Sparse deltas").
SPARSE_MAX_SHARE = 0.5
#: Bytes per sparse cell on disk: a uint32 flat index and an int64 count.
SPARSE_CELL_BYTES = 12
#: Days a batch id is always kept: the SDK keeps an unsent batch at most 7 days
#: (client_sdk/queue.py, DEFAULT_OUTBOX_MAX_AGE) and retries it with the same id, plus one day
#: of clock skew. Within it a retry is deduplicated whatever the retention settings.
BATCH_ID_MIN_DAYS = 8


class CommitOutcomeUnknown(StoreError):
    """A commit whose outcome is unknown: the connection was lost while the transaction ran or
    committed (a terminated PostgreSQL backend), so it may or may not have been applied.

    Clients are told to retry (503): the batch-id dedupe makes a retry of an applied batch a
    duplicate, and of a rolled-back one a fresh commit, so either way it is counted once.
    """


class BatchOutcome(str, enum.Enum):
    """What a commit did with one batch."""

    APPLIED = "applied"        # new batch id: its deltas were added
    DUPLICATE = "duplicate"    # same id and same digest seen before: counted once, ack again
    CONFLICT = "conflict"      # same id, different body: rejected


@dataclasses.dataclass(frozen=True)
class SketchKey:
    """Where a delta goes: metric, its parameter fingerprint, and the time window."""

    metric: str
    fingerprint: str
    window: str


@dataclasses.dataclass
class PendingBatch:
    """One ingested batch: its id (None = no dedupe, e.g. simulation), body digest and deltas."""

    batch_id: bytes | None
    digest: bytes
    deltas: dict[SketchKey, Sketch]
    reports: int = 0


@dataclasses.dataclass(frozen=True)
class WindowInfo:
    """A stored window of one metric and its report count."""

    metric: str
    fingerprint: str
    window: str
    reports: int


@dataclasses.dataclass(frozen=True)
class PruneResult:
    """What a retention run deleted."""

    windows: int      # (metric, fingerprint, window) sketches
    rows: int         # stored rows (cohorts, delta rows)
    batch_ids: int    # idempotency records


class SketchStore(abc.ABC):
    """Durable additive sketches + batch-id dedupe. Implementations are thread-safe per call."""

    @abc.abstractmethod
    def commit(self, batches: Sequence[PendingBatch]) -> list[BatchOutcome]:
        """One transaction: dedupe every batch id, then add the deltas of the new batches."""

    def add_sketch(self, key: SketchKey, sketch: Sketch) -> None:
        """Add a sketch without a batch id (simulation, imports)."""
        self.commit([PendingBatch(None, b"", {key: sketch}, sketch.total_reports)])

    @abc.abstractmethod
    def load(self, metric: str, fingerprint: str, template: Sketch,
             windows: Sequence[str] | None = None, since: str | None = None,
             until: str | None = None) -> Sketch:
        """Sum of the stored sketches for the windows asked (all when none given).

        ``template`` gives the shape (``protocol.new_sketch()``); rows whose shape differs
        raise StoreError. ``since``/``until`` are inclusive UTC dates (YYYY-MM-DD).
        """

    @abc.abstractmethod
    def windows(self, metric: str | None = None) -> list[WindowInfo]:
        """Stored windows (optionally of one metric), oldest first."""

    @abc.abstractmethod
    def prune(self, before: str, batch_ids_before: str | None = None) -> PruneResult:
        """Delete every window whose day is before ``before`` (YYYY-MM-DD), and the batch ids
        received before ``batch_ids_before`` (default ``before``; see ``batch_id_cutoff``), in
        one transaction. Safe while collectors commit."""

    @abc.abstractmethod
    def check(self) -> None:
        """Raise StoreError unless the store is reachable and its schema current (readyz)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections."""

    def __enter__(self) -> "SketchStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def counts_to_blob(counts: np.ndarray) -> bytes:
    """Canonical on-disk form of one cohort's counters: little-endian int64."""
    return np.ascontiguousarray(counts, dtype="<i8").tobytes()


def blob_to_counts(blob: bytes, cell_shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(blob, dtype="<i8").reshape(cell_shape).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class SparseDelta:
    """The non-zero cells of one sketch delta, in the sketch's *flat space*.

    The flat space of a sketch with m cohorts of ``width`` cells each is its counters
    ``counts.reshape(-1)`` (m·width cells) followed by its m per-cohort report counts, so one
    (cells, values) pair carries a whole delta. Cells are sorted and distinct.
    """

    m: int
    width: int
    cells: np.ndarray    # uint32 flat indices
    values: np.ndarray   # int64, non-zero
    reports: int

    @property
    def nbytes(self) -> int:
        return SPARSE_CELL_BYTES * int(self.cells.size)

    def cells_blob(self) -> bytes:
        return np.ascontiguousarray(self.cells, dtype="<u4").tobytes()

    def values_blob(self) -> bytes:
        return np.ascontiguousarray(self.values, dtype="<i8").tobytes()

    def to_sketch(self) -> Sketch:
        """The dense sketch of this delta (shape (m, width))."""
        out = Sketch(np.zeros((self.m, self.width), dtype=np.int64), np.zeros(self.m, dtype=np.int64))
        add_sparse(out, self.m, self.width, self.cells_blob(), self.values_blob(), "delta")
        return out


def dense_row_bytes(sketch: Sketch) -> int:
    """Bytes the dense rows of ``sketch``'s touched cohorts take (what a dense write costs)."""
    m = len(sketch.reports)
    width = sketch.counts[0].size if m else 0
    touched = int(((sketch.reports != 0) | sketch.counts.reshape(m, -1).any(axis=1)).sum())
    return 8 * width * touched


def sparse_delta(sketch: Sketch) -> SparseDelta:
    """The non-zero cells of ``sketch`` in its flat space (``SparseDelta``)."""
    m = len(sketch.reports)
    flat = sketch.counts.reshape(-1)
    if flat.size + m >= 1 << 32:
        raise ValueError(f"a sketch of {flat.size + m} cells does not fit uint32 flat indices")
    nz = np.flatnonzero(flat)
    rz = np.flatnonzero(sketch.reports)
    cells = np.concatenate([nz, rz + flat.size]).astype(np.uint32)
    values = np.concatenate([flat[nz], sketch.reports[rz]]).astype(np.int64)
    return SparseDelta(m, flat.size // m if m else 0, cells, values, int(sketch.reports.sum()))


def worth_sparse(sketch: Sketch) -> SparseDelta | None:
    """``sparse_delta(sketch)`` when writing it sparsely saves bytes (``SPARSE_MAX_SHARE``)."""
    dense = dense_row_bytes(sketch)
    if dense == 0:
        return None
    delta = sparse_delta(sketch)
    return delta if delta.nbytes <= SPARSE_MAX_SHARE * dense else None


#: What one stored row costs beyond its counters (key columns, tuple header, index entry): why
#: a sketch of many narrow cohorts (OLH, discover) folds into one sparse row even when dense.
ROW_OVERHEAD_BYTES = 64


def folded_form(sketch: Sketch) -> SparseDelta | None:
    """How compaction writes a key's sum: one sparse row when that takes fewer bytes than the
    dense rows of its touched cohorts with their per-row overhead (``ROW_OVERHEAD_BYTES``),
    else None (dense rows). A thin window of a large domain, and any sketch of many narrow
    cohorts, stay one row."""
    m = len(sketch.reports)
    if m == 0:
        return None
    width = sketch.counts[0].size
    touched = int(((sketch.reports != 0) | sketch.counts.reshape(m, -1).any(axis=1)).sum())
    delta = sparse_delta(sketch)
    return delta if delta.nbytes <= touched * (8 * width + ROW_OVERHEAD_BYTES) else None


def add_sparse(out: Sketch, m: int, width: int, cells_blob: bytes, values_blob: bytes,
               where: str) -> None:
    """Add one stored sparse delta into ``out`` (in place), checking it fits ``out``'s shape."""
    out_m = len(out.reports)
    out_width = out.counts[0].size if out_m else 0
    if (m, width) != (out_m, out_width):
        raise ValueError(f"{where}: sparse delta of {m} x {width} cells, the registry's sketch is "
                         f"{out_m} x {out_width}; the store was written under other parameters")
    cells = np.frombuffer(cells_blob, dtype="<u4")
    values = np.frombuffer(values_blob, dtype="<i8")
    if cells.size != values.size or (cells.size and (int(cells[-1]) >= m * width + m
                                                       or not bool(np.all(cells[1:] > cells[:-1])))):
        raise ValueError(f"{where}: corrupt sparse delta ({cells.size} cells, {values.size} values)")
    flat = out.counts.reshape(-1)
    split = int(np.searchsorted(cells, flat.size))  # cells are sorted: counters, then reports
    flat[cells[:split]] += values[:split]            # distinct cells: plain fancy-index add
    out.reports[cells[split:].astype(np.int64) - flat.size] += values[split:]


def merge_deltas(target: dict[SketchKey, Sketch], deltas: dict[SketchKey, Sketch]) -> None:
    """Add ``deltas`` into ``target`` (copying on first insert)."""
    for key, sk in deltas.items():
        if key in target:
            target[key] = target[key].merge(sk)
        else:
            target[key] = sk.copy()


def sum_deltas(deltas_seq: Iterable[Mapping[SketchKey, Sketch]],
               sparse: bool = False) -> dict[SketchKey, Sketch | SparseDelta]:
    """Sum of many batches' deltas (one transaction's worth).

    Deltas that carry ``payload_groups`` — ``[(key, protocol, payloads), ...]``, the collector's
    validated but not yet accumulated batches — are concatenated per key and accumulated in
    one vectorised ``protocol.accumulate`` call per key: no per-batch dense sketch, and the
    per-call overhead is paid once per transaction instead of once per batch. With ``sparse``,
    a key whose reports touch few of its sketch's cells (``sparse_from_payloads``) comes back
    as a ``SparseDelta``, built without a sketch-sized temporary.
    """
    total: dict[SketchKey, Sketch | SparseDelta] = {}
    pending: dict[SketchKey, tuple[Any, list[dict[str, np.ndarray]]]] = {}
    for deltas in deltas_seq:
        groups = getattr(deltas, "payload_groups", None)
        if groups is None:
            merge_deltas(total, deltas)  # type: ignore[arg-type]
            continue
        for key, proto, payloads in groups:
            pending.setdefault(key, (proto, []))[1].append(payloads)
    for key, (proto, parts) in pending.items():
        payloads = parts[0] if len(parts) == 1 else \
            {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
        sketch = total.get(key)
        if sketch is None and sparse:
            delta = sparse_from_payloads(proto, payloads)
            if delta is not None:
                total[key] = delta
                continue
        if sketch is None:  # sketches in ``total`` are copies we own: safe to add in place
            sketch = total[key] = proto.new_sketch()
        proto.accumulate(sketch, payloads)
    return total


def sparse_from_payloads(proto: Any, payloads: Mapping[str, np.ndarray]) -> SparseDelta | None:
    """The ``SparseDelta`` of a batch of reports from the protocol's ``flat_cells`` — O(b log b)
    for b reports, whatever the sketch's size — or None when the protocol has no flat cells or
    the batch would touch too much of the sketch for sparse rows to pay."""
    cells = proto.flat_cells(payloads)
    if cells is None:
        return None
    counter_cells, cohorts = cells
    m = proto.cohorts
    width = math.prod(proto.cell_shape)
    size = m * width
    if SPARSE_CELL_BYTES * (counter_cells.size + cohorts.size) > SPARSE_MAX_SHARE * 8 * (size + m) \
            or size + m >= 1 << 32:
        return None
    flat, values = np.unique(np.concatenate([counter_cells, cohorts + size]), return_counts=True)
    return SparseDelta(m, width, flat.astype(np.uint32), values.astype(np.int64), int(cohorts.size))


def batch_id_cutoff(before: str, today: dt.date, keep_days: int = BATCH_ID_MIN_DAYS) -> str:
    """The day before which batch ids may be deleted: ``before``, but never within ``keep_days``
    (at least ``BATCH_ID_MIN_DAYS``) of ``today``, so that SDK retries stay deduplicated."""
    keep = max(keep_days, BATCH_ID_MIN_DAYS)
    horizon = dt.date.min if (today - dt.date.min).days <= keep else today - dt.timedelta(days=keep)
    return min(before, horizon.isoformat())


def canonical_window(value: str, hour_ok: bool = True) -> str | None:
    """``value`` as a stored window label (zero-padded YYYY-MM-DD or YYYY-MM-DDTHH), or None.

    Windows are compared as strings (``since``/``until`` by their first 10 characters), so a
    date such as 2026-9-1, which ``strptime`` accepts, must be padded before it is used.
    """
    for fmt, width in (("%Y-%m-%d", 10), ("%Y-%m-%dT%H", 13))[:2 if hour_ok else 1]:
        try:
            return dt.datetime.strptime(value, fmt).isoformat()[:width]
        except ValueError:
            continue
    return None


def date_filter_ok(window: str, since: str | None, until: str | None) -> bool:
    """Whether a window (YYYY-MM-DD or YYYY-MM-DDTHH) falls in the inclusive date range."""
    day = window[:10]
    return (since is None or day >= since) and (until is None or day <= until)
