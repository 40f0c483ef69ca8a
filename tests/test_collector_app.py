"""The collector's HTTP API on an in-process aiohttp server bound to 127.0.0.1 (ephemeral port)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
from pathlib import Path

import msgpack
import numpy as np
import pytest
from aiohttp.test_utils import TestClient

from cli.output import frame_to_csv, frame_to_json
from client_sdk.errors import StoreError
from client_sdk.registry import load_registry
from collector.app import ROUTES, STATE, create_app
from collector.committer import GroupCommitter
from collector.config import SETTINGS, make_config
from collector.problems import PROBLEM_TYPES
from collector.storage.aio import ThreadedStore
from collector.storage.base import SCHEMA_VERSION, BatchOutcome, SketchKey
from collector.storage.sqlite import SQLiteStore
from collector.telemetry import Telemetry
from estimators.frequency import estimate_frame
from estimators.series import window_span
from sketches import server_half

from .collector_support import (
    TOKEN,
    CollectorTestServer,
    expected_sketch,
    make_body,
    wire_reports,
    write_registry,
    write_token,
)

ROOT = Path(__file__).resolve().parent.parent
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MSGPACK = {"Content-Type": "application/msgpack"}


@pytest.fixture
def setup(tmp_path):
    registry_path = tmp_path / "metrics.toml"
    registry = write_registry(registry_path)
    token = write_token(tmp_path / "token")
    return registry_path, registry, token, tmp_path / "collector.sqlite"


@contextlib.asynccontextmanager
async def running(setup, store_factory=None, **config):
    registry_path, registry, token, db = setup
    config.setdefault("query_token_file", token)
    cfg = make_config(registry_path, environ={}, db=db, **config)
    app = create_app(cfg, load_registry(registry_path), store_factory=store_factory)
    async with TestClient(CollectorTestServer(app, host="127.0.0.1")) as client:
        yield client, app


def bodies_for(registry, n, seed=0, size=50):
    rng = np.random.default_rng(seed)
    theme, page = registry.get("theme"), registry.get("page")
    return [make_body(wire_reports(theme, rng.integers(0, 3, size), rng)
                      + wire_reports(page, rng.integers(0, 20, size // 2), rng)) for _ in range(n)]


def stored(db: Path, spec):
    store = SQLiteStore(db, create=False)
    try:
        sketch = store.load(spec.name, spec.fingerprint, server_half(spec).new_sketch())
        batches = store._conn.execute("SELECT count(*) FROM batches").fetchone()[0]
        return sketch, batches
    finally:
        store.close()


def assert_problem(resp_status, headers, body, status, slug):
    assert resp_status == status
    assert headers["Content-Type"].startswith("application/problem+json")
    doc = json.loads(body)
    assert doc["type"] == f"https://ldp-telemetry.dev/problems/{slug}"
    assert doc["status"] == status and doc["title"] == PROBLEM_TYPES[slug][1] and doc["detail"]
    return doc


async def post(client, body, headers=MSGPACK):
    resp = await client.post("/v1/reports", data=body, headers=headers)
    return resp.status, resp.headers, await resp.read()


def test_ingest_ack_duplicate_conflict_and_exact_store(setup):
    registry = setup[1]
    bodies = bodies_for(registry, 3)

    async def scenario():
        async with running(setup) as (client, _):
            for body in bodies:
                status, _, data = await post(client, body)
                assert status == 200 and json.loads(data) == {"accepted": 75, "duplicate": False}
            status, _, data = await post(client, bodies[0])
            assert status == 200 and json.loads(data) == {"accepted": 75, "duplicate": True}
            doc = msgpack.unpackb(bodies[1])
            other = make_body(doc["reports"][:10], doc["batch_id"])  # same id, other body
            doc = assert_problem(*await post(client, other), 422, "batch-id-conflict")
            assert doc["field"] == "batch_id"
    asyncio.run(scenario())
    for name in ("theme", "page"):
        spec = registry.get(name)
        sketch, batches = stored(setup[3], spec)
        want = expected_sketch(spec, bodies)
        np.testing.assert_array_equal(sketch.counts, want.counts)
        np.testing.assert_array_equal(sketch.reports, want.reports)
        assert batches == 3


def test_bad_requests_get_problems_and_never_reach_the_store(setup):
    registry = setup[1]
    good = bodies_for(registry, 1)[0]

    async def scenario():
        async with running(setup, max_body_bytes=2000) as (client, app):
            assert_problem(*await post(client, good, {"Content-Type": "application/json"}), 415,
                           "unsupported-media-type")
            assert_problem(*await post(client, good), 413, "body-too-large")
            assert_problem(*await post(client, b"\x93\x01"), 400, "undecodable-body")
            rng = np.random.default_rng(1)
            reports = wire_reports(registry.get("theme"), [0, 1, 2], rng)
            reports[1]["p"] = 7
            doc = assert_problem(*await post(client, make_body(reports)), 422, "invalid-report")
            assert (doc["report_index"], doc["metric"], doc["field"]) == (1, "theme", "y")
            resp = await client.get("/no/such/route")
            assert_problem(resp.status, resp.headers, await resp.read(), 404, "not-found")
            resp = await client.get("/v1/reports")
            assert_problem(resp.status, resp.headers, await resp.read(), 405, "method-not-allowed")
            tel = app[STATE].telemetry
            assert tel.value("ldpt_requests_rejected_total", "invalid-report") == 1
            assert tel.value("ldpt_reports_rejected_total", "invalid-report") == 3
            assert tel.value("ldpt_commits_total") == 0
    asyncio.run(scenario())
    sketch, batches = stored(setup[3], registry.get("theme"))
    assert sketch.total_reports == 0 and batches == 0


def test_chunked_body_over_the_limit_is_413(setup):
    async def scenario():
        async with running(setup, max_body_bytes=1000) as (client, _):
            async def chunks():
                for _ in range(10):
                    yield b"\x00" * 200
            resp = await client.post("/v1/reports", data=chunks(), headers=MSGPACK)
            assert_problem(resp.status, resp.headers, await resp.read(), 413, "body-too-large")
    asyncio.run(scenario())


def test_concurrent_requests_share_transactions(setup):
    registry = setup[1]
    bodies = bodies_for(registry, 120, seed=5, size=10)

    async def scenario():
        async with running(setup) as (client, app):
            results = await asyncio.gather(*(post(client, b) for b in bodies))
            assert all(r[0] == 200 for r in results)
            tel = app[STATE].telemetry
            assert tel.value("ldpt_batches_total", "applied") == 120
            assert tel.value("ldpt_commit_batches_total") == 120
            assert tel.value("ldpt_commits_total") < 120  # group commit happened
            assert tel.value("ldpt_reports_accepted_total", "theme") == 1200
    asyncio.run(scenario())
    spec = registry.get("page")
    np.testing.assert_array_equal(stored(setup[3], spec)[0].counts, expected_sketch(spec, bodies).counts)


class SlowStore(ThreadedStore):
    """Commits take ``delay`` seconds: lets a test fill the queue."""

    delay = 0.3

    async def acommit(self, batches):
        await asyncio.sleep(self.delay)
        return await super().acommit(batches)


class BrokenStore(ThreadedStore):
    async def acommit(self, batches):
        raise StoreError("disk on fire")


def test_overload_answers_503_with_retry_after_and_retries_count_once(setup):
    registry = setup[1]
    bodies = bodies_for(registry, 12, seed=6, size=10)

    async def factory():
        return SlowStore(setup[3])

    async def scenario():
        async with running(setup, store_factory=factory, queue_max_batches=2) as (client, app):
            results = await asyncio.gather(*(post(client, b) for b in bodies))
            refused = [i for i, r in enumerate(results) if r[0] == 503]
            assert refused and any(r[0] == 200 for r in results)
            for i in refused:
                doc = assert_problem(*results[i], 503, "overloaded")
                assert int(results[i][1]["Retry-After"]) >= 1 and doc["retry_after"] >= 1
            for i in refused:  # a client retries the same bytes after Retry-After
                assert (await post(client, bodies[i]))[0] == 200
            assert app[STATE].telemetry.value("ldpt_requests_rejected_total", "overloaded") == len(refused)
    asyncio.run(scenario())
    spec = registry.get("theme")
    sketch, batches = stored(setup[3], spec)
    np.testing.assert_array_equal(sketch.counts, expected_sketch(spec, bodies).counts)
    assert batches == 12


def test_store_failure_is_503_and_applies_nothing(setup):
    async def factory():
        return BrokenStore(setup[3])

    async def scenario():
        async with running(setup, store_factory=factory) as (client, app):
            doc = assert_problem(*await post(client, bodies_for(setup[1], 1)[0]), 503, "store-unavailable")
            assert "disk on fire" in doc["detail"] and doc["retry_after"] >= 1
            assert app[STATE].telemetry.value("ldpt_commit_failures_total") == 1
    asyncio.run(scenario())
    assert stored(setup[3], setup[1].get("theme"))[1] == 0


def test_committer_close_commits_everything_queued(setup):
    registry = setup[1]
    bodies = bodies_for(registry, 6, seed=7, size=5)
    from collector.ingest import BatchDecoder

    async def scenario():
        store = SlowStore(setup[3])
        committer = GroupCommitter(store, Telemetry.create(["theme", "page"]), group_max_batches=2)
        committer.start()
        decoder = BatchDecoder(registry)
        tasks = [asyncio.create_task(committer.submit(decoder.decode(b, "2024-01-01"))) for b in bodies]
        await asyncio.sleep(0.05)
        await committer.close()  # graceful: drain, then stop
        assert await asyncio.gather(*tasks) == [BatchOutcome.APPLIED] * 6
        await store.aclose()
    asyncio.run(scenario())
    assert stored(setup[3], registry.get("theme"))[1] == 6


def test_registry_health_ready_and_metrics(setup):
    registry = setup[1]

    async def scenario():
        async with running(setup) as (client, _):
            resp = await client.get("/v1/registry")
            assert resp.status == 200
            assert await resp.json() == json.loads(json.dumps(registry.to_json()))
            etag = resp.headers["ETag"]
            resp = await client.get("/v1/registry", headers={"If-None-Match": etag})
            assert resp.status == 304
            resp = await client.get("/healthz")
            assert resp.status == 200 and (await resp.json())["status"] == "ok"
            resp = await client.get("/readyz")
            assert resp.status == 200 and (await resp.json())["schema_version"] == SCHEMA_VERSION == 4
            await post(client, bodies_for(registry, 1)[0])
            resp = await client.get("/metrics")
            text = await resp.text()
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert 'ldpt_reports_accepted_total{metric="theme"} 50' in text
            assert 'ldpt_batches_total{outcome="applied"} 1' in text
            assert re.search(r'ldpt_commit_seconds_bucket\{le="\+Inf"\} 1\n', text)
            assert "ldpt_queue_batches 0" in text and "ldpt_workers_up 1" in text
    asyncio.run(scenario())


def test_readyz_fails_when_the_store_is_broken(setup):
    async def scenario():
        async with running(setup) as (client, app):
            store = app[STATE].store
            await store.aclose()
            app[STATE].store = ThreadedStore(setup[3])
            store = app[STATE].store
            store.sync_store._conn.execute("UPDATE ldpt_meta SET value='9' WHERE key='schema_version'")
            resp = await client.get("/readyz")
            assert_problem(resp.status, resp.headers, await resp.read(), 503, "store-unavailable")
    asyncio.run(scenario())


def test_query_api_auth_refusals_and_exact_estimates(setup):
    registry = setup[1]
    bodies = bodies_for(registry, 4, seed=8, size=40)
    spec = registry.get("page")
    path = "/v1/metrics/page/estimates"

    async def get(client, url, headers=AUTH):
        resp = await client.get(url, headers=headers)
        return resp.status, resp.headers, await resp.read()

    async def scenario():
        async with running(setup, min_reports=50) as (client, _):
            doc = assert_problem(*await get(client, path, {}), 401, "unauthorized")
            assert doc["detail"]
            status, headers, _ = await get(client, path, {"Authorization": "Bearer wrong-token-000000000"})
            assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
            assert_problem(*await get(client, path), 404, "no-data")
            await post(client, bodies[0])  # 20 page reports < min_reports
            doc = assert_problem(*await get(client, path), 403, "too-few-reports")
            assert doc["reports"] == 20 and doc["min_reports"] == 50
            for body in bodies[1:]:
                await post(client, body)
            status, headers, data = await get(client, path)
            day = (await client.app[STATE].store.awindows("page"))[0].window
            want = window_span(estimate_frame(spec, expected_sketch(spec, bodies)), [day])  # the window summed
            assert status == 200 and data.decode() == frame_to_json(want)
            status, headers, data = await get(client, path + "?format=csv")
            assert headers["Content-Type"].startswith("text/csv") and data.decode() == frame_to_csv(want)
            status, _, data = await get(client, path + "?confidence=0.9&simultaneous=true&consistent=1")
            want = window_span(estimate_frame(spec, expected_sketch(spec, bodies), confidence=0.9,
                                              simultaneous=True, consistent=True), [day])
            assert data.decode() == frame_to_json(want)
            resp = await client.post(path, json={"confidence": 0.9, "simultaneous": True,
                                                 "consistent": True}, headers=AUTH)
            assert (await resp.read()).decode() == frame_to_json(want)
            today = (await client.app[STATE].store.awindows("page"))[0].window
            status, _, data = await get(client, f"{path}?window={today}")
            assert json.loads(data)["meta"]["n_reports"] == 80
            assert_problem(*await get(client, f"{path}?window=2001-01-01"), 404, "no-data")
            assert_problem(*await get(client, f"{path}?window=yesterday"), 400, "invalid-query")
            assert_problem(*await get(client, f"{path}?confidence=2"), 400, "invalid-query")
            assert_problem(*await get(client, f"{path}?bogus=1"), 400, "invalid-query")
            assert_problem(*await get(client, f"{path}?candidates=a"), 400, "invalid-query")
            assert_problem(*await get(client, "/v1/metrics/nope/estimates"), 404, "unknown-metric")
    asyncio.run(scenario())


def test_query_api_disabled_without_token_file(setup):
    async def scenario():
        async with running(setup, query_token_file=None) as (client, _):
            resp = await client.get("/v1/metrics/page/estimates", headers=AUTH)
            assert_problem(resp.status, resp.headers, await resp.read(), 403, "query-disabled")
    registry_path, registry, _, db = setup
    asyncio.run(scenario())


def test_telemetry_sums_worker_rows():
    tel = Telemetry.create(["a"], workers=2)
    w1 = tel.for_worker(1)
    tel.set_up(True)
    w1.set_up(True)
    tel.rejected("invalid-report", 5)
    w1.rejected("invalid-report", 7)
    w1.set_queue(3, 30)
    text = tel.render()
    assert "ldpt_workers_up 2" in text
    assert 'ldpt_reports_rejected_total{reason="invalid-report"} 12' in text
    assert "ldpt_queue_reports 30" in text


# --- docs that cannot drift -------------------------------------------------------------------------
def openapi_operations(text: str) -> set[tuple[str, str]]:
    """(METHOD, path) of every operation under `paths:` (block-style YAML, 2-space indents)."""
    ops, path, in_paths = set(), None, False
    for line in text.splitlines():
        if re.match(r"^\S", line):
            in_paths = line.startswith("paths:")
            continue
        if not in_paths:
            continue
        m = re.match(r"^  (/\S*):\s*$", line)
        if m:
            path = m.group(1)
            continue
        m = re.match(r"^    (get|post|put|delete|patch|head|options):\s*$", line)
        if m and path:
            ops.add((m.group(1).upper(), path))
    return ops


def test_openapi_describes_exactly_the_routes(setup):
    text = (ROOT / "docs" / "openapi.yaml").read_text(encoding="utf-8")
    documented = openapi_operations(text)
    cfg = make_config(setup[0], environ={}, db=setup[3])
    app = create_app(cfg, setup[1])
    served = {(r.method, r.resource.canonical) for r in app.router.routes() if r.method != "HEAD"}
    assert served == set(ROUTES)
    assert documented == served
    for slug in PROBLEM_TYPES:  # every problem type is documented
        assert f"problems/{slug}" in text or f"- {slug}" in text, slug


def test_every_setting_is_documented_and_env_overrides_work(tmp_path):
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    for s in SETTINGS:
        assert f"LDPT_{s.name.upper()}" in text, s.name
    cfg = make_config(tmp_path / "m.toml", environ={"LDPT_QUEUE_MAX_BATCHES": "7"}, workers=2)
    assert cfg.queue_max_batches == 7 and cfg.workers == 2
    cfg = make_config(tmp_path / "m.toml", environ={"LDPT_QUEUE_MAX_BATCHES": "7"}, queue_max_batches=9)
    assert cfg.queue_max_batches == 9
    assert os.environ.get("LDPT_QUEUE_MAX_BATCHES") is None


def test_string_metric_query_with_candidates_in_a_post_body(tmp_path):
    registry_path = tmp_path / "strings.toml"
    registry_path.write_text('[metrics.home]\nkind = "string"\nprotocol = "rappor"\nbloom_bits = 32\n'
                             'hashes = 2\ncohorts = 4\n', encoding="utf-8")
    registry = load_registry(registry_path)
    spec = registry.get("home")
    proto = server_half(spec)
    rng = np.random.default_rng(9)
    truth = np.asarray(["a.com"] * 600 + ["b.org"] * 300 + ["c.net"] * 100, dtype=object)
    wire = proto.to_wire(proto.encode(truth, rng))
    bodies = [make_body([{"m": "home", "f": spec.fingerprint, "p": w} for w in wire[i:i + 250]])
              for i in range(0, len(wire), 250)]
    candidates = ["a.com", "b.org", "c.net", "nobody.example"]
    setup = (registry_path, registry, write_token(tmp_path / "token"), tmp_path / "c.sqlite")

    async def scenario():
        async with running(setup) as (client, _):
            for body in bodies:
                assert (await post(client, body))[0] == 200
            resp = await client.post("/v1/metrics/home/estimates", json={"candidates": candidates},
                                     headers=AUTH)
            text = await resp.text()
            assert resp.status == 200, text
            day = (await client.app[STATE].store.awindows("home"))[0].window
            want = window_span(estimate_frame(spec, expected_sketch(spec, bodies), candidates=candidates), [day])
            assert text == frame_to_json(want)
            query = "&".join(f"candidates={c}" for c in candidates)
            resp = await client.get(f"/v1/metrics/home/estimates?{query}", headers=AUTH)
            assert await resp.text() == frame_to_json(want)
            resp = await client.get("/v1/metrics/home/estimates", headers=AUTH)
            assert_problem(resp.status, resp.headers, await resp.read(), 422, "estimation-error")
    asyncio.run(scenario())


def test_the_load_generator_retries_through_overload_and_counts_once(setup):
    from cli.remote import send_batches

    registry = setup[1]
    bodies = bodies_for(registry, 30, seed=10, size=10)

    class QuickerStore(SlowStore):
        delay = 0.1

    async def factory():
        return QuickerStore(setup[3])

    async def scenario():
        async with running(setup, store_factory=factory, queue_max_batches=2) as (client, _):
            seen = []
            stats = await send_batches(str(client.make_url("/")), [(75, b) for b in bodies],
                                       concurrency=8, on_ack=lambda body, doc: seen.append(body))
            assert stats.batches == 30 and stats.reports == 30 * 75 and stats.retries > 0
            assert sorted(seen) == sorted(bodies)
    asyncio.run(scenario())
    spec = registry.get("page")
    sketch, batches = stored(setup[3], spec)
    np.testing.assert_array_equal(sketch.counts, expected_sketch(spec, bodies).counts)
    assert batches == 30


def test_the_load_generator_stops_on_a_4xx_with_the_collectors_detail(setup):
    from cli.remote import RemoteError, send_batches

    async def scenario():
        async with running(setup) as (client, _):
            with pytest.raises(RemoteError, match="unknown-metric"):
                await send_batches(str(client.make_url("/")),
                                   [(1, make_body([{"m": "nope", "f": "0" * 32, "p": 0}]))])
    asyncio.run(scenario())


def test_request_bodies_in_flight_are_bounded(setup):
    async def scenario():
        async with running(setup, max_inflight_bytes=4096) as (client, app):
            app[STATE].inflight.held = 4000  # as if other bodies were being read right now
            doc = assert_problem(*await post(client, bodies_for(setup[1], 1)[0]), 503, "overloaded")
            assert doc["retry_after"] >= 1
            app[STATE].inflight.held = 0
            assert (await post(client, bodies_for(setup[1], 1)[0]))[0] == 200
    asyncio.run(scenario())


def test_hourly_windows(setup):
    async def scenario():
        async with running(setup, window="hour") as (client, app):
            assert (await post(client, bodies_for(setup[1], 1)[0]))[0] == 200
            windows = await app[STATE].store.awindows("theme")
            assert len(windows) == 1 and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d", windows[0].window)
            resp = await client.get(f"/v1/metrics/theme/estimates?window={windows[0].window}", headers=AUTH)
            assert resp.status == 200 and (await resp.json())["meta"]["n_reports"] == 50
    asyncio.run(scenario())


# --- review fixes: odd-but-plausible input ----------------------------------------------------------
def test_odd_query_input_is_a_problem_never_a_500(setup):
    path = "/v1/metrics/page/estimates"

    async def scenario():
        async with running(setup) as (client, _):
            resp = await client.post(path, json={"format": []}, headers=AUTH)
            doc = assert_problem(resp.status, resp.headers, await resp.read(), 400, "invalid-query")
            assert doc["field"] == "format"
            resp = await client.post(path, data=b"[" * 100_000, headers=AUTH)  # too deep for json
            assert_problem(resp.status, resp.headers, await resp.read(), 400, "invalid-query")
            # a token that is not UTF-8 (aiohttp keeps the raw bytes as surrogates)
            raw = await raw_request(client, b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                                    b"Authorization: Bearer \xff\xfe" + b"a" * 20 + b"\r\n"
                                    b"Connection: close\r\n\r\n")
            assert raw.startswith(b"HTTP/1.1 401"), raw[:200]
            resp = await client.delete("/v1/reports")
            assert_problem(resp.status, resp.headers, await resp.read(), 405, "method-not-allowed")
            # RFC 9110: a 405 names the allowed methods (OPTIONS: the browser SDK's CORS preflight)
            assert set(resp.headers["Allow"].split(",")) == {"POST", "OPTIONS"}
    asyncio.run(scenario())


def test_a_repeated_query_parameter_is_refused_not_half_read(setup):
    """``?since=A&since=B`` is ambiguous (proxies and frameworks disagree on which one wins):
    refused with 400 naming the field, on the query API and the dashboard's charts alike."""
    async def scenario():
        async with running(setup) as (client, _):
            for url, field in [
                ("/v1/metrics/page/estimates?since=2026-03-02&since=2026-03-01", "since"),
                ("/v1/metrics/page/estimates?by=window&by=window", "by"),
                ("/v1/metrics/page/compare?a=2026-03-01&b=2026-03-02&a=2026-03-03", "a"),
                ("/ui/charts/page/series.svg?until=2026-03-02&until=2026-03-01", "until"),
                ("/ui/charts/page/compare.svg?a=2026-03-01&b=2026-03-02&b=2026-03-03", "b"),
            ]:
                resp = await client.get(url, headers=AUTH)
                doc = assert_problem(resp.status, resp.headers, await resp.read(), 400, "invalid-query")
                assert doc["field"] == field and "more than once" in doc["detail"], (url, doc)
    asyncio.run(scenario())


