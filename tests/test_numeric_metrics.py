"""Numeric metrics end to end: registry, SDK clipping and refusals, simulate -> estimate through
the CLI, the estimators' rows and their interval coverage, and the sketch-only estimate."""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import io
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import main
from client_sdk import AsyncTelemetryClient, MemoryState, TelemetryClient
from client_sdk.errors import DomainError, RegistryError
from client_sdk.protocols.factory import choose_numeric_protocol
from client_sdk.registry import Kind, parse_registry
from client_sdk.testing import AsyncMemoryTransport, MemoryTransport
from collector.testing import FakeCollector
from estimators.frequency import estimate_frame
from estimators.numeric import QUANTILES
from estimators.simulation import NumericPopulation, draw_population, numeric_truth, simulate_sketch
from sketches import server_half
from sketches.metric_arrays import bucket_of, denormalise, edge_array, normalise

REGISTRY = """
[metrics.session_minutes]
kind = "numeric"
range = [0, 120]
protocol = "auto"
epsilon = 1.0
reports_per_window = 1000000
description = "minutes per session"

[metrics.startup_ms]
kind = "numeric"
range = [0, 5000]
buckets = [0, 250, 500, 750, 1000, 1500, 2000, 3000, 5000]
epsilon = 2.0
reports_per_window = 1000000

[metrics.battery]
kind = "numeric"
range = [0.5, 100.5]
buckets = 4
protocol = "oue"
epsilon = 1.0
grid = 64
"""
# battery's `grid` is deliberately wrong for a histogram (oue takes no grid): see the error test.
REGISTRY_OK = REGISTRY.replace("grid = 64\n", "")
MEAN = '[metrics.m]\nkind = "numeric"\nrange = [0, 120]\nprotocol = "duchi"\nepsilon = 1.0\n'
HIST = '[metrics.m]\nkind = "numeric"\nrange = [0, 100]\nbuckets = 4\nepsilon = 1.0\n'


@pytest.fixture
def registry():
    return parse_registry(REGISTRY_OK, source="metrics.toml")


# --- registry -------------------------------------------------------------------------------------

def test_mean_and_histogram_metrics_load(registry):
    mean = registry.get("session_minutes")
    assert mean.kind is Kind.NUMERIC and mean.is_mean and not mean.is_histogram
    assert mean.protocol == choose_numeric_protocol(1.0) and mean.domain is None
    assert mean.bounds == (0.0, 120.0)
    hist = registry.get("startup_ms")
    assert hist.is_histogram and hist.protocol == "grr"          # 8 buckets at ε = 2: GRR
    assert hist.domain == ("[0, 250)", "[250, 500)", "[500, 750)", "[750, 1000)", "[1000, 1500)",
                           "[1500, 2000)", "[2000, 3000)", "[3000, 5000]")
    battery = registry.get("battery")
    assert battery.domain == ("[0.5, 25.5)", "[25.5, 50.5)", "[50.5, 75.5)", "[75.5, 100.5]")
    buckets = bucket_of(battery, np.array([-3, 0.5, 25.5, 25.49, 100.5, 1e9]))
    assert buckets.dtype == np.int64 and list(buckets) == [0, 0, 1, 0, 3, 3]
    assert edge_array(battery).dtype == np.float64 and edge_array(battery).tolist() == battery.edge_list
    assert denormalise(mean, normalise(mean, 37.5)) == pytest.approx(37.5)
    assert normalise(mean, 500.0) == 1.0 and normalise(mean, -1.0) == -1.0


def test_round_trip_compares_every_field(registry):
    again = parse_registry(registry.to_toml(), source="dumped")
    assert list(again.metrics) == list(registry.metrics)
    for name, spec in registry.metrics.items():
        other = again.get(name)
        for field in dataclasses.fields(spec):
            assert getattr(other, field.name) == getattr(spec, field.name), (name, field.name)
            assert type(getattr(other, field.name)) is type(getattr(spec, field.name)), (name, field.name)
        assert other.fingerprint == spec.fingerprint
    assert again.get("session_minutes").range == (0, 120)         # ints stay ints
    assert again.get("battery").buckets == 4
    assert again.get("startup_ms").buckets == (0, 250, 500, 750, 1000, 1500, 2000, 3000, 5000)


