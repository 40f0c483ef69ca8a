"""The `ldpt` CLI driven through click's CliRunner: happy paths and one-line errors."""

from __future__ import annotations

import csv
import json
import math
import sqlite3

import pytest
from click.testing import CliRunner

from cli.main import main


@pytest.fixture
def run():
    runner = CliRunner()

    def invoke(*args: str, ok: bool = True):
        result = runner.invoke(main, list(args), catch_exceptions=False)
        if ok:
            assert result.exit_code == 0, result.output
        return result

    return invoke


def test_metrics_check_lists_protocol_and_epsilon(run, registry_file):
    out = run("metrics", "check", str(registry_file)).output
    assert "3 metric(s) OK" in out
    assert "theme" in out and "grr (auto)" in out and "1.0000" in out
    assert "crash" in out and "rr" in out and "2.0000" in out


def test_simulate_then_estimate_all_formats(run, registry_file, tmp_path):
    db, truth = tmp_path / "s.sqlite", tmp_path / "truth.csv"
    run("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "5000",
        "--seed", "7", "--db", str(db), "--window", "2026-11-01", "--truth", str(truth), "--silent")
    rows = list(csv.DictReader(truth.open()))
    assert [r["value"] for r in rows] == ["light", "dark", "system"]
    assert sum(int(r["count"]) for r in rows) == 5000

    table = run("estimate", "--metrics", str(registry_file), "--metric", "theme", "--db", str(db)).output
    assert "protocol grr" in table and "reports 5,000" in table and "light" in table

    data = json.loads(run("estimate", "--metrics", str(registry_file), "--metric", "theme",
                          "--db", str(db), "--window", "2026-11-01", "--format", "json").output)
    assert data["meta"]["n_reports"] == 5000
    assert [e["value"] for e in data["estimates"]] == ["light", "dark", "system"]
    assert set(data["estimates"][0]) >= {"value", "estimate", "proportion", "std_err", "ci_low", "ci_high"}

    out_csv = tmp_path / "est.csv"
    run("estimate", "--metrics", str(registry_file), "--metric", "theme", "--db", str(db),
        "--format", "csv", "--output", str(out_csv), "--consistent", "--simultaneous")
    header = out_csv.read_text().splitlines()[0].split(",")
    assert header[:3] == ["value", "raw_estimate", "estimate"]


def test_same_seed_same_sketch(run, registry_file, tmp_path):
    outs = []
    for name in ("a", "b"):
        db = tmp_path / f"{name}.sqlite"
        run("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "2000",
            "--seed", "11", "--db", str(db), "--window", "2026-11-01", "--silent")
        outs.append(sqlite3.connect(db).execute("SELECT cohort, reports, counts FROM sketches").fetchall())
    assert outs[0] == outs[1]


def test_plot(run, registry_file, tmp_path):
    db, truth, png = tmp_path / "s.sqlite", tmp_path / "t.csv", tmp_path / "p.png"
    run("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "3000",
        "--seed", "1", "--db", str(db), "--truth", str(truth), "--silent")
    run("estimate", "--metrics", str(registry_file), "--metric", "theme", "--db", str(db),
        "--plot", str(png), "--truth", str(truth))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plan_marks_auto(run):
    out = run("plan", "--epsilon", "1", "--domain", "1024", "--clients", "100000").output
    lines = [line for line in out.splitlines() if line.startswith("* ")]
    assert len(lines) == 1
    data = json.loads(run("plan", "--epsilon", "4", "--domain", "3", "--clients", "1000",
                          "--format", "json").output)
    assert [p["protocol"] for p in data["protocols"] if p.get("auto")] == ["grr"]


@pytest.mark.parametrize("args, message", [
    (["metrics", "check", "nope.toml"], "nope.toml: file not found"),
    (["simulate", "--metrics", "{reg}", "--metric", "nope", "--clients", "10", "--db", "{db}"],
     "unknown metric 'nope'"),
    (["simulate", "--metrics", "{reg}", "--metric", "theme", "--clients", "10", "--db", "{db}",
      "--distribution", "pareto"], "unknown distribution 'pareto'"),
    (["estimate", "--metrics", "{reg}", "--metric", "theme", "--db", "{tmp}/absent.sqlite"], "no store here"),
    (["estimate", "--metrics", "{reg}", "--metric", "theme", "--db", "{tmp}/foreign.sqlite"],
     "not an ldp-telemetry store"),
])
def test_errors_are_one_clean_line(run, registry_file, tmp_path, args, message):
    foreign = tmp_path / "foreign.sqlite"
    sqlite3.connect(foreign).execute("CREATE TABLE t(x)").connection.commit()
    args = [a.format(reg=registry_file, db=tmp_path / "s.sqlite", tmp=tmp_path) for a in args]
    result = run(*args, ok=False)
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "absent.sqlite").exists()


