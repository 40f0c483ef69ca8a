"""Sparse sketch deltas (docs/design.md, "Sparse deltas"): a commit of b reports into a large
sketch writes O(b) cells; compaction folds them into dense rows; loads and estimates equal, to
the count, what dense deltas give — on SQLite and (with LDPT_TEST_POSTGRES_DSN) PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import uuid

import numpy as np
import pytest

from collector.storage.base import SCHEMA_VERSION, PendingBatch, SketchKey
from collector.storage.sqlite import SQLiteStore
from sketches import build_server
from sketches.deltas import sparse_delta, worth_sparse

WINDOWS = ("2026-11-01", "2026-11-02")

# (protocol, d, ε, options, written sparsely): protocols whose sketch dwarfs a batch of few-word
# reports go sparse; a small sketch, and unary reports (OUE sets ~d/(e^ε+1) bits, a RAPPOR report
# about half its Bloom bits: a batch's delta is dense by nature, and RAPPOR's per-cohort rows
# already touch only the cohorts a batch hit) go dense.
CASES = [
    ("hr", 100_000, 2.0, {}, True),
    ("olh", 50_000, 2.0, {}, True),
    ("ss", 20_000, 8.0, {}, True),
    ("discover", None, 4.0, {}, True),
    ("rappor", None, None, {"cohorts": 256, "bloom_bits": 128, "hashes": 2}, False),
    ("oue", 20_000, 1.0, {}, False),
    ("grr", 16, 1.0, {}, False),
]


def values_for(proto, rng, size):
    if proto.name in ("discover", "rappor"):  # open domains of strings
        return np.asarray([f"host-{i}.example" for i in rng.integers(0, 10**6, size)], dtype=object)
    return rng.integers(0, proto.domain_size, size)


def batches_for(proto, rng, n_batches, size):
    """(window, PendingBatch) pairs with random ids, each delta accumulated as the collector does."""
    out = []
    for i in range(n_batches):
        payloads = proto.encode(values_for(proto, rng, size), rng)
        sketch = proto.new_sketch()
        proto.accumulate(sketch, payloads)
        window = WINDOWS[i % len(WINDOWS)]
        out.append(PendingBatch(rng.bytes(16), b"digest", {SketchKey("m", "fp", window): sketch}, size))
    return out


def sqlite_pair(tmp_path, name):
    sparse = SQLiteStore(tmp_path / f"{name}-sparse.sqlite")
    dense = SQLiteStore(tmp_path / f"{name}-dense.sqlite")
    dense.sparse = False
    return sparse, dense


def sparse_rows(store) -> int:
    return store._conn.execute("SELECT count(*) FROM sketch_deltas").fetchone()[0]


@pytest.mark.parametrize("name,d,eps,opts,big", CASES, ids=[c[0] for c in CASES])
def test_sparse_and_dense_stores_hold_the_same_sketches(tmp_path, name, d, eps, opts, big):
    proto = build_server(name, d, eps, opts)
    rng = np.random.default_rng(7)
    batches = batches_for(proto, rng, 40, 25)
    sparse, dense = sqlite_pair(tmp_path, name)
    with sparse, dense:
        for group in (batches[:15], batches[15:16], batches[16:]):  # groups of several batches
            assert sparse.commit(group) == dense.commit(group)
        template = proto.new_sketch()
        for windows in ([WINDOWS[0]], [WINDOWS[1]], None):
            a = sparse.load("m", "fp", template, windows)
            b = dense.load("m", "fp", template, windows)
            assert np.array_equal(a.counts, b.counts) and np.array_equal(a.reports, b.reports)
        assert sparse.windows() == dense.windows()
        assert (sparse_rows(sparse) > 0) == big  # the small sketch is written densely
        assert sparse_rows(dense) == 0
        before = sparse.load("m", "fp", template)
        assert sparse.compact() == (len(WINDOWS) if big else 0)
        # a thin window of a large domain stays one sparse row: smaller than its dense rows
        assert sparse_rows(sparse) == (len(WINDOWS) if big else 0)
        assert sparse.compact() == 0  # nothing left to fold
        after = sparse.load("m", "fp", template)
        assert np.array_equal(before.counts, after.counts) and np.array_equal(before.reports, after.reports)
        if name in ("olh", "discover", "rappor"):  # decoded by other paths / too few reports
            return
        est_a, est_b = proto.estimate(after), proto.estimate(dense.load("m", "fp", template))
        assert np.array_equal(est_a.counts, est_b.counts)
        assert np.array_equal(est_a.variances, est_b.variances)


@pytest.mark.parametrize("name,d,eps,opts,big", CASES[:3], ids=[c[0] for c in CASES[:3]])
def test_a_load_reads_large_blobs_by_blob_io(tmp_path, monkeypatch, name, d, eps, opts, big):
    """Blobs above LARGE_BLOB bytes are read by incremental blob I/O in the load's transaction
    (a dense row is added into the sum a chunk at a time, not copied whole): the same sums as
    read as column values, from dense rows, sparse rows (cells and counts) and a compacted
    window's rows."""
    import collector.storage.sqlite as sqlite_store

    proto = build_server(name, d, eps, opts)
    batches = batches_for(proto, np.random.default_rng(11), 12, 40)
    sparse, dense = sqlite_pair(tmp_path, name)
    with sparse, dense:
        for store in (sparse, dense):
            store.commit(batches[:6])
            store.compact()
            store.commit(batches[6:])
        template = proto.new_sketch()
        for store in (sparse, dense):
            for windows in ([WINDOWS[0]], None):
                inline = store.load("m", "fp", template, windows)
                monkeypatch.setattr(sqlite_store, "LARGE_BLOB", 0)   # every non-empty blob by blob I/O
                by_io = store.load("m", "fp", template, windows)
                monkeypatch.undo()
                assert np.array_equal(inline.counts, by_io.counts) and np.array_equal(inline.reports, by_io.reports)
                assert inline.total_reports > 0


