"""The HTTP client side of `ldpt simulate --url` and `ldpt estimate --url`.

``send_batches`` is the load generator: batches written by the SDK's wire writer
(``client_sdk.uploader.pack_batch``) posted through the SDK's transport
(``client_sdk.aio.AsyncHTTPTransport``) over a few keep-alive connections; a batch is retried
with the *same* batch id and bytes on network errors and on the answers the SDK retries (408,
429, 5xx), after the SDK's back-off or the collector's Retry-After (delta-seconds, an HTTP-date
or the problem's ``retry_after``: ``RetryPolicy``), so the collector counts it exactly once;
an acknowledgement is what the SDK takes for one (``is_ack``); any other answer stops the run
with the collector's detail.
``fetch_estimates`` queries the estimates API with a bearer token and rebuilds the DataFrame,
so the CLI formats it exactly as it formats a local estimate.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from client_sdk.errors import LdptError, TransportError
from client_sdk.registry import MetricSpec
from sketches.base import Payloads

#: Reports per batch sent by `ldpt simulate --url`.
REMOTE_BATCH = 500
#: Batches in flight at once.
REMOTE_CONCURRENCY = 4
#: Give up on one batch after retrying this long (seconds).
RETRY_DEADLINE = 300.0
#: The SDK's back-off (client_sdk.uploader.RetryPolicy) from BACKOFF_BASE, at most BACKOFF_CAP seconds.
BACKOFF_BASE, BACKOFF_CAP = 0.1, 10.0
REQUEST_TIMEOUT = 60.0
#: Say the collector is not answering once retries have gone on this long without an ack (s),
#: and again every NOTICE_REPEAT seconds while it lasts.
NOTICE_AFTER, NOTICE_REPEAT = 3.0, 30.0


class RemoteError(LdptError):
    """The collector refused a request (its problem detail), or could not be reached."""

    status = 502
    type = "remote-error"


@dataclasses.dataclass
class SendStats:
    """What a send run did."""

    batches: int = 0
    reports: int = 0
    duplicates: int = 0
    retries: int = 0
    #: why the latest attempt failed (None once a batch is acknowledged again)
    failing: str | None = None


def encode_batch(spec: MetricSpec, wire: list[Any], batch_id: bytes | None = None) -> bytes:
    """One wire-format v1 body for one metric's wire payloads (fresh random id by default)."""
    from client_sdk.uploader import pack_batch

    return pack_batch([(spec.name, spec.fingerprint, w) for w in wire], batch_id)[1]


def batch_bodies(spec: MetricSpec, chunks: Iterable[tuple[int, Payloads]],
                 batch_size: int = REMOTE_BATCH) -> Iterator[tuple[int, bytes]]:
    """(reports, body) for every batch of ``batch_size`` reports of the encoded chunks."""
    from sketches import server_half
    proto = server_half(spec)
    for _, payloads in chunks:
        wire = proto.to_wire(payloads)
        for start in range(0, len(wire), batch_size):
            part = wire[start:start + batch_size]
            yield len(part), encode_batch(spec, part)


def _problem_detail(status: int, body: bytes) -> str:
    try:
        doc = json.loads(body)
        return f"{doc.get('detail') or doc.get('title')} [{doc.get('type', '').rsplit('/', 1)[-1]}]"
    except (ValueError, AttributeError):
        return body[:200].decode("utf-8", "replace") or f"HTTP {status}"


def ssl_context(cacert: str | None) -> ssl.SSLContext | None:
    """A TLS context trusting ``cacert`` (a PEM file of CA certificates: a private CA or a
    self-signed collector), or None for the system's trust store (which ``SSL_CERT_FILE`` and
    ``SSL_CERT_DIR`` also extend or replace)."""
    if cacert is None:
        return None
    try:
        return ssl.create_default_context(cafile=cacert)
    except (OSError, ssl.SSLError) as exc:
        raise RemoteError(f"{cacert}: cannot load CA certificates ({getattr(exc, 'strerror', None) or exc})") from None