def test_problem_titles_fit_the_query_routes_too(setup):
    """Shared slugs have titles that are true on every route: an unknown metric in a query is
    not "a report", a deflate-encoded query body is not "a msgpack document"."""
    async def scenario():
        async with running(setup) as (client, _):
            resp = await client.get("/v1/metrics/nope/estimates", headers=AUTH)
            doc = assert_problem(resp.status, resp.headers, await resp.read(), 404, "unknown-metric")
            assert "report" not in doc["title"]
            raw = await raw_request(client, b"POST /v1/metrics/page/estimates HTTP/1.1\r\nHost: x\r\n"
                                    b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                                    b"Content-Encoding: deflate\r\nContent-Length: 3\r\n"
                                    b"Connection: close\r\n\r\nabc")
            assert raw.split(b"\r\n")[0].endswith(b" 400 Bad Request") and b"undecodable-body" in raw, raw[:300]
            assert b"msgpack document" not in raw
    asyncio.run(scenario())


async def raw_request(client, data: bytes) -> bytes:
    """Send raw bytes to the test server; everything it answers until it closes."""
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(data)
    await writer.drain()
    out = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return out


def test_malformed_http_is_logged_without_the_client_address(setup, caplog):
    caplog.set_level(logging.DEBUG, logger="aiohttp")

    async def scenario():
        async with running(setup) as (client, _):
            raw = await raw_request(client, b"POST /v1/reports HTTP/1.1\r\nHost: x\r\n"
                                    b"Content-Length: abc\r\n\r\n")
            assert raw.startswith(b"HTTP/1.0 400") or raw.startswith(b"HTTP/1.1 400"), raw[:200]
    asyncio.run(scenario())
    # (the test server's access log is on; `ldpt serve` runs without one unless --access-log)
    records = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert any("bad HTTP request" in r.getMessage() for r in records), caplog.text
    assert not any("127.0.0.1" in r.getMessage() for r in records)
    assert all(r.exc_info is None for r in records)  # one line, not a traceback per bad client


