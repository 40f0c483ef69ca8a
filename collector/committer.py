"""Group commit: many requests share one store transaction; bounded queue, 503 when full.

Handlers ``submit`` a validated batch and await its outcome. One committer task drains the
queue: while a transaction is running, new batches accumulate, and the next transaction takes
all of them (up to ``group_max_batches``). Throughput therefore scales with the number of
batches per fsync instead of stopping at the disk's fsync rate, and a request is answered
only after the transaction that holds its batch has committed.

The queue is bounded in batches and in reports; a batch that does not fit is refused at once
with ``Problem("overloaded")`` (503 + Retry-After estimated from the recent commit rate),
so memory stays bounded however fast clients send.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Any

from client_sdk.errors import LdptError
from collector.storage.aio import AsyncSketchStore
from collector.storage.base import BatchOutcome, CommitOutcomeUnknown, PendingBatch
from collector.storage.shuffled import ShuffledBatch, ShuffledOutcome

from .problems import Problem
from .telemetry import Telemetry

log = logging.getLogger("ldpt.collector")

#: Weight of the newest commit in the exponentially smoothed throughput (reports/s).
RATE_SMOOTHING = 0.2


class GroupCommitter:
    """Queue of pending batches and the task that commits them in groups."""

    def __init__(self, store: AsyncSketchStore, telemetry: Telemetry, *, max_batches: int = 4096,
                 max_reports: int = 1_000_000, group_max_batches: int = 2048) -> None:
        self.store = store
        self.telemetry = telemetry
        self.max_batches = max_batches
        self.max_reports = max_reports
        self.group_max_batches = group_max_batches
        self._queue: collections.deque[tuple[Any, asyncio.Future[Any]]] = \
            collections.deque()
        self._queued_reports = 0
        self._wakeup = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._rate = 0.0  # smoothed reports committed per second of commit time
        #: (time.monotonic(), detail) of the latest commit when it failed; None once one succeeds
        #: (or a write probe does: ``recovered``). Readiness is false meanwhile (collector.app).
        self.failing: tuple[float, str] | None = None

    # --- producer side ----------------------------------------------------------------------------
    @property
    def depth(self) -> tuple[int, int]:
        """(batches, reports) waiting."""
        return len(self._queue), self._queued_reports

    def retry_after(self) -> float:
        """Seconds a refused client should wait: the time to drain what is queued (>= 1)."""
        if self._rate <= 0:
            return 1.0
        return max(1.0, min(60.0, self._queued_reports / self._rate))

    async def submit(self, batch: PendingBatch | ShuffledBatch) -> BatchOutcome | ShuffledOutcome:
        """Queue a batch and wait until its transaction commits; Problem if refused or failed.

        A shuffler's forwarded batch (``ShuffledBatch``) is one entry, committed whole in one
        transaction with its members (a ``ShuffledOutcome``); it counts as one batch against
        ``max_batches`` and with all its reports against ``max_reports`` (always admitted into an
        empty queue, whatever its size)."""
        if self._closing:
            raise Problem("shutting-down", "the collector is shutting down; retry the same batch "
                          "against another collector or later", retry_after=1)
        if len(self._queue) >= self.max_batches or \
                (self._queue and self._queued_reports + batch.reports > self.max_reports):
            raise Problem("overloaded", f"the commit queue is full ({len(self._queue)} batches, "
                          f"{self._queued_reports} reports waiting); retry the same batch after "
                          "Retry-After seconds", retry_after=self.retry_after())
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((batch, future))
        self._queued_reports += batch.reports
        self._publish_depth()
        self._wakeup.set()
        return await asyncio.shield(future)

    def _publish_depth(self) -> None:
        self.telemetry.set_queue(len(self._queue), self._queued_reports)

    # --- committer task ---------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="ldpt-committer")

    async def close(self) -> None:
        """Stop accepting, commit everything queued, stop the task."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    return
                await self._wakeup.wait()
                self._wakeup.clear()
                continue
            group = [self._queue.popleft() for _ in range(min(len(self._queue), self.group_max_batches))]
            reports = sum(b.reports for b, _ in group)
            self._queued_reports -= reports
            try:
                await self._commit_group(group, reports)
            except Exception:  # never let a bug stop the committer: later requests would hang
                log.exception("committer error")
                for _, fut in group:
                    if not fut.done():
                        fut.set_exception(Problem("internal-error", "the batch was not acknowledged; "
                                                  "retry the same batch"))
            self._publish_depth()

    async def _commit_group(self, group: list[tuple[Any, asyncio.Future[Any]]],
                            reports: int) -> None:
        batches = [b for b, _ in group]
        start = time.perf_counter()
        try:
            outcomes = await self.store.acommit(batches)
        except Exception as exc:
            detail = str(exc) if isinstance(exc, LdptError) else f"{type(exc).__name__}: {exc}"
            if isinstance(exc, CommitOutcomeUnknown):
                # it may have applied: the clients' retries of the same batch ids dedupe
                log.error("commit of %d batches failed, outcome unknown (the connection was lost; "
                          "retries of the same batch ids are counted once): %s", len(batches), detail)
            else:  # the transaction rolled back: nothing of the group applied
                log.error("commit of %d batches failed (rolled back): %s", len(batches), detail)
            self.telemetry.commit_failed()
            self.failing = (time.monotonic(), detail[:300])
            for _, fut in group:
                if not fut.done():
                    fut.set_exception(Problem("store-unavailable", "the batch was not stored "
                                              f"({detail[:200]}); retry the same batch",
                                              retry_after=2))
            return
        elapsed = time.perf_counter() - start
        if elapsed > 0:
            self._rate = (1 - RATE_SMOOTHING) * self._rate + RATE_SMOOTHING * (reports / elapsed) \
                if self._rate else reports / elapsed
        self.failing = None
        flat_batches: list[PendingBatch] = []
        flat_outcomes: list[BatchOutcome] = []
        for batch, outcome in zip(batches, outcomes):
            if isinstance(batch, ShuffledBatch):   # its members, as batches (telemetry per batch)
                flat_batches += batch.members[:len(outcome.members)]
                flat_outcomes += outcome.members
            else:
                flat_batches.append(batch)
                flat_outcomes.append(outcome)
        self.telemetry.committed(flat_batches, flat_outcomes, elapsed)
        for (_, fut), outcome in zip(group, outcomes):
            if not fut.done():
                fut.set_result(outcome)
