"""Where randomised reports wait: a bounded in-memory queue and the offline outbox.

**In-memory queue (``ReportQueue``).** ``report()`` encodes the value on the app's thread
and appends the randomised report here; the worker takes reports out in FIFO order and
batches them. The queue is bounded (``maxsize``, default 10,000). Drop policy when it is
full: **drop the newest** — the report being added is refused, counted in
``dropped`` and never charged to the privacy ledger (reports are charged when the worker
batches them), so a dropped report costs no privacy. Reports already queued keep their
order. With ``reports_per_window = 1`` the queue rarely holds more than one report per
metric, so it only fills when the worker is stuck for a long time under a flood of metrics.

**Offline outbox (``DiskOutbox``).** Every batch is written to disk — as the exact bytes
that go on the wire (randomised reports only, with their batch id) — by
write-temp-fsync-rename *before* its first send, and deleted when the collector
acknowledges it. It survives restarts and is sent when the collector is reachable again;
since the bytes on disk are the bytes sent, every retry carries the same batch id and the
same body, so the collector counts the batch once. Caps: ``max_batches``, ``max_bytes`` and
``max_age``; when a new batch would exceed a cap the oldest batches are dropped (counted in
``dropped``), and batches older than ``max_age`` are dropped (counted in ``expired``).

A batch's age is measured from its ``created`` wall-clock time. A ``created`` later than the
present (the batch was built under a clock that ran ahead, and the clock has been set right
since) is **re-dated to the present** the first time the outbox sees it, and the new date is
stored (the disk outbox renames the file, whose name carries ``created``): without that the
batch would never expire, would sort as the newest (so the caps drop honest batches first) and
would be sent weeks later, after the collector forgot its batch id. Dates only ever move back,
so the batch expires at most ``max_age`` after the clock was repaired (docs/privacy.md, "Clock
errors"; the rule is pinned for every SDK by conformance/vectors/outbox.json).

Files in the outbox that the SDK did not write (a name it cannot parse, a body it cannot
read) are moved to ``outbox/quarantine/`` and logged once: they never count as pending, so
they cannot keep ``flush()`` waiting. Temporary files of a write a kill interrupted are
removed when the outbox is opened.

Several processes may share one outbox: a sender claims a batch by renaming it to
``*.sending`` (no file descriptor is held, so fork is safe); a claim older than
``claim_timeout`` is considered abandoned and returned to the queue (if its owner was only
slow, the collector's batch-id dedupe absorbs the second send).
"""

from __future__ import annotations

import abc
import collections
import contextlib
import dataclasses
import enum
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ._lazy import LazyLogger
from .files import atomic_write, remove_stale_temps

if TYPE_CHECKING:
    from pathlib import Path

    from .ohttp import SealedRequest

log = LazyLogger("client_sdk")  # logging loads with the first message (client_sdk._lazy)

BATCH_SUFFIX = ".ldpb"
CLAIM_SUFFIX = ".sending"
QUARANTINE_DIR = "quarantine"
#: Temporary batch files older than this when the outbox is opened were left by a kill (s).
STALE_TEMP_AGE = 600.0

DEFAULT_QUEUE_SIZE = 10_000
DEFAULT_OUTBOX_MAX_BATCHES = 1_000
DEFAULT_OUTBOX_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_OUTBOX_MAX_AGE = 7 * 86_400.0
DEFAULT_CLAIM_TIMEOUT = 120.0
#: Seconds between sweeps of the outbox for expired batches and abandoned claims.
SWEEP_INTERVAL = 5.0


class DropPolicy(str, enum.Enum):
    """What a full in-memory queue does with a new report."""

    DROP_NEWEST = "drop-newest"   # refuse the report being added (the default)
    DROP_OLDEST = "drop-oldest"   # evict the oldest queued report to make room


