"""Estimates per segment of public dimensions (``ldpt estimate --by os``, ``?by=os`` in the API).

A metric with ``dimensions = [...]`` keeps one sketch per combination of its dimensions' values
(client_sdk/dimensions.py). Sketches are sums of independent reports, so grouping by fewer
dimensions (``--by os`` of a metric broken down by os and channel) adds the sketches of the
segments that share those values; each group is then estimated exactly as a whole metric is
(``estimate_frame``), with the variance of its own n reports.

A group with fewer than ``min_reports`` reports is *suppressed*: no row of it is produced, not
even its name or its n; the frame's ``attrs["suppressed"]`` counts them so every output can say
how many were withheld. The total of a metric (its estimate without ``--by``) is estimated from
the sum of all segments' sketches, suppressed ones included (docs/privacy.md, "Public
dimensions" says why this is sound).

A collector keeps at most ``max_segments`` segments of a metric per window (collector/segments.py);
the reports that would have opened one more count in the metric's total and in no segment. Given
the total's report count, ``attrs["unsegmented"]`` says how many (total − all segments,
suppressed ones included) and ``attrs["warning"]`` says that the groups shown miss them: each
group's estimate is exact for the reports it holds, but a segment left out in some window
counts none of its reports of that window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from client_sdk.dimensions import split_segment_key
from client_sdk.errors import EstimationError
from client_sdk.registry import MetricSpec
from sketches.base import Sketch

from .frequency import estimate_frame


def parse_by(spec: MetricSpec, by: str | Sequence[str]) -> list[str]:
    """``"os"``, ``"os,channel"`` or ``["os", "channel"]`` checked against the metric's dimensions."""
    names = [b.strip() for b in (by.split(",") if isinstance(by, str) else by) if b.strip()]
    known = [d.name for d in spec.dimensions]
    if not names or len(names) > 2 or len(set(names)) != len(names):
        raise EstimationError(f"--by takes one or two distinct dimensions (e.g. os or os,channel); "
                              f"got {','.join(names) or 'nothing'}")
    for name in names:
        if name not in known:
            what = f"its dimensions are {', '.join(known)}" if known else \
                "it declares no dimensions (registry field dimensions = [...])"
            raise EstimationError(f"metric {spec.name!r} has no dimension {name!r}: {what}")
    return names


def segment_keys(spec: MetricSpec, stored: Iterable[Any]) -> list[str]:
    """The stored segment keys (metric column values) of ``spec`` under its fingerprint."""
    out = set()
    for w in stored:
        metric, values = split_segment_key(w.metric)
        if metric == spec.name and values is not None and w.fingerprint == spec.fingerprint:
            out.add(w.metric)
    return sorted(out)


def group_sketches(spec: MetricSpec, segments: Iterable[tuple[str, Sketch]],
                   by: Sequence[str]) -> dict[tuple[str, ...], Sketch]:
    """Sum segment sketches (keyed by their stored segment key) by their values of ``by``."""
    out: dict[tuple[str, ...], Sketch] = {}
    for key, sketch in segments:
        values = split_segment_key(key)[1] or {}
        group = tuple(values.get(b, "unknown") for b in by)
        if group in out:
            out[group] = out[group].merge(sketch)
        else:
            out[group] = sketch.copy()
    return out


def breakdown_frame(spec: MetricSpec, groups: Mapping[tuple[str, ...], Sketch], by: Sequence[str],
                    min_reports: int, *, confidence: float = 0.95, simultaneous: bool = False,
                    consistent: bool = False, total_reports: int | None = None):  # noqa: ANN201 - a DataFrame
    """One estimate frame per shown group, stacked, the dimension columns first.

    Groups with fewer than ``min_reports`` reports are dropped and counted in
    ``attrs["suppressed"]``; ``attrs["by"]`` names the dimensions, ``attrs["segments"]`` the
    number shown. With ``total_reports`` (the metric's total over the same windows),
    ``attrs["unsegmented"]`` counts the reports in no segment (module docstring).
    """
    import pandas as pd

    frames = []
    suppressed = 0
    for group in sorted(groups):
        sketch = groups[group]
        n = int(sketch.total_reports)
        if n < min_reports:
            suppressed += 1
            continue
        df = estimate_frame(spec, sketch, confidence=confidence, simultaneous=simultaneous,
                            consistent=consistent)
        for name, value in reversed(list(zip(by, group))):
            df.insert(0, name, value)
        if "n" not in df.columns:
            df["n"] = n
        frames.append(df)
    if frames:
        out = pd.concat(frames, ignore_index=True)
        attrs = dict(frames[0].attrs)
    else:
        out = pd.DataFrame(columns=[*by, "value", "estimate", "std_error", "ci_low", "ci_high", "n"])
        attrs = {"metric": spec.name, "fingerprint": spec.fingerprint}
    attrs.update(by=list(by), suppressed=suppressed, segments=len(frames), min_reports=min_reports,
                 n_reports=sum(int(groups[g].total_reports) for g in groups
                               if groups[g].total_reports >= min_reports))
    for key in ("summary", "warning"):
        attrs.pop(key, None)
    if total_reports is not None:
        unsegmented = max(0, int(total_reports) - sum(int(g.total_reports) for g in groups.values()))
        attrs["unsegmented"] = unsegmented
        if unsegmented:
            attrs["warning"] = (f"{unsegmented:,} of the metric's {int(total_reports):,} reports are in no segment: "
                                "they arrived after the collector's segment cap (max_segments) was reached in "
                                "their window; the total counts them, the groups shown do not")
    out.attrs = attrs
    return out