def test_fingerprints_cover_range_and_buckets():
    fp = parse_registry(MEAN).get("m").fingerprint
    assert parse_registry(MEAN.replace("[0, 120]", "[0, 60]")).get("m").fingerprint != fp
    assert parse_registry(MEAN.replace("[0, 120]", "[-1, 120]")).get("m").fingerprint != fp
    assert parse_registry(MEAN + "grid = 128\n").get("m").fingerprint != fp
    hfp = parse_registry(HIST).get("m").fingerprint
    assert parse_registry(HIST.replace("buckets = 4", "buckets = 5")).get("m").fingerprint != hfp
    assert parse_registry(HIST.replace("buckets = 4", "buckets = [0, 25, 50, 75, 100]")
                          ).get("m").fingerprint == hfp                 # the same edges
    assert parse_registry(HIST.replace("buckets = 4", "buckets = [0, 20, 50, 75, 100]")
                          ).get("m").fingerprint != hfp


@pytest.mark.parametrize("text, field, words", [
    (MEAN.replace('range = [0, 120]\n', ''), "range", "needs range = [lo, hi]"),
    (MEAN.replace('[0, 120]', '[120, 0]'), "range", "lo must be below hi"),
    (MEAN.replace('[0, 120]', '[0, inf]'), "range", "two finite numbers"),
    (MEAN.replace('[0, 120]', '[0, "120"]'), "range", "two finite numbers"),
    (MEAN.replace('[0, 120]', '[0]'), "range", "two finite numbers"),
    (MEAN.replace('"duchi"', '"grr"'), "protocol", "histogram metric"),
    (MEAN.replace('"duchi"', '"gaussian"'), "protocol", "laplace, duchi"),
    (MEAN + "grid = 3\n", "protocol", "even integer"),
    (MEAN + "cohorts = 3\n", "cohorts", "duchi takes grid"),
    (HIST.replace("buckets = 4", "buckets = 1"), "buckets", "[2, 10000]"),
    (HIST.replace("buckets = 4", "buckets = true"), "buckets", "list of increasing edges"),
    (HIST.replace("buckets = 4", "buckets = [0, 50]"), "buckets", "3 to"),
    (HIST.replace("buckets = 4", "buckets = [0, 50, 90]"), "buckets", "span the range"),
    (HIST.replace("buckets = 4", "buckets = [0, 60, 50, 100]"), "buckets", "must increase: 60 then 50"),
    (HIST + 'protocol = "laplace"\n', "protocol", "numeric mechanisms are for numeric metrics"),
    (HIST + "grid = 64\n", "grid", "unknown field"),
    (HIST + 'protocol = "rr"\n', "protocol", "2 categories or buckets"),
    ('[metrics.m]\nkind = "boolean"\nrange = [0, 1]\nepsilon = 1.0\n', "range", "only numeric"),
    ('[metrics.m]\nkind = "categorical"\ncategories = ["a", "b"]\nbuckets = 3\nepsilon = 1.0\n',
     "buckets", "only numeric"),
])
def test_errors_name_file_metric_and_field(text, field, words):
    with pytest.raises(RegistryError) as info:
        parse_registry(text, source="metrics.toml")
    message = str(info.value)
    assert message.startswith("metrics.toml: metric 'm': field"), message
    assert repr(field) in message and words in message, message


def test_registry_error_for_the_example_grid_on_a_histogram():
    with pytest.raises(RegistryError, match="metric 'battery': field 'grid'"):
        parse_registry(REGISTRY, source="metrics.toml")


# --- SDK ---------------------------------------------------------------------------------------------

def _decoded_sketch(fake: FakeCollector, spec):
    return fake.sketches[(spec.name, spec.fingerprint)]