class ReportQueue:
    """Bounded FIFO of encoded reports, safe for many producer threads and one consumer."""

    def __init__(self, maxsize: int = DEFAULT_QUEUE_SIZE, policy: DropPolicy = DropPolicy.DROP_NEWEST,
                 wake_at: int = 1, wake: Callable[[], None] | None = None,
                 on_evict: Callable[[Any], None] | None = None) -> None:
        if maxsize < 1:
            raise ValueError("queue size must be >= 1")
        self.maxsize = maxsize
        self.policy = DropPolicy(policy)
        self.wake_at = wake_at          # call wake() when the length reaches 1 or this
        self.wake = wake
        self.on_evict = on_evict        # told about a report evicted by DROP_OLDEST
        self.dropped = 0
        self.accepted = 0
        self._items: collections.deque[Any] = collections.deque()
        self._times: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()

    def put(self, item: Any, now: float) -> bool:
        """Append (never blocks); False when the report was dropped by the policy."""
        evicted = None
        with self._lock:
            if len(self._items) >= self.maxsize:
                self.dropped += 1
                if self.policy is DropPolicy.DROP_NEWEST:
                    return False
                evicted = self._items.popleft()
                self._times.popleft()
            self._items.append(item)
            self._times.append(now)
            self.accepted += 1
            size = len(self._items)
        if evicted is not None and self.on_evict is not None:
            self.on_evict(evicted)
        if (size == 1 or size == self.wake_at) and self.wake is not None:
            self.wake()
        return True

    def take(self, n: int) -> list[Any]:
        """Remove and return up to n reports, oldest first."""
        with self._lock:
            k = min(n, len(self._items))
            out = [self._items.popleft() for _ in range(k)]
            for _ in range(k):
                self._times.popleft()
            return out

    def oldest_time(self) -> float | None:
        """Enqueue time (monotonic) of the oldest report, None when empty."""
        with self._lock:
            return self._times[0] if self._times else None

    def remove_if(self, predicate: Callable[[Any], bool]) -> int:
        """Remove every report matching ``predicate`` (opt-out); returns how many."""
        with self._lock:
            keep = [(i, t) for i, t in zip(self._items, self._times) if not predicate(i)]
            removed = len(self._items) - len(keep)
            self._items = collections.deque(i for i, _ in keep)
            self._times = collections.deque(t for _, t in keep)
            return removed

    def clear(self) -> int:
        with self._lock:
            n = len(self._items)
            self._items.clear()
            self._times.clear()
            return n

    def reset_after_fork(self) -> None:
        """In a forked child: the parent owns (and will send) what is queued; start empty."""
        self._lock = threading.Lock()
        self._items = collections.deque()
        self._times = collections.deque()

    def __len__(self) -> int:
        return len(self._items)


@dataclasses.dataclass(eq=False)
class StoredBatch:
    """A batch as sent: id, exact wire bytes, report count and creation time (POSIX).

    ``sealed``: its OHTTP envelope once sealed (client_sdk/sealing.py), stored with it so that
    every resend carries the same envelope bytes.
    """

    batch_id: bytes
    body: bytes
    reports: int
    created: float
    path: Path | None = None       # the claimed file while a disk batch is being sent
    attempts: int = 0
    origin: Any = dataclasses.field(default=None, repr=False)   # the outbox it was claimed from
    sealed: SealedRequest | None = dataclasses.field(default=None, repr=False)


#: A sealed batch's file starts with this (a plain batch is a msgpack map: its first byte is
#: 0x8_, 0xde or 0xdf, never 0x00), then four length-prefixed parts: the batch, the envelope,
#: enc and the response secret (big-endian u32 lengths), then the key id (1 byte).
SEALED_MAGIC = b"\x00ldpt-sealed-1\n"


def stored_bytes(batch: StoredBatch) -> bytes:
    """What the disk outbox writes for ``batch``: its body, or the sealed container."""
    sealed = batch.sealed
    if sealed is None:
        return batch.body
    parts = (batch.body, sealed.envelope, sealed.enc, sealed.secret)
    return SEALED_MAGIC + b"".join(struct.pack(">I", len(p)) + p for p in parts) + bytes((sealed.key_id,))


def parse_stored(data: bytes) -> tuple[bytes, SealedRequest | None]:
    """(body, envelope or None) of a stored batch file; ValueError if a container is torn."""
    if not data.startswith(SEALED_MAGIC):
        return data, None
    from .ohttp import SealedRequest

    pos, parts = len(SEALED_MAGIC), []
    for _ in range(4):
        if pos + 4 > len(data):
            raise ValueError("a sealed batch file is truncated")
        (n,) = struct.unpack_from(">I", data, pos)
        parts.append(data[pos + 4:pos + 4 + n])
        if len(parts[-1]) != n:
            raise ValueError("a sealed batch file is truncated")
        pos += 4 + n
    if pos + 1 != len(data):
        raise ValueError("a sealed batch file has trailing bytes")
    body, envelope, enc, secret = parts
    return body, SealedRequest(envelope, enc, secret, data[pos])


