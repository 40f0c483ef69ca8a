"""`ldpt estimate --truth`: the true population `ldpt simulate --truth` wrote, beside the estimate.

Three shapes, told apart by their header row (headerless files are ``value,count``):

- ``value,count`` — one population (``ldpt simulate``);
- ``window,value,count`` — one population per window (``ldpt simulate --days``): with
  ``--window`` the rows of that window, with ``--by window`` matched window by window,
  otherwise summed over the windows the estimate covers (``--since``/``--until``);
- ``statistic,value`` — a numeric metric's mean, sum, n, bucket counts and quantiles.

A truth file of another metric (or of another run) would print a confident wrong column, so
the match is checked: no value of the file in the metric's domain is an error, as is a numeric
file of another kind, other buckets or a mean outside the metric's range; some of its values
outside the domain, or a total that differs from the reports the estimate holds (e.g.
``ldpt simulate --db`` added a second run to the store), are warnings on standard error.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import click

__all__ = ["TruthFile", "attach_truth", "read_truth"]

#: How many example values a mismatch message names.
SHOWN = 3


@dataclass
class TruthFile:
    """A parsed truth file: counts per window (``None``: the file has no windows) and value,
    or a numeric metric's statistics."""

    path: str
    shape: str  # "counts", "windows" or "statistics"
    counts: dict[str | None, dict[str, float]] = field(default_factory=dict)
    statistics: dict[str, float] = field(default_factory=dict)


