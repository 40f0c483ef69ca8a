"""``GET|POST /v1/metrics/{name}/estimates``: the analysts' query API (bearer token).

Returns the estimate DataFrame exactly as ``ldpt estimate --format json|csv`` prints it
(``{"meta": ..., "estimates": [...]}``), so ``ldpt estimate --url`` and the local path agree
byte for byte. Tokens come from ``--query-token-file`` (one per line, for rotation) and are
compared in constant time (``hmac.compare_digest`` against every token, no early exit).
Windows with fewer than ``--min-reports`` reports are refused with ``too-few-reports``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from aiohttp import web

from client_sdk.errors import EstimationError, LdptError
from client_sdk.registry import Registry
from collector.storage.aio import AsyncSketchStore
from collector.storage.base import canonical_window
from estimators.discovery import MAX_TOP as DISCOVER_MAX_TOP
from estimators.formats import frame_to_csv, frame_to_json, iter_csv, iter_json
from sketches import server_half

from .estimates import (
    CompareQuery,
    EstimateQuery,
    QueryRefused,
    Rules,
    Side,
    page_rows,
    privacy,
    run_compare,
    run_estimate,
)
from .problems import Problem

QUERY_FIELDS = ("window", "since", "until", "by", "confidence", "simultaneous", "consistent", "candidates",
                "top", "format", "raw_csv", "limit", "offset", "full")
MAX_PAGE = 100_000
#: Queries of a sketch with at least this many cells (or full=true ones) are *heavy*: at most
#: ``max_heavy_queries`` of them run at once per worker, the others get 503 + Retry-After.
HEAVY_CELLS = 1 << 16
#: Rows above which an answer is streamed in pieces formatted off the event loop.
STREAM_MIN_ROWS = 5_000
COMPARE_FIELDS = ("a", "b", "confidence", "alpha", "control", "simultaneous", "format", "raw_csv")
#: Largest ``top`` a discover metric may be asked for (docs/discovery.md).
MAX_TOP = DISCOVER_MAX_TOP
FORMATS = {"json": "application/json", "csv": "text/csv"}
MAX_CANDIDATES = 100_000
#: Largest JSON body of a POST query: room for MAX_CANDIDATES strings of ~150 bytes. Read only
#: after the bearer token was checked, so it is not the ingestion limit (LDPT_MAX_BODY_BYTES).
MAX_QUERY_BODY_BYTES = 16 << 20
#: ``by`` naming one or two public dimensions (client_sdk/dimensions.py names).
BY_DIMENSIONS = re.compile(r"^[a-z][a-z0-9_]{0,39}(,[a-z][a-z0-9_]{0,39})?$")
BEARER_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="ldpt"'}


def check_bearer(header: str | None, tokens: Sequence[bytes]) -> None:
    """Raise Problem unless ``Authorization: Bearer <token>`` matches a configured token."""
    if not tokens:
        raise Problem("query-disabled", "this collector was started without --query-token-file, so "
                      "estimates cannot be queried over HTTP")
    scheme, _, given = (header or "").partition(" ")
    given = given.strip()
    if scheme.lower() != "bearer" or not given:
        raise Problem("unauthorized", "send the query token as 'Authorization: Bearer <token>'",
                      headers=BEARER_CHALLENGE)
    given_bytes = given.encode("utf-8", "surrogateescape")  # the bytes sent, even if not UTF-8
    ok = False
    for token in tokens:  # every comparison runs: the time does not depend on which token matched
        ok |= hmac.compare_digest(given_bytes, token)
    if not ok:
        raise Problem("unauthorized", "the bearer token is not valid", headers=BEARER_CHALLENGE)


def _day(name: str, value: Any, hour_ok: bool) -> str:
    """The canonical (zero-padded) window label: stored windows are compared as strings."""
    window = canonical_window(value, hour_ok) if isinstance(value, str) else None
    if window is not None:
        return window
    shape = "YYYY-MM-DD or YYYY-MM-DDTHH" if hour_ok else "YYYY-MM-DD"
    raise Problem("invalid-query", f"{name}={value!r} is not a date {shape}", field=name)


def _flag(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", ""):
        return True
    if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
        return False
    raise Problem("invalid-query", f"{name}={value!r}: use true or false", field=name)


def parse_query(params: Mapping[str, Any], accept: str = "") -> dict[str, Any]:
    """Validate query fields (from the URL or a JSON body) into estimate arguments."""
    unknown = sorted(set(params) - set(QUERY_FIELDS))
    if unknown:
        raise Problem("invalid-query", f"unknown parameter {unknown[0]!r} (allowed: "
                      f"{', '.join(QUERY_FIELDS)})", field=unknown[0])
    window = params.get("window")
    since, until = params.get("since"), params.get("until")
    if window is not None and (since is not None or until is not None):
        raise Problem("invalid-query", "use either window or since/until, not both", field="window")
    out: dict[str, Any] = {
        "windows": None if window is None else [_day("window", window, True)],
        "since": None if since is None else _day("since", since, False),
        "until": None if until is None else _day("until", until, False),
        "simultaneous": _flag("simultaneous", params.get("simultaneous", False)),
        "consistent": _flag("consistent", params.get("consistent", False)),
    }
    try:
        confidence = float(params.get("confidence", 0.95))
    except (TypeError, ValueError):
        confidence = math.nan
    if not 0 < confidence < 1:
        raise Problem("invalid-query", f"confidence={params.get('confidence')!r}: use a number "
                      "between 0 and 1", field="confidence")
    out["confidence"] = confidence
    by = params.get("by")
    if by not in (None, "window") and not (isinstance(by, str) and BY_DIMENSIONS.fullmatch(by)):
        raise Problem("invalid-query", f"by={str(by)[:60]!r}: group by window or by one or two of the "
                      "metric's dimensions (by=os or by=os,channel)", field="by")
    if by == "window" and (window is not None or out["consistent"]):
        raise Problem("invalid-query", "by=window draws a series over since/until: leave window and "
                      "consistent out", field="by")
    out["by"] = by
    candidates = params.get("candidates")
    if candidates is not None:
        if isinstance(candidates, str):
            candidates = [candidates]
        if not isinstance(candidates, list) or not all(isinstance(c, str) for c in candidates):
            raise Problem("invalid-query", "candidates must be a list of strings", field="candidates")
        if len(candidates) > MAX_CANDIDATES:
            raise Problem("invalid-query", f"at most {MAX_CANDIDATES} candidates", field="candidates")
        candidates = list(dict.fromkeys(c for c in candidates if c))
    out["candidates"] = candidates
    top = params.get("top")
    if top is not None:
        try:
            top = int(top) if not isinstance(top, bool) and str(top).strip().isdigit() else 0
        except (TypeError, ValueError):
            top = 0
        if not 1 <= top <= MAX_TOP:
            raise Problem("invalid-query", f"top={params.get('top')!r}: use an integer from 1 to {MAX_TOP}",
                          field="top")
    out["top"] = top
    out["format"] = _format(params, accept)
    out["raw_csv"] = _flag("raw_csv", params.get("raw_csv", False))
    out["limit"] = _count("limit", params.get("limit"), 1, MAX_PAGE)
    out["offset"] = _count("offset", params.get("offset"), 0, 10**9)
    out["full"] = _flag("full", params.get("full", False))
    if out["full"] and (out["limit"] is not None or out["offset"] is not None):
        raise Problem("invalid-query", "full=true answers every row: leave limit and offset out", field="full")
    return out


def _count(name: str, value: Any, low: int, high: int) -> int | None:
    """An integer query field in [low, high], None when absent."""
    if value is None:
        return None
    text = str(value).strip() if not isinstance(value, bool) else ""
    if not text.isdigit() or not low <= int(text) <= high:
        raise Problem("invalid-query", f"{name}={str(value)[:30]!r}: use an integer from {low} to {high:,}",
                      field=name)
    return int(text)


def page_of(spec: Any, q: Mapping[str, Any]) -> tuple[int, int] | None:
    """(offset, limit) of the rows a frequency estimate answers for parsed query fields ``q``:
    the query layer's page rule (collector/estimates.py ``page_rows``)."""
    return page_rows(spec, top=q.get("top"), limit=q.get("limit"), offset=q.get("offset"), full=bool(q.get("full")))


