"""How batches reach the collector: an HTTP transport (stdlib http.client).

A transport does one thing: send a request and return the response, or raise
``TransportError`` when no HTTP response came back (connection refused or dropped,
timeout). Deciding what to retry is the uploader's job (``RetryPolicy``).

The test doubles (``MemoryTransport``, ``Fault``, ``RecordingCollector``) live in
``client_sdk.testing``, outside the production surface; ``FakeCollector``, which validates with
the collector's code, in the server distribution's ``collector.testing``.

Only fixed headers go on the wire, the same lines in the same order from every SDK
(``wire_headers``; docs/wire-format.md, "Request headers"; conformance/vectors/headers.json): a
constant User-Agent, the request's Accept (and Content-Type), Cache-Control, Pragma, Host,
Connection and Content-Length; no cookie, no client identifier, no SDK or OS version.
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .errors import TransportError

if TYPE_CHECKING:  # imported on the first request (HTTPTransport._connect)
    import http.client
    import ssl
    import urllib.parse

WIRE_VERSION = 1
BATCH_ID_BYTES = 16
REPORTS_PATH = "/v1/reports"
REGISTRY_PATH = "/v1/registry"
DOMAINS_PATH = "/v1/registry/domains/"
MSGPACK = "application/msgpack"
PROBLEM_BASE = "https://ldp-telemetry.dev/problems/"
USER_AGENT = "ldpt-sdk"             # the same for every client: no version, no platform
DEFAULT_TIMEOUT = 10.0
#: Each request's own header lines (between User-Agent and Host; ``wire_headers``).
REPORT_HEADERS = {"Accept": "application/json", "Content-Type": MSGPACK}
REGISTRY_HEADERS = {"Accept": "application/json"}
DOMAIN_HEADERS = {"Accept": "text/plain", "Accept-Encoding": "gzip"}
#: Lines only ``wire_headers`` writes: a caller's are ignored.
_FIXED = frozenset({"user-agent", "cache-control", "pragma", "host", "connection", "content-length"})


def wire_headers(headers: Mapping[str, str] | None, authority: str,
                 length: int | str | None) -> list[tuple[str, str]]:
    """The exact header lines of a request, in order: ``User-Agent: ldpt-sdk``, the request's
    own (Accept, Accept-Encoding, Content-Type), ``Cache-Control`` and ``Pragma: no-cache``,
    ``Host``, ``Connection: keep-alive`` and, with a body, ``Content-Length``. That is the order
    the JVM's HttpURLConnection writes (it appends the last five itself), so every SDK sends the
    same bytes (conformance/vectors/headers.json)."""
    lines = [("User-Agent", USER_AGENT)]
    lines += [(k, v) for k, v in (headers or {}).items() if k.lower() not in _FIXED]
    lines += [("Cache-Control", "no-cache"), ("Pragma", "no-cache"), ("Host", authority), ("Connection", "keep-alive")]
    if length is not None:
        lines.append(("Content-Length", str(length)))
    return lines


def authority_of(url: urllib.parse.SplitResult) -> str:
    """The Host header of ``url``: host, and the port unless it is the scheme's default."""
    host = url.hostname or ""
    host = f"[{host}]" if ":" in host else host
    default = 443 if url.scheme == "https" else 80
    return host if url.port in (None, default) else f"{host}:{url.port}"



