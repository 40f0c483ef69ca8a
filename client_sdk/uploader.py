"""The background half of the SDK: batch, charge, persist, send, retry.

``report()`` (app thread) encodes a value and puts the randomised report on a bounded
queue. The uploader's worker then, per batch:

1. takes up to ``batch_size`` reports when that many are queued, when the oldest has waited
   ``max_batch_age`` seconds, or when someone flushes;
2. charges them to their clients' privacy ledgers in one transaction per ledger — a report
   the ledger refuses is dropped here, so it is never sent (client_sdk.ledger);
3. packs the rest into one wire-format-v1 batch with a fresh random 16-byte batch id
   (docs/wire-format.md) and writes it to the outbox *before* the first send;
4. POSTs outbox batches oldest first. 200: delete. Network error, 408, 429 or 5xx: keep the
   batch (same bytes, same id) and retry after ``RetryPolicy.delay`` — exponential backoff
   with jitter, or exactly the server's ``Retry-After``. ``flush()`` means "send now": it
   ends a back-off at once (one attempt right away) and, while it waits, retries at least
   every ``RetryPolicy.flush_interval`` seconds, so a flush after an outage returns as soon
   as the collector is back — except when the server itself asked for a ``Retry-After``. Other 4xx: never retried; logged
   once per kind. A 422 naming one metric (unknown metric, fingerprint mismatch) marks that
   metric stale — later reports of it are refused — and the rest of the batch is re-sent
   under a new id (the rejected batch was not committed, so nothing can be counted twice).

``Batcher`` holds that logic with no thread or event loop of its own; ``Uploader`` drives
it from a daemon thread (``client.TelemetryClient``), ``aio.AsyncUploader`` from an asyncio
task (``aio.AsyncTelemetryClient``). One uploader can serve many clients (simulated fleets).
"""

from __future__ import annotations

import dataclasses
import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from typing import Protocol as TypingProtocol

from ._lazy import LazyLogger, logging
from .device_clock import ElapsedClock
from .errors import LdptError, TransportError
from .ledger import YIELD_EVERY, Book, Charge, LedgerBase, Refusal, RefusalCounts, yield_gil
from .queue import (
    DEFAULT_QUEUE_SIZE,
    DropPolicy,
    MemoryOutbox,
    Outbox,
    ReportQueue,
    StoredBatch,
)
from .transport import BATCH_ID_BYTES, WIRE_VERSION, Response, Transport

log = LazyLogger("client_sdk")  # logging loads with the first message (client_sdk._lazy)

DEFAULT_BATCH_SIZE = 100
#: Reports wait on the device up to this long before a batch goes out (batching hides when
#: the app reported: docs/math.md §11, "Metadata").
DEFAULT_MAX_BATCH_AGE = 30.0
#: How often an idle worker looks for batches left in the outbox by earlier runs/processes.
OUTBOX_RESCAN_INTERVAL = 60.0
RETRYABLE_STATUSES = frozenset({408, 429})
#: 422 problem types that name one metric the collector no longer accepts.
STALE_METRIC_PROBLEMS = frozenset({"unknown-metric", "fingerprint-mismatch"})


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter; ``Retry-After`` from the server wins when present.

    Attempt k (1-based) waits d/2 + U(0, d/2) seconds with d = min(maximum,
    initial·multiplier^(k−1)): never less than half the nominal delay, so a crowd of
    devices does not reconnect in lock-step after an outage. While the app flushes, waits
    are capped at ``flush_interval`` (a flush is bounded by its timeout).
    """

    initial: float = 1.0
    maximum: float = 300.0
    multiplier: float = 2.0
    max_retry_after: float = 3600.0
    flush_interval: float = 1.0

    def delay(self, attempt: int, retry_after: float | None, rand: random.Random) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        # after ~1,000 failures (days offline at the defaults) the power overflows: the nominal delay
        # is then the maximum (the worker must not raise on every cycle and never send again). No cap
        # on the exponent: with a multiplier near 1 it would stop the growth below the maximum.
        try:
            nominal = min(self.maximum, self.initial * float(self.multiplier) ** max(0, attempt - 1))
        except OverflowError:
            nominal = self.maximum
        return nominal / 2 + rand.random() * nominal / 2


def is_retryable(status: int) -> bool:
    """Network errors aside: 408, 429 and 5xx are retried; every other status is final."""
    return status in RETRYABLE_STATUSES or 500 <= status <= 599


def is_ack(response: Response, shuffler: bool = False) -> bool:
    """The collector's JSON acknowledgement (200 ``{"accepted": …}``), or in shuffler mode the
    shuffler's (202 ``{"stored": true}``, docs/wire-format.md)."""
    if shuffler:
        from .sealing import shuffler_ack

        return shuffler_ack(response) is not None
    return response.status == 200 and from_collector(response)


