"""``AsyncTelemetryClient``: the SDK for asyncio apps, with the same names as the threaded one.

```python
client = AsyncTelemetryClient(endpoint="http://127.0.0.1:8080", registry="metrics.toml",
                              state_dir=".../myapp/ldpt")
client.report("theme", "dark")          # plain call: never blocks the loop, never raises
await client.aflush(timeout=10.0)       # True when everything queued was acknowledged
await client.aclose()
```

``report()`` is the same code as ``TelemetryClient.report`` (client.ClientCore): in-memory
work only, safe from the loop and from other threads. The uploader is an asyncio task on
the app's loop (started by the first ``report()`` made inside a running loop, or by
``aflush``/``async with``); ledger commits and outbox files run in the default executor so
the loop never waits on fsync. HTTP goes through aiohttp (imported only when this transport
is used) or any ``AsyncTransport`` — ``client_sdk.testing.AsyncMemoryTransport`` in tests.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from .client import DEFAULT_RETRY, ClientCore, _make_outbox
from .deadline import within
from .options import ClientOptions
from .queue import DEFAULT_QUEUE_SIZE, DiskOutbox, DropPolicy
from .registry import Registry
from .state import ClientState
from .transport import (
    DEFAULT_TIMEOUT,
    REPORT_HEADERS,
    REPORTS_PATH,
    HTTPTransport,
    Response,
    Transport,
    TransportError,
    wire_headers,
)
from .uploader import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_BATCH_AGE,
    Batcher,
    Owner,
    QueuedReport,
    RetryPolicy,
    send_batch,
)

log = logging.getLogger("client_sdk")

#: How often ``aflush`` re-checks for completion between the worker's progress signals.
FLUSH_POLL = 0.01


class AsyncTransport:
    """Interface: ``await arequest(method, path, body, headers) -> Response`` (TransportError)."""

    async def arequest(self, method: str, path: str, body: bytes | None = None,
                       headers: Mapping[str, str] | None = None) -> Response:
        raise NotImplementedError

    async def apost_batch(self, body: bytes) -> Response:
        return await self.arequest("POST", REPORTS_PATH, body, REPORT_HEADERS)

    async def aclose(self) -> None:
        """Release connections."""


class AsyncHTTPTransport(AsyncTransport):
    """aiohttp client session (created lazily on the worker's loop; aiohttp imported lazily)."""

    def __init__(self, endpoint: str, *, timeout: float = DEFAULT_TIMEOUT,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        url = urllib.parse.urlsplit(endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"endpoint {endpoint!r} must be an http:// or https:// URL")
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout
        self.ssl_context = ssl_context  # as HTTPTransport's: a private CA, a pinned certificate
        self._session: Any = None

    async def arequest(self, method: str, path: str, body: bytes | None = None,
                       headers: Mapping[str, str] | None = None) -> Response:
        try:
            import aiohttp
        except ImportError:  # pragma: no cover - aiohttp is a core dependency of the package
            raise TransportError("AsyncHTTPTransport needs aiohttp: pip install aiohttp "
                                 "(or pass transport=...)") from None
        if self._session is None or self._session.closed:
            # No header of aiohttp's own (its User-Agent names the library's version): only
            # wire_headers' lines, less Host (aiohttp writes it, first) and Content-Length.
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout),
                                                  skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding",
                                                                     "Content-Type"))
        lines = [(k, v) for k, v in wire_headers(headers, "", None) if k != "Host"]
        try:
            async with self._session.request(method, self.endpoint + path, data=body, headers=lines,
                                             ssl=True if self.ssl_context is None else self.ssl_context) as resp:
                data = await resp.read()
                return Response(resp.status, {k.lower(): v for k, v in resp.headers.items()}, data)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise TransportError(f"{self.endpoint}: {type(exc).__name__}: {exc}") from None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class ThreadedTransport(AsyncTransport):
    """Any blocking Transport, run in the default executor."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    async def arequest(self, method: str, path: str, body: bytes | None = None,
                       headers: Mapping[str, str] | None = None) -> Response:
        return await asyncio.to_thread(self.transport.request, method, path, body, headers)

    async def aclose(self) -> None:
        self.transport.close()


_LIVE_ASYNC: weakref.WeakSet[AsyncUploader] = weakref.WeakSet()


class AsyncUploader:
    """Runs a Batcher as an asyncio task on the app's loop (see client_sdk.uploader)."""

    def __init__(self, transport: AsyncTransport, outbox: Any = None, *,
                 batch_size: int = DEFAULT_BATCH_SIZE, max_batch_age: float = DEFAULT_MAX_BATCH_AGE,
                 queue_size: int = DEFAULT_QUEUE_SIZE, drop_policy: DropPolicy = DropPolicy.DROP_NEWEST,
                 retry: RetryPolicy = DEFAULT_RETRY, sealer: Any = None,
                 wall: Callable[[], float] = time.time) -> None:
        self.transport = transport
        self.batcher = Batcher(outbox, batch_size=batch_size, max_batch_age=max_batch_age,
                               queue_size=queue_size, drop_policy=drop_policy, retry=retry,
                               wake=self._wake, wall=wall)
        self.batcher.sealer = sealer
        self._disk = isinstance(self.batcher.outbox, DiskOutbox)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._event: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.closed = False
        _LIVE_ASYNC.add(self)

    # --- app side -----------------------------------------------------------------------------------
    def submit(self, item: QueuedReport, now: float) -> bool:
        ok = self.batcher.queue.put(item, now)
        if self._task is None:
            self._maybe_start()
        return ok

    def note_refusal(self, owner: Owner) -> None:
        self.batcher.note_refusal(owner)

    def _maybe_start(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not inside a loop: the worker starts at the next aflush/aclose/report in one
        self.start(loop)

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start the worker task on ``loop`` (the running loop by default)."""
        if self.closed or (self._task is not None and not self._task.done()):
            return
        loop = loop or asyncio.get_running_loop()
        self._loop, self._loop_thread = loop, threading.get_ident()
        self._event = asyncio.Event()
        self._stopping = False
        self._task = loop.create_task(self._run(), name="ldpt-uploader")

    def _wake(self) -> None:
        loop, event = self._loop, self._event
        if loop is None or event is None:
            return
        if threading.get_ident() == self._loop_thread:
            event.set()
        else:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:
                pass  # the loop is closed

    async def aflush(self, timeout: float = 10.0) -> bool:
        """Send everything queued; True when all of it was acknowledged within ``timeout``."""
        deadline = time.monotonic() + max(0.0, timeout)
        failures = self.batcher.failures
        self.start()
        self.batcher.begin_flush(time.monotonic())
        try:
            self._wake()
            while True:
                settled = self.batcher.settled_failures()
                if settled is not None:
                    return settled == failures
                if time.monotonic() >= deadline or self._task is None or self._task.done():
                    return False
                await asyncio.sleep(FLUSH_POLL)
        finally:
            self.batcher.end_flush()

    async def aclose(self, timeout: float = 10.0) -> bool:
        """Flush within ``timeout``, stop the task; unsent batches stay in the outbox."""
        if self.closed:
            return self.batcher.idle()
        start = time.monotonic()
        ok = await self.aflush(timeout)
        self.closed = True
        self._stopping = True
        self._wake()
        task = self._task
        if task is not None and not task.done():
            try:
                await within(asyncio.shield(task), max(0.05, timeout - (time.monotonic() - start)))
            except asyncio.TimeoutError:
                task.cancel()
        await asyncio.to_thread(self.batcher.build_due, True)
        await self.transport.aclose()
        if self.batcher.sealer is not None:
            await asyncio.to_thread(self.batcher.sealer.close)
        return ok

    # --- the worker task ----------------------------------------------------------------------------------
    async def _run(self) -> None:
        batcher = self.batcher
        assert self._event is not None
        while True:
            wait = batcher.wait_time(time.monotonic())
            if not self._stopping and (wait is None or wait > 0):
                try:
                    await within(self._event.wait(), wait)
                except asyncio.TimeoutError:
                    pass
            self._event.clear()
            if self._stopping:
                await asyncio.to_thread(self._final_build)
                return
            try:
                await self._cycle()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the worker never dies on a bug
                batcher.log_once(("worker", type(exc)), logging.ERROR, f"ldpt: uploader error: {exc!r}")
                await asyncio.sleep(0.1)

    def _final_build(self) -> None:
        self.batcher.record_refusals()
        self.batcher.build_due(force=True)

    def _build(self) -> None:
        self.batcher.record_refusals()
        self.batcher.build_due()

    def _claim(self) -> Any:
        with self.batcher.lock:
            return self.batcher.claim(time.monotonic())

    def _handle(self, batch: Any, response: Response | None, error: Exception | None) -> None:
        with self.batcher.lock:
            self.batcher.handle(batch, response, error, time.monotonic())

    async def _blocking(self, func: Any, *args: Any) -> Any:
        """Disk work in the executor; in-memory work inline (cheaper than a thread hop)."""
        if self._disk:
            return await asyncio.to_thread(func, *args)
        return func(*args)

    async def _cycle(self) -> None:
        batcher = self.batcher
        await self._blocking(self._build)
        while not self._stopping:
            batch = await self._blocking(self._claim)
            if batch is None:
                break
            try:
                if batcher.sealer is not None:   # sealing and its blocking HTTP: in the executor
                    response = await asyncio.to_thread(send_batch, batcher, None, batch)
                else:
                    response = await self.transport.apost_batch(batch.body)
                error = None
            except TransportError as exc:
                response, error = None, exc
            await self._blocking(self._handle, batch, response, error)
            if len(batcher.queue) >= batcher.batch_size or batcher.flushing:
                await self._blocking(self._build)

    def _reset_after_fork(self) -> None:
        self.batcher.reset_after_fork()
        self._loop = self._event = self._task = None
        self._loop_thread = None


def _async_after_fork_child() -> None:
    for uploader in list(_LIVE_ASYNC):
        uploader._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_async_after_fork_child)


class AsyncTelemetryClient(ClientCore):
    """The SDK for asyncio apps: ``report``, ``aflush``, ``aclose``, ``opt_out``, ``opt_in``, ``stats``.

    Takes the same arguments as ``TelemetryClient`` (``options=ClientOptions(...)`` or its
    fields as keywords); ``transport`` may be an ``AsyncTransport`` (default:
    ``AsyncHTTPTransport(endpoint)``) or a blocking ``Transport`` (run in the executor).
    With ``registry=None`` the registry is fetched on a background thread (blocking
    ``HTTPTransport``), so construction never waits on the network.
    """

    def __init__(self, endpoint: str | None = None,
                 registry: Registry | str | os.PathLike[str] | Mapping[str, Any] | None = None,
                 state_dir: str | os.PathLike[str] | None = None, *,
                 state: ClientState | None = None, transport: AsyncTransport | Transport | None = None,
                 uploader: AsyncUploader | None = None, options: ClientOptions | None = None,
                 **option_overrides: Any) -> None:
        options = ClientOptions.merge(options, option_overrides)
        sync = transport if isinstance(transport, Transport) else None
        super().__init__(endpoint, registry, state_dir, state=state, transport=sync, options=options)
        self._owns_uploader = uploader is None
        if uploader is None:
            if isinstance(transport, AsyncTransport):
                atransport: AsyncTransport = transport
            elif isinstance(transport, Transport):
                atransport = ThreadedTransport(transport)
            elif self.endpoint is not None:
                atransport = AsyncHTTPTransport(self.endpoint, timeout=options.timeout)
            else:
                raise ValueError("give endpoint= (the collector URL) or transport=")
            sealer = None
            if options.seal is not None:   # sealing runs in the executor, over blocking HTTP
                blocking = sync if sync is not None else (
                    HTTPTransport(self.endpoint, timeout=options.timeout) if self.endpoint else None)
                sealer = options.make_sealer(blocking)
            uploader = AsyncUploader(atransport, _make_outbox(self.state, options.outbox_limits, options.offline),
                                     **options.uploader_kwargs(), sealer=sealer)
        self._uploader = uploader
        self._fetch_only_transport = sync is None
        try:
            self._start_registry()
        finally:
            if self._fetch_only_transport and self._transport is not None and self._resolver is None:
                self._transport.close()  # only used to fetch the registry (reconnects if used again)
        if self._owns_uploader:
            uploader._maybe_start()

    @classmethod
    async def create(cls, *args: Any, **kwargs: Any) -> AsyncTelemetryClient:
        """Construct off the loop: opening the state directory (and, strict, fetching the registry) is disk and network I/O."""
        client = await asyncio.to_thread(cls, *args, **kwargs)
        client._uploader._maybe_start()
        return client

    @property
    def uploader(self) -> AsyncUploader:
        return self._uploader

    async def aflush(self, timeout: float = 10.0) -> bool:
        """Send everything now; True when all of it was acknowledged within ``timeout`` seconds.

        Like ``TelemetryClient.flush``: a registry still being fetched is fetched at once, and
        a retry back-off is cut short.
        """
        deadline = time.monotonic() + max(0.0, timeout)
        if self._table is None and self._waiting \
                and not await asyncio.to_thread(self.wait_for_registry, timeout):
            return False
        return await self._uploader.aflush(max(0.0, deadline - time.monotonic()))

    async def aclose(self, timeout: float = 10.0) -> bool:
        """Stop reporting, flush within ``timeout``; what is unsent stays in the offline queue.
        True or False as ``TelemetryClient.close`` (False when reports were dropped)."""
        deadline = time.monotonic() + max(0.0, timeout)
        if self._table is None and self._waiting:
            await asyncio.to_thread(self.wait_for_registry, timeout)
        self._closed = True
        self._stop_registry()
        timeout = max(0.0, deadline - time.monotonic())
        if self._owns_uploader:
            return self._close_result(await self._uploader.aclose(timeout))
        return self._close_result(await self._uploader.aflush(timeout))

    async def __aenter__(self) -> AsyncTelemetryClient:
        self._uploader.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
