"""`ldpt estimate`: load a metric's sketch from the store and print debiased estimates.

Nothing numeric is imported at module level (the registry, the stores and the estimators load
inside the command), so `ldpt estimate --help` answers as fast as `ldpt --help` (bench/cli.py).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .common import (
    FiniteFloatRange,
    Working,
    emit,
    load_metric,
    output_options,
    read_lines,
    startup_imports,
    validate_url,
)
from .dates import validate_date, validate_day

if TYPE_CHECKING:
    from client_sdk.registry import MetricSpec
    from collector.storage.base import WindowInfo
    from sketches.base import Sketch

T = TypeVar("T")

#: The query layer's page rule (collector/estimates.py DEFAULT_PAGE and LARGE_DOMAIN: a table
#: shows at most TABLE_MAX_ROWS rows, any format of more than LARGE_DOMAIN values its TABLE_MAX_ROWS
#: largest unless --all), named here for --help only, which loads no numpy (tests/test_cli.py
#: checks they agree).
TABLE_MAX_ROWS = 1000
LARGE_DOMAIN = 10_000
#: A bar chart of more values is unreadable; --top N chooses.
PLOT_MAX_VALUES = 50
#: Lines of a series plot unless --top says otherwise.
PLOT_MAX_SERIES = 5


def store_options(func):  # noqa: ANN001, ANN201 - a click decorator
    """--metrics, --metric, --db, --postgres (or LDPT_POSTGRES_DSN), --url, --token-file."""
    for option in reversed([
        click.option("--metrics", "metrics_file", type=click.Path(dir_okay=False), default=None,
                     help="Metric registry (TOML); required with --db/--postgres, optional with --url "
                          "(then the collector's fingerprint is checked against it)."),
        click.option("--metric", required=True, help="Metric name in the registry."),
        click.option("--db", type=click.Path(dir_okay=False), default=None,
                     help="SQLite store to read [default: LDPT_POSTGRES_DSN's store if that is set, else "
                          "LDPT_DB, else ./ldpt.sqlite: the store ldpt serve writes by default]."),
        click.option("--postgres", metavar="DSN", default=None,
                     help="Instead of --db: read a shared PostgreSQL store (prefer the environment variable "
                          "LDPT_POSTGRES_DSN, used when no --db, --postgres or --url is given: a DSN on "
                          "the command line shows in ps)."),
        click.option("--url", default=None, metavar="URL", callback=validate_url,
                     help="Instead of --db: query a running collector (needs --token-file)."),
        click.option("--token-file", type=click.Path(dir_okay=False, exists=True), default=None,
                     help="File holding the collector's query bearer token (with --url)."),
        click.option("--cacert", type=click.Path(dir_okay=False, exists=True), default=None,
                     help="With an https:// --url: trust this CA certificate (PEM), for a collector "
                          "with a private CA or a self-signed certificate (SSL_CERT_FILE works too)."),
    ]):
        func = option(func)
    return func


@click.command()
@store_options
@click.option("--window", callback=validate_day, default=None,
              help="One window (YYYY-MM-DD) [default: every stored window of --since..--until, or of "
                   "the store, summed; the header and JSON meta.window_range say which].")
@click.option("--since", callback=validate_date, default=None, help="First day, inclusive (YYYY-MM-DD).")
@click.option("--until", callback=validate_date, default=None, help="Last day, inclusive (YYYY-MM-DD).")
@click.option("--by", default=None, metavar="window|DIMENSION[,DIMENSION]",
              help="window: one estimate per window of --since..--until (days, or hours on an hourly "
                   "store): long-format rows with the window's n; empty windows have n = 0. A public "
                   "dimension of the metric (e.g. os, or two: os,channel): one estimate per segment; "
                   "segments under the registry's min_reports are suppressed (only counted).")
@click.option("--confidence", type=FiniteFloatRange(0, 1, min_open=True, max_open=True),
              default=0.95, show_default=True, help="Confidence level of the intervals.")
@click.option("--simultaneous", is_flag=True, help="Bonferroni intervals that hold for all values at once.")
@click.option("--consistent", is_flag=True,
              help="Norm-Sub post-processing (non-negative, sums to 1; biased, marked as such).")
@click.option("--candidates", type=click.Path(dir_okay=False, exists=True), default=None,
              help="String metrics: file of candidate strings, one per line.")
@click.option("--truth", type=click.Path(dir_okay=False, exists=True), default=None,
              help="CSV value,count of the true population, or statistic,value for numeric "
                   "metrics (ldpt simulate --truth); shown as a truth column and in --plot.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Save a PNG: the --top values (largest first) with intervals, or with --by "
                   "window the series of the --top values with interval bands and n per window.")
@click.option("--log-scale", is_flag=True, help="--plot with a logarithmic count axis.")
@click.option("--top", type=click.IntRange(min=1), default=None,
              help="Only the N values with the largest estimates, largest first (tables show at "
                   f"most {TABLE_MAX_ROWS:,} rows unless --top says otherwise; plots {PLOT_MAX_VALUES}); "
                   "for a discover metric, how many strings to discover (default 20).")
@click.option("--all", "all_rows", is_flag=True,
              help=f"Every value's row, even of a domain above {LARGE_DOMAIN:,} values (by default "
                   f"those print their {TABLE_MAX_ROWS:,} largest estimates, as tables do).")
@click.option("--raw-csv", is_flag=True,
              help="--format csv: write strings exactly, control characters and all, even those a "
                   "spreadsheet would run as a formula (by default control characters are written "
                   "\\xNN and a leading = + - @ gets a ' before it).")
@click.option("--silent", is_flag=True, help="No progress on standard error.")
@output_options
def estimate(metrics_file: str | None, metric: str, db: str | None, postgres: str | None,
             url: str | None, token_file: str | None, cacert: str | None, window: str | None,
             since: str | None, until: str | None, by: str | None, confidence: float,
             simultaneous: bool, consistent: bool, candidates: str | None, truth: str | None,
             plot_path: str | None, log_scale: bool, top: int | None, all_rows: bool, raw_csv: bool,
             silent: bool, fmt: str, output: str | None) -> None:
    """Estimate METRIC's frequencies with confidence intervals."""
    with startup_imports():
        from collector.estimates import (
            DEFAULT_PAGE,
            EstimateQuery,
            is_large,
            largest,
            run_estimate,
            top_series,
        )

        from .output import format_frame
        from .store_rules import StoreRules

    if plot_path:  # before any work: a missing extra must not cost a long estimate first
        from .plot import require_matplotlib

        require_matplotlib()
    source, where = check_source(db, postgres, url)
    if window and (since or until):
        raise click.UsageError("use either --window or --since/--until, not both")
    if by == "window" and window:
        raise click.UsageError("--by window draws a series over --since/--until; leave --window out")
    if by not in (None, "window") and plot_path:
        raise click.UsageError("--plot draws one estimate or a series; leave it out with --by DIMENSION "
                               "(the dashboard draws a breakdown chart per dimension)")
    if by == "window" and consistent:
        raise click.UsageError("--consistent applies to one estimate; leave it out with --by window")
    if cacert and not url:
        raise click.UsageError("--cacert applies to an https:// --url")
    with Working(f"estimating {metric}", silent) as progress:
        if source == "url":
            from client_sdk.protocols.factory import reports_strings

            df = remote_estimate(url, token_file, metrics_file, metric, window, since, until, confidence,
                                 simultaneous, consistent, candidates, by, top, cacert, all_rows=all_rows)
            string_metric = reports_strings(str(df.attrs.get("protocol")))
        else:
            registry, spec = load_metric(require_registry(metrics_file), metric)
            string_metric = spec.kind.value == "string"
            if spec.parts is not None and by is None and (simultaneous or consistent):
                raise click.UsageError(f"metric {spec.name!r} is a joint metric: --simultaneous and --consistent "
                                       "apply to frequency estimates; its breakdown has neither")
            breakdown = by not in (None, "window")
            query = EstimateQuery(windows=[window] if window else None, since=since, until=until, by=by,
                                  confidence=confidence, simultaneous=simultaneous, consistent=consistent,
                                  candidates=None if breakdown else read_candidates(candidates, spec),
                                  top=None if breakdown else top,
                                  rows=default_page(spec, top, fmt, all_rows, by, truth, plot_path),
                                  columns=by is None and not truth and not plot_path,
                                  digits="table" if fmt == "table" else "exact")
            with StoreReader(source, where) as reader:
                df = reader.run(run_estimate(spec, reader.reads, query,
                                             StoreRules(reader.label, registry.segment_min_reports(spec)),
                                             progress.step))
                privacy = reader.privacy(spec, query.windows, since, until)
                if privacy is not None:
                    df.attrs["privacy"] = privacy
    numeric = str(df.attrs.get("kind", "")).startswith("numeric")
    if top is not None and numeric:
        raise click.UsageError(f"--top ranks the values of a frequency estimate; metric {metric!r} is "
                               "numeric (its rows are buckets and statistics): leave --top out")
    if truth:
        from .truth import attach_truth

        if by not in (None, "window"):
            raise click.UsageError("--truth compares one estimate (or a series) with the truth; "
                                   "leave it out with --by DIMENSION")
        df, warnings = attach_truth(df, truth, string_metric=string_metric, window=window, since=since,
                                    until=until, by=by)
        for line in warnings:
            click.echo(f"warning: {line}", err=True)
    full = df
    if by not in (None, "window"):
        _breakdown_note(df)
        by = None  # a breakdown's rows are ranked and plotted like one estimate's
    total = int(df.attrs.get("rows_total", len(df)))
    if by is None and top is None and not numeric and not all_rows and is_large(total, fmt == "table"):
        top = DEFAULT_PAGE
        click.echo(f"showing the {DEFAULT_PAGE:,} largest of {total:,} estimates "
                   "(--top N to choose, --all for every row)", err=True)
    if top is not None:
        df = top_series(df, top) if by else largest(df, top)
    emit(format_frame(df, fmt, raw_csv=raw_csv), output)
    # RAPPOR's decoder summary, or discover's forged-group warning (estimators/discovery.py)
    warning = (full.attrs.get("summary") or {}).get("warning") or full.attrs.get("warning")
    if warning:
        click.echo(f"warning: {warning}", err=True)
    if plot_path:
        from .plot import plot_estimates, plot_series

        if by:
            plot_series(full, plot_path, top or PLOT_MAX_SERIES, log_scale)
        else:
            plot_estimates(full, plot_path, top=top or PLOT_MAX_VALUES, log_scale=log_scale)