def test_value_outside_domain_in_csv_names_file_and_line(run, registry_file, tmp_path):
    dist = tmp_path / "dist.csv"
    dist.write_text("value,count\nlight,5\npurple,3\n")
    result = run("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "10",
                 "--db", str(tmp_path / "s.sqlite"), "--distribution", f"csv:{dist}", ok=False)
    assert result.exit_code != 0 and "dist.csv" in result.output and "'purple'" in result.output
    assert not (tmp_path / "s.sqlite").exists()


def test_estimate_refuses_data_stored_under_other_parameters(run, registry_file, tmp_path):
    db = tmp_path / "s.sqlite"
    run("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "100",
        "--seed", "1", "--db", str(db), "--silent")
    changed = tmp_path / "changed.toml"
    changed.write_text(registry_file.read_text().replace("epsilon = 1.0", "epsilon = 3.0", 1))
    result = run("estimate", "--metrics", str(changed), "--metric", "theme", "--db", str(db), ok=False)
    assert "stored under other parameters" in result.output


def test_string_metric_end_to_end_and_missing_candidate_warning(run, tmp_path):
    reg = tmp_path / "m.toml"
    reg.write_text('[metrics.page]\nkind = "string"\nprotocol = "rappor"\nbloom_bits = 32\nhashes = 2\n'
                   'cohorts = 16\nprob_f = 0.25\nprob_p = 0.25\nprob_q = 0.75\n')
    db, truth = tmp_path / "s.sqlite", tmp_path / "t.csv"
    run("simulate", "--metrics", str(reg), "--metric", "page", "--clients", "40000", "--seed", "3",
        "--db", str(db), "--truth", str(truth), "--distribution", "zipf:1.5", "--silent")
    values = [line.split(",")[0] for line in truth.read_text().splitlines()[1:]]
    full, partial = tmp_path / "full.txt", tmp_path / "partial.txt"
    full.write_text("\n".join(values[:20] + ["nobody-reports-this"]) + "\n")
    partial.write_text("\n".join(values[1:20]) + "\n")  # the most frequent string is missing
    data = json.loads(run("estimate", "--metrics", str(reg), "--metric", "page", "--db", str(db),
                          "--candidates", str(full), "--format", "json").stdout)
    rows = {r["value"]: r for r in data["estimates"]}
    assert rows[values[0]]["detected"] and not rows["nobody-reports-this"]["detected"]
    assert {"p_value", "detected", "ci_low", "ci_high"} <= set(rows[values[0]])
    result = run("estimate", "--metrics", str(reg), "--metric", "page", "--db", str(db),
                 "--candidates", str(partial))
    assert "warning:" in result.stderr


# --- review fixes -------------------------------------------------------------------------------------
def test_dates_are_zero_padded_and_since_until_take_whole_days(run, registry_file, tmp_path):
    """--window 2026-9-1 was stored unpadded; --since 2026-11-30T01 silently dropped that day."""
    db = tmp_path / "s.sqlite"
    run("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "100",
        "--seed", "1", "--db", str(db), "--window", "2026-9-1", "--silent")
    assert sqlite3.connect(db).execute("SELECT DISTINCT window FROM sketches").fetchall() == [("2026-09-01",)]
    base = ["estimate", "--metrics", str(registry_file), "--metric", "theme", "--db", str(db),
            "--format", "json"]
    for extra in (["--since", "2026-8-31"], ["--until", "2026-10-1"], ["--window", "2026-9-01"]):
        assert json.loads(run(*base, *extra).output)["meta"]["n_reports"] == 100, extra
    result = run(*base, "--since", "2026-09-01T05", ok=False)
    assert result.exit_code == 2 and "select whole days" in result.output
    result = run("rappor", "export", "--metrics", str(registry_file), "--metric", "theme", "--db", str(db),
                 "--candidates", str(registry_file), "--out-dir", str(tmp_path / "x"),
                 "--window", "garbage", ok=False)
    assert result.exit_code == 2 and "'garbage' is not a date" in result.output