def test_sdk_clips_refuses_and_counts(registry):
    fake = FakeCollector(registry)
    client = TelemetryClient(registry=registry, state=MemoryState(), transport=MemoryTransport(fake))
    good = [12.5, 3, np.float32(4.5), np.int64(7), np.float64(119.9), 0, 120]
    clipped = [-3, 1e5, np.int32(-1), 10**300]
    bad = [True, np.bool_(False), "12", None, float("nan"), float("inf"), -math.inf, [1.0], 10**400]
    for v in good + clipped:
        assert client.report("session_minutes", v) is True
        assert client.report("startup_ms", v) is True
    for v in bad:
        assert client.report("session_minutes", v) is False
        assert client.report("startup_ms", v) is False
    assert client.flush(10.0)
    stats = client.stats()
    assert stats["clipped"] == 2 * len(clipped)
    assert stats["invalid_value"] == 2 * len(bad)
    assert stats["internal_error"] == 0 and stats["reports_acked"] == 2 * (len(good) + len(clipped))
    # the histogram's reports land in the buckets of the (clipped) values: exactly for 8 of 11
    # values we cannot tell (randomised), but every report is a valid GRR output cell
    sketch = _decoded_sketch(fake, registry.get("startup_ms"))
    assert sketch.total_reports == len(good) + len(clipped)
    client.close()


def test_published_registry_round_trips_numeric_metrics(registry):
    """What GET /v1/registry publishes rebuilds the same metrics in an SDK (same fingerprints)."""
    from client_sdk.remote import registry_from_json

    again = registry_from_json(json.dumps(registry.to_json()))
    for name, spec in registry.metrics.items():
        other = again.get(name)
        assert other.fingerprint == spec.fingerprint
        assert (other.range, other.buckets, other.protocol) == (spec.range, spec.buckets, spec.protocol)


def test_strict_mode_and_validate_raise_domain_errors(registry):
    client = TelemetryClient(registry=registry, state=MemoryState(),
                             transport=MemoryTransport(FakeCollector(registry)), strict=True)
    with pytest.raises(DomainError, match="takes numbers, got bool"):
        client.report("session_minutes", True)
    with pytest.raises(DomainError, match="finite numbers"):
        client.validate("startup_ms", float("nan"))
    with pytest.raises(DomainError, match="takes numbers, got str"):
        client.validate("startup_ms", "fast")
    with pytest.raises(DomainError, match="beyond the float range"):
        client.validate("startup_ms", 10**400)
    client.validate("startup_ms", 10**6)        # clipped, not refused
    client.close()


def test_async_client_clips_and_refuses_the_same_way(registry):
    fake = FakeCollector(registry)

    async def run():
        async with AsyncTelemetryClient(registry=registry, state=MemoryState(),
                                        transport=AsyncMemoryTransport(fake)) as client:
            assert client.report("session_minutes", 200) is True
            assert client.report("session_minutes", 20.0) is True
            assert client.report("startup_ms", float("nan")) is False
            assert client.report("startup_ms", False) is False
            assert await client.aflush(5.0)
            return client.stats()

    stats = asyncio.run(run())
    assert stats["clipped"] == 1 and stats["invalid_value"] == 2 and stats["reports_acked"] == 2


def test_sdk_mean_reports_estimate_the_clipped_mean(registry):
    """Reports through the real SDK (OS CSPRNG, unseeded) estimate the clipped values' mean within
    5.5 SE: 3.8e-8 per run (was 4 SE over 6,000 reports: 6.3e-5); 11,400 reports keep the power,
    the bias that 4 SE over 6,000 caught (5.5 SE over 11,400) fails it."""
    spec = registry.get("session_minutes")
    fake = FakeCollector(registry)
    client = TelemetryClient(registry=registry, state=MemoryState(), transport=MemoryTransport(fake),
                             queue_size=20_000, batch_size=1000)
    values = np.random.default_rng(5).exponential(40.0, 11_400)
    for v in values:
        client.report("session_minutes", float(v))
    assert client.flush(20.0)
    client.close()
    df = estimate_frame(spec, _decoded_sketch(fake, spec))
    row = df.set_index("statistic").loc["mean"]
    truth = np.clip(values, 0, 120).mean()
    assert abs(row["estimate"] - truth) < 5.5 * row["std_err"], (row["estimate"], truth, row["std_err"])


