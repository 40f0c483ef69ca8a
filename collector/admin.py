"""The admin port: /healthz, /readyz and /metrics outside the ingest path.

Under ingest overload a worker's event loop has a long run queue, so a scrape on the main
port waits behind hundreds of ingest requests (seconds, measured). With ``admin_port`` set,
each worker also serves the three monitoring routes on that port from a thread with its own
event loop: the scrape only has to win the GIL, which the interpreter hands over every few
milliseconds, never a place in the ingest queue (bench/robustness.py measures the p99).

The admin thread never touches the store: /readyz answers from the readiness probe that the
worker's loop runs every second (``CollectorState.readiness``), and is 503 when that result
is older than ``STALE_AFTER`` seconds (a wedged loop is not ready). /metrics renders the
shared telemetry table, which is safe to read while workers write it (a scrape may see a
counter one increment early or late, never a torn series).

The admin port has its own ``ConnectionGuard`` (on the thread's loop) with the main port's
``header_timeout`` and ``keepalive_timeout``, at most ``ADMIN_MAX_CONNECTIONS`` sockets and
``ADMIN_MAX_PER_ADDRESS`` per client address, so slow or idle sockets cannot hold it (and the process's file
descriptors) either, nor crowd out a scraper from another address.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from typing import Any

from aiohttp import web

from . import app as collector_app
from .connections import CollectorRunner, ConnectionGuard
from .problems import Problem

#: /readyz on the admin port fails when the last readiness probe is older than this.
STALE_AFTER = 10.0
#: Open connections the admin port keeps per worker (a few scrapers and health checkers).
ADMIN_MAX_CONNECTIONS = 64
#: ... and per client address: a socket flood from one address evicts its own connections,
#: never a scraper's from another address (issue 18: 600 slow sockets let 4 of 75 scrapes in).
ADMIN_MAX_PER_ADDRESS = 8


async def admin_readyz(request: web.Request) -> web.Response:
    state = request.app[collector_app.STATE]
    ok, why, at = state.readiness
    if state.draining:
        return Problem("shutting-down", "the collector is shutting down", retry_after=1).response()
    if not ok or time.monotonic() - at > STALE_AFTER:
        detail = why if not ok else f"the readiness probe has not run for {STALE_AFTER:g} s"
        return Problem("store-unavailable", detail, retry_after=5).response()
    body = {"status": "ready", "store": state.store.description,
            "schema_version": collector_app.SCHEMA_VERSION}
    return web.Response(body=json.dumps(body).encode(), content_type="application/json")


class AdminServer:
    """Serves the monitoring routes of one worker on ``sock`` from a daemon thread."""

    def __init__(self, state: collector_app.CollectorState, sock: socket.socket) -> None:
        self.state, self.sock = state, sock
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="ldpt-admin", daemon=True)

    def start(self, timeout: float = 10.0) -> None:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("the admin port did not start")
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._start())
        except BaseException as exc:  # reported to start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        if self._sweeper is not None:
            self._sweeper.cancel()
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()

    async def _start(self) -> None:
        config = self.state.config
        guard = ConnectionGuard(header_timeout=config.header_timeout,
                                keepalive_timeout=config.keepalive_timeout,
                                max_connections=ADMIN_MAX_CONNECTIONS,
                                max_per_address=ADMIN_MAX_PER_ADDRESS)

        @web.middleware
        async def keepalive(request: web.Request, handler: Any) -> web.StreamResponse:
            try:
                return await handler(request)
            finally:  # the next keep-alive request has keepalive_timeout to begin
                guard.idle(request.protocol)

        logger = collector_app.AddressFreeLog(logging.getLogger("aiohttp.server"))  # as the main port's
        app = web.Application(middlewares=[keepalive], handler_args={
            "logger": logger, "keepalive_timeout": config.keepalive_timeout})
        app[collector_app.STATE] = self.state
        app.router.add_get("/healthz", collector_app.healthz)
        app.router.add_get("/readyz", admin_readyz)
        app.router.add_get("/metrics", collector_app.metrics)
        self._runner = CollectorRunner(app, guard=guard, handle_signals=False, access_log=None)
        await self._runner.setup()
        self._sweeper = asyncio.get_running_loop().create_task(guard.run(), name="ldpt-admin-guard")
        await web.SockSite(self._runner, self.sock).start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
