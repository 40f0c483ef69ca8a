"""The shuffler's aiohttp application: the envelope route, key configurations, health, metrics.

Routes (docs/shuffler-openapi.yaml describes each; a test keeps the two equal):

    POST /v1/envelopes                    one sealed batch (message/ohttp-req) from a device: stored
                                          durably, then 202 {"stored": true, "duplicate": ...}
    GET  /.well-known/ohttp-gateway       the collector's key configurations, as last fetched
    GET  /healthz                         the process is up
    GET  /readyz                          the pool answers and the collector's keys are known
    GET  /metrics                         Prometheus text (shuffler/telemetry.py)

The envelope route keeps nothing of the request but the envelope's bytes (docs/privacy.md,
"Trust model"): the address serves only the rate limit's token bucket (in memory, dropped when
full), no header is read beyond Content-Type/Length, and no access log is written unless the
operator turns it on. Every error is an RFC 9457 problem (collector/problems.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from client_sdk import ohttp
from client_sdk.deadline import within
from client_sdk.errors import LdptError, StoreError
from collector.connections import AddressFreeLog, ConnectionGuard
from collector.limits import TokenBuckets, forwarded_for, parse_networks
from collector.problems import Problem

from .config import ShuffleConfig
from .pool import Pool, PoolCounts
from .telemetry import ShufflerTelemetry

log = logging.getLogger("ldpt.shuffler")
T = TypeVar("T")

ENVELOPE_PATH = "/v1/envelopes"
ROUTES: tuple[tuple[str, str], ...] = (
    ("POST", ENVELOPE_PATH),
    ("GET", ohttp.GATEWAY_PATH),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
)
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Most envelopes stored in one pool transaction (group commit of concurrent requests).
GROUP_MAX = 1024
#: Seconds a device told "not ready" or "pool full" waits before it retries.
NOT_READY_RETRY, POOL_FULL_RETRY = 5, 60
KEYS_MAX_AGE = 3600


class Keys:
    """The collector's key configurations as last fetched: what an envelope's header must name."""

    def __init__(self) -> None:
        self.document: bytes | None = None
        self.accepted: frozenset[tuple[int, int, int, int]] = frozenset()
        self.fetched_at: float | None = None

    def set(self, document: bytes) -> None:
        """Take an ``application/ohttp-keys`` document (OhttpError if it does not decode)."""
        configs = ohttp.decode_key_configs(document)
        self.accepted = frozenset((c.key_id, c.kem_id, kdf, aead) for c in configs for kdf, aead in c.suites)
        self.document = document
        self.fetched_at = time.monotonic()

    def check(self, envelope: bytes) -> None:
        """400 ``undecodable-envelope`` or ``ohttp-key``, 503 ``shuffler-not-ready``, else nothing:
        the envelope's header names a key the collector publishes (its contents stay unread)."""
        try:
            header = ohttp.parse_header(envelope)
        except ohttp.OhttpError as exc:
            raise Problem("undecodable-envelope", str(exc)) from None
        if self.document is None:
            raise Problem("shuffler-not-ready", "the shuffler has not fetched the collector's key "
                          "configurations yet; retry the same envelope", retry_after=NOT_READY_RETRY)
        if header not in self.accepted:
            raise Problem("ohttp-key", f"key id {header[0]} (KEM 0x{header[1]:04x}, KDF 0x{header[2]:04x}, "
                          f"AEAD 0x{header[3]:04x}) is not one of the collector's current key "
                          f"configurations; fetch {ohttp.GATEWAY_PATH} again and seal anew")


