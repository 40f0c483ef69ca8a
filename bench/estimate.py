"""`ldpt estimate` of a d = 10⁶ metric against the floor of its decoding: CPU, and the ratio.

The floor is a numpy fast Walsh–Hadamard transform of 2²⁰ float64 values: the least any
decoder of a 10⁶-value sketch must do. The bench builds (once, in a temporary directory) a
registry with two 10⁶-value metrics declared as numbered domains (hr and olh, ε = 2) and a
SQLite store of ``--reports`` simulated reports of each, then measures, median of
``--repeat`` runs (at least 5 for the bar), the CPU seconds (user + system) of:

- `ldpt estimate` as a fresh process (the interpreter, its imports, registry load, store read,
  decode, frame, output): **the bar** (issue 32): ≤ 5× the floor, printed as the ratio;
- the same command in this process (imports already done), for comparison;
- fresh processes that only import (the interpreter, numpy), which no estimate can go below;
- its parts, in process: registry, store load, decode, frame.

``--instructions``: the same ratio in instructions (valgrind's callgrind, when installed), which
contention on a shared machine does not move: the fresh command's against one transform's
(the difference of a child running three transforms and one, halved). It counts no page fault
and no memory stall, so it is a check of the CPU figure, not the bar.

``--profile``: where a fresh process's CPU goes, step by step (a child process timing each
step with ``time.process_time``: imports, registry, store read, the decoder's direction
table and transform, the frame's tests and intervals, the output), and the largest imports by
``python -X importtime`` of the real command. The load average is printed with each table:
the machine is shared, and CPU time grows with contention.

    python bench/estimate.py                     # hr and olh, 10^6 reports, --top 20 and the default table
    python bench/estimate.py --protocols hr --profile   # the bar's command and where its CPU goes
    python bench/estimate.py --protocols hr --repeat 9 --instructions   # and the ratio in instructions
    python bench/estimate.py --reports 3000000   # olh needs ~3 reports per cohort to fill its 177,156 cohorts
    git archive 3f792d4 | tar -x -C /tmp/base && python bench/estimate.py --protocols hr --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
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
    ("import numpy (one BLAS thread, as the command sets)", "import cli, numpy"),
    ("import cli.main, collector.estimates, numpy (a table's imports)",
     "import cli.main, collector.estimates, numpy"),
    ("import pandas, scipy.special (CSV / JSON output, non-pure protocols)", "import pandas, scipy.special"),
]

#: The child of --profile: each step of a fresh table estimate, timed where it runs.
PROFILE_CHILD = r"""
import json, sys, time
cpu = time.process_time
marks = [("interpreter start to the first line", cpu())]
def mark(name):
    marks.append((name, cpu()))