# --- estimators ----------------------------------------------------------------------------------------

def test_mean_frame_is_the_protocol_estimate_in_the_metric_units(registry):
    spec = registry.get("session_minutes")
    rng = np.random.default_rng(1)
    sketch = simulate_sketch(spec, draw_population(spec, 20_000, "normal:30,10", rng), rng)
    est = server_half(spec).estimate(sketch)
    df = estimate_frame(spec, sketch, confidence=0.9)
    assert list(df.columns) == ["statistic", "estimate", "std_err", "ci_low", "ci_high"]
    rows = df.set_index("statistic")
    mean, se = 60.0 * (est.mean + 1.0), 60.0 * math.sqrt(est.variance)
    assert rows.loc["mean", "estimate"] == pytest.approx(mean)
    assert rows.loc["mean", "std_err"] == pytest.approx(se)
    # at 20,000 reports the score interval (estimators.mean_intervals) is Wald's to a few 10⁻⁵
    assert rows.loc["mean", "ci_high"] - rows.loc["mean", "estimate"] == pytest.approx(1.6448536 * se, rel=1e-3)
    assert rows.loc["sum", "estimate"] == pytest.approx(20_000 * mean)
    assert rows.loc["sum", "std_err"] == pytest.approx(20_000 * se)
    assert rows.loc["n", "estimate"] == 20_000 and rows.loc["n", "std_err"] == 0
    assert df.attrs["kind"] == "numeric-mean" and df.attrs["range"] == [0.0, 120.0]


def test_histogram_frame_has_bucket_rows_then_mean_and_quantiles(registry):
    spec = registry.get("startup_ms")
    rng = np.random.default_rng(2)
    sketch = simulate_sketch(spec, draw_population(spec, 50_000, "lognormal:6.5,0.6", rng), rng)
    for consistent in (False, True):
        df = estimate_frame(spec, sketch, consistent=consistent)
        assert list(df["statistic"]) == ["count"] * 8 + ["mean"] + [name for name, _ in QUANTILES]
        assert list(df["value"][:8]) == list(spec.domain)
        summary = df.iloc[8:]
        assert (summary["ci_low"] <= summary["estimate"]).all()
        assert (summary["estimate"] <= summary["ci_high"]).all()
        quantiles = summary["estimate"].to_numpy()[1:]
        assert (np.diff(quantiles) >= 0).all() or not consistent   # monotone CDF: ordered quantiles
        assert set(summary["ci_low"].iloc[1:]) <= set(spec.edge_list)   # bucket-resolution bounds
    assert df.attrs["post_processed"] == "norm-sub" and df.attrs["mean_bias_bound"] > 0
    wide = estimate_frame(spec, sketch, simultaneous=True).set_index("statistic")
    narrow = df.set_index("statistic")
    assert wide.loc["mean", "ci_high"] > narrow.loc["mean", "ci_high"]   # Bonferroni over 7 rows
    assert (wide.iloc[8:]["ci_high"] >= narrow.iloc[8:]["ci_high"]).all()


def test_mean_metric_refuses_consistent():
    spec = parse_registry(MEAN).get("m")
    sketch = server_half(spec).new_sketch()
    sketch.counts[0] += [10, 10]
    sketch.reports[0] += 20
    from client_sdk.errors import EstimationError

    with pytest.raises(EstimationError, match="--consistent applies"):
        estimate_frame(spec, sketch, consistent=True)


