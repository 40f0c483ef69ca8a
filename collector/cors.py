"""CORS for the browser SDK: web pages of allowed origins may post reports and read the registry.

A page on ``https://app.example.com`` that embeds the JavaScript SDK sends its batches to the
collector on another origin. Browsers only let it read the answer (the ack or problem document
that settles a batch) when the collector says so (Fetch standard, "CORS protocol"); a batch is
``application/msgpack``, so every POST is preceded by an ``OPTIONS`` preflight.

Only the SDK's routes take part — ``POST /v1/reports``, ``GET /v1/registry``,
``GET /v1/registry/domains/{name}`` (a file domain's values) and the sealed reports' gateway
``GET, POST /.well-known/ohttp-gateway`` — and only
for origins in the ``cors_origins`` setting (exact ``scheme://host[:port]`` strings, or ``*``
for any). The query API, the dashboard and the health routes never answer CORS, so a page of
another origin can never read estimates with a user's token. Answers carry ``Vary: Origin``.
"""

from __future__ import annotations

from aiohttp import web

from .problems import Problem

#: The routes a browser SDK calls, and the methods it may use on each.
CORS_ROUTES: dict[str, tuple[str, ...]] = {"/v1/reports": ("POST",), "/v1/registry": ("GET",),
                                           "/v1/registry/domains/{name}": ("GET",),
                                           "/.well-known/ohttp-gateway": ("GET", "POST")}
#: Request headers a page may send (an ingest key travels in Authorization).
ALLOWED_HEADERS = "Content-Type, Authorization, If-None-Match"
#: Response headers a page may read: the back-off and the registry's validator.
EXPOSED_HEADERS = "Retry-After, ETag"
#: Seconds a browser may cache a preflight answer.
PREFLIGHT_MAX_AGE = 600


def parse_origins(text: str) -> frozenset[str]:
    """The allow-list of a comma-separated setting ("" allows none, "*" any origin)."""
    return frozenset(o.strip().rstrip("/") for o in text.split(",") if o.strip())


def allowed(origins: frozenset[str], origin: str | None) -> bool:
    """Whether ``origin`` may read the SDK routes' answers. An Origin that is not a serialised
    origin's printable ASCII (bytes that are not UTF-8 reach here as surrogates) is never
    allowed, not even under ``*``: it would be echoed in Access-Control-Allow-Origin."""
    return origin is not None and _printable_ascii(origin) and ("*" in origins or origin in origins)


def _printable_ascii(text: str) -> bool:
    return text.isascii() and text.isprintable()


def route_of(request: web.Request) -> str:
    """The route pattern a request matched ("/v1/registry/domains/{name}"), else its path."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else request.path


def add_headers(request: web.Request, response: web.StreamResponse, origins: frozenset[str]) -> None:
    """Mark an answer of an SDK route readable by the requesting page when its origin is allowed."""
    if route_of(request) not in CORS_ROUTES:
        return
    response.headers.add("Vary", "Origin")
    origin = request.headers.get("Origin")
    if allowed(origins, origin):
        response.headers["Access-Control-Allow-Origin"] = origin  # type: ignore[assignment]
        response.headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS


def preflight_handler(origins: frozenset[str]):
    """The OPTIONS handler of the SDK routes: 204 with the grants, or 403 origin-not-allowed."""
    async def preflight(request: web.Request) -> web.Response:
        origin = request.headers.get("Origin")
        methods = CORS_ROUTES[route_of(request)]
        asked = request.headers.get("Access-Control-Request-Method", methods[0])
        if not allowed(origins, origin):
            raise Problem("origin-not-allowed", f"origin {origin!r} may not call {request.path} from a "
                          "browser; the operator lists allowed origins in the cors_origins setting")
        if asked not in methods:
            raise Problem("method-not-allowed", f"{request.path} takes {', '.join(methods)}, not {asked}",
                          headers={"Allow": f"{', '.join(methods)}, OPTIONS"})
        return web.Response(status=204, headers={
            "Access-Control-Allow-Methods": ", ".join(methods),
            "Access-Control-Allow-Headers": ALLOWED_HEADERS,
            "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE)})
    return preflight


__all__ = ["CORS_ROUTES", "add_headers", "allowed", "parse_origins", "preflight_handler"]
