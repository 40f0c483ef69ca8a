"""Queries that cannot hurt ingestion (collector/query.py): large domains answered by page
(ranked by estimate; limit/offset/top; the full frame with full=true), large answers streamed
with the same bytes, and a bound on concurrent heavy queries (503 too-many-queries)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from aiohttp.test_utils import TestClient

from client_sdk.registry import parse_registry
from collector.app import create_app
from collector.config import make_config
from collector.storage.base import PendingBatch, SketchKey
from collector.storage.sqlite import SQLiteStore
from estimators.formats import frame_to_csv, frame_to_json
from estimators.frequency import estimate_frame, ranked_rows
from estimators.series import window_span
from sketches import server_half

from .collector_support import TOKEN, CollectorTestServer, write_token

D = 20_000
REGISTRY = f"""
[metrics.big]
kind = "categorical"
categories = {{ ids = {D} }}
protocol = "hr"
epsilon = 2.0

[metrics.small]
kind = "categorical"
categories = ["a", "b", "c"]
protocol = "grr"
epsilon = 1.0
"""
WINDOW = "2026-12-01"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def served(tmp_path):
    (tmp_path / "metrics.toml").write_text(REGISTRY, encoding="utf-8")
    registry = parse_registry(REGISTRY)
    rng = np.random.default_rng(5)
    with SQLiteStore(tmp_path / "s.sqlite") as store:
        for name, d, n in (("big", D, 60_000), ("small", 3, 2_000)):
            spec = registry.get(name)
            proto = server_half(spec)
            w = 1 / np.arange(1, d + 1) ** 1.1
            sketch = proto.new_sketch()
            proto.accumulate(sketch, proto.encode(rng.choice(d, n, p=w / w.sum()), rng))
            store.commit([PendingBatch(rng.bytes(16), b"d", {SketchKey(name, spec.fingerprint, WINDOW): sketch}, n)])
        sketches = {name: store.load(name, registry.get(name).fingerprint, server_half(registry.get(name)).new_sketch())
                    for name in ("big", "small")}
    return tmp_path, registry, sketches


def run(tmp_path, registry, fn, **settings):
    config = make_config(tmp_path / "metrics.toml", environ={}, db=str(tmp_path / "s.sqlite"),
                         query_token_file=str(write_token(tmp_path / "token")), **settings)

    async def go():
        app = create_app(config, registry)
        async with TestClient(CollectorTestServer(app)) as client:
            return await fn(client, app)
    return asyncio.run(go())


def test_ranked_rows_is_a_stable_sort_by_estimate():
    rng = np.random.default_rng(0)
    for _ in range(200):
        counts = np.round(rng.standard_normal(int(rng.integers(1, 400))) * 3)   # many ties
        counts[rng.integers(0, counts.size, 2)] = np.nan
        order = np.argsort(-np.where(np.isnan(counts), -np.inf, counts), kind="stable")
        for offset, limit in ((0, 1), (0, 7), (3, 5), (0, counts.size), (counts.size - 1, 10), (counts.size, 3)):
            assert ranked_rows(counts, offset, limit).tolist() == order[offset:offset + limit].tolist()


def test_a_large_domain_is_answered_by_page(served):
    tmp_path, registry, sketches = served
    spec = registry.get("big")
    full = estimate_frame(spec, sketches["big"])
    ranked = full.sort_values("estimate", ascending=False, kind="stable")

    async def fn(client, app):
        default = await client.get("/v1/metrics/big/estimates", headers=AUTH)
        doc = await default.json()
        assert default.status == 200 and len(doc["estimates"]) == 1_000
        assert doc["meta"]["rows_total"] == D and doc["meta"]["order"] == "estimate"
        assert [r["value"] for r in doc["estimates"][:50]] == ranked["value"].tolist()[:50]
        page = await (await client.get("/v1/metrics/big/estimates?limit=10&offset=30", headers=AUTH)).json()
        assert [r["value"] for r in page["estimates"]] == ranked["value"].tolist()[30:40]
        # a page's tests are the full frame's (the multiple-testing control ran over all D values)
        assert [r["detected"] for r in page["estimates"]] == ranked["detected"].tolist()[30:40]
        top = await (await client.get("/v1/metrics/big/estimates?top=5", headers=AUTH)).json()
        assert [r["value"] for r in top["estimates"]] == ranked["value"].tolist()[:5]
        small = await (await client.get("/v1/metrics/small/estimates", headers=AUTH)).json()
        assert [r["value"] for r in small["estimates"]] == ["a", "b", "c"]     # small: every row, in order
        for bad in ("limit=0", "limit=100001", "offset=-1", "limit=x", "full=true&limit=5"):
            resp = await client.get(f"/v1/metrics/big/estimates?{bad}", headers=AUTH)
            assert resp.status == 400 and (await resp.json())["type"].endswith("/invalid-query"), bad
    run(tmp_path, registry, fn)


def test_the_full_frame_is_streamed_with_the_same_bytes(served):
    tmp_path, registry, sketches = served
    full = window_span(estimate_frame(registry.get("big"), sketches["big"]), [WINDOW])  # meta says the windows summed

    async def fn(client, app):
        for fmt, expect in (("json", frame_to_json(full)), ("csv", frame_to_csv(full))):
            resp = await client.get(f"/v1/metrics/big/estimates?full=true&format={fmt}", headers=AUTH)
            assert resp.status == 200 and resp.headers.get("Transfer-Encoding") == "chunked"
            assert (await resp.read()).decode() == expect
        assert len(json.loads(frame_to_json(full))["estimates"]) == D
    run(tmp_path, registry, fn)


def test_heavy_queries_beyond_the_bound_get_503_and_light_ones_still_run(served, monkeypatch):
    tmp_path, registry, _ = served
    import collector.query as query

    started = []

    async def fn(client, app):
        gate_open = asyncio.Event()
        real = query._off_loop

        async def slow(fn_, metric):
            if metric == "big":
                started.append(metric)
                await gate_open.wait()
            return await real(fn_, metric)
        monkeypatch.setattr(query, "_off_loop", slow)
        first = asyncio.create_task(client.get("/v1/metrics/big/estimates", headers=AUTH))
        while not started:
            await asyncio.sleep(0.01)
        second = await client.get("/v1/metrics/big/estimates?limit=3", headers=AUTH)
        problem = await second.json()
        assert second.status == 503 and problem["type"].endswith("/too-many-queries")
        assert float(second.headers["Retry-After"]) > 0
        light = await client.get("/v1/metrics/small/estimates", headers=AUTH)
        assert light.status == 200
        gate_open.set()
        assert (await first).status == 200
        again = await client.get("/v1/metrics/big/estimates?limit=3", headers=AUTH)
        assert again.status == 200   # the slot was given back
    run(tmp_path, registry, fn, max_heavy_queries=1)


@pytest.mark.parametrize("simultaneous", [False, True])
def test_a_page_is_exactly_the_full_frames_rows(served, simultaneous):
    """Intervals computed for the page's rows only are those of the full frame (the
    simultaneous level is split over all d values either way)."""
    import pandas as pd

    _, registry, sketches = served
    for name in ("big", "small"):
        spec = registry.get(name)
        full = estimate_frame(spec, sketches[name], simultaneous=simultaneous)
        ranked = full.sort_values("estimate", ascending=False, kind="stable").reset_index(drop=True)
        for offset, limit in ((0, 1), (5, 50), (0, 10**6)):
            page = estimate_frame(spec, sketches[name], simultaneous=simultaneous, rows_wanted=(offset, limit))
            want = ranked.iloc[offset:offset + limit].reset_index(drop=True)
            pd.testing.assert_frame_equal(page, want, check_exact=True, check_dtype=len(want) > 0)
            assert page.attrs["rows_total"] == len(full) and page.attrs["z"] == full.attrs["z"]