@dataclasses.dataclass(frozen=True)
class OutboxLimits:
    """Caps of the offline queue (count, bytes, age in seconds)."""

    max_batches: int = DEFAULT_OUTBOX_MAX_BATCHES
    max_bytes: int = DEFAULT_OUTBOX_MAX_BYTES
    max_age: float = DEFAULT_OUTBOX_MAX_AGE


class Outbox(abc.ABC):
    """Batches waiting for an acknowledgement."""

    def __init__(self, limits: OutboxLimits = OutboxLimits()) -> None:
        self.limits = limits
        self.dropped_batches = 0      # evicted by a count/bytes cap
        self.dropped_reports = 0
        self.expired_batches = 0      # older than max_age
        self.expired_reports = 0

    @abc.abstractmethod
    def add(self, batch: StoredBatch) -> None:
        """Store a new batch (durably for the disk outbox), enforcing the caps."""

    @abc.abstractmethod
    def claim(self, now: float) -> StoredBatch | None:
        """The oldest batch nobody is sending, marked as ours; None when there is none."""

    def update(self, batch: StoredBatch) -> None:  # noqa: B027 - a no-op where batches live in memory
        """Store what was added to a claimed batch (its envelope) before it is sent."""

    @abc.abstractmethod
    def release(self, batch: StoredBatch) -> None:
        """Give a claimed batch back (it will be retried later, same bytes, same id)."""

    @abc.abstractmethod
    def done(self, batch: StoredBatch) -> None:
        """Forget a claimed batch (acknowledged, or rejected for good)."""

    @abc.abstractmethod
    def pending(self) -> int:
        """Number of batches waiting (ours and, for a shared disk outbox, other processes')."""

    @abc.abstractmethod
    def clear(self) -> None:
        """Delete everything (opt-out)."""

    @abc.abstractmethod
    def reset_after_fork(self) -> None:
        """In a forked child: forget in-flight claims (the parent owns them)."""


class MemoryOutbox(Outbox):
    """Retries kept in memory: for clients without a state directory (and simulated fleets)."""

    def __init__(self, limits: OutboxLimits = OutboxLimits()) -> None:
        super().__init__(limits)
        self._batches: collections.deque[StoredBatch] = collections.deque()
        self._claimed: set[int] = set()
        self._lock = threading.Lock()

    def add(self, batch: StoredBatch) -> None:
        with self._lock:
            self._batches.append(batch)
            self._enforce(batch.created)     # built now (the uploader's wall clock)

    def _enforce(self, now: float) -> None:
        lim = self.limits
        for batch in list(self._batches):
            if id(batch) in self._claimed:
                continue
            batch.created = min(batch.created, now)     # a future date is re-dated to now
            if now - batch.created > lim.max_age:
                self._batches.remove(batch)
                self.expired_batches += 1
                self.expired_reports += batch.reports
        while len(self._batches) > lim.max_batches or \
                sum(len(b.body) for b in self._batches) > lim.max_bytes:
            victim = next((b for b in self._batches if id(b) not in self._claimed), None)
            if victim is None:
                break
            self._batches.remove(victim)
            self.dropped_batches += 1
            self.dropped_reports += victim.reports

    def claim(self, now: float) -> StoredBatch | None:
        with self._lock:
            self._enforce(now)
            for batch in self._batches:
                if id(batch) not in self._claimed:
                    self._claimed.add(id(batch))
                    return batch
            return None

    def release(self, batch: StoredBatch) -> None:
        with self._lock:
            self._claimed.discard(id(batch))

    def done(self, batch: StoredBatch) -> None:
        with self._lock:
            self._claimed.discard(id(batch))
            with contextlib.suppress(ValueError):
                self._batches.remove(batch)

    def pending(self) -> int:
        return len(self._batches)

    def clear(self) -> None:
        with self._lock:
            self._batches.clear()
            self._claimed.clear()

    def reset_after_fork(self) -> None:
        self._lock = threading.Lock()
        self._batches = collections.deque()
        self._claimed = set()


