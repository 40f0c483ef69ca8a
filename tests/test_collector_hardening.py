"""Collector defects found by the storage/transport review (issue 18, part 5): an unknown
Content-Encoding read as identity, /readyz ready while every commit fails, and an unknown
PostgreSQL commit outcome logged as a rollback."""

from __future__ import annotations

import asyncio
import gzip
import json
import sqlite3
import zlib

import numpy as np
import pytest

from client_sdk.errors import StoreError
from collector.app import STATE
from collector.storage.aio import AsyncSketchStore, ThreadedStore
from collector.storage.base import BatchOutcome, CommitOutcomeUnknown, PendingBatch, SketchKey
from sketches import server_half

from .collector_support import write_registry, write_token
from .test_collector_app import MSGPACK, assert_problem, bodies_for, post, running


@pytest.fixture
def setup(tmp_path):
    """(registry path, registry, token file, SQLite path): what ``running`` starts a collector on."""
    registry = write_registry(tmp_path / "metrics.toml")
    return tmp_path / "metrics.toml", registry, write_token(tmp_path / "token"), tmp_path / "collector.sqlite"


def test_an_unknown_content_encoding_is_refused_with_415(setup):
    body = bodies_for(setup[1], 1)[0]

    async def scenario():
        async with running(setup) as (client, app):
            for encoding in ("x-unknown", "compress", "gzip, gzip", "identity, gzip", "x-gzip"):
                status, headers, data = await post(client, body, {**MSGPACK, "Content-Encoding": encoding})
                doc = assert_problem(status, headers, data, 415, "unsupported-content-encoding")
                assert doc["content_encoding"] == encoding
                assert "gzip" in headers["Accept-Encoding"] and "deflate" in headers["Accept-Encoding"]
            accepted = 0
            for encoding, data in (("identity", body), ("GZip", gzip.compress(body)),
                                   ("deflate", zlib.compress(body)), ("", body)):
                status, _, answer = await post(client, data, {**MSGPACK, "Content-Encoding": encoding})
                assert status == 200, (encoding, answer)
                accepted += json.loads(answer)["accepted"] if not json.loads(answer)["duplicate"] else 0
            assert accepted == 75                       # one batch, the rest duplicates of it
            tel = app[STATE].telemetry
            assert tel.value("ldpt_requests_rejected_total", "unsupported-content-encoding") == 5
    asyncio.run(scenario())



# --- readiness while commits fail ---------------------------------------------------------------------

class FullDisk(AsyncSketchStore):
    """A ThreadedStore whose disk can be 'full': commits and write probes fail, reads still work
    (what a full file system does to SQLite: the schema check passes, every write fails)."""

    def __init__(self, path) -> None:
        self.inner = ThreadedStore(path)
        self.description = self.inner.description
        self.full = False
        self.probes = 0

    async def acommit(self, batches):
        if self.full:
            raise sqlite3.OperationalError("database or disk is full")
        return await self.inner.acommit(batches)

    async def aprobe_write(self):
        self.probes += 1
        if self.full:
            raise StoreError("cannot write (database or disk is full)")
        await self.inner.aprobe_write()

    async def aload(self, *args, **kw):
        return await self.inner.aload(*args, **kw)

    async def awindows(self, metric=None):
        return await self.inner.awindows(metric)

    async def acheck(self):
        await self.inner.acheck()

    async def aprune(self, before):
        return await self.inner.aprune(before)

    async def aclose(self):
        await self.inner.aclose()


def test_readyz_is_503_while_every_commit_fails_and_200_once_a_write_probe_succeeds(setup):
    bodies = bodies_for(setup[1], 3)
    store = FullDisk(setup[3])

    async def factory():
        return store

    async def scenario():
        async with running(setup, store_factory=factory) as (client, app):
            assert (await client.get("/readyz")).status == 200
            assert store.probes == 0                      # no write probe while commits succeed
            assert (await post(client, bodies[0]))[0] == 200
            store.full = True
            for body in bodies[1:]:
                assert_problem(*await post(client, body), 503, "store-unavailable")
            resp = await client.get("/readyz")
            doc = assert_problem(resp.status, resp.headers, await resp.read(), 503, "store-unavailable")
            assert "commits are failing" in doc["detail"] and "full" in doc["detail"]
            assert resp.headers["Retry-After"]
            store.full = False                            # space freed: the probe succeeds
            assert (await client.get("/readyz")).status == 200
            assert app[STATE].committer.failing is None
            for body in bodies[1:]:                       # the clients' retries go through
                assert (await post(client, body))[0] == 200
    asyncio.run(scenario())


def test_the_readiness_probe_for_the_admin_port_sees_failing_commits(setup):
    from collector.app import check_store

    store = FullDisk(setup[3])

    async def factory():
        return store

    async def scenario():
        async with running(setup, store_factory=factory) as (client, app):
            state = app[STATE]
            store.full = True
            status, _, _ = await post(client, bodies_for(setup[1], 1)[0])
            assert status == 503 and state.committer.failing is not None
            with pytest.raises(StoreError, match="commits are failing"):
                await check_store(state)
            store.full = False
            await check_store(state)
            assert state.committer.failing is None
    asyncio.run(scenario())


