"""How the CLI words the query layer's refusals for a store it reads (``--db``, ``--postgres``).

The layer (collector/estimates.py) decides what is refused; these rules name the store and the
CLI's options in the message, and publish every window: an analyst reading a store directly
has no ``--min-reports`` between them and the sums.
"""

from __future__ import annotations

from typing import Any

from client_sdk.errors import EstimationError, LdptError, StoreError
from client_sdk.registry import MetricSpec
from collector.estimates import Rules, Side
from collector.storage.base import WindowInfo


def registry_windows(label: str, spec: MetricSpec, stored: list[WindowInfo]) -> list[WindowInfo]:
    """The windows of ``stored`` under the registry's parameters; an error saying what to do when
    the store holds none of the metric, or only under other parameters."""
    if not stored:
        raise EstimationError(f"{label}: no data for metric {spec.name!r}")
    mine = [w for w in stored if w.fingerprint == spec.fingerprint]
    if not mine:
        other = sorted({w.fingerprint[:12] for w in stored})
        raise StoreError(f"{label}: metric {spec.name!r} was stored under other parameters "
                         f"(fingerprint {', '.join(other)}; the registry now gives "
                         f"{spec.fingerprint[:12]}); estimates cannot mix them. Estimate with the "
                         "registry file the data was collected under (its version from your "
                         "version control; `ldpt metrics check FILE` prints each metric's "
                         "fingerprint), or keep the new parameters under a new metric name")
    return mine


class StoreRules(Rules):
    """The query layer's ``Rules`` for a store the CLI reads; ``label`` names it in errors."""

    window_option = "--window"

    def __init__(self, label: str, segment_min: int | None = None) -> None:
        super().__init__(0, segment_min)
        self.label = label

    async def stored(self, spec: MetricSpec, store: Any) -> None:
        registry_windows(self.label, spec, await store.awindows(spec.name))

    async def no_reports(self, spec: MetricSpec, store: Any, side: Side, comparing: bool) -> LdptError:
        return self.empty(spec, side)

    def empty(self, spec: MetricSpec, side: Side) -> LdptError:
        """"No reports in these windows", naming the store and the window, range or whole store."""
        what = f"window {side.windows[0]}" if side.windows else \
            f"range {side.since or '...'} to {side.until or '...'}" if (side.since or side.until) else "the store"
        return EstimationError(f"{self.label}: no reports of {spec.name!r} in {what}")
