"""One fixed header set for every SDK (issue 26 §5): the exact bytes of every request the Python
SDK sends — a plain batch, a sealed one, the registry, the key configurations, a file domain —
recorded by a raw socket server on 127.0.0.1 and compared with conformance/vectors/headers.json,
which the TypeScript (test/headers.test.ts) and Kotlin (HeadersTest) SDKs' capture tests read
too. No header of http.client's own (Accept-Encoding: identity) and none of aiohttp's."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from pathlib import Path

import pytest

from client_sdk import TelemetryClient, ohttp
from client_sdk.aio import AsyncHTTPTransport
from client_sdk.transport import HTTPTransport

from .sdk_support import wait_until

ROOT = Path(__file__).resolve().parents[1]
VECTORS = json.loads((ROOT / "conformance/vectors/headers.json").read_text())
REQUESTS = {r["name"]: r for r in VECTORS["requests"]}
REGISTRY = json.dumps(json.loads((ROOT / "conformance/vectors/registry.json").read_text())["registry"]).encode()


def expected(name: str, authority: str, length: int | None = None, path: str | None = None) -> bytes:
    """The vector's request head with its placeholders filled in."""
    r = REQUESTS[name]
    lines = [f"{r['method']} {path or r['path']} HTTP/1.1"]
    for k, v in r["headers"]:
        lines.append(f"{k}: {v.replace('{authority}', authority).replace('{length}', str(length))}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class CaptureServer:
    """HTTP/1.1 on a raw socket: records each request's head byte for byte, answers by path."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.heads: list[bytes] = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                self.heads.append(head + b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                conn.sendall(self._answer(head.split(b" ")[1].decode()))

    @staticmethod
    def _answer(path: str) -> bytes:
        if path == "/v1/registry":
            ctype, body = "application/json", REGISTRY
        elif path.startswith("/v1/registry/domains/"):
            ctype, body = "text/plain", b"a\n"
        elif path == ohttp.GATEWAY_PATH:
            ctype, body = ohttp.KEYS_TYPE, b"\x00"
        else:
            ctype, body = "application/json", b'{"accepted": 1, "duplicate": false}'
        return (f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture
def server():
    s = CaptureServer()
    yield s
    s.close()


def test_the_vector_is_one_set_for_every_request():
    """What the vector promises: a constant User-Agent, no client identifier, nothing versioned."""
    for r in VECTORS["requests"]:
        names = [k.lower() for k, _ in r["headers"]]
        assert names[0] == "user-agent" and dict(r["headers"])["User-Agent"] == "ldpt-sdk"
        assert names[-3:] == ["host", "connection", "content-length"] if r["method"] == "POST" \
            else names[-2:] == ["host", "connection"]
        assert not {"cookie", "authorization", "x-client-id", "accept-language", "origin", "referer"} & set(names)


def test_every_request_of_the_python_transport_is_the_vector_byte_for_byte(server):
    authority = f"127.0.0.1:{server.port}"
    t = HTTPTransport(server.url)
    try:
        assert t.post_batch(b"\x80" * 37).status == 200
        assert t.request("POST", ohttp.GATEWAY_PATH, b"\x01" * 1079, ohttp.SEALED_HEADERS).status == 200
        assert t.get_registry().status == 200
        assert t.request("GET", ohttp.GATEWAY_PATH, None, ohttp.KEYS_HEADERS).status == 200
        assert t.get_domain("app").status == 200
    finally:
        t.close()
    assert server.heads == [expected("report", authority, 37), expected("sealed report", authority, 1079),
                            expected("registry", authority), expected("key configurations", authority),
                            expected("domain", authority, path="/v1/registry/domains/app")]


def test_a_client_fetching_its_registry_and_reporting_sends_exactly_the_vector(tmp_path, server):
    authority = f"127.0.0.1:{server.port}"
    client = TelemetryClient(server.url, state_dir=tmp_path / "state")
    try:
        assert client.wait_for_registry(10.0)
        assert client.report("crash", True)
        assert client.flush(10.0)
    finally:
        client.close(5.0)
    assert wait_until(lambda: len(server.heads) >= 2, 5)
    registry, report = server.heads[0], server.heads[1]
    assert registry == expected("registry", authority)
    length = int(report.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    assert report == expected("report", authority, length)


def test_the_async_transport_sends_the_same_lines_with_aiohttp_host_first(server):
    """aiohttp writes Host itself, first; every other line and its order is the vector's."""
    authority = f"127.0.0.1:{server.port}"

    async def main() -> None:
        t = AsyncHTTPTransport(server.url)
        try:
            assert (await t.apost_batch(b"\x80" * 37)).status == 200
        finally:
            await t.aclose()

    asyncio.run(main())
    (head,) = server.heads
    want = expected("report", authority, 37).split(b"\r\n")
    host = next(line for line in want if line.startswith(b"Host: "))
    assert head.split(b"\r\n") == [want[0], host, *(line for line in want[1:] if line != host)]