def _number(path: str, line: int, name: str, text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise click.ClickException(f"{path}: line {line}: field {name!r} is {text.strip()!r}, "
                                   "not a number") from None
    if not math.isfinite(x) or (name == "count" and x < 0):
        raise click.ClickException(f"{path}: line {line}: field {name!r} must be a finite number"
                                   + (" >= 0" if name == "count" else ""))
    return x


def read_truth(path: str) -> TruthFile:
    """Parse ``path`` (errors name the file, the line and the field)."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = [r for r in csv.reader(fh) if r]
    except OSError as exc:
        raise click.ClickException(f"{path}: cannot read the truth file ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise click.ClickException(f"{path}: the truth file is not UTF-8 text") from None
    header = [c.strip().lower() for c in rows[0]] if rows else []
    shapes = {("value", "count"): "counts", ("window", "value", "count"): "windows",
              ("statistic", "value"): "statistics"}
    shape = shapes.get(tuple(header))
    body, first = (rows[1:], 2) if shape else (rows, 1)
    shape = shape or "counts"
    fields = {"counts": ("value", "count"), "windows": ("window", "value", "count"),
              "statistics": ("statistic", "value")}[shape]
    out = TruthFile(path, shape)
    for line, row in enumerate(body, start=first):
        if len(row) != len(fields):
            raise click.ClickException(
                f"{path}: line {line}: expected {len(fields)} fields {','.join(fields)}, got {len(row)}"
                + (" (a per-window truth file starts with the header window,value,count, as "
                   "ldpt simulate --days --truth writes it)" if len(row) == 3 else ""))
        if shape == "statistics":
            out.statistics[row[0]] = _number(path, line, "value", row[1])
            continue
        window = row[0].strip() if shape == "windows" else None
        value, count = row[-2], _number(path, line, "count", row[-1])
        per = out.counts.setdefault(window, {})
        per[value] = per.get(value, 0.0) + count
    if not out.counts and not out.statistics:
        raise click.ClickException(f"{path}: the truth file holds no rows")
    return out


def _in_range(window: str, since: str | None, until: str | None) -> bool:
    day = window[:10]
    return (since is None or day >= since) and (until is None or day <= until)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _names(values: list[str]) -> str:
    shown = ", ".join(repr(v) for v in values[:SHOWN])
    return shown + (f" and {len(values) - SHOWN:,} more" if len(values) > SHOWN else "")


def attach_truth(df: Any, path: str, *, string_metric: bool, window: str | None = None,
                 since: str | None = None, until: str | None = None,
                 by: str | None = None) -> tuple[Any, list[str]]:
    """``df`` with a ``truth`` column, and the warnings to print (errors raise ClickException)."""
    truth = read_truth(path)
    if df.attrs.get("kind") == "joint":
        return _joint(df, truth, window, since, until)
    numeric = str(df.attrs.get("kind", "")).startswith("numeric")
    if numeric:
        return _numeric(df, truth, window=window, since=since, until=until, by=by)
    if truth.shape == "statistics":
        raise click.ClickException(f"{path}: a numeric metric's truth file (statistic,value); metric "
                                   f"{df.attrs.get('metric')!r} counts values: give its value,count file")
    return _counts(df, truth, string_metric, window, since, until, by, "value", None)


def _selected(truth: TruthFile, window: str | None, since: str | None, until: str | None) -> dict[str, float]:
    """One population: the file's, or the per-window file's rows of the estimate's windows, summed."""
    if truth.shape != "windows":
        return truth.counts[None]
    chosen = [w for w in truth.counts if (w == window if window else _in_range(w, since, until))]
    if not chosen:
        have = sorted(truth.counts)
        want = f"window {window}" if window else \
            f"{since or '...'} to {until or '...'}"
        raise click.ClickException(f"{truth.path}: the truth file has windows {have[0]}..{have[-1]}, "
                                   f"none in {want}")
    out: dict[str, float] = defaultdict(float)
    for w in chosen:
        for v, c in truth.counts[w].items():
            out[v] += c
    return dict(out)


def _counts(df: Any, truth: TruthFile, string_metric: bool, window: str | None, since: str | None,
            until: str | None, by: str | None, key: str, rows_mask: Any) -> tuple[Any, list[str]]:
    """A truth column of counts: per value, or per (window, value) with ``by``."""
    import numpy as np

    warnings: list[str] = []
    out = df.copy()
    rows = out if rows_mask is None else out[rows_mask]
    metric = df.attrs.get("metric")
    estimated = {str(v) for v in rows[key]}
    if by:
        if truth.shape != "windows":
            raise click.ClickException(f"{truth.path}: --by window needs a per-window truth file "
                                       "(window,value,count, as ldpt simulate --days --truth writes it)")
        populations = {w: truth.counts[w] for w in dict.fromkeys(rows["window"]) if w in truth.counts}
        missing_windows = [w for w in dict.fromkeys(rows["window"]) if w not in truth.counts]
        if not populations:
            raise click.ClickException(f"{truth.path}: none of the series' windows is in the truth file")
        if missing_windows:
            warnings.append(f"{truth.path}: no truth for {_plural(len(missing_windows), 'window')} "
                            f"({_names(missing_windows)}): their truth is left empty")
        values = [(w, str(v)) for w, v in zip(rows["window"], rows[key])]
        column = [populations[w].get(v, 0.0) if w in populations else np.nan for w, v in values]
        merged: dict[str, float] = defaultdict(float)
        for pop in populations.values():
            for v, c in pop.items():
                merged[v] += c
        totals = {w: sum(p.values()) for w, p in populations.items()}
        ns = dict(zip(rows["window"], rows["n"]))
        off = [w for w, t in totals.items() if int(ns.get(w, 0)) != round(t)]
        if off:
            w = off[0]
            warnings.append(f"{truth.path}: the truth counts {round(totals[w]):,} reports in {w} but the "
                            f"store holds {int(ns[w]):,} ({_plural(len(off), 'window')} differ); is it "
                            "the truth of this data?")
        population = merged
    else:
        population = _selected(truth, window, since, until)
        column = [population.get(str(v), 0.0) for v in rows[key]]
        total, n = sum(population.values()), df.attrs.get("n_reports")
        if n is not None and round(total) != int(n):
            warnings.append(f"{truth.path}: the truth counts {round(total):,} reports but the estimate "
                            f"holds {int(n):,}; is it the truth of this data (ldpt simulate --db adds to "
                            "what the store already holds)?")
    positive = [v for v, c in population.items() if c > 0]
    outside = [v for v in positive if v not in estimated]
    if string_metric:
        if positive and not any(v in population for v in estimated):
            warnings.append(f"{truth.path}: none of the estimated strings is in the truth file (it "
                            f"holds {_names(positive)}); is it the truth of metric {metric!r}?")
    elif outside and len(outside) == len(positive):
        raise click.ClickException(f"{truth.path}: none of its values is a value of metric {metric!r} "
                                   f"(it holds {_names(outside)}); is it the truth of another metric?")
    elif outside:
        lost = sum(population[v] for v in outside)
        warnings.append(f"{truth.path}: {_plural(len(outside), 'value')} of the truth file "
                        f"({_names(outside)}, {round(lost):,} reports) are not values of metric "
                        f"{metric!r}")
    if rows_mask is None:
        out["truth"] = column
    else:
        out["truth"] = np.nan
        out.loc[rows_mask, "truth"] = column
    out.attrs = dict(df.attrs)
    return out, warnings


def _numeric(df: Any, truth: TruthFile, *, window: str | None, since: str | None, until: str | None,
             by: str | None) -> tuple[Any, list[str]]:
    """A numeric metric: statistics by name (and bucket counts by label for histograms)."""
    import numpy as np

    metric = df.attrs.get("metric")
    if truth.shape == "windows":  # ldpt simulate --days of a histogram metric: its bucket counts
        if df.attrs.get("kind") != "numeric-histogram":
            raise click.ClickException(f"{truth.path}: a per-window count file; metric {metric!r} is a "
                                       "numeric mean metric (its truth file is statistic,value)")
        return _counts(df, truth, False, window, since, until, by, "value", df["statistic"] == "count")
    if truth.shape != "statistics":
        raise click.ClickException(f"{truth.path}: metric {metric!r} is numeric: its truth file starts "
                                   "with the header statistic,value (as ldpt simulate --truth writes it)")
    if by:
        raise click.ClickException(f"{truth.path}: one population's statistics; --by window needs one "
                                   "truth per window")
    stats = truth.statistics
    out = df.copy()
    key = out["statistic"].where(out["statistic"] != "count", out.get("value", out["statistic"]))
    known = {str(k) for k in key}
    if not known & set(stats):
        raise click.ClickException(f"{truth.path}: none of its statistics ({_names(list(stats))}) is a "
                                   f"row of metric {metric!r}; is it the truth of another metric?")
    _same_numeric_metric(df, truth, metric)
    warnings = []
    n = df.attrs.get("n_reports")
    if "n" in stats and n is not None and round(stats["n"]) != int(n):
        warnings.append(f"{truth.path}: the truth counts {round(stats['n']):,} reports but the estimate "
                        f"holds {int(n):,}; is it the truth of this data (ldpt simulate --db adds to "
                        "what the store already holds)?")
    out["truth"] = [stats.get(str(k), np.nan) for k in key]
    out.attrs = dict(df.attrs)
    return out, warnings


#: Rows only a histogram metric's truth file has besides its buckets.
QUANTILES = ("p10", "p25", "p50", "p75", "p90", "p99")


def _same_numeric_metric(df: Any, truth: TruthFile, metric: Any) -> None:
    """Refuse a numeric truth file written for another metric: a histogram's for a mean metric
    (bucket and quantile rows), a mean metric's for a histogram (no buckets), other buckets, or
    a mean outside the metric's range — each would print a confident wrong truth column."""
    stats, path = truth.statistics, truth.path
    own = f"ldpt simulate --metric {metric} --truth FILE writes this metric's"
    buckets = [s for s in stats if s.startswith("[")]
    if df.attrs.get("kind") == "numeric-mean":
        extra = buckets + [q for q in QUANTILES if q in stats]
        if extra:
            raise click.ClickException(f"{path}: a histogram metric's truth file (it has rows {_names(extra)}); "
                                       f"metric {metric!r} is a mean metric ({own})")
    else:
        mine = [str(v) for st, v in zip(df["statistic"], df["value"]) if st == "count"]
        if not buckets:
            raise click.ClickException(f"{path}: a mean metric's truth file (no bucket counts); metric "
                                       f"{metric!r} is a histogram metric ({own})")
        if set(buckets) != set(mine):
            raise click.ClickException(f"{path}: its buckets ({_names(buckets)}) are not those of metric "
                                       f"{metric!r} ({_names(mine)}); is it the truth of another metric? ({own})")
    bounds = df.attrs.get("range")
    mean = stats.get("mean")
    if bounds and mean is not None:
        lo, hi = float(bounds[0]), float(bounds[1])
        slack = 1e-9 * max(1.0, hi - lo)
        if not lo - slack <= mean <= hi + slack:
            raise click.ClickException(f"{path}: its mean, {mean:g}, lies outside metric {metric!r}'s range "
                                       f"[{lo:g}, {hi:g}] (values are clipped to it); is it the truth of "
                                       f"another metric? ({own})")


def _joint(df: Any, truth: TruthFile, window: str | None, since: str | None,
           until: str | None) -> tuple[Any, list[str]]:
    """A joint metric: the true cell counts (value,count) give every row's truth (its cells,
    marginals, shares and means; estimators.joint.joint_truth)."""
    from estimators.joint import joint_truth

    if truth.shape == "statistics":
        raise click.ClickException(f"{truth.path}: a numeric metric's truth file; a joint metric's is "
                                   "value,count per cell (as ldpt simulate --truth writes it)")
    cells = _selected(truth, window, since, until)
    counts_rows = df["statistic"] == "count"
    out, warnings = _counts(df, truth, False, window, since, until, None, "value", counts_rows)
    out["truth"] = joint_truth(df.attrs["joint_parts"], cells, list(df["statistic"]), list(df["value"]))
    out.attrs = dict(df.attrs)
    return out, warnings
