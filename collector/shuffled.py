"""``POST /v1/shuffled-batches``: a shuffled batch of sealed envelopes from an authenticated shuffler.

A shuffler (`ldpt shuffle`, shuffler/) holds devices' envelopes, then forwards them in uniformly
shuffled batches (docs/wire-format.md, "Forwarding: shuffled batches"). This endpoint:

1. authenticates the shuffler: ``Authorization: Bearer <token>`` with a token of
   ``shuffler_token_file``, compared in constant time against every token (401 ``unauthorized``
   with a ``reason``; a refused request spends its source's rate-limit token, so guessing is
   throttled; an authenticated shuffler is not rate-limited);
2. reads the body within ``max_shuffled_batch_bytes`` (charged to the in-flight budget like a
   relay's) and decodes it: a msgpack map ``{"v": 1, "batch_id": <16 bytes>, "envelopes": [<bin>, ...]}``;
3. answers at once when the forwarded batch id was committed before (``duplicate``: the shuffler
   did not see the first acknowledgement);
4. opens every envelope with the gateway's ``open_envelope`` — decapsulate, decode, validate, the
   per-batch limits of ONE device (an envelope is one device's batch, whoever forwards it), the
   segment cap — and notes what it shows in clear (``envelope_view``);
5. commits the forwarded batch whole (``ShuffledBatch``: its id, each member's batch-id dedupe,
   the window's ``ShuffleRecord``) in one transaction of the group committer, and answers only
   after that commit.

An envelope that cannot be opened or whose batch is refused is final (``ldpt_sealed_envelopes_total``
and, by reason, ``ldpt_requests_rejected_total``): its device settled on the shuffler's
acknowledgement, and nothing can bring it back. A retriable failure of the whole — queue full,
store down, shutting down — is a 503 with Retry-After with nothing committed: the shuffler sends
the same batch again, and the batch ids make that exact.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgpack
from aiohttp import web

from collector.storage.base import BatchOutcome, PendingBatch
from collector.storage.shuffled import EnvelopeView, ShuffledBatch

from .gateway import open_envelope
from .problems import Problem

if TYPE_CHECKING:
    from .app import CollectorState

SHUFFLED_PATH = "/v1/shuffled-batches"
#: The body's media type (a msgpack map; docs/wire-format.md).
SHUFFLED_TYPE = "application/msgpack"
SHUFFLED_VERSION = 1
BATCH_ID_BYTES = 16
SHUFFLER_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="ldpt-shuffler"'}
#: Envelopes opened between two yields to the event loop (each takes ~0.2 ms of CPU: a batch of
#: 10,000 must not hold the loop for two seconds while devices wait).
YIELD_EVERY = 32


def check_shuffler(header: str | None, tokens: Sequence[bytes]) -> None:
    """401 ``unauthorized`` (``reason``: missing, not-bearer, invalid) unless the header carries
    one of ``tokens``; every comparison runs, so the time says nothing of which token is near."""
    if header is None:
        raise _unauthorized("missing", "send the shuffler's token as 'Authorization: Bearer <token>'")
    scheme, _, given = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise _unauthorized("not-bearer", "the Authorization header must be 'Bearer <token>'")
    given_bytes = given.strip().encode("utf-8", "surrogateescape")
    ok = False
    for token in tokens:
        ok |= hmac.compare_digest(given_bytes, token)
    if not ok:
        raise _unauthorized("invalid", "the token is not one of this collector's shuffler tokens")


def _unauthorized(reason: str, detail: str) -> Problem:
    return Problem("unauthorized", f"shuffled batches come only from authenticated shufflers: {detail}",
                   headers=dict(SHUFFLER_CHALLENGE), reason=reason)


def forwarded_digest(envelopes: Sequence[bytes]) -> bytes:
    """The digest of a forwarded batch: SHA-256 over its envelopes' SHA-256s in sorted order, so
    the same envelopes sent again in another order are the same batch."""
    return hashlib.sha256(b"".join(sorted(hashlib.sha256(e).digest() for e in envelopes))).digest()


def decode_forwarded(body: bytes, max_envelopes: int) -> tuple[bytes, list[bytes]]:
    """(batch id, envelopes) of a shuffled batch's body, or a 400/422 problem."""
    try:
        doc = msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=True, max_map_len=3,
                              max_array_len=max_envelopes)
    except ValueError as exc:
        if "max_array_len" in str(exc):
            raise Problem("invalid-batch", f"more than {max_envelopes} envelopes in one shuffled batch "
                          "(this collector's max_shuffled_envelopes); forward smaller batches",
                          field="envelopes") from None
        raise Problem("undecodable-body", f"not a msgpack document: {type(exc).__name__}") from None
    except Exception as exc:  # msgpack raises many types on hostile input; all mean 400
        raise Problem("undecodable-body", f"not a msgpack document: {type(exc).__name__}") from None
    if not isinstance(doc, dict) or set(doc) != {"v", "batch_id", "envelopes"}:
        raise Problem("invalid-batch", "a shuffled batch is a msgpack map with exactly the keys v, "
                      "batch_id and envelopes")
    if type(doc["v"]) is not int or doc["v"] != SHUFFLED_VERSION:
        raise Problem("unsupported-version", f"shuffled batch version {str(doc['v'])[:20]!r} is not "
                      f"supported; this collector speaks version {SHUFFLED_VERSION}", field="v")
    batch_id, envelopes = doc["batch_id"], doc["envelopes"]
    if type(batch_id) is not bytes or len(batch_id) != BATCH_ID_BYTES:
        raise Problem("invalid-batch", f"'batch_id' must be {BATCH_ID_BYTES} random bytes (msgpack bin)",
                      field="batch_id")
    if type(envelopes) is not list or not envelopes or not all(type(e) is bytes for e in envelopes):
        raise Problem("invalid-batch", "'envelopes' must be a non-empty array of msgpack bin (each a "
                      "message/ohttp-req body)", field="envelopes")
    return batch_id, envelopes