def test_a_load_adds_large_blobs_a_chunk_at_a_time(tmp_path, monkeypatch):
    """A load adds blobs read by blob I/O into its sum a chunk at a time (LOAD_CHUNK_BYTES, here
    3 cells: chunks that end inside a cohort and across the counters/reports seam of a dense flat
    row): per-cohort dense rows, a dense flat row and a sparse row sum to the exact cells, the
    same as read as column values; a blob of the wrong length is a StoreError either way."""
    import collector.storage.sqlite as sqlite_store
    from client_sdk.errors import StoreError
    from sketches.base import Sketch
    from sketches.deltas import counts_to_blob, dense_flat_blob

    rng = np.random.default_rng(5)
    m, width = 3, 10
    dense = rng.integers(-2**40, 2**40, (m, width))
    flat = Sketch(rng.integers(0, 2**40, (m, width)), rng.integers(0, 1000, m))
    cells = np.array([1, 17, m * width + 2], dtype="<u4")     # two counters and cohort 2's reports
    values = np.array([5, -7, 11], dtype="<i8")
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        for cohort in (0, 2):
            store._conn.execute("INSERT INTO sketches VALUES ('m', 'fp', ?, ?, ?, ?)",
                                (WINDOWS[0], cohort, 10 + cohort, counts_to_blob(dense[cohort])))
        store._conn.execute("INSERT INTO sketch_deltas (metric, fingerprint, window, reports, m, width, cells, "
                            "counts) VALUES ('m', 'fp', ?, ?, ?, ?, ?, ?)",
                            (WINDOWS[1], int(flat.reports.sum()), m, width, b"", dense_flat_blob(flat)))
        store._conn.execute("INSERT INTO sketch_deltas (metric, fingerprint, window, reports, m, width, cells, "
                            "counts) VALUES ('m', 'fp', ?, 11, ?, ?, ?, ?)",
                            (WINDOWS[1], m, width, cells.tobytes(), values.tobytes()))
        want = Sketch(flat.counts.copy(), flat.reports.copy())
        want.counts[[0, 2]] += dense[[0, 2]]
        want.reports[[0, 2]] += [10, 12]
        want.counts.reshape(-1)[cells[:2]] += values[:2]
        want.reports[2] += values[2]
        template = Sketch(np.zeros((m, width), dtype=np.int64), np.zeros(m, dtype=np.int64))
        inline = store.load("m", "fp", template)
        monkeypatch.setattr(sqlite_store, "LARGE_BLOB", 0)        # every non-empty blob by blob I/O
        monkeypatch.setattr(sqlite_store, "LOAD_CHUNK_BYTES", 24)
        by_io = store.load("m", "fp", template)
        for got in (inline, by_io):
            assert np.array_equal(got.counts, want.counts) and np.array_equal(got.reports, want.reports)
        assert not template.counts.any() and not template.reports.any()     # the template is not written
        store._conn.execute("UPDATE sketches SET counts = zeroblob(16) WHERE cohort = 2")
        with pytest.raises(StoreError, match="has 16 bytes, expected 80"):
            store.load("m", "fp", template)
        store._conn.execute("DELETE FROM sketches")
        store._conn.execute("UPDATE sketch_deltas SET counts = zeroblob(16) WHERE length(cells) = 0")
        with pytest.raises(StoreError, match="dense row"):
            store.load("m", "fp", template)
        monkeypatch.undo()
        with pytest.raises(StoreError, match="dense row"):
            store.load("m", "fp", template)


