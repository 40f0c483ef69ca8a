"""PostgreSQL sketch store: many collectors on many machines, one database (asyncpg).

Schema v4 (in the first schema of the DSN's ``search_path``, created if missing):

  ldpt_meta(key PRIMARY KEY, value)                  application id and schema version
  ldpt_batches(batch_id bytea PRIMARY KEY, digest, reports, writer, received)
  ldpt_deltas(id identity PRIMARY KEY, writer, seq, metric, fingerprint, time_window,
              cohort, reports, counts bytea, cells bytea, m, width)
                                                     append-only sketch deltas
  ldpt_shuffled_batches(batch_id bytea PRIMARY KEY, digest, envelopes, writer, received)
  ldpt_shuffle_windows(metric, fingerprint, time_window, reports, envelopes, batches, ...)
                                                     shufflers' forwarded batches (v4,
                                                     collector/storage/shuffled.py)

A delta row is dense per cohort (one cohort's counters; ``cells`` NULL) or *flat* (``cohort``
= -1, ``cells`` not NULL): sparse (the non-zero cells of a whole delta in the sketch's flat
space, ``SparseDelta``; ``counts`` holds their values) or, with empty ``cells``, dense (every
cell of the flat space; v3). A commit writes a small delta of a large sketch sparsely, so its
cost follows the reports it carries, not the domain. v1 stores gain the three columns on open;
v2 stores only change version (a v2 reader would not understand dense flat rows); v1-v3 stores
gain the two tables of shuffled batches (v4), empty.

Why append-only: an UPDATE of a shared per-window sketch row would serialise every collector
on that row's lock. Instead each group commit INSERTs its own delta rows (keyed by the
collector instance ``writer`` and its commit sequence ``seq``), so concurrent commits never
touch the same row; an estimate is the SUM over rows (docs/design.md, "Sketches add").
Batch ids live in one table under a unique key, so dedupe is global across collectors: the
INSERT ... ON CONFLICT DO NOTHING of a batch id another collector is committing waits for
that transaction and then sees it (duplicate) or, if it rolled back, takes it. Ids are
inserted in sorted order so two groups sharing ids cannot deadlock.

Compaction keeps the row count small: per (metric, fingerprint, window, cohort) with many
dense rows (``acompact``), and per (metric, fingerprint, window) for flat rows (``plan_merge``:
size-tiered merges, and one dense flat row absorbing the rest once they weigh as much; a
background task of the collector whose commits crowded the key, off the acknowledged commit
path). One transaction DELETEs the rows (RETURNING their values) and INSERTs their sum —
readers see either all the old rows or the one new row (MVCC), a crash leaves the old rows, and
an advisory lock keeps two collectors from merging the same key at once. Closed windows are
folded into one row by housekeeping (``amaintain``).

Counters are stored as little-endian int64 blobs (``counts_to_blob``) and summed in numpy.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import os
import re
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

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

from .aio import AsyncSketchStore
from .base import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    TIER_FANOUT,
    BatchOutcome,
    CommitOutcomeUnknown,
    CompactionStats,
    FlatRowInfo,
    PendingBatch,
    PruneResult,
    SketchKey,
    WindowInfo,
    plan_merge,
    wants_flat,
)
from .shuffled import (
    ShuffledBatch,
    ShuffledOutcome,
    ShuffleRecord,
    batch_records,
    finite_epsilon,
    merge_records,
    upsert_assignments,
)

log = logging.getLogger("ldpt.store")

try:  # optional extra: `pip install 'ldp-telemetry[postgres]'`
    import asyncpg
except ImportError:  # pragma: no cover - exercised only without the extra
    asyncpg = None

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ldpt_meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS ldpt_batches (
    batch_id bytea PRIMARY KEY, digest bytea NOT NULL, reports integer NOT NULL,
    writer text NOT NULL, received timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS ldpt_deltas (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    writer text NOT NULL, seq bigint NOT NULL,
    metric text NOT NULL, fingerprint text NOT NULL, time_window text NOT NULL,
    cohort integer NOT NULL, reports bigint NOT NULL, counts bytea NOT NULL
);
CREATE INDEX IF NOT EXISTS ldpt_deltas_key ON ldpt_deltas (metric, fingerprint, time_window, cohort);
"""
#: Schema v2: sparse delta rows (also the migration from v1; idempotent).
_SCHEMA_V2 = """
ALTER TABLE ldpt_deltas ADD COLUMN IF NOT EXISTS cells bytea;
ALTER TABLE ldpt_deltas ADD COLUMN IF NOT EXISTS m integer;
ALTER TABLE ldpt_deltas ADD COLUMN IF NOT EXISTS width integer;
"""
#: Schema v4: shufflers' forwarded batches and what came through them (also the migration).
_SCHEMA_V4 = """
CREATE TABLE IF NOT EXISTS ldpt_shuffled_batches (
    batch_id bytea PRIMARY KEY, digest bytea NOT NULL, envelopes integer NOT NULL,
    writer text NOT NULL, received timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS ldpt_shuffle_windows (
    metric text NOT NULL, fingerprint text NOT NULL, time_window text NOT NULL,
    reports bigint NOT NULL, envelopes bigint NOT NULL, batches bigint NOT NULL,
    smallest_batch integer NOT NULL, largest_batch integer NOT NULL,
    smallest_segment integer NOT NULL, smallest_cohort integer NOT NULL,
    envelope_epsilon double precision NOT NULL, min_reports integer NOT NULL,
    max_reports integer NOT NULL, max_envelope_reports integer NOT NULL,
    PRIMARY KEY (metric, fingerprint, time_window)
);
"""
#: Flat rows' large values (dense flat rows) are compressed with lz4 where the server has it:
#: ~10x faster than the default pglz to write and to read back (ignored where unsupported).
_LZ4 = "ALTER TABLE ldpt_deltas ALTER COLUMN counts SET COMPRESSION lz4"
#: ``cohort`` of a flat (sparse or dense flat) row.
SPARSE_COHORT = -1
#: A collector looks at a key's flat rows (``plan_merge``) after writing this many of them to it,
#: or a quarter of its dense size.
SETTLE_EVERY_ROWS = TIER_FANOUT
#: Advisory lock id serialising schema creation when many collectors start at once.
_SCHEMA_LOCK = 0x6C647074  # "ldpt"
#: Compact a (metric, fingerprint, window, cohort) once it has more rows than this.
COMPACT_MIN_ROWS = 64
#: Transient failures worth retrying a group commit for (its transaction rolled back).
_RETRY_SQLSTATES = {"40001", "40P01"}  # serialization_failure, deadlock_detected
COMMIT_ATTEMPTS = 5
#: SQLSTATE classes of a lost connection (08: connection exception; 57: operator intervention,
#: e.g. 57P01 admin_shutdown after pg_terminate_backend): a commit under way may have applied.
_LOST_SQLSTATE_CLASSES = {"08", "57"}

