"""Compaction of flat rows (docs/design.md, "Compaction"): a window filled by many small commits
of distinct honest reports costs a bounded amount of compaction per byte committed, holds a
bounded number of rows and bytes, loads exactly what was committed — on SQLite and (with
LDPT_TEST_POSTGRES_DSN) PostgreSQL — and a SIGKILL in the middle of a merge loses and
duplicates nothing."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from collector.storage.base import (
    DENSE_ABSORB_SHARE,
    TIER_FANOUT,
    FlatRowInfo,
    PendingBatch,
    SketchKey,
    plan_merge,
    tier_of,
)
from collector.storage.sqlite import SQLiteStore
from sketches import build_server
from sketches.deltas import SPARSE_CELL_BYTES, dense_flat_bytes, merge_flat, sparse_delta

ROOT = Path(__file__).resolve().parent.parent
DSN = os.environ.get("LDPT_TEST_POSTGRES_DSN")
KEY = SketchKey("m", "fp", "2026-12-01")
#: Bytes of compaction (read + written) per byte committed, at most: once per tier (the tiers up
#: to the dense size of these sketches) and twice for each absorption into the dense row.
MAX_AMPLIFICATION = 12


class Groups:
    """A batch's validated payloads, accumulated at commit time (collector.ingest.BatchDeltas)."""

    def __init__(self, groups):
        self.payload_groups = groups


