"""Numeric metrics through a real `ldpt serve` on 127.0.0.1 (SQLite, and PostgreSQL when
LDPT_TEST_POSTGRES_DSN is set): ingest, dedupe, problem+json for bad numeric reports, and the
query API's estimate equal to the local CLI's byte for byte."""

from __future__ import annotations

import asyncio
import json
import os
import uuid

import msgpack
import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import main
from client_sdk.registry import load_registry
from sketches import server_half

from .collector_support import Http, make_body, serving, write_token

pytestmark = pytest.mark.e2e

REGISTRY = """
[metrics.session_minutes]
kind = "numeric"
range = [0, 120]
protocol = "auto"
epsilon = 1.0

[metrics.startup_ms]
kind = "numeric"
range = [0, 5000]
buckets = [0, 250, 500, 750, 1000, 1500, 2000, 3000, 5000]
epsilon = 2.0
"""
DSN = os.environ.get("LDPT_TEST_POSTGRES_DSN")


def run_cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(params=["sqlite", "postgres"])
def store_args(request, tmp_path):
    """`ldpt serve` store arguments: a SQLite file, or a fresh PostgreSQL schema (dropped after)."""
    if request.param == "sqlite":
        yield ["--db", str(tmp_path / "served.sqlite")]
        return
    if not DSN:
        pytest.skip("LDPT_TEST_POSTGRES_DSN is not set")
    asyncpg = pytest.importorskip("asyncpg")
    schema = f"ldpt_numeric_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in DSN else "?"
    yield ["--postgres", f"{DSN}{sep}search_path={schema}"]

    async def drop():
        conn = await asyncpg.connect(DSN)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()
    asyncio.run(drop())


def test_numeric_metrics_ingest_dedupe_refuse_and_query(tmp_path, store_args):
    reg = tmp_path / "metrics.toml"
    reg.write_text(REGISTRY, encoding="utf-8")
    registry = load_registry(reg)
    token = write_token(tmp_path / "token")
    local_db = str(tmp_path / "local.sqlite")
    with serving(["--metrics", str(reg), *store_args, "--port", "0", "--query-token-file", str(token)],
                 tmp_path) as server:
        for metric, dist in (("session_minutes", "exponential:20"), ("startup_ms", "lognormal:6.5,0.6")):
            common = ["simulate", "--metrics", str(reg), "--metric", metric, "--clients", "20000",
                      "--distribution", dist, "--seed", "8", "--silent"]
            run_cli(*common, "--url", server.url, "--batch-size", "1000")
            run_cli(*common, "--db", local_db)
            for fmt in ("json", "csv", "table"):
                remote = run_cli("estimate", "--metrics", str(reg), "--metric", metric, "--url",
                                 server.url, "--token-file", str(token), "--format", fmt)
                local = run_cli("estimate", "--metrics", str(reg), "--metric", metric, "--db",
                                local_db, "--format", fmt)
                assert remote == local, (metric, fmt)
        hist = run_cli("estimate", "--metrics", str(reg), "--metric", "startup_ms", "--url", server.url,
                       "--token-file", str(token), "--format", "json", "--consistent")
        assert json.loads(hist)["meta"]["post_processed"] == "norm-sub"

        http = Http(server.url)
        spec = registry.get("session_minutes")
        cells = server_half(spec).cells
        good = make_body([{"m": spec.name, "f": spec.fingerprint, "p": 0},
                          {"m": spec.name, "f": spec.fingerprint, "p": cells - 1}])
        status, _, data = http.post_batch(good)
        assert status == 200 and json.loads(data) == {"accepted": 2, "duplicate": False}
        status, _, data = http.post_batch(good)                     # a retry: acknowledged once
        assert status == 200 and json.loads(data)["duplicate"] is True
        for payload, words in ((cells, "outside"), (-1, "outside"), (1.5, "integer"), (True, "integer"),
                               ([0], "integer")):
            body = make_body([{"m": spec.name, "f": spec.fingerprint, "p": 0},
                              {"m": spec.name, "f": spec.fingerprint, "p": payload}])
            status, headers, data = http.post_batch(body)
            assert status == 422 and headers["content-type"].startswith("application/problem+json")
            doc = json.loads(data)
            assert doc["type"].endswith("/invalid-report"), doc
            assert words in doc["detail"] and f"metric '{spec.name}'" in doc["detail"], doc
        stale = make_body([{"m": spec.name, "f": "0" * 32, "p": 0}])
        status, _, data = http.post_batch(stale)
        assert status == 422 and json.loads(data)["type"].endswith("/fingerprint-mismatch")
        after = json.loads(run_cli("estimate", "--metrics", str(reg), "--metric", spec.name, "--url",
                                   server.url, "--token-file", str(token), "--format", "json"))
        n_row = next(r for r in after["estimates"] if r["statistic"] == "n")
        assert n_row["estimate"] == 20_002                          # the good batch once, no bad one
        http.close()
        assert server.terminate() == 0


def test_wire_payload_of_a_numeric_report_is_one_integer(tmp_path):
    """The wire format is unchanged: a numeric report's ``p`` is a plain msgpack integer."""
    reg = tmp_path / "metrics.toml"
    reg.write_text(REGISTRY, encoding="utf-8")
    registry = load_registry(reg)
    for name in ("session_minutes", "startup_ms"):
        spec = registry.get(name)
        proto = server_half(spec)
        wire = proto.to_wire(proto.encode(np.arange(3) % proto.domain_size, np.random.default_rng(0)))
        packed = msgpack.unpackb(make_body([{"m": name, "f": spec.fingerprint, "p": w} for w in wire]))
        assert all(type(r["p"]) is int for r in packed["reports"])
