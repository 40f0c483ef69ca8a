"""Request headers whose bytes are not UTF-8 (issue 26 §5): every header the collector parses
answers 4xx (or ignores the value), never 500 with a logged traceback, and the ingest key's
refusals are rate-limited like any other.

aiohttp decodes header bytes that are not UTF-8 as lone surrogates, which ``str.encode()``
refuses: the ingest key's check encoded the header plainly, so a non-UTF-8 ``Authorization``
was a 500 and a traceback in the log, before the rate limit (an unthrottled log flood).
"""

from __future__ import annotations

import asyncio
import json
import logging

import numpy as np
import pytest

from collector.app import STATE

from .collector_support import make_body, wire_reports, write_registry, write_token
from .test_collector_app import running

KEY = "ingest-key-0123456789abcdef"
TOKEN_HEADER = b"Bearer test-token-0123456789abcdef"
#: Not UTF-8: a lone continuation byte, an overlong form, a truncated sequence, Latin-1 text.
BAD = b"\xff\xfe\xc0\xaf \xc3( caf\xe9"


@pytest.fixture
def setup(tmp_path):
    return (tmp_path / "metrics.toml", write_registry(tmp_path / "metrics.toml"),
            write_token(tmp_path / "token"), tmp_path / "collector.sqlite")


def key_file(tmp_path):
    path = tmp_path / "ingest.key"
    path.write_text(KEY + "\n")
    path.chmod(0o600)
    return path


async def raw(port: int, method: bytes, path: bytes, headers: dict[bytes, bytes], body: bytes = b"") -> tuple[int, dict, bytes]:
    """One request written byte for byte (no client library re-encodes the header values)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = {b"Host": b"127.0.0.1", b"Connection": b"close", **headers}
    if body:
        head.setdefault(b"Content-Length", str(len(body)).encode())
    writer.write(method + b" " + path + b" HTTP/1.1\r\n"
                 + b"".join(k + b": " + v + b"\r\n" for k, v in head.items()) + b"\r\n" + body)
    await writer.drain()
    data = await reader.read()
    writer.close()
    top, _, rest = data.partition(b"\r\n\r\n")
    lines = top.split(b"\r\n")
    status = int(lines[0].split()[1])
    hdrs = {k.strip().lower().decode(): v.strip().decode("latin-1")
            for k, _, v in (line.partition(b":") for line in lines[1:])}
    return status, hdrs, rest


def batch(registry, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    return make_body(wire_reports(registry.get("theme"), rng.integers(0, 3, 2), rng))


def test_a_non_utf8_ingest_key_is_a_401_with_a_reason_and_rate_limited(setup, tmp_path, caplog):
    """The issue's case: Authorization bytes that are not UTF-8, with an ingest key set, were
    a 500 and a traceback (3 of 3); now a 401 problem whose ``reason`` says why, with a
    Bearer challenge, and after the source's burst a 429 like any other refusal."""
    registry = setup[1]
    caplog.set_level(logging.INFO)

    async def scenario():
        async with running(setup, ingest_key_file=key_file(tmp_path), relay_sources="",
                           rate_limit=0.01, rate_limit_burst=4) as (client, app):
            port = client.server.port
            msgpack_type = {b"Content-Type": b"application/msgpack"}
            cases = [({}, "missing"), ({b"Authorization": BAD}, "not-bearer"),
                     ({b"Authorization": b"Bearer " + BAD}, "invalid"),
                     ({b"Authorization": b"Bearer " + KEY.encode() + b"\xff"}, "invalid")]
            for extra, reason in cases:
                status, headers, body = await raw(port, b"POST", b"/v1/reports", {**msgpack_type, **extra},
                                                  batch(registry))
                doc = json.loads(body)
                assert status == 401 and headers["content-type"].startswith("application/problem+json")
                assert doc["type"].endswith("/ingest-key-required") and doc["reason"] == reason, doc
                assert headers["www-authenticate"].startswith("Bearer")
            # the burst (4) is spent: refusals are throttled, whatever the header holds
            for extra in ({b"Authorization": b"Bearer " + BAD}, {b"Authorization": b"Bearer " + KEY.encode()}):
                status, headers, body = await raw(port, b"POST", b"/v1/reports", {**msgpack_type, **extra},
                                                  batch(registry, 1))
                assert status == 429 and json.loads(body)["type"].endswith("/rate-limited")
                assert int(headers["retry-after"]) >= 1
            tel = app[STATE].telemetry
            assert tel.value("ldpt_requests_rejected_total", "ingest-key-required") == 4
            assert tel.value("ldpt_requests_rejected_total", "rate-limited") == 2
            assert tel.value("ldpt_requests_rejected_total", "internal-error") == 0
    asyncio.run(scenario())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def test_the_right_ingest_key_in_any_scheme_case_is_accepted(setup, tmp_path):
    registry = setup[1]

    async def scenario():
        async with running(setup, ingest_key_file=key_file(tmp_path)) as (client, _):
            for scheme in (b"Bearer", b"bearer", b"BEARER"):
                status, _, body = await raw(client.server.port, b"POST", b"/v1/reports",
                                            {b"Content-Type": b"application/msgpack",
                                             b"Authorization": scheme + b"  " + KEY.encode() + b" "},
                                            batch(registry, int.from_bytes(scheme[:2], "big")))
                assert status == 200, body
    asyncio.run(scenario())