def distinct_batches(proto, n_batches: int, size: int, seed: int) -> list[PendingBatch]:
    """Batches of honest reports from distinct devices (random values, cohorts and ids)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_batches):
        if proto.name == "discover":
            values = np.asarray([f"host-{i}.example" for i in rng.integers(0, 10**6, size)], dtype=object)
        else:
            values = rng.integers(0, proto.domain_size, size)
        out.append(PendingBatch(rng.bytes(16), b"d", Groups([(KEY, proto, proto.encode(values, rng))]), size))
    return out


def accumulate(proto, batches):
    total = proto.new_sketch()
    for b in batches:
        for _, _, payloads in b.deltas.payload_groups:
            proto.accumulate(total, payloads)
    return total


# --- the plan ---------------------------------------------------------------------------------------
def test_tiers_and_plan():
    assert [tier_of(n) for n in (0, 1023, 16 * 1024 - 1, 16 * 1024, 256 * 1024, 10**9)] == [0, 0, 0, 1, 2, 4]
    dense = 10**6
    small = [FlatRowInfo(i, 400, 800) for i in range(TIER_FANOUT - 1)]
    assert plan_merge(small, dense) is None                       # a tier not yet full
    full = small + [FlatRowInfo(99, 400, 800)]
    assert plan_merge(full, dense) == ([r.id for r in full], float(dense))  # one tier, kept sparse
    big = [FlatRowInfo(100 + i, 40_000, 80_000) for i in range(3)]
    assert plan_merge(full + big, dense)[0] == [r.id for r in full]  # the lowest full tier first
    top = FlatRowInfo(7, 0, dense)
    assert plan_merge([top] + big, dense) is None                 # 360 KB of sparse beside 1 MB dense
    heavy = [FlatRowInfo(200 + i, 100_000, 200_000) for i in range(4)]  # 1.2 MB: absorbed
    ids, dense_above = plan_merge([top] + heavy, dense)
    assert sorted(ids) == [7, 200, 201, 202, 203] and dense_above == 0.5 * dense
    assert plan_merge([top, FlatRowInfo(8, 0, dense)], dense)[0] == [7, 8]  # two dense rows: one
    ids, dense_above = plan_merge(heavy, dense)   # no dense row yet: the sparse rows reach its size
    assert len(ids) == 4 and dense_above == 0.5 * dense
    assert DENSE_ABSORB_SHARE == 1.0


@pytest.mark.parametrize("seed", range(3))
def test_merge_is_exact_in_either_form(seed):
    """merge_flat sums sparse and dense rows exactly, sparse while that is the smaller form."""
    rng = np.random.default_rng(seed)
    proto = build_server("olh", 20_000, 2.0, {})
    sketches = []
    for size in (5, 50, 500, 5_000, 50_000):
        sk = proto.new_sketch()
        proto.accumulate(sk, proto.encode(rng.integers(0, 20_000, size), rng))
        sketches.append(sk)
    want = proto.new_sketch()
    for sk in sketches:
        want = want.merge(sk)
    m, width = want.counts.shape
    parts = [(m, width, sparse_delta(sk).cells_blob(), sparse_delta(sk).values_blob()) for sk in sketches[:4]]
    parts.append((m, width, b"", np.concatenate([sketches[4].counts.ravel(), sketches[4].reports]).astype("<i8").tobytes()))
    for chosen, dense_above in ((parts[:3], None), (parts[:4], 0.0), (parts, None)):
        rm, rw, cells, values = merge_flat(chosen, "test", dense_above)
        got = proto.new_sketch()
        from sketches.deltas import add_flat
        add_flat(got, rm, rw, cells, values, "test")
        expect = proto.new_sketch()
        for _, _, c, v in chosen:
            add_flat(expect, m, width, c, v, "test")
        assert np.array_equal(got.counts, expect.counts) and np.array_equal(got.reports, expect.reports)
        dense = cells == b""
        assert dense == (dense_above == 0.0 or chosen is parts)  # a dense part, or asked to
        if not dense:
            assert SPARSE_CELL_BYTES * (len(cells) // 4) <= dense_flat_bytes(m, width)
    with pytest.raises(ValueError, match="other parameters"):
        merge_flat([parts[0], (m + 1, width, b"", b"")], "test")
    with pytest.raises(ValueError, match="corrupt"):
        merge_flat([parts[0], (m, width, parts[1][2][:-4], parts[1][3])], "test")


# --- filling a window ---------------------------------------------------------------------------------
#: (protocol, d, ε, options, batches, reports per batch): each commits several times its sketch's
#: dense size in small commits, so the window crosses from sparse rows (merged tier by tier) to
#: a dense row that keeps absorbing them (dense sizes 1.25 MB, 22 KB, 26 KB and 33 KB).
FILLS = [("olh", 20_000, 2.0, {}, 1_500, 120), ("hr", 2_000, 2.0, {}, 600, 40),
         ("olh", 2_000, 2.0, {}, 600, 40), ("discover", None, 4.0, {"seeds": 8, "max_length": 8}, 600, 40)]
FILL_IDS = ["olh-20k", "hr-2k", "olh-2k", "discover"]


def check_fill(proto, commit, shape, load, stats, batches, dense_rows) -> None:
    """Commit ``batches`` one at a time; per quarter of the fill, the compaction bytes per byte
    committed, the rows and bytes held and the exact sum; ``dense_rows()`` counts the window's
    dense rows (one once the window is full)."""
    sk = proto.new_sketch()
    m, width = sk.counts.shape[0], sk.counts[0].size
    dense = dense_flat_bytes(m, width)
    committed = 0
    quarter = len(batches) // 4
    last = (stats.bytes_read + stats.bytes_written, 0)
    for i, batch in enumerate(batches):
        commit(batch)
        for _, _, payloads in batch.deltas.payload_groups:
            cells, cohorts = proto.flat_cells(payloads)
            committed += SPARSE_CELL_BYTES * (np.unique(cells).size + np.unique(cohorts).size)
        rows, nbytes = shape()
        # bounded reads: one dense row, sparse rows weighing less, at most F−1 rows per tier (and
        # what a PostgreSQL collector writes between two looks: F rows or a quarter dense size)
        assert nbytes <= 2.25 * dense + TIER_FANOUT * SPARSE_CELL_BYTES * 2 * batch.reports + 64 * rows
        assert dense_rows() <= 1
        assert rows <= 1 + 5 * (TIER_FANOUT - 1)
        if (i + 1) % quarter == 0:
            work = stats.bytes_read + stats.bytes_written
            # each quarter's compaction is O(its bytes committed), plus one absorption into the dense row
            assert work - last[0] <= MAX_AMPLIFICATION * (committed - last[1]) + 4 * dense, (i, work - last[0])
            last = (work, committed)
    assert stats.bytes_read + stats.bytes_written <= MAX_AMPLIFICATION * committed + 4 * dense
    assert stats.merges > len(batches) // (4 * TIER_FANOUT)  # it did compact, continually
    assert committed > 2 * dense and dense_rows() == 1    # the window filled, into one dense row
    got = load()
    want = accumulate(proto, batches)
    assert np.array_equal(got.counts, want.counts) and np.array_equal(got.reports, want.reports)


@pytest.mark.parametrize("name,d,eps,opts,n,size", FILLS, ids=FILL_IDS)
def test_filling_a_window_in_small_commits_stays_flat_on_sqlite(tmp_path, name, d, eps, opts, n, size):
    proto = build_server(name, d, eps, opts)
    batches = distinct_batches(proto, n, size, seed=3)
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        def shape():
            return store._conn.execute("SELECT count(*), coalesce(sum(length(cells) + length(counts)), 0) "
                                       "FROM sketch_deltas").fetchone()
        check_fill(proto, lambda b: store.commit([b]), shape,
                   lambda: store.load("m", "fp", proto.new_sketch()), store.compaction, batches,
                   lambda: store._conn.execute("SELECT count(*) FROM sketch_deltas WHERE length(cells) = 0"
                                               ).fetchone()[0])
        assert store._conn.execute("SELECT count(*) FROM sketches").fetchone() == (0,)  # flat rows only


def test_the_collectors_store_compacts_after_the_acknowledgement(tmp_path):
    """ThreadedStore: acommit returns before the merges its commit calls for have run (they are
    queued on the writer thread), and they run before the next commit."""
    from collector.storage.aio import ThreadedStore

    proto = build_server("hr", 20_000, 2.0, {})
    batches = distinct_batches(proto, 3 * TIER_FANOUT, 20, seed=4)

    async def run():
        store = ThreadedStore(tmp_path / "t.sqlite")
        writer = store.sync_store
        seen = []
        real = writer.settle

        def settle():
            seen.append(len(writer._crowded))
            return real()
        writer.settle = settle
        try:
            for b in batches:
                await store.acommit([b])
            await store.asettle()
            return seen, writer.compaction.merges, await store.aload("m", "fp", proto.new_sketch())
        finally:
            await store.aclose()
    seen, merges, got = asyncio.run(run())
    assert len(seen) >= len(batches) and merges >= 2
    want = accumulate(proto, batches)
    assert np.array_equal(got.counts, want.counts) and np.array_equal(got.reports, want.reports)


@pytest.mark.postgres
@pytest.mark.skipif(not DSN, reason="LDPT_TEST_POSTGRES_DSN is not set; PostgreSQL compaction test skipped")
@pytest.mark.parametrize("name,d,eps,opts,n,size", FILLS[:2], ids=FILL_IDS[:2])
def test_filling_a_window_in_small_commits_stays_flat_on_postgres(name, d, eps, opts, n, size):
    asyncpg = pytest.importorskip("asyncpg")
    from collector.storage.postgres import PostgresStore

    proto = build_server(name, d, eps, opts)
    batches = distinct_batches(proto, n, size, seed=5)
    schema = f"ldpt_test_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in DSN else "?"
    loop = asyncio.new_event_loop()
    store = loop.run_until_complete(PostgresStore.open(f"{DSN}{sep}search_path={schema}"))
    try:
        def commit(b):
            loop.run_until_complete(store.acommit([b]))
            loop.run_until_complete(store.asettle())

        def shape():
            row = loop.run_until_complete(store._fetch(
                "SELECT count(*), coalesce(sum(octet_length(counts) + octet_length(cells)), 0) "
                "FROM ldpt_deltas"))[0]
            return int(row[0]), int(row[1])
        check_fill(proto, commit, shape, lambda: loop.run_until_complete(store.aload("m", "fp", proto.new_sketch())),
                   store.compaction, batches,
                   lambda: loop.run_until_complete(store._fetchval(
                       "SELECT count(*) FROM ldpt_deltas WHERE cells = ''")))
    finally:
        loop.run_until_complete(store.aclose())

        async def drop():
            conn = await asyncpg.connect(DSN)
            try:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            finally:
                await conn.close()
        loop.run_until_complete(drop())
        loop.close()


# --- SIGKILL in the middle of a merge ------------------------------------------------------------------
#: Runs in a child process: opens the store, makes the step after which a merge's rows are
#: DELETEd and its sum INSERTed (before COMMIT) announce itself and hang, then settles.
KILL_CHILD_SQLITE = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from collector.storage.base import SketchKey
from collector.storage.sqlite import SQLiteStore

store = SQLiteStore({db!r})
real = store._insert_flat
def hang_after_insert(*args):
    real(*args)
    Path({marker!r}).write_text("in the merge")
    time.sleep(600)
store._insert_flat = hang_after_insert
store._crowded.add(SketchKey("m", "fp", "2026-12-01"))
store.settle()
"""
KILL_CHILD_POSTGRES = """
import asyncio, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
import collector.storage.postgres as pg
from collector.storage.base import SketchKey

real = pg.merge_flat
def hang_after_delete(*args, **kw):
    out = real(*args, **kw)
    Path({marker!r}).write_text("in the merge")
    time.sleep(600)
    return out
pg.merge_flat = hang_after_delete   # called after DELETE ... RETURNING, before the INSERT and COMMIT

async def main():
    store = await pg.PostgresStore.open({dsn!r})
    await store._settle_key(SketchKey("m", "fp", "2026-12-01"))
asyncio.run(main())
"""