class PoolThread:
    """The pool on its one thread; ``store`` is a group commit: envelopes arriving while a
    transaction runs are stored together in the next one, each answered after its commit."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="ldpt-pool")
        self._pending: list[tuple[bytes, asyncio.Future[bool]]] = []
        self._draining: asyncio.Task[None] | None = None

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, lambda: fn(*args))

    async def store(self, envelope: bytes) -> bool:
        """Store one envelope durably; whether it was a duplicate. StoreError if it was not stored."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((envelope, future))
        if self._draining is None:
            self._draining = asyncio.get_running_loop().create_task(self._drain())
        return await asyncio.shield(future)

    async def _drain(self) -> None:
        try:
            while self._pending:
                group, self._pending = self._pending[:GROUP_MAX], self._pending[GROUP_MAX:]
                try:
                    duplicates = await self.call(self.pool.store, [e for e, _ in group])
                except Exception as exc:  # noqa: BLE001 - every waiter gets the failure
                    for _, fut in group:
                        if not fut.done():
                            fut.set_exception(exc if isinstance(exc, StoreError) else StoreError(str(exc)))
                    continue
                for (_, fut), dup in zip(group, duplicates):
                    if not fut.done():
                        fut.set_result(dup)
        finally:
            self._draining = None

    async def close(self) -> None:
        while self._draining is not None:
            await asyncio.sleep(0.01)
        await self.call(self.pool.close)
        self.executor.shutdown(wait=True)


@dataclasses.dataclass
class ShufflerState:
    """Everything the handlers and the forwarder share."""

    config: ShuffleConfig
    token: bytes
    pool: PoolThread
    telemetry: ShufflerTelemetry
    buckets: TokenBuckets
    keys: Keys
    guard: ConnectionGuard
    trusted: tuple = ()
    #: set when envelopes arrive, so the forwarder looks again
    wakeup: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    draining: bool = False
    forwarder: Any = None
    tasks: list[asyncio.Task[Any]] = dataclasses.field(default_factory=list)
    #: when the pool's current epoch opened (an envelope arriving into an empty pool is that old)
    epoch_opened: float = 0.0
    clock: Callable[[], float] = time.time

    @property
    def counts(self) -> PoolCounts:
        """What the pool holds, as of its last committed transaction (Pool.live)."""
        return self.pool.pool.live if self.pool is not None else PoolCounts(0, 0, 0, 0, 0, None)

    def publish(self) -> None:
        c, g = self.counts, self.telemetry.gauges
        g.update(pooled_envelopes=c.pooled, pooled_bytes=c.pooled_bytes, assigned_envelopes=c.assigned,
                 pending_batches=c.batches,
                 oldest_seconds=0.0 if c.oldest is None else max(0.0, self.clock() - c.oldest))


STATE = web.AppKey("ldpt_shuffler", ShufflerState)


def create_app(config: ShuffleConfig, token: bytes, *, clock: Callable[[], float] = time.time,
               start_forwarder: bool = True) -> web.Application:
    """The shuffler's application (the pool opens on startup, the forwarder starts with it)."""
    telemetry = ShufflerTelemetry()
    guard = ConnectionGuard(header_timeout=config.header_timeout, keepalive_timeout=config.keepalive_timeout,
                            max_connections=config.max_connections,
                            on_error=lambda slug: _count_refusal(telemetry, slug))
    state = ShufflerState(config=config, token=token, pool=None, telemetry=telemetry,  # type: ignore[arg-type]
                          buckets=TokenBuckets(config.rate_limit, config.rate_limit_burst), keys=Keys(),
                          guard=guard, trusted=parse_networks(config.trusted_proxies, "trusted_proxies"),
                          clock=clock)
    app = web.Application(middlewares=[problem_middleware], client_max_size=config.max_envelope_bytes,
                          handler_args={"logger": AddressFreeLog(logging.getLogger("aiohttp.server")),
                                        "keepalive_timeout": config.keepalive_timeout})
    app[STATE] = state
    app.router.add_post(ENVELOPE_PATH, post_envelope)
    app.router.add_get(ohttp.GATEWAY_PATH, get_keys)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)

    async def startup(app: web.Application) -> None:
        state.pool = PoolThread(Pool(config.db, synchronous=config.sqlite_synchronous, clock=clock))
        state.epoch_opened = await state.pool.call(state.pool.pool.current_epoch_opened)
        saved = await state.pool.call(state.pool.pool.key_configs)
        if saved is not None:
            try:
                state.keys.set(saved)
            except ohttp.OhttpError:
                pass
        state.publish()
        loop = asyncio.get_running_loop()
        state.tasks.append(loop.create_task(guard.run(), name="ldpt-shuffler-guard"))
        if start_forwarder:
            from .forwarder import Forwarder

            state.forwarder = Forwarder(state)
            await state.forwarder.start()

    async def shutdown(app: web.Application) -> None:
        state.draining = True

    async def cleanup(app: web.Application) -> None:
        state.draining = True
        if state.forwarder is not None:
            await state.forwarder.stop(config.shutdown_timeout)
        for task in state.tasks:
            task.cancel()
        for task in state.tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        if state.pool is not None:
            await state.pool.close()
        telemetry.up = 0

    app.on_startup.append(startup)
    app.on_shutdown.append(shutdown)
    app.on_cleanup.append(cleanup)
    return app


