"""CLI start-up benchmark: how long `ldpt` takes to answer, median of repeated runs.

Each command runs as a fresh process (`.venv/bin/ldpt` or the `ldpt` next to this
interpreter), so the time includes the interpreter's start and every import the command
does. Limits (issue 12, on a 2-core machine): `ldpt --help` <= 0.3 s, `ldpt ledger` <= 0.5 s,
`ldpt metrics check docs/examples/metrics.toml` <= 0.8 s, and (issue 23) a subcommand's help
at most 1.5x `ldpt --help`. The CLI keeps them by importing numpy, pandas, scipy, matplotlib
and aiohttp only inside the commands that need them (tests/test_cli_first_use.py checks that
`import cli.main`, and `ldpt estimate --help`, load none of them).

Run: `python bench/cli.py [--repeat 5]`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, print_table

from client_sdk.ledger import Charge, Ledger, day_of
from client_sdk.registry import load_registry
from sketches import server_half

EXAMPLE = ROOT / "docs" / "examples" / "metrics.toml"


def ldpt_executable() -> str:
    """The `ldpt` console script installed beside the running interpreter."""
    script = Path(sys.executable).with_name("ldpt")
    if not script.exists():
        sys.exit(f"{script} not found: install the package first (`.venv/bin/pip install -e .`)")
    return str(script)


def make_state_dir(path: Path) -> Path:
    """A device state directory whose ledger has charged every example metric a few times."""
    registry = load_registry(EXAMPLE)
    day = day_of(time.time())
    charges = [Charge(spec.name, spec.fingerprint, day, server_half(spec).epsilon,
                      server_half(spec).epsilon_longitudinal, None, 10)
               for spec in registry for _ in range(3)]
    path.mkdir(parents=True)
    Ledger(path).commit(charges)
    return path


def time_command(argv: list[str], repeat: int) -> tuple[float, float]:
    """(median, max) wall seconds of ``repeat`` runs; a failing command stops the benchmark."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            sys.exit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return statistics.median(times), max(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="runs per command (median reported)")
    args = ap.parse_args()
    ldpt = ldpt_executable()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ldpt-bench-cli-") as tmp:
        state = make_state_dir(Path(tmp) / "state")
        cases = [("ldpt --help", [ldpt, "--help"], 0.3),
                 ("ldpt ledger --state-dir DIR", [ldpt, "ledger", "--state-dir", str(state)], 0.5),
                 ("ldpt metrics check docs/examples/metrics.toml",
                  [ldpt, "metrics", "check", str(EXAMPLE)], 0.8)]
        for label, argv, limit in cases:
            median, worst = time_command(argv, args.repeat)
            rows.append([label, median, worst, limit, "", "yes" if median <= limit else "NO"])
        for name in ("estimate", "compare"):  # help must not load the numeric stack
            # interleaved with `ldpt --help`, so a busy machine slows both alike
            base, sub = [], []
            for _ in range(args.repeat):
                base.append(time_command([ldpt, "--help"], 1)[0])
                sub.append(time_command([ldpt, name, "--help"], 1)[0])
            ratio = statistics.median(sub) / statistics.median(base)
            rows.append([f"ldpt {name} --help", statistics.median(sub), max(sub),
                         1.5 * statistics.median(base), f"{ratio:.2f}x", "yes" if ratio <= 1.5 else "NO"])
    print_table(["command", "median s", "max s", "limit s", "vs --help", "within"], rows,
                title=f"CLI start-up, median of {args.repeat} runs ({sys.platform}, Python "
                      f"{sys.version.split()[0]})")


if __name__ == "__main__":
    main()