def test_a_full_sqlite_store_truncates_its_wal_after_a_failed_commit(tmp_path, setup):
    """max_page_count makes SQLite answer SQLITE_FULL as a full disk would (no tmpfs needed)."""
    from collector.storage.sqlite import SQLiteStore

    registry = setup[1]
    store = SQLiteStore(tmp_path / "full.sqlite")
    wal = tmp_path / "full.sqlite-wal"
    spec = registry.get("page")
    rng = np.random.default_rng(3)

    def batch(i, n=200):
        sketch = server_half(spec).new_sketch()
        server_half(spec).accumulate(sketch, server_half(spec).encode(rng.integers(0, 20, n), rng))
        return PendingBatch(i.to_bytes(16, "big"), bytes(32), {SketchKey("page", spec.fingerprint, f"2026-01-{i:02d}"): sketch}, n)

    for i in range(1, 4):
        store.commit([batch(i)])
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count={pages}")
    assert wal.stat().st_size > 0
    with pytest.raises(sqlite3.OperationalError, match="full"):
        store.commit([batch(i) for i in range(4, 28)])   # new windows: new pages
    assert wal.stat().st_size == 0                       # checkpointed and truncated: space given back
    store._conn.execute(f"PRAGMA max_page_count={pages * 100}")
    store.probe_write()
    assert store.commit([batch(4)]) == [BatchOutcome.APPLIED]
    store.close()


# --- a commit whose outcome is unknown ----------------------------------------------------------------

class LostAfterCommit(FullDisk):
    """Commits, then loses the connection before the answer (a terminated backend after COMMIT)."""

    lose = False

    async def acommit(self, batches):
        outcomes = await self.inner.acommit(batches)
        if self.lose:
            raise CommitOutcomeUnknown("PostgreSQL connection lost during the commit (test)")
        return outcomes


def test_an_unknown_commit_outcome_is_logged_as_unknown_and_the_retry_counts_once(setup, caplog):
    store = LostAfterCommit(setup[3])
    body = bodies_for(setup[1], 1)[0]

    async def factory():
        return store

    async def scenario():
        async with running(setup, store_factory=factory) as (client, _):
            store.lose = True
            doc = assert_problem(*await post(client, body), 503, "store-unavailable")
            assert doc["retry_after"] >= 1                       # retryable: the SDK resends
            store.lose = False
            status, _, data = await post(client, body)           # the SDK's retry, same bytes
            assert status == 200 and json.loads(data) == {"accepted": 75, "duplicate": True}
    asyncio.run(scenario())
    errors = [r.getMessage() for r in caplog.records if r.name == "ldpt.collector" and r.levelname == "ERROR"]
    assert len(errors) == 1 and "outcome unknown" in errors[0] and "rolled back" not in errors[0]


class _Tx:
    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


class _Conn:
    def __init__(self, error):
        self.error = error

    def transaction(self):
        return _Tx()

    async def fetch(self, *args):
        raise self.error

    execute = fetch


class _Pool:
    def __init__(self, error, at_acquire=False):
        self.error, self.at_acquire = error, at_acquire

    def acquire(self, timeout=None):
        pool = self

        class Acquire:
            async def __aenter__(self):
                if pool.at_acquire:
                    raise pool.error
                return _Conn(pool.error)

            async def __aexit__(self, *exc):
                return False
        return Acquire()


def test_postgres_maps_a_lost_connection_mid_commit_to_outcome_unknown(setup):
    asyncpg = pytest.importorskip("asyncpg")
    from collector.storage.postgres import PostgresStore

    spec = setup[1].get("page")
    sketch = server_half(spec).new_sketch()
    batch = PendingBatch(b"\x01" * 16, bytes(32), {SketchKey("page", spec.fingerprint, "2026-01-01"): sketch}, 1)

    def commit(error, at_acquire=False):
        store = PostgresStore(_Pool(error, at_acquire), "postgresql://db/ldpt", "test")
        return asyncio.run(store.acommit([batch]))

    terminated = asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command")
    for error in (asyncpg.exceptions.InternalClientError("cannot switch to state 15; another operation "
                                                         "(None) is in progress"),
                  asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
                  terminated, ConnectionResetError(104, "reset")):
        with pytest.raises(CommitOutcomeUnknown, match="outcome|lost"):
            commit(error)
    with pytest.raises(StoreError) as info:                       # rolled back for sure: not unknown
        commit(asyncpg.exceptions.UniqueViolationError("duplicate key"))
    assert not isinstance(info.value, CommitOutcomeUnknown)
    with pytest.raises(StoreError) as info:                       # nothing was sent yet
        commit(ConnectionRefusedError(111, "refused"), at_acquire=True)
    assert not isinstance(info.value, CommitOutcomeUnknown)


class GatedCheck:
    """A store whose readiness check waits for the test to let it finish."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()
        self.finished = False

    async def acheck(self) -> None:
        self.entered.set()
        await self.gate.wait()
        self.finished = True


def test_the_readiness_prober_stops_when_cancelled_as_its_check_completes():
    """Cancelled in the loop step where the store's check returns (what the collector's cleanup
    can hit), the prober ends: under 3.11's wait_for it ran on and `await prober` hung for good."""
    from types import SimpleNamespace

    from collector.app import _probe_readiness

    async def scenario():
        store = GatedCheck()
        state = SimpleNamespace(store=store, committer=None, readiness=None)
        prober = asyncio.create_task(_probe_readiness(state))
        await store.entered.wait()
        store.gate.set()
        while not store.finished:
            await asyncio.sleep(0)
        assert prober.cancel()
        done, _ = await asyncio.wait({prober}, timeout=30)   # a hang guard: the fix ends it at once
        assert done and prober.cancelled()
    asyncio.run(scenario())
