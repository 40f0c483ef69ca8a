"""Test doubles for apps embedding the SDK: transports to a collector in memory, and the doubles
that need no server code.

Not part of the production surface (``client_sdk.__all__``): import them from here.

```python
from client_sdk.testing import Fault, MemoryTransport, RecordingCollector
```

``MemoryTransport`` / ``AsyncMemoryTransport`` connect a client to a collector double without a
socket: any object with ``handle(method, path, headers, body) -> Response``.

``FakeCollector`` — the collector in memory, validating every body with the collector's own
decoder and accumulating sketches — ships with the server distribution (ldp-telemetry), as
``collector.testing.FakeCollector``: decoding and validating a report is its protocol's server
half, which the SDK wheel does not hold (issue 29). This module keeps a thin hook for it:
``client_sdk.testing.FakeCollector`` (and ``MemoryTransport()`` without a collector) resolve it
through the ``ldp_telemetry.testing`` entry point that distribution declares, so no module of
the SDK imports server code; with the SDK alone installed the hook raises ImportError naming
what to install. ``Fault`` scripts its failures (status codes with Retry-After, dropped
connections, acknowledgements lost after the commit); ``problem``, ``accepted`` and
``domain_response`` are the collector's answers, shaped as the real one's, for it and for
``RecordingCollector``.

``RecordingCollector`` is the double for an app that installed the SDK alone
(``ldp-telemetry-sdk``, without the collector): it accepts every batch and keeps its decoded
msgpack, loading neither the collector nor numpy, so a test can check what the app sent.

``ManualClock`` is a device's two clocks moved by hand — the wall clock (which the user or a
spoofed time server can set: ``set_wall``) and the elapsed clock (real time: ``advance``;
``reboot`` / ``restart`` start a new epoch) — for ``ClientOptions(clock=c, elapsed_clock=c.elapsed)``.
Tests never sleep.

``FlockMsvcrt`` gives ``client_sdk.files.ByteRangeLock`` (the Windows lock) msvcrt's
contract on POSIX, so the SDK tests run the Windows locking code here as well.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import errno
import importlib
import json
import threading
import time
from collections.abc import Mapping
from typing import Any

import msgpack

from .aio import AsyncTransport
from .registry import Registry
from .transport import (
    DOMAINS_PATH,
    PROBLEM_BASE,
    REGISTRY_PATH,
    REPORTS_PATH,
    USER_AGENT,
    Response,
    Transport,
)

__all__ = ["AsyncMemoryTransport", "Fault", "FlockMsvcrt", "ManualClock", "MemoryTransport", "RecordingCollector",
           "accepted", "domain_response", "problem", "server_double"]

#: The entry-point group where the server distribution names its test doubles (``FakeCollector``).
DOUBLES_GROUP = "ldp_telemetry.testing"
#: The doubles the hook resolves there (``client_sdk.testing.FakeCollector``).
SERVER_DOUBLES = ("FakeCollector",)


class ManualClock:
    """A wall clock and an elapsed clock, moved by hand.

    ``clock()`` (call the object) is the wall clock in POSIX seconds; ``elapsed()`` the elapsed
    reading (epoch, whole seconds) of client_sdk.device_clock. ``advance`` moves both (real
    time passes), ``set_wall`` only the wall clock (it is set, rightly or wrongly), ``reboot``
    starts a new boot epoch (its clock at ``uptime``), ``restart`` is an alias of ``reboot``
    for a platform whose elapsed clock is per process.
    """

    def __init__(self, wall: float, epoch: str = "boot:manual-0", uptime: float = 1_000.0) -> None:
        self.wall = float(wall)
        self.epoch = epoch
        self.uptime = float(uptime)
        self._boots = 0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.wall

    def elapsed(self) -> tuple[str, int]:
        with self._lock:
            return self.epoch, int(self.uptime // 1)

    def advance(self, seconds: float) -> None:
        """Real time passes: both clocks move."""
        with self._lock:
            self.wall += seconds
            self.uptime += seconds

    def set_wall(self, wall: float) -> None:
        """The wall clock is set (no real time passes)."""
        with self._lock:
            self.wall = float(wall)

    def reboot(self, uptime: float = 30.0) -> None:
        """A new boot (or process, where the elapsed clock is per process): a new epoch."""
        with self._lock:
            self._boots += 1
            prefix = self.epoch.split(":", 1)[0]
            self.epoch = f"{prefix}:manual-{self._boots}"
            self.uptime = float(uptime)

    restart = reboot


def problem(status: int, slug: str, detail: str, **members: Any) -> Response:
    """An RFC 9457 problem response, shaped as the real collector's."""
    doc = {"type": PROBLEM_BASE + slug, "title": slug.replace("-", " "), "status": status,
           "detail": detail, **{k: v for k, v in members.items() if v is not None}}
    headers = {"content-type": "application/problem+json"}
    if members.get("retry_after") is not None:
        headers["retry-after"] = str(members["retry_after"])
    return Response(status, headers, json.dumps(doc).encode())