def test_dates_are_zero_padded_before_they_are_compared(setup):
    """2026-9-1 parses as a date; compared unpadded with stored '2026-11-30' it selected nothing."""
    spec = setup[1].get("theme")
    store = SQLiteStore(setup[3], create=True)
    sketch = server_half(spec).new_sketch()
    sketch.reports[0] = 10
    store.add_sketch(SketchKey("theme", spec.fingerprint, "2026-11-30"), sketch)
    store.close()
    path = "/v1/metrics/theme/estimates"

    async def scenario():
        async with running(setup) as (client, _):
            for query in ("since=2026-9-1", "since=2026-9-1&until=2026-11-30", "window=2026-11-30",
                          "until=2026-12-1"):
                resp = await client.get(f"{path}?{query}", headers=AUTH)
                assert resp.status == 200, (query, await resp.text())
                assert (await resp.json())["meta"]["n_reports"] == 10
            resp = await client.get(f"{path}?until=2026-9-1", headers=AUTH)
            assert_problem(resp.status, resp.headers, await resp.read(), 404, "no-data")
    asyncio.run(scenario())


def test_no_data_says_when_the_reports_are_under_other_parameters(setup):
    spec = setup[1].get("theme")
    store = SQLiteStore(setup[3], create=True)
    sketch = server_half(spec).new_sketch()
    sketch.reports[0] = 1234
    store.add_sketch(SketchKey("theme", "0" * 32, "2026-11-30"), sketch)  # an older registry
    store.close()

    async def scenario():
        async with running(setup) as (client, _):
            resp = await client.get("/v1/metrics/theme/estimates", headers=AUTH)
            doc = assert_problem(resp.status, resp.headers, await resp.read(), 404, "no-data")
            assert "1234 reports" in doc["detail"] and "other parameters" in doc["detail"]
            resp = await client.get("/v1/metrics/theme/estimates?window=2026-11-29", headers=AUTH)
            doc = assert_problem(resp.status, resp.headers, await resp.read(), 404, "no-data")
            assert "other parameters" not in doc["detail"]  # none in the window asked
    asyncio.run(scenario())