def envelope_view(state: CollectorState, batch: PendingBatch) -> EnvelopeView:
    """What the collector sees in clear of an opened envelope's batch (collector/storage/shuffled.py):
    its metrics, fingerprints and report counts, its public dimensions, each key's cohorts,
    and the local ε it carries — per metric c·ε for c reports, or c·ε∞ when the metric is
    memoised and c > 1 (c reports post-process at most c memoised responses; docs/privacy.md)."""
    deltas = batch.deltas
    per_metric: dict[str, int] = dict(getattr(deltas, "per_metric", {}) or {})
    keys: dict[Any, tuple[int, tuple[int, ...]]] = {}
    signature = []
    epsilon = 0.0
    for key, proto, payloads in deltas.payload_groups:
        name = key.metric.split("@", 1)[0]
        count = per_metric[name]
        keys[key] = (count, _cohorts(proto, payloads))
        if "@" not in key.metric:
            signature.append((name, key.fingerprint, count))
            e, e_inf = state.metric_epsilons[name]
            epsilon += count * e if e_inf is None or count == 1 else count * e_inf
    dims = getattr(deltas, "dims", None) or {}
    return EnvelopeView(tuple(sorted(signature)), tuple(sorted(dims.items())), keys, epsilon, batch.reports)


def _cohorts(proto: Any, payloads: Any) -> tuple[int, ...]:
    """The cohort numbers a key's reports carry in clear (discover: its group), sorted; () when
    the protocol has none."""
    values = payloads.get(proto.cohort_field) if proto.clear_cohorts > 1 and hasattr(payloads, "get") else None
    return () if values is None else tuple(sorted(int(c) for c in values))


