"""Issue 26 §3: anyone could fill the segment cap and silence chosen segments for the day.

A registry with 1,024 dimension combinations (`ldpt metrics check` accepted it; the collector's
default cap is 1,000): 1,000 one-report batches from 17 addresses opened every combination but
24, and then 10 real devices in those 24 lost 20 of 20 reports — including the reports of a
metric with no dimensions, because the whole batch was a 422 and the SDK takes a 422 as final.
Now the cap leaves out a segment's copy only: the same attack, against `ldpt serve` on SQLite
and on PostgreSQL, and every honest report is acknowledged and counted in its metric's total;
the breakdown says how many reports are in no segment. `ldpt serve` and `ldpt metrics check`
warn that the cap is below the combinations.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import threading
import uuid
from pathlib import Path

import msgpack
import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import main
from client_sdk import RetryPolicy, TelemetryClient
from client_sdk.registry import load_registry
from sketches import server_half

from .collector_support import TOKEN, Http, serving, wire_reports, write_token

pytestmark = pytest.mark.e2e

A = [f"a{i:02d}" for i in range(30)]
B = [f"b{i:02d}" for i in range(30)]
REGISTRY = f"""
[dimensions]
min_reports = 1

[dimensions.a]
values = {json.dumps(A)}

[dimensions.b]
values = {json.dumps(B)}

[metrics.crashed]
kind = "boolean"
epsilon = 1.0
dimensions = ["a", "b"]