def test_commit_writes_cells_proportional_to_the_batch(tmp_path):
    """b reports into a d = 10^6 HR sketch: one sparse row of at most b + 1 cells (12 bytes each),
    not the 8 MB dense blob; the dense table is untouched until compaction."""
    proto = build_server("hr", 1_000_000, 2.0, {})
    rng = np.random.default_rng(3)
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        for b in (1, 10, 1_000):
            (batch,) = batches_for(proto, rng, 1, b)
            store.commit([batch])
            cells, values = store._conn.execute(
                "SELECT length(cells), length(counts) FROM sketch_deltas ORDER BY id DESC LIMIT 1").fetchone()
            assert cells == 4 * (values // 8) and values // 8 <= b + 1
        assert store._conn.execute("SELECT count(*) FROM sketches").fetchone() == (0,)


def test_crowded_key_is_merged_after_the_commit_that_crowds_it(tmp_path):
    """A key's flat rows are merged right after the commit that crowds them: at most one dense
    row plus sparse rows weighing less than it (and one commit), a bounded number of rows, and
    the sum exact after every commit."""
    from collector.storage.base import TIER_FANOUT
    from sketches.deltas import dense_flat_bytes

    proto = build_server("hr", 2_000, 2.0, {})  # small dense size: folds after a few commits
    rng = np.random.default_rng(5)
    dense_bytes = dense_flat_bytes(1, proto.new_sketch().counts.size)
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        total = proto.new_sketch()
        densified = False
        for batch in batches_for(proto, rng, 150, 30):
            batch = PendingBatch(batch.batch_id, batch.digest,
                                 {SketchKey("m", "fp", WINDOWS[0]): next(iter(batch.deltas.values()))},
                                 batch.reports)
            total = total.merge(next(iter(batch.deltas.values())))
            store.commit([batch])
            rows = store._conn.execute("SELECT length(cells), length(counts) FROM sketch_deltas").fetchall()
            dense = [c for cells, c in rows if cells == 0]
            sparse = sum(cells + c for cells, c in rows if cells > 0)
            assert len(dense) <= 1 and sparse < dense_bytes + 12 * 31
            assert len(rows) <= 1 + 4 * (TIER_FANOUT - 1)
            densified |= bool(dense)
            got = store.load("m", "fp", proto.new_sketch())
            assert np.array_equal(got.counts, total.counts) and np.array_equal(got.reports, total.reports)
        assert densified


def test_worth_sparse_only_when_it_saves_bytes():
    proto = build_server("hr", 1_000, 1.0, {})
    rng = np.random.default_rng(0)
    small, large = proto.new_sketch(), proto.new_sketch()
    proto.accumulate(small, proto.encode(rng.integers(0, 1_000, 5), rng))
    proto.accumulate(large, proto.encode(rng.integers(0, 1_000, 5_000), rng))
    assert worth_sparse(small) is not None and worth_sparse(large) is None
    delta = sparse_delta(small)
    assert delta.reports == 5 and delta.cells[-1] == small.counts.size  # the report count's cell
    assert np.all(np.diff(delta.cells.astype(np.int64)) > 0)


def test_v1_store_is_migrated_and_keeps_its_data(tmp_path):
    path = tmp_path / "v1.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE ldpt_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE sketches (metric TEXT NOT NULL, fingerprint TEXT NOT NULL, window TEXT NOT NULL,
            cohort INTEGER NOT NULL, reports INTEGER NOT NULL, counts BLOB NOT NULL,
            PRIMARY KEY (metric, fingerprint, window, cohort));
        CREATE TABLE batches (batch_id BLOB PRIMARY KEY, digest BLOB NOT NULL, reports INTEGER NOT NULL,
            received TEXT NOT NULL);
        INSERT INTO ldpt_meta VALUES ('application', 'ldp-telemetry'), ('schema_version', '1');
    """)
    proto = build_server("hr", 5_000, 2.0, {})
    old = proto.new_sketch()
    proto.accumulate(old, proto.encode(np.arange(3_000) % 5_000, np.random.default_rng(1)))
    conn.execute("INSERT INTO sketches VALUES ('m', 'fp', ?, 0, ?, ?)",
                 (WINDOWS[0], int(old.reports[0]), old.counts[0].astype("<i8").tobytes()))
    conn.commit()
    conn.close()
    with SQLiteStore(path) as store:
        assert store._conn.execute("SELECT value FROM ldpt_meta WHERE key='schema_version'").fetchone() == (str(SCHEMA_VERSION),)
        (batch,) = batches_for(proto, np.random.default_rng(2), 1, 10)
        batch = PendingBatch(batch.batch_id, batch.digest,
                             {SketchKey("m", "fp", WINDOWS[0]): next(iter(batch.deltas.values()))}, 10)
        store.commit([batch])
        assert sparse_rows(store) == 1
        got = store.load("m", "fp", proto.new_sketch())
        want = old.merge(next(iter(batch.deltas.values())))
        assert np.array_equal(got.counts, want.counts) and got.total_reports == 3_010


def test_a_full_window_folds_dense_and_a_thin_one_stays_sparse(tmp_path):
    """Compaction writes whichever form is smaller: a year of thin daily windows of a d = 10^6
    metric costs ~12 bytes per distinct cell hit, not 16 MB per window; a full window is dense."""
    proto = build_server("hr", 2_000, 2.0, {})
    rng = np.random.default_rng(9)
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        for batch in batches_for(proto, rng, 4, 20):   # thin: 80 reports into 2,800 cells
            store.commit([batch])
        full = [b for b in batches_for(proto, rng, 40, 3_000)]  # 120,000 reports: every cell hit
        for i in range(0, 40, 4):
            store.commit([PendingBatch(b.batch_id, b.digest,
                                       {SketchKey("m", "fp", "2026-10-01"): next(iter(b.deltas.values()))},
                                       b.reports) for b in full[i:i + 4]])
        store.compact()
        assert store.compact() == 0  # every window is in one form now
        forms = dict(store._conn.execute(
            "SELECT window, group_concat(length(cells) = 0) FROM sketch_deltas GROUP BY window").fetchall())
        assert forms == {WINDOWS[0]: "0", WINDOWS[1]: "0"}  # one sparse row each
        # the full window's commits were dense by themselves: its per-cohort rows
        assert store._conn.execute("SELECT DISTINCT window FROM sketches").fetchall() == [("2026-10-01",)]


def test_prune_deletes_sparse_rows_too(tmp_path):
    proto = build_server("hr", 100_000, 2.0, {})
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        store.commit(batches_for(proto, np.random.default_rng(4), 4, 10))
        result = store.prune("2026-11-02")
        assert result.windows == 1 and result.rows == 1  # one group commit: one sparse row per window
        assert [w.window for w in store.windows()] == ["2026-11-02"]


def test_corrupt_sparse_row_is_a_store_error(tmp_path):
    from client_sdk.errors import StoreError
    proto = build_server("hr", 100_000, 2.0, {})
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        store.commit(batches_for(proto, np.random.default_rng(4), 1, 10))
        store._conn.execute("UPDATE sketch_deltas SET cells = zeroblob(8)")
        with pytest.raises(StoreError, match="corrupt sparse delta|other parameters"):
            store.load("m", "fp", proto.new_sketch())
        with pytest.raises(StoreError):  # another registry's shape
            store.load("m", "fp", build_server("hr", 1_000, 2.0, {}).new_sketch())


# --- PostgreSQL ---------------------------------------------------------------------------------------
DSN = os.environ.get("LDPT_TEST_POSTGRES_DSN")


@pytest.mark.postgres
@pytest.mark.skipif(not DSN, reason="LDPT_TEST_POSTGRES_DSN is not set; PostgreSQL sparse-delta test skipped")
@pytest.mark.parametrize("name,d,eps,opts,big", CASES[:2], ids=[c[0] for c in CASES[:2]])
def test_postgres_sparse_equals_dense_and_folds(name, d, eps, opts, big):
    asyncpg = pytest.importorskip("asyncpg")
    from collector.storage.postgres import PostgresStore

    proto = build_server(name, d, eps, opts)
    batches = batches_for(proto, np.random.default_rng(11), 30, 20)
    schemas = [f"ldpt_test_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    sep = "&" if "?" in DSN else "?"

    async def run():
        sparse = await PostgresStore.open(f"{DSN}{sep}search_path={schemas[0]}")
        dense = await PostgresStore.open(f"{DSN}{sep}search_path={schemas[1]}")
        dense.sparse = False
        try:
            for group in (batches[:10], batches[10:]):
                assert await sparse.acommit(group) == await dense.acommit(group)
            template = proto.new_sketch()
            n_sparse = await sparse._fetchval("SELECT count(*) FROM ldpt_deltas WHERE cells IS NOT NULL")
            assert n_sparse > 0
            assert await dense._fetchval("SELECT count(*) FROM ldpt_deltas WHERE cells IS NOT NULL") == 0
            for windows in ([WINDOWS[0]], None):
                a = await sparse.aload("m", "fp", template, windows)
                b = await dense.aload("m", "fp", template, windows)
                assert np.array_equal(a.counts, b.counts) and np.array_equal(a.reports, b.reports)
            assert await sparse.awindows() == await dense.awindows()
            await sparse.amaintain(today="2026-12-01")  # both windows are closed: folded
            # each thin window is now one sparse row (smaller than its dense rows)
            assert await sparse._fetchval("SELECT count(*) FROM ldpt_deltas WHERE cells IS NOT NULL") == 2
            a = await sparse.aload("m", "fp", template)
            b = await dense.aload("m", "fp", template)
            assert np.array_equal(a.counts, b.counts) and np.array_equal(a.reports, b.reports)
        finally:
            await sparse.aclose()
            await dense.aclose()
            conn = await asyncpg.connect(DSN)
            try:
                for schema in schemas:
                    await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            finally:
                await conn.close()

    asyncio.run(run())


# --- batch-id retention (docs/operations.md, "Batch ids") ---------------------------------------------
def test_batch_ids_are_kept_within_the_retry_horizon_and_deleted_after(tmp_path):
    import datetime as dt

    from collector.app import apply_retention
    from collector.storage.aio import ThreadedStore
    from collector.storage.base import BATCH_ID_MIN_DAYS, BatchOutcome, batch_id_cutoff

    today = dt.date(2026, 12, 1)
    assert batch_id_cutoff("2026-12-01", today) == "2026-11-23"   # never within 8 days
    assert batch_id_cutoff("2026-02-01", today) == "2026-02-01"
    assert batch_id_cutoff("9999-12-31", today, 14) == "2026-11-17"
    assert batch_id_cutoff("9999-12-31", today, 3) == "2026-11-23"  # raised to the minimum
    proto = build_server("grr", 4, 1.0, {})
    (fresh,) = batches_for(proto, np.random.default_rng(1), 1, 3)
    (old,) = batches_for(proto, np.random.default_rng(2), 1, 3)
    path = tmp_path / "s.sqlite"
    with SQLiteStore(path) as store:
        assert store.commit([fresh, old]) == [BatchOutcome.APPLIED] * 2
        received = {fresh.batch_id: today - dt.timedelta(days=BATCH_ID_MIN_DAYS - 1),  # inside horizon
                    old.batch_id: today - dt.timedelta(days=20)}
        for bid, day in received.items():
            store._conn.execute("UPDATE batches SET received=? WHERE batch_id=?", (f"{day}T12:00:00+00:00", bid))

    now = dt.datetime(2026, 12, 1, 12, tzinfo=dt.timezone.utc).timestamp()

    async def housekeeping():
        store = ThreadedStore(path)
        try:
            await apply_retention(store, 0, 14, now=now)  # windows kept, ids older than 14 days go
        finally:
            await store.aclose()
    asyncio.run(housekeeping())
    with SQLiteStore(path) as store:
        ids = {bytes(r[0]) for r in store._conn.execute("SELECT batch_id FROM batches")}
        assert ids == {fresh.batch_id}
        # a retry of the kept batch is still a duplicate; the windows are untouched
        assert store.commit([fresh]) == [BatchOutcome.DUPLICATE]
        assert store.load("m", "fp", proto.new_sketch()).total_reports == 6
        # issue 26 §5: the same bytes after their id left batch_id_days are a new batch (the wire
        # carries no time to refuse them by); counted again, as docs/operations.md says
        assert store.commit([old]) == [BatchOutcome.APPLIED]
        assert store.load("m", "fp", proto.new_sketch()).total_reports == 9
        assert store.commit([old]) == [BatchOutcome.DUPLICATE]   # and deduplicated again from now


def test_batch_id_days_below_the_retry_horizon_is_refused(tmp_path):
    from collector.config import ConfigError, make_config

    with pytest.raises(ConfigError, match="batch_id_days 3 is below 8"):
        make_config(tmp_path / "m.toml", environ={}, batch_id_days=3)
    assert make_config(tmp_path / "m.toml", environ={}, batch_id_days=0).batch_id_days == 0


class _Groups:
    """A batch's validated payloads per key, not yet accumulated (as collector.ingest.BatchDeltas)."""

    def __init__(self, groups):
        self.payload_groups = groups


