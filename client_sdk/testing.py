"""Test doubles for apps embedding the SDK: a collector in memory and transports to reach it.

Not part of the production surface (``client_sdk.__all__``): import them from here.

```python
from client_sdk.testing import FakeCollector, Fault, MemoryTransport
```

``FakeCollector`` answers ``POST /v1/reports`` like the real collector: it decodes and
validates every body with the collector's own code (``collector.ingest.BatchDecoder`` and
its RFC 9457 problems), so the double cannot drift from the service. That import happens
when a FakeCollector is built, never when the SDK is imported: the SDK must not load the
collector (tests/test_layering.py exempts exactly this module, for the collector and the
protocols' server halves in sketches/, which give an empty sketch). On top it dedupes batch ids
(same id and body: duplicate; another body: 422), accumulates sketches so tests can
estimate from what the SDK sent, and fails on request (``Fault``: status codes with
Retry-After, dropped connections, acknowledgements lost after the commit).
``MemoryTransport`` / ``AsyncMemoryTransport`` connect a client to it without a socket.
Given ``gateway_keys`` (``client_sdk.ohttp.PrivateKey``), it is also the collector's Oblivious
HTTP gateway: ``GET``/``POST /.well-known/ohttp-gateway`` publish the keys and open sealed
batches, ingesting the batch inside as above and sealing the answer (docs/wire-format.md).

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
import hashlib
import importlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgpack

from .aio import AsyncTransport
from .registry import Registry
from .transport import (
    DOMAINS_PATH,
    MSGPACK,
    PROBLEM_BASE,
    REGISTRY_PATH,
    REPORTS_PATH,
    USER_AGENT,
    Response,
    Transport,
    TransportError,
)

__all__ = ["AsyncMemoryTransport", "FakeCollector", "Fault", "FlockMsvcrt", "ManualClock", "MemoryTransport",
           "RecordingCollector", "problem"]


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


def _ok(accepted: int, duplicate: bool) -> Response:
    return Response(200, {"content-type": "application/json"},
                    json.dumps({"accepted": accepted, "duplicate": duplicate}).encode())


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


class FakeCollector:
    """Wire format v1 in memory: the collector's validation, batch-id dedupe, sketches."""

    def __init__(self, registry: Registry | None = None, *,
                 clock: Callable[[], float] = time.time, gateway_keys: Any = None) -> None:
        # Lazily (see the module docstring): the collector's own decoder and problem type.
        try:
            from collector.ingest import BatchDecoder
            from collector.problems import Problem
        except ImportError as exc:  # the SDK-only distribution has no collector
            raise ImportError("FakeCollector validates with the collector's code: install ldp-telemetry "
                              "(pip install -e . in a checkout), or use RecordingCollector") from exc

        self._problem_type = Problem
        self.registry = registry
        # Without a registry only the envelope is checked: every metric is accepted.
        self._decoder = BatchDecoder(registry if registry is not None else Registry({}, "none"))
        self._clock = clock
        self.lock = threading.Lock()
        self.faults: collections.deque[Fault] = collections.deque()
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []   # every request seen
        self.committed: dict[bytes, bytes] = {}                             # batch id -> digest
        self.batches: list[dict[str, Any]] = []                             # committed, decoded
        self.duplicates = 0
        self.accepted_reports = 0
        self.sketches: dict[tuple[str, str], Any] = {}
        self.respond: Callable[[bytes], Response | None] | None = None    # custom hook
        self.gateway_keys: list[Any] = list(gateway_keys or ())          # ohttp.PrivateKey, newest first
        self.envelopes: list[bytes] = []                                   # sealed bodies received

    def fail(self, *faults: Fault) -> None:
        """Queue faults for the next POSTs (one each)."""
        with self.lock:
            self.faults.extend(faults)

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Response:
        """Answer one request; raises TransportError for "drop"/"lost-ack" faults."""
        from .ohttp import GATEWAY_PATH

        with self.lock:
            self.requests.append((method, path, dict(headers), body))
            posting = method == "POST" and path in (REPORTS_PATH, GATEWAY_PATH)
            fault = self.faults.popleft() if (self.faults and posting) else None
        if method == "GET" and path == REGISTRY_PATH and self.registry is not None:
            return Response(200, {"content-type": "application/json"},
                            json.dumps(self.registry.to_json()).encode())
        if method == "GET" and path.startswith(DOMAINS_PATH) and self.registry is not None:
            return _domain_response(self.registry, path)
        if path == GATEWAY_PATH and self.gateway_keys:
            return self._gateway(method, headers, body, fault)
        if method != "POST" or path != REPORTS_PATH:
            return problem(404, "not-found", f"no route {method} {path}")
        if fault is not None and fault.kind == "drop":
            raise TransportError("connection dropped (scripted)")
        if fault is not None and fault.kind == "status":
            return problem(fault.status, fault.slug, "scripted failure", retry_after=fault.retry_after)
        if self.respond is not None:
            custom = self.respond(body)
            if custom is not None:
                return custom
        ctype = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
        if ctype.split(";")[0].strip() != MSGPACK:
            return problem(415, "unsupported-media-type", f"expected {MSGPACK}, got {ctype!r}")
        response = self.ingest(body)
        if fault is not None and fault.kind == "lost-ack":
            raise TransportError("connection dropped after the commit (scripted)")
        return response

    def _gateway(self, method: str, headers: Mapping[str, str], body: bytes, fault: Fault | None) -> Response:
        """The gateway's half (collector/gateway.py), in memory."""
        from . import bhttp, ohttp

        if method == "GET":
            return Response(200, {"content-type": ohttp.KEYS_TYPE},
                            ohttp.encode_key_configs(k.config for k in self.gateway_keys))
        if fault is not None and fault.kind == "drop":
            raise TransportError("connection dropped (scripted)")
        if fault is not None and fault.kind == "status":
            return problem(fault.status, fault.slug, "scripted failure", retry_after=fault.retry_after)
        ctype = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
        if ctype.split(";")[0].strip() != ohttp.REQUEST_TYPE:
            return problem(415, "unsupported-media-type", f"expected {ohttp.REQUEST_TYPE}, got {ctype!r}")
        with self.lock:
            self.envelopes.append(body)
        try:
            opened = ohttp.open_request({k.config.key_id: k for k in self.gateway_keys}, body)
        except ohttp.KeyProblem as exc:
            resp = problem(400, "ohttp-key", str(exc))
            doc = dict(json.loads(resp.body), type=ohttp.KEY_PROBLEM_TYPE)
            return Response(400, resp.headers, json.dumps(doc).encode())
        except ohttp.OhttpError as exc:
            return problem(400, "undecodable-envelope", str(exc))
        try:
            content = bhttp.decode_request(opened.message).content
        except bhttp.BinaryHTTPError as exc:
            inner = problem(400, "undecodable-body", str(exc))
        else:
            custom = self.respond(content) if self.respond is not None else None
            inner = custom if custom is not None else self.ingest(content)
        message = ohttp.inner_response(inner.status, list(inner.headers.items()), inner.body)
        answer = Response(200, {"content-type": ohttp.RESPONSE_TYPE}, ohttp.seal_response(opened, message))
        if fault is not None and fault.kind == "lost-ack":
            raise TransportError("connection dropped after the commit (scripted)")
        return answer

    def _decode(self, body: bytes) -> tuple[bytes, int, dict[tuple[str, str], Any]]:
        """(batch id, reports, sketch deltas) through the collector's decoder; raises Problem."""
        if self.registry is None:
            doc = msgpack.unpackb(body, raw=False, strict_map_key=True) if body else None
            batch_id, reports = self._decoder._envelope(doc)
            return batch_id, len(reports), {}
        window = time.strftime("%Y-%m-%d", time.gmtime(self._clock()))
        pending = self._decoder.decode(body, window)
        deltas = {(key.metric, key.fingerprint): sketch for key, sketch in pending.deltas.items()}
        return pending.batch_id, pending.reports, deltas

    def ingest(self, body: bytes) -> Response:
        """Decode, validate and commit one batch (all or nothing), as the collector does."""
        try:
            batch_id, reports, deltas = self._decode(body)
        except self._problem_type as exc:
            return problem(exc.status, exc.slug, exc.detail, retry_after=exc.retry_after, **exc.extra)
        except Exception as exc:  # noqa: BLE001 - registry=None: any undecodable body is a 400
            return problem(400, "undecodable-body", f"not msgpack: {exc}")
        digest = hashlib.sha256(body).digest()
        with self.lock:
            seen = self.committed.get(batch_id)
            if seen is not None:
                if seen != digest:
                    return problem(422, "batch-id-conflict", "batch id reused with a different body")
                self.duplicates += 1
                return _ok(reports, True)
            self.committed[batch_id] = digest
            self.batches.append(msgpack.unpackb(body, raw=False))
            self.accepted_reports += reports
            for key, sketch in deltas.items():
                old = self.sketches.get(key)
                self.sketches[key] = sketch if old is None else old.merge(sketch)
        return _ok(reports, False)

    def sketch(self, metric: str) -> Any:
        """The accumulated sketch of a metric (under its current fingerprint)."""
        if self.registry is None:
            raise ValueError("FakeCollector() without a registry keeps no sketches")
        spec = self.registry.get(metric)
        sketch = self.sketches.get((metric, spec.fingerprint))
        if sketch is None:   # the protocol's empty sketch: its server half's (lazily, as the collector's code)
            from sketches import server_half

            sketch = server_half(spec).new_sketch()
        return sketch


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
            return _domain_response(self.registry, path)
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
        return _ok(len(reports), duplicate)

    def reports(self, metric: str | None = None) -> list[Any]:
        """Every report received (its wire dict), optionally of one metric only."""
        with self.lock:
            return [r for b in self.batches for r in b["reports"] if metric is None or r.get("m") == metric]


def _domain_response(registry: Registry, path: str) -> Response:
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
    """A transport wired straight to a FakeCollector (or any handler): tests, benchmarks."""

    def __init__(self, collector: FakeCollector | RecordingCollector | None = None, *,
                 latency: float = 0.0) -> None:
        self.collector = collector if collector is not None else FakeCollector()
        self.latency = latency

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> Response:
        if self.latency:
            time.sleep(self.latency)
        hdrs = {"User-Agent": USER_AGENT, **(headers or {})}
        return self.collector.handle(method, path, hdrs, body or b"")


class AsyncMemoryTransport(MemoryTransport, AsyncTransport):
    """A FakeCollector behind both the sync and the async interface (tests)."""

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
