"""The access log of ``--access-log``: aiohttp's line, with every query *value* removed.

A query token belongs in ``Authorization``, but a user who pastes it into a URL
(``/v1/metrics/x/estimates?token=...``) or a dashboard link carrying one in its Referer would
otherwise leave it in the log, readable by whoever reads logs. So the request target and the
Referer keep their path and the *names* of the collector's own parameters (``?window=&format=``:
enough to see what was asked) and lose every value; any other name (``?token=``, or a secret
pasted as ``?<token>``, which is a name with no value) is written ``…``. The rest is aiohttp's default format:
address, time, request line, status, bytes, Referer, User-Agent (docs/operations.md).
"""

from __future__ import annotations

import datetime as dt

from aiohttp.abc import AbstractAccessLogger
from aiohttp.web import BaseRequest, StreamResponse

from .query import COMPARE_FIELDS, QUERY_FIELDS

#: The query parameters the collector reads (query API, compare, dashboard charts): the only
#: names logged.
PARAMETER_NAMES = frozenset((*QUERY_FIELDS, *COMPARE_FIELDS, "value", "width"))
HIDDEN = "…"


def strip_query_values(target: str) -> str:
    """``/path?window=1&format=2`` -> ``/path?window=&format=``; a name the collector does not
    read -> ``…``."""
    path, sep, query = target.partition("?")
    if not sep:
        return path
    path = path.split("#", 1)[0]
    names = []
    for part in query.split("#", 1)[0].split("&"):
        if not part:
            continue
        name = part.split("=", 1)[0]
        names.append(f"{name}=" if name in PARAMETER_NAMES else HIDDEN)
    return f"{path}?{'&'.join(names)}"


class QueryFreeAccessLogger(AbstractAccessLogger):
    """One INFO line per request, without query values (module docstring)."""

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        target = strip_query_values(request.raw_path)
        referer = request.headers.get("Referer")
        referer = "-" if referer is None else strip_query_values(referer)
        agent = request.headers.get("User-Agent", "-")
        when = dt.datetime.now(dt.timezone.utc).strftime("[%d/%b/%Y:%H:%M:%S +0000]")
        version = f"HTTP/{request.version.major}.{request.version.minor}"
        self.logger.info('%s %s "%s %s %s" %d %d %.6f "%s" "%s"', request.remote or "-", when,
                         request.method, target, version, response.status, response.body_length,
                         time, _printable(referer), _printable(agent))


def _printable(text: str) -> str:
    """Header text for one log line: control characters and quotes escaped."""
    return "".join(c if c.isprintable() and c != '"' else f"\\x{ord(c) & 0xFF:02x}" for c in text)
