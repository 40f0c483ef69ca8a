"""`ldpt estimate`: load a metric's sketch from the store and print debiased estimates."""

from __future__ import annotations

from pathlib import Path

import click

from client_sdk.errors import EstimationError, StoreError
from client_sdk.registry import Kind, MetricSpec
from collector.storage.sqlite import open_store
from estimators.frequency import estimate_frame
from estimators.simulation import DistributionError, read_weights_csv

from .common import emit, load_metric, output_options
from .output import format_frame
from .simulate_cmd import validate_day


@click.command()
@click.option("--metrics", "metrics_file", required=True, type=click.Path(dir_okay=False),
              help="Metric registry (TOML).")
@click.option("--metric", required=True, help="Metric name in the registry.")
@click.option("--db", type=click.Path(dir_okay=False), default=None, help="SQLite store to read.")
@click.option("--window", callback=validate_day, default=None, help="One window (YYYY-MM-DD).")
@click.option("--since", callback=validate_day, default=None, help="First day, inclusive.")
@click.option("--until", callback=validate_day, default=None, help="Last day, inclusive.")
@click.option("--confidence", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.95, show_default=True, help="Confidence level of the intervals.")
@click.option("--simultaneous", is_flag=True, help="Bonferroni intervals that hold for all values at once.")
@click.option("--consistent", is_flag=True,
              help="Norm-Sub post-processing (non-negative, sums to 1; biased, marked as such).")
@click.option("--candidates", type=click.Path(dir_okay=False, exists=True), default=None,
              help="String metrics: file of candidate strings, one per line.")
@click.option("--truth", type=click.Path(dir_okay=False, exists=True), default=None,
              help="CSV value,count of the true population (shown in --plot).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Save a PNG of the estimates with their intervals.")
@output_options
def estimate(metrics_file: str, metric: str, db: str | None, window: str | None, since: str | None,
             until: str | None, confidence: float, simultaneous: bool, consistent: bool,
             candidates: str | None, truth: str | None, plot_path: str | None, fmt: str,
             output: str | None) -> None:
    """Estimate METRIC's frequencies with confidence intervals."""
    if db is None:
        raise click.UsageError("give --db PATH (a SQLite store)")
    if window and (since or until):
        raise click.UsageError("use either --window or --since/--until, not both")
    _, spec = load_metric(metrics_file, metric)
    sketch = load_sketch(spec, db, [window] if window else None, since, until)
    df = estimate_frame(spec, sketch, confidence=confidence, simultaneous=simultaneous,
                        consistent=consistent, candidates=read_candidates(candidates, spec))
    emit(format_frame(df, fmt), output)
    if plot_path:
        from .plot import plot_estimates

        plot_estimates(df, plot_path, truth)


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
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    out = [line for line in (s.strip() for s in lines) if line]
    if not out:
        raise click.ClickException(f"{path}: no candidate strings")
    return list(dict.fromkeys(out))
