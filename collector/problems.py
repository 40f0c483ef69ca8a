"""RFC 9457 problem documents: the one error body shape of the collector's HTTP API.

Every error the collector answers is ``application/problem+json``::

    {"type": "https://ldp-telemetry.dev/problems/<slug>", "title": ..., "status": ...,
     "detail": ..., <extension members: report_index, metric, field, retry_after, ...>}

``PROBLEM_TYPES`` declares every slug once (status and title), feeding the responses, the
Prometheus rejection reasons and docs/openapi.yaml's list of types (a test keeps them equal).
"""

from __future__ import annotations

import json
import math
from typing import Any

from aiohttp import web

from client_sdk.errors import LdptError

PROBLEM_BASE = "https://ldp-telemetry.dev/problems/"
PROBLEM_CONTENT_TYPE = "application/problem+json"
#: Seconds a client is told to wait when the store is unavailable.
STORE_RETRY_AFTER = 5

#: slug -> (HTTP status, title). The slug is the machine-readable part of ``type``.
PROBLEM_TYPES: dict[str, tuple[int, str]] = {
    "undecodable-body": (400, "The request body cannot be decoded (as sent, or as msgpack)"),
    "client-disconnected": (400, "The client closed the connection before its request was complete"),
    "bad-http-request": (400, "The HTTP request is malformed"),
    "ohttp-key": (400, "The sealed request names a key this gateway does not hold; fetch its key "
                  "configuration again"),
    "undecodable-envelope": (400, "The body is not an Oblivious HTTP encapsulated request"),
    "invalid-query": (400, "A query parameter is invalid"),
    "unauthorized": (401, "A valid bearer token is required"),
    "ingest-key-required": (401, "This collector accepts batches only with its ingest key"),
    "origin-not-allowed": (403, "This web origin may not call the collector from a browser"),
    "query-disabled": (403, "The query API is disabled on this collector"),
    "too-few-reports": (403, "Too few reports in the selected windows to publish an estimate"),
    "shuffle-required": (403, "This metric's reports are accepted only through an authenticated shuffler"),
    "not-found": (404, "No such resource"),
    "no-data": (404, "No reports stored for this metric and window"),
    "method-not-allowed": (405, "Method not allowed"),
    "request-timeout": (408, "The request (headers or body) did not arrive in time"),
    "shuffled-batch-conflict": (409, "This shuffled batch id was already used for other envelopes"),
    "length-required": (411, "A request body needs Content-Length (or chunked encoding)"),
    "body-too-large": (413, "The request body is larger than this collector accepts"),
    "unsupported-media-type": (415, "Unsupported content type"),
    "unsupported-content-encoding": (415, "Unsupported Content-Encoding"),
    "invalid-batch": (422, "The batch envelope is invalid"),
    "unsupported-version": (422, "Unsupported wire format version"),
    "unknown-metric": (422, "The metric is not in this collector's registry"),
    "no-domain-file": (404, "The metric's domain is not published as a list"),
    "too-many-queries": (503, "Too many large estimates are being computed; retry later"),
    "fingerprint-mismatch": (422, "A report was encoded under other metric parameters"),
    "invalid-report": (422, "A report could not have been produced by an honest client"),
    "invalid-dimension": (422, "A public dimension of the batch is undeclared or outside its values"),
    "batch-id-conflict": (422, "This batch id was already used for a different body"),
    "too-many-reports": (422, "More reports of one metric in a batch than one device sends"),
    "rate-limited": (429, "Too many batches from this source; retry later"),
    "estimation-error": (422, "The estimate cannot be computed as asked"),
    "internal-error": (500, "Internal error"),
    "overloaded": (503, "The collector is overloaded; retry later"),
    "store-unavailable": (503, "The sketch store is unavailable; retry later"),
    "shutting-down": (503, "The collector is shutting down; retry later"),
    "no-gateway-key": (503, "The gateway has no active key to publish; retry later"),
    "pool-full": (503, "The shuffler's pool is full; retry later"),
    "shuffler-not-ready": (503, "The shuffler does not know the collector's keys yet; retry later"),
}
#: Problems whose ``type`` is registered elsewhere than under PROBLEM_BASE.
PROBLEM_TYPE_URIS: dict[str, str] = {
    "ohttp-key": "https://iana.org/assignments/http-problem-types#ohttp-key",  # RFC 9458 §5.3
}


class Problem(Exception):
    """An HTTP error with a problem document; ``extra`` holds the extension members."""

    def __init__(self, slug: str, detail: str, *, status: int | None = None,
                 retry_after: float | None = None, headers: dict[str, str] | None = None,
                 close: bool = False, **extra: Any) -> None:
        if slug not in PROBLEM_TYPES:
            raise ValueError(f"undeclared problem type {slug!r}")
        super().__init__(detail)
        default_status, self.title = PROBLEM_TYPES[slug]
        self.slug = slug
        self.status = status or default_status
        self.detail = detail
        self.retry_after = None if retry_after is None else max(1, math.ceil(retry_after))
        self.headers = dict(headers or {})
        self.extra = {k: v for k, v in extra.items() if v is not None}
        self.reports = 0  # reports in the rejected batch, when it was decoded (telemetry only)
        self.close = close  # the connection cannot carry another request (unread body)

    @classmethod
    def from_error(cls, exc: LdptError, **extra: Any) -> Problem:
        """Map a library error (it carries ``status`` and ``type``) to its problem."""
        slug = exc.type if exc.type in PROBLEM_TYPES else "invalid-report"
        if exc.status == 503:  # every 503 says when to come back (openapi's Retry response)
            extra.setdefault("retry_after", STORE_RETRY_AFTER)
        return cls(slug, str(exc), status=exc.status, **extra)

    def to_dict(self) -> dict[str, Any]:
        body = {"type": PROBLEM_TYPE_URIS.get(self.slug, PROBLEM_BASE + self.slug), "title": self.title, "status": self.status,
                "detail": self.detail}
        if self.retry_after is not None:
            body["retry_after"] = self.retry_after
        body.update(self.extra)
        return body

    def response(self) -> web.Response:
        headers = dict(self.headers)
        if self.retry_after is not None:
            headers["Retry-After"] = str(self.retry_after)
        resp = web.Response(status=self.status, body=json.dumps(self.to_dict()).encode(),
                            content_type=PROBLEM_CONTENT_TYPE, headers=headers)
        if self.close:
            resp.force_close()  # sends Connection: close
        return resp
