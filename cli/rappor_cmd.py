"""`ldpt rappor`: decode google/rappor files with our decoder; export our sketches in their format.

    ldpt rappor decode --params params.csv --counts counts.csv --map map.csv [--rappor-columns]
    ldpt rappor export --metrics F --metric NAME --db PATH --candidates FILE --out-dir DIR

Works registered under ``ldpt`` or standalone (``python -m cli.rappor_cmd``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from client_sdk.errors import EstimationError
from estimators.multiple_testing import CONTROLS

from .common import FiniteFloatRange, LdptGroup, Working, emit, load_metric, output_options
from .dates import validate_date, validate_day

if TYPE_CHECKING:  # the decoder (scipy, pandas) loads only when a command runs: a fast `ldpt --help`
    import pandas as pd


@click.group(cls=LdptGroup)
def rappor() -> None:
    """RAPPOR tools: decode google/rappor's files, export sketches in their format."""


def decoder_options(func):
    """--confidence, --control and --alpha, shared by decode and the estimate command."""
    func = click.option("--alpha", type=FiniteFloatRange(0, 1, min_open=True, max_open=True), default=0.05,
                        show_default=True, help="Error level of the detection test.")(func)
    func = click.option("--control", type=click.Choice(CONTROLS), default="fwer", show_default=True,
                        help="Multiple-testing control of 'detected': fwer (Holm, family-wise) or "
                             "fdr (Benjamini–Hochberg).")(func)
    func = click.option("--confidence", type=FiniteFloatRange(0, 1, min_open=True, max_open=True),
                        default=0.95, show_default=True, help="Confidence level of the intervals.")(func)
    return func


#: Label of ``ldpt rappor decode`` output when no ``--metric`` is given.
UNNAMED = "unnamed"


@rappor.command("decode")
@click.option("--params", "params_path", required=True, type=click.Path(dir_okay=False),
              help="google/rappor params.csv (header k,h,m,p,q,f and one row).")
@click.option("--counts", "counts_path", required=True, type=click.Path(dir_okay=False),
              help="google/rappor counts.csv (per cohort: reports, then bit counts 0..k-1).")
@click.option("--map", "map_path", required=True, type=click.Path(dir_okay=False),
              help="google/rappor map.csv (string, then h·m 1-based bit positions).")
@click.option("--rappor-columns", is_flag=True,
              help="Write google/rappor's result columns (string,estimate,std_error,proportion,"
                   "prop_std_error,prop_low_95,prop_high_95) for the detected strings only.")
@click.option("--metric", "metric_name", default=UNNAMED, show_default=True,
              help="Metric name to label the output with (google/rappor's files do not carry one).")
@decoder_options
@click.option("--silent", is_flag=True, help="No progress on standard error.")
@output_options
def decode_cmd(params_path: str, counts_path: str, map_path: str, rappor_columns: bool, metric_name: str,
               confidence: float, control: str, alpha: float, silent: bool, fmt: str, output: str | None) -> None:
    """Decode google/rappor files: estimates, tests, and the decoded distribution per string."""
    from estimators import rappor_io
    from estimators.rappor import decode

    params, sketch, cmap = rappor_io.read_google(params_path, counts_path, map_path)
    with Working(f"decoding {len(cmap.values):,} candidates", silent):
        df = decode(sketch, params, cmap, confidence=confidence, control=control, alpha=alpha)
    df.attrs["metric"] = metric_name
    emit(_render(df, fmt, rappor_columns), output)
    _warn(df)


def _render(df: pd.DataFrame, fmt: str, google_columns: bool) -> str:
    """The estimate frame (or Google's columns) as table, CSV or JSON; tables end with the summary."""
    from estimators import rappor_io

    from .output import format_frame

    if google_columns:
        out = rappor_io.rappor_columns(df)
        if fmt == "csv":
            return out.to_csv(index=False)  # floats round-trip exactly
        if fmt == "json":
            return out.to_json(orient="records", indent=2) + "\n"
        return out.to_string(index=False) + "\n"
    text = format_frame(df, fmt)
    if fmt == "table":
        text += _summary_lines(df)
    return text