def _breakdown_note(df) -> None:  # noqa: ANN001 - a pandas DataFrame
    """Say on standard error how many segments were suppressed (never which)."""
    suppressed = int(df.attrs.get("suppressed", 0))
    if suppressed:
        click.echo(f"{suppressed:,} segment{'' if suppressed == 1 else 's'} suppressed (fewer than "
                   f"{int(df.attrs.get('min_reports', 0)):,} reports each)", err=True)


def check_source(db: str | None, postgres: str | None, url: str | None) -> tuple[str, str]:
    """Which store to read, as (``db``, path), (``postgres``, DSN) or (``url``, URL).

    At most one of --db, --postgres, --url; an explicit one wins over the environment (as in
    `ldpt prune`). Without one: LDPT_POSTGRES_DSN, else LDPT_DB, else ./ldpt.sqlite — the store
    `ldpt serve` uses with the same environment (docs/operations.md, "Settings")."""
    import os

    given = [(name, v) for name, v in (("db", db), ("postgres", postgres), ("url", url)) if v]
    if len(given) > 1:
        raise click.UsageError(f"use one of --db, --postgres and --url, not "
                               f"{' and '.join('--' + name for name, _ in given)}")
    if given:
        return given[0]
    if os.environ.get("LDPT_POSTGRES_DSN"):
        return "postgres", os.environ["LDPT_POSTGRES_DSN"]
    from pathlib import Path

    from collector.config import SETTINGS_BY_NAME

    path = os.environ.get("LDPT_DB") or str(SETTINGS_BY_NAME["db"].default)
    if not Path(path).exists():
        raise click.UsageError(f"give --db PATH (a SQLite store), --postgres DSN (or LDPT_POSTGRES_DSN) or "
                               f"--url URL (a collector); the default store, {path} (where `ldpt serve` "
                               "writes unless told otherwise), does not exist here")
    click.echo(f"reading {path} (the default store, as ldpt serve's; --db, --postgres or --url to choose)",
               err=True)
    return "db", path


