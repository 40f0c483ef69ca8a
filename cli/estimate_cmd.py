"""`ldpt estimate`: load a metric's sketch from the store and print debiased estimates."""

from __future__ import annotations

import click

from client_sdk.errors import EstimationError, StoreError
from client_sdk.registry import Kind, MetricSpec
from collector.storage.sqlite import open_store
from estimators.simulation import DistributionError, read_weights_csv

from .common import emit, load_metric, output_options, read_lines, validate_url
from .simulate_cmd import validate_date, validate_day

#: A terminal table of a million rows helps nobody: larger results show the largest estimates.
TABLE_MAX_ROWS = 1000


@click.command()
@click.option("--metrics", "metrics_file", type=click.Path(dir_okay=False), default=None,
              help="Metric registry (TOML); required with --db, optional with --url (then the "
                   "collector's fingerprint is checked against it).")
@click.option("--metric", required=True, help="Metric name in the registry.")
@click.option("--db", type=click.Path(dir_okay=False), default=None, help="SQLite store to read.")
@click.option("--url", default=None, metavar="URL", callback=validate_url,
              help="Instead of --db: query a running collector (needs --token-file).")
@click.option("--token-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="File holding the collector's query bearer token (with --url).")
@click.option("--window", callback=validate_day, default=None, help="One window (YYYY-MM-DD).")
@click.option("--since", callback=validate_date, default=None, help="First day, inclusive (YYYY-MM-DD).")
@click.option("--until", callback=validate_date, default=None, help="Last day, inclusive (YYYY-MM-DD).")
@click.option("--confidence", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.95, show_default=True, help="Confidence level of the intervals.")
@click.option("--simultaneous", is_flag=True, help="Bonferroni intervals that hold for all values at once.")
@click.option("--consistent", is_flag=True,
              help="Norm-Sub post-processing (non-negative, sums to 1; biased, marked as such).")
@click.option("--candidates", type=click.Path(dir_okay=False, exists=True), default=None,
              help="String metrics: file of candidate strings, one per line.")
@click.option("--truth", type=click.Path(dir_okay=False, exists=True), default=None,
              help="CSV value,count of the true population, or statistic,value for numeric "
                   "metrics (ldpt simulate --truth); shown in --plot.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Save a PNG of the estimates with their intervals.")
@click.option("--top", type=click.IntRange(min=1), default=None,
              help="Only the N values with the largest estimates, largest first (tables show at "
                   f"most {TABLE_MAX_ROWS:,} rows unless --top says otherwise); for a discover "
                   "metric, how many strings to discover (default 20).")
@output_options
def estimate(metrics_file: str | None, metric: str, db: str | None, url: str | None,
             token_file: str | None, window: str | None, since: str | None,
             until: str | None, confidence: float, simultaneous: bool, consistent: bool,
             candidates: str | None, truth: str | None, plot_path: str | None, top: int | None,
             fmt: str, output: str | None) -> None:
    """Estimate METRIC's frequencies with confidence intervals."""
    from estimators.frequency import estimate_frame  # scipy and pandas: only when estimating

    from .output import format_frame

    if db is None and url is None:
        raise click.UsageError("give --db PATH (a SQLite store) or --url URL (a collector)")
    if db is not None and url is not None:
        raise click.UsageError("use either --db or --url, not both")
    if window and (since or until):
        raise click.UsageError("use either --window or --since/--until, not both")
    if url is not None:
        df = remote_estimate(url, token_file, metrics_file, metric, window, since, until, confidence,
                             simultaneous, consistent, candidates, top)
    else:
        if metrics_file is None:
            raise click.UsageError("give --metrics FILE (the metric registry)")
        _, spec = load_metric(metrics_file, metric)
        sketch = load_sketch(spec, db, [window] if window else None, since, until)
        df = estimate_frame(spec, sketch, confidence=confidence, simultaneous=simultaneous,
                            consistent=consistent, candidates=read_candidates(candidates, spec),
                            top=top)  # a discover metric reports its `top` discovered strings
    full = df
    numeric = str(df.attrs.get("kind", "")).startswith("numeric")
    if top is not None and numeric:
        raise click.UsageError(f"--top ranks the values of a frequency estimate; metric {metric!r} is "
                               "numeric (its rows are buckets and statistics): leave --top out")
    if top is None and fmt == "table" and len(df) > TABLE_MAX_ROWS and not numeric:
        top = TABLE_MAX_ROWS
        click.echo(f"showing the {TABLE_MAX_ROWS:,} largest of {len(df):,} estimates "
                   "(--top N to choose, --format csv or json for all)", err=True)
    if top is not None:
        df = largest(df, top)
    emit(format_frame(df, fmt), output)
    df = full
    warning = (df.attrs.get("summary") or {}).get("warning")
    if warning:
        click.echo(f"warning: {warning}", err=True)
    if plot_path:
        from .plot import plot_estimates

        plot_estimates(df, plot_path, truth)


def largest(df, top: int):
    """The ``top`` rows with the largest estimates, largest first (attrs kept)."""
    out = df.nlargest(top, "estimate") if len(df) > top else \
        df.sort_values("estimate", ascending=False, kind="stable")
    out.attrs = dict(df.attrs)
    return out


def remote_estimate(url: str, token_file: str | None, metrics_file: str | None, metric: str,
                    window: str | None, since: str | None, until: str | None, confidence: float,
                    simultaneous: bool, consistent: bool, candidates: str | None, top: int | None = None):
    """Ask a collector's query API; the DataFrame it returns, as the local path would build it."""
    from .remote import fetch_estimates, frame_from_json, read_token

    if token_file is None:
        raise click.UsageError("--url needs --token-file FILE (the collector's query token)")
    spec = load_metric(metrics_file, metric)[1] if metrics_file else None
    cands = read_candidates(candidates, spec) if spec is not None else _read_lines(candidates)
    params = {"window": window, "since": since, "until": until, "confidence": repr(confidence),
              "simultaneous": "true" if simultaneous else None,
              "consistent": "true" if consistent else None, "format": "json",
              "top": None if top is None or spec is None or spec.protocol != "discover" else str(top)}
    df = frame_from_json(fetch_estimates(url, metric, read_token(token_file), params, cands))
    served = df.attrs.get("fingerprint")
    if spec is not None and served and served != spec.fingerprint:
        raise click.ClickException(f"{url}: the collector's metric {metric!r} has fingerprint "
                                   f"{served}, but {metrics_file} gives {spec.fingerprint}; the "
                                   "registries differ")
    return df


def _read_lines(path: str | None) -> list[str] | None:
    if path is None:
        return None
    lines = read_lines(path, "candidates file")
    return list(dict.fromkeys(s for s in (line.strip() for line in lines) if s)) or None


def load_sketch(spec: MetricSpec, db: str, windows: list[str] | None, since: str | None,
                until: str | None):
    """Merged sketch of the metric over the chosen windows; clear errors when there is none."""
    store = open_store(db, create=False)
    try:
        proto = spec.protocol_impl
        stored = store.windows(spec.name)
        if not stored:
            raise EstimationError(f"{db}: no data for metric {spec.name!r}")
        if not any(w.fingerprint == spec.fingerprint for w in stored):
            other = sorted({w.fingerprint[:12] for w in stored})
            raise StoreError(f"{db}: metric {spec.name!r} was stored under other parameters "
                             f"(fingerprint {', '.join(other)}; the registry now gives "
                             f"{spec.fingerprint[:12]}); estimates cannot mix them")
        sketch = store.load(spec.name, spec.fingerprint, proto.new_sketch(), windows, since, until)
    finally:
        store.close()
    if sketch.total_reports == 0:
        what = f"window {windows[0]}" if windows else \
            f"range {since or '...'} to {until or '...'}" if (since or until) else "the store"
        raise EstimationError(f"{db}: no reports of {spec.name!r} in {what}")
    return sketch


def read_candidates(path: str | None, spec: MetricSpec) -> list[str] | None:
    """Candidate strings, one per line (blank lines ignored); also accepts value,count CSV."""
    if path is None:
        return None
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