def from_collector(response: Response, shuffler: bool = False) -> bool:
    """Whether an answer is the collector's: its JSON ack (200), or a problem document (4xx).

    A proxy, a captive portal or a wrong endpoint path answers otherwise (an HTML 200 or 404,
    a redirect); such an answer must neither delete a batch as acknowledged nor drop it as
    rejected. 413 counts as the collector's whoever sent it: a smaller batch is the remedy.
    In shuffler mode the shuffler's acknowledgement (202) takes the place of the ack.
    """
    if shuffler and response.status < 400:
        return is_ack(response, True)
    if response.status == 200:
        doc = response.json()
        return isinstance(doc, dict) and "accepted" in doc
    if 400 <= response.status <= 499:
        return response.status == 413 or response.problem_type is not None
    return response.status >= 500  # retried anyway; 1xx-3xx other than 200 are not its answers


class Owner(TypingProtocol):
    """What the uploader needs from a client whose reports it carries (``ClientCore`` is one):
    the only members of a client the uploader uses."""

    @property
    def ledger(self) -> LedgerBase:
        """The device's privacy ledger, charged by the uploader when it builds a batch."""

    @property
    def elapsed_clock(self) -> ElapsedClock:
        """The device's elapsed clock, read by the ledger under its lock."""

    def drain_refusals(self) -> RefusalCounts:
        """Refusals counted on the app's threads since the last call (then forgotten)."""

    def note_committed(self, items: Sequence[QueuedReport], outcomes: Sequence[Refusal | str | None],
                       accounts: Book | None, foreign: bool = True) -> None:
        """Outcome per report: None = charged (will be sent), a Refusal, or a drop reason."""

    def accepts_reports(self) -> bool:
        """False once the app (or another process of it) opted out: queued reports are dropped."""

    def wire_dimensions(self) -> dict[str, str]:
        """The public dimensions a batch of this owner's reports carries (``d``; none: {})."""


class QueuedReport:
    """One randomised report waiting on the device (plus its ledger charge; no true value)."""

    __slots__ = ("owner", "charge", "metric", "fingerprint", "payload")

    def __init__(self, owner: Owner, charge: Charge, metric: str, fingerprint: str, payload: Any) -> None:
        self.owner = owner
        self.charge = charge
        self.metric = metric
        self.fingerprint = fingerprint
        self.payload = payload        # the protocol's wire object: already randomised


def pack_batch(reports: Sequence[tuple[str, str, Any]], batch_id: bytes | None = None,
               dimensions: Mapping[str, str] | None = None) -> tuple[bytes, bytes]:
    """Wire format v1 body for (metric, fingerprint, payload) triples; returns (batch id, body).

    ``dimensions``: the device's public dimension values, sent in clear as the batch's ``d``
    map (docs/wire-format.md); none: no ``d`` key (the body of an SDK without dimensions).
    """
    batch_id = os.urandom(BATCH_ID_BYTES) if batch_id is None else batch_id
    items = []
    for i, (m, f, p) in enumerate(reports, start=1):
        items.append({"m": m, "f": f, "p": p})
        if i % (4 * YIELD_EVERY) == 0:
            yield_gil()
    doc: dict[str, Any] = {"v": WIRE_VERSION, "batch_id": batch_id, "reports": items}
    if dimensions:
        doc["d"] = dict(dimensions)
    import msgpack  # here: loaded by the first batch, not by the SDK's import (docs/benchmarks.md)

    return batch_id, msgpack.packb(doc, use_bin_type=True)