def _count_refusal(telemetry: ShufflerTelemetry, slug: str) -> None:
    if slug in telemetry.refused:
        telemetry.refused[slug] += 1


@web.middleware
async def problem_middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
    """Every error leaves as application/problem+json, counted by its type; never an address in a log."""
    state = request.app[STATE]
    state.guard.busy(request.protocol)
    try:
        return await handler(request)
    except Problem as problem:
        _count_refusal(state.telemetry, problem.slug)
        response = problem.response()
        if request.body_exists and not request.content.is_eof():
            response.force_close()   # an unread body: the connection cannot carry another request
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        slug = {404: "not-found", 405: "method-not-allowed", 413: "body-too-large"}.get(exc.status, "invalid-query")
        allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        problem = Problem(slug, exc.text or exc.reason, status=exc.status, headers=allow)
        _count_refusal(state.telemetry, slug)
        return problem.response()
    except LdptError as exc:
        problem = Problem.from_error(exc)
        _count_refusal(state.telemetry, problem.slug)
        return problem.response()
    except Exception:
        if request.transport is None or request.transport.is_closing():
            _count_refusal(state.telemetry, "client-disconnected")
            return Problem("client-disconnected", "the client closed the connection").response()
        log.exception("internal error on %s %s", request.method, request.path)
        _count_refusal(state.telemetry, "internal-error")
        return Problem("internal-error", "the shuffler hit an unexpected error; it was logged").response()
    finally:
        state.guard.idle(request.protocol)


def source_of(state: ShufflerState, request: web.Request) -> object:
    """The rate limit's key: the TCP peer, or behind a trusted proxy the rightmost untrusted
    X-Forwarded-For hop. Held only in the token buckets' memory."""
    import ipaddress

    try:
        peer = ipaddress.ip_address(request.remote or "")
    except ValueError:
        return request.remote
    forwarded = forwarded_for(request.headers)
    if forwarded is None or not any(peer in net for net in state.trusted):
        return peer
    for hop in reversed(forwarded.split(",")):
        try:
            address = ipaddress.ip_address(hop.strip())
        except ValueError:
            return peer
        if not any(address in net for net in state.trusted):
            return address
    return peer