def _unreachable(url: str, exc: BaseException) -> RemoteError:
    """'cannot reach the collector', with what to do when its certificate is not trusted."""
    reason = getattr(exc, "reason", exc)
    hint = ""
    if isinstance(reason, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(reason):
        hint = ("; a collector with a private CA or a self-signed certificate: give --cacert FILE "
                "(its CA certificate, PEM) or set SSL_CERT_FILE")
    return RemoteError(f"{url}: cannot reach the collector ({reason}){hint}")


async def send_batches(url: str, bodies: Iterable[tuple[int, bytes]], *,
                       progress: Callable[[int], None] | None = None,
                       ssl_context: ssl.SSLContext | None = None,
                       concurrency: int = REMOTE_CONCURRENCY, retry_deadline: float = RETRY_DEADLINE,
                       on_ack: Callable[[bytes, dict[str, Any]], None] | None = None,
                       notice: Callable[[str], None] | None = None, notice_after: float = NOTICE_AFTER,
                       notice_repeat: float = NOTICE_REPEAT, request_timeout: float = REQUEST_TIMEOUT,
                       backoff_cap: float = BACKOFF_CAP, stats: SendStats | None = None) -> SendStats:
    """POST every body to ``url``/v1/reports, retrying each until acknowledged.

    ``notice`` is told, in one line, when no batch has been acknowledged for ``notice_after``
    seconds while attempts fail (a collector that died or is overloaded: retrying silently for
    minutes looked like a hang), again every ``notice_repeat`` seconds, and when batches are
    acknowledged again. ``stats`` (filled as it goes) lets a caller that is interrupted say how
    much was acknowledged. Times are the event loop's clock."""
    from client_sdk.aio import AsyncHTTPTransport
    from client_sdk.transport import REPORTS_PATH
    from client_sdk.uploader import RetryPolicy, from_collector, is_ack, is_retryable

    endpoint = url.rstrip("/") + REPORTS_PATH
    stats = stats if stats is not None else SendStats()
    queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue(maxsize=2 * concurrency)
    transport = AsyncHTTPTransport(url, timeout=request_timeout, ssl_context=ssl_context)
    policy = RetryPolicy(initial=BACKOFF_BASE, maximum=backoff_cap, max_retry_after=retry_deadline)
    rand = random.Random()   # back-off jitter of a load generator: no secret in it
    loop = asyncio.get_running_loop()
    last_ack = loop.time()

    async def post_one(n: int, body: bytes) -> None:
        nonlocal last_ack
        deadline = loop.time() + retry_deadline
        attempt = 0
        while True:
            retry_after = None
            try:
                resp = await transport.apost_batch(body)
            except TransportError as exc:
                reason = _transport_failure(url, exc, request_timeout)
            else:
                if is_ack(resp):
                    doc = resp.json()
                    last_ack, stats.failing = loop.time(), None
                    stats.batches += 1
                    stats.reports += n
                    stats.duplicates += bool(doc.get("duplicate"))
                    if on_ack is not None:
                        on_ack(body, doc)
                    if progress is not None:
                        progress(n)
                    return
                detail = _problem_detail(resp.status, resp.body)
                if not is_retryable(resp.status):
                    raise RemoteError(f"{endpoint}: HTTP {resp.status}: {detail}" + (
                        "" if from_collector(resp) else " (not an ldpt collector's answer: is this its address?)"))
                retry_after = resp.retry_after()
                reason = f"the collector answers HTTP {resp.status} ({detail})"
            stats.failing = reason
            if loop.time() >= deadline:
                raise RemoteError(f"{endpoint}: gave up on a batch after {retry_deadline:g} s of "
                                  f"retries (last: {reason})")
            stats.retries += 1
            attempt += 1
            await asyncio.sleep(policy.delay(attempt, retry_after, rand))

    async def watch() -> None:
        """One line when acks stop while attempts fail, repeated while it lasts; one when they resume."""
        told = None  # when the latest notice was given, while acks have stopped
        while True:
            await asyncio.sleep(min(0.25, notice_after / 4))
            now, quiet = loop.time(), loop.time() - last_ack
            if stats.failing is not None and quiet >= notice_after and (told is None or now - told >= notice_repeat):
                notice(f"{url}: no batch acknowledged for {quiet:.0f} s: {stats.failing}; retrying each batch "
                       f"with the same id for up to {retry_deadline:g} s; {stats.reports:,} reports "
                       "acknowledged so far (Ctrl-C stops and says how many)")
                told = now
            elif told is not None and last_ack > told:
                notice(f"{url}: the collector acknowledges batches again ({stats.reports:,} reports so far)")
                told = None

    async def worker() -> None:
        while (item := await queue.get()) is not None:
            await post_one(*item)

    try:
        workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
        watcher = asyncio.create_task(watch()) if notice is not None else None
        try:
            for item in bodies:
                # put without blocking forever if a worker has failed. asyncio.wait, not a polling
                # loop of wait_for(put, 1 s): Python 3.11's wait_for can lose a cancellation that
                # races its timeout (CPython gh-86296), and asyncio.run's Ctrl-C is a cancellation
                put = asyncio.ensure_future(queue.put(item))
                try:
                    while not put.done():
                        await asyncio.wait([put, *workers], return_when=asyncio.FIRST_COMPLETED)
                        failed = next((w for w in workers if w.done()), None)
                        if failed is not None:
                            failed.result()
                finally:
                    put.cancel()
            for _ in workers:
                await queue.put(None)
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
            if watcher is not None:
                watcher.cancel()
    finally:
        await transport.aclose()
    return stats


def _transport_failure(url: str, exc: TransportError, request_timeout: float) -> str:
    """Why no answer came back, for the notice; a certificate the system does not trust is
    raised at once (``_unreachable`` says what to do): retrying cannot fix trust."""
    import aiohttp

    cause = exc.__context__   # the transport's own error, raised "from None"
    if isinstance(cause, aiohttp.ClientConnectorCertificateError):
        raise _unreachable(url, cause.certificate_error) from None
    if isinstance(cause, asyncio.TimeoutError):
        return f"the collector is unreachable (no answer within {request_timeout:g} s)"
    if cause is not None:
        return f"the collector is unreachable ({type(cause).__name__}: {cause})"
    return f"the collector is unreachable ({exc})"


def read_token(path: str | Path) -> str:
    """The first non-empty line of a token file."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise RemoteError(f"{path}: cannot read token file ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise RemoteError(f"{path}: the token file is not UTF-8 text") from None
    token = next((line.strip() for line in lines if line.strip()), "")
    if not token:
        raise RemoteError(f"{path}: the token file is empty")
    return token


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """urllib would re-send every header, the bearer token too, to wherever a 3xx points
    (another host, plain http): a query request stops there and says where it pointed."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str,
                         headers: Any, newurl: str) -> None:
        raise RemoteError(f"{req.full_url.split('?')[0]}: HTTP {code} redirect to {newurl}; the query "
                          "token is not sent after a redirect: give the final address as --url")


