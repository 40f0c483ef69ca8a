"""The collector's side of shuffling: POST /v1/shuffled-batches (authenticated shufflers), the
forwarded batch committed whole and once, what is recorded per window for the central claim
(both stores), schema v3 -> v4, and registries that require shuffling."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import uuid

import msgpack
import numpy as np
import pytest
from aiohttp.test_utils import TestClient

from client_sdk import ohttp
from client_sdk.registry import load_registry, parse_registry
from collector import ohttp_keys
from collector.app import STATE, create_app
from collector.config import ConfigError, make_config
from collector.shuffled import SHUFFLED_PATH, SHUFFLED_TYPE, forwarded_digest
from collector.storage.base import BatchOutcome, PendingBatch, SketchKey
from collector.storage.shuffled import EnvelopeView, ShuffledBatch, ShuffledOutcome, batch_records
from collector.storage.sqlite import SQLiteStore
from sketches import server_half

from .collector_support import CollectorTestServer, expected_sketch, make_body, wire_reports
from .test_collector_app import assert_problem, post, stored

SHUFFLER_TOKEN = "shuffler-token-0123456789abcdef"
REGISTRY = """
[dimensions.os]
values = ["android", "ios"]

[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system"]
protocol = "grr"
epsilon = 1.0
shuffle = "required"

[metrics.app]
kind = "categorical"
categories = ["a", "b", "c", "d", "e", "f", "g", "h"]
protocol = "olh"
epsilon = 2.0
cohorts = 4
reports_per_window = 2
dimensions = ["os"]
"""


@pytest.fixture
def setup(tmp_path):
    path = tmp_path / "metrics.toml"
    path.write_text(REGISTRY, encoding="utf-8")
    keys = tmp_path / "keys"
    ohttp_keys.generate(keys)
    token = tmp_path / "shuffler.token"
    token.write_text(SHUFFLER_TOKEN + "\n", encoding="utf-8")
    token.chmod(0o600)
    return path, load_registry(path), keys, token, tmp_path / "collector.sqlite"


@contextlib.asynccontextmanager
async def collector(setup, **config):
    path, registry, keys, token, db = setup
    config.setdefault("ohttp_keys_dir", keys)
    config.setdefault("shuffler_token_file", token)
    app = create_app(make_config(path, environ={}, db=db, **config), registry)
    async with TestClient(CollectorTestServer(app, host="127.0.0.1")) as client:
        yield client, app


def device_body(registry, rng, theme=True, app=0, os_value=None):
    reports = []
    if theme:
        reports += wire_reports(registry.get("theme"), rng.integers(0, 3, 1), rng)
    if app:
        reports += wire_reports(registry.get("app"), rng.integers(0, 8, app), rng)
    return make_body(reports, **({"d": {"os": os_value}} if os_value else {}))


async def key_config(client):
    resp = await client.get(ohttp.GATEWAY_PATH)
    return ohttp.choose(ohttp.decode_key_configs(await resp.read()))


def forwarded(envelopes, batch_id=None):
    return msgpack.packb({"v": 1, "batch_id": batch_id or os.urandom(16), "envelopes": list(envelopes)})


async def forward(client, body, token=SHUFFLER_TOKEN, ctype=SHUFFLED_TYPE):
    headers = {"Content-Type": ctype}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    resp = await client.post(SHUFFLED_PATH, data=body, headers=headers)
    return resp.status, resp.headers, await resp.read()


def assert_same(a, b):
    np.testing.assert_array_equal(a.counts, b.counts)
    np.testing.assert_array_equal(a.reports, b.reports)


def records(db, metric, registry):
    with SQLiteStore(db, create=False) as store:
        return {r.window: r for r in store.shuffle_records(metric, registry.get(metric.split("@")[0]).fingerprint)}


def test_a_shuffled_batch_is_committed_whole_once_and_recorded(setup):
    _, registry, _, _, db = setup
    rng = np.random.default_rng(3)
    # 30 devices: 20 send theme only, 10 theme + 2 app reports on android, 5 of those ... all alike in clear
    bodies = [device_body(registry, rng) for _ in range(20)]
    bodies += [device_body(registry, rng, app=2, os_value="android") for _ in range(6)]
    bodies += [device_body(registry, rng, app=1, os_value="ios") for _ in range(4)]

    async def scenario():
        async with collector(setup) as (client, app):
            config = await key_config(client)
            envelopes = [ohttp.seal_request(config, ohttp.inner_request(b)).envelope for b in bodies]
            envelopes.append(b"\x07" + envelopes[0][1:])           # an unknown key id: undecryptable
            bad = ohttp.seal_request(config, ohttp.inner_request(b"not msgpack")).envelope
            envelopes.append(bad)                                  # refused inside
            batch_id = os.urandom(16)
            body = forwarded(envelopes, batch_id)
            status, _, data = await forward(client, body)
            assert status == 200, data
            assert json.loads(data) == {"batch_id": batch_id.hex(), "duplicate": False, "envelopes": 32,
                                        "accepted": 30, "duplicates": 0, "refused": 1, "undecryptable": 1,
                                        "reports": 20 + 6 * 3 + 4 * 2}
            # delivered again (the shuffler missed the answer), in another order: a duplicate, nothing added
            again = forwarded(list(reversed(envelopes)), batch_id)
            status, _, data = await forward(client, again)
            assert status == 200 and json.loads(data)["duplicate"] is True
            # the same id with other envelopes: 409, nothing added
            status, headers, data = await forward(client, forwarded(envelopes[:5], batch_id))
            assert_problem(status, headers, data, 409, "shuffled-batch-conflict")
            # the same envelopes in a NEW forwarded batch (a shuffler that lost its state): the
            # inner batch ids deduplicate every one; nothing is recorded as a new crowd
            status, _, data = await forward(client, forwarded(envelopes))
            answer = json.loads(data)
            assert (answer["accepted"], answer["duplicates"], answer["reports"]) == (0, 30, 0)
            telemetry = app[STATE].telemetry
            assert telemetry.value("ldpt_shuffled_batches_total", "applied") == 2
            assert telemetry.value("ldpt_shuffled_batches_total", "duplicate") == 1
            assert telemetry.value("ldpt_shuffled_batches_total", "conflict") == 1

    asyncio.run(scenario())
    theme, app_spec = registry.get("theme"), registry.get("app")
    assert_same(stored(db, theme)[0], expected_sketch(theme, bodies))
    assert stored(db, theme)[1] == 30    # the 30 devices' batch ids, once
    assert_same(stored(db, app_spec)[0], expected_sketch(app_spec, bodies[20:]))
    (rec,) = records(db, "theme", registry).values()
    assert (rec.reports, rec.envelopes, rec.batches) == (30, 30, 1)
    # three kinds of envelope in clear: theme alone (20), theme + 2 app (6), theme + 1 app (4)
    assert (rec.smallest_batch, rec.largest_batch, rec.smallest_segment) == (4, 30, 4)
    assert (rec.min_reports, rec.max_reports, rec.max_envelope_reports) == (1, 1, 3)
    assert rec.envelope_epsilon == pytest.approx(1.0 + 2 * 2.0)
    (app_rec,) = records(db, "app", registry).values()
    assert (app_rec.reports, app_rec.envelopes, app_rec.smallest_batch) == (16, 10, 4)
    assert app_rec.smallest_cohort <= app_rec.smallest_segment == 4
    assert [(r.envelopes, r.smallest_batch) for r in records(db, "app@os=android", registry).values()] == [(6, 6)]


def test_records_count_only_envelopes_applied_by_the_commit():
    key = SketchKey("m", "f", "2026-01-01")

    def view(sig, seg=(), cohorts=()):
        return EnvelopeView(sig, seg, {key: (1, cohorts)}, 1.0, 1)

    views = [view((("m", "f", 1),)), view((("m", "f", 1),)), view((("m", "f", 1),), (("os", "ios"),)),
             view((("m", "f", 1),), (("os", "ios"),), (3,)), view((("m", "f", 1), ("x", "g", 1)))]
    batch = ShuffledBatch(b"i" * 16, b"d", 5, [PendingBatch(None, b"", {})] * 5, views)
    rec = batch_records(batch, [True] * 5)[key]
    assert (rec.envelopes, rec.smallest_batch, rec.smallest_segment, rec.smallest_cohort) == (5, 1, 1, 1)
    rec = batch_records(batch, [True, True, True, False, False])[key]
    assert (rec.envelopes, rec.smallest_batch, rec.smallest_segment, rec.smallest_cohort) == (3, 3, 1, 1)
    rec = batch_records(batch, [True, True, False, False, False])[key]
    assert (rec.smallest_batch, rec.smallest_segment) == (2, 2)
    assert batch_records(batch, [False] * 5) == {}


def test_authentication_media_type_and_decoding_refusals(setup):
    async def scenario():
        async with collector(setup, rate_limit_burst=3.0, rate_limit=0.001) as (client, _):
            body = forwarded([b"x" * 100])
            for token, reason in ((None, "missing"), ("nope", "not-bearer"), ("wrong-token-0123456789", "invalid")):
                headers = {"Content-Type": SHUFFLED_TYPE}
                if token is not None:
                    headers["Authorization"] = token if reason == "not-bearer" else f"Bearer {token}"
                resp = await client.post(SHUFFLED_PATH, data=body, headers=headers)
                doc = await resp.json(content_type=None)
                assert resp.status == 401 and doc["reason"] == reason
                assert resp.headers["WWW-Authenticate"].startswith("Bearer")
            status, headers, data = await forward(client, body, token="wrong-token-0123456789")
            assert_problem(status, headers, data, 429, "rate-limited")    # guessing is throttled
            status, headers, data = await forward(client, body, ctype="application/json")
            assert_problem(status, headers, data, 415, "unsupported-media-type")  # authenticated: no limit
            for bad, slug in ((b"\xc1", "undecodable-body"), (msgpack.packb([1]), "invalid-batch"),
                              (msgpack.packb({"v": 2, "batch_id": b"x" * 16, "envelopes": [b"e"]}),
                               "unsupported-version"),
                              (msgpack.packb({"v": 1, "batch_id": b"x", "envelopes": [b"e"]}), "invalid-batch"),
                              (msgpack.packb({"v": 1, "batch_id": b"x" * 16, "envelopes": []}), "invalid-batch"),
                              (msgpack.packb({"v": 1, "batch_id": b"x" * 16, "envelopes": ["s"]}), "invalid-batch")):
                status, headers, data = await forward(client, bad)
                assert status in (400, 422), (bad, data)
                assert_problem(status, headers, data, status, slug)

    asyncio.run(scenario())


def test_too_many_envelopes_and_too_large_bodies(setup):
    async def scenario():
        async with collector(setup, max_shuffled_envelopes=3, max_shuffled_batch_bytes=2000) as (client, _):
            status, headers, data = await forward(client, forwarded([b"e" * 10] * 4))
            assert_problem(status, headers, data, 422, "invalid-batch")
            status, headers, data = await forward(client, forwarded([b"e" * 1000] * 3))
            assert_problem(status, headers, data, 413, "body-too-large")

    asyncio.run(scenario())


def test_without_a_token_file_the_endpoint_is_off(setup):
    async def scenario():
        async with collector(setup, shuffler_token_file=None) as (client, _):
            status, headers, data = await forward(client, forwarded([b"e"]))
            assert_problem(status, headers, data, 404, "not-found")

    asyncio.run(scenario())


def test_a_loose_token_file_is_refused(setup):
    path, registry, keys, token, db = setup
    token.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        create_app(make_config(path, environ={}, db=db, shuffler_token_file=token), registry)


def test_a_metric_that_requires_shuffling_is_refused_plain_and_sealed_direct(setup):
    _, registry, _, _, db = setup
    rng = np.random.default_rng(5)

    async def scenario():
        async with collector(setup) as (client, _):
            resp_status, headers, data = await post(client, device_body(registry, rng, app=1))
            assert_problem(resp_status, headers, data, 403, "shuffle-required")
            assert json.loads(data)["metric"] == "theme"
            # a batch without it is accepted as before
            status, _, _ = await post(client, device_body(registry, rng, theme=False, app=1))
            assert status == 200
            # straight to the gateway (sealed, but not shuffled): the inner answer is the refusal
            config = await key_config(client)
            sealed = ohttp.seal_request(config, ohttp.inner_request(device_body(registry, rng)))
            resp = await client.post(ohttp.GATEWAY_PATH, data=sealed.envelope,
                                     headers={"Content-Type": ohttp.REQUEST_TYPE})
            from client_sdk import bhttp

            inner = bhttp.decode_response(ohttp.open_response(sealed, await resp.read()))
            assert inner.status == 403 and b"shuffle-required" in inner.content

    asyncio.run(scenario())
    assert stored(db, registry.get("theme"))[0].total_reports == 0


def test_the_registry_option_leaves_fingerprints_alone():
    plain = parse_registry(REGISTRY.replace('shuffle = "required"\n', ""))
    required = parse_registry('shuffle = "required"\n' + REGISTRY.replace('shuffle = "required"\n', ""))
    assert [m.fingerprint for m in plain] == [m.fingerprint for m in required]
    assert [m.shuffle_required for m in plain] == [False, False]
    assert [m.shuffle_required for m in required] == [True, True]
    per_metric = parse_registry(REGISTRY)
    assert [m.shuffle_required for m in per_metric] == [True, False]
    assert parse_registry(per_metric.to_toml()).get("theme").shuffle == "required"
    assert per_metric.get("theme").to_json()["shuffle"] == "required"


def test_a_v3_store_is_migrated_and_keeps_its_data(tmp_path):
    db = tmp_path / "old.sqlite"
    registry = parse_registry(REGISTRY)
    spec = registry.get("app")
    rng = np.random.default_rng(1)
    body = make_body(wire_reports(spec, rng.integers(0, 8, 5), rng))
    from collector.ingest import BatchDecoder

    with SQLiteStore(db) as store:
        store.commit([BatchDecoder(registry).decode(body, "2026-01-01")])
        conn = store._conn
        conn.execute("DROP TABLE shuffle_windows")
        conn.execute("DROP TABLE shuffled_batches")
        conn.execute("UPDATE ldpt_meta SET value='3' WHERE key='schema_version'")
    with SQLiteStore(db, create=False) as store:
        assert store._conn.execute("SELECT value FROM ldpt_meta WHERE key='schema_version'").fetchone() == ("4",)
        assert store.shuffle_records("app", spec.fingerprint) == []
        assert store.load("app", spec.fingerprint, server_half(spec).new_sketch()).total_reports == 5


def test_prune_drops_old_windows_records_and_forwarded_ids(tmp_path):
    key = SketchKey("m", "f", "2020-01-01")
    view = EnvelopeView((("m", "f", 1),), (), {key: (1, ())}, 1.0, 1)
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        batch = ShuffledBatch(b"u" * 16, b"d", 1, [PendingBatch(b"b" * 16, b"x", {})], [view])
        assert store.commit([batch]) == [ShuffledOutcome(BatchOutcome.APPLIED, (BatchOutcome.APPLIED,))]
        assert store.commit([batch]) == [ShuffledOutcome(BatchOutcome.DUPLICATE)]
        assert store.shuffle_records("m", "f")[0].envelopes == 1
        store.prune("2021-01-01", "2100-01-01")
        assert store.shuffle_records("m", "f") == []
        assert store.shuffled_batch(b"u" * 16) is None


@pytest.fixture
def schema_dsn():
    """A PostgreSQL DSN with a schema of its own (dropped afterwards), or a skip."""
    dsn = os.environ.get("LDPT_TEST_POSTGRES_DSN")
    if not dsn:
        pytest.skip("LDPT_TEST_POSTGRES_DSN is not set; the PostgreSQL store test is skipped")
    asyncpg = pytest.importorskip("asyncpg", reason="the 'postgres' extra (asyncpg) is not installed")
    schema = f"ldpt_test_{uuid.uuid4().hex[:12]}"
    yield f"{dsn}{'&' if '?' in dsn else '?'}search_path={schema}"

    async def drop():
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()
    asyncio.run(drop())


@pytest.mark.postgres
def test_postgres_store_commits_forwarded_batches_once(schema_dsn):
    key = SketchKey("m", "f", "2026-01-01")
    other = SketchKey("m", "f", "2026-01-02")

    def unit(uid, ids, window_key=key):
        members = [PendingBatch(i, b"x", {}) for i in ids]
        views = [EnvelopeView((("m", "f", 1),), (), {window_key: (1, ())}, 1.5, 1) for _ in ids]
        return ShuffledBatch(uid, b"digest" + uid, len(ids), members, views)

    async def scenario():
        from collector.storage.postgres import PostgresStore

        store = await PostgresStore.open(schema_dsn)
        try:
            a = unit(b"a" * 16, [b"1" * 16, b"2" * 16])
            b = unit(b"b" * 16, [b"2" * 16, b"3" * 16, b"4" * 16])
            out = await store.acommit([a, b, a, PendingBatch(b"5" * 16, b"x", {})])
            assert out[0] == ShuffledOutcome(BatchOutcome.APPLIED, (BatchOutcome.APPLIED,) * 2)
            assert out[1] == ShuffledOutcome(BatchOutcome.APPLIED, (BatchOutcome.DUPLICATE,
                                                                     BatchOutcome.APPLIED, BatchOutcome.APPLIED))
            assert out[2] == ShuffledOutcome(BatchOutcome.DUPLICATE) and out[3] is BatchOutcome.APPLIED
            conflicting = ShuffledBatch(b"a" * 16, b"other", 1, [], [])
            assert await store.acommit([conflicting]) == [ShuffledOutcome(BatchOutcome.CONFLICT)]
            await store.acommit([unit(b"c" * 16, [b"6" * 16], other)])
            recs = await store.ashuffle_records("m", "f")
            assert [(r.window, r.reports, r.envelopes, r.batches, r.smallest_batch, r.largest_batch)
                    for r in recs] == [("2026-01-01", 4, 4, 2, 2, 2), ("2026-01-02", 1, 1, 1, 1, 1)]
            assert recs[0].envelope_epsilon >= 1.5
            assert await store.ashuffled_batch(b"a" * 16) == b"digest" + b"a" * 16
            assert [r.window for r in await store.ashuffle_records("m", "f", since="2026-01-02")] == ["2026-01-02"]
            await store.aprune("2026-01-02", "2100-01-01")
            assert [r.window for r in await store.ashuffle_records("m", "f")] == ["2026-01-02"]
            assert await store.ashuffled_batch(b"a" * 16) is None
        finally:
            await store.aclose()

    asyncio.run(scenario())


def test_forwarded_digest_ignores_order():
    e = [os.urandom(20) for _ in range(5)]
    assert forwarded_digest(e) == forwarded_digest(list(reversed(e))) != forwarded_digest(e[:4])


def test_sqlite_has_upsert():
    assert sqlite3.sqlite_version_info >= (3, 24)   # INSERT ... ON CONFLICT DO UPDATE


@pytest.mark.e2e
def test_the_sdk_drops_a_metric_refused_for_want_of_a_shuffler_and_sends_the_rest(tmp_path, caplog):
    """Plain SDK → real `ldpt serve` whose registry requires shuffling for theme: theme's reports
    are refused (403 shuffle-required), logged once, refused from then on; app's go through."""
    import logging

    from client_sdk import RetryPolicy, TelemetryClient

    from .sdk_support import Collector

    metrics = tmp_path / "metrics.toml"
    metrics.write_text(REGISTRY, encoding="utf-8")
    registry = load_registry(metrics)
    col = Collector(metrics, tmp_path / "store.sqlite").start()
    try:
        client = TelemetryClient(col.url, registry, tmp_path / "device", retry=RetryPolicy(initial=0.05, maximum=0.2),
                                 max_batch_age=0.05, batch_size=10)
        with caplog.at_level(logging.ERROR, logger="client_sdk"):
            client.report("theme", "dark")
            client.report("app", "c")
            client.flush(10)
        assert client.report("theme", "light") is False
        stats = client.stats()
        assert stats["reports_acked"] == 1 and stats["reports_rejected"] == 1 and stats["stale_metric"] == 1
        assert client.close(5)
    finally:
        col.stop()
    lines = [r.getMessage() for r in caplog.records if "shuffler" in r.getMessage()]
    assert len(lines) == 1 and "'theme'" in lines[0] and "Seal.shuffler(url)" in lines[0]
    assert stored(tmp_path / "store.sqlite", registry.get("app"))[0].total_reports == 1
    assert stored(tmp_path / "store.sqlite", registry.get("theme"))[0].total_reports == 0