def require_registry(metrics_file: str | None) -> str:
    if metrics_file is None:
        raise click.UsageError("give --metrics FILE (the metric registry)")
    return metrics_file


def default_page(spec: MetricSpec, top: int | None, fmt: str, all_rows: bool, by: str | None,
                 truth: str | None, plot_path: str | None) -> tuple[int, int] | None:
    """The rows a frequency estimate needs to build (offset, limit), largest first, or None for
    all: the query layer's page rule (collector/estimates.py ``page_rows``) for ``--top N``,
    ``--all`` and the format; a page is built without a frame of every value
    (estimators.frequency.estimate_frame). Series, breakdowns, plots and --truth keep the full
    frame, as do metrics without a fixed domain (discover, RAPPOR) and numeric ones."""
    from client_sdk.registry import Kind
    from collector.estimates import page_rows

    if by is not None or truth or plot_path or not spec.domain_size or spec.kind is Kind.NUMERIC:
        return None
    return page_rows(spec, top=top, full=all_rows and top is None, table=fmt == "table")


def remote_estimate(url: str, token_file: str | None, metrics_file: str | None, metric: str,
                    window: str | None, since: str | None, until: str | None, confidence: float,
                    simultaneous: bool, consistent: bool, candidates: str | None, by: str | None = None,
                    top: int | None = None, cacert: str | None = None, all_rows: bool = False):
    """Ask a collector's query API; the DataFrame it returns, as the local path would build it
    (``top``: the API's top, a page of that many rows; ``all_rows``: full=true)."""
    from sketches import server_half

    from .remote import fetch_estimates, frame_from_json, read_token, ssl_context

    if token_file is None:
        raise click.UsageError("--url needs --token-file FILE (the collector's query token)")
    spec = load_metric(metrics_file, metric)[1] if metrics_file else None
    cands = read_candidates(candidates, spec) if spec is not None else _read_lines(candidates)
    # a discover metric's top is how many strings to find; for the others a page (collector/estimates.py)
    discovers = spec is not None and server_half(spec).discovers_strings
    params = {"window": window, "since": since, "until": until, "confidence": repr(confidence),
              "simultaneous": "true" if simultaneous else None,
              "consistent": "true" if consistent else None, "by": by, "format": "json",
              "top": None if top is None or not discovers else str(top),
              "limit": None if top is None or discovers or by else str(top),
              "full": "true" if all_rows and not top and not by else None}
    df = frame_from_json(fetch_estimates(url, metric, read_token(token_file), params, cands,
                                         ssl_context(cacert)))
    check_served_fingerprint(df, url, metric, metrics_file, spec)
    return df


