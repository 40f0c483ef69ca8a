"""The async face of the sketch store, which the collector's event loop talks to.

``AsyncSketchStore`` has the async twins of ``SketchStore`` (``acommit``, ``aload``,
``awindows``, ``acheck``, ``aclose``). ``ThreadedStore`` adapts the synchronous SQLite store:
commits run on one dedicated writer thread, serialised across worker processes by a blocking
``flock`` on ``<store>.writer-lock`` (SQLite releases the GIL while it writes and
fsyncs, so the event loop keeps decoding requests meanwhile); reads use a second connection
on their own thread, so a long estimate query never delays a commit (WAL readers don't block
the writer). ``PostgresStore`` (``postgres.py``) implements the same API natively.
"""

from __future__ import annotations

import abc
import asyncio
import datetime as dt
import fcntl
import functools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from sketches.base import Sketch

from .base import BatchOutcome, PendingBatch, PruneResult, WindowInfo
from .shuffled import ShuffleRecord
from .sqlite import SQLiteStore

T = TypeVar("T")
#: Lock file next to the SQLite store that serialises the collector's writer processes.
WRITER_LOCK_SUFFIX = ".writer-lock"


class AsyncSketchStore(abc.ABC):
    """Async twins of ``SketchStore``'s methods; same semantics."""

    #: Human description for logs and /readyz ("sqlite:/path", "postgres:host/db").
    description: str = "store"

    @abc.abstractmethod
    async def acommit(self, batches: Sequence[PendingBatch]) -> list[BatchOutcome]:
        """One transaction: dedupe every batch id, then add the deltas of the new batches."""

    @abc.abstractmethod
    async def aload(self, metric: str, fingerprint: str, template: Sketch,
                    windows: Sequence[str] | None = None, since: str | None = None,
                    until: str | None = None) -> Sketch:
        """Sum of the stored sketches for the windows asked (all when none given)."""

    @abc.abstractmethod
    async def awindows(self, metric: str | None = None) -> list[WindowInfo]:
        """Stored windows (optionally of one metric), oldest first."""

    @abc.abstractmethod
    async def acheck(self) -> None:
        """Raise StoreError unless the store is reachable and its schema current."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release connections and threads."""

    async def aprobe_write(self) -> None:
        """Raise StoreError unless the store can commit a write now (a cheap one: readiness asks
        while commits fail). The default knows only what ``acheck`` knows."""
        await self.acheck()

    async def ashuffle_records(self, metric: str, fingerprint: str, windows: Sequence[str] | None = None,
                               since: str | None = None, until: str | None = None) -> list[ShuffleRecord]:
        """What came through shufflers for the key's windows (``SketchStore.shuffle_records``)."""
        return []

    async def ashuffled_batch(self, batch_id: bytes) -> bytes | None:
        """The digest a shuffler's forwarded batch id was committed with, or None."""
        return None

    @abc.abstractmethod
    async def aprune(self, before: str, batch_ids_before: str | None = None) -> PruneResult:
        """``SketchStore.prune``: delete windows (and batch ids) before a day."""

    async def amaintain(self, today: str | None = None) -> None:  # noqa: B027 - optional hook
        """Periodic housekeeping: compaction of delta rows (``today`` is the first open day,
        YYYY-MM-DD UTC by default); no-op by default."""