def test_unreadable_inputs_and_unwritable_outputs_name_the_file(run, registry_file, tmp_path):
    reg = tmp_path / "m.toml"
    reg.write_text('[metrics.page]\nkind = "string"\nprotocol = "rappor"\nbloom_bits = 32\nhashes = 2\n'
                   'cohorts = 4\n')
    db = tmp_path / "s.sqlite"
    run("simulate", "--metrics", str(reg), "--metric", "page", "--clients", "200", "--seed", "3",
        "--db", str(db), "--silent")
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe\x00junk")
    result = run("estimate", "--metrics", str(reg), "--metric", "page", "--db", str(db),
                 "--candidates", str(binary), ok=False)
    assert result.exit_code == 1 and "binary.txt: the candidates file is not UTF-8 text" in result.output
    result = run("estimate", "--metric", "page", "--url", "http://127.0.0.1:9", "--token-file", str(binary),
                 ok=False)
    assert result.exit_code == 1 and "binary.txt: the token file is not UTF-8 text" in result.output
    run("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "100",
        "--seed", "1", "--db", str(db), "--silent")
    result = run("estimate", "--metrics", str(registry_file), "--metric", "theme", "--db", str(db),
                 "--plot", str(tmp_path / "no" / "such" / "dir.png"), ok=False)
    assert result.exit_code == 1 and "dir.png: cannot write the plot" in result.output
    assert "internal error" not in result.output


def test_an_unwritable_truth_file_leaves_the_store_untouched(run, registry_file, tmp_path):
    """The store used to be written first: re-running after the error counted the run twice."""
    db = tmp_path / "s.sqlite"
    result = run("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "100",
                 "--db", str(db), "--truth", str(tmp_path / "no" / "truth.csv"), "--silent", ok=False)
    assert result.exit_code == 1 and "cannot write truth file" in result.output
    assert not db.exists() or sqlite3.connect(db).execute("SELECT count(*) FROM sketches").fetchone() == (0,)


def test_simulate_url_fails_fast_when_nothing_listens(run, registry_file, tmp_path):
    """It used to retry the first batch for 300 s against a collector that was never there."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens on it
    result = run("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "10",
                 "--url", f"http://127.0.0.1:{port}", "--silent", ok=False)
    # the GET /healthz check fails at once; the retrying sender would not say this
    assert result.exit_code == 1 and "cannot reach the collector" in result.output
    result = run("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "10",
                 "--url", f"127.0.0.1:{port}", "--silent", ok=False)
    assert result.exit_code == 2 and f"did you mean http://127.0.0.1:{port}" in result.output


def test_estimate_url_that_is_not_a_collector(run, tmp_path):
    import http.server
    import threading

    class Html(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            body = b"<html>hello</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    token = tmp_path / "token"
    token.write_text("t" * 32 + "\n")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = run("estimate", "--metric", "theme", "--url", f"http://127.0.0.1:{server.server_port}",
                     "--token-file", str(token), ok=False)
    finally:
        server.shutdown()
        server.server_close()
    assert result.exit_code == 1 and "is not an estimate document" in result.output
    assert "internal error" not in result.output


def test_demo_keep_refuses_a_directory_holding_an_earlier_store(run, tmp_path):
    """Re-running `ldpt demo --keep DIR` mixed both runs' reports: 0 of 3 truths covered."""
    (tmp_path / "ldpt.sqlite").write_bytes(b"")
    result = run("demo", "--clients", "10", "--keep", str(tmp_path), "--silent", ok=False)
    assert result.exit_code == 1 and "holds the store of an earlier demo" in result.output


def test_plan_table_columns_stay_apart_for_wide_payloads(run):
    """At d = 10^7 the share ran into the payload: '0.060691,250,000 bytes'."""
    out = run("plan", "--epsilon", "1", "--domain", "10000000", "--clients", "1000").output
    rows = {line[2:].split()[0]: line[2:].split() for line in out.splitlines()[2:-1]
            if "not available" not in line}
    assert rows["oue"][1:3] == ["60.7", "0.06069"] and rows["oue"][4:6] == ["1,250,000", "bytes"]
    for cells in rows.values():
        float(cells[2]), float(cells[3])  # the share and x-optimum columns are numbers on their own