@pytest.mark.parametrize("n", [10**7, 10**12])
def test_estimating_a_huge_sketch_reads_only_the_sketch(n):
    """The estimate of 10^7 (or 10^12: no scan could finish) reports is arithmetic on the
    sketch's few cells: exact against the cell probabilities of a known input."""
    spec = parse_registry(MEAN).get("m")
    proto = server_half(spec)
    j = proto.grid // 4                                   # every report's value is t_j = −0.5: x = 30
    probs = proto.probability_table()[j]
    sketch = proto.new_sketch()
    sketch.counts[0] = np.random.default_rng(3).multinomial(n, probs)
    sketch.reports[0] = n
    df = estimate_frame(spec, sketch).set_index("statistic")
    assert df.loc["n", "estimate"] == n
    se = 60.0 * math.sqrt(proto.report_variance()[j] / n)
    assert df.loc["mean", "std_err"] == pytest.approx(se, rel=0.01)
    assert abs(df.loc["mean", "estimate"] - 30.0) < 4 * se


# --- CLI: simulate -> estimate ------------------------------------------------------------------------------

@pytest.fixture
def cli_files(tmp_path):
    path = tmp_path / "metrics.toml"
    path.write_text(REGISTRY_OK, encoding="utf-8")
    return tmp_path, str(path)


def invoke(*args: str, ok: bool = True):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def read_truth(path) -> dict[str, float]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["statistic", "value"]
    return {k: float(v) for k, v in rows[1:]}


@pytest.mark.parametrize("metric, distribution", [
    ("session_minutes", "exponential:25"), ("session_minutes", "normal:60,30"),
    ("startup_ms", "lognormal:6.5,0.6"), ("battery", "uniform")])
def test_simulate_then_estimate_covers_the_truth(cli_files, metric, distribution):
    tmp, reg = cli_files
    db, truth = str(tmp / "s.sqlite"), tmp / "truth.csv"
    invoke("simulate", "--metrics", reg, "--metric", metric, "--clients", "40000", "--distribution",
           distribution, "--seed", "4", "--db", db, "--truth", str(truth), "--silent")
    true = read_truth(truth)
    assert true["n"] == 40000
    out = json.loads(invoke("estimate", "--metrics", reg, "--metric", metric, "--db", db,
                            "--format", "json").output)
    rows = out["estimates"]
    by_stat = {r["value"] if r.get("statistic") == "count" else r["statistic"]: r for r in rows}
    checked = [k for k in by_stat if k in true]
    assert "mean" in checked and (metric == "session_minutes") == ("sum" in checked)
    if metric != "session_minutes":
        assert set(checked) >= {"p10", "p50", "p99", *spec_labels(reg, metric)}
    for key in checked:   # seeded; bucket counts within 4 SE, the statistics inside their interval
        r = by_stat[key]
        if r.get("statistic") == "count":
            assert abs(r["estimate"] - true[key]) <= 4 * r["std_err"], (key, r, true[key])
        else:
            assert r["ci_low"] <= true[key] <= r["ci_high"], (key, r, true[key])


def spec_labels(reg: str, metric: str) -> list[str]:
    from client_sdk.registry import load_registry

    return list(load_registry(reg).get(metric).domain)


def test_csv_distribution_and_bad_distributions(cli_files):
    tmp, reg = cli_files
    (tmp / "values.csv").write_text("value,other\n10,a\n20,b\n30,c\n", encoding="utf-8")
    invoke("simulate", "--metrics", reg, "--metric", "session_minutes", "--clients", "3000",
           "--distribution", f"csv:{tmp / 'values.csv'}", "--seed", "1", "--db", str(tmp / "a.db"),
           "--truth", str(tmp / "t.csv"), "--silent")
    assert 18 < read_truth(tmp / "t.csv")["mean"] < 22
    (tmp / "bad.csv").write_text("value\n10\nten\n", encoding="utf-8")
    for dist, words in ((f"csv:{tmp / 'bad.csv'}", "line 3: field 'value'"),
                        ("normal:1", "bad parameters"), ("zipf:1.1", "unknown distribution"),
                        ("exponential:-2", "bad parameters"), ("lognormal:a,b", "must be numbers")):
        result = invoke("simulate", "--metrics", reg, "--metric", "session_minutes", "--clients", "10",
                        "--distribution", dist, "--db", str(tmp / "b.db"), "--silent", ok=False)
        assert result.exit_code != 0 and words in result.output, (dist, result.output)
        assert "Traceback" not in result.output