import cli   # first, as the command: it sets one BLAS thread before numpy loads (cli/__init__.py)
import numpy as np
mark("import numpy")
import cli.main, cli.estimate_cmd, cli.output, collector.estimates, collector.storage.sqlite
import collector.storage.sync_reads, cli.store_rules, cli.dates, client_sdk.registry   # what the command imports (no asyncio)
mark("import the command (click, cli, query layer, stores)")
from client_sdk.registry import load_registry
spec = load_registry(sys.argv[1]).get(sys.argv[2])
spec.fingerprint
from sketches import server_half
impl = server_half(spec)
mark("registry load (numbered domain), protocol")
from collector.storage.sqlite import open_store
store = open_store(sys.argv[3], create=False)
sketch = store.load(spec.name, spec.fingerprint, impl.new_sketch())
store.close()
mark("store read (merged sketch)")
est = impl.estimate(sketch)
mark("decode: transform, estimates, variances")
impl.estimate = lambda _sketch: est     # the frame's own work below, not a second decode
from estimators.frequency import estimate_frame
cols = estimate_frame(spec, sketch, rows_wanted=(0, 1000), columns=True, digits="table")
mark("frame: tail p-values, Holm over d, page, intervals")
from collector.estimates import largest
from cli.output import format_frame
text = format_frame(largest(cols, 1000), "table")
mark("output: table of 1,000 rows")
print(json.dumps({"marks": marks, "modules": sorted({m.split('.')[0] for m in sys.modules})}))
"""


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


#: The environment of every measured child: bytecode cached (in a directory of the bench's own,
#: warmed by a first unmeasured run), as an installed `ldpt` runs — pip compiles a package's
#: modules when it installs them. A shell with PYTHONDONTWRITEBYTECODE=1 (as this project's
#: sessions run) otherwise compiles every project module from source at each start, 0.1–0.3 s
#: more of CPU; ``--compile-each-run`` measures that way.
CHILD_ENV = dict(os.environ)


def child_env(compile_each_run: bool, cache_dir: Path) -> None:
    """Set ``CHILD_ENV`` for the run: cached bytecode under ``cache_dir`` unless ``compile_each_run``."""
    CHILD_ENV.clear()
    CHILD_ENV.update(os.environ)
    if not compile_each_run:
        CHILD_ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        CHILD_ENV["PYTHONPYCACHEPREFIX"] = str(cache_dir)


def child_cpu(argv: list[str], repeat: int, between: Callable[[], float] | None = None) -> float:
    """Median CPU seconds (user + system) of ``argv`` run as a fresh process (after one
    unmeasured run that writes its bytecode caches). ``between``, if given, runs after each child
    (the floor's transform, timed: ``FLOOR_SAMPLES``), so the two see the same contention."""
    subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=CHILD_ENV)
    times = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=CHILD_ENV)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            sys.exit(f"{' '.join(argv)} failed: {done.stderr.strip()[-500:]}")
        times.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if between is not None:
            between()
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--protocols", nargs="+", default=["hr", "olh"])
    ap.add_argument("--profile", action="store_true", help="where a fresh process's CPU goes, step by step")
    ap.add_argument("--instructions", action="store_true",
                    help="the ratio in instructions too (valgrind --tool=callgrind; load-independent)")
    ap.add_argument("--compile-each-run", action="store_true",
                    help="children without bytecode caches (as under PYTHONDONTWRITEBYTECODE=1): every "
                         "project module compiled from source at each start")
    ap.add_argument("--baseline", type=Path, default=None, metavar="DIR",
                    help="a checkout of an older revision (git archive REV | tar -x -C DIR): its fresh "
                         "`ldpt estimate` runs interleaved with this one's, the same command and store")
    args = ap.parse_args()
    if args.repeat < 5:
        print(f"note: --repeat {args.repeat}: the bar's median wants at least 5 runs", file=sys.stderr)
    from click.testing import CliRunner

    from cli.main import main as ldpt

    signal = np.random.default_rng(0).standard_normal(1 << 20)   # drawn once: the floor is the transform alone
    floor_samples: list[float] = []

    def floor_sample() -> float:
        """One timed transform, kept: the floor is the median of all of them."""
        t0 = time.process_time()
        fwht(signal)
        floor_samples.append(time.process_time() - t0)
        return floor_samples[-1]

    for _ in range(args.repeat):
        floor_sample()
    rows, compared, counted = [], [], []
    with tempfile.TemporaryDirectory(prefix="ldpt-estimate-") as tmp:
        child_env(args.compile_each_run, Path(tmp) / "pycache")
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
                    rows.append((metric, " ".join(extra) or "(table)", "failed: " + first.output.strip()[-90:], "",
                                 "", "", "", ""))
                    continue
                inproc = cpu(lambda argv=argv: runner.invoke(ldpt, argv), args.repeat)
                # the transform is timed after each child: this row's floor saw the children's contention
                before = len(floor_samples)
                fresh = child_cpu([str(Path(sys.executable).with_name("ldpt")), *argv], args.repeat, floor_sample)
                floor = statistics.median(floor_samples[before:])
                rows.append((metric, " ".join(extra) or "(table: 1,000 rows)", f"{fresh:.3f}", f"{floor * 1e3:.1f}",
                             f"{fresh / floor:.1f}x", "met" if fresh <= 5 * floor else "not met",
                             f"{inproc:.3f}", f"{inproc / floor:.1f}x"))
                if args.instructions:
                    counted.append((metric, " ".join(extra) or "(table: 1,000 rows)",
                                    instructions([str(Path(sys.executable).with_name("ldpt")), *argv])))
            if args.baseline is not None:
                compared.append((metric, *interleaved(args.baseline, reg, db, metric, args.repeat)))
        parts = steps(reg, db, args.protocols, args.repeat)
        profiles = [(f"{proto}1m", profile(reg, db, f"{proto}1m", args.repeat)) for proto in args.protocols] \
            if args.profile else []
        imports = [(what, child_cpu([sys.executable, "-c", code], args.repeat)) for what, code in IMPORT_FLOORS]
    floor = statistics.median(floor_samples)   # over the whole run: the other tables' reference
    # what a fresh process pays before any work: the interpreter and the imports an estimate needs
    print(f"\n`ldpt estimate`, d = {args.d:,}, {args.reports:,} reports per metric, SQLite; CPU seconds, median of "
          f"{args.repeat}; floor: numpy FWHT of 2^20, timed after each measured child = {floor * 1e3:.1f} ms "
          f"(median of {len(floor_samples)}; each row's own beside it); {load_average()}; children "
          + ("compile every module at each start (--compile-each-run)" if args.compile_each_run
             else "with bytecode caches, as an installed ldpt"))
    print_table(["metric", "output", "fresh process s", "floor ms", "vs floor (bar <= 5x)", "bar",
                 "in process s", "vs floor"], rows)
    print_table(["fresh process", "CPU s", "vs floor"],
                [(what, f"{t:.2f}", f"{t / floor:.1f}x") for what, t in imports],
                "\nWhat a fresh process costs before it estimates (CPU seconds, median)")
    print_table(["metric", "registry s", "store load s", "decode s", "frame (top 20) s"], parts,
                "\nIn-process parts (CPU seconds, median)")
    if counted:
        floor_ir = fwht_instructions()
        print_table(["metric", "output", "M instructions", "vs floor"],
                    [(metric, output, f"{ir / 1e6:,.1f}", f"{ir / floor_ir:.2f}x") for metric, output, ir in counted],
                    f"\nInstructions of a fresh `ldpt estimate` (valgrind --tool=callgrind, one run each); floor: "
                    f"one numpy FWHT of 2^20 = {floor_ir / 1e6:,.1f} M instructions")
    if compared:
        print_table(["metric", f"{args.baseline} s", "this checkout s", "same output"], compared,
                    f"\nFresh `ldpt estimate` (table), interleaved, median of {args.repeat}; {load_average()}")
    for metric, (table, imports) in profiles:
        print_table(["step", "CPU ms", "vs floor"],
                    [(step, f"{t * 1e3:.1f}", f"{t / floor:.2f}x") for step, t in table],
                    f"\nWhere a fresh `ldpt estimate --metric {metric}` (table) spends its CPU: median of "
                    f"{args.repeat} children; {load_average()}")
        print_table(["import (python -X importtime, cumulative)", "ms"], imports,
                    "\nIts largest imports, one run (wall clock of each import, children included)")


