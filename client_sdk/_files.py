"""Crash-safe file primitives for the device state: atomic replace, directory fsync, flock."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def temp_name(path: Path) -> Path:
    """A private sibling name for write-then-rename (never collides across processes)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")


def atomic_write(path: Path, data: bytes, mode: int = 0o600, *, durable: bool = True) -> None:
    """Write-temp-fsync-rename: readers see the old file or the new one, never a torn one."""
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_CLOEXEC, mode)
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
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make a rename/unlink in ``path`` durable (best effort where directories can't be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def flocked(path: Path) -> Iterator[int]:
    """Hold an exclusive flock(2) on ``path`` (created 0600) for the duration of the block.

    flock locks belong to the open file description, so two opens in one process exclude
    each other too; callers also hold a thread lock, and fork hooks make sure no lock file
    descriptor is open while the process forks (a child would otherwise keep the lock).
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing releases the lock