def is_heavy(spec: Any, q: Mapping[str, Any]) -> bool:
    """Whether a query of ``spec`` counts against ``max_heavy_queries`` (a large sketch, or full)."""
    proto = server_half(spec)
    cells = proto.cohorts * int(np.prod(proto.cell_shape)) if proto.cell_shape else proto.cohorts
    return bool(q.get("full")) or cells >= HEAVY_CELLS


class HeavyQueryGate:
    """At most ``limit`` heavy queries at once (per worker): the rest are refused at once with
    503 ``too-many-queries`` and Retry-After, so a burst of large estimates cannot take the
    collector's memory or its cores from ingestion."""

    def __init__(self, limit: int) -> None:
        self.limit, self.running = limit, 0

    @contextlib.contextmanager
    def slot(self, heavy: bool) -> Iterator[None]:
        if not heavy:
            yield
            return
        if self.running >= self.limit:
            raise Problem("too-many-queries", f"{self.running} large estimates are being computed; retry after "
                          "Retry-After seconds (ask a page: limit/offset, or the default)", retry_after=2)
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1


def _format(params: Mapping[str, Any], accept: str) -> str:
    fmt = params.get("format")
    if fmt is None:
        fmt = "csv" if "text/csv" in accept else "json"
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise Problem("invalid-query", f"format={fmt!r}: use json or csv", field="format")
    return fmt


