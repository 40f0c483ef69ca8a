"""``GET /v1/registry`` and ``GET /v1/registry/domains/{name}``: small, compressed, cached.

Both documents are built once per worker (the domain lists on first request, off the event
loop) and served as precomputed bytes, gzip-compressed when the client accepts it:

- ``ETag`` per representation (the gzip one is the identity tag with ``-gzip``); a request whose
  ``If-None-Match`` matches either (weak comparison, lists and ``*``: RFC 9110 §13.1.2) gets 304;
- ``Cache-Control``: the registry for ``REGISTRY_MAX_AGE`` seconds (then revalidated), a domain
  list, which the registry names by its SHA-256, for a day; ``Vary: Accept-Encoding``;
- each source address has its own token bucket for these routes (``rate_limit``, like ingest;
  relays exempt), so registry fetches cannot crowd out ingestion.

The registry never carries a large domain's values: a numbered domain is ``{"ids": d}``, a
file domain ``{"file", "size", "sha256"}`` whose values the domains route serves, one per line
(client_sdk.domains.domain_text), and SDKs check against ``sha256``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import hashlib
import json
from typing import Any

from aiohttp import web

from client_sdk.domains import domain_text
from client_sdk.registry import Registry

from .problems import Problem

#: Seconds an SDK or cache may use the registry before revalidating it (ETag: a 304 costs little).
REGISTRY_MAX_AGE = 300
#: Seconds a domain list may be cached: it is named by its digest in the registry.
DOMAIN_MAX_AGE = 86_400
GZIP_LEVEL = 6


@dataclasses.dataclass(frozen=True)
class Representation:
    """One document's bytes, identity and gzip, and their entity tags."""

    body: bytes
    gzipped: bytes
    etag: str
    content_type: str

    @classmethod
    def of(cls, body: bytes, content_type: str, tag: str | None = None) -> Representation:
        tag = tag or hashlib.sha256(body).hexdigest()[:32]
        return cls(body, gzip.compress(body, GZIP_LEVEL, mtime=0), f'"{tag}"', content_type)

    @property
    def gzip_etag(self) -> str:
        return self.etag[:-1] + '-gzip"'


def registry_representation(registry: Registry) -> Representation:
    """The published registry, compact JSON (no indentation: its size is what SDKs download)."""
    body = json.dumps(registry.to_json(), separators=(",", ":"), ensure_ascii=False).encode()
    return Representation.of(body, "application/json")


def accepts_gzip(header: str | None) -> bool:
    """Whether ``Accept-Encoding`` allows gzip (a listed ``gzip`` or ``*`` without ``q=0``)."""
    if not header:
        return False
    allowed: dict[str, bool] = {}
    for part in header.lower().split(","):
        coding, _, params = part.strip().partition(";")
        q = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        allowed[coding.strip()] = q > 0
    return allowed.get("gzip", allowed.get("x-gzip", allowed.get("*", False)))


def not_modified(if_none_match: str | None, rep: Representation) -> bool:
    """RFC 9110 §13.1.2: weak comparison against either representation's tag, or ``*``."""
    if not if_none_match:
        return False
    tags = {t.strip().removeprefix("W/") for t in if_none_match.split(",")}
    return "*" in tags or rep.etag in tags or rep.gzip_etag in tags


def respond(request: web.Request, rep: Representation, max_age: int) -> web.Response:
    """The representation the request asks for, or 304."""
    gz = accepts_gzip(request.headers.get("Accept-Encoding"))
    headers = {"ETag": rep.gzip_etag if gz else rep.etag, "Vary": "Accept-Encoding",
               "Cache-Control": f"public, max-age={max_age}"}
    if not_modified(request.headers.get("If-None-Match"), rep):
        return web.Response(status=304, headers=headers)
    if gz:
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=rep.gzipped if gz else rep.body, headers={**headers, "Content-Type": rep.content_type})


class DomainLists:
    """The domain lists of a registry's file-domain metrics, built on first request."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._built: dict[str, Representation] = {}
        self._building: dict[str, asyncio.Future[Representation]] = {}

    def names(self) -> list[str]:
        return [s.name for s in self.registry if getattr(s, "domain_source", None) is not None
                and s.domain_source.kind == "file"]

    async def get(self, name: str) -> Representation:
        rep = self._built.get(name)
        if rep is not None:
            return rep
        spec = self.registry.metrics.get(name)
        source = getattr(spec, "domain_source", None)
        if spec is None or source is None or source.kind != "file":
            raise Problem("no-domain-file", f"metric {name[:100]!r} has no domain file (its registry entry "
                          "lists its values or numbers them, or there is no such metric)", metric=name[:100])
        pending = self._building.get(name)
        if pending is None:
            loop = asyncio.get_running_loop()
            pending = self._building[name] = loop.run_in_executor(None, self._build, spec)
        try:
            rep = await asyncio.shield(pending)
        finally:
            self._building.pop(name, None)
        self._built[name] = rep
        return rep

    @staticmethod
    def _build(spec: Any) -> Representation:
        body = domain_text(spec.categories).encode("utf-8")
        return Representation.of(body, "text/plain; charset=utf-8", spec.domain_source.sha256)
