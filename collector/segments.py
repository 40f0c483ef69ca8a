"""The cap on segments per metric and window (public dimensions, docs/operations.md).

Clear dimensions multiply a metric's sketches: one per combination of values. The closed sets
bound that product, but an operator may want a lower bound on storage; ``SegmentCap`` keeps at
most ``max_segments`` segments of a metric in a window. It counts the segments already stored
(read once per window from the store) plus those this process opened since.

The cap never costs a report. A batch whose report would open segment number
``max_segments + 1`` is accepted and its reports are added to the metric's total as always;
only that segment's copy is left out (``check`` returns the keys to leave out). So whoever
fills the cap — anyone can: dimension values are sent in clear and unauthenticated, and 1,000
one-report batches from 17 addresses filled a 1,000-segment cap in 3.6 s (issue 26) — takes
away the breakdown of the segments that come later, never their reports and never another
metric's. Breakdowns say how many of a metric's reports are in no segment
(estimators/breakdown.py, ``unsegmented``). A registry whose combinations fit the cap is
never affected; ``ldpt serve`` and ``ldpt metrics check`` warn when they do not.

Several collectors sharing a store each open up to the cap's remainder before they see each
other's; before leaving a segment out, a collector re-reads the store's segments of the window
(at most every ``RELOAD_SECONDS``), so one that another collector opened is kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from client_sdk.dimensions import split_segment_key
from collector.storage.base import SketchKey, WindowInfo

#: Windows whose segment sets are kept in memory (the current one and the one before).
KEPT_WINDOWS = 2
#: Seconds between two re-reads of a window's stored segments (another collector's openings).
RELOAD_SECONDS = 5.0


def cap_warnings(registry: Iterable, max_segments: int) -> list[str]:
    """A line for each metric whose dimensions form more combinations than ``max_segments``:
    anyone who sends one report per combination fills its cap, and the later segments of the
    window are then counted in the total only (``ldpt serve`` logs these, ``ldpt metrics check``
    prints them)."""
    from client_sdk.dimensions import combination_count

    out = []
    for spec in registry:
        dims = tuple(getattr(spec, "dimensions", ()) or ())
        if not dims:
            continue
        count = combination_count(dims)
        if count > max_segments:
            out.append(f"metric {spec.name!r}: its dimensions ({', '.join(d.name for d in dims)}) form "
                       f"{count:,} combinations, above max_segments = {max_segments:,}: one report per "
                       "combination (anyone can send them) fills the cap, and the reports of later segments "
                       "of the window then count in the metric's total but in no segment; raise "
                       f"max_segments to {count:,} (LDPT_MAX_SEGMENTS) or merge dimension values")
    return out


class SegmentCap:
    """Segments seen per (metric, window); ``check`` says which keys of a batch are left out."""

    def __init__(self, max_segments: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_segments = max_segments
        self.clock = clock
        self._seen: dict[str, dict[str, set[str]]] = {}  # window -> metric -> segment keys
        self._loaded_at: dict[str, float] = {}
        self.full: set[tuple[str, str]] = set()          # (metric, window) whose cap was reached

    def loaded(self, window: str) -> bool:
        return window in self._seen

    def reload_due(self, window: str) -> bool:
        """Whether the store's segments of ``window`` may be read again (``RELOAD_SECONDS``)."""
        return self.clock() - self._loaded_at.get(window, float("-inf")) >= RELOAD_SECONDS

    def load(self, window: str, stored: Iterable[WindowInfo]) -> None:
        """Count ``window`` from the store's windows (all metrics), with what this process opened."""
        per: dict[str, set[str]] = {}
        for w in stored:
            if w.window == window:
                metric, segment = split_segment_key(w.metric)
                if segment is not None:
                    per.setdefault(metric, set()).add(w.metric)
        for metric, mine in self._seen.get(window, {}).items():
            per.setdefault(metric, set()).update(mine)
        self._seen[window] = per
        self._loaded_at[window] = self.clock()
        for old in sorted(self._seen)[:-KEPT_WINDOWS]:
            del self._seen[old]
            self._loaded_at.pop(old, None)
            self.full = {(m, w) for m, w in self.full if w != old}

    def over(self, keys: Iterable[SketchKey]) -> list[SketchKey]:
        """The segment keys among ``keys`` that would open a segment beyond the cap (in order)."""
        out: list[SketchKey] = []
        opening: dict[tuple[str, str], set[str]] = {}
        for key in keys:
            metric, segment = split_segment_key(key.metric)
            if segment is None:
                continue
            seen = self._seen.setdefault(key.window, {}).setdefault(metric, set())
            if key.metric in seen:
                continue
            new = opening.setdefault((key.window, metric), set())
            if key.metric not in new and len(seen) + len(new) >= self.max_segments:
                out.append(key)
            else:
                new.add(key.metric)
        return out

    def check(self, keys: Iterable[SketchKey]) -> list[SketchKey]:
        """Count the segments ``keys`` open, up to the cap; return the keys left out (beyond it)."""
        keys = list(keys)
        left_out = self.over(keys)
        skip = set(left_out)
        for key in keys:
            metric, segment = split_segment_key(key.metric)
            if segment is not None and key not in skip:
                self._seen[key.window][metric].add(key.metric)
        for key in left_out:
            self.full.add((split_segment_key(key.metric)[0], key.window))
        return left_out