def _side(name: str, value: Any) -> dict[str, Any]:
    """``a``/``b`` of a comparison: one window, or an inclusive range ``D1..D2``, as load arguments."""
    if not isinstance(value, str) or not value:
        raise Problem("invalid-query", f"give {name}=WINDOW or {name}=D1..D2", field=name)
    first, sep, last = value.partition("..")
    if not sep:
        return {"windows": [_day(name, value, True)], "since": None, "until": None, "label": value}
    if not first or not last:
        raise Problem("invalid-query", f"{name}={value!r}: a range needs both ends, D1..D2", field=name)
    since, until = _day(name, first, False), _day(name, last, False)
    if since > until:
        raise Problem("invalid-query", f"{name}={value!r}: the range ends before it starts", field=name)
    return {"windows": None, "since": since, "until": until, "label": f"{since}..{until}"}


def parse_compare(params: Mapping[str, Any], accept: str = "") -> dict[str, Any]:
    """Validate the fields of ``GET /v1/metrics/{name}/compare``."""
    unknown = sorted(set(params) - set(COMPARE_FIELDS))
    if unknown:
        raise Problem("invalid-query", f"unknown parameter {unknown[0]!r} (allowed: "
                      f"{', '.join(COMPARE_FIELDS)})", field=unknown[0])
    out: dict[str, Any] = {"a": _side("a", params.get("a")), "b": _side("b", params.get("b")),
                           "simultaneous": _flag("simultaneous", params.get("simultaneous", False)),
                           "format": _format(params, accept),
                           "raw_csv": _flag("raw_csv", params.get("raw_csv", False))}
    if out["a"]["label"] == out["b"]["label"]:
        raise Problem("invalid-query", f"a and b are both {out['a']['label']}: a comparison needs two "
                      "different windows (or ranges)", field="b")
    for name, default in (("confidence", 0.95), ("alpha", 0.05)):
        try:
            level = float(params.get(name, default))
        except (TypeError, ValueError):
            level = math.nan
        if not 0 < level < 1:
            raise Problem("invalid-query", f"{name}={params.get(name)!r}: use a number between 0 and 1",
                          field=name)
        out[name] = level
    control = params.get("control", "fwer")
    if control not in ("fwer", "fdr"):
        raise Problem("invalid-query", f"control={control!r}: use fwer (Holm) or fdr "
                      "(Benjamini-Hochberg)", field="control")
    out["control"] = control
    return out


