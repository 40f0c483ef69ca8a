"""The CLI on first use, second pass (issue 23): help without the numeric stack, --plot failing
before the work, progress only on a terminal, --cacert for a private CA, errors that say what
to do, and output that reads the same everywhere (thousands separators, plurals)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import cli.common
from cli.main import main

from .collector_support import Server
from .test_collector_operations import self_signed

ROOT = Path(__file__).resolve().parent.parent


def ldpt(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("command", ["estimate", "compare"])
def test_subcommand_help_imports_no_numeric_stack(command):
    """`ldpt estimate --help` loaded numpy through the registry (392 ms against 112 ms)."""
    probe = ("import sys\nfrom click.testing import CliRunner\nfrom cli.main import main\n"
             f"r = CliRunner().invoke(main, [{command!r}, '--help'])\nassert r.exit_code == 0, r.output\n"
             "print(sorted(m for m in ('numpy', 'pandas', 'scipy', 'client_sdk.registry') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_plot_without_matplotlib_fails_before_the_work(tmp_path, registry_file, monkeypatch):
    db = tmp_path / "s.sqlite"
    ldpt("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "500", "--seed", "1",
         "--db", str(db), "--silent")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    r = ldpt("estimate", "--metrics", str(registry_file), "--metric", "theme", "--db", str(db),
             "--plot", str(tmp_path / "p.png"))
    assert r.exit_code == 1
    assert r.output.strip() == "Error: plotting needs matplotlib: pip install 'ldp-telemetry[plot]'"
    # the check comes first: not even a missing store is looked at
    r = ldpt("estimate", "--metrics", str(registry_file), "--metric", "theme", "--db", str(tmp_path / "none"),
             "--plot", str(tmp_path / "p.png"))
    assert "pip install 'ldp-telemetry[plot]'" in r.output


def test_plot_extra_is_named_where_plot_is_first_documented():
    text = (ROOT / "docs" / "guide-analysts.md").read_text(encoding="utf-8")
    first = text.index("--plot out.png`")
    assert "pip install 'ldp-telemetry[plot]'" in text[first:first + 200]


class _Tty:
    """A stand-in standard error that says it is a terminal and records what is written."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self.parts.append(s)
        return len(s)

    def flush(self) -> None:
        pass


def test_progress_only_on_a_terminal_and_never_with_silent(monkeypatch):
    assert not cli.common.progress_shown(False)  # pytest's captured stderr is no terminal
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    assert cli.common.progress_shown(False) and not cli.common.progress_shown(True)
    with cli.common.Working("estimating home_page", silent=False, interval=0.01) as work:
        work.step("estimating home_page from 300,000 reports")
        import time

        deadline = time.monotonic() + 10
        while not any("300,000" in p for p in tty.parts) and time.monotonic() < deadline:
            time.sleep(0.01)
    text = "".join(tty.parts)
    assert "estimating home_page from 300,000 reports ... " in text
    assert text.endswith("\r\x1b[K")  # the line is erased at the end
    tty.parts.clear()
    with cli.common.Working("x", silent=True, interval=0.01):
        time.sleep(0.05)
    assert tty.parts == []


@pytest.mark.e2e
def test_estimate_and_simulate_print_no_progress_when_not_a_terminal(tmp_path, registry_file):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPT_")}
    run = [sys.executable, "-c", "from cli.main import main; main()"]
    sim = subprocess.run([*run, "simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients",
                          "2000", "--seed", "1", "--db", str(tmp_path / "s.sqlite")],
                         capture_output=True, text=True, env=env, check=True)
    assert "simulating" not in sim.stderr  # the bar's label is not printed to a pipe
    assert sim.stderr.startswith("2,000 simulated reports of theme")
    est = subprocess.run([*run, "estimate", "--metrics", str(registry_file), "--metric", "theme", "--db",
                          str(tmp_path / "s.sqlite")], capture_output=True, text=True, env=env, check=True)
    assert est.stderr == ""


def test_fingerprint_mismatch_says_what_to_do(tmp_path, registry_file):
    db = tmp_path / "s.sqlite"
    ldpt("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "500", "--seed", "1",
         "--db", str(db), "--silent")
    changed = tmp_path / "changed.toml"
    changed.write_text(registry_file.read_text(encoding="utf-8").replace("epsilon = 1.0", "epsilon = 1.5", 1),
                       encoding="utf-8")
    r = ldpt("estimate", "--metrics", str(changed), "--metric", "theme", "--db", str(db))
    assert r.exit_code == 1
    assert "was stored under other parameters" in r.output
    assert "Estimate with the registry file the data was collected under" in r.output
    assert "ldpt metrics check FILE" in r.output


