"""CORS for the browser SDK (collector/cors.py): allowed origins may preflight and POST reports
and GET the registry; other origins are refused; the query API never answers CORS."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from collector.config import make_config
from collector.cors import parse_origins

from .collector_support import write_registry, write_token
from .test_collector_app import AUTH, MSGPACK, assert_problem, bodies_for, running

PAGE = "http://127.0.0.1:5173"
OTHER = "https://evil.example"


@pytest.fixture
def setup(tmp_path):
    """Registry, token and store paths, as tests/test_collector_app.py's fixture."""
    registry_path = tmp_path / "metrics.toml"
    return (registry_path, write_registry(registry_path), write_token(tmp_path / "token"),
            tmp_path / "collector.sqlite")


def preflight_headers(origin: str, method: str = "POST") -> dict[str, str]:
    return {"Origin": origin, "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "content-type"}


def test_allowed_origin_preflights_posts_and_reads_the_ack(setup):
    body = bodies_for(setup[1], 1)[0]

    async def scenario():
        async with running(setup, cors_origins=f"{PAGE}, https://b.example") as (client, _):
            resp = await client.options("/v1/reports", headers=preflight_headers(PAGE))
            assert resp.status == 204
            assert resp.headers["Access-Control-Allow-Origin"] == PAGE
            assert resp.headers["Access-Control-Allow-Methods"] == "POST"
            assert "content-type" in resp.headers["Access-Control-Allow-Headers"].lower()
            assert "Origin" in resp.headers.getall("Vary")
            resp = await client.post("/v1/reports", data=body, headers={**MSGPACK, "Origin": PAGE})
            assert resp.status == 200 and (await resp.json())["accepted"] == 75
            assert resp.headers["Access-Control-Allow-Origin"] == PAGE
            assert "Retry-After" in resp.headers["Access-Control-Expose-Headers"]
            # a rejection is readable too: the SDK settles a batch only on the collector's problem
            resp = await client.post("/v1/reports", data=b"\xc1", headers={**MSGPACK, "Origin": PAGE})
            assert resp.status == 400 and resp.headers["Access-Control-Allow-Origin"] == PAGE
            resp = await client.options("/v1/registry", headers=preflight_headers(PAGE, "GET"))
            assert resp.status == 204 and resp.headers["Access-Control-Allow-Methods"] == "GET"
            resp = await client.get("/v1/registry", headers={"Origin": PAGE})
            assert resp.status == 200 and resp.headers["Access-Control-Allow-Origin"] == PAGE
            assert "ETag" in resp.headers["Access-Control-Expose-Headers"]
    asyncio.run(scenario())


def test_other_origins_and_the_query_api_get_no_cors(setup):
    async def scenario():
        async with running(setup, cors_origins=PAGE) as (client, _):
            resp = await client.options("/v1/reports", headers=preflight_headers(OTHER))
            assert_problem(resp.status, resp.headers, await resp.read(), 403, "origin-not-allowed")
            assert "Access-Control-Allow-Origin" not in resp.headers
            resp = await client.get("/v1/registry", headers={"Origin": OTHER})
            assert resp.status == 200 and "Access-Control-Allow-Origin" not in resp.headers
            resp = await client.options("/v1/reports", headers=preflight_headers(PAGE, "DELETE"))
            assert_problem(resp.status, resp.headers, await resp.read(), 405, "method-not-allowed")
            # the query API: no preflight route, and no CORS header even for an allowed origin
            resp = await client.options("/v1/metrics/theme/estimates", headers=preflight_headers(PAGE, "GET"))
            assert resp.status == 405 and "Access-Control-Allow-Origin" not in resp.headers
            resp = await client.get("/v1/metrics/theme/estimates", headers={**AUTH, "Origin": PAGE})
            assert "Access-Control-Allow-Origin" not in resp.headers
            for path in ("/ui/", "/healthz", "/metrics"):
                resp = await client.get(path, headers={"Origin": PAGE})
                assert "Access-Control-Allow-Origin" not in resp.headers, path
    asyncio.run(scenario())


def test_no_origins_by_default_and_wildcard(setup):
    assert make_config(setup[0], environ={}).cors_origins == ""
    assert parse_origins("") == frozenset()
    assert parse_origins(" https://a.example/ ,http://b:8000") == {"https://a.example", "http://b:8000"}
    env = {"LDPT_CORS_ORIGINS": "*"}
    assert make_config(setup[0], environ=env).cors_origins == "*"

    async def scenario():
        async with running(setup) as (client, _):
            resp = await client.options("/v1/reports", headers=preflight_headers(PAGE))
            assert resp.status == 403
        async with running(setup, cors_origins="*") as (client, _):
            resp = await client.options("/v1/reports", headers=preflight_headers(OTHER))
            assert resp.status == 204 and resp.headers["Access-Control-Allow-Origin"] == OTHER
            resp = await client.post("/v1/reports", data=np.zeros(0, np.uint8).tobytes(),
                                     headers={**MSGPACK, "Origin": OTHER})
            assert resp.headers["Access-Control-Allow-Origin"] == OTHER
            assert json.loads(await resp.read())["status"] == 400
    asyncio.run(scenario())
