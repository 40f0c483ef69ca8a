"""The one query layer: an ``EstimateQuery`` or ``CompareQuery`` run against a sketch store into
the frame every consumer formats.

The query API and the dashboard (collector/query.py, collector/ui.py) and ``ldpt estimate`` /
``ldpt compare`` reading a store (cli/) all call ``run_estimate`` / ``run_compare``. What is
loaded, how a query is dispatched (a breakdown by public dimensions, a series by window, a
joint metric's breakdown, a memoised range, one estimate), what is refused and how the frame is
labelled (``meta.window_range``, the unit, RAPPOR's range warning) are decided here once. What
differs between the callers is their policy and their wording, held by ``Rules``: the collector
publishes nothing from fewer than ``--min-reports`` reports and answers refusals as problem
documents (``QueryRefused`` carries the problem's slug); the CLI publishes every window and
names its options and its store in its messages. The layer itself knows no HTTP.

The store is anything with the read half of ``AsyncSketchStore`` (``aload``, ``awindows``,
``ashuffle_records``): the collector's stores, or ``collector.storage.sync_reads.SyncReads`` over a
synchronous SQLite store for a one-shot command.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from client_sdk.errors import EstimationError, LdptError
from client_sdk.registry import Kind, MetricSpec
from collector.storage.base import date_filter_ok
from estimators.frequency import estimate_frame
from estimators.memo_range import is_memoised, range_frame, with_rappor_range_warning
from estimators.series import series_frame, window_span, windows_in_range
from sketches import server_half

__all__ = ["DEFAULT_PAGE", "LARGE_DOMAIN", "CompareQuery", "EstimateQuery", "QueryRefused", "Rules", "Side",
           "is_large", "largest", "page_rows", "privacy", "run_compare", "run_estimate", "top_series", "top_values"]

#: Progress callback: told which step runs ("loading theme", "estimating theme from 3,000 reports").
Step = Callable[[str], None]

#: A frequency estimate of more values than this answers its DEFAULT_PAGE largest rows unless every
#: row is asked for (the query API's full=true, `ldpt estimate --all`).
LARGE_DOMAIN = 10_000
#: Rows of a large domain's default page, and the most a terminal table shows unless told.
DEFAULT_PAGE = 1_000


def is_large(values: int, table: bool = False) -> bool:
    """Whether ``values`` rows are answered by the default page: above LARGE_DOMAIN, or above
    DEFAULT_PAGE in a terminal table (the one page rule of the API, the dashboard and the CLI)."""
    return values > LARGE_DOMAIN or (table and values > DEFAULT_PAGE)


def page_rows(spec: MetricSpec, *, top: int | None = None, limit: int | None = None, offset: int | None = None,
              full: bool = False, table: bool = False) -> tuple[int, int] | None:
    """(offset, limit) of the rows a frequency estimate builds, ranked by estimate, or None for
    all (``EstimateQuery.rows``): every row with ``full``; the page asked (limit/offset; ``top``
    for metrics other than discover, whose top is how many strings it discovers); else a large
    domain's DEFAULT_PAGE largest rows (``is_large``; ``table``: a terminal table's). Frames
    other than a frequency estimate ignore it."""
    if full:
        return None
    if limit is not None or offset is not None:
        return (offset or 0, limit or DEFAULT_PAGE)
    if top is not None and not server_half(spec).discovers_strings:
        return (0, top)
    if is_large(spec.domain_size or 0, table):
        return (0, DEFAULT_PAGE)
    return None


# The queries are NamedTuples rather than dataclasses: immutable records alike, but a frozen
# dataclass compiles its methods as its module loads (~0.8 ms each of a fresh `ldpt estimate`, issue 32).
class EstimateQuery(NamedTuple):
    """What an estimate asks: windows (one, or none for all) or a since..until range; ``by``
    window (a series) or one or two public dimensions (a breakdown); the intervals; a string
    metric's candidates; ``top``: how many strings a discover metric discovers; ``rows``:
    (offset, limit) of the rows ranked by estimate, or None for all; ``lazy``: a large
    frequency estimate as a LazyFrame built as it is written (estimators/lazy_frame.py);
    ``columns``: a frequency estimate as Columns, numpy arrays without pandas
    (estimators/columns.py), as `ldpt estimate` prints its table; ``digits``: "table" for
    Columns exact to a table's digits only (estimators/tails.py), else "exact"."""

    windows: Sequence[str] | None = None
    since: str | None = None
    until: str | None = None
    by: str | None = None
    confidence: float = 0.95
    simultaneous: bool = False
    consistent: bool = False
    candidates: Sequence[str] | None = None
    top: int | None = None
    rows: tuple[int, int] | None = None
    lazy: bool = False
    columns: bool = False
    digits: str = "exact"


