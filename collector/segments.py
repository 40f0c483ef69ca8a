"""The cap on segments per metric and window (issue: public dimensions, docs/operations.md).

Clear dimensions multiply a metric's sketches: one per combination of values. The closed sets
bound that product, but an operator may want a lower bound on storage; ``SegmentCap`` refuses
(422 ``too-many-segments``) a batch that would open segment number ``max_segments + 1`` of a
metric in a window. It counts the segments already stored (read once per window from the
store) plus those this process opened since; several collectors sharing a store may each open
up to the cap's remainder before they see each other's (the cap bounds storage, it is not a
privacy control).
"""

from __future__ import annotations

from collections.abc import Iterable

from client_sdk.dimensions import split_segment_key
from collector.storage.base import SketchKey, WindowInfo

from .problems import Problem

#: Windows whose segment sets are kept in memory (the current one and the one before).
KEPT_WINDOWS = 2


class SegmentCap:
    """Segments seen per (metric, window); ``check`` raises before a batch opens one too many."""

    def __init__(self, max_segments: int) -> None:
        self.max_segments = max_segments
        self._seen: dict[str, dict[str, set[str]]] = {}  # window -> metric -> segment keys

    def loaded(self, window: str) -> bool:
        return window in self._seen

    def load(self, window: str, stored: Iterable[WindowInfo]) -> None:
        """Start counting ``window`` from the store's windows (all metrics)."""
        per: dict[str, set[str]] = {}
        for w in stored:
            if w.window == window:
                metric, segment = split_segment_key(w.metric)
                if segment is not None:
                    per.setdefault(metric, set()).add(w.metric)
        self._seen[window] = per
        for old in sorted(self._seen)[:-KEPT_WINDOWS]:
            del self._seen[old]

    def check(self, keys: Iterable[SketchKey]) -> None:
        """Refuse keys that open a segment beyond the cap; otherwise count them as opened."""
        new: dict[tuple[str, str], set[str]] = {}
        for key in keys:
            metric, segment = split_segment_key(key.metric)
            if segment is None:
                continue
            seen = self._seen.setdefault(key.window, {}).setdefault(metric, set())
            if key.metric not in seen:
                new.setdefault((key.window, metric), set()).add(key.metric)
        for (window, metric), keys_new in new.items():
            seen = self._seen[window][metric]
            if len(seen) + len(keys_new) > self.max_segments:
                raise Problem("too-many-segments", f"metric {metric!r} already has {len(seen)} "
                              f"segments in window {window}; this collector keeps at most "
                              f"{self.max_segments} (LDPT_MAX_SEGMENTS)", metric=metric, field="d")
        for (window, metric), keys_new in new.items():
            self._seen[window][metric] |= keys_new