def url_params(query: Any, repeatable: Sequence[str] = ()) -> dict[str, Any]:
    """The URL's parameters, each given once (``repeatable`` ones as lists of every value).

    ``?since=A&since=B`` is ambiguous, so it is refused rather than half read."""
    params: dict[str, Any] = {}
    for key in query:
        values = query.getall(key)
        if key in repeatable:
            params[key] = values
        elif len(values) > 1:
            raise Problem("invalid-query", f"{key[:50]!r} is given more than once: give it once",
                          field=key[:50])
        else:
            params[key] = values[0]
    return params


async def query_params(request: web.Request) -> dict[str, Any]:
    """Query fields from the URL (GET; repeated ``candidates``) or a JSON object body (POST)."""
    if request.method == "POST":
        raw = await read_query_body(request)
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            raise Problem("invalid-query", "the body must be a JSON object of query parameters") from None
        if not isinstance(body, dict):
            raise Problem("invalid-query", "the body must be a JSON object of query parameters")
        params: dict[str, Any] = dict(body)
        params.update({k: v for k, v in url_params(request.query, ("candidates",)).items()
                       if k != "candidates"})
    else:
        params = url_params(request.query, ("candidates",))
    return parse_query(params, request.headers.get("Accept", ""))


async def read_query_body(request: web.Request) -> bytes:
    """The POST body, refused with 413 beyond MAX_QUERY_BODY_BYTES (checked while reading)."""
    too_large = Problem("body-too-large", f"the query body exceeds {MAX_QUERY_BODY_BYTES} bytes; "
                        f"send at most {MAX_CANDIDATES} candidates of reasonable length")
    if request.content_length is not None and request.content_length > MAX_QUERY_BODY_BYTES:
        raise too_large
    body = bytearray()
    async for chunk in request.content.iter_any():
        body += chunk
        if len(body) > MAX_QUERY_BODY_BYTES:
            raise too_large
    return bytes(body)


async def estimates(request: web.Request, registry: Registry, store: AsyncSketchStore,
                    tokens: Sequence[bytes], min_reports: int,
                    gate: HeavyQueryGate | None = None) -> web.StreamResponse:
    """Handler body: auth, parse, load, refuse small windows, estimate, format (heavy queries
    one ``gate`` slot each, held until the answer is written)."""
    check_bearer(request.headers.get("Authorization"), tokens)
    spec = metric_spec(registry, request.match_info["name"])
    q = await query_params(request)
    segment_min = max(min_reports, registry.segment_min_reports(spec))
    with (gate or HeavyQueryGate(1 << 30)).slot(is_heavy(spec, q)):
        df = await estimate_df(spec, store, q, min_reports, segment_min, lazy=True)
        privacy = await privacy_of(spec, store, q)
        if privacy is not None:
            df.attrs["privacy"] = privacy
        return await respond(request, df, q["format"], q["raw_csv"])


async def privacy_of(spec: Any, store: AsyncSketchStore, q: Mapping[str, Any]) -> dict[str, Any] | None:
    """``meta.privacy`` of an estimate over the query's windows (collector/estimates.py ``privacy``)."""
    try:
        return await privacy(spec, store, q["windows"], q["since"], q["until"])
    except LdptError as exc:
        raise Problem.from_error(exc) from None


class ApiRules(Rules):
    """The query API's policy: nothing published from fewer than ``min_reports`` reports, the
    CPU-bound work off the event loop (``_off_loop``, looked up when it runs)."""

    async def compute(self, fn: Any, metric: str) -> Any:
        return await _off_loop(fn, metric)


def estimate_query(spec: Any, q: Mapping[str, Any], lazy: bool = False) -> EstimateQuery:
    """The layer's query of parsed query fields ``q`` (``parse_query``)."""
    return EstimateQuery(windows=q["windows"], since=q["since"], until=q["until"], by=q["by"],
                         confidence=q["confidence"], simultaneous=q["simultaneous"], consistent=q["consistent"],
                         candidates=q["candidates"], top=q["top"], rows=page_of(spec, q), lazy=lazy)