_QUERY_OPENER = urllib.request.build_opener(_RefuseRedirects)


def open_query(req: urllib.request.Request, timeout: float = REQUEST_TIMEOUT,
               context: ssl.SSLContext | None = None) -> Any:
    """``urlopen`` for requests carrying the query token: the same, but never follows a redirect
    (``context``: the TLS trust of ``--cacert``)."""
    opener = _QUERY_OPENER if context is None else \
        urllib.request.build_opener(_RefuseRedirects, urllib.request.HTTPSHandler(context=context))
    return opener.open(req, timeout=timeout)


def fetch_answer(url: str, path: str, token: str, query: dict[str, Any], body: dict[str, Any] | None = None,
                 context: ssl.SSLContext | None = None) -> bytes:
    """The bytes of a query API answer: GET ``path`` with ``query`` (None values left out), or with
    ``body`` POST both as JSON, with the bearer token. A problem answer raises RemoteError with the
    collector's detail; no answer, RemoteError saying it cannot reach the collector."""
    endpoint = f"{url.rstrip('/')}{path}"
    fields = {k: v for k, v in query.items() if v is not None}
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    if body is None:
        req = urllib.request.Request(f"{endpoint}?{urllib.parse.urlencode(fields)}", headers=headers)
    else:
        req = urllib.request.Request(endpoint, data=json.dumps({**fields, **body}).encode(), method="POST",
                                     headers={**headers, "Content-Type": "application/json"})
    try:
        with open_query(req, context=context) as resp:
            return resp.read()
    except urllib.error.HTTPError as exc:
        raise RemoteError(f"{url}: HTTP {exc.code}: {_problem_detail(exc.code, exc.read())}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise _unreachable(url, exc) from None


def metric_path(metric: str, verb: str) -> str:
    """``/v1/metrics/{name}/{verb}`` with the name escaped."""
    return f"/v1/metrics/{urllib.parse.quote(metric, safe='')}/{verb}"


def fetch_estimates(url: str, metric: str, token: str, params: dict[str, Any],
                    candidates: list[str] | None = None, context: ssl.SSLContext | None = None) -> dict[str, Any]:
    """GET (or, with candidates, POST) the estimates API; the parsed {"meta", "estimates"}."""
    data = fetch_answer(url, metric_path(metric, "estimates"), token, params,
                        None if candidates is None else {"candidates": candidates}, context)
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("estimates"), list):
        raise RemoteError(f"{url}: the answer is not an estimate document; is this an ldpt "
                          "collector's address?")
    return doc