def instructions(argv: list[str]) -> int:
    """Instructions ``argv`` executes as a fresh process (valgrind's callgrind; bytecode caches as
    the measured children's)."""
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
                          capture_output=True, text=True, cwd=ROOT, env=CHILD_ENV)
    counts = [line.rsplit(":", 1)[1] for line in done.stderr.splitlines() if "Collected :" in line]
    if done.returncode != 0 or not counts:
        sys.exit(f"valgrind {' '.join(argv)} failed: {done.stderr.strip()[-500:]}")
    return int(counts[-1].replace(",", "").strip())


#: A child running ``fwht`` on the bench's signal N times (argv[1]): two counts give one transform.
FWHT_CHILD = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
from estimate import fwht
signal = np.random.default_rng(0).standard_normal(1 << 20)
for _ in range(int(sys.argv[1])):
    fwht(signal)
"""


def fwht_instructions() -> int:
    """Instructions of one ``fwht`` of 2^20: a child running three transforms less one running
    one, halved (the interpreter, numpy's import and the signal cancel; a first unmeasured run
    writes the bytecode caches, whose compiling would otherwise count in the first)."""
    here = str(Path(__file__).resolve().parent)
    subprocess.run([sys.executable, "-c", FWHT_CHILD, "0", here], capture_output=True, cwd=ROOT, env=CHILD_ENV)
    three, one = (instructions([sys.executable, "-c", FWHT_CHILD, str(n), here]) for n in (3, 1))
    return (three - one) // 2


def interleaved(baseline: Path, reg: Path, db: Path, metric: str, repeat: int) -> tuple[str, str, str]:
    """Median CPU seconds of a fresh table estimate from ``baseline``'s code and from this
    checkout's, run alternately (the same contention for both), and whether they print the same."""
    code = "import sys; from cli.main import main; sys.argv = ['ldpt'] + sys.argv[1:]; main()"
    argv = [sys.executable, "-c", code, "estimate", "--metrics", str(reg), "--metric", metric, "--db", str(db),
            "--silent"]
    times: dict[Path, list[float]] = {baseline: [], ROOT: []}
    printed: dict[Path, str] = {}
    for root in (baseline, ROOT):   # bytecode caches written, unmeasured
        subprocess.run(argv, capture_output=True, cwd=tempfile.gettempdir(), env=dict(CHILD_ENV, PYTHONPATH=str(root)))
    for _ in range(repeat):
        for root in (baseline, ROOT):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            done = subprocess.run(argv, capture_output=True, text=True, cwd=tempfile.gettempdir(),
                                  env=dict(CHILD_ENV, PYTHONPATH=str(root)))
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode != 0:
                sys.exit(f"{root}: {done.stderr.strip()[-500:]}")
            times[root].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            printed.setdefault(root, done.stdout)
    return (f"{statistics.median(times[baseline]):.3f}", f"{statistics.median(times[ROOT]):.3f}",
            "yes" if printed[baseline] == printed[ROOT] else "NO")


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages, as the tables state them."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)"


