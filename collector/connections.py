"""Connection hygiene for one worker: header deadline, idle keep-alive reaping, connection cap.

aiohttp times out neither a request whose header lines drip in slowly nor an idle connection
that keeps sending a byte now and then, so a few thousand slow sockets could hold a worker's
file descriptors for ever. ``ConnectionGuard`` tracks every connection of the worker in one of
three phases and closes it when its phase's deadline passes:

    waiting   connected or between keep-alive requests, no byte of the next request yet:
              closed after ``keepalive_timeout`` (a fresh connection after ``header_timeout``)
    headers   the first byte of a request arrived: its headers must be complete (the handler
              started) within ``header_timeout``; closed with 408 otherwise
    busy      a handler runs; the body has its own limit (``body_read_timeout``, 408)

At most ``max_connections`` connections are open per worker, and, when ``max_per_address``
is set (the admin port), at most that many per client address. A connection beyond a cap
evicts an open connection that is not busy — never itself, the newest: beyond its address's
cap one of that address's own; beyond the worker's cap one of the address holding the most
connections. Among those, first one still sending its headers, then a new one that has sent
nothing, then an idle keep-alive one, nearest its deadline (the oldest) first. Slow sockets
therefore cannot lock real clients out: a flood from one address evicts its own sockets, not
a scraper's new connection before its request is parsed (issue 18); if every candidate is
busy the new one gets 503 and is closed. The clock is injectable so that the bookkeeping is testable
without waiting.

``GuardedHandler`` is aiohttp's protocol with the guard's hooks, HTTP/1.0 half-close support
(a client that ends its body by shutting its write side still gets the answer) and
problem+json bodies for the errors aiohttp's HTTP parser answers itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import (
    ContentEncodingError,
    ContentLengthError,
    HttpProcessingError,
    TransferEncodingError,
)
from aiohttp.http_parser import RawRequestMessage
from aiohttp.web_protocol import RequestHandler, RequestPayloadError

from .problems import Problem

log = logging.getLogger("ldpt.collector")

#: Parser errors about the body's encoding or framing rather than the request head.
BODY_FRAMING_ERRORS = (ContentEncodingError, ContentLengthError, TransferEncodingError)
WAITING, HEADERS, BUSY = "waiting", "headers", "busy"
#: Which connections the cap evicts first (lowest), when none is busy.
EVICTION_ORDER = {HEADERS: 0, "fresh": 1, WAITING: 2}
#: Seconds between sweeps: a quarter of the shortest deadline, within these bounds.
SWEEP_BOUNDS = (0.05, 1.0)
_ROOM = object()  # ``opened``: below every cap, nobody is evicted


class AddressFreeLog(logging.LoggerAdapter):
    """aiohttp's connection-level log without client addresses (docs/design.md, "Privacy rules of the house").

    aiohttp logs a malformed request as "Error handling request from <client address>" with a
    traceback; here it becomes one warning line without the address (a client's bad HTTP is
    not a collector failure), and any other error keeps its traceback but loses the address.
    """

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info")
        if isinstance(exc, (RequestPayloadError, ConnectionError)):
            # the unread rest of a body that failed to decode, or a client that hung up: it
            # was answered (or could not be) already; not a collector failure
            kwargs.pop("exc_info")
            level, msg, args = logging.DEBUG, "connection dropped: %s", (type(exc).__name__,)
        elif isinstance(msg, str) and msg.startswith("Error handling request from"):
            if isinstance(exc, HttpProcessingError):
                kwargs.pop("exc_info")
                level = min(level, logging.WARNING)
                # the reason only: aiohttp's message may quote the raw request bytes
                msg, args = "bad HTTP request: %s (HTTP %d)", (type(exc).__name__, exc.code)
            else:
                msg, args = "error handling a request", ()
        super().log(level, msg, *args, **kwargs)


def raw_problem(slug: str, detail: str) -> bytes:
    """A complete HTTP/1.1 response (problem+json, Connection: close) for a socket that has no
    aiohttp request to answer through."""
    problem = Problem(slug, detail)
    body = json.dumps(problem.to_dict()).encode()
    head = (f"HTTP/1.1 {problem.status} {problem.title}\r\nContent-Type: application/problem+json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode() + body


class ConnectionGuard:
    """Phase and deadline of every open connection of one worker (see the module docstring)."""

    def __init__(self, *, header_timeout: float, keepalive_timeout: float, max_connections: int,
                 max_per_address: int | None = None, clock: Callable[[], float] = time.monotonic,
                 on_close: Callable[[str], None] | None = None,
                 on_count: Callable[[int], None] | None = None,
                 on_error: Callable[[str], None] | None = None) -> None:
        self.header_timeout = header_timeout
        self.keepalive_timeout = keepalive_timeout
        self.max_connections = max_connections
        self.max_per_address = max_per_address
        self.clock = clock
        self.on_close = on_close or (lambda reason: None)
        self.on_count = on_count or (lambda count: None)  # open connections, after each sweep
        self.on_error = on_error or (lambda slug: None)  # errors aiohttp's HTTP parser answered
        self._conns: dict[Any, tuple[str, float]] = {}  # handler -> (phase, deadline)
        self._fresh: set[Any] = set()  # connections that have not started a request yet
        self._address: dict[Any, object] = {}  # handler -> client address (None if unknown)
        self._per_address: dict[object, int] = {}

    def __len__(self) -> int:
        return len(self._conns)

    def phase(self, conn: Any) -> str | None:
        entry = self._conns.get(conn)
        return None if entry is None else entry[0]

    # --- events -----------------------------------------------------------------------------------
    def opened(self, conn: Any, address: object = None) -> bool:
        """Register a new connection from ``address``; False when it must be refused (every
        candidate for eviction busy)."""
        full = None
        if self.max_per_address is not None and self._per_address.get(address, 0) >= self.max_per_address:
            full = address  # the address's own connections make room
        elif len(self._conns) < self.max_connections:
            full = _ROOM
        if full is not _ROOM:
            victim = self._victim(full)
            if victim is None:
                self.on_close("connection-limit")
                return False
            self._close(victim, "connection-limit")
        self._conns[conn] = (WAITING, self.clock() + self.header_timeout)
        self._fresh.add(conn)
        self._address[conn] = address
        self._per_address[address] = self._per_address.get(address, 0) + 1
        return True

    def _victim(self, address: object) -> Any | None:
        """The connection to evict: not busy; of ``address`` if given (not None), else of the
        address holding the most; slow headers, then silent new, then idle keep-alive ones;
        nearest deadline first within each."""
        ranked = [(-self._per_address[self._address[c]],
                   EVICTION_ORDER[phase if c not in self._fresh else "fresh"], deadline, n)
                  for n, (c, (phase, deadline)) in enumerate(self._conns.items())
                  if phase != BUSY and (address is None or self._address[c] == address)]
        return list(self._conns)[min(ranked)[3]] if ranked else None

    def data(self, conn: Any) -> None:
        """Bytes arrived: the first byte of a request starts its header deadline."""
        entry = self._conns.get(conn)
        if entry is not None and entry[0] == WAITING:
            self._conns[conn] = (HEADERS, self.clock() + self.header_timeout)

    def busy(self, conn: Any) -> None:
        """A handler started (the headers are complete): no guard deadline while it runs."""
        if conn in self._conns:
            self._conns[conn] = (BUSY, float("inf"))
            self._fresh.discard(conn)

    def idle(self, conn: Any) -> None:
        """The handler finished: wait for the next keep-alive request."""
        if conn in self._conns:
            self._conns[conn] = (WAITING, self.clock() + self.keepalive_timeout)

    def closed(self, conn: Any) -> None:
        if self._conns.pop(conn, None) is not None:
            address = self._address.pop(conn, None)
            left = self._per_address.get(address, 1) - 1
            if left > 0:
                self._per_address[address] = left
            else:
                self._per_address.pop(address, None)
        self._fresh.discard(conn)

    # --- enforcement ------------------------------------------------------------------------------
    def sweep(self) -> int:
        """Close every connection past its deadline; returns how many were closed."""
        now = self.clock()
        late = [(c, phase) for c, (phase, deadline) in self._conns.items() if deadline <= now]
        for conn, phase in late:
            if phase == HEADERS:  # a request began: say why it ends
                self._close(conn, "header-timeout", raw_problem(
                    "request-timeout", f"the request headers did not arrive within "
                    f"{self.header_timeout:g} s"))
            else:  # nothing to answer: close quietly, like an idle keep-alive connection
                self._close(conn, "header-timeout" if conn in self._fresh else "idle-timeout")
        self.on_count(len(self._conns))
        return len(late)

    def _close(self, conn: Any, reason: str, farewell: bytes = b"") -> None:
        self.closed(conn)
        self.on_close(reason)
        conn.abandon(farewell)

    @property
    def sweep_interval(self) -> float:
        low, high = SWEEP_BOUNDS
        return min(high, max(low, min(self.header_timeout, self.keepalive_timeout) / 4))

    async def run(self) -> None:
        """Sweep forever (a task of the worker's event loop)."""
        while True:
            await asyncio.sleep(self.sweep_interval)
            self.sweep()


class GuardedHandler(RequestHandler):
    """aiohttp's per-connection protocol, reporting to a ConnectionGuard."""

    def __init__(self, manager: web.Server, *, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.guard = guard

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        address = peer[0] if isinstance(peer, (tuple, list)) and peer else None
        if not self.guard.opened(self, address):
            self.abandon(raw_problem("overloaded", "too many open connections; retry later"))

    def data_received(self, data: bytes) -> None:
        self.guard.data(self)
        messages = getattr(self, "_messages", ())
        queued = len(messages)
        super().data_received(data)
        if len(messages) > queued and not isinstance(messages[-1][0], RawRequestMessage):
            # the parser failed inside a body (e.g. a deflate stream cut short): whoever reads
            # that body, now or once its handler starts, would wait for bytes that never come
            request = self._current_request
            bodies = [payload for msg, payload in messages if isinstance(msg, RawRequestMessage)]
            bodies += [request.content] if request is not None else []
            for body in bodies:
                if not body.is_eof():
                    body.set_exception(RequestPayloadError("the body cannot be decoded"))
        if messages:  # a complete request head is queued for a handler
            self.guard.busy(self)

    def eof_received(self) -> bool | None:
        """The client shut its write side. Idle: close. Mid-request: keep our write side open
        so the answer still goes out (an HTTP/1.0 client may end its request this way); a body
        still being read can never complete, so its reader learns the client hung up."""
        if self.guard.phase(self) in (None, WAITING):
            return None
        request = self._current_request
        if request is not None and not request.content.is_eof():
            request.content.set_exception(ConnectionResetError("the client closed its side mid-body"))
        return True

    def connection_lost(self, exc: BaseException | None) -> None:
        self.guard.closed(self)
        super().connection_lost(exc)

    def abandon(self, farewell: bytes) -> None:
        """Write ``farewell`` (may be empty) and close the connection."""
        transport = self.transport
        if transport is not None and not transport.is_closing():
            if farewell:
                transport.write(farewell)
            transport.close()  # flushes the farewell first
        self.force_close()

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        """Errors aiohttp's parser answers itself, as problem+json like every other error."""
        super().handle_error(request, status, exc, message)  # logs (AddressFreeLog), checks
        if status >= 500:
            problem = Problem("internal-error", "the collector hit an unexpected error; it was "
                              "logged", status=status)
        elif "Data after `Connection: close`" in str(exc):
            # llhttp's verdict on an HTTP/1.0 body without Content-Length (a request without
            # a length has no body, so the body is read as garbage after the request)
            problem = Problem("length-required", "send Content-Length (or Transfer-Encoding: "
                              "chunked over HTTP/1.1) with the body")
        elif isinstance(exc, BODY_FRAMING_ERRORS):
            problem = Problem("undecodable-body", f"the body cannot be decoded as sent "
                              f"({type(exc).__name__}); check Content-Encoding and the framing")
        else:
            problem = Problem("bad-http-request", f"the HTTP request is malformed "
                              f"({type(exc).__name__ if exc else 'unreadable'})", status=status)
        self.guard.on_error(problem.slug)
        out = problem.response()
        out.force_close()
        return out


class GuardedServer(web.Server):
    """aiohttp's protocol factory, making GuardedHandler connections."""

    def __init__(self, *args: Any, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard

    def __call__(self) -> RequestHandler:
        return GuardedHandler(self, guard=self.guard, loop=self._loop, **self._kwargs)


class CollectorRunner(web.AppRunner):
    """AppRunner whose connections are guarded by the app's ConnectionGuard."""

    def __init__(self, app: web.Application, *, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.guard = guard

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # same handler, request factory and arguments as aiohttp's, with the guarded protocol
        return GuardedServer(server.request_handler, request_factory=server.request_factory,
                             loop=server._loop, guard=self.guard, **server._kwargs)
