"""SQLite sketch store: the embedded default (WAL mode, one file, many processes).

Schema v4:
  ldpt_meta(key PRIMARY KEY, value)                     application id and schema version
  sketches(metric, fingerprint, window, cohort, reports, counts BLOB)   dense per-cohort counters
  sketch_deltas(id, metric, fingerprint, window, reports, m, width, cells BLOB, counts BLOB)
                                                        flat rows: sparse deltas, and at most one
                                                        dense flat row per key (empty ``cells``)
  batches(batch_id PRIMARY KEY, digest, reports, received)              idempotent ingestion
  shuffled_batches(batch_id PRIMARY KEY, digest, envelopes, received)  forwarded batches (v4)
  shuffle_windows(metric, fingerprint, window, reports, envelopes, batches, smallest_batch, ...)
                                                        what came through shufflers (v4,
                                                        collector/storage/shuffled.py)

A commit adds a small delta as one sparse row (its non-zero cells, ``SparseDelta``) instead of
rewriting the dense blob of a large sketch. Compaction (``settle``) merges a key's flat rows
size-tiered and folds them into the key's one dense flat row once they weigh as much as it
(``plan_merge``, docs/design.md "Compaction"), so each byte is rewritten a bounded number of
times however full the window; it runs after the commit, in its own transactions (the
collector's writer thread does it after the group's acknowledgements are sent). Loads sum every
form. v1, v2 and v3 stores are migrated in place on open (v3 adds the dense flat row, which a v2
reader would not understand, hence the version; v4 the two tables of shuffled batches).
"""

from __future__ import annotations

import datetime as dt
import math
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from client_sdk.errors import StoreError
from sketches.base import Sketch
from sketches.deltas import (
    SparseDelta,
    add_flat,
    blob_to_counts,
    counts_to_blob,
    dense_flat_blob,
    dense_flat_bytes,
    merge_flat,
    sum_deltas,
    worth_sparse,
)

from .base import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    TIER_FANOUT,
    BatchOutcome,
    CompactionStats,
    FlatRowInfo,
    PendingBatch,
    PruneResult,
    SketchKey,
    SketchStore,
    WindowInfo,
    plan_merge,
    wants_flat,
)

if TYPE_CHECKING:  # .shuffled loads with the first commit: a reader (`ldpt estimate`) never needs it
    from .shuffled import ShuffledBatch, ShuffledOutcome, ShuffleRecord

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ldpt_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sketches (
    metric TEXT NOT NULL, fingerprint TEXT NOT NULL, window TEXT NOT NULL, cohort INTEGER NOT NULL,
    reports INTEGER NOT NULL, counts BLOB NOT NULL,
    PRIMARY KEY (metric, fingerprint, window, cohort)
);
CREATE TABLE IF NOT EXISTS batches (
    batch_id BLOB PRIMARY KEY, digest BLOB NOT NULL, reports INTEGER NOT NULL, received TEXT NOT NULL
);
"""
#: Added by schema v2 (also the migration from v1).
_SCHEMA_V2 = (
    """CREATE TABLE IF NOT EXISTS sketch_deltas (
    id INTEGER PRIMARY KEY, metric TEXT NOT NULL, fingerprint TEXT NOT NULL, window TEXT NOT NULL,
    reports INTEGER NOT NULL, m INTEGER NOT NULL, width INTEGER NOT NULL,
    cells BLOB NOT NULL, counts BLOB NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS sketch_deltas_key ON sketch_deltas (metric, fingerprint, window)",
)
#: Added by schema v4 (also the migration from v1-v3): forwarded batches of shufflers.
_SCHEMA_V4 = (
    """CREATE TABLE IF NOT EXISTS shuffled_batches (
    batch_id BLOB PRIMARY KEY, digest BLOB NOT NULL, envelopes INTEGER NOT NULL, received TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS shuffle_windows (
    metric TEXT NOT NULL, fingerprint TEXT NOT NULL, window TEXT NOT NULL,
    reports INTEGER NOT NULL, envelopes INTEGER NOT NULL, batches INTEGER NOT NULL,
    smallest_batch INTEGER NOT NULL, largest_batch INTEGER NOT NULL,
    smallest_segment INTEGER NOT NULL, smallest_cohort INTEGER NOT NULL,
    envelope_epsilon REAL NOT NULL, min_reports INTEGER NOT NULL, max_reports INTEGER NOT NULL,
    max_envelope_reports INTEGER NOT NULL,
    PRIMARY KEY (metric, fingerprint, window))""",
)