class Batcher:
    """Batching, ledger charging, outbox and retry decisions; driven by a thread or a task."""

    def __init__(self, outbox: Outbox | None = None, *, batch_size: int = DEFAULT_BATCH_SIZE,
                 max_batch_age: float = DEFAULT_MAX_BATCH_AGE, queue_size: int = DEFAULT_QUEUE_SIZE,
                 drop_policy: DropPolicy = DropPolicy.DROP_NEWEST, retry: RetryPolicy = RetryPolicy(),
                 wake: Callable[[], None] | None = None, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if max_batch_age < 0:
            raise ValueError("max_batch_age must be >= 0")
        self.outbox = outbox if outbox is not None else MemoryOutbox()
        self._fallback = MemoryOutbox(self.outbox.limits)   # when the disk outbox cannot be written
        self.batch_size = batch_size
        self.max_batch_age = max_batch_age
        self.retry = retry
        self.clock, self.wall = clock, wall
        self.queue = ReportQueue(queue_size, drop_policy, wake_at=batch_size, wake=wake,
                                 on_evict=self._evicted)
        self.lock = threading.RLock()       # one builder/sender at a time
        self.rand = random.SystemRandom()  # backoff jitter: OS CSPRNG, like every SDK draw
        self.backoff_until = 0.0
        self.server_backoff = False          # the back-off is the collector's Retry-After
        self.attempts = 0
        self.flushing = 0
        self.building = False               # reports taken from the queue, not yet in the outbox
        self.unsent_hint = True             # the outbox may hold batches (startup: look)
        self.last_rescan = -float("inf")
        self.stale_metrics: set[str] = set()
        self.counters = dict.fromkeys((
            "batches_built", "batches_sent", "batches_acked", "reports_acked", "duplicates",
            "retries", "network_errors", "batches_rejected", "reports_rejected",
            "reports_refused_at_commit", "reports_dropped_opted_out", "ledger_errors",
            "outbox_write_errors", "queue_evicted"), 0)
        self._dirty: weakref.WeakSet[Owner] = weakref.WeakSet()
        self._logged: set[Any] = set()
        self.sealer: Any = None             # client_sdk.sealing.Sealer when batches go sealed

    # --- helpers ---------------------------------------------------------------------------------
    def log_once(self, key: Any, level: int, message: str) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.log(level, message)

    def _evicted(self, item: QueuedReport) -> None:
        self.counters["queue_evicted"] += 1
        item.owner.note_committed([item], ["evicted"], None)

    def note_refusal(self, owner: Owner) -> None:
        """A client counted a refusal on the app's thread: write it to its ledger next cycle."""
        self._dirty.add(owner)

    @property
    def failures(self) -> int:
        """Reports that will never be acknowledged (rejected, evicted by caps, expired)."""
        ob, fb = self.outbox, self._fallback
        return (self.counters["reports_rejected"] + self.counters["ledger_errors"]
                + ob.dropped_reports + ob.expired_reports + fb.dropped_reports + fb.expired_reports)

    def pending_batches(self) -> int:
        return self.outbox.pending() + self._fallback.pending()

    def idle(self) -> bool:
        """Nothing queued, nothing being batched, nothing waiting in the outbox (checked in that order)."""
        return len(self.queue) == 0 and not self.building and self.pending_batches() == 0

    def settled_failures(self) -> int | None:
        """``failures`` if idle, else None; read under the lock, never halfway through ``handle``.

        ``handle`` removes a rejected batch from the outbox before it counts the rejection (and
        re-queues what survives it), so an unlocked ``idle()`` can see an empty outbox with the
        failure not yet counted: flush() would report a rejected batch as acknowledged. Never
        blocks (the asyncio driver calls it on the loop): None while the worker holds the lock.
        """
        if not self.lock.acquire(blocking=False):
            return None
        try:
            return self.failures if self.idle() else None
        finally:
            self.lock.release()

    # --- timing ----------------------------------------------------------------------------------
    def batch_due(self, now: float) -> bool:
        n = len(self.queue)
        if n == 0:
            return False
        if n >= self.batch_size or self.flushing:
            return True
        oldest = self.queue.oldest_time()
        return oldest is not None and now - oldest >= self.max_batch_age

    def wait_time(self, now: float) -> float | None:
        """Seconds the driver may sleep before something is due (None: until woken)."""
        deadlines = []
        oldest = self.queue.oldest_time()
        if oldest is not None:
            deadlines.append(now if self.flushing else oldest + self.max_batch_age)
        if self.unsent_hint:
            deadlines.append(max(now, self.backoff_until))
        else:
            deadlines.append(self.last_rescan + OUTBOX_RESCAN_INTERVAL)
        return max(0.0, min(deadlines) - now)

    def in_backoff(self, now: float) -> bool:
        return now < self.backoff_until

    def begin_flush(self, now: float) -> None:
        """A flush started: send now — end our own back-off (not a server's Retry-After).

        Lock-free (the asyncio driver calls it on the loop): a send that fails concurrently
        sets a new back-off, already capped at ``flush_interval`` because ``flushing`` is set.
        """
        self.flushing += 1
        if not self.server_backoff:
            self.backoff_until = min(self.backoff_until, now)

    def end_flush(self) -> None:
        self.flushing -= 1

    # --- build: queue -> ledger -> outbox ------------------------------------------------------------
    def record_refusals(self) -> None:
        """Write refusals counted on app threads into the ledgers."""
        for owner in list(self._dirty):
            self._dirty.discard(owner)
            refusals = owner.drain_refusals()
            if refusals:
                try:
                    owner.ledger.commit([], refusals, owner.elapsed_clock)
                except (LdptError, OSError) as exc:
                    self.log_once(("ledger", type(exc)), logging.ERROR,
                                  f"ldpt: cannot write the privacy ledger: {exc}")

    def build_due(self, force: bool = False) -> int:
        """Build every batch that is due (all queued reports when ``force``); returns how many."""
        built = 0
        with self.lock:
            while len(self.queue) and (force or self.batch_due(self.clock())):
                self.building = True
                try:
                    if self._build_one():
                        built += 1
                finally:
                    self.building = False
        return built

    def _build_one(self) -> bool:
        items: list[QueuedReport] = self.queue.take(self.batch_size)
        if not items:
            return False
        outcome: dict[int, Refusal | None | str] = {}
        groups: dict[int, tuple[Owner, list[QueuedReport]]] = {}
        for it in items:
            groups.setdefault(id(it.owner), (it.owner, []))[1].append(it)
        for owner, its in groups.values():
            if not owner.accepts_reports():
                self.counters["reports_dropped_opted_out"] += len(its)
                owner.note_committed(its, ["opted-out"] * len(its), None)
                for it in its:
                    outcome[id(it)] = "opted-out"
                continue
            self._dirty.discard(owner)
            try:
                result = owner.ledger.commit([it.charge for it in its], owner.drain_refusals(), owner.elapsed_clock)
            except (LdptError, OSError) as exc:
                # Never send what could not be charged: drop, count, log once.
                self.counters["ledger_errors"] += len(its)
                self.log_once(("ledger", type(exc)), logging.ERROR,
                              f"ldpt: cannot update the privacy ledger, reports dropped: {exc}")
                owner.note_committed(its, ["ledger-error"] * len(its), None)
                for it in its:
                    outcome[id(it)] = "ledger-error"
                continue
            try:
                owner.note_committed(its, result.outcomes, result.accounts, result.foreign)
            except Exception as exc:  # noqa: BLE001 - the charges are on disk: send what was charged
                self.log_once(("committed", type(exc)), logging.ERROR,
                              f"ldpt: updating the client after a ledger commit failed: {exc!r}")
            for it, o in zip(its, result.outcomes):
                outcome[id(it)] = o
                if o is not None:
                    self.counters["reports_refused_at_commit"] += 1
            yield_gil()
        accepted = [it for it in items if outcome.get(id(it)) is None]
        if not accepted:
            return False
        by_dims: dict[tuple[tuple[str, str], ...], list[QueuedReport]] = {}
        for it in accepted:  # one batch per set of public dimensions (a batch carries one `d`)
            by_dims.setdefault(tuple(it.owner.wire_dimensions().items()), []).append(it)
        for dims, its in by_dims.items():
            batch_id, body = pack_batch([(it.metric, it.fingerprint, it.payload) for it in its],
                                        dimensions=dict(dims))
            self._store(StoredBatch(batch_id, body, len(its), self.wall()))
            self.counters["batches_built"] += 1
        return True

    def _store(self, batch: StoredBatch) -> None:
        if self.sealer is not None:
            try:
                self.sealer.try_seal(batch)   # with a known key: sealed before its first write
            except Exception as exc:  # noqa: BLE001 - sealed before sending instead
                self.log_once(("seal", type(exc)), logging.WARNING, f"ldpt: cannot seal a batch yet: {exc}")
        try:
            self.outbox.add(batch)
        except OSError as exc:
            self.counters["outbox_write_errors"] += 1
            self.log_once(("outbox", type(exc)), logging.WARNING,
                          f"ldpt: cannot write the offline queue ({exc}); keeping batches in memory")
            self._fallback.add(batch)
        self.unsent_hint = True

    # --- send: outbox -> collector -------------------------------------------------------------------
    def claim(self, now: float) -> StoredBatch | None:
        """The next batch to send, or None (nothing waiting, or backing off)."""
        if self.in_backoff(now):
            return None
        wall = self.wall()
        for outbox in (self._fallback, self.outbox):
            batch = outbox.claim(wall)
            if batch is not None:
                batch.origin = outbox
                return batch
        self.unsent_hint = False
        self.last_rescan = now
        return None

    def handle(self, batch: StoredBatch, response: Response | None, error: Exception | None,
               now: float) -> None:
        """Account for one send attempt: ack, schedule a retry, or drop for good."""
        outbox = batch.origin if batch.origin is not None else self.outbox
        self.counters["batches_sent"] += 1
        batch.attempts += 1
        shuffler = self.sealer is not None and self.sealer.shuffler
        foreign = response is not None and not from_collector(response, shuffler)
        if response is not None and is_ack(response, shuffler):
            outbox.done(batch)
            self.attempts = 0
            self.backoff_until = 0.0
            self.server_backoff = False
            self.counters["batches_acked"] += 1
            self.counters["reports_acked"] += batch.reports
            doc = response.json()
            if isinstance(doc, dict) and doc.get("duplicate"):
                self.counters["duplicates"] += 1
            return
        if response is None or foreign or is_retryable(response.status):
            outbox.release(batch)
            self.unsent_hint = True
            self.attempts += 1
            self.counters["retries"] += 1
            retry_after = None if response is None else response.retry_after()
            delay = self.retry.delay(self.attempts, retry_after, self.rand)
            if self.flushing and retry_after is None:
                delay = min(delay, self.retry.flush_interval)
            self.backoff_until = now + delay
            self.server_backoff = retry_after is not None
            if response is None:
                self.counters["network_errors"] += 1
            what = f"HTTP {response.status}" if response is not None else f"{error}"
            if foreign:
                what += " that is not the collector's answer: check endpoint= and any proxy"
            self.log_once("retrying", logging.WARNING,
                          f"ldpt: collector unavailable ({what}); batches are kept and retried "
                          f"(next attempt in {delay:.1f}s; later failures are logged at DEBUG)")
            log.debug("ldpt: send failed (%s); retry in %.2fs", what, delay)
            return
        # A final answer (4xx other than 408/429): never retried.
        if self.sealer is not None and response.status == 400:
            from .sealing import is_key_problem

            if is_key_problem(response):
                self.log_once(("ohttp-key",), logging.ERROR,
                              "ldpt: the gateway does not know the key this batch is sealed to, even after "
                              "fetching its key configuration again (or the configuration is pinned with "
                              "key_config=); the batch is dropped")
        outbox.done(batch)
        self.attempts = 0
        self.backoff_until = 0.0
        self.server_backoff = False
        self._reject(batch, response)

    def _reject(self, batch: StoredBatch, response: Response) -> None:
        slug = response.problem_type or "error"
        doc = response.json()
        doc = doc if isinstance(doc, dict) else {}
        metric = doc.get("metric") if isinstance(doc.get("metric"), str) else None
        index = doc.get("report_index") if isinstance(doc.get("report_index"), int) else None
        detail = doc.get("detail", "")
        dims = None
        import msgpack

        try:
            doc = msgpack.unpackb(batch.body, raw=False)
            reports, dims = doc["reports"], doc.get("d")
        except Exception:  # noqa: BLE001 - our own bytes; cannot really fail
            reports = []
        keep: list[dict[str, Any]] | None = None
        if response.status == 422 and slug in STALE_METRIC_PROBLEMS and metric is not None:
            self.stale_metrics.add(metric)
            keep = [r for r in reports if r.get("m") != metric]
            self.log_once(("stale", metric), logging.ERROR,
                          f"ldpt: the collector rejects metric {metric!r} ({slug}: {detail}); its "
                          "registry changed or does not know it. Reports of it are refused from now on; "
                          "update the app's registry.")
        elif response.status == 403 and slug == "shuffle-required" and metric is not None:
            self.stale_metrics.add(metric)   # final: refused from now on, the rest goes again
            keep = [r for r in reports if r.get("m") != metric]
            self.log_once(("shuffle-required", metric), logging.ERROR,
                          f"ldpt: the collector accepts metric {metric!r} only through an authenticated "
                          "shuffler (its registry says shuffle = \"required\"); this client sends it "
                          + ("sealed but not through a shuffler" if self.sealer is not None else "in plain")
                          + ", so its reports are dropped from now on. Configure seal=Seal.shuffler(url).")
        elif response.status == 422 and slug == "invalid-report" and index is not None \
                and 0 <= index < len(reports):
            keep = reports[:index] + reports[index + 1:]
            self.log_once(("invalid", metric, slug), logging.ERROR,
                          f"ldpt: the collector rejects a report of {metric!r} as invalid ({detail}); "
                          "the SDK and collector disagree about the protocol — upgrade one of them")
        elif response.status == 413 and len(reports) > 1:
            half = len(reports) // 2
            for part in (reports[:half], reports[half:]):
                self._resend(part, batch, dims)
            self.log_once(("too-large",), logging.WARNING,
                          "ldpt: the collector refused a batch as too large; splitting (lower batch_size)")
            return
        else:
            self.log_once(("rejected", response.status, slug), logging.ERROR,
                          f"ldpt: the collector rejected a batch of {batch.reports} report(s) with HTTP "
                          f"{response.status} ({slug}: {detail}); it is not retried "
                          "(further rejections of this kind are not logged)")
        dropped = len(reports) - (len(keep) if keep is not None else 0) if reports else batch.reports
        self.counters["batches_rejected"] += 1
        self.counters["reports_rejected"] += dropped
        if keep:
            self._resend(keep, batch, dims)

    def _resend(self, reports: list[dict[str, Any]], original: StoredBatch,
                dimensions: Mapping[str, str] | None = None) -> None:
        """What survives a rejection goes out again as a new batch (new id: never committed)."""
        batch_id, body = pack_batch([(r["m"], r["f"], r["p"]) for r in reports], dimensions=dimensions)
        self._store(StoredBatch(batch_id, body, len(reports), original.created))

    # --- opt-out and fork -------------------------------------------------------------------------------
    def purge(self, owner: Owner, outbox_too: bool) -> int:
        """Remove an owner's queued reports (and the whole outbox when it is the owner's)."""
        with self.lock:
            removed = self.queue.remove_if(lambda it: it.owner is owner)
            if outbox_too:
                self.outbox.clear()
                self._fallback.clear()
            return removed

    def reset_after_fork(self) -> None:
        self.lock = threading.RLock()
        self.queue.reset_after_fork()
        self.outbox.reset_after_fork()
        self._fallback.reset_after_fork()
        self.rand = random.SystemRandom()  # backoff jitter: OS CSPRNG, like every SDK draw
        self.backoff_until = 0.0
        self.server_backoff = False
        self.attempts = 0
        self.flushing = 0
        self.unsent_hint = True


def send_batch(batcher: Batcher, transport: Transport, batch: StoredBatch) -> Response:
    """One send attempt of a claimed batch: plain, or sealed (its envelope stored first)."""
    sealer = batcher.sealer
    if sealer is None:
        return transport.post_batch(batch.body)

    def persist(b: StoredBatch) -> None:
        origin = b.origin if b.origin is not None else batcher.outbox
        try:
            origin.update(b)
        except OSError as exc:  # the envelope is kept in memory: a resend after a restart reseals
            batcher.log_once(("outbox-update", type(exc)), logging.WARNING,
                             f"ldpt: cannot store a sealed envelope in the offline queue: {exc}")

    return sealer.send(batch, persist)


# --- the thread driver ---------------------------------------------------------------------------------

_LIVE_UPLOADERS: weakref.WeakSet[Uploader] = weakref.WeakSet()


class Uploader:
    """Runs a Batcher on a daemon thread, sending with a (blocking) transport."""

    def __init__(self, transport: Transport, outbox: Outbox | None = None, *,
                 batch_size: int = DEFAULT_BATCH_SIZE, max_batch_age: float = DEFAULT_MAX_BATCH_AGE,
                 queue_size: int = DEFAULT_QUEUE_SIZE, drop_policy: DropPolicy = DropPolicy.DROP_NEWEST,
                 retry: RetryPolicy = RetryPolicy(), sealer: Any = None,
                 wall: Callable[[], float] = time.time) -> None:
        self.transport = transport
        self.batcher = Batcher(outbox, batch_size=batch_size, max_batch_age=max_batch_age,
                               queue_size=queue_size, drop_policy=drop_policy, retry=retry,
                               wake=self._wake, wall=wall)
        self.batcher.sealer = sealer
        self._event = threading.Event()
        self._progress = threading.Condition()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._stopping = False
        self.closed = False
        _LIVE_UPLOADERS.add(self)

    # --- app side ---------------------------------------------------------------------------------
    def submit(self, item: QueuedReport, now: float) -> bool:
        """Queue a randomised report (never blocks); False when the queue dropped it."""
        ok = self.batcher.queue.put(item, now)
        if self._thread is None:
            self.start()
        return ok

    def note_refusal(self, owner: Owner) -> None:
        self.batcher.note_refusal(owner)

    def start(self) -> None:
        with self._start_lock:
            if (self._thread is None or not self._thread.is_alive()) and not self.closed:
                self._stopping = False
                self._thread = threading.Thread(target=self._run, name="ldpt-uploader", daemon=True)
                self._thread.start()

    def _wake(self) -> None:
        self._event.set()

    def flush(self, timeout: float = 10.0) -> bool:
        """Send everything queued now; True when all of it was acknowledged within ``timeout``."""
        deadline = time.monotonic() + max(0.0, timeout)
        failures = self.batcher.failures
        if self._thread is None or not self._thread.is_alive():
            self.start()
        self.batcher.begin_flush(time.monotonic())
        try:
            self._event.set()
            with self._progress:
                while True:
                    settled = self.batcher.settled_failures()
                    if settled is not None:
                        return settled == failures
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self._thread is None or not self._thread.is_alive():
                        return False
                    self._progress.wait(min(remaining, 0.05))
        finally:
            self.batcher.end_flush()

    def close(self, timeout: float = 10.0) -> bool:
        """Flush within ``timeout``, then stop the worker (unsent batches stay in the outbox)."""
        if self.closed:
            return self.batcher.idle()
        start = time.monotonic()
        ok = self.flush(timeout)
        self.closed = True
        self._stopping = True
        self._event.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(0.05, timeout - (time.monotonic() - start)))
        if not (thread is not None and thread.is_alive()):
            with self.batcher.lock:  # whatever is still queued goes to the outbox (charged)
                self.batcher.build_due(force=True)
            self.transport.close()
            if self.batcher.sealer is not None:
                self.batcher.sealer.close()
        return ok

    # --- the worker -------------------------------------------------------------------------------
    def _run(self) -> None:
        batcher = self.batcher
        while True:
            wait = batcher.wait_time(time.monotonic())
            if not self._stopping and (wait is None or wait > 0):
                self._event.wait(wait)
            self._event.clear()
            if self._stopping:
                try:
                    batcher.record_refusals()
                    batcher.build_due(force=True)
                except Exception as exc:  # noqa: BLE001 - the worker never dies on a bug
                    batcher.log_once(("worker", type(exc)), logging.ERROR, f"ldpt: uploader error: {exc!r}")
                self._notify()
                return
            try:
                self._cycle()
            except Exception as exc:  # noqa: BLE001
                batcher.log_once(("worker", type(exc)), logging.ERROR, f"ldpt: uploader error: {exc!r}")
                time.sleep(0.1)
            self._notify()

    def _notify(self) -> None:
        with self._progress:
            self._progress.notify_all()

    def _cycle(self) -> None:
        batcher = self.batcher
        batcher.record_refusals()
        batcher.build_due()
        while not self._stopping:
            now = time.monotonic()
            with batcher.lock:
                batch = batcher.claim(now)
            if batch is None:
                break
            try:
                response, error = send_batch(batcher, self.transport, batch), None
            except TransportError as exc:
                response, error = None, exc
            with batcher.lock:
                batcher.handle(batch, response, error, time.monotonic())
            self._notify()
            if len(batcher.queue) >= batcher.batch_size or batcher.flushing:
                batcher.build_due()

    def _reset_after_fork(self) -> None:
        self.batcher.reset_after_fork()
        self._event = threading.Event()
        self._progress = threading.Condition()
        self._start_lock = threading.Lock()
        self._thread = None
        self._stopping = False


def _uploaders_after_fork_child() -> None:
    for uploader in list(_LIVE_UPLOADERS):
        uploader._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_uploaders_after_fork_child)
