"""The collector in memory, for tests of apps and of the SDK: ``FakeCollector``.

It answers ``POST /v1/reports`` like the real collector: it decodes and validates every body
with the collector's own code (``collector.ingest.BatchDecoder`` and its RFC 9457 problems),
so the double cannot drift from the service, and accumulates the protocols' sketches (their
server halves, sketches/) so a test can estimate from what the SDK sent. On top it dedupes
batch ids (same id and body: duplicate; another body: 422) and fails on request
(``client_sdk.testing.Fault``: status codes with Retry-After, dropped connections,
acknowledgements lost after the commit). Given ``gateway_keys`` (``client_sdk.ohttp.PrivateKey``)
it is also the collector's Oblivious HTTP gateway: ``GET``/``POST /.well-known/ohttp-gateway``
publish the keys and open sealed batches, ingesting the batch inside as above and sealing the
answer (docs/wire-format.md).

It ships with the server distribution (ldp-telemetry), not the SDK: decoding and validating a
report is its protocol's server half, which the SDK wheel does not hold (issue 29). The SDK's
test doubles (``client_sdk.testing``: the transports, ``Fault``, ``RecordingCollector``) plug into
it, and ``client_sdk.testing.FakeCollector`` resolves to this class through the
``ldp_telemetry.testing`` entry point this distribution declares (pyproject.toml).
"""

from __future__ import annotations

import collections
import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgpack

from client_sdk import bhttp, ohttp
from client_sdk.ohttp import GATEWAY_PATH
from client_sdk.registry import Registry
from client_sdk.testing import Fault, accepted, domain_response, problem
from client_sdk.transport import DOMAINS_PATH, MSGPACK, REGISTRY_PATH, REPORTS_PATH, Response, TransportError
from sketches import server_half

from .ingest import BatchDecoder
from .problems import Problem

__all__ = ["FakeCollector"]


class FakeCollector:
    """Wire format v1 in memory: the collector's validation, batch-id dedupe, sketches."""

    def __init__(self, registry: Registry | None = None, *,
                 clock: Callable[[], float] = time.time, gateway_keys: Any = None) -> None:
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
        with self.lock:
            self.requests.append((method, path, dict(headers), body))
            posting = method == "POST" and path in (REPORTS_PATH, GATEWAY_PATH)
            fault = self.faults.popleft() if (self.faults and posting) else None
        if method == "GET" and path == REGISTRY_PATH and self.registry is not None:
            return Response(200, {"content-type": "application/json"},
                            json.dumps(self.registry.to_json()).encode())
        if method == "GET" and path.startswith(DOMAINS_PATH) and self.registry is not None:
            return domain_response(self.registry, path)
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
            batch_id, reports = self._decoder.envelope(doc)
            return batch_id, len(reports), {}
        window = time.strftime("%Y-%m-%d", time.gmtime(self._clock()))
        pending = self._decoder.decode(body, window)
        deltas = {(key.metric, key.fingerprint): sketch for key, sketch in pending.deltas.items()}
        return pending.batch_id, pending.reports, deltas

    def ingest(self, body: bytes) -> Response:
        """Decode, validate and commit one batch (all or nothing), as the collector does."""
        try:
            batch_id, reports, deltas = self._decode(body)
        except Problem as exc:
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
                return accepted(reports, True)
            self.committed[batch_id] = digest
            self.batches.append(msgpack.unpackb(body, raw=False))
            self.accepted_reports += reports
            for key, sketch in deltas.items():
                old = self.sketches.get(key)
                self.sketches[key] = sketch if old is None else old.merge(sketch)
        return accepted(reports, False)

    def sketch(self, metric: str) -> Any:
        """The accumulated sketch of a metric (under its current fingerprint)."""
        if self.registry is None:
            raise ValueError("FakeCollector() without a registry keeps no sketches")
        spec = self.registry.get(metric)
        sketch = self.sketches.get((metric, spec.fingerprint))
        if sketch is None:   # the protocol's empty sketch: its server half's
            sketch = server_half(spec).new_sketch()
        return sketch
