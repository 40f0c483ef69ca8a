"""`ldpt simulate --days`, `ldpt estimate` per window and `ldpt metrics check` for memoised metrics."""

from __future__ import annotations

import csv
import json

from click.testing import CliRunner

from cli.main import main

REGISTRY = """
[device]
epsilon_per_window = 2

[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system"]
epsilon = 1.0
epsilon_inf = 4.0

[metrics.city]
kind = "categorical"
categories = ["c0", "c1", "c2", "c3", "c4", "c5"]
protocol = "loloha"
epsilon = 1.0
epsilon_inf = 3.0
hash_range = 2

[metrics.flag]
kind = "boolean"
protocol = "rr"
epsilon = 1.0
"""


def registry(tmp_path):
    path = tmp_path / "metrics.toml"
    path.write_text(REGISTRY, encoding="utf-8")
    return path


def test_simulate_days_writes_one_window_per_day_and_the_truth(tmp_path):
    path, db, truth = registry(tmp_path), tmp_path / "s.db", tmp_path / "truth.csv"
    runner = CliRunner()
    out = runner.invoke(main, ["simulate", "--metrics", str(path), "--metric", "theme", "--clients", "3000",
                               "--days", "5", "--change-rate", "0.2", "--window", "2026-03-05", "--db", str(db),
                               "--truth", str(truth), "--seed", "4", "--silent"])
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(truth.open()))
    assert rows[0].keys() == {"window", "value", "count"}
    windows = sorted({r["window"] for r in rows})
    assert windows == ["2026-03-01", "2026-03-02", "2026-03-03", "2026-03-04", "2026-03-05"]
    for w in windows:
        assert sum(int(r["count"]) for r in rows if r["window"] == w) == 3000
        est = runner.invoke(main, ["estimate", "--metrics", str(path), "--metric", "theme", "--db", str(db),
                                   "--window", w, "--format", "json"])
        assert est.exit_code == 0, est.output
        doc = json.loads(est.output)
        data = doc["rows"] if isinstance(doc, dict) and "rows" in doc else doc
        assert "lgrr" in est.output and len(data) >= 1


def test_simulate_days_argument_errors(tmp_path):
    path = registry(tmp_path)
    runner = CliRunner()
    base = ["simulate", "--metrics", str(path), "--metric", "theme", "--clients", "10"]
    out = runner.invoke(main, [*base, "--days", "3", "--url", "http://127.0.0.1:9"])
    assert out.exit_code != 0 and "--days" in out.output
    out = runner.invoke(main, [*base, "--change-rate", "0.5", "--db", str(tmp_path / "x.db")])
    assert out.exit_code != 0 and "--change-rate" in out.output
    out = runner.invoke(main, [*base, "--days", "0", "--db", str(tmp_path / "x.db")])
    assert out.exit_code != 0 and "--days" in out.output
    out = runner.invoke(main, [*base, "--days", "2", "--change-rate", "1.5", "--db", str(tmp_path / "x.db")])
    assert out.exit_code != 0 and "--change-rate" in out.output


def test_metrics_check_shows_both_epsilons_and_the_device_warning(tmp_path):
    out = CliRunner().invoke(main, ["metrics", "check", str(registry(tmp_path))])
    assert out.exit_code == 0, out.output
    assert "lgrr (auto)" in out.output and "4.0000" in out.output
    assert "at most g = 2 x eps inf" in out.output
    assert "exceeds the device cap 2" in out.output and "flag would go unsent" in out.output


def test_registry_errors_for_epsilon_inf_name_the_field(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[metrics.m]\nkind = "boolean"\nprotocol = "grr"\nepsilon = 1\nepsilon_inf = 2\n')
    out = CliRunner().invoke(main, ["metrics", "check", str(bad)])
    assert out.exit_code != 0 and "epsilon_inf" in out.output and str(bad) in out.output
    bad.write_text('[metrics.m]\nkind = "boolean"\nepsilon = 3\nepsilon_inf = 2\n')
    out = CliRunner().invoke(main, ["metrics", "check", str(bad)])
    assert out.exit_code != 0 and "must be below epsilon_inf" in out.output
    bad.write_text('[device]\nepsilon_per_window = -1\n[metrics.m]\nkind = "boolean"\nepsilon = 1\n')
    out = CliRunner().invoke(main, ["metrics", "check", str(bad)])
    assert out.exit_code != 0 and "device.epsilon_per_window" in out.output


NUMERIC = """
[metrics.hist]
kind = "numeric"
range = [0, 10]
buckets = [0, 2, 4, 6, 8, 10]
epsilon = 1.0
epsilon_inf = 3.0

[metrics.load]
kind = "numeric"
range = [0, 10]
epsilon = 1.0
epsilon_inf = 3.0
"""


def test_simulate_days_histogram_uses_the_numeric_default_distribution(tmp_path):
    """A memoised histogram reports bucket indices every day; its default distribution is
    `uniform` over the range (as without --days), and the truth has one row per bucket and day."""
    path, db, truth = tmp_path / "n.toml", tmp_path / "n.db", tmp_path / "truth.csv"
    path.write_text(NUMERIC, encoding="utf-8")
    out = CliRunner().invoke(main, ["simulate", "--metrics", str(path), "--metric", "hist", "--clients", "2000",
                                    "--days", "3", "--change-rate", "0.5", "--window", "2026-03-03",
                                    "--db", str(db), "--truth", str(truth), "--seed", "1", "--silent"])
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(truth.open()))
    assert len(rows) == 3 * 5
    for w in ("2026-03-01", "2026-03-02", "2026-03-03"):
        counts = [int(r["count"]) for r in rows if r["window"] == w]
        assert sum(counts) == 2000 and min(counts) > 300   # uniform over 5 buckets: 400 each


def test_simulate_days_refuses_a_numeric_mean_before_writing_anything(tmp_path):
    path, db, truth = tmp_path / "n.toml", tmp_path / "n.db", tmp_path / "truth.csv"
    path.write_text(NUMERIC, encoding="utf-8")
    out = CliRunner().invoke(main, ["simulate", "--metrics", str(path), "--metric", "load", "--clients", "100",
                                    "--days", "3", "--db", str(db), "--truth", str(truth), "--silent"])
    assert out.exit_code != 0 and "internal error" not in out.output
    assert "--days" in out.output and "load" in out.output
    assert not db.exists() and not truth.exists()


def test_metrics_check_refuses_metrics_the_ledger_could_never_send(tmp_path):
    """A first report costs eps in the window and eps_inf (memoised) or eps over the lifetime: a
    cap below that would refuse every report of the metric, so the registry refuses the cap,
    naming the field and the metric (`metrics check` prints it on one line)."""
    cases = {
        "wide": ('[device]\nepsilon_per_window = 2.5\n', 'epsilon = 3\nepsilon_inf = 4\n', "epsilon_per_window"),
        "deep": ('[device]\nlifetime_epsilon = 5\n', 'epsilon = 1\nepsilon_inf = 6\n', "lifetime_epsilon"),
        "own": ('', 'epsilon = 1\nepsilon_inf = 3\nlifetime_epsilon = 2\n', "lifetime_epsilon"),
    }
    for name, (device, fields, field) in cases.items():
        path = tmp_path / f"{name}.toml"
        path.write_text(f'{device}[metrics.{name}]\nkind = "boolean"\n{fields}', encoding="utf-8")
        out = CliRunner().invoke(main, ["metrics", "check", str(path)])
        assert out.exit_code == 1, out.output
        assert name in out.output and field in out.output and "internal error" not in out.output