async def post_envelope(request: web.Request) -> web.Response:
    """One device's envelope: limits, checks, durable store, then the acknowledgement."""
    state = request.app[STATE]
    started = time.perf_counter()
    config = state.config
    wait = state.buckets.take(source_of(state, request))
    if wait:
        raise Problem("rate-limited", "too many envelopes from this address; retry the same envelope after "
                      "Retry-After seconds", retry_after=wait)
    if state.draining:
        raise Problem("shutting-down", "the shuffler is shutting down; retry the same envelope", retry_after=1)
    if request.content_type != ohttp.REQUEST_TYPE:
        raise Problem("unsupported-media-type", f"Content-Type {request.content_type!r} is not accepted; send "
                      f"{ohttp.REQUEST_TYPE} (an Oblivious HTTP encapsulated request)",
                      headers={"Accept-Post": ohttp.REQUEST_TYPE})
    coding = request.headers.get("Content-Encoding", "").strip().lower()
    if coding not in ("", "identity"):
        raise Problem("unsupported-content-encoding", "an envelope is sent as it is (not compressed)",
                      content_encoding=coding[:60])
    envelope = await read_envelope(request, config)
    state.keys.check(envelope)
    counts = state.counts
    if counts.envelopes >= config.max_pool_envelopes or counts.bytes + len(envelope) > config.max_pool_bytes:
        raise Problem("pool-full", f"the shuffler holds {counts.envelopes:,} envelopes ({counts.bytes:,} bytes), "
                      "its limit; retry the same envelope later", retry_after=POOL_FULL_RETRY)
    try:
        duplicate = await state.pool.store(envelope)
    except StoreError as exc:
        log.error("storing an envelope failed: %s", exc)
        raise Problem("store-unavailable", "the envelope was not stored; retry the same envelope",
                      retry_after=5) from None
    if not duplicate:
        state.publish()
        state.wakeup.set()
    state.telemetry.envelopes["duplicate" if duplicate else "stored"] += 1
    state.telemetry.ack(time.perf_counter() - started)
    return web.json_response({"stored": True, "duplicate": duplicate}, status=202)


async def read_envelope(request: web.Request, config: ShuffleConfig) -> bytes:
    """The body within ``max_envelope_bytes`` (413), within ``body_read_timeout`` (408)."""
    limit = config.max_envelope_bytes
    length = request.content_length
    if length is None and "chunked" not in request.headers.get("Transfer-Encoding", "").lower():
        raise Problem("length-required", "send Content-Length with the envelope")
    if length is not None and length > limit:
        raise Problem("body-too-large", f"the envelope has {length} bytes; this shuffler accepts at most {limit} "
                      "(send smaller batches)")

    async def chunks() -> bytes:
        parts, size = [], 0
        while chunk := await request.content.readany():
            size += len(chunk)
            if size > limit:
                raise Problem("body-too-large", f"the envelope exceeds {limit} bytes (send smaller batches)",
                              close=True)
            parts.append(chunk)
        return b"".join(parts)

    try:
        return await within(chunks(), config.body_read_timeout)
    except asyncio.TimeoutError:
        raise Problem("request-timeout", f"the envelope did not arrive within {config.body_read_timeout:g} s; "
                      "send it at once") from None
    except RequestPayloadError:
        raise Problem("undecodable-body", "the body's framing cannot be decoded", close=True) from None
    except ConnectionError:
        raise Problem("client-disconnected", "the client closed the connection before its envelope was "
                      "complete") from None


async def get_keys(request: web.Request) -> web.Response:
    """The collector's key configurations as the shuffler last fetched them (so that a device
    whose registry ships with the app need never connect to the collector itself)."""
    state = request.app[STATE]
    if state.keys.document is None:
        raise Problem("shuffler-not-ready", "the shuffler has not fetched the collector's key configurations yet",
                      retry_after=NOT_READY_RETRY)
    return web.Response(body=state.keys.document, content_type=ohttp.KEYS_TYPE,
                        headers={"Cache-Control": f"max-age={KEYS_MAX_AGE}"})


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "pid": os.getpid()})


async def readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.draining or state.pool is None:
        raise Problem("shutting-down", "the shuffler is shutting down", retry_after=1)
    try:
        await within(state.pool.call(state.pool.pool.check), 5)
    except (StoreError, asyncio.TimeoutError) as exc:
        raise Problem("store-unavailable", f"the pool does not answer: {exc}", retry_after=5) from None
    if state.keys.document is None:
        raise Problem("shuffler-not-ready", "the collector's key configurations are not known yet",
                      retry_after=NOT_READY_RETRY)
    c = state.counts
    return web.json_response({"status": "ready", "pooled": c.pooled, "assigned": c.assigned,
                              "pending_batches": c.batches})


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.publish()
    return web.Response(body=state.telemetry.render().encode(), headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})
