"""`ldpt simulate`: draw a population, randomise it with the real protocol code, store the sketch."""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

import click
import numpy as np

from client_sdk.registry import Kind, MetricSpec
from collector.storage.base import SketchKey
from collector.storage.sqlite import open_store
from estimators.simulation import (
    NumericPopulation,
    Population,
    draw_population,
    encode_population,
    numeric_truth,
    simulate_sketch,
)

from .common import FiniteFloatRange, load_metric, plural, progress_bar, progress_shown, validate_url
from .dates import today_utc, validate_day


@click.command()
@click.option("--metrics", "metrics_file", required=True, type=click.Path(dir_okay=False),
              help="Metric registry (TOML).")
@click.option("--metric", required=True, help="Metric name in the registry.")
@click.option("--clients", required=True, type=click.IntRange(1, 10**12),
              help="Population size (each simulated value is held in memory).")
@click.option("--distribution", default=None,
              help="zipf:S (default zipf:1.1), uniform, geometric:P, or csv:PATH of value,count "
                   "weights; numeric metrics: normal:MEAN,SD, uniform (default, over the range), "
                   "exponential:MEAN, lognormal:MU,SIGMA, or csv:PATH with a column value "
                   "(sampled with replacement; weighted by a column count if there is one).")
@click.option("--seed", type=int, default=None, help="Seed (default: fresh entropy, printed).")
@click.option("--db", type=click.Path(dir_okay=False), default=None,
              help="SQLite store to accumulate into (created if missing).")
@click.option("--url", default=None, metavar="URL", callback=validate_url,
              help="Instead of --db: send the reports to a running collector (ldpt serve) in "
                   "batches over HTTP, e.g. http://127.0.0.1:8080.")
@click.option("--cacert", type=click.Path(dir_okay=False, exists=True), default=None,
              help="With an https:// --url: trust this CA certificate (PEM), for a collector with a "
                   "private CA or a self-signed certificate (SSL_CERT_FILE works too).")
@click.option("--batch-size", type=click.IntRange(1, 10_000), default=500, show_default=True,
              help="Reports per HTTP batch with --url.")
@click.option("--retry-for", type=FiniteFloatRange(0.0, 86_400.0), default=300.0, show_default=True,
              metavar="SECONDS", help="With --url: retry each batch (same id) this long before giving up; "
                                      "after a few seconds without an acknowledgement it says so on stderr.")
@click.option("--window", callback=validate_day, default=None,
              help="Window to write (default: today, UTC).")
