"""Shared helpers of the SDK tests: a registry with every kind of metric, an aiohttp server
that speaks wire format v1 (backed by FakeCollector) with scriptable faults, a real
`ldpt serve` subprocess on a chosen port, and ``file_lock``: every SDK test module imports
it, so each of its tests runs twice — with the POSIX flock and with the portable lock
(``ByteRangeLock``, the Windows code path, on ``FlockMsvcrt``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from aiohttp import web

from client_sdk import files
from client_sdk.registry import Registry, parse_registry
from client_sdk.testing import FlockMsvcrt
from collector.testing import FakeCollector

from .collector_support import free_port  # noqa: F401 - one helper for both suites

REGISTRY_TOML = """
[metrics.theme]
kind = "categorical"
categories = ["light-secret-theme", "dark-secret-theme", "system-secret-theme"]
protocol = "grr"
epsilon = 1.0

[metrics.crash]
kind = "boolean"
protocol = "rr"
epsilon = 1.0
reports_per_window = 3
lifetime_epsilon = 5.0

[metrics.country]
kind = "categorical"
protocol = "oue"
epsilon = 2.0
reports_per_window = 1000
categories = [COUNTRIES]

[metrics.app]
kind = "categorical"
protocol = "olh"
epsilon = 2.0
reports_per_window = 1000
categories = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]

[metrics.site]
kind = "string"
protocol = "rappor"
bloom_bits = 64
hashes = 2
cohorts = 8
prob_f = 0.5
prob_p = 0.5
prob_q = 0.75
reports_per_window = 1000
lifetime_epsilon = 20.0
""".replace("COUNTRIES", ", ".join(f'"country-{i:02d}"' for i in range(40)))


@pytest.fixture(params=["posix", "portable"], autouse=True)
def file_lock(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run the test with flock(2), then with msvcrt-style byte-range locking (as on Windows)."""
    if request.param == "portable":
        monkeypatch.setattr(files, "LOCK", files.ByteRangeLock(FlockMsvcrt()))
    return files.LOCK


def make_registry(text: str = REGISTRY_TOML) -> Registry:
    return parse_registry(text, source="test-registry")


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def decode_body(body: bytes) -> dict[str, Any]:
    return msgpack.unpackb(body, raw=False)


class WireServer:
    """aiohttp on 127.0.0.1 in a background thread; POST /v1/reports goes to a FakeCollector.

    ``script`` is a list of actions consumed one per POST: an int status (with
    ``retry_after``), "drop" (close the connection without answering) or None (ingest).
    Every request's headers and body are recorded in ``seen``; the client address of every
    GET /v1/registry in ``registry_peers`` (one address = one kept-alive connection).
    """

    def __init__(self, collector: FakeCollector, port: int = 0) -> None:
        self.collector = collector
        self.port = port
        self.script: list[Any] = []
        self.retry_after: str | None = None
        self.seen: list[tuple[dict[str, str], bytes, float]] = []
        self.registry_peers: list[Any] = []     # client (host, port) of each GET /v1/registry
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _post(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append((dict(request.headers), body, time.monotonic()))
        action = self.script.pop(0) if self.script else None
        if action == "drop":
            request.transport.close()  # no response at all: the client sees a dropped connection
            await asyncio.sleep(0.05)
            return web.Response(status=500)
        if isinstance(action, int):
            headers = {"Retry-After": self.retry_after} if self.retry_after else {}
            return web.json_response({"type": "https://ldp-telemetry.dev/problems/scripted",
                                      "status": action, "detail": "scripted"}, status=action,
                                     headers=headers, content_type="application/problem+json")
        resp = self.collector.handle("POST", "/v1/reports", dict(request.headers), body)
        return web.Response(status=resp.status, body=resp.body,
                            content_type=resp.headers.get("content-type", "application/json"))

    async def _registry(self, request: web.Request) -> web.Response:
        self.registry_peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        resp = self.collector.handle("GET", "/v1/registry", dict(request.headers), b"")
        return web.Response(status=resp.status, body=resp.body, content_type="application/json")

    def start(self) -> WireServer:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application()
            app.router.add_post("/v1/reports", self._post)
            app.router.add_get("/v1/registry", self._registry)
            self._runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert ready.wait(10), "test server did not start"
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> WireServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def refusing_port() -> Iterator[int]:
    """A port of 127.0.0.1 held bound but never listening: connecting is refused, and nobody
    else can take the port meanwhile (unlike a free_port() that was closed again)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


LISTEN = re.compile(r"listening on (http://\S+)")


class Collector:
    """A real `ldpt serve` subprocess (SQLite store) on 127.0.0.1.

    ``port=0`` (the default): the first start binds an ephemeral port, read back from the
    "listening on" line, and a restart reuses it — no free_port() bind-close-reuse race.
    """

    def __init__(self, metrics: Path, db: Path, port: int = 0, log: Path | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        log = log if log is not None else db.with_suffix(".log")
        self.metrics, self.db, self.port, self.log = metrics, db, port, log
        self.extra = extra
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> Collector:
        cmd = [sys.executable, "-c", "import sys; from cli.main import main; sys.exit(main())", "serve",
               "--metrics", str(self.metrics), "--db", str(self.db), "--port", str(self.port), *self.extra]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LDPT_")}
        fh = self.log.open("a", encoding="utf-8")
        start_len = self.log.stat().st_size if self.log.exists() else 0
        self.proc = subprocess.Popen(cmd, stdout=fh, stderr=fh, env=env, start_new_session=True)
        fh.close()
        ok = wait_until(lambda: bool(LISTEN.search(self.log.read_text(errors="replace")[start_len:]))
                        or self.proc.poll() is not None, timeout)
        if not ok or self.proc.poll() is not None:
            raise RuntimeError(f"collector did not start: {self.log.read_text(errors='replace')}")
        found = LISTEN.search(self.log.read_text(errors="replace")[start_len:])
        assert found is not None
        self.port = int(found.group(1).rsplit(":", 1)[1].rstrip("/"))
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@contextlib.contextmanager
def collector(tmp_path: Path, registry_text: str = REGISTRY_TOML, extra: tuple[str, ...] = ()) -> Iterator[Collector]:
    metrics = tmp_path / "metrics.toml"
    metrics.write_text(registry_text, encoding="utf-8")
    col = Collector(metrics, tmp_path / "store.sqlite", 0, tmp_path / "collector.log", extra)
    col.start()
    try:
        yield col
    finally:
        col.stop()
