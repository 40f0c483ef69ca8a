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

SCHEMA_VERSION = 4
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
        """One transaction: dedupe every batch id, then add the deltas of the new batches.

        An item may also be a shuffler's forwarded batch (``shuffled.ShuffledBatch``): its id is
        deduplicated first (a ``ShuffledOutcome``), then each of its members as a batch, and its
        ``ShuffleRecord`` rows are added, all in the same transaction."""

    def shuffle_records(self, metric: str, fingerprint: str, windows: Sequence[str] | None = None,
                        since: str | None = None, until: str | None = None) -> list:
        """The ``ShuffleRecord`` of each of the key's windows that received shuffled batches."""
        return []

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
#: a sketch of many narrow cohorts (OLH, discover) is kept as flat rows, never per-cohort rows.
ROW_OVERHEAD_BYTES = 64

# --- compaction of flat rows (docs/design.md, "Compaction") ----------------------------------------
#: A key's flat rows (sparse deltas and at most one dense flat row) are merged size-tiered: rows
#: whose bytes fall in one tier [TIER_BASE_BYTES·F^t, TIER_BASE_BYTES·F^(t+1)) are merged once
#: there are TIER_FANOUT of them, so each byte is rewritten once per tier (a handful: the tiers
#: stop at the dense size), never once per commit; a load reads at most F−1 rows per tier.
TIER_FANOUT = 16
TIER_BASE_BYTES = 1024
#: The dense row absorbs the other rows once they weigh this share of it: each dense byte is then
#: rewritten once per that many bytes written, and a load reads at most ~2x the dense size.
DENSE_ABSORB_SHARE = 1.0


#: A dense delta touching at least this many cohorts is written as one dense flat row rather than
#: a row per cohort (OLH and discover have 10^4-10^5 narrow cohorts; RAPPOR's few wide ones keep
#: per-cohort rows, so a commit rewrites only the cohorts its reports hit).
FLAT_MIN_COHORTS = 1024


def wants_flat(sketch: Sketch) -> bool:
    """Whether a dense delta goes to a dense flat row (``FLAT_MIN_COHORTS``)."""
    m = len(sketch.reports)
    if m < FLAT_MIN_COHORTS:
        return False
    touched = int(((sketch.reports != 0) | sketch.counts.reshape(m, -1).any(axis=1)).sum())
    return touched >= FLAT_MIN_COHORTS


def dense_flat_blob(sketch: Sketch) -> bytes:
    """A sketch's dense flat row: its counters, then its per-cohort report counts, as int64."""
    return np.concatenate([sketch.counts.reshape(-1), sketch.reports]).astype("<i8").tobytes()


def flat_size(m: int, width: int) -> int:
    """Cells of a sketch's flat space: m·width counters and m report counts."""
    return m * width + m


def dense_flat_bytes(m: int, width: int) -> int:
    """Bytes of a key's dense flat row (every cell of its flat space as int64)."""
    return 8 * flat_size(m, width)


def is_dense_flat(cells_len: int, counts_len: int) -> bool:
    """Whether a stored flat row (by its blobs' lengths) is the dense form: no cell indices, and
    a value for every cell (an empty sparse delta has neither)."""
    return cells_len == 0 and counts_len > 0


def tier_of(nbytes: int) -> int:
    """The size tier of a stored flat row of ``nbytes`` bytes (cells plus values)."""
    tier, limit = 0, TIER_BASE_BYTES * TIER_FANOUT
    while nbytes >= limit:
        tier += 1
        limit *= TIER_FANOUT
    return tier


@dataclasses.dataclass
class CompactionStats:
    """What a store's compaction did so far (operation counts for tests, benches, /metrics)."""

    merges: int = 0
    rows_merged: int = 0
    bytes_read: int = 0      # blobs of the rows merged
    bytes_written: int = 0   # blobs of the rows written in their place

    def note(self, rows: int, read: int, written: int) -> None:
        self.merges += 1
        self.rows_merged += rows
        self.bytes_read += read
        self.bytes_written += written


@dataclasses.dataclass(frozen=True)
class FlatRowInfo:
    """What compaction needs to know of one stored flat row: its id and blob lengths."""

    id: int
    cells_len: int
    counts_len: int

    @property
    def nbytes(self) -> int:
        return self.cells_len + self.counts_len

    @property
    def dense(self) -> bool:
        return is_dense_flat(self.cells_len, self.counts_len)