def check_served_fingerprint(df, url: str, metric: str, metrics_file: str | None,  # noqa: ANN001
                             spec: MetricSpec | None) -> None:
    """The collector's metric must be the one the given registry describes (what to do if not)."""
    served = df.attrs.get("fingerprint")
    if spec is not None and served and served != spec.fingerprint:
        raise click.ClickException(
            f"{url}: the collector's metric {metric!r} has fingerprint {served[:12]}, but "
            f"{metrics_file} gives {spec.fingerprint[:12]}: the registries differ. Leave --metrics "
            "out to use the collector's own registry, or give the file the collector runs with "
            "(GET /v1/registry lists its metrics and fingerprints; `ldpt metrics check FILE` "
            "prints a file's)")


def _read_lines(path: str | None) -> list[str] | None:
    if path is None:
        return None
    lines = read_lines(path, "candidates file")
    return list(dict.fromkeys(s for s in (line.strip() for line in lines) if s)) or None


class StoreReader:
    """Read-only access to a SQLite file (``--db``) or a PostgreSQL store (``--postgres``).

    The analysts' commands read the same sums the collector's query API reads, through the same
    query layer (``reads``, run by ``run``: collector/estimates.py); errors name the store and
    say what to do (``StoreRules``).
    """

    def __init__(self, kind: str, where: str) -> None:
        self.kind, self.where = kind, where
        self._loop = None   # SQLite's reads never suspend: no event loop (collector/storage/sync_reads.py)
        if kind == "postgres":
            import asyncio

            from collector.storage.postgres import PostgresStore

            self.label = "PostgreSQL store"
            self._loop = asyncio.new_event_loop()
            try:
                self._store = self.reads = self._loop.run_until_complete(
                    PostgresStore.open(where, create=False, min_size=1, max_size=2))
            except BaseException:
                self._loop.close()
                raise
        else:
            from collector.storage.sqlite import open_store
            from collector.storage.sync_reads import SyncReads

            self.label = where
            self._store = open_store(where, create=False)
            self.reads = SyncReads(self._store)

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is None:
            self._store.close()
            return
        try:
            self._loop.run_until_complete(self._store.aclose())
        finally:
            self._loop.close()

    def run(self, query: Coroutine[Any, Any, T]) -> T:
        """Run a query of the layer (or any coroutine over ``reads``) to its end."""
        if self._loop is None:
            from collector.storage.sync_reads import run_to_end

            return run_to_end(query)
        return self._loop.run_until_complete(query)

    def stored_windows(self, spec: MetricSpec) -> list[WindowInfo]:
        """The metric's stored windows under the registry's parameters (errors when there are none)."""
        from .store_rules import registry_windows

        return registry_windows(self.label, spec, self.run(self.reads.awindows(spec.name)))

    def privacy(self, spec: MetricSpec, windows: list[str] | None, since: str | None,
                until: str | None) -> dict | None:
        """``meta.privacy``: the local ε and each window's central claim from the store's records of
        shuffled batches (collector/claims.py), as the query API states it (None: nothing to state)."""
        from collector.estimates import privacy

        return self.run(privacy(spec, self.reads, windows, since, until))

    def load(self, spec: MetricSpec, windows: list[str] | None, since: str | None, until: str | None,
             *, allow_empty: bool = False) -> Sketch:
        """Merged sketch of the metric over the chosen windows (an error when it holds no reports,
        unless ``allow_empty``)."""
        from collector.estimates import Side
        from sketches import server_half

        from .store_rules import StoreRules

        if not allow_empty:
            self.stored_windows(spec)
        sketch = self.run(self.reads.aload(spec.name, spec.fingerprint, server_half(spec).new_sketch(), windows,
                                           since, until))
        if sketch.total_reports == 0 and not allow_empty:
            raise StoreRules(self.label).empty(spec, Side(windows, since, until, ""))
        return sketch


def load_sketch(spec: MetricSpec, db: str, windows: list[str] | None, since: str | None,
                until: str | None) -> Sketch:
    """Merged sketch of the metric over the chosen windows of a SQLite store."""
    with StoreReader("db", db) as reader:
        return reader.load(spec, windows, since, until)


def read_candidates(path: str | None, spec: MetricSpec) -> list[str] | None:
    """Candidate strings, one per line (blank lines ignored); also accepts value,count CSV."""
    if path is None:
        return None
    from client_sdk.registry import Kind
    from estimators.simulation import DistributionError, read_weights_csv

    if spec.kind is not Kind.STRING:
        raise click.UsageError("--candidates is only for string metrics")
    if path.endswith(".csv"):
        try:
            return read_weights_csv(path)[0]
        except DistributionError as exc:
            raise click.ClickException(str(exc)) from None
    lines = read_lines(path, "candidates file")
    out = [line for line in (s.strip() for s in lines) if line]
    if not out:
        raise click.ClickException(f"{path}: no candidate strings")
    return list(dict.fromkeys(out))
