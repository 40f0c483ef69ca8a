"""Poisoning bounds of the collector (collector/limits.py): who the source is, the token
bucket, the per-metric batch cap, relays and the ingest key."""

from __future__ import annotations

import asyncio
import ipaddress

import numpy as np
import pytest

from collector.app import STATE
from collector.config import ConfigError, make_config
from collector.limits import IngestPolicy, TokenBuckets

from .collector_support import TOKEN, make_body, wire_reports, write_registry, write_token
from .test_collector_app import MSGPACK, assert_problem, post, running


@pytest.fixture
def setup(tmp_path):
    return (tmp_path / "metrics.toml", write_registry(tmp_path / "metrics.toml"),
            write_token(tmp_path / "token"), tmp_path / "collector.sqlite")


def policy(tmp_path, **settings) -> IngestPolicy:
    return IngestPolicy(make_config(tmp_path / "m.toml", environ={}, **settings))


def test_token_bucket_with_an_injected_clock():
    now = [0.0]
    buckets = TokenBuckets(rate=2.0, burst=3.0, clock=lambda: now[0], max_sources=4)
    assert [buckets.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a") == pytest.approx(0.5)      # empty: one token in 1/rate s
    assert buckets.take("b") == 0.0                     # sources are independent
    now[0] = 0.5
    assert buckets.take("a") == 0.0 and buckets.take("a") == pytest.approx(0.5)
    now[0] = 100.0                                      # everyone refilled: state is dropped
    for s in ("c", "d", "e", "f"):
        assert buckets.take(s) == 0.0
    assert len(buckets) <= 4


def test_the_source_address_and_trusted_proxies(tmp_path):
    p = policy(tmp_path, trusted_proxies="10.0.0.0/8", relay_sources="192.0.2.7")
    ip = ipaddress.ip_address
    assert p.source("203.0.113.9", {}) == (ip("203.0.113.9"), False)
    # from a trusted proxy: the rightmost address that is not a trusted proxy
    xff = {"X-Forwarded-For": "198.51.100.1, 203.0.113.9, 10.1.1.1"}
    assert p.source("10.0.0.5", xff) == (ip("203.0.113.9"), False)
    # an untrusted peer's X-Forwarded-For is ignored
    assert p.source("203.0.113.50", xff) == (ip("203.0.113.50"), False)
    # a relay is a relay directly or through a trusted proxy, never via an untrusted one
    assert p.source("192.0.2.7", {}) == (ip("192.0.2.7"), True)
    assert p.source("10.0.0.5", {"X-Forwarded-For": "192.0.2.7"}) == (ip("192.0.2.7"), True)
    p2 = policy(tmp_path, relay_sources="127.0.0.1")
    assert p2.source("127.0.0.1", {"X-Forwarded-For": "203.0.113.9"})[1] is False
    assert p.source("10.0.0.5", {"X-Forwarded-For": "not-an-address"}) == (ip("10.0.0.5"), False)


def test_bad_network_settings_name_the_setting(tmp_path):
    with pytest.raises(ConfigError, match="trusted_proxies.*'10.0.0.300'"):
        policy(tmp_path, trusted_proxies="10.0.0.300")


def body_with(registry, theme: int, page: int = 0, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    return make_body(wire_reports(registry.get("theme"), rng.integers(0, 3, theme), rng)
                     + wire_reports(registry.get("page"), rng.integers(0, 20, page), rng))


def test_reports_per_metric_per_batch_are_capped_unless_the_source_is_a_relay(setup):
    registry = setup[1]

    async def scenario():
        async with running(setup, relay_sources="", max_reports_per_metric=8) as (client, app):
            assert (await post(client, body_with(registry, 8, 8)))[0] == 200
            doc = assert_problem(*await post(client, body_with(registry, 9, 1, seed=1)), 422,
                                 "too-many-reports")
            assert doc["metric"] == "theme" and doc["limit"] == 8
            tel = app[STATE].telemetry
            assert tel.value("ldpt_requests_rejected_total", "too-many-reports") == 1
            assert tel.value("ldpt_reports_rejected_total", "too-many-reports") == 10
        async with running(setup, relay_sources="127.0.0.1", max_reports_per_metric=8) as (client, _):
            assert (await post(client, body_with(registry, 500, seed=2)))[0] == 200
    asyncio.run(scenario())


def test_a_source_over_its_rate_gets_429_with_retry_after(setup):
    registry = setup[1]

    async def scenario():
        async with running(setup, relay_sources="", rate_limit=0.5, rate_limit_burst=3) as (client, app):
            statuses = [(await post(client, body_with(registry, 2, seed=i)))[0] for i in range(3)]
            assert statuses == [200, 200, 200]
            status, headers, body = await post(client, body_with(registry, 2, seed=9))
            doc = assert_problem(status, headers, body, 429, "rate-limited")
            assert int(headers["Retry-After"]) == doc["retry_after"] == 2  # 1 token at 0.5/s
            # the same address behind a trusted proxy is another source
            fwd = {**MSGPACK, "X-Forwarded-For": "203.0.113.9"}
            assert (await post(client, body_with(registry, 2, seed=10), fwd))[0] == 429  # untrusted
            tel = app[STATE].telemetry
            assert tel.value("ldpt_requests_rejected_total", "rate-limited") == 2
        async with running(setup, relay_sources="", rate_limit=0.5, rate_limit_burst=1,
                           trusted_proxies="127.0.0.1") as (client, _):
            for i, address in enumerate(("203.0.113.9", "203.0.113.10")):
                fwd = {**MSGPACK, "X-Forwarded-For": address}
                assert (await post(client, body_with(registry, 2, seed=20 + i), fwd))[0] == 200
            fwd = {**MSGPACK, "X-Forwarded-For": "203.0.113.9"}
            assert (await post(client, body_with(registry, 2, seed=30), fwd))[0] == 429
    asyncio.run(scenario())


def test_the_ingest_key(setup, tmp_path):
    registry = setup[1]
    key = tmp_path / "ingest.key"
    key.write_text("ingest-key-0123456789abcdef\n")
    key.chmod(0o600)

    async def scenario():
        async with running(setup, ingest_key_file=key) as (client, app):
            assert_problem(*await post(client, body_with(registry, 2)), 401, "ingest-key-required")
            wrong = {**MSGPACK, "Authorization": f"Bearer {TOKEN}"}
            assert_problem(*await post(client, body_with(registry, 2), wrong), 401, "ingest-key-required")
            right = {**MSGPACK, "Authorization": "Bearer ingest-key-0123456789abcdef"}
            assert (await post(client, body_with(registry, 2), right))[0] == 200
            assert app[STATE].telemetry.value("ldpt_requests_rejected_total", "ingest-key-required") == 2
    asyncio.run(scenario())


def test_the_load_generator_works_against_the_default_limits(setup):
    """`ldpt simulate --url` batches many devices from 127.0.0.1, a default relay source."""
    from cli.remote import send_batches

    spec = setup[1].get("theme")
    rng = np.random.default_rng(3)
    wire = wire_reports(spec, rng.integers(0, 3, 2000), rng)
    bodies = [(500, make_body(wire[i:i + 500])) for i in range(0, 2000, 500)]

    async def scenario():
        async with running(setup) as (client, app):
            stats = await send_batches(str(client.make_url("/")), bodies)
            assert stats.reports == 2000
            assert app[STATE].telemetry.value("ldpt_reports_accepted_total", "theme") == 2000
    asyncio.run(scenario())


def test_every_x_forwarded_for_line_is_one_list(tmp_path):
    """A proxy that appends its own X-Forwarded-For line (instead of merging) must not let the
    client's forged first line decide the source (issue 18): all lines are one list, read
    from the right."""
    from multidict import CIMultiDict

    p = policy(tmp_path, trusted_proxies="10.0.0.0/8", relay_sources="127.0.0.1")
    ip = ipaddress.ip_address
    two = CIMultiDict([("X-Forwarded-For", "127.0.0.1"), ("X-Forwarded-For", "203.0.113.9")])
    assert p.source("10.0.0.5", two) == (ip("203.0.113.9"), False)   # not a relay
    forged = CIMultiDict([("X-Forwarded-For", "198.51.100.1, 10.9.9.9"),
                          ("x-forwarded-for", "203.0.113.9, 10.1.1.1")])
    assert p.source("10.0.0.5", forged) == (ip("203.0.113.9"), False)
    garbled = CIMultiDict([("X-Forwarded-For", "203.0.113.9"), ("X-Forwarded-For", "junk")])
    assert p.source("10.0.0.5", garbled) == (ip("10.0.0.5"), False)


@pytest.mark.e2e
def test_two_x_forwarded_for_lines_on_the_wire_neither_bypass_the_rate_nor_make_a_relay(setup):
    """Raw requests with two header lines, as a proxy that appends one sends them: a random
    forged first line per request no longer gives a fresh token bucket, and a first line of
    127.0.0.1 (a relay) no longer lifts the per-batch cap."""
    registry = setup[1]

    async def send(client, body: bytes, lines: list[str]) -> int:
        head = ["POST /v1/reports HTTP/1.1", "Host: x", "Content-Type: application/msgpack",
                "Connection: close", f"Content-Length: {len(body)}"]
        head += [f"X-Forwarded-For: {line}" for line in lines]
        reader, writer = await asyncio.open_connection(client.host, client.port)
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        return int(raw.split(b" ", 2)[1])

    async def scenario():
        async with running(setup, relay_sources="127.0.0.1", trusted_proxies="127.0.0.1",
                           rate_limit=0.01, rate_limit_burst=3, max_reports_per_metric=8) as (client, _):
            statuses = [await send(client, body_with(registry, 2, seed=40 + i),
                                   [f"198.51.100.{i}", "203.0.113.9"]) for i in range(6)]
            assert statuses == [200, 200, 200, 429, 429, 429]
            big = body_with(registry, 100, seed=50)
            assert await send(client, big, ["127.0.0.1", "203.0.113.77"]) == 422
    asyncio.run(scenario())
