"""`ldpt shuffle` in process: the pool (durable store, batches, dedupe), the uniform CSPRNG
shuffle, when batches are due (never below min_batch), the envelope route's refusals, and
forwarding to a real collector app (acknowledgement, retries, configuration errors)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import logging
import os
import random
import re
import secrets

import msgpack
import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from scipy import stats

from client_sdk import ohttp
from client_sdk.registry import load_registry
from collector import ohttp_keys
from collector.app import create_app as create_collector
from collector.config import ConfigError
from collector.config import make_config as collector_config
from shuffler.app import ENVELOPE_PATH, ROUTES, STATE, create_app
from shuffler.config import SETTINGS, make_config
from shuffler.forwarder import batch_due
from shuffler.pool import Pool, PoolCounts, fisher_yates
from sketches import server_half

from .collector_support import CollectorTestServer, make_body, wire_reports
from .order_statistic import order_dependence_z
from .test_collector_app import ROOT, openapi_operations

TOKEN = "shuffler-token-0123456789abcdef"
REGISTRY = """
[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system"]
protocol = "grr"
epsilon = 1.0
"""


# --- the shuffle ----------------------------------------------------------------------------------
def test_fisher_yates_draws_every_order_equally_often():
    """24 orders of 4 items, 48,000 shuffles with a seeded generator standing in for the CSPRNG:
    chi-square on 23 degrees of freedom at α = 1e-4 (a swap with range i instead of i + 1 — the
    classic off-by-one — never yields the identity and fails at once)."""
    rng = random.Random(20261201)
    counts = dict.fromkeys(itertools.permutations(range(4)), 0)
    for _ in range(48_000):
        counts[tuple(fisher_yates(list(range(4)), rng.randrange))] += 1
    assert stats.chisquare(list(counts.values())).pvalue > 1e-4
    biased = dict.fromkeys(itertools.permutations(range(4)), 0)
    for _ in range(4_800):
        items = list(range(4))
        for i in range(3, 0, -1):   # Sattolo's cycle, not a uniform shuffle
            j = rng.randrange(i)
            items[i], items[j] = items[j], items[i]
        biased[tuple(items)] += 1
    assert stats.chisquare(list(biased.values())).pvalue < 1e-4


def test_the_shuffle_uses_the_os_csprng_by_default():
    assert fisher_yates.__defaults__ == (secrets.randbelow,)
    assert Pool.form_batch.__kwdefaults__["randbelow"] is secrets.randbelow


# --- the pool ---------------------------------------------------------------------------------------
class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def envelopes(n, size=1079):
    return [os.urandom(size) for _ in range(n)]


def test_pool_stores_dedupes_forms_and_forgets_only_after_the_acknowledgement(tmp_path):
    clock = Clock()
    db = tmp_path / "pool.sqlite"
    pool = Pool(db, clock=clock)
    first = envelopes(30)
    assert pool.store(first) == [False] * 30
    assert pool.store(first[:3] + first[:1]) == [True] * 4           # retries of stored envelopes
    assert pool.form_batch(100, 1 << 20, min_batch=31) is None       # never below min_batch
    batch_id, n = pool.form_batch(20, 1 << 20, min_batch=10)
    assert n == 20 and len(batch_id) == 16
    c = pool.counts()
    assert (c.pooled, c.assigned, c.batches) == (10, 20, 1)
    pool.close()
    pool = Pool(db, clock=clock)                                    # a restart: the batch is still formed
    assert pool.open_batches() == [batch_id]
    members = pool.batch_envelopes(batch_id)
    assert len(members) == 20 and set(members) <= set(first)
    assert pool.store(members[:2]) == [True, True]                  # still a duplicate while assigned
    assert pool.acknowledged(batch_id) == 20
    assert pool.open_batches() == [] and pool.counts().assigned == 0
    assert pool.store(members[:2]) == [True, True]                  # a late retry after forwarding
    clock.t += 9 * 86400
    assert pool.prune_forwarded(8) == 20
    assert pool.store(members[:1]) == [False]                       # forgotten after seen_days
    pool.close()


def test_the_live_counts_are_the_pools_after_every_transaction(tmp_path):
    """The event loop reads Pool.live, kept by the pool's thread: it must equal a fresh count
    after every kind of transaction (an in-memory copy adjusted by the handlers drifted from the
    pool when a count read by the forwarder raced an increment, and batches came out short)."""
    clock = Clock()
    pool = Pool(tmp_path / "pool.sqlite", clock=clock)
    first = envelopes(25)
    steps = [lambda: pool.store(first[:10]), lambda: pool.store(first[5:25] + first[:2]),
             lambda: pool.form_batch(12, 1 << 20, min_batch=5), lambda: pool.open_epoch(),
             lambda: pool.store(envelopes(3))]
    for step in steps:
        step()
        assert pool.live == pool.counts()
    (batch_id,) = pool.open_batches()
    pool.renumber(batch_id)
    assert pool.live == pool.counts()
    pool.acknowledged(pool.open_batches()[0])
    assert pool.live == pool.counts() and pool.live.pooled == 16 and pool.live.assigned == 0
    pool.close()


def test_pool_forms_oldest_epochs_first_within_the_byte_limit_and_renumbers(tmp_path):
    clock = Clock()
    pool = Pool(tmp_path / "pool.sqlite", clock=clock)
    old = envelopes(6)
    pool.store(old)
    clock.t += 100
    pool.open_epoch()
    new = envelopes(6)
    pool.store(new)
    assert pool.counts().oldest == 1_800_000_000.0
    batch_id, n = pool.form_batch(8, 1 << 20)
    got = set(pool.batch_envelopes(batch_id))
    assert set(old) <= got and len(got & set(new)) == 2
    assert pool.counts().oldest == 1_800_000_100.0
    new_id = pool.renumber(batch_id)
    assert pool.open_batches() == [new_id] and set(pool.batch_envelopes(new_id)) == got
    # the byte limit: 4 envelopes of ~1 KB within 5,000 bytes forwarded
    batch2, n2 = pool.form_batch(100, 64 + 4 * (1079 + 5))
    assert n2 == 4
    pool.close()


def test_pool_refuses_a_collector_store(tmp_path):
    from collector.storage.sqlite import SQLiteStore

    SQLiteStore(tmp_path / "c.sqlite").close()
    with pytest.raises(Exception, match="not a shuffler pool"):
        Pool(tmp_path / "c.sqlite")


def test_pool_keeps_no_arrival_order_or_time_per_envelope(tmp_path):
    pool = Pool(tmp_path / "p.sqlite")
    pool.store(envelopes(5))
    columns = [r[1] for r in pool._conn.execute("PRAGMA table_info(envelopes)")]
    assert columns == ["digest", "body", "epoch", "batch"]
    sql = pool._conn.execute("SELECT sql FROM sqlite_master WHERE name='envelopes'").fetchone()[0]
    assert "WITHOUT ROWID" in sql      # no rowid: rows are kept in digest order
    pool.close()


def test_a_batch_is_due_at_max_batch_or_max_delay_never_below_min_batch():
    config = make_config(environ={}, collector_url="http://c", token_file="t", min_batch=10, max_batch=50,
                         max_delay=60.0, max_forward_bytes=1 << 20, max_envelope_bytes=1000)
    now = 10_000.0

    def counts(pooled, age, nbytes=None):
        return PoolCounts(pooled, pooled * 1079 if nbytes is None else nbytes, 0, 0, 0, now - age)

    assert batch_due(counts(50, 0), config, now)                    # size
    assert not batch_due(counts(49, 59), config, now)
    assert batch_due(counts(10, 60), config, now)                    # delay, with min_batch
    assert not batch_due(counts(9, 10 ** 6), config, now)             # never below min_batch
    assert batch_due(counts(12, 0, 1 << 20), config, now)            # bytes
    assert not batch_due(PoolCounts(0, 0, 0, 0, 0, None), config, now)


def test_config_checks_and_every_setting_is_documented(tmp_path):
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    for s in SETTINGS:
        assert f"LDPT_SHUFFLE_{s.name.upper()}" in text, s.name
    with pytest.raises(ConfigError, match="no collector_url"):
        make_config(environ={}, token_file="t")
    with pytest.raises(ConfigError, match="below min_batch"):
        make_config(environ={}, collector_url="http://c", token_file="t", min_batch=10, max_batch=5)
    with pytest.raises(ConfigError, match="do not fit in max_forward_bytes"):
        make_config(environ={}, collector_url="http://c", token_file="t", min_batch=10_000)
    with pytest.raises(ConfigError, match="LDPT_SHUFFLE_MIN_BATCH"):
        make_config(environ={"LDPT_SHUFFLE_MIN_BATCH": "0"}, collector_url="http://c", token_file="t")
    toml = tmp_path / "shuffle.toml"
    toml.write_text('collector_url = "https://collector.example"\ntoken_file = "token"\nmin_batch = 50\n')
    config = make_config(environ={"LDPT_SHUFFLE_MIN_BATCH": "70", "LDPT_MIN_BATCH": "5"}, toml=toml)
    assert (config.min_batch, config.token_file, config.base_url) == (70, tmp_path / "token",
                                                                      "https://collector.example")
    assert make_config(environ={}, toml=toml, min_batch=90).min_batch == 90


def test_openapi_of_the_shuffler_describes_exactly_its_routes(tmp_path):
    text = (ROOT / "docs" / "shuffler-openapi.yaml").read_text(encoding="utf-8")
    config = make_config(environ={}, collector_url="http://c", token_file=tmp_path / "t", db=tmp_path / "p")
    app = create_app(config, b"t" * 16, start_forwarder=False)
    served = {(r.method, r.resource.canonical) for r in app.router.routes() if r.method != "HEAD"}
    assert served == set(ROUTES) == openapi_operations(text)


# --- in process: a collector app and a shuffler app ----------------------------------------------------
@pytest.fixture
def chain_files(tmp_path):
    metrics = tmp_path / "metrics.toml"
    metrics.write_text(REGISTRY, encoding="utf-8")
    keys = tmp_path / "keys"
    ohttp_keys.generate(keys)
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    return tmp_path, metrics, keys, token


@contextlib.asynccontextmanager
async def chain(files, collector_app=None, **settings):
    tmp_path, metrics, keys, token = files
    registry = load_registry(metrics)
    if collector_app is None:
        collector_app = create_collector(collector_config(metrics, environ={}, db=tmp_path / "c.sqlite",
                                                          ohttp_keys_dir=keys, shuffler_token_file=token),
                                         registry)
    async with TestClient(CollectorTestServer(collector_app, host="127.0.0.1")) as collector:
        settings.setdefault("min_batch", 5)
        settings.setdefault("max_batch", 20)
        settings.setdefault("max_delay", 0.3)
        settings.setdefault("retry_max", 0.2)
        settings.setdefault("rate_limit", 1e6)          # every test device is 127.0.0.1
        settings.setdefault("rate_limit_burst", 1e6)
        config = make_config(environ={}, collector_url=str(collector.make_url("/")), token_file=token,
                             db=tmp_path / "pool.sqlite", **settings)
        app = create_app(config, TOKEN.encode())
        async with TestClient(TestServer(app, host="127.0.0.1")) as shuffler:
            state = app[STATE]
            for _ in range(200):
                if state.keys.document is not None:
                    break
                await asyncio.sleep(0.02)
            yield collector, shuffler, state, registry


def sealed_bodies(registry, config_doc, n, seed=0):
    rng = np.random.default_rng(seed)
    spec = registry.get("theme")
    config = ohttp.choose(ohttp.decode_key_configs(config_doc))
    bodies = [make_body(wire_reports(spec, rng.integers(0, 3, 1), rng)) for _ in range(n)]
    return bodies, [ohttp.seal_request(config, ohttp.inner_request(b)).envelope for b in bodies]


async def send(client, envelope, headers=None):
    resp = await client.post(ENVELOPE_PATH, data=envelope, headers=headers or {"Content-Type": ohttp.REQUEST_TYPE})
    return resp.status, resp.headers, await resp.read()


async def until(predicate, timeout=20.0):
    for _ in range(int(timeout / 0.02)):
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()


def stored_reports(db, registry):
    from collector.storage.sqlite import SQLiteStore

    spec = registry.get("theme")
    with SQLiteStore(db, create=False) as store:
        return store.load(spec.name, spec.fingerprint, server_half(spec).new_sketch()).total_reports, \
            store.shuffle_records(spec.name, spec.fingerprint)


def test_envelopes_are_acknowledged_after_storing_and_forwarded_in_batches_of_min_batch(chain_files):
    tmp_path = chain_files[0]

    async def scenario():
        async with chain(chain_files) as (collector, shuffler, state, registry):
            resp = await shuffler.get(ohttp.GATEWAY_PATH)
            doc = await resp.read()
            assert resp.status == 200 and resp.content_type == ohttp.KEYS_TYPE
            _, sealed = sealed_bodies(registry, doc, 12)
            for envelope in sealed[:4]:
                status, headers, data = await send(shuffler, envelope)
                assert status == 202 and json.loads(data) == {"stored": True, "duplicate": False}
                assert headers["Content-Type"].startswith("application/json")
            status, _, data = await send(shuffler, sealed[0])                  # a retry
            assert status == 202 and json.loads(data) == {"stored": True, "duplicate": True}
            await asyncio.sleep(0.6)                                            # > max_delay, but 4 < min_batch
            assert state.telemetry.forwarded_batches == 0 and state.counts.pooled == 4
            for envelope in sealed[4:12]:
                await send(shuffler, envelope)
            assert await until(lambda: state.telemetry.forwarded_envelopes == 12)
            assert state.counts.pooled == 0 and state.counts.assigned == 0
            metrics = await (await shuffler.get("/metrics")).text()
            assert 'ldpt_shuffler_envelopes_total{outcome="stored"} 12' in metrics
            assert 'ldpt_shuffler_envelopes_total{outcome="duplicate"} 1' in metrics
            assert "ldpt_shuffler_forwarded_envelopes_total 12" in metrics
            assert (await shuffler.get("/readyz")).status == 200
            assert (await shuffler.get("/healthz")).status == 200

    asyncio.run(scenario())
    reports, records = stored_reports(tmp_path / "c.sqlite", load_registry(chain_files[1]))
    assert reports == 12
    assert sum(r.reports for r in records) == 12 and min(r.smallest_batch for r in records) >= 5


class FlakyCollector:
    """The real collector app behind a switch: answer 503 (or 401) to shuffled batches for a while."""

    def __init__(self, app: web.Application) -> None:
        self.status: int | None = 503
        self.seen = 0

        @web.middleware
        async def flaky(request, handler):
            if request.path == "/v1/shuffled-batches":
                self.seen += 1
                if self.status is not None:
                    return web.json_response({"detail": "not now"}, status=self.status,
                                             headers={"Retry-After": "0"} if self.status == 503 else {})
            return await handler(request)
        app.middlewares.insert(0, flaky)


def test_the_envelope_route_refuses_what_it_must(chain_files):
    tmp_path, metrics, keys, token = chain_files
    registry = load_registry(metrics)
    collector_app = create_collector(collector_config(metrics, environ={}, db=tmp_path / "c.sqlite",
                                                      ohttp_keys_dir=keys, shuffler_token_file=token), registry)
    FlakyCollector(collector_app)      # answers 503: formed batches stay in the pool

    async def scenario():
        async with chain(chain_files, collector_app, max_envelope_bytes=1100, max_pool_envelopes=21,
                         rate_limit=0.001, rate_limit_burst=12) as (collector, shuffler, state, _):
            doc = state.keys.document
            _, sealed = sealed_bodies(registry, doc, 3)
            checks = [
                ({"Content-Type": "application/msgpack"}, sealed[0], 415, "unsupported-media-type"),
                (None, b"\x01" * 20, 400, "undecodable-envelope"),
                (None, b"\x09" + sealed[0][1:], 400, "ohttp-key"),
                (None, os.urandom(1200), 413, "body-too-large"),
                ({"Content-Type": ohttp.REQUEST_TYPE, "Content-Encoding": "gzip"}, sealed[0], 415,
                 "unsupported-content-encoding"),
            ]
            for headers, body, status, slug in checks:
                got, h, data = await send(shuffler, body, headers)
                problem = json.loads(data)
                assert (got, problem["type"].rsplit("/", 1)[-1].rsplit("#", 1)[-1]) == (status, slug), data
                assert h["Content-Type"].startswith("application/problem+json")
            ohttp_key = json.loads((await send(shuffler, b"\x09" + sealed[0][1:]))[2])
            assert ohttp_key["type"] == ohttp.KEY_PROBLEM_TYPE                  # RFC 9458's type, for the SDK
            # the pool cap (21 envelopes, pooled or in formed batches): the 22nd is a 503 with Retry-After
            _, more = sealed_bodies(registry, doc, 22, seed=1)
            state.buckets = type(state.buckets)(1000.0, 1000.0)
            answers = [await send(shuffler, e) for e in more]
            assert [a[0] for a in answers] == [202] * 21 + [503]
            assert json.loads(answers[-1][2])["type"].endswith("pool-full") and "Retry-After" in answers[-1][1]
            # the rate limit, per source address
            state.buckets = type(state.buckets)(0.001, 2.0)
            got = [(await send(shuffler, sealed[1]))[0] for _ in range(3)]
            assert got[-1] == 429
            metrics_text = await (await shuffler.get("/metrics")).text()
            refused = dict(re.findall(r'requests_refused_total{reason="([a-z-]+)"} (\d+)', metrics_text))
            assert (refused["pool-full"], refused["rate-limited"]) == ("3", "1"), refused   # full twice more, then 429

    asyncio.run(scenario())


def test_not_ready_until_the_keys_are_known(chain_files, tmp_path):
    async def scenario():
        config = make_config(environ={}, collector_url="http://127.0.0.1:9", token_file=chain_files[3],
                             db=tmp_path / "lonely.sqlite", key_refresh=0.05)
        app = create_app(config, TOKEN.encode())
        async with TestClient(TestServer(app, host="127.0.0.1")) as shuffler:
            status, headers, data = await send(shuffler, os.urandom(200))
            assert status == 503 and json.loads(data)["type"].endswith("shuffler-not-ready")
            assert headers["Retry-After"] == "5"
            assert (await shuffler.get("/readyz")).status == 503
            assert (await shuffler.get(ohttp.GATEWAY_PATH)).status == 503
            await asyncio.sleep(0.2)
            assert app[STATE].telemetry.key_fetch_failures >= 1

    asyncio.run(scenario())


def test_forwarding_retries_until_the_collector_commits_and_never_drops(chain_files, caplog):
    tmp_path, metrics, keys, token = chain_files
    registry = load_registry(metrics)
    collector_app = create_collector(collector_config(metrics, environ={}, db=tmp_path / "c.sqlite",
                                                      ohttp_keys_dir=keys, shuffler_token_file=token), registry)
    flaky = FlakyCollector(collector_app)

    async def scenario():
        async with chain(chain_files, collector_app) as (collector, shuffler, state, _):
            _, sealed = sealed_bodies(registry, state.keys.document, 5)
            for e in sealed:
                assert (await send(shuffler, e))[0] == 202
            assert await until(lambda: flaky.seen >= 3)
            assert state.telemetry.forwarded_batches == 0 and state.counts.assigned == 5
            flaky.status = 401                      # a wrong token: logged as a configuration error
            seen = flaky.seen
            assert await until(lambda: flaky.seen >= seen + 2)
            assert state.telemetry.failures["unauthorized"] >= 1 and state.counts.assigned == 5
            flaky.status = None
            assert await until(lambda: state.telemetry.forwarded_envelopes == 5)
            assert state.telemetry.failures["retry-later"] >= 2

    with caplog.at_level(logging.WARNING, logger="ldpt.shuffler"):
        asyncio.run(scenario())
    assert any("HTTP 401" in r.getMessage() and "token_file" in r.getMessage() for r in caplog.records)
    assert stored_reports(tmp_path / "c.sqlite", registry)[0] == 5


@pytest.mark.statistical
def test_forwarded_order_is_a_fresh_uniform_shuffle_of_the_pool(chain_files, monkeypatch):
    """Neither the order in which envelopes arrive nor the pool's digest order survives: within
    each forwarded batch, positions are independent of arrival ranks and of digest ranks (the
    linear rank statistic of tests/order_statistic.py, |z| < 5.5 for each of 2 batches x 2
    orders: size ≈ 1.5e-7 per run on a correct CSPRNG shuffle). Forwarding in arrival order or
    in the pool's digest order, unshuffled, scores z = sqrt(199) ≈ 14 in every batch."""
    forwarded: list[list[bytes]] = []
    real_packb = msgpack.packb

    def recording(doc, **kw):
        if isinstance(doc, dict) and "envelopes" in doc:
            forwarded.append(list(doc["envelopes"]))
        return real_packb(doc, **kw)

    monkeypatch.setattr("shuffler.forwarder.msgpack.packb", recording)

    async def scenario():
        async with chain(chain_files, min_batch=200, max_batch=200, max_delay=3600) as (_, shuffler, state, registry):
            _, sealed = sealed_bodies(registry, state.keys.document, 400, seed=7)
            for e in sealed:
                assert (await send(shuffler, e))[0] == 202
            assert await until(lambda: state.telemetry.forwarded_envelopes == 400, 60)
            return sealed

    sealed = asyncio.run(scenario())
    arrival = {e: i for i, e in enumerate(sealed)}
    assert sorted(e for batch in forwarded for e in batch) == sorted(sealed)
    digest_rank = {e: r for r, e in enumerate(sorted(sealed, key=lambda e: hashlib.sha256(e).digest()))}
    for batch in forwarded:
        assert abs(order_dependence_z([batch], arrival)) < 5.5
        assert abs(order_dependence_z([batch], digest_rank)) < 5.5
    by_digest = sorted(forwarded[0], key=digest_rank.get)
    assert order_dependence_z([by_digest], digest_rank) == pytest.approx(np.sqrt(len(by_digest) - 1))

