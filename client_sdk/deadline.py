"""Await with a deadline without ever losing the caller's cancellation.

Python 3.10/3.11's ``asyncio.wait_for`` returns the inner result when the caller is cancelled in
the same loop step as the inner awaitable completes (CPython gh-86296): a loop that probes
under ``wait_for`` and is stopped by ``task.cancel()`` then runs on, and whoever awaits it
hangs. ``within`` is the deadline every long-lived loop here uses instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(awaitable: Awaitable[T], seconds: float | None) -> T:
    """``await awaitable``, raising ``asyncio.TimeoutError`` after ``seconds`` (None: no limit);
    a cancellation of the caller always propagates, and the inner awaitable is cancelled with it."""
    timeout = getattr(asyncio, "timeout", None)
    if timeout is not None:  # 3.11+: the awaitable runs in the caller's own task
        async with timeout(seconds):
            return await awaitable
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except BaseException:
        task.cancel()
        raise
    if not done:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise asyncio.TimeoutError
    return task.result()