[metrics.plain]
kind = "boolean"
epsilon = 1.0
"""
ATTACK_BATCHES, ADDRESSES, DEVICES = 1000, 17, 10
FAST = RetryPolicy(initial=0.05, maximum=0.5)
POSTGRES_DSN = os.environ.get("LDPT_TEST_POSTGRES_DSN")


@pytest.fixture(params=["sqlite", "postgres"])
def store_args(request, tmp_path):
    """`ldpt serve` arguments for a fresh store, and an opener of it for the checks."""
    if request.param == "sqlite":
        from collector.storage.aio import ThreadedStore

        db = tmp_path / "c.sqlite"
        yield ["--db", str(db)], lambda: ThreadedStore(db)
        return
    if not POSTGRES_DSN:
        pytest.skip("LDPT_TEST_POSTGRES_DSN is not set; the PostgreSQL half of the flood test is skipped")
    asyncpg = pytest.importorskip("asyncpg", reason="the 'postgres' extra (asyncpg) is not installed")
    from collector.storage.postgres import PostgresStore

    schema = f"ldpt_test_{uuid.uuid4().hex[:12]}"
    dsn = f"{POSTGRES_DSN}{'&' if '?' in POSTGRES_DSN else '?'}search_path={schema}"

    async def open_pg():
        return await PostgresStore.open(dsn)
    yield ["--postgres", dsn], open_pg

    async def drop():
        conn = await asyncpg.connect(POSTGRES_DSN)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()
    asyncio.run(drop())


def combos():
    """Every combination a batch can carry, shuffled: each dimension's closed set, ``other``, and
    ``unknown`` (None here: the dimension is left out of ``d``)."""
    every = list(itertools.product(A + ["other", None], B + ["other", None]))
    order = np.random.default_rng(3).permutation(len(every))
    return [every[i] for i in order]


def dims_of(a: str | None, b: str | None) -> dict:
    return {k: v for k, v in (("a", a), ("b", b)) if v is not None}


def attack_body(registry, a: str | None, b: str | None, rng) -> bytes:
    spec = registry.get("crashed")
    return msgpack.packb({"v": 1, "batch_id": os.urandom(16), "reports": wire_reports(spec, [1], rng),
                          "d": dims_of(a, b)})


def honest_device(url: str, registry, state: Path, dims: dict, out: list) -> None:
    """One real device: both metrics, one batch (the SDK's own batching), close = delivered."""
    client = TelemetryClient(url, registry, state, retry=FAST, max_batch_age=0.05, dimensions=dims)
    client.report("crashed", True)
    client.report("plain", False)
    delivered = client.close(30.0)
    out.append((delivered, client.stats()))


def test_a_segment_flood_costs_no_honest_report(tmp_path, store_args):
    serve_args, open_store = store_args
    (tmp_path / "metrics.toml").write_text(REGISTRY, encoding="utf-8")
    write_token(tmp_path / "token")
    registry = load_registry(tmp_path / "metrics.toml")
    every = combos()
    assert len(every) == 1024
    flood, spared = every[:ATTACK_BATCHES], every[ATTACK_BATCHES:ATTACK_BATCHES + DEVICES]
    rng = np.random.default_rng(26)
    env = {"LDPT_TRUSTED_PROXIES": "127.0.0.1", "LDPT_RELAY_SOURCES": ""}   # the rate limits apply
    args = ["--metrics", str(tmp_path / "metrics.toml"), *serve_args, "--port", "0",
            "--query-token-file", str(tmp_path / "token")]
    with serving(args, tmp_path, env=env) as server:
        assert "form 1,024 combinations, above max_segments = 1,000" in server.text()   # the warning
        http = Http(server.url)
        statuses = []
        for i, (a, b) in enumerate(flood):  # 17 addresses behind the trusted proxy, one report each
            status, _, _ = http.request("POST", "/v1/reports", attack_body(registry, a, b, rng),
                                        {"Content-Type": "application/msgpack",
                                         "X-Forwarded-For": f"203.0.113.{1 + i % ADDRESSES}"})
            statuses.append(status)
        assert statuses.count(200) == ATTACK_BATCHES, {s: statuses.count(s) for s in set(statuses)}
        results: list = []
        threads = [threading.Thread(target=honest_device, args=(server.url, registry, tmp_path / f"dev{i}",
                                                                 dims_of(a, b), results))
                   for i, (a, b) in enumerate(spared)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        acked = sum(stats["reports_acked"] for _, stats in results)
        assert len(results) == DEVICES and all(delivered for delivered, _ in results), results
        assert acked == 2 * DEVICES                                   # the bar: 20 of 20 acknowledged
        auth = {"Authorization": f"Bearer {TOKEN}"}
        status, total = http.get_json("/v1/metrics/crashed/estimates", auth)
        assert status == 200 and total["meta"]["n_reports"] == ATTACK_BATCHES + DEVICES
        status, plain = http.get_json("/v1/metrics/plain/estimates", auth)
        assert status == 200 and plain["meta"]["n_reports"] == DEVICES
        status, by = http.get_json("/v1/metrics/crashed/estimates?by=a", auth)
        assert status == 200 and by["meta"]["unsegmented"] == DEVICES and "in no segment" in by["meta"]["warning"]
        _, _, prom = http.request("GET", "/metrics")
        assert f'ldpt_reports_unsegmented_total{{metric="crashed"}} {DEVICES}' in prom.decode()
        server.terminate()
        log = server.text()
    assert "segment cap reached: metric 'crashed'" in log and "Traceback" not in log

    async def stored():  # and counted: the store's totals, exactly
        store = open_store()
        store = await store if asyncio.iscoroutine(store) else store
        try:
            out = {}
            for name in ("crashed", "plain"):
                spec = registry.get(name)
                out[name] = (await store.aload(name, spec.fingerprint, server_half(spec).new_sketch())).total_reports
            windows = await store.awindows()
            out["segments"] = len({w.metric for w in windows if w.metric.startswith("crashed@")})
            return out
        finally:
            await store.aclose()
    counts = asyncio.run(stored())
    assert counts == {"crashed": ATTACK_BATCHES + DEVICES, "plain": DEVICES, "segments": 1000}


def test_metrics_check_warns_when_the_cap_is_below_the_combinations(tmp_path, monkeypatch):
    (tmp_path / "metrics.toml").write_text(REGISTRY, encoding="utf-8")
    runner = CliRunner()
    out = runner.invoke(main, ["metrics", "check", str(tmp_path / "metrics.toml")])
    assert out.exit_code == 0, out.output
    assert "warning: metric 'crashed': its dimensions (a, b) form 1,024 combinations, above max_segments = 1,000" \
        in out.output and "'plain'" not in out.output.split("warning: metric")[-1]
    out = runner.invoke(main, ["metrics", "check", str(tmp_path / "metrics.toml"), "--max-segments", "1024"])
    assert out.exit_code == 0 and "max_segments" not in out.output
    monkeypatch.setenv("LDPT_MAX_SEGMENTS", "2000")
    out = runner.invoke(main, ["metrics", "check", str(tmp_path / "metrics.toml")])
    assert out.exit_code == 0 and "max_segments" not in out.output
