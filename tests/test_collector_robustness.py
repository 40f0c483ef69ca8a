"""Adversarial input and hostile connections (issue 13): each defect reproduced, then fixed.

Every test runs a real aiohttp server on 127.0.0.1 (ephemeral port) and talks to it with raw
sockets, bounded in time and in the number of connections.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import time
import zlib

import msgpack
import numpy as np
import pytest

from collector.app import STATE
from collector.connections import ConnectionGuard

from .collector_support import make_body, wire_reports, write_registry, write_token
from .test_collector_app import MSGPACK, assert_problem, bodies_for, post, running


@pytest.fixture
def setup(tmp_path):
    """(registry path, registry, token file, SQLite path), as in test_collector_app."""
    return (tmp_path / "metrics.toml", write_registry(tmp_path / "metrics.toml"),
            write_token(tmp_path / "token"), tmp_path / "collector.sqlite")


async def exchange(client, data: bytes, *, half_close: bool = False, timeout: float = 10) -> bytes:
    """Send raw bytes; everything the server answers until it closes (or ``timeout``)."""
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(data)
    await writer.drain()
    if half_close:
        writer.write_eof()
    try:
        return await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()


def split_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of a raw HTTP/1.x response; headers keep their spelling."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def post_raw(body: bytes, version: str = "1.1", **headers: str) -> bytes:
    """A POST /v1/reports request as bytes (Connection: close; headers given as keywords)."""
    lines = [f"POST /v1/reports HTTP/{version}", "Host: x", "Content-Type: application/msgpack",
             "Connection: close"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def test_undecodable_content_encoding_is_400_without_a_traceback(setup, caplog):
    caplog.set_level(logging.DEBUG)
    body = bodies_for(setup[1], 1)[0]

    async def scenario():
        async with running(setup, body_read_timeout=20) as (client, app):
            gzip = zlib.compressobj(wbits=31)
            cut_short = (gzip.compress(body) + gzip.flush())[:18]
            for encoding, data in (("deflate", b"not deflate at all" * 10), ("gzip", b"\x1f\x8b junk"),
                                   ("deflate", zlib.compress(body)[:-9]), ("gzip", cut_short),
                                   ("deflate", zlib.compress(body)[:18])):
                raw = await exchange(client, post_raw(data, Content_Encoding=encoding,
                                                      Content_Length=str(len(data))))
                doc = assert_problem(*split_response(raw), 400, "undecodable-body")
                assert "Content-Encoding" in doc["detail"] or "msgpack" in doc["detail"]
            # an encoding aiohttp cannot decode is refused by its HTTP layer: 400, no traceback
            raw = await exchange(client, post_raw(body, Content_Encoding="br", Content_Length=str(len(body))))
            assert split_response(raw)[0] == 400
            good = zlib.compress(body)
            status, _, _ = await post(client, good, {**MSGPACK, "Content-Encoding": "deflate"})
            assert status == 200
            tel = app[STATE].telemetry
            assert tel.value("ldpt_requests_rejected_total", "undecodable-body") \
                + tel.value("ldpt_request_errors_total", "undecodable-body") >= 5
            assert tel.value("ldpt_requests_rejected_total", "internal-error") == 0
    asyncio.run(scenario())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert all(r.exc_info is None for r in caplog.records if r.name.startswith(("ldpt", "aiohttp")))


def test_a_client_hanging_up_mid_body_is_not_an_internal_error(setup, caplog):
    caplog.set_level(logging.DEBUG)

    async def scenario():
        async with running(setup) as (client, app):
            for _ in range(3):
                reader, writer = await asyncio.open_connection(client.host, client.port)
                writer.write(b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/msgpack\r\n"
                             b"Content-Length: 5000\r\n\r\n" + b"\x00" * 100)
                await writer.drain()
                await asyncio.sleep(0.05)
                writer.transport.abort()
            tel = app[STATE].telemetry
            for _ in range(100):
                if tel.value("ldpt_requests_rejected_total", "client-disconnected") == 3:
                    break
                await asyncio.sleep(0.02)
            assert tel.value("ldpt_requests_rejected_total", "client-disconnected") == 3
            assert tel.value("ldpt_requests_rejected_total", "internal-error") == 0
            assert tel.value("ldpt_inflight_bytes") == 0
    asyncio.run(scenario())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_http10_post_without_content_length_gets_411(setup):
    body = bodies_for(setup[1], 1)[0]

    async def scenario():
        async with running(setup) as (client, _):
            raw = await exchange(client, post_raw(body, version="1.0"), half_close=True)
            assert_problem(*split_response(raw), 411, "length-required")
    asyncio.run(scenario())


def test_duplicate_keys_in_a_msgpack_map_are_400(setup):
    spec = setup[1].get("theme")
    report = wire_reports(spec, [1], np.random.default_rng(0))[0]

    def pack_pairs(pairs):  # a map with the given (key, value) pairs, duplicates kept
        out = bytearray([0x80 | len(pairs)])
        for k, v in pairs:
            out += msgpack.packb(k) + msgpack.packb(v)
        return bytes(out)

    bad_report = pack_pairs([("m", "theme"), ("f", report["f"]), ("p", report["p"]), ("p", report["p"])])
    body_dup_report = pack_pairs([("v", 1), ("batch_id", b"\x02" * 16), ("reports", [])])[:-1] \
        + bytes([0x91]) + bad_report  # "reports": [<the map with "p" twice>]
    body_dup_envelope = pack_pairs([("v", 1), ("v", 1), ("batch_id", b"\x03" * 16), ("reports", [report])])

    async def scenario():
        async with running(setup) as (client, _):
            for body in (body_dup_report, body_dup_envelope):
                doc = assert_problem(*await post(client, body), 400, "undecodable-body")
                assert "duplicate key" in doc["detail"]
            assert (await post(client, make_body([report])))[0] == 200
    asyncio.run(scenario())


class FakeConn:
    """Stands in for a GuardedHandler: records how the guard closed it."""

    def __init__(self) -> None:
        self.farewell: bytes | None = None

    def abandon(self, farewell: bytes) -> None:
        self.farewell = farewell


def test_connection_guard_deadlines_and_cap_with_an_injected_clock():
    now = [0.0]
    closed: list[str] = []
    guard = ConnectionGuard(header_timeout=10, keepalive_timeout=15, max_connections=3,
                            clock=lambda: now[0], on_close=closed.append)
    silent, dripping, served = FakeConn(), FakeConn(), FakeConn()
    for c in (silent, dripping, served):
        assert guard.opened(c)
    now[0] = 1
    guard.data(dripping)          # header deadline 11
    guard.busy(served)            # handler running: no deadline
    now[0] = 9.9
    guard.data(dripping)          # more header bytes do not extend the deadline
    assert guard.sweep() == 0
    now[0] = 10.0                 # the silent connection's deadline (opened at 0)
    assert guard.sweep() == 1 and silent.farewell == b"" and closed == ["header-timeout"]
    now[0] = 11.0
    assert guard.sweep() == 1 and b" 408 " in dripping.farewell.split(b"\r\n")[0]
    guard.idle(served)            # keep-alive: next request within 15 s
    now[0] = 25.9
    assert guard.sweep() == 0
    now[0] = 26.0
    assert guard.sweep() == 1 and served.farewell == b"" and closed[-1] == "idle-timeout"
    assert len(guard) == 0
    # the cap evicts the not-busy connection nearest its deadline; all busy -> refuse
    a, b, c, d = FakeConn(), FakeConn(), FakeConn(), FakeConn()
    assert guard.opened(a) and guard.opened(b) and guard.opened(c)
    guard.busy(a)
    guard.busy(c)
    assert guard.opened(d) and b.farewell == b"" and closed[-1] == "connection-limit"
    guard.busy(d)
    assert not guard.opened(FakeConn()) and len(guard) == 3


@pytest.mark.e2e
def test_slow_connections_are_closed_in_time_while_a_real_client_is_served(setup):
    """80 sockets drip header bytes (or say nothing) against a cap of 60 connections and a
    0.5 s header deadline: every one is closed within the deadline plus slack, and a real
    client posting batches on a keep-alive connection meanwhile gets every batch through."""
    bodies = bodies_for(setup[1], 20, size=10)
    header_timeout, slack = 0.5, 2.5

    async def drip(client, i: int, results: list) -> None:
        start = time.monotonic()
        reader, writer = await asyncio.open_connection(client.host, client.port)
        line = b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nX-Slow: " if i % 2 else b""
        try:
            for byte in line + b"a" * 200:
                writer.write(bytes([byte]))
                await writer.drain()
                try:
                    data = await asyncio.wait_for(reader.read(1 << 16), 0.1)
                except asyncio.TimeoutError:
                    continue
                if not data or reader.at_eof():  # answered (408) or closed
                    break
        except (ConnectionError, OSError):
            pass
        results.append(time.monotonic() - start)
        writer.close()

    async def scenario():
        async with running(setup, header_timeout=header_timeout, keepalive_timeout=5.0,
                           max_connections=60) as (client, app):
            results: list[float] = []
            slow = [asyncio.create_task(drip(client, i, results)) for i in range(80)]
            tel = app[STATE].telemetry
            for _ in range(200):  # until all 80 are connected (20 evicted by the cap of 60)
                if tel.value("ldpt_connections_closed_total", "connection-limit") >= 20:
                    break
                await asyncio.sleep(0.01)
            statuses = [(await post(client, body))[0] for body in bodies]
            await asyncio.wait_for(asyncio.gather(*slow), header_timeout + slack + 20)
            assert statuses == [200] * len(bodies)
            assert len(results) == 80 and max(results) <= header_timeout + slack, sorted(results)[-5:]
            closed = sum(tel.value("ldpt_connections_closed_total", r)
                         for r in ("header-timeout", "connection-limit"))
            garbage = tel.value("ldpt_request_errors_total", "bad-http-request")  # "aaa..." lines
            assert closed >= 40 and closed + garbage >= 80, (closed, garbage)
    asyncio.run(scenario())


def test_logs_carry_reasons_not_request_bytes(setup, caplog):
    caplog.set_level(logging.DEBUG)

    async def scenario():
        async with running(setup) as (client, _):
            for raw in (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nX-Secret\x01: SECRET-BYTES\r\n\r\n",
                        b"GET /SECRET-BYTES\x00 HTTP/1.1\r\n\r\n",
                        b"SECRET-BYTES SECRET-BYTES\r\n\r\n"):
                status, headers, body = split_response(await exchange(client, raw))
                assert status == 400 and headers["Content-Type"].startswith("application/problem+json")
    asyncio.run(scenario())
    # (the test server keeps aiohttp's access log; `ldpt serve` has none unless --access-log)
    text = "\n".join(r.getMessage() for r in caplog.records if r.name != "aiohttp.access")
    assert "bad HTTP request" in text and "SECRET-BYTES" not in text and "127.0.0.1" not in text


def test_request_errors_are_counted_apart_from_rejected_reports_and_latency_is_recorded(setup):
    async def scenario():
        async with running(setup) as (client, app):
            resp = await client.get("/v1/metrics/theme/estimates", headers={"Authorization": "Bearer wrong"})
            assert resp.status == 401
            resp = await client.get("/no/such/route")
            assert resp.status == 404
            assert (await post(client, b"\x93"))[0] == 400
            tel = app[STATE].telemetry
            assert tel.value("ldpt_request_errors_total", "unauthorized") == 1
            assert tel.value("ldpt_request_errors_total", "not-found") == 1
            assert tel.value("ldpt_requests_rejected_total", "unauthorized") == 0
            assert tel.value("ldpt_requests_rejected_total", "undecodable-body") == 1
            text = await (await client.get("/metrics")).text()
            assert 'ldpt_request_seconds_count{endpoint="ingest"} 1' in text
            assert 'ldpt_request_seconds_count{endpoint="query"} 1' in text
            assert re.search(r'ldpt_request_seconds_bucket\{endpoint="other",le="\+Inf"\} 1\n', text)
            assert "ldpt_build_info{" in text and "ldpt_process_resident_memory_bytes " in text
    asyncio.run(scenario())


def test_compare_and_the_dashboards_data_are_timed_as_queries(setup):
    """Every route that estimates (estimates, compare, the dashboard's overview and charts) is
    an endpoint="query" latency, not "other"; the dashboard's static page stays "other"."""
    async def scenario():
        async with running(setup) as (client, _):
            for path in ("/v1/metrics/theme/compare?a=2026-03-01&b=2026-03-02", "/ui/api/overview",
                         "/ui/charts/theme/series.svg", "/ui/"):
                await client.get(path, headers={"Authorization": "Bearer wrong"})
            text = await (await client.get("/metrics")).text()
            assert 'ldpt_request_seconds_count{endpoint="query"} 3' in text
            assert 'ldpt_request_seconds_count{endpoint="other"} 1' in text
    asyncio.run(scenario())


async def _hold_bodies(client, count: int, addresses: list[str], declared: int, sent: int) -> list:
    """``count`` POSTs, from ``addresses`` in turn (X-Forwarded-For through the trusted
    loopback proxy), each declaring ``declared`` body bytes and sending ``sent``, then
    stalling; the open writers are returned (closing them ends the attack)."""
    writers = []
    for i in range(count):
        reader, writer = await asyncio.open_connection(client.host, client.port)
        writer.write(post_raw(b"\x00" * sent, Content_Length=str(declared),
                              X_Forwarded_For=addresses[i % len(addresses)]))
        await writer.drain()
        writers.append(writer)
    return writers


async def _honest_statuses(client, bodies: list[bytes]) -> list[int]:
    headers = {**MSGPACK, "X-Forwarded-For": "203.0.113.50"}
    return [(await post(client, body, headers))[0] for body in bodies]


@pytest.mark.e2e
def test_slow_or_lying_bodies_cannot_starve_an_honest_client(setup):
    """Issue 18: 64 sockets from two addresses declare Content-Length 1 MiB, send one byte and
    stall. Reserved by declared length they held the whole 64 MiB of max_inflight_bytes and an
    honest client got 503 for every batch; charged as bytes arrive they hold 64 bytes. The
    honest client (a third address) must get >= 95% of its batches through, here all of them.
    The attack's requests are all in their handlers (their byte charged) before the honest
    client starts: a condition polled, not a sleep raced."""
    bodies = bodies_for(setup[1], 40, size=8)  # within max_reports_per_metric
    attackers = ["198.51.100.1", "198.51.100.2"]

    async def scenario():
        async with running(setup, relay_sources="", trusted_proxies="127.0.0.1",
                           body_read_timeout=120) as (client, app):
            tel = app[STATE].telemetry
            writers = await _hold_bodies(client, 64, attackers, 1 << 20, 1)
            for _ in range(1000):
                if tel.value("ldpt_inflight_bytes") >= 64:
                    break
                await asyncio.sleep(0.01)
            assert tel.value("ldpt_inflight_bytes") >= 64
            statuses = await _honest_statuses(client, bodies)
            for w in writers:
                w.close()
            ok = statuses.count(200)
            assert ok >= 0.95 * len(bodies), statuses
            assert ok == len(bodies)
    asyncio.run(scenario())


@pytest.mark.e2e
def test_a_per_source_share_bounds_bodies_that_are_sent_but_never_finished(setup):
    """The attacker who pays for its bytes: 2 addresses × 32 sockets each send 64 KiB − 1 of a
    64 KiB body and stall. Against a 1 MiB budget that is 4 MiB: each address may hold at most
    its 128 KiB share (the rest get 503 overloaded), so the honest client keeps its room."""
    bodies = bodies_for(setup[1], 40, size=8)  # within max_reports_per_metric
    attackers = ["198.51.100.1", "198.51.100.2"]
    size = 64 << 10

    async def scenario():
        async with running(setup, relay_sources="", trusted_proxies="127.0.0.1", body_read_timeout=120,
                           max_body_bytes=size, max_inflight_bytes=1 << 20,
                           max_inflight_bytes_per_source=2 * size) as (client, app):
            state = app[STATE]
            tel = state.telemetry
            writers = await _hold_bodies(client, 64, attackers, size, size - 1)

            def settled() -> bool:  # every attack request either holds its bytes or was refused
                held = tel.value("ldpt_inflight_bytes")
                refused = tel.value("ldpt_requests_rejected_total", "overloaded")
                return refused + held // (size - 1) >= 64
            for _ in range(1000):
                if settled():
                    break
                await asyncio.sleep(0.01)
            assert settled()
            for address in attackers:
                held = state.inflight.held_by(ipaddress.ip_address(address))
                assert held <= 2 * size, held
            statuses = await _honest_statuses(client, bodies)
            for w in writers:
                w.close()
            assert statuses.count(200) >= 0.95 * len(bodies), statuses
    asyncio.run(scenario())


def test_the_guard_evicts_from_the_address_holding_most_never_the_newest():
    """Issue 18 (admin port): the scraper's new connection was evicted before its request was
    parsed. With a per-address cap a flooding address evicts its own oldest idle socket;
    at the worker's cap the victim comes from the address holding the most."""
    now = [0.0]
    guard = ConnectionGuard(header_timeout=10, keepalive_timeout=15, max_connections=6,
                            max_per_address=3, clock=lambda: now[0])
    flood = [FakeConn() for _ in range(3)]
    for i, c in enumerate(flood):
        now[0] = i
        assert guard.opened(c, "198.51.100.1")
    now[0] = 5
    scraper = FakeConn()
    assert guard.opened(scraper, "192.0.2.10")
    newer = FakeConn()
    assert guard.opened(newer, "198.51.100.1")       # its own oldest goes, not the scraper
    assert flood[0].farewell == b"" and scraper.farewell is None and newer.farewell is None
    guard.busy(flood[1])
    guard.busy(flood[2])
    guard.busy(newer)
    assert not guard.opened(FakeConn(), "198.51.100.1")  # all of its own are busy: refused
    assert scraper.farewell is None
    # the worker's cap: the victim is from the address holding the most (not busy)
    others = [FakeConn(), FakeConn()]
    for c in others:
        assert guard.opened(c, "203.0.113.1")
    assert len(guard) == 6
    late = FakeConn()
    assert guard.opened(late, "203.0.113.2")
    assert others[0].farewell == b"" and scraper.farewell is None and late.farewell is None
    # a closed connection frees its address's slot
    guard.closed(flood[1])
    assert guard.opened(FakeConn(), "198.51.100.1") and flood[2].farewell is None


@pytest.mark.e2e
def test_a_scrape_gets_through_a_socket_flood_on_the_admin_port(setup):
    """300 sockets from one address (127.0.0.2, a loopback alias) connect to the admin port,
    send nothing and reconnect whenever closed; every one of 20 scrapes from 127.0.0.1, each
    on a new connection, is answered. The scrapes start once the flood has filled the port
    (its connections have been evicted at least 300 times): a condition, not a sleep."""
    import http.client
    import socket
    import threading

    from collector.admin import AdminServer

    from .collector_support import free_port

    async def scenario():
        async with running(setup, header_timeout=5.0, keepalive_timeout=5.0) as (client, app):
            state = app[STATE]
            sock = socket.socket()
            sock.bind(("127.0.0.1", free_port()))
            sock.listen(1024)
            admin = AdminServer(state, sock)
            admin.start()
            port = sock.getsockname()[1]
            stop = threading.Event()
            connects = [0]

            def flood() -> None:
                import selectors
                sel = selectors.DefaultSelector()

                def connect() -> None:
                    s = socket.socket()
                    s.bind(("127.0.0.2", 0))
                    s.setblocking(False)
                    s.connect_ex(("127.0.0.1", port))
                    sel.register(s, selectors.EVENT_READ)
                    connects[0] += 1
                for _ in range(300):
                    connect()
                while not stop.is_set():
                    for key, _ in sel.select(0.05):
                        s = key.fileobj
                        try:
                            data = s.recv(1024)
                        except OSError:
                            data = b""
                        if not data:  # evicted: come back at once
                            sel.unregister(s)
                            s.close()
                            connect()
                for key in list(sel.get_map().values()):
                    key.fileobj.close()

            def scrape() -> int:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                try:
                    conn.request("GET", "/metrics")
                    resp = conn.getresponse()
                    resp.read()
                    return resp.status
                except OSError:
                    return 0
                finally:
                    conn.close()

            flooder = threading.Thread(target=flood)
            flooder.start()
            try:
                deadline = time.monotonic() + 30
                while connects[0] < 600 and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                assert connects[0] >= 600, connects[0]   # the port is full and churning
                statuses = [await asyncio.to_thread(scrape) for _ in range(20)]
            finally:
                stop.set()
                flooder.join(10)
                admin.stop()
            assert statuses == [200] * 20, statuses
    asyncio.run(scenario())


def test_inflight_budget_charges_arrivals_per_source():
    """collector/inflight.py without a server: a declared length reserves nothing, arrived
    bytes are charged in total and per source, relays are exempt from the share, and a
    refusal mid-body asks to close the connection."""
    from collector.inflight import InflightBudget
    from collector.problems import Problem

    changes: list[int] = []
    budget = InflightBudget(100, 40, on_change=changes.append, retry_after=lambda: 3.0)
    for _ in range(50):
        budget.admit("a", 1 << 20, exempt=False)   # lying lengths: admitted, nothing held
    assert budget.held == 0
    budget.charge("a", 30, exempt=False)
    with pytest.raises(Problem) as refused:
        budget.admit("a", 20, exempt=False)        # its share: 30 + 20 > 40
    assert refused.value.slug == "overloaded" and refused.value.retry_after == 3.0
    budget.admit("b", 20, exempt=False)            # another source has room
    with pytest.raises(Problem) as mid_body:
        budget.charge("a", 11, exempt=False)
    assert mid_body.value.close
    budget.charge("relay", 59, exempt=True)        # a relay may exceed the share ...
    with pytest.raises(Problem):
        budget.admit("b", 1, exempt=False)         # ... not the total (30 + 11 + 59 = 100)
    budget.release("a", 41)
    budget.release("relay", 59)
    assert budget.held == 0 and budget.held_by("a") == 0 and sum(changes) == 0