def test_long_candidate_lists_are_not_bound_by_the_ingestion_body_limit(tmp_path, monkeypatch):
    """A POST query larger than LDPT_MAX_BODY_BYTES was answered 400 'must be a JSON object'."""
    from collector import query

    registry_path = tmp_path / "strings.toml"
    registry_path.write_text('[metrics.home]\nkind = "string"\nprotocol = "rappor"\nbloom_bits = 32\n'
                             'hashes = 2\ncohorts = 4\n', encoding="utf-8")
    registry = load_registry(registry_path)
    spec = registry.get("home")
    proto = server_half(spec)
    wire = proto.to_wire(proto.encode(np.asarray(["a.com"] * 50, dtype=object), np.random.default_rng(1)))
    body = make_body([{"m": "home", "f": spec.fingerprint, "p": w} for w in wire])
    candidates = [f"candidate-{i}.example" for i in range(2000)]  # ~50 KB of JSON
    assert len(json.dumps({"candidates": candidates})) > 10 * len(body)
    setup = (registry_path, registry, write_token(tmp_path / "token"), tmp_path / "c.sqlite")

    async def scenario():
        async with running(setup, max_body_bytes=len(body) + 100) as (client, _):
            assert (await post(client, body))[0] == 200
            resp = await client.post("/v1/metrics/home/estimates", json={"candidates": candidates},
                                     headers=AUTH)
            assert resp.status == 200, await resp.text()
            assert len((await resp.json())["estimates"]) == 2000
            monkeypatch.setattr(query, "MAX_QUERY_BODY_BYTES", 5000)
            resp = await client.post("/v1/metrics/home/estimates", json={"candidates": candidates},
                                     headers=AUTH)
            doc = assert_problem(resp.status, resp.headers, await resp.read(), 413, "body-too-large")
            assert "candidates" in doc["detail"]
    asyncio.run(scenario())


