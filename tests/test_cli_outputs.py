"""`ldpt plan` and `ldpt metrics check` print what tests/cli_outputs/ recorded, byte for byte.

Their figures come from the library (estimators/plan.py, the server halves' planning verbs, the
protocol factory's variance); the CLI only formats them, and moving logic between the two must not
move a digit of any format. If an output is meant to change, rerun
``.venv/bin/python -m tests.test_cli_outputs --write`` and say why in the commit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import main

HERE = Path(__file__).resolve().parent / "cli_outputs"

#: name -> the command's arguments: every kind of plan (the protocols within and over a budget, one
#: unavailable, OLH's random and linear families and its empty cohorts, none fitting, a binary domain,
#: the numeric mechanisms, discover, a joint metric, the shuffler's rows) and every example registry.
PLANS = {
    "plan-d1024": ["--epsilon", "1", "--domain", "1024", "--clients", "100000"],
    "plan-empty-cohorts": ["--epsilon", "2", "--domain", "1000000", "--clients", "1000000"],
    "plan-d3": ["--epsilon", "4", "--domain", "3", "--clients", "1000"],
    "plan-binary": ["--epsilon", "0.5", "--domain", "2", "--clients", "1000"],
    "plan-olh-unavailable": ["--epsilon", "1", "--domain", "10000000", "--clients", "1000"],
    "plan-tight-budget": ["--epsilon", "2", "--domain", "1000000", "--clients", "200000",
                          "--max-report-bytes", "2"],
    "plan-random-family": ["--epsilon", "3", "--domain", "50", "--clients", "5000", "--max-report-bytes", "3"],
    "plan-range": ["--range", "0,120", "--epsilon", "1", "--clients", "10000"],
    "plan-range-small-eps": ["--range", "-5,5", "--epsilon", "0.3", "--clients", "7"],
    "plan-discover": ["--discover", "--epsilon", "4", "--clients", "100000"],
    "plan-joint": ["--metrics", "docs/examples/joint.toml", "--metric", "startup_by_os", "--clients", "100000"],
    "plan-shuffled": ["--shuffled", "--epsilon", "2", "--domain", "20", "--clients", "10000"],
    "plan-central": ["--central-epsilon", "1", "--domain", "20", "--clients", "10000"],
}
COMMANDS = {f"{name}.{fmt}": ["plan", *args, "--format", fmt] for name, args in PLANS.items()
            for fmt in ("table", "json", "csv")}
COMMANDS.update({f"metrics-check-{stem}": ["metrics", "check", f"docs/examples/{stem}.toml"]
                 for stem in ("metrics", "longitudinal", "discovery", "joint", "dimensions")})


def run(args: list[str]) -> tuple[str, str]:
    """(stdout, stderr) of a successful ``ldpt`` command run from the repository root."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.stdout, result.stderr


def expected(name: str) -> tuple[str, str]:
    """The recorded stdout and stderr (a missing .stderr file: nothing was written there)."""
    err = HERE / f"{name}.stderr"
    return ((HERE / f"{name}.txt").read_text(encoding="utf-8"),
            err.read_text(encoding="utf-8") if err.exists() else "")


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    monkeypatch.chdir(HERE.parent.parent)   # the commands name docs/examples/ relative to it


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_output_is_what_was_recorded(name):
    assert run(COMMANDS[name]) == expected(name)


def test_every_recording_has_its_command():
    """No recording is left over from a command taken out of COMMANDS (it would test nothing)."""
    recorded = {p.name.rsplit(".", 1)[0] for p in HERE.iterdir()}
    assert recorded == set(COMMANDS)


def write() -> None:
    """Record every command's current output (only for a change of output that is intended)."""
    HERE.mkdir(exist_ok=True)
    for old in HERE.iterdir():
        old.unlink()
    for name, args in COMMANDS.items():
        out, err = run(args)
        (HERE / f"{name}.txt").write_text(out, encoding="utf-8")
        if err:
            (HERE / f"{name}.stderr").write_text(err, encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.test_cli_outputs --write")
    write()