def _upsert_shuffle() -> str:
    """The upsert of one ``ShuffleRecord`` row (``COMBINE``'s merge), built where a commit first
    needs it: ``upsert_assignments`` lives in .shuffled, which a reader never loads."""
    from .shuffled import upsert_assignments

    return f"""
INSERT INTO shuffle_windows VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (metric, fingerprint, window) DO UPDATE SET
    {upsert_assignments("", "excluded.", "min", "max")}
"""


BUSY_TIMEOUT_MS = 30_000
#: After a checkpoint the WAL file is truncated to at most this many bytes (SQLite otherwise
#: keeps the file at its largest size: on a small disk the WAL held all the space deletes freed).
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024
#: SQLite's primary result code for "database or disk is full".
SQLITE_FULL = 13
#: A load reads blobs above this many bytes by incremental blob I/O (``SQLiteStore._add_blob``,
#: ``_read_blob``): the dense row of a 10⁶-value sketch is 16 MB.
LARGE_BLOB = 1 << 20
#: Such a blob is added into a load's sum this many bytes at a time (``SQLiteStore._add_blob``).
LOAD_CHUNK_BYTES = 1 << 20


class SQLiteStore(SketchStore):
    """Sketch store in one SQLite file; safe for several processes (WAL, busy timeout)."""

    def __init__(self, path: str | Path, *, create: bool = True, synchronous: str = "FULL") -> None:
        self.path = Path(path)
        if not self.path.parent.is_dir():  # sqlite3 would only say "unable to open database file"
            raise StoreError(f"{self.path}: the directory {self.path.parent} does not exist"
                             + (f" (create it first: mkdir -p {self.path.parent})" if create else
                                " (check the path; `ldpt simulate` or `ldpt serve` create a store)"))
        if not create and not self.path.exists():
            raise StoreError(f"{self.path}: no store here (run `ldpt simulate` or `ldpt serve` "
                             "to create one)")
        if self.path.exists() and self.path.is_dir():
            raise StoreError(f"{self.path}: is a directory, not a store file")
        self._lock = threading.Lock()
        self.compaction = CompactionStats()
        try:
            self._conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_MS / 1000,
                                         isolation_level=None, check_same_thread=False)
            self._conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._init_schema(create, synchronous)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a readable SQLite store ({exc})") from None

    # --- schema -------------------------------------------------------------------------------
    def _init_schema(self, create: bool, synchronous: str) -> None:
        conn = self._conn
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "ldpt_meta" not in tables:
            if tables:
                raise StoreError(f"{self.path}: a SQLite database, but not an ldp-telemetry store "
                                 f"(tables: {', '.join(sorted(tables))})")
            if not create:
                raise StoreError(f"{self.path}: empty database, not an ldp-telemetry store")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)  # idempotent: safe when several processes create at once
            for statement in (*_SCHEMA_V2, *_SCHEMA_V4):
                conn.execute(statement)
            conn.execute("INSERT OR IGNORE INTO ldpt_meta VALUES ('application', ?)", (APPLICATION_ID,))
            conn.execute("INSERT OR IGNORE INTO ldpt_meta VALUES ('schema_version', ?)",
                         (str(SCHEMA_VERSION),))
        meta = dict(conn.execute("SELECT key, value FROM ldpt_meta").fetchall())
        if meta.get("application") != APPLICATION_ID:
            raise StoreError(f"{self.path}: not an ldp-telemetry store")
        version = int(meta.get("schema_version", "0"))
        if version in (1, 2, 3):
            version = self._migrate()
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: written by a newer ldp-telemetry (schema v{version}; this "
                             f"version reads up to v{SCHEMA_VERSION}); upgrade ldp-telemetry")
        if version < SCHEMA_VERSION:
            raise StoreError(f"{self.path}: schema v{version} is older than v{SCHEMA_VERSION} and "
                             "has no migration")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")

    def _migrate(self) -> int:
        """v1 -> v4: add the flat-row table (v1 data is unchanged); v2 -> v3: the rows are read
        as they are (v3 only adds the dense flat form); v3 -> v4: add the tables of shuffled
        batches (empty: nothing stored before came through a shuffler). Safe across processes."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute("SELECT value FROM ldpt_meta WHERE key='schema_version'").fetchone()
            if row is not None and int(row[0]) in (1, 2, 3):
                for statement in (*_SCHEMA_V2, *_SCHEMA_V4):
                    conn.execute(statement)
                conn.execute("UPDATE ldpt_meta SET value=? WHERE key='schema_version'",
                             (str(SCHEMA_VERSION),))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return SCHEMA_VERSION

    # --- writes -----------------------------------------------------------------------------------
    #: Write small deltas sparsely (tests set False on an instance to force dense rows).
    sparse = True
    #: Leave crowded keys for ``settle()`` instead of compacting them inside ``commit`` (the
    #: collector's ThreadedStore does so, to acknowledge a group before its compaction runs).
    defer_compaction = False

    def commit(self, batches: Sequence[PendingBatch | ShuffledBatch]) -> list[BatchOutcome | ShuffledOutcome]:
        # here: only a commit handles shuffled batches, so a reader never loads .shuffled
        from .shuffled import ShuffledBatch, ShuffledOutcome, batch_records, finite_epsilon, merge_records

        now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                outcomes: list[BatchOutcome | ShuffledOutcome] = []
                applied: list = []
                seen_here: dict[bytes, bytes] = {}
                units_here: dict[bytes, bytes] = {}
                records: dict[SketchKey, ShuffleRecord] = {}

                def dedupe(batch: PendingBatch) -> BatchOutcome:
                    if batch.batch_id is not None:
                        bid = bytes(batch.batch_id)
                        prior = seen_here.get(bid)
                        if prior is None:
                            row = conn.execute("SELECT digest FROM batches WHERE batch_id=?",
                                               (bid,)).fetchone()
                            prior = None if row is None else bytes(row[0])
                        if prior is not None:
                            return BatchOutcome.DUPLICATE if prior == batch.digest else BatchOutcome.CONFLICT
                        conn.execute("INSERT INTO batches VALUES (?, ?, ?, ?)",
                                     (bid, batch.digest, batch.reports, now))
                        seen_here[bid] = batch.digest
                    applied.append(batch.deltas)
                    return BatchOutcome.APPLIED

                for batch in batches:
                    if not isinstance(batch, ShuffledBatch):
                        outcomes.append(dedupe(batch))
                        continue
                    uid = bytes(batch.batch_id)
                    prior = units_here.get(uid)
                    if prior is None:
                        row = conn.execute("SELECT digest FROM shuffled_batches WHERE batch_id=?",
                                           (uid,)).fetchone()
                        prior = None if row is None else bytes(row[0])
                    if prior is not None:
                        outcomes.append(ShuffledOutcome(BatchOutcome.DUPLICATE if prior == batch.digest
                                                        else BatchOutcome.CONFLICT))
                        continue
                    conn.execute("INSERT INTO shuffled_batches VALUES (?, ?, ?, ?)",
                                 (uid, batch.digest, batch.envelopes, now))
                    units_here[uid] = batch.digest
                    members = tuple(dedupe(m) for m in batch.members)
                    merge_records(records, batch_records(batch, [o is BatchOutcome.APPLIED for o in members]))
                    outcomes.append(ShuffledOutcome(BatchOutcome.APPLIED, members))
                upsert = _upsert_shuffle() if records else ""
                for r in records.values():
                    conn.execute(upsert, (r.metric, r.fingerprint, r.window, r.reports, r.envelopes,
                                          r.batches, r.smallest_batch, r.largest_batch,
                                          r.smallest_segment, r.smallest_cohort,
                                          finite_epsilon(r.envelope_epsilon), r.min_reports,
                                          r.max_reports, r.max_envelope_reports))
                touched = []
                for key, summed in sum_deltas(applied, sparse=self.sparse).items():
                    if isinstance(summed, SparseDelta):
                        delta: SparseDelta | None = summed
                    else:
                        delta = worth_sparse(summed) if self.sparse else None
                    if delta is None and wants_flat(summed):  # many narrow cohorts: one row
                        m = len(summed.reports)
                        self._insert_flat(key, int(summed.reports.sum()), m, summed.counts[0].size, b"",
                                          dense_flat_blob(summed))
                        touched.append(key)
                    elif delta is None:
                        self._upsert(key, summed)
                    else:
                        self._insert_flat(key, delta.reports, delta.m, delta.width, delta.cells_blob(),
                                          delta.values_blob())
                        touched.append(key)
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                self._after_failure(exc)
                raise
            self._crowded.update(touched)
        if not self.defer_compaction:
            self.settle()
        return outcomes

    @property
    def _crowded(self) -> set[SketchKey]:
        """Keys that got flat rows since their last ``settle`` (candidates for a merge)."""
        crowded = self.__dict__.get("_crowded_keys")
        if crowded is None:
            crowded = self.__dict__["_crowded_keys"] = set()
        return crowded

    def _insert_flat(self, key: SketchKey, reports: int, m: int, width: int, cells: bytes,
                     counts: bytes) -> None:
        self._conn.execute("INSERT INTO sketch_deltas (metric, fingerprint, window, reports, m, width, "
                           "cells, counts) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           (key.metric, key.fingerprint, key.window, reports, m, width, cells, counts))

    def settle(self) -> int:
        """Compact the keys the latest commits wrote flat rows to (``plan_merge``: size-tiered
        merges, and the dense row absorbing the rest), each merge its own short transaction;
        returns the merges done. A failure is logged and leaves the key for the next run."""
        merges = 0
        with self._lock:
            keys, self.__dict__["_crowded_keys"] = self._crowded, set()
        for key in keys:
            try:
                merges += self._settle_key(key)
            except Exception as exc:  # the commits stand; housekeeping compacts the key later
                import logging  # only here: a one-shot reader (`ldpt estimate`) never imports it

                logging.getLogger("ldpt.store").warning("compaction of %s window %s failed: %s", key.metric,
                                                        key.window, exc)
        return merges

    def _settle_key(self, key: SketchKey, fold_all: bool = False) -> int:
        """Merge the key's flat rows until ``plan_merge`` has nothing to do (or, with
        ``fold_all``, into one row); returns the merges done."""
        merges = 0
        while True:
            with self._lock:
                if not self._merge_once(key, fold_all):
                    return merges
            merges += 1
            if fold_all:
                return merges

    def _merge_once(self, key: SketchKey, fold_all: bool) -> bool:
        """One transaction: plan the key's next merge and do it; False when there is none.

        The rows merged are DELETEd by id and their sum INSERTed in the same transaction, so a
        crash at any point leaves either the old rows or the merged one, never both or neither."""
        conn = self._conn
        where = "metric=? AND fingerprint=? AND window=?"
        args = (key.metric, key.fingerprint, key.window)
        try:
            conn.execute("BEGIN IMMEDIATE")
            infos = [FlatRowInfo(*r) for r in conn.execute(
                f"SELECT id, length(cells), length(counts) FROM sketch_deltas WHERE {where}", args)]
            if not infos:
                conn.execute("COMMIT")
                return False
            first = conn.execute(f"SELECT m, width FROM sketch_deltas WHERE {where} LIMIT 1", args).fetchone()
            has_cohort_rows = fold_all and conn.execute(
                f"SELECT 1 FROM sketches WHERE {where} LIMIT 1", args).fetchone() is not None
            if fold_all:   # whichever form is smaller
                plan = ([r.id for r in infos], None) if len(infos) > 1 or has_cohort_rows else None
            else:
                plan = plan_merge(infos, dense_flat_bytes(*first))
            if plan is None:
                conn.execute("COMMIT")
                return False
            ids, dense_above = plan
            marks = ",".join("?" * len(ids))
            rows = conn.execute(f"SELECT reports, m, width, cells, counts FROM sketch_deltas WHERE {where} "
                                f"AND id IN ({marks})", (*args, *ids)).fetchall()
            label = f"{self.path}: {key.metric!r} window {key.window}"
            reports = sum(int(r[0]) for r in rows)
            m, width, cells, counts = merge_flat([tuple(r[1:]) for r in rows], label,
                                                 math.inf if has_cohort_rows else dense_above)
            conn.execute(f"DELETE FROM sketch_deltas WHERE {where} AND id IN ({marks})", (*args, *ids))
            if has_cohort_rows:   # a window that also has dense per-cohort rows: one form, those
                total = Sketch(np.zeros((m, width), dtype=np.int64), np.zeros(m, dtype=np.int64))
                add_flat(total, m, width, cells, counts, label)
                self._upsert(key, total)
            else:
                self._insert_flat(key, reports, m, width, cells, counts)
            conn.execute("COMMIT")
            self.compaction.note(len(rows), sum(len(r[3]) + len(r[4]) for r in rows), len(cells) + len(counts))
            return True
        except ValueError as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(str(exc)) from None
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def compact(self, before: str | None = None) -> int:
        """Fold every key with several flat rows (or flat and per-cohort rows) into one form,
        for the windows of days before ``before`` (YYYY-MM-DD: closed windows, each folded once)
        or for all, and settle the crowded keys of open windows (``plan_merge``: several
        collector processes may each have left rows); returns the keys folded or merged."""
        where, args = ("WHERE substr(d.window, 1, 10) < ?", (before,)) if before is not None else ("", ())
        sql = (f"SELECT d.metric, d.fingerprint, d.window FROM sketch_deltas d {where} "
               "GROUP BY d.metric, d.fingerprint, d.window HAVING count(*) > 1 OR EXISTS (SELECT 1 "
               "FROM sketches s WHERE s.metric = d.metric AND s.fingerprint = d.fingerprint AND "
               "s.window = d.window)")
        crowded_sql = ("SELECT metric, fingerprint, window FROM sketch_deltas GROUP BY metric, fingerprint, "
                       f"window HAVING count(*) >= {TIER_FANOUT}")
        with self._lock:
            keys = self._conn.execute(sql, args).fetchall()
            crowded = self._conn.execute(crowded_sql).fetchall() if before is not None else []
        done = 0
        for metric, fingerprint, window in keys:
            done += self._settle_key(SketchKey(metric, fingerprint, window), fold_all=True)
        for metric, fingerprint, window in crowded:
            done += bool(self._settle_key(SketchKey(metric, fingerprint, window)))
        return done

    def _after_failure(self, exc: BaseException) -> None:
        """A full disk: checkpoint and truncate the WAL (lock held), so the space the WAL holds
        beyond the database's own pages is given back (a WAL that grew before the disk filled
        would otherwise keep it, and every later commit would fail)."""
        if isinstance(exc, sqlite3.Error) and getattr(exc, "sqlite_errorcode", 0) & 0xFF == SQLITE_FULL:
            try:
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            except sqlite3.Error:
                pass  # readers hold the WAL, or the database file cannot grow: the next failure retries

    def probe_write(self) -> None:
        """Write one row and commit (readiness while commits fail): StoreError if the store cannot
        take a write now (a full disk, a read-only file)."""
        now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT OR REPLACE INTO ldpt_meta VALUES ('write_probe', ?)", (now,))
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                self._after_failure(exc)
                raise StoreError(f"{self.path}: cannot write ({exc})") from None

    def _upsert(self, key: SketchKey, sketch: Sketch) -> None:
        touched = [int(c) for c in np.flatnonzero(
            (sketch.reports != 0) | sketch.counts.reshape(len(sketch.reports), -1).any(1))]
        rows = {}
        for cohort, blob, reports in self._conn.execute(  # only the cohorts this delta touches
                "SELECT cohort, counts, reports FROM sketches WHERE metric=? AND fingerprint=? "
                f"AND window=? AND cohort IN ({','.join('?' * len(touched))})",
                (key.metric, key.fingerprint, key.window, *touched)):
            rows[cohort] = (blob, reports)
        cell_shape = sketch.counts.shape[1:]
        for cohort in touched:
            counts = sketch.counts[cohort]
            reports = int(sketch.reports[cohort])
            if cohort in rows:
                old_blob, old_reports = rows[cohort]
                counts = counts + self._decode(old_blob, cell_shape, key)
                reports += old_reports
            self._conn.execute("INSERT OR REPLACE INTO sketches VALUES (?, ?, ?, ?, ?, ?)",
                               (key.metric, key.fingerprint, key.window, cohort, reports,
                                counts_to_blob(counts)))

    def _decode(self, blob: bytes, cell_shape: tuple[int, ...], key: SketchKey) -> np.ndarray:
        expected = int(np.prod(cell_shape)) * 8
        if len(blob) != expected:
            raise StoreError(f"{self.path}: stored sketch for {key.metric!r} window {key.window} has "
                             f"{len(blob)} bytes, expected {expected}; the store is corrupt or "
                             "was written under other parameters")
        return blob_to_counts(blob, cell_shape)

    # --- reads ------------------------------------------------------------------------------------
    def load(self, metric: str, fingerprint: str, template: Sketch,
             windows: Sequence[str] | None = None, since: str | None = None,
             until: str | None = None) -> Sketch:
        """The sum of the stored rows, into zeroed arrays of ``template``'s shape (its counters are
        not read: no copy of an empty 16 MB sketch at d = 10⁶). A blob above ``LARGE_BLOB`` bytes
        is added into the sum a chunk at a time straight from incremental blob I/O
        (``_add_blob``): no bytes object of the whole row, whose pages cost more than the add."""
        out = Sketch(np.zeros(template.counts.shape, template.counts.dtype),
                     np.zeros(template.reports.shape, template.reports.dtype))
        if windows is not None and not windows:
            return out
        where, args = _window_filter(metric, fingerprint, windows, since, until)
        cell_shape = template.counts.shape[1:]
        m = template.reports.shape[0]
        blob, small = self._read_blob, self._small_blob
        with self._lock:  # one read transaction: a compaction cannot move cells between the two
            self._conn.execute("BEGIN")
            try:
                rows = self._conn.execute(f"SELECT rowid, window, cohort, reports, {small('counts')} FROM "
                                          f"sketches WHERE {where}", args).fetchall()
                sparse_rows = []
                for rowid, window, rm, rwidth, cells, counts in self._conn.execute(
                        f"SELECT id, window, m, width, {small('cells')}, {small('counts')} FROM "
                        f"sketch_deltas WHERE {where}", args).fetchall():
                    cells = blob("sketch_deltas", "cells", rowid) if cells is None else cells
                    if counts is None and not cells:   # a large dense flat row: added as it is read
                        self._add_dense_flat(out, rm, rwidth, rowid, f"{self.path}: {metric!r} window {window}")
                        continue
                    sparse_rows.append((window, rm, rwidth, cells,
                                        blob("sketch_deltas", "counts", rowid) if counts is None else counts))
                inline = []
                for rowid, window, cohort, reports, counts in rows:
                    if not 0 <= cohort < m:
                        raise StoreError(f"{self.path}: stored cohort {cohort} of {metric!r} window {window} "
                                         f"is outside [0, {m}); the store does not match the registry")
                    if counts is None:
                        self._add_blob("sketches", "counts", rowid, [out.counts[cohort].reshape(-1)],
                                       f"{self.path}: stored sketch for {metric!r} window {window}")
                    else:
                        inline.append((window, cohort, counts))
                    out.reports[cohort] += reports
            finally:
                self._conn.execute("COMMIT")
        for window, cohort, counts in inline:
            out.counts[cohort] += self._decode(counts, cell_shape, SketchKey(metric, fingerprint, window))
        for window, rm, rwidth, cells, counts in sparse_rows:
            try:
                add_flat(out, rm, rwidth, cells, counts, f"{self.path}: {metric!r} window {window}")
            except ValueError as exc:
                raise StoreError(str(exc)) from None
        return out

    def _add_blob(self, table: str, column: str, rowid: int, targets: Sequence[np.ndarray],
                  what: str) -> None:
        """Add one stored blob of little-endian int64 into ``targets`` (int64 vectors, filled in
        order), ``LOAD_CHUNK_BYTES`` at a time by incremental blob I/O in the caller's read
        transaction: the sum's own pages and one chunk's, not a copy of the row. A blob of another
        length than the targets' raises StoreError (``what`` names the row)."""
        expected = 8 * sum(target.size for target in targets)
        with self._conn.blobopen(table, column, rowid, readonly=True) as handle:
            if len(handle) != expected:
                raise StoreError(f"{what} has {len(handle)} bytes, expected {expected}; the store is "
                                 "corrupt or was written under other parameters")
            step = LOAD_CHUNK_BYTES // 8
            for target in targets:
                for start in range(0, target.size, step):
                    part = target[start:start + step]
                    part += np.frombuffer(handle.read(8 * part.size), dtype="<i8")

    def _add_dense_flat(self, out: Sketch, m: int, width: int, rowid: int, where: str) -> None:
        """Add a large dense flat row (``add_flat``'s dense form: the counters, then the
        per-cohort reports) into ``out`` by ``_add_blob``, after ``add_flat``'s shape check."""
        out_m = len(out.reports)
        out_width = out.counts[0].size if out_m else 0
        if (m, width) != (out_m, out_width):
            raise StoreError(f"{where}: dense row of {m} x {width} cells, the registry's sketch is "
                             f"{out_m} x {out_width}; the store was written under other parameters")
        self._add_blob("sketch_deltas", "counts", rowid, [out.counts.reshape(-1), out.reports],
                       f"{where}: dense row")

    def _small_blob(self, column: str) -> str:
        """``column`` in a SELECT of a load, NULL where its blob is above ``LARGE_BLOB`` bytes and
        ``_read_blob`` reads it (SQLite's length() of a blob does not read it)."""
        if not hasattr(self._conn, "blobopen"):   # Python 3.10: every blob as a column value
            return column
        return f"CASE WHEN length({column}) > {LARGE_BLOB} THEN NULL ELSE {column} END"

    def _read_blob(self, table: str, column: str, rowid: int) -> bytes:
        """One stored blob by incremental blob I/O, in the caller's read transaction: one copy,
        into the bytes returned (a column value is copied twice: SQLite's, then Python's)."""
        with self._conn.blobopen(table, column, rowid, readonly=True) as handle:
            return handle.read()

    def shuffle_records(self, metric: str, fingerprint: str, windows: Sequence[str] | None = None,
                        since: str | None = None, until: str | None = None) -> list[ShuffleRecord]:
        """What came through shufflers for the key's windows (oldest first; none for a window
        that received nothing shuffled)."""
        where, args = _window_filter(metric, fingerprint, windows, since, until)
        with self._lock:
            rows = self._conn.execute(f"SELECT * FROM shuffle_windows WHERE {where} ORDER BY window",
                                      args).fetchall()
        if not rows:
            return []
        from .shuffled import ShuffleRecord  # here: a store no shuffler wrote to never loads it

        return [ShuffleRecord(*row) for row in rows]

    def shuffled_batch(self, batch_id: bytes) -> bytes | None:
        """The digest a forwarded batch id was committed with, or None."""
        with self._lock:
            row = self._conn.execute("SELECT digest FROM shuffled_batches WHERE batch_id=?",
                                     (bytes(batch_id),)).fetchone()
        return None if row is None else bytes(row[0])

    def windows(self, metric: str | None = None) -> list[WindowInfo]:
        where, args = ("WHERE metric=?", (metric, metric)) if metric is not None else ("", ())
        sql = (f"SELECT metric, fingerprint, window, SUM(reports) FROM (SELECT metric, fingerprint, "
               f"window, reports FROM sketches {where} UNION ALL SELECT metric, fingerprint, window, "
               f"reports FROM sketch_deltas {where}) GROUP BY metric, fingerprint, window "
               f"ORDER BY window, metric")
        with self._lock:
            return [WindowInfo(*row) for row in self._conn.execute(sql, args)]

    def prune(self, before: str, batch_ids_before: str | None = None) -> PruneResult:
        ids_before = before if batch_ids_before is None else batch_ids_before
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                windows = conn.execute(
                    "SELECT count(*) FROM (SELECT metric, fingerprint, window FROM sketches WHERE "
                    "substr(window, 1, 10) < ?1 UNION SELECT metric, fingerprint, window FROM "
                    "sketch_deltas WHERE substr(window, 1, 10) < ?1)", (before,)).fetchone()[0]
                rows = conn.execute("DELETE FROM sketches WHERE substr(window, 1, 10) < ?",
                                    (before,)).rowcount
                rows += conn.execute("DELETE FROM sketch_deltas WHERE substr(window, 1, 10) < ?",
                                     (before,)).rowcount
                batch_ids = conn.execute("DELETE FROM batches WHERE substr(received, 1, 10) < ?",
                                         (ids_before,)).rowcount
                # what came shuffled goes with its window; forwarded-batch ids with the batch ids
                conn.execute("DELETE FROM shuffle_windows WHERE substr(window, 1, 10) < ?", (before,))
                conn.execute("DELETE FROM shuffled_batches WHERE substr(received, 1, 10) < ?", (ids_before,))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return PruneResult(int(windows), int(rows), int(batch_ids))

    def check(self) -> None:
        try:
            with self._lock:
                version = self._conn.execute(
                    "SELECT value FROM ldpt_meta WHERE key='schema_version'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: unreachable ({exc})") from None
        if version is None or int(version[0]) != SCHEMA_VERSION:
            raise StoreError(f"{self.path}: schema is not v{SCHEMA_VERSION}")

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _window_filter(metric: str, fingerprint: str, windows: Sequence[str] | None, since: str | None,
                   until: str | None) -> tuple[str, list[object]]:
    """The WHERE clause (and its arguments) of one key's windows, as ``load`` selects them."""
    where = "metric=? AND fingerprint=?"
    args: list[object] = [metric, fingerprint]
    if windows is not None:
        where += f" AND window IN ({','.join('?' * len(windows))})" if windows else " AND 0"
        args += list(windows)
    if since is not None:
        where += " AND substr(window, 1, 10) >= ?"
        args.append(since)
    if until is not None:
        where += " AND substr(window, 1, 10) <= ?"
        args.append(until)
    return where, args


def open_store(path: str | Path, *, create: bool = False) -> SQLiteStore:
    """Open the SQLite store at ``path`` (create it only when asked)."""
    return SQLiteStore(path, create=create)