@click.option("--truth", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the true counts as CSV value,count (numeric metrics: statistic,value "
                   "rows mean, sum, n, clipped, and bucket counts and quantiles for histograms).")
@click.option("--days", type=click.IntRange(min=1), default=None,
              help="Each device reports once a day for this many consecutive days (windows) ending "
                   "at --window; memoised protocols keep each device's first round. --truth then "
                   "writes window,value,count.")
@click.option("--change-rate", type=FiniteFloatRange(0.0, 1.0), default=0.0, show_default=True,
              help="With --days: probability that a device's value is redrawn each day.")
@click.option("--joint-counts", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Joint metrics: CSV of joint counts, a column per part and count (e.g. "
                   "os,crashed,count); without it (and --distribution) a built-in correlated law.")
@click.option("--dimension", "dimensions", multiple=True, metavar="NAME=VALUE:WEIGHT,...",
              help="A public dimension each device draws independently, e.g. os=android:0.6,ios:0.4 "
                   "(repeatable; with --db): the sketch is stored per segment and in total.")
@click.option("--silent", is_flag=True, help="No progress bar.")
def simulate(metrics_file: str, metric: str, clients: int, distribution: str | None, seed: int | None,
             db: str | None, url: str | None, cacert: str | None, batch_size: int, retry_for: float,
             window: str | None, truth: str | None,
             days: int | None, change_rate: float, joint_counts: str | None, dimensions: tuple[str, ...],
             silent: bool) -> None:
    """Simulate CLIENTS devices reporting METRIC once each into a sketch store (or a collector)."""
    from sketches import server_half
    if dimensions and (days is not None or url is not None):
        raise click.UsageError("--dimension writes segments into --db (not with --url or --days)")
    if days is not None:
        if joint_counts:
            raise click.UsageError("--joint-counts draws one population; leave --days out")
        if db is None or url is not None:
            raise click.UsageError("--days writes one window per day into --db (not --url)")
        simulate_days_cmd(metrics_file, metric, clients, distribution, seed, db, window, truth,
                          days, change_rate, silent)
        return
    if change_rate:
        raise click.UsageError("--change-rate applies with --days")
    if cacert and not url:
        raise click.UsageError("--cacert applies to an https:// --url")
    if db is None and url is None:
        raise click.UsageError("give --db PATH (a SQLite store to write) or --url URL (a collector)")
    if db is not None and url is not None:
        raise click.UsageError("use either --db or --url, not both")
    if url is not None and window is not None:
        raise click.UsageError("--window applies to --db only; a collector windows reports by "
                               "their receive time")
    _, spec = load_metric(metrics_file, metric)
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % (2**63))
    rng = np.random.default_rng(seed)
    if joint_counts and spec.kind is not Kind.JOINT:
        raise click.UsageError(f"--joint-counts is for joint metrics; {metric!r} is {spec.kind.value}")
    if joint_counts and distribution:
        raise click.UsageError("use either --joint-counts or --distribution, not both")
    if spec.kind is Kind.JOINT and distribution is None:
        from estimators.joint_population import joint_population

        population: Population | NumericPopulation = joint_population(spec, clients, joint_counts, rng)
    else:
        if distribution is None:
            distribution = "uniform" if spec.kind is Kind.NUMERIC else "zipf:1.1"
        population = draw_population(spec, clients, distribution, rng)
    if truth:  # before the reports are stored: a bad path must not leave a half-done run behind
        if isinstance(population, NumericPopulation):
            write_rows(truth, ["statistic", "value"], numeric_truth(spec, population))
        else:
            write_truth(truth, population.values, population.counts)
    if url is not None:
        send_population(spec, population, rng, url, batch_size, silent, cacert, retry_for)
        if not silent:
            click.echo(f"{plural(clients, 'simulated report')} of {metric} ({spec.protocol}, epsilon "
                       f"{server_half(spec).epsilon:.4g}) -> {url} (seed {seed})", err=True)
        return
    store = open_store(db, create=True)  # opened before the long work: a bad store fails fast
    try:
        window = window or today_utc()
        held = stored_reports(store, spec, [window])
        with progress_bar(clients, f"simulating {metric}", silent) as bar:
            if spec.dimensions:
                store_segments(store, spec, population, dimensions, rng, window, bar.update)
            else:
                if dimensions:
                    raise click.UsageError(f"metric {metric!r} declares no dimensions (registry "
                                           "field dimensions = [...]); leave --dimension out")
                sketch = simulate_sketch(spec, population, rng, progress=bar.update)
                store.add_sketch(SketchKey(spec.name, spec.fingerprint, window), sketch)
    finally:
        store.close()
    if not silent:
        click.echo(f"{plural(clients, 'simulated report')} of {metric} ({spec.protocol}, epsilon "
                   f"{server_half(spec).epsilon:.4g}) -> {db} window {window} (seed {seed})", err=True)
    say_added(db, metric, held, clients, truth)


def stored_reports(store: Any, spec: MetricSpec, windows: Sequence[str]) -> dict[str, int]:
    """Reports the store already holds of ``spec`` (its parameters) in each of ``windows``."""
    wanted = set(windows)
    return {w.window: int(w.reports) for w in store.windows(spec.name)
            if w.fingerprint == spec.fingerprint and w.window in wanted and w.reports}


def say_added(db: str, metric: str, held: dict[str, int], per_window: int, truth: str | None) -> None:
    """A store's sketches add up: re-running a simulation doubles its data, which must be said
    (also with --silent: the estimate and a --truth file of this run no longer match)."""
    if not held:
        return
    first = sorted(held)[0]
    where = f"window {first}" if len(held) == 1 else f"{plural(len(held), 'window')} ({first}, ...)"
    click.echo(f"note: {db} already held {sum(held.values()):,} reports of {metric} in {where}; this run's "
               f"{per_window:,}{' a window' if len(held) > 1 else ''} were added to them (a store's sketches add up)"
               + (f", so {truth} is the truth of this run only" if truth else "")
               + ". Simulate into a new --db to estimate one run", err=True)


def store_segments(store: Any, spec: MetricSpec, population: Population | NumericPopulation,
                   options: Sequence[str], rng: np.random.Generator, window: str, progress: Any) -> None:
    """Randomise each segment's devices and store every segment and their sum (the total)."""
    from estimators.dimension_sim import parse_dimension_option, segment_probabilities, split_population
    from estimators.simulation import DistributionError
    from sketches import server_half

    try:
        probs = segment_probabilities(spec, [parse_dimension_option(o, spec) for o in options])
    except DistributionError as exc:
        raise click.UsageError(str(exc)) from None
    total = server_half(spec).new_sketch()
    for key, part in split_population(population, probs, rng).items():
        if part.size == 0:
            continue
        sketch = simulate_sketch(spec, part, rng, progress=progress)
        store.add_sketch(SketchKey(key, spec.fingerprint, window), sketch)
        total = total.merge(sketch)
    store.add_sketch(SketchKey(spec.name, spec.fingerprint, window), total)


def send_population(spec: MetricSpec, population: Population | NumericPopulation, rng: np.random.Generator, url: str,
                    batch_size: int, silent: bool, cacert: str | None = None,
                    retry_for: float = 300.0) -> None:
    """Encode the population exactly as the --db path does and post it to a collector; say on
    stderr when the collector stops acknowledging, and on Ctrl-C (or giving up) how many reports
    it acknowledged."""
    from .remote import RemoteError, SendStats, batch_bodies, check_reachable, send_batches, ssl_context

    context = ssl_context(cacert)
    check_reachable(url, context=context)
    bodies = batch_bodies(spec, encode_population(spec, population, rng), batch_size)
    stats = SendStats()
    total = population.size
    shown = progress_shown(silent)

    def notice(line: str) -> None:  # a warning: also with --silent and in a pipe
        click.echo(("\n" if shown else "") + f"ldpt simulate: {line}", err=True)

    def acknowledged() -> str:
        return (f"{stats.reports:,} of {plural(total, 'report')} acknowledged by the collector "
                f"({plural(stats.batches, 'batch', 'batches')}); the others were not sent or not acknowledged")

    with progress_bar(total, f"sending {spec.name}", silent) as bar:
        try:
            asyncio.run(send_batches(url, bodies, progress=bar.update, ssl_context=context, notice=notice,
                                     retry_deadline=retry_for, stats=stats))
        except KeyboardInterrupt:
            click.echo(("\n" if shown else "") + f"ldpt simulate: interrupted: {acknowledged()}", err=True)
            raise click.exceptions.Exit(130) from None
        except RemoteError as exc:
            raise RemoteError(f"{exc}; {acknowledged()}") from None
    if not silent and (stats.retries or stats.duplicates):
        click.echo(f"{plural(stats.batches, 'batch', 'batches')} acknowledged ({plural(stats.retries, 'retry', 'retries')}, "
                   f"{stats.duplicates:,} acknowledged as duplicates of a retried batch)", err=True)


def write_truth(path: str, values: list[str], counts: np.ndarray) -> None:
    """The true population as CSV value,count."""
    write_rows(path, ["value", "count"], zip(values, (int(c) for c in counts)))


def write_rows(path: str, header: list[str], rows: Iterable[Sequence[Any]]) -> None:
    """A CSV file with a header row (numbers written exactly, by repr)."""
    try:
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(header)
            writer.writerows(rows)
    except OSError as exc:
        raise click.ClickException(f"{path}: cannot write truth file ({exc.strerror or exc})") from None


def simulate_days_cmd(metrics_file: str, metric: str, clients: int, distribution: str | None, seed: int | None,
                      db: str, window: str | None, truth: str | None, days: int, change_rate: float,
                      silent: bool) -> None:
    """`ldpt simulate --days`: one window per day (estimators.longitudinal), vectorised."""
    from estimators.longitudinal import LongitudinalError, check_metric, simulate_days
    from sketches import server_half

    _, spec = load_metric(metrics_file, metric)
    try:
        check_metric(spec)   # before any file is created
    except LongitudinalError as exc:
        raise click.ClickException(f"{metrics_file}: metric {metric!r}: {exc}") from None
    if distribution is None:
        distribution = "uniform" if spec.kind is Kind.NUMERIC else "zipf:1.1"
    end = dt.date.fromisoformat((window or today_utc())[:10])
    labels = [(end - dt.timedelta(days=days - 1 - i)).isoformat() for i in range(days)]
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % (2**63))
    rng = np.random.default_rng(seed)
    truth_fh = _open_truth(truth) if truth else None
    store = open_store(db, create=True)
    held = stored_reports(store, spec, labels)
    try:
        with progress_bar(clients * days, f"simulating {metric} x {days} days", silent) as bar:
            for result in simulate_days(spec, clients, distribution, days, change_rate, rng,
                                        progress=bar.update):
                label = labels[result.day]
                store.add_sketch(SketchKey(spec.name, spec.fingerprint, label), result.sketch)
                if truth_fh is not None:
                    csv.writer(truth_fh).writerows(
                        (label, v, int(c)) for v, c in zip(spec.domain or (), result.true_counts))
    finally:
        store.close()
        if truth_fh is not None:
            truth_fh.close()
    if not silent:
        click.echo(f"{plural(clients, 'simulated device')} x {plural(days, 'day')} of {metric} ({spec.protocol}, epsilon "
                   f"{server_half(spec).epsilon:.4g}) -> {db} windows {labels[0]}..{labels[-1]} "
                   f"(seed {seed})", err=True)
    say_added(db, metric, held, clients, truth)


def _open_truth(path: str):
    """The --days truth file, header written: window,value,count."""
    try:
        fh = open(path, "w", newline="", encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"{path}: cannot write truth file ({exc.strerror or exc})") from None
    csv.writer(fh).writerow(["window", "value", "count"])
    return fh
