"""`ldpt simulate --url`'s sender (cli/remote.py) speaks through the SDK: its wire writer and
its transport, and its rules of what to retry and how long to wait (issue 29 §3).

A scripted aiohttp server on 127.0.0.1 answers each POST in turn; the tests check what the
sender sends (the SDK's bytes, the same bytes on every resend) and what it makes of answers
the CLI's own rules got wrong: 408 stopped the run, an HTTP-date Retry-After was ignored, and a
proxy's HTML 200 was taken for an acknowledgement.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time

import msgpack
import pytest
from aiohttp import web

from cli.remote import RemoteError, SendStats, encode_batch, send_batches
from client_sdk.registry import parse_registry
from client_sdk.uploader import pack_batch

REGISTRY = '[metrics.theme]\nkind = "categorical"\ncategories = ["dark", "light"]\nprotocol = "grr"\nepsilon = 2.0\n'
ACK = {"accepted": 3, "rejected": []}


def spec():
    return parse_registry(REGISTRY).get("theme")


async def _serve(script):
    """Start a server answering the n-th POST with script[n] (status, headers, body); returns
    (runner, url, bodies received)."""
    received: list[bytes] = []

    async def handle(request: web.Request) -> web.Response:
        received.append(await request.read())
        status, headers, body = script[min(len(received), len(script)) - 1]
        return web.Response(status=status, headers=headers, body=body)

    app = web.Application()
    app.router.add_post("/v1/reports", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}", received


def run_against(script, bodies, **kw):
    async def go():
        runner, url, received = await _serve(script)
        stats = SendStats()
        try:
            await send_batches(url, bodies, stats=stats, retry_deadline=kw.pop("retry_deadline", 10.0), **kw)
            return stats, received, None
        except RemoteError as exc:
            return stats, received, exc
        finally:
            await runner.cleanup()
    return asyncio.run(go())


def test_a_batch_is_the_sdks_wire_bytes():
    s = spec()
    wire = [0, 1, 1]
    batch_id = bytes(range(16))
    assert encode_batch(s, wire, batch_id) == pack_batch([(s.name, s.fingerprint, w) for w in wire], batch_id)[1]
    doc = msgpack.unpackb(encode_batch(s, wire))
    assert doc["v"] == 1 and len(doc["batch_id"]) == 16 and [r["p"] for r in doc["reports"]] == wire


def test_408_and_503_are_retried_with_the_same_bytes_and_counted_once():
    body = encode_batch(spec(), [0, 1, 1])
    problem = json.dumps({"type": "https://ldp-telemetry.dev/problems/overloaded", "title": "x",
                          "status": 503, "detail": "busy"}).encode()
    script = [(408, {}, b""), (503, {"Retry-After": "0"}, problem), (200, {}, json.dumps(ACK).encode())]
    stats, received, error = run_against(script, [(3, body)], backoff_cap=0.05)
    assert error is None
    assert received == [body, body, body]
    assert (stats.batches, stats.reports, stats.retries) == (1, 3, 2)


def test_an_http_date_retry_after_is_honoured():
    body = encode_batch(spec(), [1])
    when = email.utils.formatdate(time.time() + 2, usegmt=True)   # 1-2 s ahead (whole seconds)
    script = [(429, {"Retry-After": when}, b""), (200, {}, json.dumps(ACK).encode())]
    t0 = time.monotonic()
    stats, received, error = run_against(script, [(1, body)], backoff_cap=0.01)
    waited = time.monotonic() - t0
    assert error is None and stats.retries == 1 and len(received) == 2
    assert waited >= 0.9, f"retried after {waited:.2f} s, before the collector's Retry-After"


def test_a_200_that_is_not_an_acknowledgement_is_not_counted():
    body = encode_batch(spec(), [1])
    stats, received, error = run_against([(200, {"Content-Type": "text/html"}, b"<html>portal</html>")],
                                         [(1, body)])
    assert stats.reports == 0 and stats.batches == 0
    assert isinstance(error, RemoteError) and "not an ldpt collector's answer" in str(error)


@pytest.mark.parametrize("status", [400, 422])
def test_a_refusal_stops_the_run_with_the_collectors_detail(status):
    problem = json.dumps({"type": "https://ldp-telemetry.dev/problems/invalid-batch", "title": "x",
                          "status": status, "detail": "the batch envelope is invalid"}).encode()
    stats, received, error = run_against([(status, {"Content-Type": "application/problem+json"}, problem)],
                                         [(1, encode_batch(spec(), [1]))])
    assert isinstance(error, RemoteError) and f"HTTP {status}: the batch envelope is invalid [invalid-batch]" in str(error)
    assert len(received) == 1 and stats.reports == 0