def fetch_comparison(url: str, metric: str, token: str, a: str, b: str, confidence: float, alpha: float,
                     control: str, simultaneous: bool, context: ssl.SSLContext | None = None) -> dict[str, Any]:
    """The compare API's answer (``a``, ``b``: a window or D1..D2 each); the parsed document."""
    params = {"a": a, "b": b, "confidence": repr(confidence), "alpha": repr(alpha), "control": control,
              "simultaneous": "true" if simultaneous else None, "format": "json"}
    data = fetch_answer(url, metric_path(metric, "compare"), token, params, context=context)
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise _unreachable(url, exc) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("estimates"), list):
        raise RemoteError(f"{url}: the answer is not a comparison document")
    return doc


def check_reachable(url: str, timeout: float = 10.0, context: ssl.SSLContext | None = None) -> None:
    """Fail fast, with one line, when nothing answers GET /healthz at ``url``.

    ``send_batches`` retries network errors for minutes (a collector restarting mid-run), which
    is the wrong behaviour for a mistyped address or a collector that was never started.
    """
    endpoint = url.rstrip("/") + "/healthz"
    handlers: list[Any] = [urllib.request.ProxyHandler({})]  # as aiohttp: no env proxy
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    direct = urllib.request.build_opener(*handlers)
    try:
        with direct.open(endpoint, timeout=timeout) as resp:
            resp.read()
    except urllib.error.HTTPError as exc:
        raise RemoteError(f"{url}: GET /healthz answered HTTP {exc.code}; is this an ldpt "
                          "collector's address?") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise _unreachable(url, exc) from None


def frame_from_json(doc: dict[str, Any]) -> pd.DataFrame:
    """Inverse of ``cli.output.frame_to_json``: rows and ``attrs`` as the estimator made them."""
    rows = doc.get("estimates", [])
    columns = list(rows[0]) if rows else []
    df = pd.DataFrame.from_records(rows, columns=columns)
    df.attrs.update(doc.get("meta", {}))
    return df
