"""Collector defects found by the storage/transport review (issue 18, part 5): an unknown
Content-Encoding read as identity, /readyz ready while every commit fails, and an unknown
PostgreSQL commit outcome logged as a rollback."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib

import pytest

from collector.app import STATE

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

