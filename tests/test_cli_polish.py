"""Small things a new user trips on (issue 31, Low): a store in a directory that does not exist,
`serve` on a busy port leaving an empty store behind, a misspelt registry field or setting, a
config file's errors, re-running a simulation into the same store, and shell completion."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import main

ROOT = Path(__file__).resolve().parent.parent
METRICS = ROOT / "docs" / "examples" / "metrics.toml"


def ldpt(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env)


def serve(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`ldpt serve` that is expected to fail at start-up (its exit code and stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPT_")}
    return subprocess.run([sys.executable, "-c", "from cli.main import main; main()", "serve", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.e2e
def test_a_store_in_a_missing_directory_says_the_directory_is_missing(tmp_path):
    missing = tmp_path / "no" / "such"
    db = str(missing / "ldpt.sqlite")
    for args in (["estimate", "--metrics", str(METRICS), "--metric", "country", "--db", db],
                 ["compare", "--metrics", str(METRICS), "--metric", "country", "--db", db, "--window",
                  "2026-11-01", "--against", "2026-11-02"],
                 ["simulate", "--metrics", str(METRICS), "--metric", "country", "--clients", "10", "--db", db,
                  "--silent"]):
        r = ldpt(*args)
        assert r.exit_code == 1 and f"the directory {missing} does not exist" in r.output, (args, r.output)
    done = serve("--metrics", str(METRICS), "--db", db, "--port", "0", cwd=tmp_path)
    assert done.returncode == 1 and f"the directory {missing} does not exist" in done.stderr
    assert f"mkdir -p {missing}" in done.stderr and not missing.exists()


@pytest.mark.e2e
def test_serve_on_a_busy_port_creates_no_store(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for workers in ("1", "2"):
            done = serve("--metrics", str(METRICS), "--db", "fresh.sqlite", "--port", str(port),
                         "--workers", workers, cwd=tmp_path)
            assert done.returncode == 1 and "Address already in use" in done.stderr, done.stderr
            assert not (tmp_path / "fresh.sqlite").exists(), f"--workers {workers} left a store behind"


@pytest.mark.parametrize(("toml", "says"), [
    ('[metrics.theme]\nkind = "categorical"\ncategores = ["a", "b"]\nepsilon = 1.0\n',
     "field 'categores': unknown field; did you mean 'categories'?"),
    ('[metrics.theme]\nkind = "boolean"\nepsilon = 1.0\ndescripton = "x"\n',
     "field 'descripton': unknown field; did you mean 'description'?"),
    ('[metrics.t]\nkind = "numeric"\nrange = [0, 1]\nbucket = 4\nepsilon = 1.0\n',
     "field 'bucket': unknown field; did you mean 'buckets'?"),
    ('[metrics.h]\nkind = "string"\nprotocol = "rappor"\nbloom_bit = 64\n',
     "did you mean 'bloom_bits'?"),
    ('[metric.theme]\nkind = "boolean"\n', "did you mean [metrics]?"),
    ('[device]\nepsilon_per_windows = 1.0\n[metrics.t]\nkind = "boolean"\nepsilon = 1.0\n',
     "did you mean 'epsilon_per_window'?"),
])
def test_a_misspelt_registry_field_gets_a_suggestion(tmp_path, toml, says):
    path = tmp_path / "metrics.toml"
    path.write_text(toml, encoding="utf-8")
    r = ldpt("metrics", "check", str(path))
    assert r.exit_code == 1 and says in r.output and str(path) in r.output, r.output


def test_a_registry_field_that_is_no_misspelling_gets_none(tmp_path):
    path = tmp_path / "metrics.toml"
    path.write_text('[metrics.t]\nkind = "boolean"\nepsilon = 1.0\nprotocol = "rr"\nzzz = 1\n', encoding="utf-8")
    r = ldpt("metrics", "check", str(path))
    assert r.exit_code == 1 and "field 'zzz': unknown field" in r.output and "did you mean" not in r.output


@pytest.mark.e2e
def test_config_file_errors_name_the_file_and_the_key(tmp_path):
    conf = tmp_path / "serve.toml"
    conf.write_text('metrics_file = "nope.toml"\n', encoding="utf-8")
    done = serve("--config", str(conf), "--port", "0", cwd=tmp_path)
    assert done.returncode == 1 and f"{conf}: metrics_file: no such file {tmp_path / 'nope.toml'}" in done.stderr, \
        done.stderr
    conf.write_text(f'metrics_file = "{METRICS}"\nprot = 8080\n', encoding="utf-8")
    done = serve("--config", str(conf), cwd=tmp_path)
    assert done.returncode == 1 and f"{conf}: unknown setting 'prot'; did you mean 'port'?" in done.stderr
    conf.write_text(f'metrics_file = "{METRICS}"\nquery_token_file = "token.txt"\n', encoding="utf-8")
    done = serve("--config", str(conf), cwd=tmp_path)
    assert done.returncode == 1 and f"{conf}: query_token_file: no such file {tmp_path / 'token.txt'}" in done.stderr
    assert not (tmp_path / "ldpt.sqlite").exists()


def test_simulating_again_into_a_store_says_the_data_adds_up(tmp_path):
    db, truth = tmp_path / "ldpt.sqlite", tmp_path / "truth.csv"
    args = ["simulate", "--metrics", str(METRICS), "--metric", "country", "--clients", "1000", "--seed", "1",
            "--db", str(db), "--window", "2026-11-01", "--silent", "--truth", str(truth)]
    first = ldpt(*args)
    assert first.exit_code == 0 and "already held" not in first.output
    again = ldpt(*args)
    assert again.exit_code == 0
    assert f"note: {db} already held 1,000 reports of country in window 2026-11-01" in again.output
    assert f"{truth} is the truth of this run only" in again.output
    other_day = ldpt(*args[:-5], "--window", "2026-11-02", "--silent")
    assert other_day.exit_code == 0 and "already held" not in other_day.output


def test_shell_completion_completes_commands_and_options():
    env = {"_LDPT_COMPLETE": "bash_complete", "COMP_WORDS": "ldpt est", "COMP_CWORD": "1"}
    r = CliRunner().invoke(main, [], env=env, prog_name="ldpt")
    assert "plain,estimate" in r.output
    env.update(COMP_WORDS="ldpt estimate --win", COMP_CWORD="2")
    r = CliRunner().invoke(main, [], env=env, prog_name="ldpt")
    assert "plain,--window" in r.output
    r = CliRunner().invoke(main, [], env={"_LDPT_COMPLETE": "bash_source"}, prog_name="ldpt")
    assert "complete -o nosort -F _ldpt_completion ldpt" in r.output