def _summary_lines(df: pd.DataFrame) -> str:
    s = df.attrs.get("summary", {})
    if not s:
        return ""
    units = df.attrs.get("units", {})
    counts = ", ".join(c for c, u in units.items() if u == "count")
    props = ", ".join(c for c, u in units.items() if u == "proportion")
    text = (f"\n{s['detected']} of {s['candidates']} candidates detected ({s['control']} {s['alpha']:g}); "
            f"allocated mass {s['allocated_mass']:.3f}; explained variance {s['explained_variance']:.3f}; "
            f"goodness of fit chi2 {s['gof_statistic']:.0f} on {s['gof_df']} df (p = {s['gof_p_value']:.2g})\n")
    if "reported" in s:
        text += (f"decoded distribution: {s['reported']} strings reported (share > 0), total share "
                 f"{s['reported_mass']:.3f}; outside the list {s['mass_outside_model']:.3f} "
                 f"(± {s['mass_outside_model_se']:.3f})\n")
    if units:
        text += f"columns in counts of reports: {counts}; in proportions: {props}\n"
    return text


def _warn(df: pd.DataFrame) -> None:
    warning = df.attrs.get("summary", {}).get("warning")
    if warning:
        click.echo(f"warning: {warning}", err=True)


@rappor.command("export")
@click.option("--metrics", "metrics_file", required=True, type=click.Path(dir_okay=False),
              help="Metric registry (TOML).")
@click.option("--metric", required=True, help="Name of a RAPPOR (string) metric in the registry.")
@click.option("--db", required=True, type=click.Path(dir_okay=False), help="SQLite store to read.")
@click.option("--candidates", required=True, type=click.Path(dir_okay=False, exists=True),
              help="Candidate strings, one per line (written to map.csv with their Bloom bits).")
@click.option("--out-dir", required=True, type=click.Path(file_okay=False),
              help="Directory for params.csv, counts.csv and map.csv (created if missing).")
@click.option("--window", callback=validate_day, default=None,
              help="One window (YYYY-MM-DD); all windows by default.")
@click.option("--since", callback=validate_date, default=None, help="First day, inclusive (YYYY-MM-DD).")
@click.option("--until", callback=validate_date, default=None, help="Last day, inclusive (YYYY-MM-DD).")
def export_cmd(metrics_file: str, metric: str, db: str, candidates: str, out_dir: str,
               window: str | None, since: str | None, until: str | None) -> None:
    """Write a RAPPOR metric's sketch as google/rappor params.csv, counts.csv and map.csv."""
    from estimators import rappor_io
    from estimators.rappor import CandidateMap
    from sketches import server_half

    from .estimate_cmd import load_sketch, read_candidates

    _, spec = load_metric(metrics_file, metric)
    if not server_half(spec).exports_google_rappor:
        raise click.ClickException(f"metric {metric!r} uses protocol {spec.protocol}, not rappor")
    if window and (since or until):
        raise click.UsageError("use either --window or --since/--until, not both")
    sketch = load_sketch(spec, db, [window] if window else None, since, until)
    values = read_candidates(candidates, spec) or []
    params = server_half(spec).params
    try:
        cmap = CandidateMap.from_strings(values, params)
    except EstimationError as exc:
        raise click.ClickException(f"{candidates}: {exc}") from None
    paths = rappor_io.write_google(out_dir, params, sketch, cmap)
    click.echo(f"wrote {paths['params']}, {paths['counts']} ({sketch.total_reports} reports in "
               f"{params.m} cohorts) and {paths['map']} ({len(cmap)} candidates)")


__all__ = ["rappor"]

if __name__ == "__main__":  # pragma: no cover - standalone use
    sys.exit(rappor())