def profile(reg: Path, db: Path, metric: str, repeat: int) -> tuple[list[tuple[str, float]], list[tuple[str, str]]]:
    """Each step of a fresh table estimate (median CPU seconds over ``repeat`` children, the
    interpreter's start measured as ``python -c pass``), and the largest top-level imports of
    the real command by ``-X importtime``."""
    runs = []
    for i in range(repeat + 1):   # the first writes the bytecode caches, unmeasured
        done = subprocess.run([sys.executable, "-c", PROFILE_CHILD, str(reg), metric, str(db)], capture_output=True,
                              text=True, cwd=ROOT, check=True, env=CHILD_ENV)
        if not i:
            continue
        out = json.loads(done.stdout.splitlines()[-1])
        marks = out["marks"]
        runs.append([(name, t - marks[i - 1][1]) for i, (name, t) in enumerate(marks) if i])
        if "pandas" in out["modules"] or "scipy" in out["modules"]:
            print(f"note: the profiled child imported {', '.join(m for m in ('pandas', 'scipy') if m in out['modules'])}",
                  file=sys.stderr)
    start = child_cpu([sys.executable, "-c", "pass"], repeat)
    table = [("interpreter (python -c pass)", start)]
    table += [(name, statistics.median(run[i][1] for run in runs)) for i, (name, _) in enumerate(runs[0])]
    table.append(("total of the steps", sum(t for _, t in table)))
    argv = [sys.executable, "-X", "importtime", "-c",
            "import sys; from cli.main import main; sys.argv = ['ldpt'] + sys.argv[1:]; main()",
            "estimate", "--metrics", str(reg), "--metric", metric, "--db", str(db), "--silent"]
    err = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=CHILD_ENV).stderr
    top = []
    for line in err.splitlines():
        parts = line.split("|")
        if line.startswith("import time:") and len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].rstrip()
            if len(name) - len(name.lstrip()) <= 1:    # top-level imports only
                top.append((int(parts[1]), name.strip()))
    top.sort(reverse=True)
    return table, [(name, f"{us / 1e3:.1f}") for us, name in top[:10]]


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
