"""Shared helpers of the collector tests: registries, batch bodies, real servers on 127.0.0.1."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
from aiohttp.test_utils import TestServer

from client_sdk.registry import MetricSpec, Registry, load_registry
from collector.app import STATE
from collector.connections import CollectorRunner
from sketches import server_half

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "test-token-0123456789abcdef"

REGISTRY_TOML = """
[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system"]
protocol = "grr"
epsilon = 1.0

[metrics.page]
kind = "categorical"
categories = [{cats}]
protocol = "oue"
epsilon = 2.0
"""


def write_registry(path: Path) -> Registry:
    """theme (grr, d=3) and page (oue, d=20)."""
    cats = ", ".join(f'"p{i:02d}"' for i in range(20))
    path.write_text(REGISTRY_TOML.format(cats=cats), encoding="utf-8")
    return load_registry(path)


def write_token(path: Path) -> Path:
    """The test query token, in a file only its owner can read (the collector insists)."""
    path.write_text(TOKEN + "\n", encoding="utf-8")
    path.chmod(0o600)
    return path


def wire_reports(spec: MetricSpec, indices: Sequence[int], rng: np.random.Generator) -> list[dict]:
    proto = server_half(spec)
    wire = proto.to_wire(proto.encode(np.asarray(indices, dtype=np.int64), rng))
    return [{"m": spec.name, "f": spec.fingerprint, "p": w} for w in wire]


def make_body(reports: list[dict], batch_id: bytes | None = None, **envelope: Any) -> bytes:
    doc = {"v": 1, "batch_id": batch_id if batch_id is not None else os.urandom(16), "reports": reports}
    doc.update(envelope)
    return msgpack.packb(doc)


def expected_sketch(spec: MetricSpec, bodies: Sequence[bytes]):
    """The sketch a collector must hold after committing each body exactly once."""
    proto = server_half(spec)
    sketch = proto.new_sketch()
    for body in bodies:
        objs = [r["p"] for r in msgpack.unpackb(body)["reports"] if r["m"] == spec.name]
        if objs:
            proto.accumulate(sketch, proto.from_wire(objs))
    return sketch


class CollectorTestServer(TestServer):
    """aiohttp's test server with the collector's guarded connections (as `ldpt serve` runs)."""

    async def _make_runner(self, **kwargs: Any) -> CollectorRunner:
        kwargs["handler_cancellation"] = False  # as in production: a hang-up is an error to count
        return CollectorRunner(self.app, guard=self.app[STATE].guard, **kwargs)


class Http:
    """A tiny keep-alive HTTP client (reconnects after errors)."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        m = re.match(r"http://([^:/]+):(\d+)", url)
        self.host, self.port, self.timeout = m.group(1), int(m.group(2)), timeout
        self.conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            self.conn.request(method, path, body=body, headers=headers or {})
            resp = self.conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        except (OSError, http.client.HTTPException):
            self.close()
            raise

    def post_batch(self, body: bytes, content_type: str = "application/msgpack"):
        return self.request("POST", "/v1/reports", body, {"Content-Type": content_type})

    def get_json(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        status, _, data = self.request("GET", path, headers=headers)
        return status, json.loads(data)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class Server:
    """`ldpt serve` as a subprocess; stderr is collected in ``log``."""

    def __init__(self, args: Sequence[str], cwd: Path, start_timeout: float = 60.0,
                 env: dict[str, str] | None = None,
                 url_pattern: str = r"listening on (http://[\d.]+:\d+)") -> None:
        cmd = [sys.executable, "-c", "from cli.main import main; main()", "serve", *args]
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("LDPT_")}, **(env or {})}
        self.proc = subprocess.Popen(cmd, cwd=cwd, stderr=subprocess.PIPE, text=True, env=env)
        self.log: list[str] = []
        self.url: str | None = None
        ready = threading.Event()

        def drain() -> None:
            for line in self.proc.stderr:
                self.log.append(line)
                m = re.search(url_pattern, line)
                if m and self.url is None:
                    self.url = m.group(1)
                    ready.set()
            ready.set()

        self._drain = threading.Thread(target=drain, daemon=True)
        self._drain.start()
        if not ready.wait(start_timeout) or self.url is None:
            self.kill()
            raise RuntimeError("ldpt serve did not start:\n" + "".join(self.log))

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def port(self) -> int:
        """The port the server reported it listens on (start it with --port 0 to get a free one)."""
        assert self.url is not None
        return int(self.url.rsplit(":", 1)[1])

    def terminate(self, timeout: float = 60.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._drain.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def text(self) -> str:
        return "".join(self.log)


@contextlib.contextmanager
def serving(args: Sequence[str], cwd: Path, env: dict[str, str] | None = None) -> Iterator[Server]:
    server = Server(args, cwd, env=env)
    try:
        yield server
    finally:
        if server.proc.poll() is None:
            server.kill()


def free_port() -> int:
    """A port nothing listens on right now: for "connection refused" tests only.

    Servers under test are never started on it (another process could take it between this
    call and the bind): they bind port 0 themselves and report the port they got in their
    listening line (``Server.port``, ``sdk_support.Collector.port``).
    """
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False