_INSERT_BATCHES = """
INSERT INTO ldpt_batches (batch_id, digest, reports, writer)
SELECT b, d, r, $4 FROM unnest($1::bytea[], $2::bytea[], $3::int[]) AS t(b, d, r) ORDER BY b
ON CONFLICT (batch_id) DO NOTHING RETURNING batch_id
"""
_INSERT_SHUFFLED = """
INSERT INTO ldpt_shuffled_batches (batch_id, digest, envelopes, writer)
SELECT b, d, e, $4 FROM unnest($1::bytea[], $2::bytea[], $3::int[]) AS t(b, d, e) ORDER BY b
ON CONFLICT (batch_id) DO NOTHING RETURNING batch_id
"""
_UPSERT_SHUFFLE = f"""
INSERT INTO ldpt_shuffle_windows AS s
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::int[],
                     $8::int[], $9::int[], $10::int[], $11::float8[], $12::int[], $13::int[], $14::int[])
ORDER BY 1, 2, 3
ON CONFLICT (metric, fingerprint, time_window) DO UPDATE SET
    {upsert_assignments("s.", "EXCLUDED.", "LEAST", "GREATEST")}
"""
_INSERT_SPARSE = f"""
INSERT INTO ldpt_deltas (writer, seq, metric, fingerprint, time_window, cohort, reports, counts, cells, m, width)
SELECT $1, $2, mt, f, w, {SPARSE_COHORT}, r, x, c, mm, wd
FROM unnest($3::text[], $4::text[], $5::text[], $6::bigint[], $7::bytea[], $8::bytea[], $9::int[], $10::int[])
    AS t(mt, f, w, r, x, c, mm, wd)
"""
_INSERT_DELTAS = """
INSERT INTO ldpt_deltas (writer, seq, metric, fingerprint, time_window, cohort, reports, counts)
SELECT $1, $2, m, f, w, c, r, x
FROM unnest($3::text[], $4::text[], $5::text[], $6::int[], $7::bigint[], $8::bytea[]) AS t(m, f, w, c, r, x)
"""


def schema_of(dsn: str) -> str | None:
    """The first schema of the DSN's ``search_path`` query parameter, if any."""
    values = parse_qs(urlsplit(dsn).query).get("search_path")
    if not values:
        return None
    first = values[0].split(",")[0].strip().strip('"')
    return first or None


def _quote_ident(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]{0,62}", name):
        raise StoreError(f"schema name {name!r} is not a plain identifier")
    return f'"{name}"'


