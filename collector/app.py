"""The collector's aiohttp application: routes, error middleware and lifecycle.

Routes (docs/openapi.yaml describes each; a test keeps the two equal):

    POST /v1/reports                      ingest one msgpack batch (wire format v1)
    GET  /v1/registry                     the metrics, parameters and fingerprints (gzip, ETag)
    GET  /v1/registry/domains/{name}      a file domain's values, one per line (gzip, ETag)
    GET  /.well-known/ohttp-gateway       the sealed-report gateway's key configurations (RFC 9540)
    POST /.well-known/ohttp-gateway       one sealed batch (message/ohttp-req, RFC 9458; gateway.py)
    POST /v1/shuffled-batches             a shuffled batch of sealed envelopes from an authenticated
                                          shuffler (shuffled.py)
    OPTIONS /v1/reports, /v1/registry[/domains/{name}], /.well-known/ohttp-gateway
                                          CORS preflight for browser SDKs (collector/cors.py)
    GET  /v1/metrics/{name}/estimates     estimates (bearer token); POST for long candidate lists
    GET  /healthz                         the process is up
    GET  /readyz                          the store is reachable, its schema current, and it commits
    GET  /metrics                         Prometheus text

Lifecycle: on startup the store is opened and the group committer started; on cleanup (after
aiohttp has stopped accepting and waited for in-flight requests) everything queued is
committed, then the store is closed. Every error is an RFC 9457 problem (``problems.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import compression_utils, web
from aiohttp.web_protocol import RequestPayloadError

from client_sdk import ohttp
from client_sdk.deadline import within
from client_sdk.dimensions import SEGMENT_SEP
from client_sdk.errors import LdptError, StoreError
from client_sdk.registry import Registry
from collector.storage.aio import AsyncSketchStore, ThreadedStore
from collector.storage.base import SCHEMA_VERSION, BatchOutcome, batch_id_cutoff
from sketches import server_half

from . import cors, query, registry_http
from .committer import GroupCommitter
from .config import ServeConfig, read_tokens
from .connections import AddressFreeLog, ConnectionGuard
from .gateway import handle_envelope
from .inflight import InflightBudget
from .ingest import BatchDecoder
from .limits import IngestPolicy, TokenBuckets
from .ohttp_keys import KEYS_MAX_AGE, KeyRing
from .problems import Problem
from .registry_http import DomainLists, Representation, registry_representation
from .segments import SegmentCap
from .shuffled import SHUFFLED_PATH, post_shuffled
from .telemetry import Telemetry
from .ui import UI_ROUTES, setup_ui

log = logging.getLogger("ldpt.collector")

MSGPACK_TYPES = frozenset({"application/msgpack", "application/x-msgpack", "application/vnd.msgpack"})
#: Content-Encodings aiohttp decodes here (one coding, no list): anything else would be read as
#: identity, so it is refused with 415 (RFC 9110 §8.4: a server that cannot decode must not guess).
CONTENT_ENCODINGS = ("identity", "gzip", "deflate",
                     *(("br",) if getattr(compression_utils, "HAS_BROTLI", False) else ()),
                     *(("zstd",) if getattr(compression_utils, "HAS_ZSTD", False) else ()))
ROUTES: tuple[tuple[str, str], ...] = (
    ("POST", "/v1/reports"),
    ("GET", "/v1/registry"),
    ("GET", "/v1/registry/domains/{name}"),
    ("GET", ohttp.GATEWAY_PATH),
    ("POST", ohttp.GATEWAY_PATH),
    ("POST", SHUFFLED_PATH),
    ("OPTIONS", "/v1/reports"),
    ("OPTIONS", "/v1/registry"),
    ("OPTIONS", "/v1/registry/domains/{name}"),
    ("OPTIONS", ohttp.GATEWAY_PATH),
    ("GET", "/v1/metrics/{name}/estimates"),
    ("POST", "/v1/metrics/{name}/estimates"),
    ("GET", "/v1/metrics/{name}/compare"),
    *UI_ROUTES,
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
)
#: Route -> the endpoint label of the ldpt_request_seconds histogram.
ENDPOINT_OF = {"/v1/reports": "ingest", "/v1/registry": "registry", "/v1/registry/domains/{name}": "registry",
               ohttp.GATEWAY_PATH: "ingest", SHUFFLED_PATH: "ingest",
               "/v1/metrics/{name}/estimates": "query", "/v1/metrics/{name}/compare": "query",
               "/ui/api/overview": "query", "/ui/charts/{name}/{chart}.svg": "query",
               "/healthz": "health", "/readyz": "health", "/metrics": "metrics"}
READY_TIMEOUT = 5.0
READY_PROBE_INTERVAL = 1.0
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

StoreFactory = Callable[[], Awaitable[AsyncSketchStore]]


@dataclasses.dataclass
class CollectorState:
    """Everything the handlers share within one worker process."""

    config: ServeConfig
    registry: Registry
    decoder: BatchDecoder
    telemetry: Telemetry
    tokens: tuple[bytes, ...]
    policy: IngestPolicy
    reports_per_window: dict[str, int]
    store_factory: StoreFactory
    registry_doc: Representation
    domain_lists: DomainLists
    registry_buckets: TokenBuckets
    query_gate: query.HeavyQueryGate
    keyring: KeyRing
    #: tokens of the shufflers allowed to POST /v1/shuffled-batches (none: the endpoint is off)
    shuffler_tokens: tuple[bytes, ...] = ()
    #: metrics whose reports are accepted only through a shuffler (registry ``shuffle``)
    shuffle_required: frozenset[str] = frozenset()
    #: metric -> (ε per report, ε∞ or None): the local ε an envelope carries (shuffled.envelope_view)
    metric_epsilons: dict[str, tuple[float, float | None]] = dataclasses.field(default_factory=dict)
    store: AsyncSketchStore | None = None
    committer: GroupCommitter | None = None
    draining: bool = False
    inflight: InflightBudget | None = None
    maintenance: asyncio.Task[None] | None = None
    guard: ConnectionGuard | None = None
    sweeper: asyncio.Task[None] | None = None
    prober: asyncio.Task[None] | None = None
    #: (store reachable, why not, time.monotonic() of the check), for the admin port's /readyz
    readiness: tuple[bool, str, float] = (False, "not checked yet", 0.0)
    _window_cache: tuple[int, str] = (-1, "")
    segments: SegmentCap | None = None
    segments_warned: set[tuple[str, str]] = dataclasses.field(default_factory=set)

    def count_error(self, endpoint: str, slug: str, reports: int = 0) -> None:
        """Ingest rejections (and their reports) apart from other requests' errors."""
        if endpoint == "ingest":
            self.telemetry.rejected(slug, reports)
        else:
            self.telemetry.request_error(slug)

    def window_now(self) -> str:
        """The receive-time window (UTC day or hour) for a report arriving now."""
        width = 86400 if self.config.window == "day" else 3600
        slot = int(time.time() // width)
        if slot != self._window_cache[0]:
            t = time.gmtime(slot * width)
            label = time.strftime("%Y-%m-%d" if width == 86400 else "%Y-%m-%dT%H", t)
            self._window_cache = (slot, label)
        return self._window_cache[1]


STATE = web.AppKey("ldpt_state", CollectorState)


def default_store_factory(config: ServeConfig) -> StoreFactory:
    """Open the store the configuration names (SQLite file or PostgreSQL DSN)."""
    async def open_store() -> AsyncSketchStore:
        if config.postgres:
            from collector.storage.postgres import PostgresStore

            return await PostgresStore.open(config.postgres)
        return ThreadedStore(config.db, synchronous=config.sqlite_synchronous)
    return open_store


def create_app(config: ServeConfig, registry: Registry, *, telemetry: Telemetry | None = None,
               store_factory: StoreFactory | None = None) -> web.Application:
    """Build the application for one worker (the store opens on startup)."""
    state = CollectorState(
        config=config, registry=registry,
        decoder=BatchDecoder(registry, max_reports=config.max_reports_per_batch),
        telemetry=telemetry or Telemetry.create([m.name for m in registry]),
        tokens=read_tokens(config.query_token_file,
                           allow_insecure=config.allow_insecure_token_file),
        policy=IngestPolicy(config),
        reports_per_window={spec.name: spec.reports_per_window for spec in registry},
        store_factory=store_factory or default_store_factory(config),
        registry_doc=registry_representation(registry), domain_lists=DomainLists(registry),
        registry_buckets=TokenBuckets(config.rate_limit, config.rate_limit_burst),
        query_gate=query.HeavyQueryGate(config.max_heavy_queries),
        keyring=KeyRing(config.ohttp_keys_dir, allow_insecure=config.allow_insecure_token_file),
        shuffler_tokens=read_tokens(config.shuffler_token_file, what="shuffler token",
                                    allow_insecure=config.allow_insecure_token_file),
        shuffle_required=frozenset(spec.name for spec in registry if spec.shuffle_required),
        metric_epsilons={spec.name: (float(server_half(spec).epsilon),
                                     None if server_half(spec).epsilon_longitudinal is None
                                     else float(server_half(spec).epsilon_longitudinal)) for spec in registry})
    state.inflight = InflightBudget(
        config.max_inflight_bytes, config.max_inflight_bytes_per_source,
        on_change=state.telemetry.add_inflight,
        retry_after=lambda: state.committer.retry_after() if state.committer else 1.0)
    state.guard = ConnectionGuard(header_timeout=config.header_timeout,
                                  keepalive_timeout=config.keepalive_timeout,
                                  max_connections=config.max_connections,
                                  on_close=state.telemetry.connection_closed,
                                  on_count=state.telemetry.set_connections,
                                  on_error=state.telemetry.request_error)
    # client_max_size bounds chunked bodies too (Content-Length is checked before reading)
    app = web.Application(middlewares=[problem_middleware], client_max_size=config.max_body_bytes,
                          handler_args={"logger": AddressFreeLog(logging.getLogger("aiohttp.server")),
                                        "keepalive_timeout": config.keepalive_timeout})
    app[STATE] = state
    app.router.add_post("/v1/reports", post_reports)
    app.router.add_get("/v1/registry", get_registry)
    app.router.add_get("/v1/registry/domains/{name}", get_domain)
    app.router.add_get(ohttp.GATEWAY_PATH, get_gateway_keys)
    app.router.add_post(ohttp.GATEWAY_PATH, post_sealed)
    app.router.add_post(SHUFFLED_PATH, post_shuffled)
    origins = cors.parse_origins(config.cors_origins)
    for path in cors.CORS_ROUTES:
        app.router.add_route("OPTIONS", path, cors.preflight_handler(origins))

    async def cors_headers(request: web.Request, response: web.StreamResponse) -> None:
        cors.add_headers(request, response, origins)
    app.on_response_prepare.append(cors_headers)
    app.router.add_get("/v1/metrics/{name}/estimates", get_estimates)
    app.router.add_post("/v1/metrics/{name}/estimates", get_estimates)
    app.router.add_get("/v1/metrics/{name}/compare", get_compare)
    setup_ui(app, STATE)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.on_startup.append(_startup)
    app.on_shutdown.append(_shutdown)
    app.on_cleanup.append(_cleanup)
    return app


# --- lifecycle ----------------------------------------------------------------------------------------
async def _startup(app: web.Application) -> None:
    state = app[STATE]
    state.store = await state.store_factory()
    c = state.config
    state.committer = GroupCommitter(state.store, state.telemetry, max_batches=c.queue_max_batches,
                                     max_reports=c.queue_max_reports,
                                     group_max_batches=c.group_max_batches)
    state.committer.start()
    loop = asyncio.get_running_loop()
    state.maintenance = loop.create_task(_maintain(state), name="ldpt-maintain")
    state.sweeper = loop.create_task(state.guard.run(), name="ldpt-connection-guard")
    state.prober = loop.create_task(_probe_readiness(state), name="ldpt-readiness")
    state.telemetry.set_up(True)


async def _maintain(state: CollectorState) -> None:
    while True:
        await asyncio.sleep(state.config.maintain_interval)
        try:
            await state.store.amaintain()
            await apply_retention(state.store, state.config.retention_days, state.config.batch_id_days)
        except Exception as exc:  # housekeeping must never take the collector down
            log.warning("store maintenance failed: %s: %s", type(exc).__name__, exc)


def retention_cutoff(days: int, now: float | None = None) -> str:
    """The first UTC day kept when keeping ``days`` days up to today (YYYY-MM-DD)."""
    today = dt.datetime.fromtimestamp(time.time() if now is None else now, dt.timezone.utc).date()
    if days - 1 >= (today - dt.date.min).days:  # longer than the calendar: keep everything
        return dt.date.min.isoformat()
    return (today - dt.timedelta(days=days - 1)).isoformat()


async def apply_retention(store: AsyncSketchStore, days: int, batch_id_days: int = 0,
                          now: float | None = None) -> None:
    """Delete whole windows older than ``days`` days (0: none) and the batch ids received more
    than ``batch_id_days`` days ago (0: none; never within ``BATCH_ID_MIN_DAYS``)."""
    if not days and not batch_id_days:
        return
    cutoff = retention_cutoff(days, now) if days else dt.date.min.isoformat()
    today = dt.datetime.fromtimestamp(time.time() if now is None else now, dt.timezone.utc).date()
    ids_cutoff = batch_id_cutoff("9999-12-31", today, batch_id_days) if batch_id_days \
        else dt.date.min.isoformat()
    result = await store.aprune(cutoff, ids_cutoff)
    if result.rows or result.batch_ids:
        log.info("retention: deleted %d windows (%d rows) before %s and %d batch ids received before %s",
                 result.windows, result.rows, cutoff, result.batch_ids, ids_cutoff)


async def check_store(state: CollectorState) -> None:
    """Raise (StoreError, OSError, TimeoutError) unless the store is ready to take batches.

    Reachable with a current schema is not enough: a full disk leaves both true while every
    commit fails (each batch a 503). So while the latest commit failed, readiness also needs a
    write probe (``aprobe_write``, one small row) to succeed — which is what ends the failure,
    since a collector taken out of rotation receives no batch to commit.
    """
    await within(state.store.acheck(), READY_TIMEOUT)
    committer = state.committer
    failing = committer.failing if committer is not None else None
    if failing is None:
        return
    try:
        await within(state.store.aprobe_write(), READY_TIMEOUT)
    except (LdptError, OSError, asyncio.TimeoutError) as exc:
        ago = time.monotonic() - failing[0]
        raise StoreError(f"commits are failing (the latest {ago:.0f} s ago: {failing[1]}); a write "
                         f"probe failed too: {type(exc).__name__}: {exc}"[:600]) from None
    if committer.failing is failing:   # the store takes writes again
        committer.failing = None


async def _probe_readiness(state: CollectorState) -> None:
    """Check the store every READY_PROBE_INTERVAL s, so that the admin port's /readyz answers
    from the latest result without touching the store from its own thread."""
    while True:
        try:
            await check_store(state)
            state.readiness = (True, "", time.monotonic())
        except Exception as exc:  # any failure means "not ready"; the detail says why
            detail = str(exc) if isinstance(exc, LdptError) else f"{type(exc).__name__}: {exc}"
            state.readiness = (False, detail[:600], time.monotonic())
        await asyncio.sleep(READY_PROBE_INTERVAL)


async def _shutdown(app: web.Application) -> None:
    app[STATE].draining = True  # readyz answers 503 from now on


async def _cleanup(app: web.Application) -> None:
    state = app[STATE]
    state.draining = True
    for task in (state.maintenance, state.sweeper, state.prober):
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if state.committer is not None:
        queued = state.committer.depth[0]
        await state.committer.close()  # commits everything already accepted
        if queued:
            log.info("committed %d queued batches before exit", queued)
    if state.store is not None:
        await state.store.aclose()
    state.telemetry.set_up(False)


# --- middleware -----------------------------------------------------------------------------------------
@web.middleware
async def problem_middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
    """Every error leaves as application/problem+json and is counted by its type (ingest
    rejections apart from other requests' errors); latency is recorded per endpoint; the
    connection guard knows the request's headers are complete while the handler runs."""
    state = request.app[STATE]
    state.guard.busy(request.protocol)
    start = time.perf_counter()
    endpoint = ENDPOINT_OF.get(request.match_info.route.resource.canonical
                               if request.match_info.route.resource else "", "other")
    try:
        return await handler(request)
    except Problem as problem:
        state.count_error(endpoint, problem.slug, problem.reports)
        return problem.response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        slug = {404: "not-found", 405: "method-not-allowed", 413: "body-too-large"}.get(exc.status)
        if slug is None:
            slug = "invalid-query" if exc.status < 500 else "internal-error"
        detail = exc.text if exc.status != 413 else \
            f"the body exceeds {state.config.max_body_bytes} bytes; send smaller batches"
        allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        problem = Problem(slug, detail or exc.reason, status=exc.status, headers=allow)
        state.count_error(endpoint, problem.slug)
        return problem.response()
    except LdptError as exc:
        problem = Problem.from_error(exc)
        state.count_error(endpoint, problem.slug)
        return problem.response()
    except asyncio.CancelledError:
        if request.transport is None or request.transport.is_closing():
            state.count_error(endpoint, "client-disconnected")
        raise
    except Exception as exc:
        if request.transport is None or request.transport.is_closing():  # the client hung up
            log.debug("client went away during %s %s: %s", request.method, request.path,
                      type(exc).__name__)
            state.count_error(endpoint, "client-disconnected")
            return Problem("client-disconnected", "the client closed the connection").response()
        log.exception("internal error on %s %s", request.method, request.path)
        state.count_error(endpoint, "internal-error")
        return Problem("internal-error", "the collector hit an unexpected error; it was logged").response()
    finally:
        state.telemetry.request_seconds(endpoint, time.perf_counter() - start)
        state.guard.idle(request.protocol)


# --- handlers -------------------------------------------------------------------------------------------
async def post_reports(request: web.Request) -> web.Response:
    """Ingest one batch: size and type checks, decode + validate, group commit, ack."""
    state = request.app[STATE]
    config = state.config
    source, relay = state.policy.source(request.remote, request.headers)
    state.policy.admit(source, relay)  # before any refusal: every request spends its token
    state.policy.check_key(request.headers.get("Authorization"))
    if request.content_type not in MSGPACK_TYPES:
        raise Problem("unsupported-media-type", f"Content-Type {request.content_type!r} is not "
                      "accepted; send application/msgpack (wire format v1)",
                      headers={"Accept-Post": "application/msgpack"})
    check_content_encoding(request.headers.get("Content-Encoding"))
    async with limited_body(request, state, source, relay, config.max_body_bytes) as body:
        batch = decode_batch(state, body)
    result = await commit_batch(state, batch, relay=relay)
    return web.json_response({"accepted": result.reports, "duplicate": result.duplicate})


@contextlib.asynccontextmanager
async def limited_body(request: web.Request, state: CollectorState, source: Any, relay: bool,
                       limit: int) -> AsyncIterator[bytes]:
    """The body of an ingest request (a batch, or a sealed envelope) within ``limit`` bytes,
    charged to the in-flight budgets as it arrives and until the block ends — its decoding
    (411, 413, 408, 503 as problems)."""
    config = state.config
    length = request.content_length
    if length is None and "chunked" not in request.headers.get("Transfer-Encoding", "").lower():
        # HTTP/1.0 without Content-Length ends its body by closing: refuse rather than wait
        raise Problem("length-required", "send Content-Length (or Transfer-Encoding: chunked "
                      "over HTTP/1.1) with the batch")
    if length is not None and length > limit:
        raise Problem("body-too-large", f"the body has {length} bytes; this collector accepts at "
                      f"most {limit} (send smaller batches)")
    # in-flight bytes are charged as they arrive, per source too (collector/inflight.py): a
    # declared length reserves nothing, so slow or lying bodies cannot starve ingestion
    state.inflight.admit(source, length, relay)
    charged = [0]
    try:
        yield await read_body(request, config.body_read_timeout,
                              charge=lambda n: _charge(state, source, relay, charged, n),
                              max_bytes=limit)
    finally:
        state.inflight.release(source, charged[0])


@dataclasses.dataclass(frozen=True)
class IngestResult:
    """A committed batch: its id, its reports, whether it was a retry of one already counted."""

    batch_id: bytes
    reports: int
    duplicate: bool


def decode_batch(state: CollectorState, body: bytes) -> Any:
    """Decode and validate a wire-format batch for the current window (raises Problem)."""
    return state.decoder.decode(body, state.window_now())


async def check_decoded(state: CollectorState, batch: Any, *, relay: bool, shuffled: bool = False) -> None:
    """The checks of a decoded batch before its commit (raises Problem): the per-batch limits,
    the segment cap, and — unless it came through an authenticated shuffler — that none of its
    metrics requires shuffling (registry ``shuffle = "required"``)."""
    try:
        state.policy.check_batch(batch.deltas.per_metric, state.reports_per_window, relay)
        if not shuffled and state.shuffle_required:
            check_unshuffled(state, batch)
    except Problem as problem:
        problem.reports = batch.reports
        raise
    await _check_segments(state, batch)


def check_unshuffled(state: CollectorState, batch: Any) -> None:
    """403 ``shuffle-required`` naming the first metric of the batch that may come only through
    an authenticated shuffler (an SDK drops that metric's reports and resends the rest)."""
    required = [m for m in batch.deltas.per_metric if m in state.shuffle_required]
    if required:
        metric = sorted(required)[0]
        raise Problem("shuffle-required", f"metric {metric!r} is accepted only through an authenticated "
                      "shuffler (the registry says shuffle = \"required\"): configure the SDK with "
                      "Seal.shuffler(url) (docs/guide-app-teams.md, \"Sealed reports\")", metric=metric)


async def submit_checked(state: CollectorState, batch: Any) -> IngestResult:
    """The group commit of a checked batch (raises Problem: queue full, store down, id conflict)."""
    outcome = await state.committer.submit(batch)
    if outcome is BatchOutcome.CONFLICT:
        problem = Problem("batch-id-conflict", f"batch id {batch.batch_id.hex()} was already "
                          "committed with a different body; a retry must resend the same bytes, "
                          "and a new batch needs a new random id", field="batch_id")
        problem.reports = batch.reports
        raise problem
    return IngestResult(batch.batch_id, batch.reports, outcome is BatchOutcome.DUPLICATE)


async def commit_batch(state: CollectorState, batch: Any, *, relay: bool) -> IngestResult:
    """The per-batch limits, the segment cap, the group commit of a decoded batch (raises Problem)."""
    await check_decoded(state, batch, relay=relay)
    return await submit_checked(state, batch)


async def ingest_batch(state: CollectorState, body: bytes, *, relay: bool) -> IngestResult:
    """The one ingest path of a wire-format batch — what POST /v1/reports does with its body,
    and the gateway with the batch it unsealed: decode + validate, then commit_batch."""
    return await commit_batch(state, decode_batch(state, body), relay=relay)


async def _check_segments(state: CollectorState, batch: Any) -> None:
    """The per-metric, per-window segment cap (collector/segments.py): a segment beyond it is left
    out of the batch's deltas, never the batch; its reports still count in their metric's total."""
    deltas = batch.deltas
    if not hasattr(deltas, "leave_out"):
        return
    segmented = [k for k in deltas.keys() if SEGMENT_SEP in k.metric]
    if not segmented:
        return
    cap = state.segments
    if cap is None:
        cap = state.segments = SegmentCap(state.config.max_segments)
    for window in {k.window for k in segmented}:
        if not cap.loaded(window):
            cap.load(window, await state.store.awindows())
    over = cap.over(segmented)
    if over:  # another collector sharing the store may have opened them: look again (rate-limited)
        for window in {k.window for k in over}:
            if cap.reload_due(window):
                cap.load(window, await state.store.awindows())
    left_out = cap.check(segmented)
    if left_out:
        for key in left_out:
            metric = key.metric.partition(SEGMENT_SEP)[0]
            if (metric, key.window) not in state.segments_warned:
                state.segments_warned.add((metric, key.window))
                log.warning("segment cap reached: metric %r has %d segments in window %s "
                            "(max_segments); reports of further segments count in its total but in "
                            "no segment, and breakdowns say how many", metric, cap.max_segments, key.window)
        deltas.leave_out(set(left_out))


def check_content_encoding(value: str | None) -> None:
    """Refuse (415) a Content-Encoding aiohttp would not decode: it reads those as identity, so a
    client that compressed with one would have its bytes taken for msgpack (or, worse, decoded
    by luck). One coding of CONTENT_ENCODINGS, any case; absent or empty means identity."""
    coding = (value or "").strip().lower()
    if coding and coding not in CONTENT_ENCODINGS:
        raise Problem("unsupported-content-encoding",
                      f"Content-Encoding {value[:60]!r} is not supported; send the batch with one of "
                      f"{', '.join(CONTENT_ENCODINGS)} (or none)",
                      headers={"Accept-Encoding": ", ".join(CONTENT_ENCODINGS)},
                      content_encoding=value[:60])


def _charge(state: CollectorState, source: Any, relay: bool, charged: list[int], nbytes: int) -> None:
    charged[0] += nbytes  # released by the caller even when the charge is refused
    state.inflight.charge(source, nbytes, relay)


async def read_body(request: web.Request, timeout: float, *,
                    charge: Callable[[int], None] | None = None, max_bytes: int | None = None) -> bytes:
    """The request body, each chunk passed to ``charge`` as it arrives (which may refuse it),
    or a problem: larger than ``max_bytes`` once decoded (413), too slow (408), undecodable
    Content-Encoding (400) or the client hung up (counted as ``client-disconnected``; there is
    nobody to answer)."""
    async def chunks() -> bytes:
        parts, size = [], 0
        while chunk := await request.content.readany():
            size += len(chunk)
            if max_bytes is not None and size > max_bytes:
                raise Problem("body-too-large", f"the body exceeds {max_bytes} bytes; send "
                              "smaller batches", close=True)
            if charge is not None:
                charge(len(chunk))
            parts.append(chunk)
        return b"".join(parts)

    try:
        return await within(chunks(), timeout)
    except asyncio.TimeoutError:
        raise Problem("request-timeout", f"the body did not arrive within {timeout:g} s; send it "
                      "at once (the same batch id may be retried)") from None
    except RequestPayloadError as exc:  # aiohttp's decompression or chunk-framing errors
        cause = exc.__cause__ or exc
        reason = " ".join(getattr(cause, "message", str(cause)).split())[:120]
        raise Problem("undecodable-body", f"the body cannot be decoded as sent ({reason}); check "
                      "Content-Encoding and the chunk framing", close=True) from None
    except ConnectionError:
        raise Problem("client-disconnected", "the client closed the connection before its body "
                      "was complete") from None


def _gateway_enabled(state: CollectorState) -> None:
    if not state.keyring.enabled:
        raise Problem("not-found", "this collector takes no sealed reports (its operator has not set "
                      "ohttp_keys_dir); send plain batches to POST /v1/reports")


async def get_gateway_keys(request: web.Request) -> web.Response:
    """The active key configurations (``application/ohttp-keys``), for SDKs to seal to."""
    state = request.app[STATE]
    _gateway_enabled(state)
    document = state.keyring.published()
    if not document:
        raise Problem("no-gateway-key", "every gateway key is retired; the operator runs `ldpt keys "
                      "rotate`", retry_after=60)
    return web.Response(body=document, content_type=ohttp.KEYS_TYPE,
                        headers={"Cache-Control": f"max-age={KEYS_MAX_AGE}"})


async def post_sealed(request: web.Request) -> web.Response:
    """One sealed batch: the outer checks (rate limit, media type, size), then the gateway."""
    state = request.app[STATE]
    source, relay = state.policy.source(request.remote, request.headers)
    state.policy.admit(source, relay)  # before any refusal, as POST /v1/reports
    _gateway_enabled(state)
    if request.content_type != ohttp.REQUEST_TYPE:
        raise Problem("unsupported-media-type", f"Content-Type {request.content_type!r} is not "
                      f"accepted here; send {ohttp.REQUEST_TYPE} (an Oblivious HTTP request)",
                      headers={"Accept-Post": ohttp.REQUEST_TYPE})
    check_content_encoding(request.headers.get("Content-Encoding"))
    limit = min(ohttp.sealed_size_limit(state.config.max_body_bytes),
                state.config.max_inflight_bytes_per_source)
    async with limited_body(request, state, source, relay, limit) as envelope:
        result = await handle_envelope(state, envelope)
    if result.response is None:
        assert result.problem is not None  # counted by handle_envelope: answered, not raised
        return result.problem.response()
    return web.Response(body=result.response, content_type=ohttp.RESPONSE_TYPE,
                        headers={"Cache-Control": "private, no-store"})


async def get_registry(request: web.Request) -> web.Response:
    """The published registry (collector/registry_http.py): gzip, ETag/304, rate-limited per source."""
    state = request.app[STATE]
    _admit_registry(state, request)
    return registry_http.respond(request, state.registry_doc, registry_http.REGISTRY_MAX_AGE)


async def get_domain(request: web.Request) -> web.Response:
    """A file domain's values, one per line (collector/registry_http.py)."""
    state = request.app[STATE]
    _admit_registry(state, request)
    rep = await state.domain_lists.get(request.match_info["name"])
    return registry_http.respond(request, rep, registry_http.DOMAIN_MAX_AGE)


def _admit_registry(state: CollectorState, request: web.Request) -> None:
    """One token of the source's registry bucket (apart from its ingest bucket; relays exempt)."""
    source, relay = state.policy.source(request.remote, request.headers)
    if relay:
        return
    wait = state.registry_buckets.take(source)
    if wait:
        raise Problem("rate-limited", "too many registry requests from this address; retry after "
                      "Retry-After seconds (an SDK fetches the registry once per start, then revalidates)",
                      retry_after=wait)


async def get_estimates(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    return await query.estimates(request, state.registry, state.store, state.tokens,
                                 state.config.min_reports, state.query_gate)


async def get_compare(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    return await query.compare(request, state.registry, state.store, state.tokens, state.config.min_reports,
                               state.query_gate)


async def healthz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return web.json_response({"status": "ok", "pid": os.getpid(), "worker": state.telemetry.row})


async def readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.draining or state.store is None:
        raise Problem("shutting-down", "the collector is shutting down", retry_after=1)
    try:
        await check_store(state)
    except LdptError as exc:
        raise Problem("store-unavailable", str(exc), retry_after=5) from None
    except (asyncio.TimeoutError, OSError) as exc:
        raise Problem("store-unavailable", f"store check failed: {type(exc).__name__} {exc}",
                      retry_after=5) from None
    return web.json_response({"status": "ready", "store": state.store.description,
                              "schema_version": SCHEMA_VERSION})


async def metrics(request: web.Request) -> web.Response:
    text = request.app[STATE].telemetry.render()
    return web.Response(body=text.encode(), headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})