class ThreadedStore(AsyncSketchStore):
    """A ``SQLiteStore`` driven from asyncio: one writer thread, one reader thread."""

    def __init__(self, path: str | Path, *, synchronous: str = "FULL") -> None:
        self.path = Path(path)
        self.description = f"sqlite:{self.path}"
        self._writer = SQLiteStore(self.path, create=True, synchronous=synchronous)
        self._writer.defer_compaction = True  # compacted after the acknowledgement: _settle_locked
        lock_path = self.path.with_name(self.path.name + WRITER_LOCK_SUFFIX)
        self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._reader: SQLiteStore | None = None
        self._write_thread = ThreadPoolExecutor(1, thread_name_prefix="ldpt-commit")
        self._read_thread = ThreadPoolExecutor(1, thread_name_prefix="ldpt-read")

    @property
    def sync_store(self) -> SQLiteStore:
        """The underlying synchronous store (the writer connection)."""
        return self._writer

    async def _run(self, pool: ThreadPoolExecutor, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args, **kw))

    def _reader_store(self) -> SQLiteStore:
        if self._reader is None:  # runs on the reader thread only
            self._reader = SQLiteStore(self.path, create=False)
        return self._reader

    def _commit_locked(self, batches: Sequence[PendingBatch]) -> list[BatchOutcome]:
        # Workers sharing the file queue on a blocking flock: the next one is woken the moment
        # the lock is released, instead of SQLite's busy handler sleeping 1..100 ms and
        # polling (which showed up as 100+ ms p99 latency with 2 workers).
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            return self._writer.commit(batches)
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    async def acommit(self, batches: Sequence[PendingBatch]) -> list[BatchOutcome]:
        outcomes = await self._run(self._write_thread, self._commit_locked, batches)
        if self._writer._crowded:
            # queued on the writer thread behind this commit, not awaited: the group is
            # acknowledged now, and the next commit starts once the merges are done
            self._write_thread.submit(self._settle_locked)
        return outcomes

    def _settle_locked(self) -> int:
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            return self._writer.settle()
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    async def asettle(self) -> int:
        """Run the pending compaction now (tests, benches); returns the merges done."""
        return await self._run(self._write_thread, self._settle_locked)

    async def aload(self, metric: str, fingerprint: str, template: Sketch,
                    windows: Sequence[str] | None = None, since: str | None = None,
                    until: str | None = None) -> Sketch:
        return await self._run(self._read_thread, lambda: self._reader_store().load(
            metric, fingerprint, template, windows, since, until))

    async def awindows(self, metric: str | None = None) -> list[WindowInfo]:
        return await self._run(self._read_thread, lambda: self._reader_store().windows(metric))

    async def acheck(self) -> None:
        await self._run(self._read_thread, lambda: self._reader_store().check())

    async def ashuffle_records(self, metric: str, fingerprint: str, windows: Sequence[str] | None = None,
                               since: str | None = None, until: str | None = None) -> list[ShuffleRecord]:
        return await self._run(self._read_thread, lambda: self._reader_store().shuffle_records(
            metric, fingerprint, windows, since, until))

    async def ashuffled_batch(self, batch_id: bytes) -> bytes | None:
        return await self._run(self._read_thread, lambda: self._reader_store().shuffled_batch(batch_id))

    def _probe_locked(self) -> None:
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            self._writer.probe_write()
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    async def aprobe_write(self) -> None:
        await self._run(self._write_thread, self._probe_locked)

    def _prune_locked(self, before: str, batch_ids_before: str | None) -> PruneResult:
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            return self._writer.prune(before, batch_ids_before)
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    async def aprune(self, before: str, batch_ids_before: str | None = None) -> PruneResult:
        return await self._run(self._write_thread, self._prune_locked, before, batch_ids_before)

    def _compact_locked(self, before: str | None) -> int:
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            return self._writer.compact(before)
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    async def amaintain(self, today: str | None = None) -> None:
        """Fold the flat rows of closed windows (days before ``today``, UTC by default) into one
        row each, so that reading a past window reads one row, and settle crowded keys another
        worker process left; the writer thread compacts the keys its own commits crowd."""
        today = today or dt.datetime.now(dt.timezone.utc).date().isoformat()
        await self._run(self._write_thread, self._compact_locked, today)

    async def aclose(self) -> None:
        await self._run(self._write_thread, self._writer.close)
        if self._reader is not None:
            await self._run(self._read_thread, self._reader.close)
        self._write_thread.shutdown(wait=True)
        self._read_thread.shutdown(wait=True)
        os.close(self._lock_fd)