def kill_in_the_merge(script: str, marker: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, "the child ended before it reached the merge"
            assert time.monotonic() < deadline, "the child never reached the merge"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("name", ["hr", "olh"])
@pytest.mark.e2e
def test_sigkill_in_a_merge_loses_and_duplicates_nothing_on_sqlite(tmp_path, name):
    proto = build_server(name, 20_000, 2.0, {})
    batches = distinct_batches(proto, 4 * TIER_FANOUT, 30, seed=6)
    db = tmp_path / "s.sqlite"
    with SQLiteStore(db) as store:
        store.defer_compaction = True   # the rows wait for a merge
        for b in batches:
            store.commit([b])
        rows_before = store._conn.execute("SELECT count(*) FROM sketch_deltas").fetchone()[0]
    marker = tmp_path / "marker"
    kill_in_the_merge(KILL_CHILD_SQLITE.format(root=str(ROOT), db=str(db), marker=str(marker)), marker)
    want = accumulate(proto, batches)
    with SQLiteStore(db) as store:
        assert store._conn.execute("SELECT count(*) FROM sketch_deltas").fetchone()[0] == rows_before
        got = store.load("m", "fp", proto.new_sketch())
        assert np.array_equal(got.counts, want.counts) and np.array_equal(got.reports, want.reports)
        store._crowded.add(KEY)
        assert store.settle() >= 1   # the merge the child could not finish
        got = store.load("m", "fp", proto.new_sketch())
        assert np.array_equal(got.counts, want.counts) and np.array_equal(got.reports, want.reports)


@pytest.mark.postgres
@pytest.mark.skipif(not DSN, reason="LDPT_TEST_POSTGRES_DSN is not set; PostgreSQL compaction test skipped")
@pytest.mark.e2e
def test_sigkill_in_a_merge_loses_and_duplicates_nothing_on_postgres(tmp_path):
    asyncpg = pytest.importorskip("asyncpg")
    from collector.storage.postgres import PostgresStore

    proto = build_server("olh", 20_000, 2.0, {})
    batches = distinct_batches(proto, 2 * TIER_FANOUT, 30, seed=7)
    schema = f"ldpt_test_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in DSN else "?"
    dsn = f"{DSN}{sep}search_path={schema}"
    want = accumulate(proto, batches)

    async def fill():
        store = await PostgresStore.open(dsn)
        store._schedule_settle = lambda key: None   # the rows wait for a merge
        try:
            for b in batches:
                await store.acommit([b])
            return await store._fetchval("SELECT count(*) FROM ldpt_deltas")
        finally:
            await store.aclose()

    async def check(settle: bool):
        store = await PostgresStore.open(dsn)
        try:
            rows = await store._fetchval("SELECT count(*) FROM ldpt_deltas")
            merges = await store._settle_key(KEY) if settle else 0
            return rows, merges, await store.aload("m", "fp", proto.new_sketch())
        finally:
            await store.aclose()

    async def drop():
        conn = await asyncpg.connect(DSN)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()

    try:
        rows_before = asyncio.run(fill())
        marker = tmp_path / "marker"
        kill_in_the_merge(KILL_CHILD_POSTGRES.format(root=str(ROOT), dsn=dsn, marker=str(marker)), marker)
        rows, _, got = asyncio.run(check(False))   # the dead merge's DELETE never committed
        assert rows == rows_before
        assert np.array_equal(got.counts, want.counts) and np.array_equal(got.reports, want.reports)
        for _ in range(100):   # its backend rolls back and lets go of the key's lock
            _, merges, got = asyncio.run(check(True))
            if merges:
                break
            time.sleep(0.1)
        assert merges >= 1
        assert np.array_equal(got.counts, want.counts) and np.array_equal(got.reports, want.reports)
    finally:
        asyncio.run(drop())