class DiskOutbox(Outbox):
    """The on-disk offline queue of a state directory (see the module docstring).

    File name: ``<created ns, 20 digits>-<reports>-<batch id hex>.ldpb``; sorted names are
    oldest first. Content: the request body, byte for byte.
    """

    def __init__(self, directory: str | os.PathLike[str], limits: OutboxLimits = OutboxLimits(),
                 claim_timeout: float = DEFAULT_CLAIM_TIMEOUT, durable: bool = True,
                 sweep_interval: float = SWEEP_INTERVAL, clock: Callable[[], float] = time.time) -> None:
        super().__init__(limits)
        self.clock = clock              # wall clock (POSIX seconds): ages of batches and claims
        from pathlib import Path  # here: not on the SDK's import

        self.dir = Path(directory)
        self.claim_timeout = claim_timeout
        self.sweep_interval = sweep_interval
        self.durable = durable
        self._lock = threading.Lock()
        self._last_sweep = -float("inf")
        self.quarantined = 0
        self._warned = False
        remove_stale_temps(self.dir, None, STALE_TEMP_AGE)

    # --- names -----------------------------------------------------------------------------------
    @staticmethod
    def _name(batch: StoredBatch) -> str:
        return f"{int(batch.created * 1e9):020d}-{batch.reports}-{batch.batch_id.hex()}{BATCH_SUFFIX}"

    @staticmethod
    def _redated(name: str, now: float) -> str:
        """``name`` with its ``created`` replaced by ``now`` (a future date re-dated; names keep 20 digits)."""
        return f"{int(now * 1e9):020d}{name[20:]}"

    @staticmethod
    def _parse(name: str) -> tuple[float, int, bytes] | None:
        stem = name[:-len(BATCH_SUFFIX)] if name.endswith(BATCH_SUFFIX) else None
        if stem is None:
            return None
        parts = stem.split("-")
        if len(parts) != 3:
            return None
        try:
            return int(parts[0]) / 1e9, int(parts[1]), bytes.fromhex(parts[2])
        except ValueError:
            return None

    def _scan(self) -> tuple[list[os.DirEntry[str]], list[os.DirEntry[str]]]:
        """Waiting batch files (sorted, oldest first) and claim files."""
        try:
            entries = list(os.scandir(self.dir))
        except FileNotFoundError:
            return [], []
        waiting, claims = [], []
        for e in entries:
            if e.name.endswith(BATCH_SUFFIX):
                if self._parse(e.name) is None:
                    self._quarantine(e.path, "its name is not an SDK batch name")
                else:
                    waiting.append(e)
            elif e.name.endswith(CLAIM_SUFFIX):
                claims.append(e)
        waiting.sort(key=lambda e: e.name)
        return waiting, claims

    def _quarantine(self, path: str | Path, why: str) -> None:
        """Move a file the SDK cannot send to outbox/quarantine/ (so it never blocks a flush)."""
        target_dir = self.dir / QUARANTINE_DIR
        try:
            target_dir.mkdir(mode=0o700, exist_ok=True)
            os.replace(path, target_dir / f"{os.path.basename(path)}.{os.urandom(3).hex()}")
        except OSError:
            return
        self.quarantined += 1
        if not self._warned:
            self._warned = True
            log.warning("ldpt: moved %s out of the offline queue into %s (%s); further such files are "
                        "moved silently", os.path.basename(path), target_dir, why)

    # --- Outbox --------------------------------------------------------------------------------------
    def add(self, batch: StoredBatch) -> None:
        with self._lock:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            atomic_write(self.dir / self._name(batch), stored_bytes(batch), durable=self.durable)
            self._enforce(batch.created)     # built now (the uploader's wall clock)

    def _enforce(self, now: float) -> None:
        waiting, _ = self._scan()
        lim = self.limits
        keep = []
        for entry in waiting:
            meta = self._parse(entry.name)
            if meta is None:
                continue
            path = entry.path
            if meta[0] > now:                       # dated in the future: re-date it, on disk
                path = str(self.dir / self._redated(entry.name, now))
                try:
                    os.rename(entry.path, path)
                except FileNotFoundError:
                    continue                        # claimed or re-dated by another process
                meta = (now, *meta[1:])
            if now - meta[0] > lim.max_age:
                self._expire(path, meta[1])
                continue
            with contextlib.suppress(FileNotFoundError):
                keep.append((path, meta, os.stat(path).st_size))
        keep.sort(key=lambda k: os.path.basename(k[0]))    # oldest first, re-dated ones where they now belong
        total = sum(s for _, _, s in keep)
        while keep and (len(keep) > lim.max_batches or total > lim.max_bytes):
            path, meta, size = keep.pop(0)
            if self._unlink(path):
                self.dropped_batches += 1
                self.dropped_reports += meta[1]
            total -= size

    def _expire(self, path: str | Path, reports: int) -> None:
        """Drop a batch older than max_age; an entry that cannot be removed (a directory with a
        batch's name) is quarantined instead, so it never stops a sweep or a claim."""
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            self._quarantine(path, f"it cannot be removed: {exc.strerror or exc}")
            return
        self.expired_batches += 1
        self.expired_reports += reports

    @staticmethod
    def _unlink(path: str | Path) -> bool:
        try:
            os.unlink(path)
            return True
        except FileNotFoundError:
            return False

    def claim(self, now: float) -> StoredBatch | None:
        with self._lock:
            wall = self.clock()
            if wall - self._last_sweep >= self.sweep_interval:   # caps and stale claims: now and then
                self._last_sweep = wall
                self._recover_claims(now)
                self._enforce(now)
            waiting, _ = self._scan()
            for entry in waiting:
                meta = self._parse(entry.name)
                if meta is None:
                    continue
                name = entry.name
                if meta[0] > now:                   # re-dated by the claim's rename (release keeps it)
                    name, meta = self._redated(name, now), (now, *meta[1:])
                elif now - meta[0] > self.limits.max_age:
                    self._expire(entry.path, meta[1])
                    continue
                claimed = self.dir / f"{name}.{os.getpid()}.{os.urandom(3).hex()}{CLAIM_SUFFIX}"
                try:
                    os.rename(entry.path, claimed)
                except FileNotFoundError:
                    continue  # another process claimed (or finished) it first
                with contextlib.suppress(OSError):
                    os.utime(claimed)  # the claim's age starts now
                try:
                    body, sealed = parse_stored(claimed.read_bytes())
                except OSError as exc:
                    self._quarantine(claimed, f"it cannot be read: {exc.strerror or exc}")
                    continue
                except ValueError as exc:
                    self._quarantine(claimed, str(exc))
                    continue
                return StoredBatch(meta[2], body, meta[1], meta[0], path=claimed, sealed=sealed)
            return None

    def _recover_claims(self, now: float) -> None:
        """Return claims older than claim_timeout (their sender died or hangs) to the queue."""
        _, claims = self._scan()
        wall = self.clock()
        for entry in claims:
            try:
                age = wall - entry.stat().st_mtime
            except FileNotFoundError:
                continue
            if age > self.claim_timeout:
                original = entry.name.split(BATCH_SUFFIX)[0] + BATCH_SUFFIX
                with contextlib.suppress(FileNotFoundError):
                    os.rename(entry.path, self.dir / original)

    def update(self, batch: StoredBatch) -> None:
        if batch.path is not None:
            atomic_write(batch.path, stored_bytes(batch), durable=self.durable)

    def release(self, batch: StoredBatch) -> None:
        if batch.path is None:
            return
        original = batch.path.name.split(BATCH_SUFFIX)[0] + BATCH_SUFFIX
        with contextlib.suppress(FileNotFoundError):
            os.rename(batch.path, self.dir / original)
        batch.path = None

    def done(self, batch: StoredBatch) -> None:
        # No directory fsync: if a crash undoes the unlink, the batch is sent again and the
        # collector acknowledges it as a duplicate.
        if batch.path is not None:
            self._unlink(batch.path)
            batch.path = None

    def pending(self) -> int:
        waiting, claims = self._scan()
        return len(waiting) + len(claims)

    def iter_batches(self) -> Iterator[Path]:
        """Paths of the waiting batch files, oldest first (inspection and tests)."""
        waiting, _ = self._scan()
        from pathlib import Path

        return iter([Path(e.path) for e in waiting])

    def clear(self) -> None:
        waiting, claims = self._scan()
        for entry in [*waiting, *claims]:
            self._unlink(entry.path)

    def reset_after_fork(self) -> None:
        self._lock = threading.Lock()