def test_compare_of_a_window_with_itself_says_two_are_needed(tmp_path, registry_file):
    db = tmp_path / "s.sqlite"
    ldpt("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "500", "--seed", "1",
         "--db", str(db), "--window", "2026-03-01", "--silent")
    r = ldpt("compare", "--metrics", str(registry_file), "--metric", "theme", "--db", str(db),
             "--window", "2026-03-01", "--against", "2026-03-01")
    assert r.exit_code == 2 and "needs two different windows" in r.output


def test_plurals_and_thousands_separators(tmp_path, registry_file):
    from cli.common import plural
    from cli.plan_cmd import _bits

    assert plural(1, "window") == "1 window" and plural(2, "window") == "2 windows"
    assert plural(1, "batch", "batches") == "1 batch" and plural(12345, "report") == "12,345 reports"
    assert _bits(1) == "1 bit" and _bits(2) == "2 bits"


def test_negative_estimates_are_explained_in_the_table():
    import pandas as pd

    from cli.output import frame_to_table

    df = pd.DataFrame({"value": ["a.example", "decoy.example"], "estimate": [900.0, -120.0],
                       "ci_low": [700.0, 0.0], "ci_high": [1100.0, 152.0]})
    text = frame_to_table(df)
    assert "note: 1 estimate is below 0" in text and "clipped at 0" in text
    assert "note:" not in frame_to_table(df.assign(estimate=[900.0, 12.0]))


def test_series_csv_leaves_detected_empty_for_empty_windows():
    import csv
    import io

    import pandas as pd

    from estimators.formats import frame_to_csv

    df = pd.DataFrame({"window": ["2026-03-01", "2026-03-02"], "value": ["a", "a"],
                       "estimate": [10.0, float("nan")], "detected": [True, False], "n": [100, 0]})
    rows = list(csv.DictReader(io.StringIO(frame_to_csv(df))))
    assert rows[0]["detected"] == "True" and rows[1]["detected"] == ""


def test_cacert_without_url_is_a_usage_error(tmp_path, registry_file):
    pem = tmp_path / "ca.pem"
    pem.write_text("x", encoding="utf-8")
    r = ldpt("estimate", "--metrics", str(registry_file), "--metric", "theme", "--db", str(tmp_path / "s"),
             "--cacert", str(pem))
    assert r.exit_code == 2 and "--cacert applies to an https:// --url" in r.output


@pytest.mark.e2e
def test_cacert_trusts_a_self_signed_collector(tmp_path, registry_file):
    """Without --cacert: CERTIFICATE_VERIFY_FAILED with the hint; with it: the estimate."""
    cert, key = self_signed(tmp_path)
    token = tmp_path / "token.txt"
    token.write_text("a-test-token-0123456789\n", encoding="utf-8")
    token.chmod(0o600)
    args = ["--metrics", str(registry_file), "--db", str(tmp_path / "c.sqlite"), "--port", "0",
            "--tls-cert", str(cert), "--tls-key", str(key), "--query-token-file", str(token)]
    server = Server(args, tmp_path, url_pattern=r"listening on (https://[\d.]+:\d+)")
    try:
        sim = ["simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "300",
               "--seed", "1", "--url", server.url, "--silent"]
        r = ldpt(*sim)
        assert r.exit_code == 1
        assert "CERTIFICATE_VERIFY_FAILED" in r.output and "--cacert FILE" in r.output
        assert "SSL_CERT_FILE" in r.output
        assert ldpt(*sim, "--cacert", str(cert)).exit_code == 0
        est = ["estimate", "--metrics", str(registry_file), "--metric", "theme", "--url", server.url,
               "--token-file", str(token)]
        r = ldpt(*est)
        assert r.exit_code == 1 and "--cacert FILE" in r.output
        r = ldpt(*est, "--cacert", str(cert))
        assert r.exit_code == 0, r.output
        assert "reports 300" in r.output
    finally:
        assert server.terminate() == 0


def test_query_api_refuses_comparing_a_window_with_itself():
    from collector.problems import Problem
    from collector.query import parse_compare

    with pytest.raises(Problem, match="needs two different windows"):
        parse_compare({"a": "2026-03-01", "b": "2026-03-01"})