#: Every request header the collector reads, on the routes that read it, with a value that is
#: not UTF-8 (method, path, headers; the token where the route needs one).
HEADER_CASES = [
    ("POST", "/v1/reports", {b"Content-Type": BAD}),
    ("POST", "/v1/reports", {b"Content-Type": b"application/msgpack; charset=" + BAD}),
    ("POST", "/v1/reports", {b"Content-Encoding": BAD}),
    ("POST", "/v1/reports", {b"X-Forwarded-For": BAD}),
    ("POST", "/v1/reports", {b"X-Forwarded-For": b"203.0.113.9, " + BAD}),
    ("POST", "/v1/reports", {b"Origin": BAD}),
    ("POST", "/v1/reports", {b"Idempotency-Key": BAD, b"Retry-After": BAD, b"User-Agent": BAD}),
    ("POST", "/v1/reports", {b"Authorization": b"Bearer " + BAD}),    # no ingest key: ignored
    ("OPTIONS", "/v1/reports", {b"Origin": BAD, b"Access-Control-Request-Method": b"POST"}),
    ("OPTIONS", "/v1/reports", {b"Origin": b"https://app.example", b"Access-Control-Request-Method": BAD}),
    ("OPTIONS", "/v1/registry", {b"Origin": b"https://app.example", b"Access-Control-Request-Method": b"GET",
                                 b"Access-Control-Request-Headers": BAD}),
    ("GET", "/v1/registry", {b"If-None-Match": BAD, b"Origin": BAD}),
    ("GET", "/v1/metrics/theme/estimates", {b"Authorization": b"Bearer " + BAD}),
    ("GET", "/v1/metrics/theme/estimates", {b"Authorization": BAD}),
    ("GET", "/v1/metrics/theme/estimates", {b"Authorization": TOKEN_HEADER, b"Accept": BAD}),
    ("GET", "/v1/metrics/theme/estimates?format=csv", {b"Authorization": TOKEN_HEADER, b"Accept": BAD}),
    ("POST", "/v1/metrics/theme/estimates", {b"Authorization": TOKEN_HEADER, b"Content-Type": BAD}),
    ("GET", "/v1/metrics/theme/compare?a=2020-01-01&b=2020-01-02", {b"Authorization": TOKEN_HEADER,
                                                                   b"Accept": BAD}),
    ("GET", "/ui/api/overview", {b"Authorization": b"Bearer " + BAD}),
    ("GET", "/ui/static/app.js", {b"If-None-Match": BAD, b"If-Modified-Since": BAD, b"Range": BAD}),
    ("GET", "/metrics", {b"Accept": BAD}),
    ("GET", "/readyz", {b"Accept": BAD}),
]


def test_no_header_that_is_not_utf8_gets_a_5xx_or_a_traceback(setup, caplog):
    """The same class of bug anywhere: each header the collector parses, sent as bytes that are
    not UTF-8, is answered below 500 and logs nothing at ERROR; an Origin that is not ASCII is
    never echoed in Access-Control-Allow-Origin, even with cors_origins = *."""
    registry = setup[1]
    caplog.set_level(logging.INFO)
    seen = []

    async def scenario():
        async with running(setup, cors_origins="*", relay_sources="") as (client, _):
            port = client.server.port
            for i, (method, path, headers) in enumerate(HEADER_CASES):
                body = batch(registry, 100 + i) if path == "/v1/reports" and method == "POST" else \
                    b'{"candidates": ["a"]}' if method == "POST" else b""
                hdrs = dict(headers)
                if method == "POST" and path == "/v1/reports":
                    hdrs.setdefault(b"Content-Type", b"application/msgpack")
                status, resp_headers, _ = await raw(port, method.encode(), path.encode(), hdrs, body)
                seen.append((method, path, list(headers), status))
                assert status < 500, seen[-1]
                allow_origin = resp_headers.get("access-control-allow-origin")
                assert allow_origin is None or allow_origin.isascii(), seen[-1]
    asyncio.run(scenario())
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, [r.getMessage() for r in errors]
    # the refusals among them are the ones a malformed value calls for
    statuses = [s for *_, s in seen]
    assert statuses[0] == 415 and statuses[2] == 415               # Content-Type, Content-Encoding
    assert statuses[8] == 403 and statuses[9] == 405               # preflight: origin, method
    assert statuses[12] == statuses[13] == 401 and statuses[18] == 401
