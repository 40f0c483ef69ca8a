"""PostgreSQL store against the real server (LDPT_TEST_POSTGRES_DSN); skipped when it is unset.

Each test works in its own uniquely named schema (DSN ``search_path``), dropped afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import uuid

import msgpack
import numpy as np
import pytest

from client_sdk.errors import StoreError
from collector.ingest import BatchDecoder
from collector.storage.base import BatchOutcome, SketchKey
from sketches import server_half

from .collector_support import Http, Server, expected_sketch, make_body, wire_reports, write_registry

pytestmark = pytest.mark.postgres
DSN = os.environ.get("LDPT_TEST_POSTGRES_DSN")
if not DSN:
    pytest.skip("LDPT_TEST_POSTGRES_DSN is not set (e.g. postgresql://postgres@127.0.0.1:5432/test); "
                "PostgreSQL store tests skipped", allow_module_level=True)
asyncpg = pytest.importorskip("asyncpg", reason="the 'postgres' extra (asyncpg) is not installed")

from collector.storage.postgres import PostgresStore  # noqa: E402

WINDOW = "2024-05-01"


@pytest.fixture
def schema_dsn():
    schema = f"ldpt_test_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in DSN else "?"
    yield f"{DSN}{sep}search_path={schema}"

    async def drop():
        conn = await asyncpg.connect(DSN)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()
    asyncio.run(drop())


@pytest.fixture
def registry(tmp_path):
    return write_registry(tmp_path / "metrics.toml")


def batches_of(registry, n, seed, size=20):
    rng = np.random.default_rng(seed)
    theme, page = registry.get("theme"), registry.get("page")
    return [make_body(wire_reports(theme, rng.integers(0, 3, size), rng)
                      + wire_reports(page, rng.integers(0, 20, size), rng)) for _ in range(n)]


async def load(store, spec, **kw):
    return await store.aload(spec.name, spec.fingerprint, server_half(spec).new_sketch(), **kw)


def test_commit_dedupes_globally_and_sums_exactly(schema_dsn, registry):
    decoder = BatchDecoder(registry)
    bodies = batches_of(registry, 6, seed=1)

    async def scenario():
        store = await PostgresStore.open(schema_dsn)
        try:
            pend = [decoder.decode(b, WINDOW) for b in bodies]
            # in-group duplicate of batch 0 and a conflicting body reusing batch 1's id
            doc = msgpack.unpackb(bodies[1])
            conflict = decoder.decode(make_body(doc["reports"][:3], doc["batch_id"]), WINDOW)
            out = await store.acommit(pend[:3] + [decoder.decode(bodies[0], WINDOW), conflict])
            assert out == [BatchOutcome.APPLIED] * 3 + [BatchOutcome.DUPLICATE, BatchOutcome.CONFLICT]
            out = await store.acommit(pend)  # retries of everything + 3 new
            assert out == [BatchOutcome.DUPLICATE] * 3 + [BatchOutcome.APPLIED] * 3
            later = decoder.decode(batches_of(registry, 1, seed=2)[0], "2024-05-03")
            assert await store.acommit([later]) == [BatchOutcome.APPLIED]
            for name in ("theme", "page"):
                spec = registry.get(name)
                got = await load(store, spec, windows=[WINDOW])
                want = expected_sketch(spec, bodies)
                np.testing.assert_array_equal(got.counts, want.counts)
                np.testing.assert_array_equal(got.reports, want.reports)
                assert (await load(store, spec, since="2024-05-02")).total_reports == 20
                assert (await load(store, spec, until="2024-05-02")).total_reports == 120
                assert (await load(store, spec)).total_reports == 140
                assert (await load(store, spec, windows=[])).total_reports == 0
            wins = await store.awindows("theme")
            assert [(w.window, w.reports) for w in wins] == [(WINDOW, 120), ("2024-05-03", 20)]
            assert await store.abatch_count() == 7
            await store.acheck()
        finally:
            await store.aclose()
    asyncio.run(scenario())


def test_compaction_keeps_every_sum(schema_dsn, registry):
    decoder = BatchDecoder(registry)
    bodies = batches_of(registry, 30, seed=3, size=5)

    async def scenario():
        store = await PostgresStore.open(schema_dsn)
        try:
            for b in bodies:  # one transaction each: many delta rows
                await store.acommit([decoder.decode(b, WINDOW)])
            before = await store._fetchval("SELECT count(*) FROM ldpt_deltas")
            assert before == 60
            assert await store.acompact(min_rows=2) == 2
            assert await store._fetchval("SELECT count(*) FROM ldpt_deltas") == 2
            for name in ("theme", "page"):
                spec = registry.get(name)
                np.testing.assert_array_equal((await load(store, spec)).counts,
                                              expected_sketch(spec, bodies).counts)
            await store.add_sketch(SketchKey("theme", registry.get("theme").fingerprint, WINDOW),
                                   server_half(registry.get("theme")).new_sketch())
        finally:
            await store.aclose()
    asyncio.run(scenario())


def test_concurrent_overlapping_groups_apply_each_batch_once(schema_dsn, registry):
    """Two collectors commit overlapping groups in opposite orders at once: no deadlock, no double."""
    decoder = BatchDecoder(registry)
    bodies = batches_of(registry, 80, seed=4, size=4)
    pend = [decoder.decode(b, WINDOW) for b in bodies]

    first_groups_done = asyncio.Barrier(2)

    async def collector(store, order, seed):
        rng = random.Random(seed)
        outcomes = {}
        for start in range(0, len(order), 10):
            group = [pend[i] for i in order[start:start + 25]]
            rng.shuffle(group)
            for b, o in zip(group, await store.acommit(group)):
                outcomes.setdefault(bytes(b.batch_id), []).append(o)
            if not start:   # the two first groups are disjoint: both collectors write before either
                await first_groups_done.wait()   # can make all of the other's batches duplicates
        return outcomes

    async def scenario():
        a = await PostgresStore.open(schema_dsn)
        b = await PostgresStore.open(schema_dsn)
        try:
            idx = list(range(80))
            res = await asyncio.gather(collector(a, idx, 1), collector(b, idx[::-1], 2))
            for batch in pend:
                outs = res[0].get(bytes(batch.batch_id), []) + res[1].get(bytes(batch.batch_id), [])
                assert outs.count(BatchOutcome.APPLIED) == 1 and BatchOutcome.CONFLICT not in outs
            spec = registry.get("page")
            np.testing.assert_array_equal((await load(a, spec)).counts, expected_sketch(spec, bodies).counts)
            writers = await a._fetchval("SELECT count(DISTINCT writer) FROM ldpt_deltas")
            assert writers == 2  # each collector appended its own rows
        finally:
            await a.aclose()
            await b.aclose()
    asyncio.run(scenario())


def test_newer_schema_and_foreign_tables_are_refused(schema_dsn):
    async def scenario():
        store = await PostgresStore.open(schema_dsn)
        await store._pool.execute("UPDATE ldpt_meta SET value='99' WHERE key='schema_version'")
        await store.aclose()
        with pytest.raises(StoreError, match="newer"):
            await PostgresStore.open(schema_dsn)
        with pytest.raises(StoreError, match="cannot connect"):
            await PostgresStore.open("postgresql://postgres@127.0.0.1:1/none")
    asyncio.run(scenario())


@pytest.mark.e2e
def test_two_collectors_ingest_the_same_stream_with_retries(schema_dsn, registry, tmp_path):
    """Every batch goes to both collectors (a client retrying elsewhere), some more than once."""
    bodies = batches_of(registry, 240, seed=5, size=10)
    args = ["--metrics", str(tmp_path / "metrics.toml"), "--postgres", schema_dsn, "--port", "0"]
    servers = [Server(args, tmp_path), Server(args, tmp_path)]
    try:
        acks: list[dict] = []
        lock = threading.Lock()

        def client(share, seed):
            rng = random.Random(seed)
            https = [Http(s.url) for s in servers]
            for body in share:
                for _ in range(rng.choice([1, 2, 3])):  # retries, each to a random collector
                    for http in rng.sample(https, 2):
                        status, _, data = http.post_batch(body)
                        assert status == 200, data
                        with lock:
                            acks.append(json.loads(data))
            for http in https:
                http.close()

        threads = [threading.Thread(target=client, args=(bodies[i::6], i)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert sum(not a["duplicate"] for a in acks) == len(bodies)  # applied exactly once each
        for server in servers:
            assert server.terminate() == 0
    finally:
        for server in servers:
            server.kill()

    async def check():
        store = await PostgresStore.open(schema_dsn, create=False)
        try:
            assert await store.abatch_count() == len(bodies)
            for name in ("theme", "page"):
                spec = registry.get(name)
                got = await load(store, spec)
                want = expected_sketch(spec, bodies)
                np.testing.assert_array_equal(got.counts, want.counts)
                np.testing.assert_array_equal(got.reports, want.reports)
        finally:
            await store.aclose()
    asyncio.run(check())