class PostgresStore(AsyncSketchStore):
    """Sketch store on PostgreSQL via an asyncpg pool; open with ``await PostgresStore.open()``."""

    def __init__(self, pool: Any, dsn: str, writer: str) -> None:
        self._pool = pool
        self.writer = writer
        self._seq = 0
        self._written: dict[SketchKey, tuple[int, int]] = {}  # flat rows, bytes since a settle
        self._settling: dict[SketchKey, asyncio.Task] = {}
        self._again: set[SketchKey] = set()
        self._tasks: set[asyncio.Task] = set()
        self.compaction = CompactionStats()
        parts = urlsplit(dsn)
        self.description = f"postgres:{parts.hostname or 'localhost'}{parts.path or ''}"

    @classmethod
    async def open(cls, dsn: str, *, create: bool = True, min_size: int = 2, max_size: int = 8,
                   writer: str | None = None) -> PostgresStore:
        """Connect, create the schema if asked, check its version."""
        if asyncpg is None:
            raise StoreError("PostgreSQL support needs asyncpg: pip install 'ldp-telemetry[postgres]'")
        schema = schema_of(dsn)
        try:
            if schema and create:
                conn = await asyncpg.connect(dsn)  # a search_path naming a missing schema is fine
                try:
                    await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote_ident(schema)}")
                except asyncpg.UniqueViolationError:
                    pass  # another collector created it at the same moment
                finally:
                    await conn.close()
            pool = await asyncpg.create_pool(dsn, min_size=min_size, max_size=max_size)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(f"PostgreSQL {urlsplit(dsn).hostname or ''}: cannot connect ({exc})") from None
        # The writer id names this collector instance in ldpt_deltas/ldpt_batches (no client data).
        store = cls(pool, dsn, writer or f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}")
        try:
            await store._init_schema(create)
        except BaseException:
            await pool.close()
            raise
        return store

    async def _init_schema(self, create: bool) -> None:
        async with self._pool.acquire() as conn:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
                exists = await conn.fetchval("SELECT to_regclass('ldpt_meta') IS NOT NULL")
                if not exists:
                    others = await conn.fetchval(
                        "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() "
                        "AND tablename IN ('ldpt_batches', 'ldpt_deltas')")
                    if others:
                        raise StoreError("the schema has ldpt tables but no ldpt_meta; not an "
                                         "ldp-telemetry store")
                    if not create:
                        raise StoreError("no ldp-telemetry store in this database/schema")
                    await conn.execute(_SCHEMA)
                    await conn.execute(_SCHEMA_V2)
                    await conn.execute(_SCHEMA_V4)
                    await self._try_lz4(conn)
                    await conn.executemany("INSERT INTO ldpt_meta VALUES ($1, $2) ON CONFLICT DO NOTHING",
                                           [("application", APPLICATION_ID),
                                            ("schema_version", str(SCHEMA_VERSION))])
                elif await conn.fetchval("SELECT value FROM ldpt_meta WHERE key = 'schema_version'") in ("1", "2", "3"):
                    await conn.execute(_SCHEMA_V2)  # v1 -> v2: add the sparse columns (v2 -> v3: none)
                    await conn.execute(_SCHEMA_V4)  # v3 -> v4: the tables of shuffled batches
                    await self._try_lz4(conn)
                    await conn.execute("UPDATE ldpt_meta SET value = $1 WHERE key = 'schema_version'",
                                       str(SCHEMA_VERSION))
            await self._check_meta(conn)

    @staticmethod
    async def _try_lz4(conn: Any) -> None:
        try:
            async with conn.transaction():   # a savepoint: a server without lz4 refuses it alone
                await conn.execute(_LZ4)
        except asyncpg.PostgresError:
            pass

    async def _check_meta(self, conn: Any) -> None:
        meta = dict(await conn.fetch("SELECT key, value FROM ldpt_meta"))
        if meta.get("application") != APPLICATION_ID:
            raise StoreError("not an ldp-telemetry store (ldpt_meta has no application id)")
        version = int(meta.get("schema_version", "0"))
        if version > SCHEMA_VERSION:
            raise StoreError(f"written by a newer ldp-telemetry (schema v{version}; this version "
                             f"reads up to v{SCHEMA_VERSION}); upgrade ldp-telemetry")
        if version < SCHEMA_VERSION:
            raise StoreError(f"schema v{version} is older than v{SCHEMA_VERSION} and has no migration")

    # --- writes ---------------------------------------------------------------------------------------
    async def acommit(self, batches: Sequence[PendingBatch]) -> list[BatchOutcome]:
        """One transaction: global batch-id dedupe, then append the new batches' summed deltas."""
        for attempt in range(COMMIT_ATTEMPTS):
            started = False   # a statement was sent: from then on a lost connection hides the outcome
            try:
                async with self._pool.acquire() as conn:
                    started = True
                    written: list[dict[SketchKey, Any]] = []
                    async with conn.transaction():
                        outcomes = await self._commit(conn, batches, written)
                    for flat in written:   # committed: its keys may want a merge
                        self._note_flat(flat)
                    return outcomes
            except asyncpg.PostgresError as exc:
                if getattr(exc, "sqlstate", None) in _RETRY_SQLSTATES and attempt + 1 < COMMIT_ATTEMPTS:
                    await asyncio.sleep(0.01 * 2 ** attempt)
                    continue
                if started and str(getattr(exc, "sqlstate", "") or "")[:2] in _LOST_SQLSTATE_CLASSES:
                    raise CommitOutcomeUnknown(f"PostgreSQL connection lost during the commit "
                                               f"({type(exc).__name__}: {exc})") from None
                raise StoreError(f"PostgreSQL commit failed: {exc}") from None
            except (OSError, asyncpg.InterfaceError, asyncpg.exceptions.InternalClientError) as exc:
                if started:   # e.g. InternalClientError after a backend termination
                    raise CommitOutcomeUnknown(f"PostgreSQL connection lost during the commit "
                                               f"({type(exc).__name__}: {exc})") from None
                raise StoreError(f"PostgreSQL unreachable: {exc}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _commit(self, conn: Any, batches: Sequence[PendingBatch | ShuffledBatch],
                      written: list[dict[SketchKey, Any]]) -> list[BatchOutcome | ShuffledOutcome]:
        """Forwarded batches' ids first (a known one skips its members), then every plain batch and
        every member of a new forwarded batch as one group, then the forwarded batches' records."""
        done: dict[int, ShuffledOutcome] = {}   # index -> outcome of a known forwarded batch
        units = [(i, b) for i, b in enumerate(batches) if isinstance(b, ShuffledBatch)]
        if units:
            first: dict[bytes, int] = {}
            for i, b in units:
                first.setdefault(bytes(b.batch_id), i)
            ids = list(first)
            rows = await conn.fetch(_INSERT_SHUFFLED, ids, [batches[first[u]].digest for u in ids],
                                    [batches[first[u]].envelopes for u in ids], self.writer)
            inserted = {bytes(r[0]) for r in rows}
            seen = [u for u in ids if u not in inserted]
            prior = {bytes(r[0]): bytes(r[1]) for r in await conn.fetch(
                "SELECT batch_id, digest FROM ldpt_shuffled_batches WHERE batch_id = ANY($1::bytea[])",
                seen)} if seen else {}
            for i, b in units:
                uid = bytes(b.batch_id)
                if uid not in inserted or first[uid] != i:
                    ref = batches[first[uid]].digest if uid in inserted else prior.get(uid)
                    done[i] = ShuffledOutcome(BatchOutcome.DUPLICATE if ref == b.digest else BatchOutcome.CONFLICT)
        flat: list[PendingBatch] = []
        owner: list[int] = []
        for i, b in enumerate(batches):
            if isinstance(b, ShuffledBatch):
                if i not in done:
                    flat.extend(b.members)
                    owner.extend([i] * len(b.members))
            else:
                flat.append(b)
                owner.append(i)
        per_item: dict[int, list[BatchOutcome]] = {}
        for outcome, i in zip(await self._commit_flat(conn, flat, written), owner):
            per_item.setdefault(i, []).append(outcome)
        outcomes: list[BatchOutcome | ShuffledOutcome] = []
        records: dict[SketchKey, ShuffleRecord] = {}
        for i, b in enumerate(batches):
            if not isinstance(b, ShuffledBatch):
                outcomes.append(per_item[i][0])
            elif i in done:
                outcomes.append(done[i])
            else:
                members = tuple(per_item.get(i, ()))
                merge_records(records, batch_records(b, [o is BatchOutcome.APPLIED for o in members]))
                outcomes.append(ShuffledOutcome(BatchOutcome.APPLIED, members))
        if records:
            rows = [(r.metric, r.fingerprint, r.window, r.reports, r.envelopes, r.batches, r.smallest_batch,
                     r.largest_batch, r.smallest_segment, r.smallest_cohort, finite_epsilon(r.envelope_epsilon),
                     r.min_reports, r.max_reports, r.max_envelope_reports) for r in records.values()]
            await conn.execute(_UPSERT_SHUFFLE, *[list(col) for col in zip(*rows)])
        return outcomes

    async def _commit_flat(self, conn: Any, batches: Sequence[PendingBatch],
                           written: list[dict[SketchKey, Any]]) -> list[BatchOutcome]:
        first: dict[bytes, int] = {}  # batch id -> index of its first occurrence in this group
        for i, b in enumerate(batches):
            if b.batch_id is not None:
                first.setdefault(bytes(b.batch_id), i)
        inserted: set[bytes] = set()
        prior: dict[bytes, bytes] = {}
        if first:
            ids = list(first)
            rows = await conn.fetch(_INSERT_BATCHES, ids, [batches[first[i]].digest for i in ids],
                                    [batches[first[i]].reports for i in ids], self.writer)
            inserted = {bytes(r[0]) for r in rows}
            seen = [i for i in ids if i not in inserted]
            if seen:
                prior = {bytes(r[0]): bytes(r[1]) for r in await conn.fetch(
                    "SELECT batch_id, digest FROM ldpt_batches WHERE batch_id = ANY($1::bytea[])", seen)}
        outcomes: list[BatchOutcome] = []
        applied_deltas = []
        for i, b in enumerate(batches):
            if b.batch_id is None:
                applied = True
            else:
                bid = bytes(b.batch_id)
                applied = bid in inserted and first[bid] == i
                if not applied:
                    ref = batches[first[bid]].digest if bid in inserted else prior.get(bid)
                    outcomes.append(BatchOutcome.DUPLICATE if ref == b.digest else BatchOutcome.CONFLICT)
                    continue
            applied_deltas.append(b.deltas)
            outcomes.append(BatchOutcome.APPLIED)
        total = sum_deltas(applied_deltas, sparse=self.sparse)
        if total:
            self._seq += 1
            flat: dict[SketchKey, tuple[int, int, int, bytes, bytes]] = {}
            for key, summed in list(total.items()):
                delta = summed if isinstance(summed, SparseDelta) else \
                    worth_sparse(summed) if self.sparse else None
                if delta is not None:
                    flat[key] = (delta.reports, delta.m, delta.width, delta.cells_blob(), delta.values_blob())
                    del total[key]
                elif wants_flat(summed):   # many narrow cohorts: one dense flat row, not one per cohort
                    flat[key] = (int(summed.reports.sum()), len(summed.reports), summed.counts[0].size, b"",
                                 dense_flat_blob(summed))
                    del total[key]
            cols = _delta_columns(total)
            if cols[0]:
                await conn.execute(_INSERT_DELTAS, self.writer, self._seq, *cols)
            if flat:
                await conn.execute(_INSERT_SPARSE, self.writer, self._seq, *_flat_columns(flat))
                written.append(flat)
        return outcomes

    #: Write small deltas sparsely (tests set False on an instance to force dense rows).
    sparse = True

    def _note_flat(self, flat: dict[SketchKey, tuple[int, int, int, bytes, bytes]]) -> None:
        """Count the flat rows and bytes this collector wrote per key; past SETTLE_EVERY_ROWS
        rows or a quarter of the dense size, settle that key in a background task (every
        collector does so for its own share; ``plan_merge`` sees everyone's rows)."""
        for key, (_, m, width, cells, values) in flat.items():
            rows, nbytes = self._written.get(key, (0, 0))
            rows, nbytes = rows + 1, nbytes + len(cells) + len(values)
            if rows >= SETTLE_EVERY_ROWS or 4 * nbytes >= dense_flat_bytes(m, width):
                rows = nbytes = 0
                self._schedule_settle(key)
            self._written[key] = (rows, nbytes)

    def _schedule_settle(self, key: SketchKey) -> None:
        if key in self._settling:
            self._again.add(key)   # the running task looks once more when it is done
            return
        task = asyncio.get_running_loop().create_task(self._settle_bg(key))
        self._settling[key] = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _settle_bg(self, key: SketchKey) -> None:
        try:
            while True:
                self._again.discard(key)
                await self._settle_key(key)
                if key not in self._again:
                    return
        except Exception as exc:  # housekeeping: the next maintain run tries again
            log.warning("compaction of %s window %s failed: %s", key.metric, key.window, exc)
        finally:
            self._settling.pop(key, None)

    async def asettle(self) -> None:
        """Wait for the background compaction this collector started (tests, benches)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def add_sketch(self, key: SketchKey, sketch: Sketch) -> None:
        """Add a sketch without a batch id (imports, simulation)."""
        await self.acommit([PendingBatch(None, b"", {key: sketch}, sketch.total_reports)])

    # --- reads --------------------------------------------------------------------------------------------
    async def aload(self, metric: str, fingerprint: str, template: Sketch,
                    windows: Sequence[str] | None = None, since: str | None = None,
                    until: str | None = None) -> Sketch:
        out = Sketch(template.counts.copy(), template.reports.copy())
        if windows is not None and not windows:
            return out
        where, args = _window_filter(metric, fingerprint, windows, since, until)
        sql = f"SELECT time_window, cohort, reports, counts, cells, m, width FROM ldpt_deltas WHERE {where}"
        rows = await self._fetch(sql, *args)
        cell_shape = template.counts.shape[1:]
        m = template.reports.shape[0]
        expected = int(np.prod(cell_shape)) * 8
        for window, cohort, reports, blob, cells, rm, rwidth in rows:
            if cells is not None:
                try:
                    add_flat(out, rm, rwidth, cells, blob, f"{metric!r} window {window}")
                except ValueError as exc:
                    raise StoreError(str(exc)) from None
                continue
            if not 0 <= cohort < m or len(blob) != expected:
                raise StoreError(f"stored delta of {metric!r} window {window} cohort {cohort} does not "
                                 "match the registry's sketch shape; the store was written under "
                                 "other parameters")
            out.counts[cohort] += blob_to_counts(blob, cell_shape)
            out.reports[cohort] += reports
        return out

    async def awindows(self, metric: str | None = None) -> list[WindowInfo]:
        sql = "SELECT metric, fingerprint, time_window, SUM(reports)::bigint FROM ldpt_deltas"
        args: list[Any] = []
        if metric is not None:
            sql += " WHERE metric=$1"
            args.append(metric)
        sql += " GROUP BY metric, fingerprint, time_window ORDER BY time_window, metric"
        return [WindowInfo(r[0], r[1], r[2], int(r[3])) for r in await self._fetch(sql, *args)]

    async def ashuffle_records(self, metric: str, fingerprint: str, windows: Sequence[str] | None = None,
                               since: str | None = None, until: str | None = None) -> list[ShuffleRecord]:
        where, args = _window_filter(metric, fingerprint, windows, since, until)
        sql = f"SELECT * FROM ldpt_shuffle_windows WHERE {where}"
        rows = await self._fetch(sql + " ORDER BY time_window", *args)
        return [ShuffleRecord(*(int(v) if isinstance(v, int) else v for v in row)) for row in rows]

    async def ashuffled_batch(self, batch_id: bytes) -> bytes | None:
        digest = await self._fetchval("SELECT digest FROM ldpt_shuffled_batches WHERE batch_id=$1", bytes(batch_id))
        return None if digest is None else bytes(digest)

    async def abatch_count(self) -> int:
        """Number of batch ids recorded (tests, operations)."""
        return int(await self._fetchval("SELECT count(*) FROM ldpt_batches"))

    async def acheck(self) -> None:
        try:
            async with self._pool.acquire(timeout=5) as conn:
                await self._check_meta(conn)
        except StoreError:
            raise
        except (OSError, asyncio.TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(f"PostgreSQL unreachable: {type(exc).__name__}: {exc}") from None

    async def aprobe_write(self) -> None:
        """One upsert in ldpt_meta: can the database take a write now (readiness while commits fail)."""
        try:
            async with self._pool.acquire(timeout=5) as conn:
                await conn.execute("INSERT INTO ldpt_meta VALUES ('write_probe', now()::text) "
                                   "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value")
        except (OSError, asyncio.TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError,
                asyncpg.exceptions.InternalClientError) as exc:
            raise StoreError(f"PostgreSQL cannot take a write: {type(exc).__name__}: {exc}") from None

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        try:
            return await self._pool.fetch(sql, *args)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(f"PostgreSQL query failed: {exc}") from None

    async def _fetchval(self, sql: str, *args: Any) -> Any:
        try:
            return await self._pool.fetchval(sql, *args)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(f"PostgreSQL query failed: {exc}") from None

    async def aprune(self, before: str, batch_ids_before: str | None = None) -> PruneResult:
        """Delete windows before a day and the batch ids received before ``batch_ids_before``
        (default: the same day), in one transaction."""
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                windows = await conn.fetchval(
                    "SELECT count(*) FROM (SELECT DISTINCT metric, fingerprint, time_window FROM "
                    "ldpt_deltas WHERE left(time_window, 10) < $1) w", before)
                rows = await conn.fetchval("WITH d AS (DELETE FROM ldpt_deltas WHERE "
                                           "left(time_window, 10) < $1 RETURNING 1) SELECT count(*) "
                                           "FROM d", before)
                ids_before = dt.date.fromisoformat(before if batch_ids_before is None else batch_ids_before)
                batch_ids = await conn.fetchval("WITH d AS (DELETE FROM ldpt_batches WHERE received < "
                                                "$1::date RETURNING 1) SELECT count(*) FROM d", ids_before)
                await conn.execute("DELETE FROM ldpt_shuffle_windows WHERE left(time_window, 10) < $1", before)
                await conn.execute("DELETE FROM ldpt_shuffled_batches WHERE received < $1::date", ids_before)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(f"PostgreSQL prune failed: {exc}") from None
        return PruneResult(int(windows), int(rows), int(batch_ids))

    # --- housekeeping ---------------------------------------------------------------------------------
    async def amaintain(self, today: str | None = None) -> None:
        """Compact keys with many dense delta rows, fold the flat rows of closed windows (days
        before ``today``, UTC by default) into one row, and settle crowded keys (see the module
        docstring)."""
        today = today or dt.datetime.now(dt.timezone.utc).date().isoformat()
        await self.acompact()
        keys = await self._fetch(  # closed windows not yet in one form
            "SELECT metric, fingerprint, time_window FROM ldpt_deltas GROUP BY 1, 2, 3 HAVING "
            "left(time_window, 10) < $1 AND (count(cells) > 1 OR (count(cells) = 1 AND count(*) > 1))", today)
        for metric, fingerprint, window in keys:
            await self._settle_key(SketchKey(metric, fingerprint, window), fold_all=True)
        crowded = await self._fetch(
            "SELECT metric, fingerprint, time_window FROM ldpt_deltas GROUP BY 1, 2, 3 HAVING "
            "count(cells) >= $1", TIER_FANOUT)
        for metric, fingerprint, window in crowded:
            await self._settle_key(SketchKey(metric, fingerprint, window))

    async def _settle_key(self, key: SketchKey, fold_all: bool = False) -> int:
        """Merge the key's flat rows until ``plan_merge`` has nothing to do (``fold_all``: into
        one row, absorbing its per-cohort dense rows too); returns the merges done."""
        merges = 0
        while await self._merge_once(key, fold_all):
            merges += 1
            if fold_all:
                break
        return merges

    async def _merge_once(self, key: SketchKey, fold_all: bool) -> bool:
        """One transaction: plan the key's next merge, DELETE its rows RETURNING their values
        and INSERT their sum (``merge_flat``). A merge whose sum is dense absorbs the key's
        per-cohort dense rows as well (stores of earlier versions folded into those), so a key
        that has flat rows settles into one dense row, not one per fold. False when there is
        nothing to do or another collector holds the key."""
        lock = int.from_bytes(hashlib.sha256(
            f"{key.metric}\0{key.fingerprint}\0{key.window}\0sparse".encode()).digest()[:8], "big",
            signed=True)
        where = "metric=$1 AND fingerprint=$2 AND time_window=$3"
        args = (key.metric, key.fingerprint, key.window)
        label = f"{key.metric!r} window {key.window}"
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", lock):
                    return False  # another collector is merging this key
                infos = await conn.fetch(f"SELECT id, octet_length(cells), octet_length(counts), m, width "
                                         f"FROM ldpt_deltas WHERE {where} AND cells IS NOT NULL", *args)
                if not infos:
                    return False
                m, width = infos[0][3], infos[0][4]
                if fold_all:
                    plan: tuple[list[int], float | None] | None = ([r[0] for r in infos], None)
                else:
                    plan = plan_merge([FlatRowInfo(r[0], r[1], r[2]) for r in infos], dense_flat_bytes(m, width))
                if plan is None:
                    return False
                ids, dense_above = plan
                rows = await conn.fetch(f"DELETE FROM ldpt_deltas WHERE {where} AND id = ANY($4::bigint[]) "
                                        "RETURNING reports, m, width, cells, counts", *args, ids)
                if not rows:
                    return False
                try:
                    m, width, cells, counts = merge_flat([(r[1], r[2], r[3], r[4]) for r in rows], label,
                                                         dense_above)
                except ValueError as exc:
                    raise StoreError(f"{exc}; not compacting") from None
                reports = sum(int(r[0]) for r in rows)
                if not cells or fold_all:   # dense, or a closed window: absorb per-cohort rows
                    cohort_rows = await conn.fetch(
                        f"DELETE FROM ldpt_deltas WHERE {where} AND cells IS NULL AND cohort >= 0 "
                        "RETURNING cohort, reports, counts", *args)
                    if cohort_rows:
                        m, width, cells, counts, reports = _absorb_cohorts(
                            m, width, cells, counts, reports, cohort_rows, label)
                self._seq += 1
                await conn.execute(_INSERT_SPARSE, self.writer, self._seq,
                                   *_flat_columns({key: (reports, m, width, cells, counts)}))
            self.compaction.note(len(rows), sum(len(r[3]) + len(r[4]) for r in rows), len(cells) + len(counts))
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(f"PostgreSQL compaction failed: {exc}") from None
        return True

    async def acompact(self, min_rows: int = COMPACT_MIN_ROWS) -> int:
        """Merge the delta rows of every key with more than ``min_rows`` rows; returns keys done."""
        keys = await self._fetch(
            "SELECT metric, fingerprint, time_window, cohort FROM ldpt_deltas WHERE cells IS NULL "
            "GROUP BY 1, 2, 3, 4 HAVING count(*) > $1", min_rows)
        done = 0
        for metric, fingerprint, window, cohort in keys:
            lock = int.from_bytes(hashlib.sha256(
                f"{metric}\0{fingerprint}\0{window}\0{cohort}".encode()).digest()[:8], "big", signed=True)
            async with self._pool.acquire() as conn:
                async with conn.transaction():
                    if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", lock):
                        continue  # another collector is compacting this key
                    rows = await conn.fetch(
                        "DELETE FROM ldpt_deltas WHERE metric=$1 AND fingerprint=$2 AND time_window=$3 "
                        "AND cohort=$4 AND cells IS NULL RETURNING reports, counts",
                        metric, fingerprint, window, cohort)
                    if not rows:
                        continue
                    width = len(rows[0][1])
                    if any(len(r[1]) != width for r in rows):
                        raise StoreError(f"delta rows of {metric!r} window {window} differ in size; "
                                         "not compacting")
                    counts = np.zeros(width // 8, dtype=np.int64)
                    for r in rows:
                        counts += np.frombuffer(r[1], dtype="<i8")
                    self._seq += 1
                    await conn.execute(_INSERT_DELTAS, self.writer, self._seq, [metric], [fingerprint],
                                       [window], [cohort], [sum(int(r[0]) for r in rows)],
                                       [counts_to_blob(counts)])
                    done += 1
        return done

    async def aclose(self) -> None:
        for task in list(self._tasks):  # a background fold in flight finishes or rolls back
            await asyncio.gather(task, return_exceptions=True)
        await self._pool.close()


def _flat_columns(flat: dict[SketchKey, tuple[int, int, int, bytes, bytes]]) -> tuple[list[Any], ...]:
    """Column arrays (metric, fingerprint, window, reports, values, cells, m, width) of flat
    rows given as (reports, m, width, cells, values)."""
    keys, rows = list(flat), list(flat.values())
    return ([k.metric for k in keys], [k.fingerprint for k in keys], [k.window for k in keys],
            [r[0] for r in rows], [r[4] for r in rows], [r[3] for r in rows], [r[1] for r in rows],
            [r[2] for r in rows])


def _absorb_cohorts(m: int, width: int, cells: bytes, counts: bytes, reports: int, cohort_rows: Sequence[Any],
                    where: str) -> tuple[int, int, bytes, bytes, int]:
    """A flat row plus per-cohort dense rows ``(cohort, reports, counts)`` as one dense flat row."""
    total = Sketch(np.zeros((m, width), dtype=np.int64), np.zeros(m, dtype=np.int64))
    add_flat(total, m, width, cells, counts, where)
    for cohort, cohort_reports, blob in cohort_rows:
        if not 0 <= cohort < m or len(blob) != 8 * width:
            raise StoreError(f"{where}: a per-cohort row does not match the flat rows' shape; not compacting")
        total.counts[cohort] += blob_to_counts(blob, (width,))
        total.reports[cohort] += cohort_reports
        reports += int(cohort_reports)
    return m, width, b"", dense_flat_blob(total), reports


def _delta_columns(total: dict[SketchKey, Sketch]) -> tuple[list[Any], ...]:
    """Column arrays (metric, fingerprint, window, cohort, reports, counts) of non-empty cohorts."""
    metrics, fps, windows, cohorts, reports, blobs = [], [], [], [], [], []
    for key, sk in total.items():
        m = len(sk.reports)
        touched = np.flatnonzero((sk.reports != 0) | sk.counts.reshape(m, -1).any(axis=1))
        for c in touched:
            metrics.append(key.metric)
            fps.append(key.fingerprint)
            windows.append(key.window)
            cohorts.append(int(c))
            reports.append(int(sk.reports[c]))
            blobs.append(counts_to_blob(sk.counts[c]))
    return metrics, fps, windows, cohorts, reports, blobs


def _window_filter(metric: str, fingerprint: str, windows: Sequence[str] | None, since: str | None,
                   until: str | None) -> tuple[str, list[Any]]:
    """The WHERE clause (and its numbered arguments) of one key's windows, as ``load`` selects
    them: a list of windows and/or the days ``since``..``until`` (inclusive)."""
    where, args = "metric=$1 AND fingerprint=$2", [metric, fingerprint]
    if windows is not None:
        args.append(list(windows))
        where += f" AND time_window = ANY(${len(args)}::text[])"
    for value, op in ((since, ">="), (until, "<=")):
        if value is not None:
            args.append(value)
            where += f" AND left(time_window, 10) {op} ${len(args)}"
    return where, args