def test_plan_range_marks_the_smallest_error():
    out = invoke("plan", "--range", "0,120", "--epsilon", "1", "--clients", "10000", "--format",
                 "json").output
    rows = json.loads(out)["protocols"]
    best = min(r["std_err_mean"] for r in rows)
    assert [r["protocol"] for r in rows if r["best"]] == [r["protocol"] for r in rows
                                                          if r["std_err_mean"] == best]
    for r in rows:  # worst-case SE of the mean = (hi − lo)/2 · sqrt(var/n)
        assert r["std_err_mean"] == pytest.approx(60 * math.sqrt(r["variance_per_report"] / 10000))
    table = invoke("plan", "--range", "0,120", "--epsilon", "1", "--clients", "10000").output
    assert "* " in table and "<- auto" in table
    assert invoke("plan", "--range", "5,1", "--epsilon", "1", "--clients", "10", ok=False).exit_code == 2
    assert invoke("plan", "--epsilon", "1", "--clients", "10", ok=False).exit_code == 2


def test_metrics_check_shows_the_numeric_choice_and_runner_up(cli_files):
    _, reg = cli_files
    out = invoke("metrics", "check", reg).output
    assert "session_minutes: auto chose " in out and "runner-up" in out
    assert "[0, 120]" in out and "8 buckets" in out


def test_estimate_table_and_plot_of_numeric_metrics(cli_files):
    pytest.importorskip("matplotlib")
    tmp, reg = cli_files
    db = str(tmp / "s.db")
    for metric in ("session_minutes", "startup_ms"):
        invoke("simulate", "--metrics", reg, "--metric", metric, "--clients", "5000", "--seed", "2",
               "--db", db, "--truth", str(tmp / f"{metric}.csv"), "--silent")
        table = invoke("estimate", "--metrics", reg, "--metric", metric, "--db", db, "--plot",
                       str(tmp / f"{metric}.png"), "--truth", str(tmp / f"{metric}.csv")).output
        assert "mean" in table and "nan" not in table
        assert (tmp / f"{metric}.png").stat().st_size > 1000
    top = invoke("estimate", "--metrics", reg, "--metric", "startup_ms", "--db", db, "--top", "3", ok=False)
    assert top.exit_code == 2 and "numeric" in top.output
    csv_text = invoke("estimate", "--metrics", reg, "--metric", "session_minutes", "--db", db,
                      "--format", "csv").output
    assert next(csv.reader(io.StringIO(csv_text))) == ["statistic", "estimate", "std_err", "ci_low",
                                                       "ci_high"]


# --- coverage (seeded Monte-Carlo) ------------------------------------------------------------------------------

@pytest.mark.statistical
@pytest.mark.parametrize("protocol, runs", [("grr", 1000), ("oue", 1000), ("olh", 200)])
def test_quantile_intervals_cover(protocol, runs):
    """Every quantile interval covers the population's quantile in >= 93% of R seeded runs, and
    the histogram mean's interval (midpoint estimate widened by its bias bound) covers as well.
    By construction they cover at least nominally (estimators.numeric); at R = 1000 the sampling
    SE of a 95% coverage is 0.7%, so 93% is 2.9 SE below nominal (OLH's Cauchy–Schwarz band is
    wider still, so R = 200 suffices there)."""
    spec = parse_registry(HIST.replace("buckets = 4", "buckets = 10") + f'protocol = "{protocol}"\n'
                          ).get("m")
    rng = np.random.default_rng(20261201)
    hits = {name: 0 for name, _ in QUANTILES} | {"mean": 0}
    for _ in range(runs):
        values = rng.gamma(3.0, 9.0, 5000)
        pop = NumericPopulation(values)
        truth = dict(numeric_truth(spec, pop))
        df = estimate_frame(spec, simulate_sketch(spec, pop, rng)).set_index("statistic")
        for name in hits:
            hits[name] += bool(df.loc[name, "ci_low"] <= truth[name] <= df.loc[name, "ci_high"])
    coverage = {k: v / runs for k, v in hits.items()}
    assert min(coverage.values()) >= 0.93, coverage