def test_a_token_file_that_is_not_text_is_one_clear_error(tmp_path):
    from collector.config import ConfigError, read_tokens

    bad = tmp_path / "token"
    bad.write_bytes(b"\xff\xfe" + b"x" * 30)
    with pytest.raises(ConfigError, match="token: the query token file is not UTF-8 text"):
        read_tokens(bad)


def test_a_restarted_worker_does_not_inherit_the_dead_workers_gauges():
    tel = Telemetry.create(["a"], workers=2)
    dead = tel.for_worker(1)
    dead.set_up(True)
    dead.add_inflight(4096)  # SIGKILLed while reading a body and with batches queued
    dead.set_queue(3, 300)
    dead.rejected("invalid-report", 5)
    tel.for_worker(1).set_up(True)  # the supervisor's replacement in the same row
    text = tel.render()
    assert "ldpt_inflight_bytes 0" in text and "ldpt_queue_reports 0" in text
    assert 'ldpt_reports_rejected_total{reason="invalid-report"} 5' in text  # counters carry on


@pytest.mark.parametrize("raw", ["nan", "inf", "-1", "0"])
def test_settings_must_be_positive_and_finite(tmp_path, raw):
    """nan passed `value <= 0`; as a timer delay it would sit in the event loop's timer heap."""
    from collector.config import ConfigError

    with pytest.raises(ConfigError, match="maintain_interval must be a positive finite number"):
        make_config(tmp_path / "m.toml", environ={"LDPT_MAINTAIN_INTERVAL": raw})