def plan_merge(rows: Sequence[FlatRowInfo], dense_bytes: int) -> tuple[list[int], float] | None:
    """The next merge of a key's flat rows — (ids, dense_above: the merged row is written dense
    when its sparse form would take more bytes than this) — or None when the key is settled.

    - The sparse rows weigh ``DENSE_ABSORB_SHARE`` of the dense size (or there are two dense
      rows: an interrupted upgrade): merge everything, into a dense row unless the sum is
      sparse enough to take at most half the dense size (then the next such merge is at least
      half a dense size of new rows away: every byte is rewritten a bounded number of times).
    - Else the lowest tier holding ``TIER_FANOUT`` sparse rows: merge that tier (its sum stays
      below the dense size, so sparse).
    So a key holds at most one dense row plus sparse rows of less than its weight.
    """
    dense = [r for r in rows if r.dense]
    sparse = [r for r in rows if not r.dense]
    if len(dense) > 1 or (sparse and sum(r.nbytes for r in sparse) >= DENSE_ABSORB_SHARE * dense_bytes):
        return [r.id for r in rows], SPARSE_MAX_SHARE * dense_bytes
    tiers: dict[int, list[int]] = {}
    for r in sparse:
        tiers.setdefault(tier_of(r.nbytes), []).append(r.id)
    for tier in sorted(tiers):
        if len(tiers[tier]) >= TIER_FANOUT:
            return tiers[tier], float(dense_bytes)
    return None


def merge_flat(parts: Sequence[tuple[int, int, bytes, bytes]], where: str,
               dense_above: float | None = None) -> tuple[int, int, bytes, bytes]:
    """The sum of stored flat rows ``(m, width, cells, values)`` as one row: sparse (sorted
    distinct cells) while 12 bytes per non-zero cell are at most ``dense_above`` (default: the
    dense row's bytes; ``math.inf``: always sparse) and no part is dense, else dense (empty
    ``cells``, every value). Integer arithmetic throughout: the sum is exact. ValueError
    (naming ``where``) if the rows disagree in shape or one is corrupt."""
    m, width = parts[0][0], parts[0][1]
    size = flat_size(m, width)
    dense_bytes = 8 * size
    sparse_cells, sparse_values, dense_parts = [], [], []
    for pm, pw, cells_blob, values_blob in parts:
        if (pm, pw) != (m, width):
            raise ValueError(f"{where}: flat rows of {m} x {width} and {pm} x {pw} cells; the store "
                             "was written under other parameters")
        if is_dense_flat(len(cells_blob), len(values_blob)):
            if len(values_blob) != dense_bytes:
                raise ValueError(f"{where}: corrupt dense row ({len(values_blob)} bytes, expected {dense_bytes})")
            dense_parts.append(np.frombuffer(values_blob, dtype="<i8"))
            continue
        cells = np.frombuffer(cells_blob, dtype="<u4")
        values = np.frombuffer(values_blob, dtype="<i8")
        if cells.size != values.size or (cells.size and (int(cells[-1]) >= size
                                                           or not bool(np.all(cells[1:] > cells[:-1])))):
            raise ValueError(f"{where}: corrupt sparse delta ({cells.size} cells, {values.size} values)")
        sparse_cells.append(cells)
        sparse_values.append(values)
    if not dense_parts and sparse_cells:
        cells = np.concatenate(sparse_cells).astype(np.int64)
        values = np.concatenate(sparse_values)
        order = np.argsort(cells, kind="stable")
        cells, values = cells[order], values[order]
        starts = np.flatnonzero(np.concatenate(([True], cells[1:] != cells[:-1])))
        cells, values = cells[starts], np.add.reduceat(values, starts)
        keep = values != 0
        cells, values = cells[keep], values[keep]
        if SPARSE_CELL_BYTES * cells.size <= (dense_bytes if dense_above is None else dense_above):
            return m, width, cells.astype("<u4").tobytes(), values.astype("<i8").tobytes()
        flat = np.zeros(size, dtype=np.int64)
        flat[cells] = values
        return m, width, b"", flat.astype("<i8").tobytes()
    flat = np.zeros(size, dtype=np.int64)
    for part in dense_parts:
        flat += part
    for cells, values in zip(sparse_cells, sparse_values):
        flat[cells] += values          # distinct cells within a row: plain fancy-index add
    return m, width, b"", flat.astype("<i8").tobytes()


def folded_form(sketch: Sketch) -> SparseDelta | None:
    """How a key's whole sum is written when it goes to flat rows: one sparse row when that
    takes fewer bytes than its dense flat row, else None (one dense flat row)."""
    m = len(sketch.reports)
    if m == 0:
        return None
    delta = sparse_delta(sketch)
    return delta if delta.nbytes <= dense_flat_bytes(m, sketch.counts[0].size) else None


def add_flat(out: Sketch, m: int, width: int, cells_blob: bytes, values_blob: bytes, where: str) -> None:
    """Add one stored flat row (sparse delta or dense flat row) into ``out`` (in place)."""
    if not is_dense_flat(len(cells_blob), len(values_blob)):
        add_sparse(out, m, width, cells_blob, values_blob, where)
        return
    out_m = len(out.reports)
    out_width = out.counts[0].size if out_m else 0
    if (m, width) != (out_m, out_width):
        raise ValueError(f"{where}: dense row of {m} x {width} cells, the registry's sketch is "
                         f"{out_m} x {out_width}; the store was written under other parameters")
    if len(values_blob) != dense_flat_bytes(m, width):
        raise ValueError(f"{where}: corrupt dense row ({len(values_blob)} bytes)")
    values = np.frombuffer(values_blob, dtype="<i8")
    flat = out.counts.reshape(-1)
    flat += values[:flat.size]
    out.reports += values[flat.size:]


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
