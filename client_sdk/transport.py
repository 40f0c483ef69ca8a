"""How batches reach the collector: an HTTP transport (stdlib http.client) and in-memory twins.

A transport does one thing: send a request and return the response, or raise
``TransportError`` when no HTTP response came back (connection refused or dropped,
timeout). Deciding what to retry is the uploader's job (``RetryPolicy``).

``FakeCollector`` is a collector in memory that speaks wire format v1 (docs/wire-format.md):
it decodes the batch, checks metric names and fingerprints, validates each payload with its
protocol, dedupes batch ids (same id + same body -> duplicate, other body -> 422), and
accumulates sketches, so tests can estimate from what the SDK sent. It can be told to fail
(status codes with Retry-After, dropped connections, acks lost after the commit).
``MemoryTransport`` connects a client to it without a socket.

Only fixed headers go on the wire: Content-Type, Content-Length, Host and a constant
User-Agent; no cookie, no client identifier, no SDK or OS version.
"""

from __future__ import annotations

import collections
import dataclasses
import email.utils
import hashlib
import http.client
import json
import math
import os
import socket
import ssl
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import msgpack

from .errors import LdptError, TransportError, UnknownMetricError
from .registry import Registry

WIRE_VERSION = 1
BATCH_ID_BYTES = 16
REPORTS_PATH = "/v1/reports"
REGISTRY_PATH = "/v1/registry"
MSGPACK = "application/msgpack"
PROBLEM_BASE = "https://ldp-telemetry.dev/problems/"
USER_AGENT = "ldpt-sdk"             # the same for every client: no version, no platform
DEFAULT_TIMEOUT = 10.0



@dataclasses.dataclass(frozen=True)
class Response:
    """An HTTP response: status, headers (lower-case names) and body."""

    status: int
    headers: Mapping[str, str]
    body: bytes = b""

    def json(self) -> Any:
        """The body parsed as JSON (None when it is not JSON)."""
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError):
            return None

    @property
    def problem_type(self) -> str | None:
        """The slug of an RFC 9457 problem document's ``type`` (e.g. "fingerprint-mismatch")."""
        doc = self.json()
        if not isinstance(doc, dict) or not isinstance(doc.get("type"), str):
            return None
        return doc["type"].rsplit("/", 1)[-1]

    def retry_after(self, now: float | None = None) -> float | None:
        """Seconds to wait from ``Retry-After`` (delta-seconds or HTTP-date) or ``retry_after``."""
        raw = self.headers.get("retry-after")
        if raw is not None:
            raw = raw.strip()
            try:
                return max(0.0, float(raw))
            except ValueError:
                try:
                    when = email.utils.parsedate_to_datetime(raw)
                except (TypeError, ValueError):
                    when = None
                if when is not None:
                    return max(0.0, when.timestamp() - (time.time() if now is None else now))
        doc = self.json()
        if isinstance(doc, dict) and isinstance(doc.get("retry_after"), (int, float)) \
                and not isinstance(doc.get("retry_after"), bool):
            try:
                return max(0.0, float(doc["retry_after"]))
            except OverflowError:  # an integer beyond float range: "very long" (capped by RetryPolicy)
                return math.inf if doc["retry_after"] > 0 else 0.0
        return None


class Transport:
    """Interface: ``request(method, path, body, headers) -> Response`` (raises TransportError)."""

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> Response:
        raise NotImplementedError

    def post_batch(self, body: bytes) -> Response:
        """POST a wire-format batch to /v1/reports."""
        return self.request("POST", REPORTS_PATH, body, {"Content-Type": MSGPACK})

    def get_registry(self) -> Response:
        return self.request("GET", REGISTRY_PATH, None, {"Accept": "application/json"})

    def close(self) -> None:
        """Release connections."""


_LIVE_HTTP: weakref.WeakSet[HTTPTransport] = weakref.WeakSet()


