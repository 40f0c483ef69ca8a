"""The sketch store contract shared by the SQLite (embedded) and PostgreSQL (shared) backends.

A store holds, per (metric, fingerprint, window, cohort), a protocol's additive counters and
its report count, plus a table of batch ids for idempotent ingestion. Everything is a sum:
loading several windows (or rows written by several collectors) adds them up. The forms a
delta takes on disk (dense rows, sparse cells, flat rows) and their sums are the sketch-delta
algebra of ``sketches.deltas``; here: the contract, and the layout and compaction policy of rows.
"""

from __future__ import annotations

import abc
import dataclasses
import datetime as dt
import enum
from collections.abc import Sequence
from typing import NamedTuple

from client_sdk.errors import StoreError
from sketches.base import Sketch
from sketches.deltas import SPARSE_MAX_SHARE, is_dense_flat

SCHEMA_VERSION = 4
APPLICATION_ID = "ldp-telemetry"

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


# The immutable records are NamedTuples rather than frozen dataclasses: alike for their users, but
# a frozen dataclass compiles its methods as its module loads (~0.8 ms each of a fresh `ldpt
# estimate`, issue 32).
class SketchKey(NamedTuple):
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


class WindowInfo(NamedTuple):
    """A stored window of one metric and its report count."""

    metric: str
    fingerprint: str
    window: str
    reports: int


class PruneResult(NamedTuple):
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


class FlatRowInfo(NamedTuple):
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