def test_plan_shows_report_size_beside_variance_within_a_budget(run):
    out = run("plan", "--epsilon", "2", "--domain", "1000000", "--clients", "200000",
              "--max-report-bytes", "64").output
    auto = [line for line in out.splitlines() if line.startswith("* ")]
    assert len(auto) == 1 and auto[0].split()[1] == "hr" and "bits" in auto[0]
    assert "oue" in out and "(over budget)" in out and "max_report_bytes = 64" in out
    data = json.loads(run("plan", "--epsilon", "2", "--domain", "1000000", "--clients", "200000",
                          "--max-report-bytes", "64", "--format", "json").output)
    hr = next(p for p in data["protocols"] if p["protocol"] == "hr")
    assert hr["auto"] and hr["fits"] and hr["report_bytes"] <= 64 and hr["vs_optimum"] < 1.05
    olh = next(p for p in data["protocols"] if p["protocol"] == "olh")
    assert "linear family" in olh["note"]
    small = json.loads(run("plan", "--epsilon", "1", "--domain", "100", "--clients", "1000",
                           "--format", "json").output)
    note = next(p for p in small["protocols"] if p["protocol"] == "olh")["note"]
    assert "inflation 1.0" in note or "inflation 1.1" in note


def test_plan_says_when_no_report_fits_the_budget(run):
    """Regression: with a budget nothing fits, the table marked no row and its footer still said
    "(*) = what auto chooses", leaving the user to guess that auto refuses the metric."""
    out = run("plan", "--epsilon", "4", "--domain", "1000000", "--clients", "1000",
              "--max-report-bytes", "1").output
    assert not any(line.startswith("* ") for line in out.splitlines())
    assert "no protocol's report fits max_report_bytes = 1" in out and "3 bytes" in out


def test_top_keeps_the_largest_estimates(run, registry_file, tmp_path):
    db = tmp_path / "s.sqlite"
    run("simulate", "--metrics", str(registry_file), "--metric", "country", "--clients", "20000",
        "--seed", "2", "--db", str(db), "--silent")
    data = json.loads(run("estimate", "--metrics", str(registry_file), "--metric", "country", "--db", str(db),
                          "--top", "5", "--format", "json").stdout)
    estimates = [row["estimate"] for row in data["estimates"]]
    assert len(estimates) == 5 and estimates == sorted(estimates, reverse=True)
    full = json.loads(run("estimate", "--metrics", str(registry_file), "--metric", "country", "--db", str(db),
                          "--format", "json").stdout)
    assert max(row["estimate"] for row in full["estimates"]) == estimates[0]
    assert len(full["estimates"]) == 40


def test_large_tables_are_cut_to_the_largest_with_a_note(run, registry_file, tmp_path, monkeypatch):
    from collector import estimates

    monkeypatch.setattr(estimates, "DEFAULT_PAGE", 10)
    db = tmp_path / "s.sqlite"
    run("simulate", "--metrics", str(registry_file), "--metric", "country", "--clients", "5000",
        "--seed", "2", "--db", str(db), "--silent")
    result = run("estimate", "--metrics", str(registry_file), "--metric", "country", "--db", str(db))
    assert "showing the 10 largest of 40" in result.stderr
    assert len(result.stdout.strip().splitlines()) == 12  # header line, column line, 10 rows


def test_estimate_help_names_the_query_layers_page_rule():
    """--help states the page rule without loading numpy: its numbers are the query layer's."""
    from cli import estimate_cmd
    from collector import estimates

    assert (estimate_cmd.TABLE_MAX_ROWS, estimate_cmd.LARGE_DOMAIN) == (estimates.DEFAULT_PAGE,
                                                                         estimates.LARGE_DOMAIN)


def test_metrics_check_shows_report_size_beside_variance(run, tmp_path):
    reg = tmp_path / "m.toml"
    cats = ", ".join(f'"c{i}"' for i in range(5000))
    reg.write_text(f'[metrics.big]\nkind = "categorical"\nepsilon = 2.0\nmax_report_bytes = 64\n'
                   f'categories = [{cats}]\n')
    out = run("metrics", "check", str(reg)).output
    header, row = out.splitlines()[1:3]
    assert "n*var" in header and "report" in header
    cells = row.split()
    assert cells[3:5] == ["hr", "(auto)"] and cells[6] == "-" and cells[9] == "bits"
    assert float(cells[7]) < 1.03 * 4 * math.exp(2) / (math.exp(2) - 1) ** 2
