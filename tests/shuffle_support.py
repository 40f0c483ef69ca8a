"""Helpers of the shuffler's end-to-end tests and bench: a real `ldpt shuffle` subprocess, a
collector set up to take shuffled batches, a recording and fault-injecting HTTP proxy between the
two, and the SDK side (devices in shuffler mode, each envelope recorded as it is acknowledged):
Python devices through ``RecordingTransport``, Node devices of the built JavaScript SDK in a
``NodeDevices`` process (client_sdk/js/e2e/node-shuffle.mjs)."""

from __future__ import annotations

import base64
import http.client
import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collector import ohttp_keys
from collector.registry_http import registry_representation

from .sdk_support import Collector, wait_until

TOKEN = "shuffler-e2e-token-0123456789abcdef"
#: The Node driver of shuffler-mode devices (on the built package: `npm run build` in client_sdk/js).
NODE_DRIVER = Path(__file__).resolve().parent.parent / "client_sdk" / "js" / "e2e" / "node-shuffle.mjs"
LISTEN = re.compile(r"listening on (http://[^\s/]+)")


def shuffle_files(tmp_path: Path) -> tuple[Path, Path]:
    """Gateway keys and a shuffler token file (mode 0600) for a collector and its shuffler."""
    keys = tmp_path / "keys"
    if not keys.exists():
        ohttp_keys.generate(keys)
    token = tmp_path / "shuffler.token"
    token.write_text(TOKEN + "\n", encoding="utf-8")
    token.chmod(0o600)
    return keys, token


def collector_for_shuffling(tmp_path: Path, registry_text: str, *extra: str) -> Collector:
    """A real `ldpt serve` (not started) with gateway keys, the shuffler token and an access log."""
    keys, token = shuffle_files(tmp_path)
    metrics = tmp_path / "metrics.toml"
    metrics.write_text(registry_text, encoding="utf-8")
    return Collector(metrics, tmp_path / "store.sqlite", 0, tmp_path / "collector.log",
                     ("--ohttp-keys-dir", str(keys), "--shuffler-token-file", str(token), "--access-log", *extra))


class Shuffler:
    """A real `ldpt shuffle` subprocess on 127.0.0.1; a restart reuses its port."""

    def __init__(self, tmp_path: Path, collector_url: str, settings: dict[str, Any] | None = None,
                 port: int = 0) -> None:
        _, self.token = shuffle_files(tmp_path)
        self.db = tmp_path / "shuffler.sqlite"
        self.log = tmp_path / "shuffler.log"
        self.config = tmp_path / "shuffle.toml"
        # every simulated device is 127.0.0.1: no per-source rate limit in these tests
        values = {"rate_limit": 1e9, "rate_limit_burst": 1e9, "key_refresh": 2.0, "retry_max": 1.0,
                  **(settings or {})}
        self.config.write_text("".join(f"{k} = {_toml(v)}\n" for k, v in values.items()), encoding="utf-8")
        self.collector_url = collector_url
        self.port = port
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def envelopes_url(self) -> str:
        return self.url + "/v1/envelopes"

    def start(self, timeout: float = 60.0) -> Shuffler:
        cmd = [sys.executable, "-c", "import sys; from cli.main import main; sys.exit(main())", "shuffle",
               "--collector", self.collector_url, "--token-file", str(self.token), "--db", str(self.db),
               "--port", str(self.port), "--config", str(self.config)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LDPT_")}
        start_len = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("a", encoding="utf-8") as fh:
            self.proc = subprocess.Popen(cmd, stdout=fh, stderr=fh, env=env, start_new_session=True)
        ok = wait_until(lambda: bool(LISTEN.search(self.log.read_text(errors="replace")[start_len:]))
                        or self.proc.poll() is not None, timeout)
        if not ok or self.proc.poll() is not None:
            raise RuntimeError(f"shuffler did not start: {self.log.read_text(errors='replace')}")
        found = LISTEN.search(self.log.read_text(errors="replace")[start_len:])
        assert found is not None
        self.port = int(found.group(1).rsplit(":", 1)[1])
        return self

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, (int, float)) else f'"{value}"'


