"""Estimates per window over a range: the long-format series behind ``--by window``.

One row per (window, value) — or (window, statistic) for numeric metrics — with the columns of
``estimators.frequency.estimate_frame`` after a leading ``window`` column and a trailing ``n``
(the window's report count). Every window of the range is present: a window without reports
has n = 0 and empty (NaN) estimates, so a gap in the data is visible instead of silently
missing. Each window is estimated on its own sketch, so its estimates are unbiased and its
intervals have the nominal per-window coverage (docs/guide-analysts.md, "Series").

The CLI and the collector's query API both build the frame here and serialise it with
``estimators.formats``, so the two give identical bytes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from client_sdk.errors import EstimationError
from client_sdk.registry import MetricSpec
from sketches.base import Sketch

from .frequency import estimate_frame

if TYPE_CHECKING:
    import pandas as pd

#: A series longer than this is refused (a year of hours is 8,784 windows).
MAX_WINDOWS = 10_000

__all__ = ["MAX_WINDOWS", "series_frame", "window_grid", "window_span", "windows_in_range"]


def window_grid(since: str, until: str, hourly: bool) -> list[str]:
    """Every window label from day ``since`` to day ``until`` inclusive (days or hours)."""
    first, last = dt.date.fromisoformat(since), dt.date.fromisoformat(until)
    if last < first:
        raise EstimationError(f"the range {since} to {until} is empty: until is before since")
    days = (last - first).days + 1
    count = days * (24 if hourly else 1)
    if count > MAX_WINDOWS:
        raise EstimationError(f"{since} to {until} has {count:,} {'hour' if hourly else 'day'} windows; "
                              f"a series has at most {MAX_WINDOWS:,} (narrow the range)")
    if not hourly:
        return [(first + dt.timedelta(days=i)).isoformat() for i in range(days)]
    start = dt.datetime.combine(first, dt.time())
    return [(start + dt.timedelta(hours=i)).isoformat()[:13] for i in range(count)]


def window_span(df: pd.DataFrame, labels: Sequence[str]) -> pd.DataFrame:
    """``df`` saying which stored windows its one estimate sums (``attrs["window_range"]``: first,
    last and how many; the CLI's header and JSON ``meta`` show it): an estimate without
    ``--window`` sums every stored window of the range, which nothing said before."""
    ordered = sorted(set(labels))
    if ordered:
        df.attrs["window_range"] = {"first": ordered[0], "last": ordered[-1], "windows": len(ordered)}
    return df


def windows_in_range(stored: Sequence[str], since: str | None, until: str | None) -> list[str]:
    """The series' window grid: the granularity of the stored windows (hour labels have a
    ``T``), from ``since`` (default: the first stored day) to ``until`` (default: the last)."""
    if not stored:
        raise EstimationError("no stored windows: nothing to draw a series from")
    hourly = any("T" in w for w in stored)
    days = sorted(w[:10] for w in stored)
    return window_grid(since or days[0], until or days[-1], hourly)


def series_frame(spec: MetricSpec, sketches: Sequence[tuple[str, Sketch]], *, confidence: float = 0.95,
                 simultaneous: bool = False, candidates: Sequence[str] | None = None) -> pd.DataFrame:
    """Long-format estimates of every window in ``sketches`` (window label, its sketch).

    ``attrs`` are those of a single estimate (metric, protocol, epsilon, confidence, ...) with
    ``n_reports`` the total over the range, plus ``by="window"`` and the window labels.
    """
    frames: list[pd.DataFrame | None] = []
    template: pd.DataFrame | None = None
    for _, sketch in sketches:
        if sketch.total_reports == 0:
            frames.append(None)
            continue
        df = estimate_frame(spec, sketch, confidence=confidence, simultaneous=simultaneous,
                            candidates=candidates)
        frames.append(df)
        template = df if template is None else template
    if template is None:
        what = f"{sketches[0][0]} to {sketches[-1][0]}" if sketches else "the range"
        raise EstimationError(f"no reports of {spec.name!r} in any window of {what}")
    parts = []
    for (window, sketch), df in zip(sketches, frames):
        part = _empty_like(template) if df is None else df.copy()
        part.insert(0, "window", window)
        part["n"] = int(sketch.total_reports)
        parts.append(part)
    import pandas as pd

    out = pd.concat(parts, ignore_index=True)
    out.attrs = dict(template.attrs, n_reports=int(sum(s.total_reports for _, s in sketches)),
                     by="window", windows=[w for w, _ in sketches])
    return out


def _empty_like(template: pd.DataFrame) -> pd.DataFrame:
    """The template's rows (values or statistics) with every estimate blank: a window with n = 0."""
    out = template.copy()
    for col in out.columns:
        if col in ("value", "statistic"):
            continue
        if out[col].dtype == bool:
            out[col] = False
        elif np.issubdtype(out[col].dtype, np.number):
            out[col] = np.nan
        else:
            out[col] = None
    return out
