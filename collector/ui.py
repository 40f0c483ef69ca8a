"""The read-only web dashboard served by the collector at ``/ui/`` (docs/operations.md, "Dashboard").

The page itself (``static/index.html``, ``app.js``, ``app.css``) is public and holds no data:
it asks for the query token in a login form and keeps it in the tab's ``sessionStorage``
(never in a URL, a cookie or a log). Every data request sends it as ``Authorization: Bearer``,
checked by the same ``query.check_bearer`` as the query API:

- ``GET /ui/api/overview`` — the registry's metrics with kind, protocol, ε, stored windows
  and their report counts (for the metric list and the window pickers);
- ``GET /ui/charts/{name}/{estimates|series|compare|breakdown}.svg`` — charts drawn on the server
  (collector/ui_svg.py) from the very DataFrames the query API serialises, with the query
  API's parameters (and ``width``, the page's, so a phone gets a narrow layout; for the
  series, ``value=V`` repeated: the lines to draw; for a joint metric's estimates,
  ``statistic=S``: one of its marginals, shares or means); ``POST`` with the body
  ``{"candidates": [...]}`` draws a RAPPOR string metric decoded against candidates the analyst
  typed on the page; the page fetches the numbers of its tables from the query API itself.

No third-party request is ever made (no CDN, no web fonts) and a Content-Security-Policy
limits the page to its own origin. Nothing here keeps state, so any worker answers.
"""

from __future__ import annotations

import json
from collections import defaultdict
from importlib import resources
from typing import Any

from aiohttp import web

from . import query
from .problems import Problem
from .ui_svg import breakdown_svg, compare_svg, estimates_svg, joint_statistics, joint_svg, series_svg