async def post_shuffled(request: web.Request) -> web.Response:
    """A shuffled batch from an authenticated shuffler (module docstring)."""
    from .app import STATE, check_content_encoding, limited_body

    state = request.app[STATE]
    if not state.shuffler_tokens:
        raise Problem("not-found", "this collector takes no shuffled batches (its operator has not set "
                      "shuffler_token_file)")
    source, _ = state.policy.source(request.remote, request.headers)
    try:
        check_shuffler(request.headers.get("Authorization"), state.shuffler_tokens)
    except Problem:
        state.policy.admit(source, False)   # a refusal spends the source's token: guessing is throttled
        raise
    if request.content_type != SHUFFLED_TYPE:
        raise Problem("unsupported-media-type", f"Content-Type {request.content_type!r} is not accepted "
                      f"here; send {SHUFFLED_TYPE} (a shuffled batch)", headers={"Accept-Post": SHUFFLED_TYPE})
    check_content_encoding(request.headers.get("Content-Encoding"))
    config = state.config
    try:
        limit = min(config.max_shuffled_batch_bytes, config.max_inflight_bytes)
        async with limited_body(request, state, source, True, limit) as body:
            batch_id, envelopes = decode_forwarded(body, config.max_shuffled_envelopes)
            del body
            answer = await _commit_forwarded(state, batch_id, envelopes)
    except Problem:
        state.telemetry.shuffled_batch("refused")
        raise
    return web.json_response(answer)


async def _commit_forwarded(state: CollectorState, batch_id: bytes, envelopes: list[bytes]) -> dict[str, Any]:
    digest = forwarded_digest(envelopes)
    prior = await state.store.ashuffled_batch(batch_id)
    if prior is not None:
        return _known(state, batch_id, prior == digest, len(envelopes))
    members: list[PendingBatch] = []
    views: list[EnvelopeView] = []
    counts = {"accepted": 0, "duplicates": 0, "refused": 0, "undecryptable": 0}
    for i, envelope in enumerate(envelopes):
        if i % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)
        opened = await open_envelope(state, envelope, shuffled=True)
        if opened.final is not None:
            _count_envelope(state, opened.final.outcome, opened.final.problem)
            counts[opened.final.outcome] += 1   # refused, undecryptable
            continue
        assert opened.batch is not None
        members.append(opened.batch)
        views.append(envelope_view(state, opened.batch))
    result = await state.committer.submit(ShuffledBatch(batch_id, digest, len(envelopes), members, views))
    if result.outcome is not BatchOutcome.APPLIED:   # committed meanwhile by another delivery
        return _known(state, batch_id, result.outcome is BatchOutcome.DUPLICATE, len(envelopes))
    reports = 0
    for member, outcome in zip(members, result.members):
        if outcome is BatchOutcome.CONFLICT:
            problem = Problem("batch-id-conflict", "an envelope's batch id was committed with another body")
            _count_envelope(state, "refused", problem, member.reports)
            counts["refused"] += 1
            continue
        applied = outcome is BatchOutcome.APPLIED
        state.telemetry.envelope("accepted" if applied else "duplicate")
        counts["accepted" if applied else "duplicates"] += 1
        reports += member.reports if outcome is BatchOutcome.APPLIED else 0
    state.telemetry.shuffled_batch("applied")
    return {"batch_id": batch_id.hex(), "duplicate": False, "envelopes": len(envelopes), **counts,
            "reports": reports}


def _known(state: CollectorState, batch_id: bytes, same: bool, envelopes: int) -> dict[str, Any]:
    """The answer to a forwarded batch id committed before (or a 409 if with other envelopes)."""
    if not same:
        state.telemetry.shuffled_batch("conflict")
        raise Problem("shuffled-batch-conflict", f"shuffled batch {batch_id.hex()} was committed with other "
                      "envelopes; a resent batch must carry the same envelopes, and a new batch needs a "
                      "new random id", field="batch_id")
    state.telemetry.shuffled_batch("duplicate")
    return {"batch_id": batch_id.hex(), "duplicate": True, "envelopes": envelopes}


def _count_envelope(state: CollectorState, outcome: str, problem: Problem | None, reports: int = 0) -> None:
    state.telemetry.envelope(outcome)
    if problem is not None:
        state.count_error("ingest", problem.slug, reports or problem.reports)
