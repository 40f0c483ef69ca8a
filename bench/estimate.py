"""`ldpt estimate` of a d = 10⁶ metric against the floor of its decoding: CPU, and the ratio.

The floor is a numpy fast Walsh–Hadamard transform of 2²⁰ float64 values: the least any
decoder of a 10⁶-value sketch must do. The bench builds (once, in a temporary directory) a
registry with two 10⁶-value metrics declared as numbered domains (hr and olh, ε = 2) and a
SQLite store of ``--reports`` simulated reports of each, then measures, median of
``--repeat`` runs, the CPU seconds of:

- `ldpt estimate` in this process (imports already done): registry load, store load, decode,
  the frame (intervals, tests over every value) and the output — the bar: ≤ 5x the floor;
- the same command as a fresh process (the interpreter, its imports, everything), and fresh
  processes that only import what an estimate imports, which no fresh estimate can go below;
- its parts, in process: registry, store load, decode, frame.

    python bench/estimate.py                    # hr and olh, 10^6 reports, --top 20 and the default table
    python bench/estimate.py --reports 3000000  # olh needs ~3 reports per cohort to fill its 177,156 cohorts
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import ROOT, print_table

from sketches import server_half

REGISTRY = """
[metrics.hr1m]
kind = "categorical"
categories = {{ ids = {d} }}
protocol = "hr"
epsilon = 2.0

[metrics.olh1m]
kind = "categorical"
categories = {{ ids = {d} }}
protocol = "olh"
epsilon = 2.0
"""


#: Fresh interpreters that only import: what no `ldpt estimate` process can go below.
IMPORT_FLOORS = [
    ("python -c pass", "pass"),
    ("import numpy", "import numpy"),
    ("import cli.main, numpy, pandas, scipy.special (an estimate's imports)",
     "import cli.main, numpy, pandas, scipy.special"),
    ("import scipy.stats (no longer imported by hr, grr, oue)", "import scipy.stats"),
]


def fwht(a: np.ndarray) -> np.ndarray:
    """Fast Walsh–Hadamard transform (unnormalised), numpy butterflies, length a power of 2."""
    a = a.copy()
    n, h = a.size, 1
    while h < n:
        b = a.reshape(-1, 2, h)
        x = b[:, 0, :].copy()
        b[:, 0, :] += b[:, 1, :]
        b[:, 1, :] = x - b[:, 1, :]
        h *= 2
    return a


def cpu(fn, repeat: int) -> float:
    """Median CPU seconds (this process) of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def child_cpu(argv: list[str], repeat: int) -> float:
    """Median CPU seconds (user + system) of ``argv`` run as a fresh process."""
    times = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            sys.exit(f"{' '.join(argv)} failed: {done.stderr.strip()[-500:]}")
        times.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--protocols", nargs="+", default=["hr", "olh"])
    args = ap.parse_args()
    from click.testing import CliRunner

    from cli.main import main as ldpt

    floor = cpu(lambda: fwht(np.random.default_rng(0).standard_normal(1 << 20)), args.repeat)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ldpt-estimate-") as tmp:
        reg, db = Path(tmp) / "metrics.toml", Path(tmp) / "store.sqlite"
        reg.write_text(REGISTRY.format(d=args.d), encoding="utf-8")
        runner = CliRunner()
        for proto in args.protocols:
            metric = f"{proto}1m"
            result = runner.invoke(ldpt, ["simulate", "--metrics", str(reg), "--metric", metric, "--clients",
                                          str(args.reports), "--db", str(db), "--silent", "--seed", "1"])
            if result.exit_code != 0:
                sys.exit(result.output)
            for extra in (["--top", "20"], []):
                argv = ["estimate", "--metrics", str(reg), "--metric", metric, "--db", str(db), "--silent", *extra]
                first = runner.invoke(ldpt, argv)   # warms the imports
                if first.exit_code != 0:
                    rows.append((metric, " ".join(extra) or "(table)", "failed: " + first.output.strip()[-90:],
                                 "", "", ""))
                    continue
                inproc = cpu(lambda argv=argv: runner.invoke(ldpt, argv), args.repeat)
                fresh = child_cpu([str(Path(sys.executable).with_name("ldpt")), *argv], args.repeat)
                rows.append((metric, " ".join(extra) or "(table: 1,000 rows)", f"{inproc:.3f}",
                             f"{inproc / floor:.1f}x", f"{fresh:.2f}", f"{fresh / floor:.1f}x"))
        parts = steps(reg, db, args.protocols, args.repeat)
    # what a fresh process pays before any work: the interpreter and the imports an estimate needs
    imports = [(what, child_cpu([sys.executable, "-c", code], args.repeat)) for what, code in IMPORT_FLOORS]
    print(f"\n`ldpt estimate`, d = {args.d:,}, {args.reports:,} reports per metric, SQLite; CPU seconds, median of "
          f"{args.repeat}; floor: numpy FWHT of 2^20 = {floor * 1e3:.1f} ms (bar: <= 5x, registry load included)")
    print_table(["metric", "output", "in process s", "vs floor", "fresh process s", "vs floor"], rows)
    print_table(["fresh process", "CPU s", "vs floor"],
                [(what, f"{t:.2f}", f"{t / floor:.1f}x") for what, t in imports],
                "\nWhat a fresh process costs before it estimates (CPU seconds, median)")
    print_table(["metric", "registry s", "store load s", "decode s", "frame (top 20) s"], parts,
                "\nIn-process parts (CPU seconds, median)")


def steps(reg: Path, db: Path, protocols: list[str], repeat: int) -> list[tuple]:
    """CPU of each part of an estimate, in process."""
    from client_sdk.registry import load_registry
    from collector.storage.sqlite import open_store
    from estimators.frequency import estimate_frame

    out = []
    for proto in protocols:
        metric = f"{proto}1m"
        t_reg = cpu(lambda metric=metric: load_registry(reg).get(metric).fingerprint, repeat)
        spec = load_registry(reg).get(metric)
        impl = server_half(spec)
        store = open_store(db)
        t_load = cpu(lambda s=store, m=metric, f=spec.fingerprint, i=impl: s.load(m, f, i.new_sketch()), repeat)
        sketch = store.load(metric, spec.fingerprint, impl.new_sketch())
        store.close()
        try:
            t_dec = cpu(lambda i=impl, k=sketch: i.estimate(k), repeat)
            t_frame = cpu(lambda s=spec, k=sketch: estimate_frame(s, k, rows_wanted=(0, 20)), repeat)
            out.append((metric, f"{t_reg:.3f}", f"{t_load:.3f}", f"{t_dec:.3f}", f"{t_frame:.3f}"))
        except Exception as exc:  # noqa: BLE001 - printed as the row
            out.append((metric, f"{t_reg:.3f}", f"{t_load:.3f}", f"failed: {str(exc)[:60]}", ""))
    return out


if __name__ == "__main__":
    main()
