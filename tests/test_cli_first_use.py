"""First use of the CLI: it answers at once, and common slips get errors that say what to do."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from cli.main import COMMANDS, main

#: Loaded only inside the commands that need them, so `ldpt --help` answers at once (bench/cli.py).
HEAVY = ("pandas", "scipy", "matplotlib", "aiohttp")


def heavy_modules_after(code: str) -> list[str]:
    """Which HEAVY packages are in sys.modules after running ``code`` in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_cli_main_loads_no_heavy_package():
    assert heavy_modules_after("import cli.main") == []


def test_ldpt_help_imports_no_subcommand_module():
    probe = ("import sys\nfrom click.testing import CliRunner\nfrom cli.main import main\n"
             "result = CliRunner().invoke(main, ['--help'])\nassert result.exit_code == 0\n"
             "print(sorted(m for m in sys.modules if m.endswith('_cmd') or m.startswith('numpy')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_lazy_command_table_matches_the_commands():
    """`ldpt --help` shows COMMANDS' text without importing; it must be each command's own."""
    ctx = click.Context(main)
    assert main.list_commands(ctx) == sorted(COMMANDS)
    for name, (_, _, short_help) in COMMANDS.items():
        cmd = main.get_command(ctx, name)
        assert cmd is not None and cmd.name == name
        assert short_help == cmd.get_short_help_str(limit=200), f"update COMMANDS[{name!r}] in cli/main.py"
    assert main.get_command(ctx, "no-such-command") is None


@pytest.mark.e2e
def test_help_of_every_command_loads_no_heavy_package():
    code = ("from click.testing import CliRunner\nfrom cli.main import main\n"
            "import click\n"
            "def walk(group, path):\n"
            "    ctx = click.Context(group)\n"
            "    for name in group.list_commands(ctx):\n"
            "        cmd = group.get_command(ctx, name)\n"
            "        r = CliRunner().invoke(main, [*path, name, '--help'])\n"
            "        assert r.exit_code == 0, (path, name, r.output)\n"
            "        if isinstance(cmd, click.Group):\n"
            "            walk(cmd, [*path, name])\n"
            "walk(main, [])")
    assert heavy_modules_after(code) == []


@pytest.fixture
def run():
    def invoke(*args: str):
        return CliRunner().invoke(main, list(args), catch_exceptions=False)
    return invoke


@pytest.mark.parametrize("order", ["since-first", "until-first"])
def test_reversed_since_until_says_so(run, registry_file, tmp_path, order):
    pair = [["--since", "2026-02-01"], ["--until", "2026-01-01"]]
    if order == "until-first":
        pair.reverse()
    result = run("estimate", "--metrics", str(registry_file), "--metric", "theme",
                 "--db", str(tmp_path / "none.sqlite"), *pair[0], *pair[1])
    assert result.exit_code == 2
    assert "--since 2026-02-01 is after --until 2026-01-01" in result.output


def test_equal_since_and_until_is_one_day_not_an_error(run, registry_file, tmp_path):
    db = tmp_path / "s.sqlite"
    run("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "500",
        "--seed", "3", "--db", str(db), "--window", "2026-01-01", "--silent")
    result = run("estimate", "--metrics", str(registry_file), "--metric", "theme", "--format", "json",
                 "--db", str(db), "--since", "2026-01-01", "--until", "2026-01-01")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["meta"]["n_reports"] == 500


@pytest.mark.parametrize("command", ["estimate", "simulate"])
def test_url_without_scheme_suggests_http(run, registry_file, tmp_path, command):
    token = tmp_path / "token.txt"
    token.write_text("t")
    extra = ["--token-file", str(token)] if command == "estimate" else ["--clients", "10"]
    result = run(command, "--metrics", str(registry_file), "--metric", "theme",
                 "--url", "127.0.0.1:8080", *extra)
    assert result.exit_code == 2
    assert "did you mean http://127.0.0.1:8080" in result.output
    bad = run(command, "--metrics", str(registry_file), "--metric", "theme", "--url", "ftp://x", *extra)
    assert bad.exit_code == 2 and "not an http:// or https:// URL" in bad.output


def test_zipf_without_exponent_is_an_error(run, registry_file, tmp_path):
    db = tmp_path / "s.sqlite"
    result = run("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "10",
                 "--distribution", "zipf", "--db", str(db), "--silent")
    assert result.exit_code == 1 and "zipf needs its exponent" in result.output
    ok = run("simulate", "--metrics", str(registry_file), "--metric", "theme", "--clients", "10",
             "--distribution", "zipf:1.1", "--db", str(db), "--silent", "--seed", "1")
    assert ok.exit_code == 0, ok.output


def test_metrics_check_prints_full_fingerprints_that_work_as_pins(run, registry_file):
    from client_sdk.registry import load_registry
    from client_sdk.remote import check_pins

    out = run("metrics", "check", str(registry_file)).output
    registry = load_registry(registry_file)
    for spec in registry:
        line = next(x for x in out.splitlines() if x.startswith(spec.name + " "))
        printed = line.split()[-1]
        assert printed == spec.fingerprint
        check_pins(registry, {spec.name: printed})   # raises FingerprintMismatch if it is not a pin


@pytest.mark.parametrize("args", [
    ["plan", "--epsilon", "nan", "--domain", "3", "--clients", "100"],
    ["estimate", "--metrics", "{reg}", "--metric", "theme", "--db", "{db}", "--confidence", "nan"],
    ["compare", "--metrics", "{reg}", "--metric", "theme", "--db", "{db}", "--window", "2026-01-01",
     "--against", "2026-01-02", "--alpha", "nan"],
    ["simulate", "--metrics", "{reg}", "--metric", "theme", "--clients", "10", "--db", "{db}",
     "--days", "2", "--change-rate", "nan"],
])
def test_nan_for_a_bounded_number_is_a_usage_error(run, registry_file, tmp_path, args):
    """click's FloatRange lets NaN through (every comparison with NaN is false)."""
    args = [a.format(reg=registry_file, db=tmp_path / "s.sqlite") for a in args]
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert "nan is not a finite number" in result.output


@pytest.mark.e2e
def test_frequency_estimate_does_not_import_scipy_stats(tmp_path):
    """`ldpt estimate` of a pure protocol's metric (hr, grr, oue) in a fresh process never
    imports scipy.stats (~0.7 s of CPU, half of such a process: issue 32): z from
    scipy.special.ndtri, the exact p-values from the Boost binomial ufunc
    (estimators/intervals.py binom_sf)."""
    registry = tmp_path / "metrics.toml"
    registry.write_text("".join(f'[metrics.{p}]\nkind = "categorical"\ncategories = {{ ids = {d} }}\n'
                                f'protocol = "{p}"\nepsilon = 2.0\n\n'
                                for p, d in (("hr", 4096), ("grr", 20), ("oue", 300))), encoding="utf-8")
    db = tmp_path / "store.sqlite"
    code = ("import sys\nfrom click.testing import CliRunner\nfrom cli.main import main\n"
            "for m in ('hr', 'grr', 'oue'):\n"
            f"    r = CliRunner().invoke(main, ['simulate', '--metrics', {str(registry)!r}, '--metric', m, "
            f"'--clients', '3000', '--db', {str(db)!r}, '--silent', '--seed', '1'])\n"
            "    assert r.exit_code == 0, r.output\n"
            "    assert 'scipy.stats' not in sys.modules, 'simulate imported scipy.stats'\n"
            f"    r = CliRunner().invoke(main, ['estimate', '--metrics', {str(registry)!r}, '--metric', m, "
            f"'--db', {str(db)!r}, '--silent', '--top', '5', '--format', 'json'])\n"
            "    assert r.exit_code == 0, r.output\n"
            "    assert '\"p_value\"' in r.output\n"
            "    print(m, sorted(x for x in sys.modules if x == 'scipy.stats' or x.startswith('scipy.stats.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-3:] == ["hr []", "grr []", "oue []"]


#: What a fresh `ldpt estimate` of a plain metric from a SQLite store does not import (issue 32):
#: the store's shuffled-batch records (no shuffler wrote to it), the dimensions of a registry
#: that declares none.
NOT_ON_THE_ESTIMATE_PATH = ("collector.storage.shuffled", "client_sdk.dimensions", "estimators.breakdown")


def test_a_fresh_store_estimate_imports_only_what_it_uses(tmp_path):
    """The console script's estimate of an hr metric loads none of NOT_ON_THE_ESTIMATE_PATH,
    and prints the same table as the command run in process."""
    registry = tmp_path / "metrics.toml"
    registry.write_text('[metrics.hr]\nkind = "categorical"\ncategories = { ids = 4096 }\nprotocol = "hr"\n'
                        'epsilon = 2.0\n', encoding="utf-8")
    db = tmp_path / "store.sqlite"
    args = ["estimate", "--metrics", str(registry), "--metric", "hr", "--db", str(db), "--silent", "--top", "5"]
    runner = CliRunner()
    assert runner.invoke(main, ["simulate", "--metrics", str(registry), "--metric", "hr", "--clients", "3000",
                                "--db", str(db), "--silent", "--seed", "1"]).exit_code == 0
    in_process = runner.invoke(main, args)
    assert in_process.exit_code == 0, in_process.output
    code = ("import atexit, json, sys\n"
            f"atexit.register(lambda: print(json.dumps([m for m in {NOT_ON_THE_ESTIMATE_PATH!r} "
            "if m in sys.modules]), file=sys.stderr))\n"
            f"sys.argv = ['ldpt', *{args!r}]\nfrom cli.main import run\nrun()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []
    assert done.stdout == in_process.stdout


def test_startup_imports_freezes_only_in_the_console_script():
    """In process ``startup_imports`` leaves the collector alone; once ``cli.main.run`` has set
    FREEZE_STARTUP it pauses the GC inside and freezes what was made, then turns it back on."""
    code = ("import gc\nimport cli.common as common\n"
            "with common.startup_imports():\n    made = [[] for _ in range(1000)]\n"
            "print(gc.get_freeze_count(), gc.isenabled())\n"
            "common.FREEZE_STARTUP = True\n"
            "with common.startup_imports():\n    more = [[] for _ in range(1000)]\n    print(gc.isenabled())\n"
            "print(gc.get_freeze_count() >= 2000, gc.isenabled())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:3] == ["0 True", "False", "True True"]