#: The dashboard's files (package data: pyproject.toml ships collector/static/*).
STATIC_FILES = {"index.html": "text/html", "app.js": "text/javascript", "app.css": "text/css",
                "favicon.svg": "image/svg+xml"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self'; connect-src 'self'; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
CHARTS = ("estimates", "series", "compare", "breakdown")
#: Most lines a series chart draws (its palette's size).
SERIES_MAX_VALUES = 8
#: The routes ``setup_ui`` adds (collector.app.ROUTES lists them; docs/openapi.yaml documents them).
UI_ROUTES: tuple[tuple[str, str], ...] = (
    ("GET", "/ui"),
    ("GET", "/ui/"),
    ("GET", "/ui/static/{file}"),
    ("GET", "/ui/api/overview"),
    ("GET", "/ui/charts/{name}/{chart}.svg"),
    ("POST", "/ui/charts/{name}/{chart}.svg"),
)

__all__ = ["CHARTS", "UI_ROUTES", "setup_ui"]


def setup_ui(app: web.Application, state_key: web.AppKey[Any]) -> None:
    """Register the dashboard's routes; handlers find registry, store and tokens at ``state_key``."""
    files = {name: (resources.files("collector") / "static" / name).read_bytes() for name in STATIC_FILES}

    async def page(request: web.Request) -> web.Response:
        name = request.match_info.get("file", "index.html")
        if name not in files:
            raise Problem("not-found", f"no dashboard file {name[:100]!r}", status=404)
        return web.Response(body=files[name], content_type=STATIC_FILES[name], headers=SECURITY_HEADERS)

    async def to_index(request: web.Request) -> web.Response:
        raise web.HTTPFound("/ui/")

    async def overview(request: web.Request) -> web.Response:
        state = request.app[state_key]
        query.check_bearer(request.headers.get("Authorization"), state.tokens)
        return web.json_response(await _overview(state), headers=SECURITY_HEADERS)

    async def chart(request: web.Request) -> web.Response:
        state = request.app[state_key]
        query.check_bearer(request.headers.get("Authorization"), state.tokens)
        spec = query.metric_spec(state.registry, request.match_info["name"])
        kind = request.match_info["chart"]
        if kind not in CHARTS:
            raise Problem("not-found", f"no chart {kind[:50]!r} (charts: {', '.join(CHARTS)})", status=404)
        params = query.url_params(request.query, repeatable=("value",) if kind == "series" else ())
        if request.method == "POST":  # a RAPPOR string's candidates: too many for a URL
            params["candidates"] = await _posted_candidates(request)
        width = _width(params.pop("width", None))
        statistic = params.pop("statistic", None) if kind == "estimates" else None
        if kind == "compare":
            df = await query.compare_df(spec, state.store, query.parse_compare(params), state.config.min_reports)
            svg = compare_svg(df, width=width)
        else:
            chosen = None
            if kind == "series":  # value=V (repeatable): the series' lines, chosen on the page
                params["by"] = "window"
                chosen = [v[:1000] for v in params.pop("value", [])][:SERIES_MAX_VALUES] or None
            if kind == "breakdown" and params.get("by") in (None, "window"):
                raise Problem("invalid-query", "a breakdown chart needs by=DIMENSION", field="by")
            q = query.parse_query(params)
            segment_min = max(state.config.min_reports, state.registry.segment_min_reports(spec))
            df = await query.estimate_df(spec, state.store, q, state.config.min_reports, segment_min)
            if statistic is not None:
                svg = _joint_chart(df, statistic, width)
            else:
                svg = series_svg(df, values=chosen, width=width) if kind == "series" else \
                    breakdown_svg(df, width=width) if kind == "breakdown" else estimates_svg(df, width=width)
        return web.Response(text=svg, content_type="image/svg+xml", headers=SECURITY_HEADERS)

    app.router.add_get("/ui", to_index)
    app.router.add_get("/ui/", page)
    app.router.add_get("/ui/static/{file}", page)
    app.router.add_get("/ui/api/overview", overview)
    app.router.add_get("/ui/charts/{name}/{chart}.svg", chart)
    app.router.add_post("/ui/charts/{name}/{chart}.svg", chart)


async def _posted_candidates(request: web.Request) -> list[str]:
    """A chart's POST body: ``{"candidates": [...]}`` (the other parameters stay in the URL)."""
    try:
        body = json.loads(await query.read_query_body(request))
    except (ValueError, RecursionError):
        body = None
    if not isinstance(body, dict) or set(body) != {"candidates"}:
        raise Problem("invalid-query", 'a chart\'s POST body is {"candidates": [strings]}; give the other '
                      "parameters in the URL", field="candidates")
    return body["candidates"]


def _joint_chart(df: Any, statistic: str, width: int | None) -> str:
    """``statistic=``: one statistic of a joint metric's breakdown (a marginal, shares, means)."""
    if df.attrs.get("kind") != "joint" or "statistic" not in df:
        raise Problem("invalid-query", "statistic= draws one statistic of a joint metric's breakdown; "
                      f"metric {df.attrs.get('metric')!r} is not a joint metric", field="statistic")
    known = joint_statistics(df)
    if statistic not in known:
        raise Problem("invalid-query", f"statistic={statistic[:100]!r} is not one of this metric's: "
                      + ", ".join(known), field="statistic")
    return joint_svg(df, statistic, width=width)


def _width(text: str | None) -> int | None:
    """A chart's ``width`` parameter: the page's width in pixels (ui_svg clamps it)."""
    if text is None:
        return None
    if not text.isdigit() or len(text) > 5:
        raise Problem("invalid-query", f"width={text[:20]!r}: give the width in pixels, e.g. 390",
                      field="width")
    return int(text)


async def _overview(state: Any) -> dict[str, Any]:
    """Metrics with their stored windows (under the registry's parameters) and report counts."""
    from client_sdk.errors import LdptError
    from sketches import server_half

    try:
        stored = await state.store.awindows()
    except LdptError as exc:
        raise Problem.from_error(exc) from None
    per: dict[str, list[list[Any]]] = defaultdict(list)
    for spec in state.registry:
        for w in stored:
            if w.metric == spec.name and w.fingerprint == spec.fingerprint:  # totals, not segments
                per[spec.name].append([w.window, int(w.reports)])
    metrics = []
    for spec in state.registry:
        windows = sorted(per.get(spec.name, []))
        proto = server_half(spec)
        metrics.append({"name": spec.name, "kind": spec.kind.value, "description": spec.description,
                        "protocol": proto.name, "epsilon": proto.epsilon, "unit": spec.unit,
                        "n_reports": sum(n for _, n in windows), "windows": windows,
                        "histogram": spec.is_histogram, "mean": spec.is_mean,
                        "dimensions": [d.name for d in spec.dimensions]})
    return {"metrics": metrics, "min_reports": state.config.min_reports}