@dataclasses.dataclass(frozen=True)
class Response:
    """An HTTP response: status, headers (lower-case names) and body."""

    status: int
    headers: Mapping[str, str]
    body: bytes = b""

    def json(self) -> Any:
        """The body parsed as JSON (None when it is not JSON)."""
        import json  # here: the SDK's import does not load json (docs/benchmarks.md)

        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError):
            return None

    @property
    def problem_type(self) -> str | None:
        """The slug of an RFC 9457 problem document's ``type`` (e.g. "fingerprint-mismatch"; for an
        IANA-registered type such as RFC 9458's ``…/http-problem-types#ohttp-key``, "ohttp-key")."""
        doc = self.json()
        if not isinstance(doc, dict) or not isinstance(doc.get("type"), str):
            return None
        return doc["type"].rsplit("/", 1)[-1].rsplit("#", 1)[-1]

    def retry_after(self, now: float | None = None) -> float | None:
        """Seconds to wait from ``Retry-After`` or the problem's ``retry_after`` (None: neither).

        The header is delay-seconds (digits, a decimal fraction allowed) or an HTTP-date (RFC 9110
        §10.2.3; it starts with a day name, and a date in the past means now); any other value is
        ignored, as is a ``retry_after`` member that is not a finite number: garbage from a proxy
        must not turn into "retry at once" (conformance/vectors/delivery.json)."""
        raw = self.headers.get("retry-after")
        if raw is not None:
            text = raw.strip()
            whole, dot, frac = text.partition(".")
            if whole.isascii() and whole.isdigit() and (not dot or (frac.isascii() and frac.isdigit())):
                return float(text)
            if text[:3].isascii() and text[:3].isalpha():
                import datetime  # an HTTP-date Retry-After is rare: parse it on demand
                import email.utils

                try:
                    when = email.utils.parsedate_to_datetime(text)
                except (TypeError, ValueError):
                    when = None
                if when is not None:
                    if when.tzinfo is None:      # an HTTP-date is always GMT
                        when = when.replace(tzinfo=datetime.timezone.utc)
                    return max(0.0, when.timestamp() - (time.time() if now is None else now))
        doc = self.json()
        value = doc.get("retry_after") if isinstance(doc, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                seconds = float(value)
            except OverflowError:        # an integer beyond float range: not a delay
                return None
            if math.isfinite(seconds):
                return max(0.0, seconds)
        return None


class Transport:
    """Interface: ``request(method, path, body, headers) -> Response`` (raises TransportError)."""

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> Response:
        raise NotImplementedError

    def post_batch(self, body: bytes) -> Response:
        """POST a wire-format batch to /v1/reports."""
        return self.request("POST", REPORTS_PATH, body, REPORT_HEADERS)

    def get_registry(self) -> Response:
        return self.request("GET", REGISTRY_PATH, None, REGISTRY_HEADERS)

    def get_domain(self, metric: str) -> Response:
        """GET a file domain's values (``/v1/registry/domains/{metric}``, gzip accepted)."""
        import urllib.parse

        return self.request("GET", DOMAINS_PATH + urllib.parse.quote(metric, safe=""), None, DOMAIN_HEADERS)

    def close(self) -> None:
        """Release connections."""


_LIVE_HTTP: weakref.WeakSet[HTTPTransport] = weakref.WeakSet()


def _http_exception() -> type[Exception]:
    import http.client

    return http.client.HTTPException


class HTTPTransport(Transport):
    """HTTP/1.1 with one keep-alive connection (http.client; no third-party dependency)."""

    def __init__(self, endpoint: str, *, timeout: float = DEFAULT_TIMEOUT,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        import urllib.parse  # here: loaded by the first HTTPTransport, not on the SDK's import

        url = urllib.parse.urlsplit(endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"endpoint {endpoint!r} must be an http:// or https:// URL")
        self.endpoint = endpoint
        self.scheme = url.scheme
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.prefix = url.path.rstrip("/")
        self.authority = authority_of(url)
        self.timeout = timeout
        self.ssl_context = ssl_context
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        _LIVE_HTTP.add(self)

    def _connect(self) -> http.client.HTTPConnection:
        # http.client and ssl (~10 ms of imports) load on the first request, in the uploader's
        # thread, not when the app imports the SDK (docs/guide-app-teams.md, "Installing").
        import http.client
        import ssl

        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                               context=self.ssl_context or ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> Response:
        lines = wire_headers(headers, self.authority, None if body is None else len(body))
        with self._lock:
            for attempt in (0, 1):
                reused = self._conn is not None
                if self._conn is None:
                    self._conn = self._connect()
                try:
                    # every line is ours: no Host or Accept-Encoding of http.client's own
                    self._conn.putrequest(method, self.prefix + path, skip_host=True, skip_accept_encoding=True)
                    for name, value in lines:
                        self._conn.putheader(name, value)
                    self._conn.endheaders(body)
                    resp = self._conn.getresponse()
                    data = resp.read()
                    out = Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
                    if resp.will_close:
                        self._drop()
                    return out
                except (OSError, _http_exception()) as exc:
                    self._drop()
                    # A kept-alive connection the server closed while idle fails at once: retry
                    # on a fresh one (safe: the collector dedupes by batch id). Not after a timeout.
                    if attempt == 0 and reused and not isinstance(exc, TimeoutError):  # socket.timeout is TimeoutError
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
