"""Request bodies held in memory: charged as their bytes arrive, in total and per source.

``max_inflight_bytes`` bounds the memory of the request bodies being read or decoded. It used
to be reserved by Content-Length before any body byte was read, so a client could claim the
whole budget by *saying* large lengths and then sending one byte a second: 64 sockets from two
addresses declaring 1 MiB each held 64 MiB for ``body_read_timeout`` and every honest batch
got 503 (issue 18). Two rules close that:

- **Charge what arrived.** A body is charged its bytes as the handler receives them (after
  Content-Encoding is undone: the memory it takes) and released once decoded. A declared
  length costs nothing until the bytes come, so lying about the length, or sending slowly,
  holds no budget; holding memory takes sending it.
- **A share per source.** One source address (the address the rate limit counts; relays are
  exempt, as from the other per-source limits) may hold at most ``max_inflight_bytes_per_source``
  at once. Filling the whole budget then takes ``max_inflight_bytes / share`` addresses
  (16 at the defaults), each sending its share and keeping it unfinished — while
  ``body_read_timeout`` frees it after 30 s at the latest.

A request is refused before its body is read (503 ``overloaded`` with Retry-After) when the
bytes already held plus its declared length would exceed the total or its source's share;
a body that overruns either while arriving (concurrent bodies admitted together, or a chunked
body without a length) is refused mid-way and its connection closed. The total can therefore
be exceeded by at most one read chunk per body being read.

A minimum body rate was the third option: it would close a dripping socket sooner but does
not stop a fast liar, and the two rules above already make a slow socket hold nothing but a
connection slot (bounded by ``max_connections`` and the rate limit).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from .problems import Problem


class InflightBudget:
    """Bytes of request bodies held, in total and per source; see the module docstring."""

    def __init__(self, total: int, per_source: int, *,
                 on_change: Callable[[int], None] | None = None,
                 retry_after: Callable[[], float] | None = None) -> None:
        self.total, self.per_source = total, per_source
        self.on_change = on_change or (lambda delta: None)  # the ldpt_inflight_bytes gauge
        self.retry_after = retry_after or (lambda: 1.0)
        self.held = 0
        self._by_source: dict[Hashable, int] = {}

    def held_by(self, source: Hashable) -> int:
        return self._by_source.get(source, 0)

    def admit(self, source: Hashable, length: int | None, exempt: bool) -> None:
        """Refuse (503) a body whose declared length cannot fit now; nothing is charged."""
        want = length or 0
        if self.held and self.held + want > self.total:
            raise self._refusal("too many request bodies in flight")
        if not exempt and self.held_by(source) and self.held_by(source) + want > self.per_source:
            raise self._refusal("too many request bodies in flight from this address")

    def charge(self, source: Hashable, nbytes: int, exempt: bool) -> None:
        """Charge bytes that arrived; 503 (closing the connection) when over the total or the
        source's share. The bytes stay charged until ``release``."""
        self.held += nbytes
        self._by_source[source] = self.held_by(source) + nbytes
        self.on_change(nbytes)
        if self.held > self.total:
            raise self._refusal("too many request bodies in flight", close=True)
        if not exempt and self._by_source[source] > self.per_source:
            raise self._refusal("too many request bodies in flight from this address", close=True)

    def release(self, source: Hashable, nbytes: int) -> None:
        if not nbytes:
            return
        self.held -= nbytes
        left = self.held_by(source) - nbytes
        if left > 0:
            self._by_source[source] = left
        else:
            self._by_source.pop(source, None)
        self.on_change(-nbytes)

    def _refusal(self, why: str, close: bool = False) -> Problem:
        return Problem("overloaded", f"{why}; retry the same batch after Retry-After seconds",
                       retry_after=self.retry_after(), close=close)