class Proxy:
    """A transparent HTTP proxy to one upstream (the collector), from its own source address.

    It records every POST /v1/shuffled-batches body in ``forwarded`` (the order the shuffler
    chose), and runs ``fault(phase)`` hooks: ``before`` (the request reached the proxy), ``sent``
    (the collector is reading or committing it) and ``after`` (the collector answered; the answer
    is not yet relayed) — ``before``/``after`` returning True drop the connection instead of
    relaying, as a crash of the shuffler or collector would."""

    def __init__(self, upstream: Callable[[], str], source: str = "127.0.0.3") -> None:
        self.upstream = upstream
        self.source = source
        self.forwarded: list[bytes] = []
        self.fault: Callable[[str], bool] = lambda phase: False
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _relay(self, method: str) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length) if length else None
                if method == "POST" and self.path == "/v1/shuffled-batches":
                    with proxy.lock:
                        proxy.forwarded.append(body or b"")
                    if proxy.fault("before"):
                        self.close_connection = True
                        return
                target = urllib.parse.urlsplit(proxy.upstream())
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=120,
                                                  source_address=(proxy.source, 0))
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() in ("content-type", "authorization", "accept")}
                    conn.request(method, self.path, body=body, headers=headers)
                    if method == "POST" and self.path == "/v1/shuffled-batches":
                        proxy.fault("sent")
                    resp = conn.getresponse()
                    data = resp.read()
                    status, ctype = resp.status, resp.getheader("Content-Type", "application/octet-stream")
                    retry = resp.getheader("Retry-After")
                except OSError:
                    status, ctype, data, retry = 502, "text/plain", b"upstream unreachable", None
                finally:
                    conn.close()
                if method == "POST" and self.path == "/v1/shuffled-batches" and proxy.fault("after"):
                    self.close_connection = True
                    return
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                if retry:
                    self.send_header("Retry-After", retry)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._relay("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._relay("POST")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="shuffle-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Proxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


class RecordingTransport:
    """Wraps the SDK's transport to the shuffler: the envelopes it acknowledged, in order, and the
    wall-clock time of each acknowledgement (``times``: merged with the Node devices' by time)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.acknowledged: list[bytes] = []
        self.times: list[float] = []
        self.lock = threading.Lock()

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> Any:
        resp = self.inner.request(method, path, body, headers)
        if method == "POST" and resp.status == 202 and body is not None:
            with self.lock:
                self.acknowledged.append(body)
                self.times.append(time.time())
        return resp

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def shuffler_keys(shuffler_url: str) -> bytes:
    """The key configuration the shuffler serves (the collector's), once it has fetched it."""
    got: list[bytes] = []

    def fetch() -> bool:
        try:
            with urllib.request.urlopen(shuffler_url + "/.well-known/ohttp-gateway", timeout=10) as resp:
                got.append(resp.read())
                return True
        except OSError:
            return False
    if not wait_until(fetch, 60):
        raise RuntimeError("the shuffler never served the collector's key configuration")
    return got[0]


class NodeDevices:
    """Node devices of the real JavaScript SDK in shuffler mode, many in one `node` process
    (client_sdk/js/e2e/node-shuffle.mjs): device j reports ``values[j]`` of ``metric`` once, sealed
    to the shuffler at ``shuffler_url``, to the pinned key configuration ``key_config`` (the
    ``application/ohttp-keys`` bytes the shuffler serves: ``shuffler_keys``); ``result()`` is the
    driver's JSON document, with ``envelopes`` as (time, bytes) pairs."""

    def __init__(self, tmp_path: Path, shuffler_url: str, key_config: bytes, registry: Any, metric: str,
                 values: list[str], concurrency: int = 50, envelopes: bool = True) -> None:
        n = len(list(tmp_path.glob("node-devices-*.json")))
        #: written by the driver when one of its POSTs to the shuffler failed (the shuffler was down)
        self.failed = tmp_path / f"node-devices-{n}.failed"
        spec = {"shuffler": shuffler_url, "keyConfig": base64.b64encode(key_config).decode(),
                "failedFile": str(self.failed),
                "registry": json.loads(registry_representation(registry).body),
                "metric": metric, "values": list(values), "concurrency": concurrency, "envelopes": envelopes}
        self.spec = tmp_path / f"node-devices-{n}.json"
        self.spec.write_text(json.dumps(spec), encoding="utf-8")
        self.proc = subprocess.Popen(["node", str(NODE_DRIVER), str(self.spec)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def result(self, timeout: float = 900.0) -> dict[str, Any]:
        out, err = self.proc.communicate(timeout=timeout)
        if self.proc.returncode != 0:
            raise RuntimeError(f"node-shuffle.mjs exited {self.proc.returncode}: {err.strip()[-2000:]}")
        doc = json.loads(out)
        doc["envelopes"] = [(t, base64.b64decode(e)) for t, e in doc.get("envelopes", [])]
        return doc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