@pytest.mark.parametrize("name,d,eps,opts,big", CASES, ids=[c[0] for c in CASES])
def test_payload_groups_go_sparse_without_a_dense_temporary(tmp_path, name, d, eps, opts, big):
    """The collector's path: payloads summed per key at commit time. Protocols with flat cells
    build their sparse delta from the reports' cell indices (sparse_from_payloads); the stored
    counts equal a dense store's and the protocol's own accumulate, to the unit."""
    from sketches.deltas import sparse_from_payloads, sum_deltas

    proto = build_server(name, d, eps, opts)
    rng = np.random.default_rng(13)
    key = SketchKey("m", "fp", WINDOWS[0])
    payloads = [proto.encode(values_for(proto, rng, 30), rng) for _ in range(12)]
    batches = [PendingBatch(rng.bytes(16), b"d", _Groups([(key, proto, p)]), 30) for p in payloads]
    want = proto.new_sketch()
    for p in payloads:
        proto.accumulate(want, p)
    summed = sum_deltas([b.deltas for b in batches], sparse=True)[key]
    has_cells = proto.flat_cells(payloads[0]) is not None
    assert has_cells == (name in ("hr", "olh", "ss", "discover", "grr"))
    if has_cells and big:
        assert summed.reports == 360 and np.array_equal(summed.to_sketch().counts.reshape(want.counts.shape),
                                                        want.counts)
    assert sparse_from_payloads(proto, payloads[0]) is None or has_cells
    sparse, dense = sqlite_pair(tmp_path, name)
    with sparse, dense:
        sparse.commit(batches[:5])
        sparse.commit(batches[5:])
        dense.commit(batches)
        a = sparse.load("m", "fp", proto.new_sketch())
        b = dense.load("m", "fp", proto.new_sketch())
        assert np.array_equal(a.counts, want.counts) and np.array_equal(a.reports, want.reports)
        assert np.array_equal(b.counts, want.counts) and np.array_equal(b.reports, want.reports)
        assert (sparse_rows(sparse) > 0) == big