async def estimate_df(spec: Any, store: AsyncSketchStore, q: Mapping[str, Any], min_reports: int,
                      segment_min: int | None = None, lazy: bool = False) -> Any:
    """The estimate (with ``by=window`` the series, with ``by=DIMENSION`` the breakdown)
    DataFrame of parsed query ``q`` (collector/estimates.py ``run_estimate``); ``segment_min``:
    fewest reports a segment is shown with; ``lazy``: every row of a frequency estimate as a
    LazyFrame, built as it is written (estimators/lazy_frame.py)."""
    return await _answer(run_estimate(spec, store, estimate_query(spec, q, lazy), ApiRules(min_reports, segment_min)))


async def _answer(query: Any) -> Any:
    """Await a query of the layer; its refusals and the store's errors become problems."""
    try:
        return await query
    except QueryRefused as exc:
        raise Problem(exc.type, str(exc), **exc.extra) from None
    except LdptError as exc:
        raise Problem.from_error(exc) from None


async def respond(request: web.Request, df: Any, fmt: str, raw_csv: bool = False) -> web.StreamResponse:
    """The frame as JSON (exact) or CSV (terminal- and spreadsheet-safe strings unless
    ``raw_csv``: estimators/formats.py ``frame_to_csv``): small ones in one body, large ones
    streamed in pieces formatted off the event loop (iter_json/iter_csv: the same bytes), so
    neither the loop nor memory holds a whole 10⁶-row document."""
    content_type = FORMATS[fmt]
    if len(df) < STREAM_MIN_ROWS:
        text = await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(frame_to_csv, df, raw=raw_csv) if fmt == "csv" else
            functools.partial(frame_to_json, df))
        return web.Response(text=text, content_type=content_type)
    pieces = iter_csv(df, raw=raw_csv) if fmt == "csv" else iter_json(df)
    response = web.StreamResponse(headers={"Content-Type": f"{content_type}; charset=utf-8"})
    await response.prepare(request)
    loop = asyncio.get_running_loop()
    while (piece := await loop.run_in_executor(None, next, pieces, None)) is not None:
        await response.write(piece.encode("utf-8"))
    await response.write_eof()
    return response


def metric_spec(registry: Registry, name: str) -> Any:
    """The registry's metric ``name``, or the 404 ``unknown-metric`` problem."""
    spec = registry.metrics.get(name)
    if spec is None:
        raise Problem("unknown-metric", f"unknown metric {name[:100]!r} (known: "
                      f"{', '.join(sorted(registry.metrics))})", status=404, metric=name[:100])
    return spec


async def _off_loop(fn: Any, metric: str) -> Any:
    """Run a CPU-bound estimate off the event loop; estimation errors become problems."""
    try:
        return await asyncio.get_running_loop().run_in_executor(None, fn)
    except EstimationError as exc:
        raise Problem("estimation-error", str(exc), metric=metric) from None


async def compare(request: web.Request, registry: Registry, store: AsyncSketchStore,
                  tokens: Sequence[bytes], min_reports: int,
                  gate: HeavyQueryGate | None = None) -> web.StreamResponse:
    """``GET /v1/metrics/{name}/compare?a=...&b=...``: what ``ldpt compare`` prints."""
    check_bearer(request.headers.get("Authorization"), tokens)
    spec = metric_spec(registry, request.match_info["name"])
    q = parse_compare(url_params(request.query), request.headers.get("Accept", ""))
    with (gate or HeavyQueryGate(1 << 30)).slot(is_heavy(spec, q)):
        return await respond(request, await compare_df(spec, store, q, min_reports), q["format"], q["raw_csv"])


async def compare_df(spec: Any, store: AsyncSketchStore, q: Mapping[str, Any], min_reports: int) -> Any:
    """The comparison DataFrame of parsed compare query ``q`` (collector/estimates.py ``run_compare``)."""
    sides = [Side(q[k]["windows"], q[k]["since"], q[k]["until"], q[k]["label"]) for k in ("a", "b")]
    return await _answer(run_compare(spec, store, CompareQuery(*sides, confidence=q["confidence"], alpha=q["alpha"],
                                                               control=q["control"],
                                                               simultaneous=q["simultaneous"]),
                                     ApiRules(min_reports)))
