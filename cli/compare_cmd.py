"""`ldpt compare`: did METRIC change between two windows (or two ranges)? Per-value tests."""

from __future__ import annotations

import click

from .common import FiniteFloatRange, emit, load_metric, output_options
from .dates import validate_day
from .estimate_cmd import StoreReader, check_served_fingerprint, check_source, require_registry, store_options

CONTROL_HELP = ("Multiple-testing control of 'changed': fwer = Holm (chance of any false flag <= alpha), "
                "fdr = Benjamini-Hochberg.")


def _range(text: str | None, what: str) -> tuple[str, str] | None:
    """``D1..D2`` (inclusive days) as a (since, until) pair."""
    if text is None:
        return None
    from collector.storage.base import canonical_window

    first, sep, last = text.partition("..")
    days = [canonical_window(d.strip(), hour_ok=False) for d in (first, last)] if sep else []
    if not sep or not all(days) or days[0] > days[1]:
        raise click.BadParameter(f"{text!r}: give FIRST..LAST, two days YYYY-MM-DD in order",
                                 param_hint=what)
    return days[0], days[1]  # type: ignore[return-value]


@click.command()
@store_options
@click.option("--window", callback=validate_day, default=None, help="Window A (YYYY-MM-DD, or YYYY-MM-DDTHH on an hourly store).")
@click.option("--against", callback=validate_day, default=None, help="Window B (as --window), compared with A.")
@click.option("--range", "range_a", default=None, metavar="D1..D2", help="Instead of --window: range A.")
@click.option("--against-range", "range_b", default=None, metavar="D1..D2",
              help="Instead of --against: range B.")
@click.option("--confidence", type=FiniteFloatRange(0, 1, min_open=True, max_open=True),
              default=0.95, show_default=True, help="Confidence level of the difference intervals.")
@click.option("--alpha", type=FiniteFloatRange(0, 1, min_open=True, max_open=True), default=0.05,
              show_default=True, help="Level of the tests behind 'changed'.")
@click.option("--control", type=click.Choice(["fwer", "fdr"]), default="fwer", show_default=True,
              help=CONTROL_HELP)
@click.option("--simultaneous", is_flag=True, help="Bonferroni intervals that hold for all values at once.")
@output_options
def compare(metrics_file: str | None, metric: str, db: str | None, postgres: str | None, url: str | None,
            token_file: str | None, cacert: str | None, window: str | None, against: str | None, range_a: str | None,
            range_b: str | None, confidence: float, alpha: float, control: str, simultaneous: bool,
            fmt: str, output: str | None) -> None:
    """Compare METRIC between two windows: per value the change of proportion, its interval, a p-value."""
    from .output import format_compare

    source, where = check_source(db, postgres, url)
    a = _side(window, _range(range_a, "--range"), "--window", "--range")
    b = _side(against, _range(range_b, "--against-range"), "--against", "--against-range")
    if cacert and not url:
        raise click.UsageError("--cacert applies to an https:// --url")
    if _label(a) == _label(b):
        raise click.UsageError(f"A and B are both {_label(a)}: a comparison needs two different "
                               "windows (or ranges)")
    if source == "url":
        df = remote_compare(url, token_file, metric, a, b, confidence, alpha, control, simultaneous, cacert)
        spec = load_metric(metrics_file, metric)[1] if metrics_file else None
        check_served_fingerprint(df, url, metric, metrics_file, spec)
    else:
        from collector.estimates import CompareQuery, Side, run_compare

        from .store_rules import StoreRules

        spec = load_metric(require_registry(metrics_file), metric)[1]
        query = CompareQuery(*(Side(*_load_args(side), _label(side)) for side in (a, b)), confidence=confidence,
                             alpha=alpha, control=control, simultaneous=simultaneous)
        with StoreReader(source, where) as reader:
            df = reader.run(run_compare(spec, reader.reads, query, StoreRules(reader.label)))
    emit(format_compare(df, fmt), output)


def _side(window: str | None, rng: tuple[str, str] | None, w_opt: str, r_opt: str) -> str | tuple[str, str]:
    if (window is None) == (rng is None):
        raise click.UsageError(f"give {w_opt} DAY or {r_opt} D1..D2 (one of them)")
    return window if window is not None else rng  # type: ignore[return-value]


def _load_args(side: str | tuple[str, str]) -> tuple[list[str] | None, str | None, str | None]:
    return ([side], None, None) if isinstance(side, str) else (None, side[0], side[1])


def _label(side: str | tuple[str, str]) -> str:
    return side if isinstance(side, str) else f"{side[0]}..{side[1]}"


def remote_compare(url: str, token_file: str | None, metric: str, a: str | tuple[str, str],
                   b: str | tuple[str, str], confidence: float, alpha: float, control: str,
                   simultaneous: bool, cacert: str | None = None):
    """The collector's ``/v1/metrics/{name}/compare`` answer as a DataFrame."""
    from .remote import fetch_comparison, frame_from_json, read_token, ssl_context

    if token_file is None:
        raise click.UsageError("--url needs --token-file FILE (the collector's query token)")
    return frame_from_json(fetch_comparison(url, metric, read_token(token_file), _label(a), _label(b), confidence,
                                            alpha, control, simultaneous, ssl_context(cacert)))