def test_a_full_window_of_many_narrow_cohorts_is_one_dense_row(tmp_path):
    """OLH at d = 10^6 has 177,156 cohorts of 11 cells: per-cohort dense rows would cost a row
    (key columns and headers) per cohort, and its full sparse form 12 bytes a cell; its sum is
    one dense flat row (8 bytes a cell), a thin window one sparse row."""
    from sketches.deltas import dense_flat_bytes, folded_form

    proto = build_server("olh", 1_000_000, 2.0, {})
    sketch = proto.new_sketch()
    sketch.counts += 1
    sketch.reports += 11
    m, width = sketch.counts.shape
    assert folded_form(sketch) is None  # dense: 8 bytes a cell
    thin = proto.new_sketch()
    proto.accumulate(thin, proto.encode(np.arange(1_000), np.random.default_rng(1)))
    assert folded_form(thin) is not None
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        store.add_sketch(SketchKey("m", "fp", WINDOWS[0]), sketch)
        store.add_sketch(SketchKey("m", "fp", WINDOWS[0]), thin)
        store.compact()
        (cells, counts), = store._conn.execute("SELECT length(cells), length(counts) FROM sketch_deltas")
        assert (cells, counts) == (0, dense_flat_bytes(m, width))
        got = store.load("m", "fp", proto.new_sketch())
        want = sketch.merge(thin)
        assert np.array_equal(got.counts, want.counts) and np.array_equal(got.reports, want.reports)