class Side(NamedTuple):
    """One side of a comparison: one window, or an inclusive range, and how it is named."""

    windows: Sequence[str] | None
    since: str | None
    until: str | None
    label: str


class CompareQuery(NamedTuple):
    """Did the metric change between ``a`` and ``b``: per-value tests (estimators/compare.py)."""

    a: Side
    b: Side
    confidence: float = 0.95
    alpha: float = 0.05
    control: str = "fwer"
    simultaneous: bool = False


class QueryRefused(LdptError):
    """The query cannot be answered as asked; ``type`` is the problem slug the query API
    answers with (invalid-query, no-data, too-few-reports), ``extra`` its extension members."""

    status = 400
    type = "invalid-query"

    def __init__(self, slug: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.type = slug
        self.extra = {k: v for k, v in extra.items() if v is not None}


class Rules:
    """A caller's policy and wording. This base publishes every window (``min_reports`` 0) and
    words refusals as the query API answers them; collector/query.py sets the collector's
    thresholds and runs the work off its event loop, cli/ words errors for its users."""

    #: Fewest reports an estimate (and each window of a series) is published from.
    min_reports: int = 0
    #: Fewest reports a segment of a breakdown is shown with (None: the metric's, else the default).
    segment_min: int | None = None
    #: How the caller's users name the window choice ("window" in the API, "--window" in the CLI).
    window_option: str = "window"

    def __init__(self, min_reports: int = 0, segment_min: int | None = None) -> None:
        self.min_reports, self.segment_min = min_reports, segment_min

    async def stored(self, spec: MetricSpec, store: Any) -> None:
        """Called before anything is loaded: a caller may refuse a store holding nothing of the
        metric under the registry's parameters here, in its own words (the default does not)."""

    async def no_reports(self, spec: MetricSpec, store: Any, side: Side, comparing: bool) -> LdptError:
        """The error for a query whose windows hold no report of the metric (an estimate's says
        when the windows hold reports encoded under other parameters)."""
        hint = "" if comparing else await other_parameters(spec, store, side)
        return QueryRefused("no-data", f"no reports of {spec.name!r} in {side.label}{hint}", metric=spec.name)

    def too_few(self, spec: MetricSpec, side: Side, n: int, comparing: bool) -> LdptError:
        """The error for an estimate from fewer than ``min_reports`` reports."""
        return QueryRefused("too-few-reports", f"{n} reports of {spec.name!r} in {side.label}; this collector "
                            f"publishes estimates only from {self.min_reports} reports"
                            + ("" if comparing else " (widen the window)"), metric=spec.name,
                            reports=n, min_reports=self.min_reports)

    async def compute(self, fn: Callable[[], Any], metric: str) -> Any:
        """Run the CPU-bound part (decoding, the frame); the collector runs it off its event loop."""
        return fn()


async def other_parameters(spec: MetricSpec, store: Any, side: Side) -> str:
    """A hint when the windows asked hold reports encoded under an older registry entry."""
    try:
        stored = await store.awindows(spec.name)
    except LdptError:
        return ""
    other = [w for w in stored if w.fingerprint != spec.fingerprint
             and (side.windows is None or w.window in side.windows)
             and date_filter_ok(w.window, side.since, side.until)]
    if not other:
        return ""
    fps = ", ".join(sorted({w.fingerprint[:12] for w in other}))
    return (f" under the registry's parameters (fingerprint {spec.fingerprint[:12]}); "
            f"{sum(w.reports for w in other)} reports there were encoded under other parameters "
            f"(fingerprint {fps}) and are never mixed in")


def side_of(q: EstimateQuery) -> Side:
    """The windows an estimate sums, as a comparison side, named as the query API names them."""
    label = f"window {q.windows[0]}" if q.windows else \
        f"{q.since or '...'} to {q.until or '...'}" if (q.since or q.until) else "all windows"
    return Side(q.windows, q.since, q.until, label)


def top_values(df: Any, top: int) -> list:
    """The ``top`` values of a series with the largest total estimate over its windows, largest first."""
    totals = df.groupby("value", sort=False)["estimate"].sum(min_count=1).fillna(0.0)
    return list(totals.sort_values(ascending=False, kind="stable").index[:top])


def top_series(df: Any, top: int) -> Any:
    """A series' rows of its ``top`` values (``top_values``), attrs kept."""
    keep = top_values(df, top)
    out = df[df["value"].isin(keep)]
    out.attrs = dict(df.attrs)
    return out


def largest(df: Any, top: int) -> Any:
    """The ``top`` rows of a frame with the largest estimates, largest first (attrs kept); a
    Columns page (ranked already) of at most ``top`` rows stays Columns."""
    from estimators.columns import Columns

    if isinstance(df, Columns):
        if len(df) <= top:
            return df.sorted_descending("estimate")
        df = df.to_frame()
    out = df.nlargest(top, "estimate") if len(df) > top else \
        df.sort_values("estimate", ascending=False, kind="stable")
    out.attrs = dict(df.attrs)
    return out


async def run_estimate(spec: MetricSpec, store: Any, q: EstimateQuery, rules: Rules | None = None,
                       progress: Step | None = None) -> Any:
    """The estimate DataFrame (or LazyFrame) of ``q``: with ``by=window`` the series, with
    ``by=DIMENSION`` the breakdown, for a joint metric its breakdown, for a memoised metric over
    several windows the range estimate (permanent noise bounded: estimators/memo_range.py)."""
    rules = rules or Rules()
    step = progress or (lambda _: None)
    if q.candidates is not None and spec.kind is not Kind.STRING:
        raise QueryRefused("invalid-query", "candidates are only for string metrics", field="candidates")
    if q.by and q.by != "window":
        step(f"estimating {spec.name} by {q.by}")
        return _with_unit(spec, await _breakdown(spec, store, q, rules))
    if q.by:
        return _with_unit(spec, await _series(spec, store, q, rules, step))
    await rules.stored(spec, store)
    step(f"loading {spec.name}")
    side = side_of(q)
    sketch = await _load_checked(spec, store, side, rules, comparing=False)
    if spec.parts is not None:   # a joint metric: its breakdown (estimators/joint.py)
        from estimators.joint import joint_frame

        for flag in ("simultaneous", "consistent"):
            if getattr(q, flag):
                raise QueryRefused("invalid-query", f"{flag} applies to frequency estimates; {spec.name!r} is a "
                                   "joint metric, whose breakdown has no such option", field=flag)
        step(f"estimating {spec.name}'s breakdown from {sketch.total_reports:,} reports")
        run = functools.partial(joint_frame, spec, sketch, confidence=q.confidence)
    elif q.windows is None and is_memoised(spec) and spec.kind is not Kind.STRING:
        # a memoised device repeats its permanent noise every day: the windows' sketches cannot
        # simply be summed and estimated as independent reports (estimators.memo_range)
        sketches = await range_sketches(spec, store, side)
        step(f"estimating {spec.name} over {len(sketches):,} window{'' if len(sketches) == 1 else 's'} "
             "(memoised: range bound)")
        run = functools.partial(range_frame, spec, sketches, confidence=q.confidence,
                                simultaneous=q.simultaneous, consistent=q.consistent)
    else:
        step(f"estimating {spec.name} from {sketch.total_reports:,} reports"
             + (" (discovering strings)" if server_half(spec).discovers_strings and not q.candidates else ""))
        run = functools.partial(estimate_frame, spec, sketch, confidence=q.confidence,
                                simultaneous=q.simultaneous, consistent=q.consistent,
                                candidates=None if q.candidates is None else list(q.candidates), top=q.top,
                                rows_wanted=q.rows, lazy=q.lazy, columns=q.columns,
                                digits=q.digits)
    df = await rules.compute(run, spec.name)
    labels = list(q.windows) if q.windows else await range_labels(spec, store, side)
    if q.windows is None and server_half(spec).memo_without_range_bound:
        df = with_rappor_range_warning(df, len(labels))
    return _with_unit(spec, window_span(df, labels))


async def run_compare(spec: MetricSpec, store: Any, q: CompareQuery, rules: Rules | None = None) -> Any:
    """The comparison DataFrame of ``q`` (both sides checked like estimates)."""
    from estimators.compare import compare_frame  # scipy.stats: only when comparing

    rules = rules or Rules()
    await rules.stored(spec, store)
    sketches = [await _load_checked(spec, store, side, rules, comparing=True) for side in (q.a, q.b)]
    ranges = [await range_sketches(spec, store, side) if side.windows is None and is_memoised(spec) else None
              for side in (q.a, q.b)]
    run = functools.partial(compare_frame, spec, sketches[0], sketches[1], label_a=q.a.label,
                            label_b=q.b.label, confidence=q.confidence, simultaneous=q.simultaneous,
                            alpha=q.alpha, control=q.control, windows_a=ranges[0], windows_b=ranges[1])
    return _with_unit(spec, await rules.compute(run, spec.name))


async def privacy(spec: MetricSpec, store: Any, windows: Sequence[str] | None, since: str | None,
                  until: str | None) -> dict[str, Any] | None:
    """``meta.privacy`` of an estimate over these windows (collector/claims.py): the local ε and
    each window's central claim from what the store recorded of shuffled batches, where there is
    a central claim to state or refuse — the metric requires shuffling, or some report of the
    range came through a shuffler. Else None, and the claim policy is not imported: an estimate
    of reports that never met a shuffler keeps its meta as it was (its ``epsilon`` is the local one)."""
    records = await store.ashuffle_records(spec.name, spec.fingerprint, windows, since, until)
    if not records and not getattr(spec, "shuffle_required", False):
        return None
    from .claims import privacy_meta, windows_in_query

    stored = windows_in_query(await store.awindows(spec.name), spec.fingerprint, windows, since, until)
    return privacy_meta(spec, stored, records)


async def range_labels(spec: MetricSpec, store: Any, side: Side) -> list[str]:
    """The stored windows of a range under the registry's parameters, oldest first."""
    return sorted({w.window for w in await store.awindows(spec.name)
                   if w.fingerprint == spec.fingerprint and date_filter_ok(w.window, side.since, side.until)})


async def range_sketches(spec: MetricSpec, store: Any, side: Side) -> list[tuple[str, Any]]:
    """(window, sketch) of every stored window of a range under the registry's parameters."""
    return [(w, await store.aload(spec.name, spec.fingerprint, server_half(spec).new_sketch(), [w]))
            for w in await range_labels(spec, store, side)]


async def _load_checked(spec: MetricSpec, store: Any, side: Side, rules: Rules, comparing: bool) -> Any:
    """The merged sketch of a side's windows, refused when it holds no report or too few."""
    sketch = await store.aload(spec.name, spec.fingerprint, server_half(spec).new_sketch(), side.windows,
                               side.since, side.until)
    n = sketch.total_reports
    if n == 0:
        raise await rules.no_reports(spec, store, side, comparing)
    if n < rules.min_reports:
        raise rules.too_few(spec, side, n, comparing)
    return sketch


def _with_unit(spec: MetricSpec, df: Any) -> Any:
    """A numeric metric's frame says its values' unit (registry ``unit``) in ``meta.unit``."""
    if getattr(spec, "unit", ""):
        df.attrs["unit"] = spec.unit
    return df


async def _breakdown(spec: MetricSpec, store: Any, q: EstimateQuery, rules: Rules) -> Any:
    """``by=os`` (or ``by=os,channel``): estimates per segment, small ones suppressed
    (estimators/breakdown.py)."""
    # here: a metric without dimensions never loads client_sdk.dimensions
    from client_sdk.dimensions import DEFAULT_MIN_REPORTS
    from estimators.breakdown import breakdown_frame, group_sketches, parse_by, segment_keys

    try:
        names = parse_by(spec, q.by)
    except EstimationError as exc:
        raise QueryRefused("invalid-query", str(exc), field="by", metric=spec.name) from None
    await rules.stored(spec, store)
    if q.windows is None and is_memoised(spec):
        raise QueryRefused("invalid-query", f"metric {spec.name!r} is memoised: its windows' sketches repeat "
                           "each device's noise and cannot be summed per segment; give "
                           f"{rules.window_option}", field="by")
    if q.candidates is not None or q.top is not None:
        raise QueryRefused("invalid-query", "candidates and top apply to one estimate, not a breakdown",
                           field="by")
    segments = [(k, await store.aload(k, spec.fingerprint, server_half(spec).new_sketch(), q.windows,
                                      q.since, q.until))
                for k in segment_keys(spec, await store.awindows())]
    total = await store.aload(spec.name, spec.fingerprint, server_half(spec).new_sketch(), q.windows,
                              q.since, q.until)
    segment_min = rules.segment_min if rules.segment_min is not None else \
        max(rules.min_reports, spec.min_reports or DEFAULT_MIN_REPORTS)
    run = functools.partial(breakdown_frame, spec, group_sketches(spec, segments, names), names, segment_min,
                            confidence=q.confidence, simultaneous=q.simultaneous, consistent=q.consistent,
                            total_reports=int(total.total_reports))
    return await rules.compute(run, spec.name)


async def _series(spec: MetricSpec, store: Any, q: EstimateQuery, rules: Rules, step: Step) -> Any:
    """``by=window``: every window of the range, each estimated alone (estimators.series).

    A window with fewer than ``min_reports`` reports (but some) is refused like a single
    estimate would be: publishing its estimate would undercut the threshold."""
    await rules.stored(spec, store)
    stored = [w.window for w in await store.awindows(spec.name) if w.fingerprint == spec.fingerprint]
    if not stored:
        raise QueryRefused("no-data", f"no reports of {spec.name!r} under the registry's parameters",
                           metric=spec.name)
    try:
        grid = windows_in_range(stored, q.since, q.until)
    except EstimationError as exc:
        raise QueryRefused("invalid-query", str(exc), field="since") from None
    sketches = []
    for i, w in enumerate(grid, start=1):
        step(f"loading {spec.name}: window {i:,} of {len(grid):,}")
        sketches.append((w, await store.aload(spec.name, spec.fingerprint, server_half(spec).new_sketch(), [w])))
    small = [(w, s.total_reports) for w, s in sketches if 0 < s.total_reports < rules.min_reports]
    if small:
        raise QueryRefused("too-few-reports", f"{small[0][1]} reports of {spec.name!r} in window {small[0][0]}; "
                           f"this collector publishes estimates only from {rules.min_reports} reports per "
                           "window (a series shows each window)", metric=spec.name, reports=small[0][1],
                           min_reports=rules.min_reports)
    step(f"estimating {spec.name} in {len(grid):,} window{'' if len(grid) == 1 else 's'}")
    run = functools.partial(series_frame, spec, sketches, confidence=q.confidence, simultaneous=q.simultaneous,
                            candidates=None if q.candidates is None else list(q.candidates))
    return await rules.compute(run, spec.name)
