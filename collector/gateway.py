"""The collector as an Oblivious HTTP gateway (RFC 9458): decapsulate one envelope, run the
normal ingest path on the batch inside, encapsulate the answer.

``handle_envelope`` is the whole gateway for one ``message/ohttp-req`` body, independent of
HTTP: ``POST /.well-known/ohttp-gateway`` calls it once per request (collector/app.py), and an
authenticated batch endpoint (a shuffler forwarding many envelopes) can call it once per
envelope. It never raises for anything an envelope contains:

- an envelope that cannot be opened (too short, unknown or expired key id, another suite, a
  ciphertext that does not open) is ``undecryptable``: no encapsulated answer can be made, so
  the caller answers in clear — a 400 problem, ``ohttp-key`` (RFC 9458 §5.3) when the key is
  the reason, so the client refetches the key configuration and reseals;
- anything after that — not a Binary HTTP request, another method or path, a content type
  other than msgpack, a batch the collector refuses, an overloaded store — is the *inner*
  answer (status, problem+json, Retry-After), encapsulated like an acknowledgement, exactly
  what ``POST /v1/reports`` would have answered to the same batch.

The batch goes through ``app.ingest_batch``: the same decoder, limits, segment cap, group
commit and batch-id dedupe as a plain batch (a resent envelope carries the same batch bytes,
so it is a duplicate). Each envelope is one device's batch, so the per-batch limits of a
device apply (``relay=False``), whoever forwarded it; rate limits are the outer request's.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import TYPE_CHECKING

from client_sdk import bhttp, ohttp
from client_sdk.errors import LdptError

from .problems import PROBLEM_CONTENT_TYPE, Problem

if TYPE_CHECKING:
    from collector.storage.base import PendingBatch

    from .app import CollectorState

log = logging.getLogger("ldpt.collector")

MSGPACK_TYPES = frozenset({"application/msgpack", "application/x-msgpack", "application/vnd.msgpack"})


@dataclasses.dataclass(frozen=True)
class EnvelopeResult:
    """What became of one envelope.

    ``outcome``: ``accepted`` (committed now), ``duplicate`` (this batch id and body were
    committed before: counted once), ``refused`` (the inner batch was rejected: ``problem``
    says why, ``status`` is its HTTP status, e.g. 422 or a retriable 503 with
    ``retry_after``), ``undecryptable`` (no inner request: ``problem`` is the clear 400).
    ``response`` is the ``message/ohttp-res`` body to send back (None when undecryptable).
    """

    outcome: str
    status: int
    response: bytes | None
    problem: Problem | None = None
    reports: int = 0
    batch_id: bytes | None = None
    key_id: int | None = None

    @property
    def retry_after(self) -> int | None:
        return None if self.problem is None else self.problem.retry_after


async def handle_envelope(state: CollectorState, envelope: bytes) -> EnvelopeResult:
    """Decapsulate ``envelope``, ingest the batch inside, encapsulate the answer."""
    result = await _handle(state, envelope)
    state.telemetry.envelope(result.outcome)
    if result.problem is not None:
        state.count_error("ingest", result.problem.slug, result.problem.reports)
    return result


@dataclasses.dataclass
class OpenedEnvelope:
    """An envelope opened, its batch decoded and checked, not yet committed (``open_envelope``):
    ``batch`` to commit, or ``final`` — the result when it cannot be (refused, undecryptable)."""

    batch: PendingBatch | None
    final: EnvelopeResult | None
    opened: ohttp.OpenedRequest | None = None


async def open_envelope(state: CollectorState, envelope: bytes, *, shuffled: bool = False) -> OpenedEnvelope:
    """Decapsulate ``envelope`` and decode and check the batch inside as ``POST /v1/reports``
    would (``shuffled``: it came through an authenticated shuffler, so a metric that requires
    shuffling is not refused), without committing it. Never raises for what it contains."""
    try:
        opened = ohttp.open_request(state.keyring.accepted(), envelope)
    except ohttp.KeyProblem as exc:
        return OpenedEnvelope(None, EnvelopeResult("undecryptable", 400, None, Problem("ohttp-key", str(exc))))
    except ohttp.OhttpError as exc:
        return OpenedEnvelope(None, EnvelopeResult("undecryptable", 400, None,
                                                   Problem("undecodable-envelope", str(exc))))
    try:
        from .app import check_decoded, decode_batch

        batch = decode_batch(state, _inner_batch(state, opened.message))
        await check_decoded(state, batch, relay=False, shuffled=shuffled)
    except Exception as exc:  # noqa: BLE001 - every envelope it opened gets an answer
        return OpenedEnvelope(None, _refused(opened, _problem_of(exc)), opened)
    return OpenedEnvelope(batch, None, opened)


def _problem_of(exc: Exception) -> Problem:
    if isinstance(exc, Problem):
        return exc
    if isinstance(exc, LdptError):
        return Problem.from_error(exc)
    log.error("internal error on a sealed batch", exc_info=exc)
    return Problem("internal-error", "the collector hit an unexpected error; it was logged")


async def _handle(state: CollectorState, envelope: bytes) -> EnvelopeResult:
    prepared = await open_envelope(state, envelope)
    if prepared.final is not None:
        return prepared.final
    assert prepared.batch is not None and prepared.opened is not None
    opened = prepared.opened
    try:
        from .app import submit_checked

        ingested = await submit_checked(state, prepared.batch)
    except Exception as exc:  # noqa: BLE001 - the gateway answers every envelope it opened (never an outer 5xx)
        return _refused(opened, _problem_of(exc))
    body = json.dumps({"accepted": ingested.reports, "duplicate": ingested.duplicate}).encode()
    message = ohttp.inner_response(200, [("content-type", "application/json")], body)
    return EnvelopeResult("duplicate" if ingested.duplicate else "accepted", 200,
                          ohttp.seal_response(opened, message), None, ingested.reports,
                          ingested.batch_id, opened.key_id)


def _refused(opened: ohttp.OpenedRequest, problem: Problem) -> EnvelopeResult:
    headers = [("content-type", PROBLEM_CONTENT_TYPE)]
    if problem.retry_after is not None:
        headers.append(("retry-after", str(problem.retry_after)))
    message = ohttp.inner_response(problem.status, headers, json.dumps(problem.to_dict()).encode())
    return EnvelopeResult("refused", problem.status, ohttp.seal_response(opened, message), problem,
                          key_id=opened.key_id)


def _inner_batch(state: CollectorState, message: bytes) -> bytes:
    """The batch bytes of an opened request, or the Problem ``POST /v1/reports`` would raise."""
    try:
        request = bhttp.decode_request(message)
    except bhttp.BinaryHTTPError as exc:
        raise Problem("undecodable-body", f"the sealed request is not a Binary HTTP request "
                      f"(RFC 9292): {exc}") from None
    if request.path != ohttp.INNER_PATH:
        raise Problem("not-found", f"a sealed request goes to {ohttp.INNER_PATH}, not "
                      f"{request.path[:60]!r}")
    if request.method != "POST":
        raise Problem("method-not-allowed", f"a sealed request is a POST, not {request.method[:10]!r}",
                      headers={"Allow": "POST"})
    auth = request.header("authorization")
    state.policy.check_key(None if auth is None else auth.decode("utf-8", "surrogateescape"))
    ctype = (request.header("content-type") or b"").decode("latin-1").split(";")[0].strip().lower()
    if ctype not in MSGPACK_TYPES:
        raise Problem("unsupported-media-type", f"the sealed request's content-type is {ctype[:60]!r}; "
                      "it carries application/msgpack (wire format v1)")
    coding = (request.header("content-encoding") or b"").decode("latin-1").strip().lower()
    if coding not in ("", "identity"):
        raise Problem("unsupported-content-encoding", "a sealed batch is not compressed (its length "
                      "is padded to a size class anyway)", content_encoding=coding[:60])
    if len(request.content) > state.config.max_body_bytes:
        raise Problem("body-too-large", f"the sealed batch has {len(request.content)} bytes; this "
                      f"collector accepts at most {state.config.max_body_bytes} (send smaller batches)")
    return request.content