class HTTPTransport(Transport):
    """HTTP/1.1 with one keep-alive connection (http.client; no third-party dependency)."""

    def __init__(self, endpoint: str, *, timeout: float = DEFAULT_TIMEOUT,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        url = urllib.parse.urlsplit(endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"endpoint {endpoint!r} must be an http:// or https:// URL")
        self.endpoint = endpoint
        self.scheme = url.scheme
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.prefix = url.path.rstrip("/")
        self.timeout = timeout
        self.ssl_context = ssl_context
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        _LIVE_HTTP.add(self)

    def _connect(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                               context=self.ssl_context or ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> Response:
        hdrs = {"User-Agent": USER_AGENT, **(headers or {})}
        with self._lock:
            for attempt in (0, 1):
                reused = self._conn is not None
                if self._conn is None:
                    self._conn = self._connect()
                try:
                    self._conn.request(method, self.prefix + path, body=body, headers=hdrs)
                    resp = self._conn.getresponse()
                    data = resp.read()
                    out = Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
                    if resp.will_close:
                        self._drop()
                    return out
                except (OSError, http.client.HTTPException) as exc:
                    self._drop()
                    # A kept-alive connection the server closed while idle fails at once: retry
                    # on a fresh one (safe: the collector dedupes by batch id). Not after a timeout.
                    if attempt == 0 and reused and not isinstance(exc, (TimeoutError, socket.timeout)):
                        continue
                    raise TransportError(f"{self.endpoint}: {type(exc).__name__}: {exc}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except OSError:
                pass
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _reset_after_fork(self) -> None:
        """In a forked child: never write on the parent's socket."""
        self._lock = threading.Lock()
        self._conn = None


def _http_after_fork_child() -> None:
    for transport in list(_LIVE_HTTP):
        transport._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_http_after_fork_child)


# --- the collector in memory --------------------------------------------------------------------------

def problem(status: int, slug: str, detail: str, **members: Any) -> Response:
    """An RFC 9457 problem response, as the real collector sends."""
    doc = {"type": PROBLEM_BASE + slug, "title": slug.replace("-", " "), "status": status,
           "detail": detail, **{k: v for k, v in members.items() if v is not None}}
    headers = {"content-type": "application/problem+json"}
    if "retry_after" in members:
        headers["retry-after"] = str(members["retry_after"])
    return Response(status, headers, json.dumps(doc).encode())


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


class FakeCollector:
    """Wire format v1 in memory: validate, dedupe, accumulate (see the module docstring)."""

    def __init__(self, registry: Registry | None = None) -> None:
        self.registry = registry
        self.lock = threading.Lock()
        self.faults: collections.deque[Fault] = collections.deque()
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []   # every request seen
        self.committed: dict[bytes, bytes] = {}                             # batch id -> digest
        self.batches: list[dict[str, Any]] = []                             # committed, decoded
        self.duplicates = 0
        self.accepted_reports = 0
        self.sketches: dict[tuple[str, str], Any] = {}
        self.respond: Callable[[bytes], Response | None] | None = None    # custom hook

    def fail(self, *faults: Fault) -> None:
        """Queue faults for the next requests (one each)."""
        with self.lock:
            self.faults.extend(faults)

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Response:
        """Answer one request; raises TransportError for "drop"/"lost-ack" faults."""
        with self.lock:
            self.requests.append((method, path, dict(headers), body))
            fault = self.faults.popleft() if (self.faults and path == REPORTS_PATH) else None
        if method == "GET" and path == REGISTRY_PATH and self.registry is not None:
            return Response(200, {"content-type": "application/json"},
                            json.dumps(self.registry.to_json()).encode())
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

    def ingest(self, body: bytes) -> Response:
        """Decode, validate and commit one batch (all or nothing)."""
        try:
            doc = msgpack.unpackb(body, raw=False, strict_map_key=True)
        except Exception as exc:  # noqa: BLE001 - any decoding failure is a 400
            return problem(400, "undecodable-body", f"not msgpack: {exc}")
        if not isinstance(doc, dict):
            return problem(422, "invalid-batch", "the body must be a msgpack map")
        if doc.get("v") != WIRE_VERSION:
            return problem(422, "unsupported-version", f"wire format version {doc.get('v')!r}; expected 1")
        batch_id, reports = doc.get("batch_id"), doc.get("reports")
        if not isinstance(batch_id, bytes) or len(batch_id) != BATCH_ID_BYTES:
            return problem(422, "invalid-batch", "batch_id must be 16 bytes", field="batch_id")
        if not isinstance(reports, list) or not reports:
            return problem(422, "invalid-batch", "reports must be a non-empty array", field="reports")
        digest = hashlib.sha256(body).digest()
        with self.lock:
            seen = self.committed.get(batch_id)
        if seen is not None:
            if seen != digest:
                return problem(422, "batch-id-conflict", "batch id reused with a different body")
            with self.lock:
                self.duplicates += 1
            return Response(200, {"content-type": "application/json"},
                            json.dumps({"accepted": len(reports), "duplicate": True}).encode())
        deltas: dict[tuple[str, str], Any] = {}
        if self.registry is not None:
            by_metric: dict[str, list[tuple[int, Any]]] = {}
            for i, rep in enumerate(reports):
                if not isinstance(rep, dict) or set(rep) != {"m", "f", "p"}:
                    return problem(422, "invalid-report", "a report is a map {m, f, p}", report_index=i)
                try:
                    spec = self.registry.get(rep["m"])
                except (UnknownMetricError, TypeError):
                    return problem(422, "unknown-metric", f"unknown metric {rep['m']!r}",
                                   report_index=i, metric=str(rep["m"]))
                if rep["f"] != spec.fingerprint:
                    return problem(422, "fingerprint-mismatch", f"metric {spec.name!r} has fingerprint "
                                   f"{spec.fingerprint}, report has {rep['f']!r}", report_index=i,
                                   metric=spec.name, field="f")
                by_metric.setdefault(spec.name, []).append((i, rep["p"]))
            for name, entries in by_metric.items():
                spec = self.registry.get(name)
                proto = spec.protocol_impl
                try:
                    payloads = proto.from_wire([p for _, p in entries])
                    proto.validate(payloads)
                except LdptError as exc:
                    idx = getattr(exc, "index", None)
                    where = entries[idx][0] if isinstance(idx, int) and idx < len(entries) else None
                    return problem(422, "invalid-report", str(exc), report_index=where, metric=name)
                sketch = proto.new_sketch()
                proto.accumulate(sketch, payloads)
                deltas[(name, spec.fingerprint)] = sketch
        with self.lock:
            if batch_id in self.committed:  # a concurrent retry committed it first
                self.duplicates += 1
                return Response(200, {"content-type": "application/json"},
                                json.dumps({"accepted": len(reports), "duplicate": True}).encode())
            self.committed[batch_id] = digest
            self.batches.append(doc)
            self.accepted_reports += len(reports)
            for key, sketch in deltas.items():
                if key in self.sketches:
                    self.sketches[key] = self.sketches[key].merge(sketch)
                else:
                    self.sketches[key] = sketch
        return Response(200, {"content-type": "application/json"},
                        json.dumps({"accepted": len(reports), "duplicate": False}).encode())

    def sketch(self, metric: str) -> Any:
        """The accumulated sketch of a metric (under its current fingerprint)."""
        assert self.registry is not None
        spec = self.registry.get(metric)
        return self.sketches.get((metric, spec.fingerprint)) or spec.protocol_impl.new_sketch()


class MemoryTransport(Transport):
    """A transport wired straight to a FakeCollector (or any handler): tests, benchmarks."""

    def __init__(self, collector: FakeCollector | None = None, *, latency: float = 0.0) -> None:
        self.collector = collector if collector is not None else FakeCollector()
        self.latency = latency

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> Response:
        if self.latency:
            time.sleep(self.latency)
        hdrs = {"User-Agent": USER_AGENT, **(headers or {})}
        return self.collector.handle(method, path, hdrs, body or b"")
