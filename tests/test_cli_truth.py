"""`ldpt estimate --truth`: the truth file must be the truth of the data (issue 23), and the
per-window truth that `ldpt simulate --days --truth` writes is read window by window."""

from __future__ import annotations

import csv
import io

import pytest
from click.testing import CliRunner

from cli.main import main


def ldpt(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def store(registry_file, tmp_path):
    """20,000 simulated reports of `theme` with their truth file."""
    db, truth = tmp_path / "s.sqlite", tmp_path / "truth.csv"
    r = ldpt("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "20000",
             "--seed", "1", "--db", str(db), "--truth", str(truth), "--window", "2026-03-01", "--silent")
    assert r.exit_code == 0, r.output
    return db, truth


def estimate(registry_file, db, *args: str):
    return ldpt("estimate", "--metrics", str(registry_file), "--metric", "theme", "--db", str(db), *args)


def test_matching_truth_prints_integer_counts_and_no_warning(registry_file, store):
    db, truth = store
    r = estimate(registry_file, db, "--truth", str(truth))
    assert r.exit_code == 0, r.output
    assert "warning" not in r.output
    rows = list(csv.DictReader(io.StringIO(estimate(registry_file, db, "--truth", str(truth),
                                                    "--format", "csv").output)))
    assert sum(float(row["truth"]) for row in rows) == 20000
    assert "reports 20,000" in r.output


def test_truth_of_another_metric_is_an_error(registry_file, store, tmp_path):
    db, _ = store
    hosts = tmp_path / "hosts.csv"
    hosts.write_text("value,count\nexample.com,15000\nexample.org,5000\n", encoding="utf-8")
    r = estimate(registry_file, db, "--truth", str(hosts))
    assert r.exit_code == 1
    assert "none of its values is a value of metric 'theme'" in r.output
    assert "'example.com'" in r.output


def test_truth_values_partly_outside_the_domain_warn(registry_file, store, tmp_path):
    db, truth = store
    mixed = tmp_path / "mixed.csv"
    mixed.write_text(truth.read_text(encoding="utf-8") + "sepia,7\n", encoding="utf-8")
    r = estimate(registry_file, db, "--truth", str(mixed))
    assert r.exit_code == 0
    assert "warning:" in r.output and "'sepia'" in r.output and "7 reports" in r.output


def test_a_store_holding_more_than_the_truth_warns(registry_file, store):
    """`simulate --db` adds: a second run into the same store makes n differ from the truth."""
    db, truth = store
    ldpt("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "5000",
         "--seed", "2", "--db", str(db), "--window", "2026-03-01", "--silent")
    r = estimate(registry_file, db, "--truth", str(truth))
    assert r.exit_code == 0
    assert "the truth counts 20,000 reports but the estimate holds 25,000" in r.output


def test_numeric_truth_file_counts_are_integers(registry_file, tmp_path):
    reg = tmp_path / "num.toml"
    reg.write_text('[metrics.minutes]\nkind = "numeric"\nrange = [0, 120]\nprotocol = "auto"\n'
                   'epsilon = 1.0\n', encoding="utf-8")
    truth = tmp_path / "minutes-truth.csv"
    r = ldpt("simulate", "--metrics", str(reg), "--metric", "minutes", "--clients", "3000",
             "--distribution", "exponential:20", "--seed", "1", "--db", str(tmp_path / "n.sqlite"),
             "--truth", str(truth), "--silent")
    assert r.exit_code == 0, r.output
    rows = dict(csv.reader(io.StringIO(truth.read_text(encoding="utf-8"))))
    assert rows["n"] == "3000" and rows["clipped"].isdigit()
    r = ldpt("estimate", "--metrics", str(reg), "--metric", "minutes", "--db", str(tmp_path / "n.sqlite"),
             "--truth", str(truth))
    assert r.exit_code == 0 and "warning" not in r.output


NUMERIC = """
[metrics.minutes]
kind = "numeric"
range = [0, 120]
epsilon = 1.0

[metrics.hours]
kind = "numeric"
range = [0, 24]
epsilon = 1.0

[metrics.startup]
kind = "numeric"
range = [0, 5000]
buckets = [0, 250, 500, 1000, 2000, 5000]
epsilon = 2.0

[metrics.latency]
kind = "numeric"
range = [0, 5000]
buckets = 4
epsilon = 2.0
"""


def test_a_numeric_truth_file_of_another_metric_is_refused(tmp_path):
    """A mean metric's truth for a histogram (it was accepted silently), a histogram's for a mean
    metric (a warning, and the wrong truth printed), other buckets, or a mean outside the range:
    refused, naming the file and saying which file fits (issue 31)."""
    reg = tmp_path / "num.toml"
    reg.write_text(NUMERIC, encoding="utf-8")
    dist = {"minutes": "uniform", "hours": "uniform", "startup": "lognormal:6.5,0.6", "latency": "lognormal:6.5,0.6"}
    for metric, how in dist.items():
        r = ldpt("simulate", "--metrics", str(reg), "--metric", metric, "--clients", "3000", "--distribution",
                 how, "--seed", "1", "--db", str(tmp_path / f"{metric}.sqlite"), "--truth",
                 str(tmp_path / f"{metric}-truth.csv"), "--silent")
        assert r.exit_code == 0, r.output

    def with_truth(metric: str, of: str):
        return ldpt("estimate", "--metrics", str(reg), "--metric", metric, "--db", str(tmp_path / f"{metric}.sqlite"),
                    "--truth", str(tmp_path / f"{of}-truth.csv"))

    for metric in dist:  # its own truth: no complaint
        r = with_truth(metric, metric)
        assert r.exit_code == 0 and "warning" not in r.output, (metric, r.output)
    refused = {("startup", "minutes"): "a mean metric's truth file",
               ("minutes", "startup"): "a histogram metric's truth file",
               ("latency", "startup"): "are not those of metric 'latency'",
               ("hours", "minutes"): "lies outside metric 'hours''s range [0, 24]"}
    for (metric, of), says in refused.items():
        r = with_truth(metric, of)
        assert r.exit_code == 1 and says in r.output and f"{of}-truth.csv" in r.output, (metric, of, r.output)
        assert f"ldpt simulate --metric {metric} --truth FILE" in r.output


@pytest.fixture
def days(registry_file, tmp_path):
    """Three days of `theme` from `simulate --days` with its window,value,count truth."""
    db, truth = tmp_path / "d.sqlite", tmp_path / "days-truth.csv"
    r = ldpt("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "4000",
             "--days", "3", "--change-rate", "0.2", "--window", "2026-03-07", "--seed", "3",
             "--db", str(db), "--truth", str(truth), "--silent")
    assert r.exit_code == 0, r.output
    per: dict[tuple[str, str], int] = {}
    for row in csv.DictReader(io.StringIO(truth.read_text(encoding="utf-8"))):
        per[row["window"], row["value"]] = int(row["count"])
    return db, truth, per


def test_days_truth_filtered_by_window(registry_file, days):
    db, truth, per = days
    r = estimate(registry_file, db, "--window", "2026-03-06", "--truth", str(truth), "--format", "csv")
    assert r.exit_code == 0, r.output
    got = {row["value"]: float(row["truth"]) for row in csv.DictReader(io.StringIO(r.output))}
    assert got == {v: per["2026-03-06", v] for v in ("light", "dark", "system")}


def test_days_truth_matched_per_window(registry_file, days):
    db, truth, per = days
    r = estimate(registry_file, db, "--by", "window", "--truth", str(truth), "--format", "csv")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.output)))
    assert len(rows) == 9
    for row in rows:
        assert float(row["truth"]) == per[row["window"], row["value"]]
    assert "warning" not in r.output


def test_days_truth_summed_over_the_range(registry_file, days):
    db, truth, per = days
    r = estimate(registry_file, db, "--since", "2026-03-06", "--until", "2026-03-07", "--truth", str(truth),
                 "--format", "csv")
    assert r.exit_code == 0, r.output
    got = {row["value"]: float(row["truth"]) for row in csv.DictReader(io.StringIO(r.output))}
    assert got["light"] == per["2026-03-06", "light"] + per["2026-03-07", "light"]


def test_days_truth_without_the_window_is_an_error(registry_file, days):
    db, truth, _ = days
    ldpt("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "100",
         "--seed", "5", "--db", str(db), "--window", "2026-04-01", "--silent")
    r = estimate(registry_file, db, "--window", "2026-04-01", "--truth", str(truth))
    assert r.exit_code == 1
    assert "windows 2026-03-05..2026-03-07, none in window 2026-04-01" in r.output


def test_one_population_truth_with_by_window_says_what_is_needed(registry_file, store):
    db, truth = store
    r = estimate(registry_file, db, "--by", "window", "--truth", str(truth))
    assert r.exit_code == 1
    assert "window,value,count" in r.output