@pytest.mark.statistical
def test_mean_interval_coverage_of_a_mean_metric():
    """95% Wald intervals of the mean cover the clipped mean: R = 400 seeded runs, coverage
    within 3 SE (sqrt(.95·.05/400) = 1.1%) of nominal."""
    spec = parse_registry(MEAN).get("m")
    rng = np.random.default_rng(99)
    runs, hits = 400, 0
    for _ in range(runs):
        pop = draw_population(spec, 3000, "exponential:30", rng)
        truth = dict(numeric_truth(spec, pop))["mean"]
        row = estimate_frame(spec, simulate_sketch(spec, pop, rng)).set_index("statistic").loc["mean"]
        hits += bool(row["ci_low"] <= truth <= row["ci_high"])
    assert hits / runs >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / runs)


@pytest.mark.parametrize("protocol", ["grr", "oue", "olh"])
def test_cumulative_variance_is_the_linear_variance_of_each_prefix(protocol):
    """The O(d) prefix variances equal the general linear-functional ones (and 10,000 buckets
    need no d × d matrix)."""
    from estimators.numeric import cumulative_variance, linear_variance

    spec = parse_registry(HIST.replace("buckets = 4", "buckets = 12") + f'protocol = "{protocol}"\n'
                          ).get("m")
    rng = np.random.default_rng(6)
    sketch = simulate_sketch(spec, draw_population(spec, 20_000, "normal:40,20", rng), rng)
    variances = server_half(spec).estimate(sketch).variances
    fast = cumulative_variance(spec, sketch, variances)
    slow = [linear_variance(spec, sketch, variances, np.arange(12) <= k) for k in range(12)]
    np.testing.assert_allclose(fast, slow, rtol=1e-9)
    big = parse_registry(HIST.replace("buckets = 4", "buckets = 10000") + 'protocol = "oue"\n').get("m")
    sketch = simulate_sketch(big, draw_population(big, 2000, "uniform", rng), rng)
    df = estimate_frame(big, sketch)
    assert len(df) == 10_000 + 1 + len(QUANTILES)


@given(lo=st.one_of(st.integers(-10**6, 10**6), st.floats(-1e6, 1e6)),
       width=st.one_of(st.integers(1, 10**6), st.floats(1e-3, 1e6)),
       cuts=st.lists(st.floats(0.001, 0.999), min_size=1, max_size=8, unique=True),
       equal=st.integers(2, 50), use_list=st.booleans())
@settings(max_examples=60, deadline=None)
def test_any_valid_numeric_table_round_trips_exactly(lo, width, cuts, equal, use_list):
    hi = lo + width
    if not lo < hi:
        return
    edges = sorted({lo, hi, *(lo + c * (hi - lo) for c in cuts)})
    if any(not a < b for a, b in zip(edges, edges[1:])):
        return
    buckets = edges if use_list else equal
    table = {"kind": "numeric", "range": [lo, hi], "buckets": buckets, "epsilon": 1.0}
    spec = parse_registry({"metrics": {"m": table}}).get("m")
    again = parse_registry(parse_registry({"metrics": {"m": table}}).to_toml()).get("m")
    assert again == spec and again.fingerprint == spec.fingerprint
    assert len(spec.domain) == len(set(spec.domain)) == len(spec.edge_list) - 1
    assert spec.edge_list[0] == lo and spec.edge_list[-1] == hi
