"""Crash-safe file primitives for the device state, on Linux, macOS and Windows.

- ``atomic_write``: write a private temporary sibling, fsync it, ``os.replace`` it over the
  target (atomic on POSIX, and on Windows for files of one volume), fsync the directory
  where the platform allows it. Readers see the old file or the new one, never a torn one.
- ``flocked``: an exclusive lock on a lock file, shared by every process of the app.
  POSIX: ``flock(2)`` (``FlockLock``). Windows: ``msvcrt.locking`` on the file's first byte
  (``ByteRangeLock``), a per-handle lock like flock's per-open-file one. Both are released
  when the descriptor is closed, so a killed process never leaves the lock held.
  ``client_sdk.testing.FlockMsvcrt`` gives ``ByteRangeLock`` msvcrt's contract on POSIX, so
  the SDK test suite runs the Windows code path here too (tests/sdk_support.py).
- ``remove_stale_temps``: temporary files of a write that a kill interrupted.

Every file is opened in binary mode (``O_BINARY`` on Windows, where ``os.open`` defaults to
text mode and would rewrite newlines in the secret, the ledger and the outbox batches).
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_BINARY = getattr(os, "O_BINARY", 0)
#: Flags of every file the SDK opens: binary, not inherited by child processes.
OPEN_FLAGS = O_CLOEXEC | O_BINARY | getattr(os, "O_NOINHERIT", 0)
TEMP_SUFFIX = ".tmp"
#: errno values msvcrt.locking raises while another handle holds the region.
_BUSY_ERRNOS = frozenset({errno.EACCES, errno.EAGAIN, getattr(errno, "EDEADLOCK", errno.EDEADLK)})
#: Windows refuses os.replace while another process has the target open (a reader of the
#: ledger): a few short retries cover a concurrent read.
REPLACE_RETRIES = 20
REPLACE_RETRY_DELAY = 0.01


def temp_name(path: Path) -> Path:
    """A private sibling name for write-then-rename (never collides across processes)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}{TEMP_SUFFIX}")


def atomic_write(path: Path, data: bytes, mode: int = 0o600, *, durable: bool = True) -> None:
    """Write-temp-fsync-rename: readers see the old file or the new one, never a torn one."""
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | OPEN_FLAGS, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    os.close(fd)
    try:
        replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)


def replace(src: Path, dst: Path, *, retries: int | None = None,
            sleep: Callable[[float], None] = time.sleep) -> None:
    """``os.replace``, retried briefly on Windows' sharing violations (PermissionError)."""
    retries = (REPLACE_RETRIES if os.name == "nt" else 0) if retries is None else retries
    for attempt in range(retries + 1):
        try:
            os.replace(src, dst)
            return
        except PermissionError:
            if attempt == retries:
                raise
            sleep(REPLACE_RETRY_DELAY)


def fsync_dir(path: Path) -> None:
    """Make a rename/unlink in ``path`` durable (best effort where directories can't be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | O_CLOEXEC)
    except OSError:
        return  # Windows: directories cannot be opened; NTFS journals the rename itself
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_stale_temps(directory: Path, name: str | None, older_than: float = 0.0,
                       now: float | None = None) -> int:
    """Delete ``temp_name`` files of ``name`` (None: of any file) in ``directory`` older than
    ``older_than`` seconds.

    A process killed between creating its temporary file and renaming it leaves the file
    behind. Callers that hold the lock every writer of ``name`` takes pass 0; others pass an
    age no live write can reach. Returns how many were removed; never raises.
    """
    prefix = "." if name is None else f".{name}."
    now = time.time() if now is None else now
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        if not (entry.name.startswith(prefix) and entry.name.endswith(TEMP_SUFFIX)):
            continue
        try:
            if now - entry.stat().st_mtime >= older_than:
                os.unlink(entry.path)
                removed += 1
        except OSError:
            continue
    return removed


# --- inter-process locks -------------------------------------------------------------------------

class FlockLock:
    """POSIX: an exclusive flock(2); closing the descriptor releases it."""

    name = "posix"

    def __init__(self, fcntl_module: Any = None) -> None:
        self._fcntl = fcntl_module if fcntl_module is not None else importlib.import_module("fcntl")

    def acquire(self, fd: int) -> None:
        self._fcntl.flock(fd, self._fcntl.LOCK_EX)

    def release(self, fd: int) -> None:
        """Nothing to do: the close that follows releases the lock."""


class ByteRangeLock:
    """Windows: ``msvcrt.locking`` on byte 0 of the lock file, polled until granted.

    ``LK_NBLCK`` is tried with exponential back-off between ``poll`` and ``max_poll``
    seconds (msvcrt's own blocking mode gives up after 10 s and raises). The lock belongs to
    the handle, so two opens in one process exclude each other, as with flock.
    """

    name = "portable"

    def __init__(self, msvcrt_module: Any = None, *, poll: float = 0.001, max_poll: float = 0.05,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._msvcrt = msvcrt_module if msvcrt_module is not None else importlib.import_module("msvcrt")
        self.poll, self.max_poll, self._sleep = poll, max_poll, sleep

    def acquire(self, fd: int) -> None:
        delay = self.poll
        while True:
            os.lseek(fd, 0, os.SEEK_SET)   # locking() applies from the current position
            try:
                self._msvcrt.locking(fd, self._msvcrt.LK_NBLCK, 1)
                return
            except OSError as exc:
                if exc.errno not in _BUSY_ERRNOS:
                    raise
            self._sleep(delay)
            delay = min(self.max_poll, delay * 2)

    def release(self, fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        self._msvcrt.locking(fd, self._msvcrt.LK_UNLCK, 1)


def default_lock() -> FlockLock | ByteRangeLock:
    """flock where the platform has it (Linux, macOS, BSD), msvcrt.locking elsewhere (Windows)."""
    try:
        return FlockLock()
    except ImportError:
        return ByteRangeLock()


#: The implementation ``flocked`` uses (tests swap in ``ByteRangeLock`` to run the Windows path).
LOCK: FlockLock | ByteRangeLock = default_lock()


@contextlib.contextmanager
def flocked(path: Path) -> Iterator[int]:
    """Hold the exclusive inter-process lock of ``path`` (created 0600) for the block.

    The lock belongs to the open file (description/handle), so two opens in one process
    exclude each other too; callers also hold a thread lock, and fork hooks make sure no lock
    file descriptor is open while the process forks (a child would otherwise keep the lock).
    """
    lock = LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT | OPEN_FLAGS, 0o600)
    try:
        lock.acquire(fd)
        try:
            yield fd
        finally:
            lock.release(fd)
    finally:
        os.close(fd)  # closing releases the lock on every platform
