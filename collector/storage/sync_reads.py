"""The query layer's reads over a synchronous store, for a one-shot command, without an event loop.

``SyncReads`` has the read half of ``AsyncSketchStore`` (``aload``, ``awindows``,
``ashuffle_records``) over a synchronous store such as ``SQLiteStore``, run in the caller's
thread: what ``ldpt estimate`` and ``ldpt compare`` hand the query layer (collector/estimates.py)
for a ``--db`` store. Its coroutines never suspend, so ``run_to_end`` drives a query over them
to its result by itself: the command imports no asyncio (~20 ms of a fresh process, issue 32).
"""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sketches.base import Sketch

from .base import WindowInfo

if TYPE_CHECKING:  # an annotation: a store no shuffler wrote to never loads .shuffled
    from .shuffled import ShuffleRecord

T = TypeVar("T")


class SyncReads:
    """The read half of ``AsyncSketchStore`` over a synchronous store, in the caller's thread."""

    def __init__(self, store: Any) -> None:
        self.store = store

    async def aload(self, metric: str, fingerprint: str, template: Sketch, windows: Sequence[str] | None = None,
                    since: str | None = None, until: str | None = None) -> Sketch:
        """``SketchStore.load``."""
        return self.store.load(metric, fingerprint, template, windows, since, until)

    async def awindows(self, metric: str | None = None) -> list[WindowInfo]:
        """``SketchStore.windows``."""
        return self.store.windows(metric)

    async def ashuffle_records(self, metric: str, fingerprint: str, windows: Sequence[str] | None = None,
                               since: str | None = None, until: str | None = None) -> list[ShuffleRecord]:
        """``SketchStore.shuffle_records``."""
        return self.store.shuffle_records(metric, fingerprint, windows, since, until)


def run_to_end(query: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that never suspends (a query over ``SyncReads``), run in this
    thread without an event loop; a RuntimeError if it does suspend (it awaited something that
    needs a loop: run it with asyncio instead)."""
    try:
        query.send(None)
    except StopIteration as done:
        return done.value
    query.close()
    raise RuntimeError(f"{query.__qualname__} suspended: it needs an event loop (asyncio.run)")