def test_a_slow_body_gets_408_and_frees_its_inflight_allowance(setup):
    """A client that announces a body and never sends it cannot hold ingestion (slowloris)."""
    registry = setup[1]
    good = bodies_for(registry, 1)[0]

    async def scenario():
        async with running(setup, body_read_timeout=0.3) as (client, app):
            reader, writer = await asyncio.open_connection(client.host, client.port)
            writer.write(b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/msgpack\r\n"
                         b"Content-Length: 5000\r\n\r\n" + good[:10])
            await writer.drain()
            head = await asyncio.wait_for(reader.read(4096), 10)
            writer.close()
            assert head.startswith(b"HTTP/1.1 408"), head[:200]
            assert b"request-timeout" in head
            assert app[STATE].inflight.held == 0
            status, _, _ = await post(client, good)  # the collector still ingests
            assert status == 200
    asyncio.run(scenario())


def test_a_store_error_on_the_query_path_says_when_to_retry():
    """Every 503 carries Retry-After, including a store failure surfacing as a StoreError."""
    from collector.problems import STORE_RETRY_AFTER, Problem

    response = Problem.from_error(StoreError("the database went away")).response()
    assert response.status == 503
    assert response.headers["Retry-After"] == str(STORE_RETRY_AFTER)
    assert json.loads(response.body)["retry_after"] == STORE_RETRY_AFTER