def accepted(reports: int, duplicate: bool) -> Response:
    """The collector's 200 to a batch: how many reports it accepted, and whether the batch id was
    already committed (a retry)."""
    return Response(200, {"content-type": "application/json"},
                    json.dumps({"accepted": reports, "duplicate": duplicate}).encode())


def server_double(name: str, group: str = DOUBLES_GROUP) -> Any:
    """The test double ``name`` the server distribution registers under the entry-point ``group``
    (ldp-telemetry's ``FakeCollector``: collector.testing), loaded on first use; ImportError naming
    what to install when none is registered (the SDK alone, or an editable install from before the
    entry point: ``pip install -e .`` again)."""
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group=group) if ep.name == name]
    if not found:
        raise ImportError(f"{name} needs the collector's code, which the SDK does not ship: install "
                          f"ldp-telemetry (pip install -e . in a checkout) and use "
                          f"client_sdk.testing.{name} or collector.testing.{name}; with the SDK alone, "
                          "use RecordingCollector")
    return found[0].load()


def __getattr__(name: str) -> Any:
    """``client_sdk.testing.FakeCollector``: the server distribution's, through ``server_double``."""
    if name in SERVER_DOUBLES:
        return server_double(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclasses.dataclass
class Fault:
    """One scripted failure of FakeCollector.

    kind: "status" (answer ``status`` with optional Retry-After), "drop" (no response, nothing
    committed) or "lost-ack" (commit the batch, then drop the connection: the retry must be
    counted as a duplicate).
    """

    kind: str = "status"
    status: int = 503
    retry_after: float | None = None
    slug: str = "overloaded"

    def __post_init__(self) -> None:
        # A fault FakeCollector cannot act on would be consumed silently: the test would pass
        # without the failure it meant to inject.
        if self.kind not in ("status", "drop", "lost-ack"):
            raise ValueError(f"Fault kind {self.kind!r}: use \"status\", \"drop\" or \"lost-ack\"")
        if self.kind == "status" and not 400 <= self.status <= 599:
            raise ValueError(f"Fault status {self.status}: a scripted failure is an HTTP 4xx or 5xx")


class RecordingCollector:
    """Accepts every ``POST /v1/reports`` (200) and keeps each batch, decoded: no validation.

    For SDK-only installs (no collector, no numpy). ``reports(metric)`` lists the wire payloads
    sent for a metric; a duplicate batch id (a retry) is answered as such and kept once.
    Use ``FakeCollector`` where the collector is installed: it validates like the real one.
    """

    def __init__(self, registry: Registry | None = None) -> None:
        self.registry = registry
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.batches: list[dict[str, Any]] = []
        self._ids: set[bytes] = set()

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Response:
        with self.lock:
            self.requests.append((method, path, dict(headers), body))
        if method == "GET" and path == REGISTRY_PATH and self.registry is not None:
            return Response(200, {"content-type": "application/json"},
                            json.dumps(self.registry.to_json()).encode())
        if method == "GET" and path.startswith(DOMAINS_PATH) and self.registry is not None:
            return domain_response(self.registry, path)
        if method != "POST" or path != REPORTS_PATH:
            return problem(404, "not-found", f"no route {method} {path}")
        try:
            doc = msgpack.unpackb(body, raw=False)
            batch_id, reports = bytes(doc["batch_id"]), doc["reports"]
        except Exception as exc:  # noqa: BLE001 - any undecodable body is the client's bug: a 400
            return problem(400, "undecodable-body", f"not a batch: {exc}")
        with self.lock:
            duplicate = batch_id in self._ids
            if not duplicate:
                self._ids.add(batch_id)
                self.batches.append(doc)
        return accepted(len(reports), duplicate)

    def reports(self, metric: str | None = None) -> list[Any]:
        """Every report received (its wire dict), optionally of one metric only."""
        with self.lock:
            return [r for b in self.batches for r in b["reports"] if metric is None or r.get("m") == metric]


def domain_response(registry: Registry, path: str) -> Response:
    """GET /v1/registry/domains/{metric}: a file domain's values, one per line, as the collector."""
    import urllib.parse

    from .domains import domain_text

    spec = registry.metrics.get(urllib.parse.unquote(path[len(DOMAINS_PATH):]))
    source = getattr(spec, "domain_source", None)
    if spec is None or source is None or source.kind != "file":
        return problem(404, "no-domain-file", f"no domain file at {path}")
    return Response(200, {"content-type": "text/plain; charset=utf-8"},
                    domain_text(spec.categories).encode("utf-8"))


class MemoryTransport(Transport):
    """A transport wired straight to a collector double (any object with ``handle``: FakeCollector,
    RecordingCollector): tests, benchmarks. Without one, a FakeCollector (``server_double``)."""

    def __init__(self, collector: Any = None, *, latency: float = 0.0) -> None:
        self.collector = collector if collector is not None else server_double("FakeCollector")()
        self.latency = latency

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> Response:
        if self.latency:
            time.sleep(self.latency)
        hdrs = {"User-Agent": USER_AGENT, **(headers or {})}
        return self.collector.handle(method, path, hdrs, body or b"")


class AsyncMemoryTransport(MemoryTransport, AsyncTransport):
    """A collector double behind both the sync and the async interface (tests)."""

    async def arequest(self, method: str, path: str, body: bytes | None = None,
                       headers: Mapping[str, str] | None = None) -> Response:
        if self.latency:
            await asyncio.sleep(self.latency)
        hdrs = {"User-Agent": USER_AGENT, **(headers or {})}
        return self.collector.handle(method, path, hdrs, body or b"")


class FlockMsvcrt:
    """``msvcrt.locking``'s contract on POSIX flock(2), to test ``ByteRangeLock`` off Windows.

    ``locking(fd, LK_NBLCK, 1)`` raises OSError(EACCES) while another open file holds the
    lock, as msvcrt does for another handle; ``LK_UNLCK`` releases it. Like msvcrt, and unlike
    POSIX record locks, a second open in the same process is excluded too.
    """

    LK_UNLCK, LK_LOCK, LK_NBLCK = 0, 1, 2

    def __init__(self) -> None:
        self._fcntl = importlib.import_module("fcntl")
        self.calls = collections.Counter[int]()

    def locking(self, fd: int, mode: int, nbytes: int) -> None:
        if nbytes != 1:
            raise ValueError("the SDK locks exactly one byte")
        self.calls[mode] += 1
        if mode == self.LK_UNLCK:
            self._fcntl.flock(fd, self._fcntl.LOCK_UN)
            return
        try:
            self._fcntl.flock(fd, self._fcntl.LOCK_EX | self._fcntl.LOCK_NB)
        except BlockingIOError:
            raise OSError(errno.EACCES, "the region is locked by another handle") from None
