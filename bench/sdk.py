"""SDK benchmark: `report()` latency on the app's thread, and the worker's throughput.

Latency (goal: p99 <= 50 µs). Each protocol's metric is reported from the app thread by a
TelemetryClient with a real state directory (ledger and outbox on disk, OS CSPRNG); the
transport answers 200 after a simulated 1 ms network round trip (the collector is another
process, so its work does not compete for this interpreter). Two regimes:

- back-to-back with the worker idle: report()'s own cost (lookup, ledger mirror, encode
  with a batch of one, queue);
- paced: one report every 0.5 ms (2,000/s — far above a real app's rate; time.sleep
  between, like an I/O-bound app) while the worker batches, charges the ledger and sends;
- refused: reports beyond ``reports_per_window`` — the common case for a chatty app with
  the default budget of one report per window; they stop at the in-memory ledger mirror.

Tails are sensitive to the machine: a report() that runs while the worker holds the GIL
waits for it (the worker releases it every 16 items), and on an oversubscribed machine a
thread handed the GIL back may wait for a CPU.

Throughput: N reports queued first, then ``flush()`` times the worker alone — ledger
charge, msgpack batch, outbox write (fsync) and send — per batch size, with a disk state
directory and with in-memory state; optionally against a real `ldpt serve` (``--collector``).
Start-up and recovery (``--startup-only`` runs just this): how long ``TelemetryClient(...)``
takes with a registry file, without ``registry=`` while the collector hangs (the fetch runs
in the background), and with a state directory that cannot be created (reporting disabled);
and how long ``flush(60)`` takes once the collector is back after an outage long enough for
the default retry back-off to have grown (flush cuts it short).
Lean-SDK bars (``--bars`` runs just these; docs/design.md, "Two distributions"): the SDK wheel
is built and installed alone into a bare virtual environment; it prints the installed size
beyond the bare environment and the packages it holds; the import time of
``from client_sdk import TelemetryClient`` and the wall time of a fresh process that builds a
client from a registry file and makes 100 reports of mixed kinds, each over ``python -c pass``
(medians of 10 fresh processes); and report()'s p50/p99 per protocol on the plain-Python path
beside the numpy path of the baseline (``--baseline REF``, default ``main``: that commit's tree
run by the same interpreter), with each protocol's bar (100 µs; unary encodings + 0.5 µs per
payload bit).
Run: `python bench/sdk.py` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import venv
from collections.abc import Iterator
from pathlib import Path

from _common import ROOT, print_table

from client_sdk import MemoryState, TelemetryClient
from client_sdk.registry import parse_registry
from client_sdk.transport import Response, Transport, TransportError

CATEGORIES = ", ".join(f'"v{i:03d}"' for i in range(128))
REGISTRY = """
[metrics.rr]
kind = "boolean"
protocol = "rr"
epsilon = 1.0
reports_per_window = 10000000
""" + "".join(f"""
[metrics.{name}]
kind = "categorical"
protocol = "{name}"
epsilon = 1.0
reports_per_window = 10000000
categories = [{CATEGORIES if name != "grr" else '"light", "dark", "system"'}]
""" for name in ("grr", "oue", "sue", "olh", "hr", "ss")) + """
[metrics.rappor]
kind = "string"
protocol = "rappor"
bloom_bits = 128
hashes = 2
cohorts = 64
reports_per_window = 10000000

[metrics.mean]
kind = "numeric"
range = [0, 120]
protocol = "auto"
epsilon = 1.0
reports_per_window = 10000000

[metrics.histogram]
kind = "numeric"
range = [0, 5000]
buckets = [0, 250, 500, 750, 1000, 1500, 2000, 3000, 5000]
epsilon = 2.0
reports_per_window = 10000000

[metrics.budgeted]
kind = "categorical"
protocol = "grr"
epsilon = 1.0
categories = ["light", "dark", "system"]
"""
VALUES = {"rr": True, "grr": "dark", "rappor": "www.example.org", "budgeted": "dark", "mean": 37.5,
          "histogram": 812.0}
PROTOCOLS = ("rr", "grr", "oue", "sue", "olh", "hr", "ss", "rappor", "mean", "histogram")


class NetworkStub(Transport):
    """Answers 200 after ``latency`` seconds (time.sleep releases the GIL, as a socket wait does)."""

    def __init__(self, latency: float = 0.001) -> None:
        self.latency = latency
        self.requests = 0

    def request(self, method, path, body=None, headers=None) -> Response:
        time.sleep(self.latency)
        self.requests += 1
        return Response(200, {"content-type": "application/json"}, b'{"accepted": 1, "duplicate": false}')


class FlakyStub(NetworkStub):
    """NetworkStub that can be down (connection refused) or hang on GET /v1/registry."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.release = threading.Event()
        self.hang = False

    def request(self, method, path, body=None, headers=None) -> Response:
        if path == "/v1/registry" and self.hang:
            self.release.wait(60)
        if self.down:
            raise TransportError("connection refused (benchmark)")
        if path == "/v1/registry":
            return Response(200, {}, json.dumps(parse_registry(REGISTRY).to_json()).encode())
        return super().request(method, path, body, headers)


def startup_and_recovery(tmp: Path) -> list[list[object]]:
    """Rows: (what, milliseconds) — constructor times, and flush after an outage."""
    registry_file = tmp / "metrics.toml"
    registry_file.write_text(REGISTRY, encoding="utf-8")
    rows: list[list[object]] = []

    def construct(label: str, **kw) -> TelemetryClient:
        t0 = time.perf_counter()
        c = TelemetryClient(**kw)
        rows.append([label, (time.perf_counter() - t0) * 1e3])
        return c

    c = construct("TelemetryClient(registry=file, state_dir)", registry=registry_file,
                  state_dir=tmp / "s1", transport=NetworkStub())
    c.close(5.0)
    hung = FlakyStub()
    hung.hang = True
    c = construct("TelemetryClient(no registry, collector hung)", state_dir=tmp / "s2", transport=hung)
    c.report("rr", True)
    hung.release.set()
    c.close(10.0)
    blocker = tmp / "a-file"
    blocker.write_text("x")
    c = construct("TelemetryClient(state_dir not creatable)", registry=registry_file,
                  state_dir=blocker / "s", transport=NetworkStub())
    c.close(5.0)
    flaky = FlakyStub()
    c = TelemetryClient(registry=registry_file, state_dir=tmp / "s3", transport=flaky, max_batch_age=0.0)
    flaky.down = True
    c.report("rr", True)
    while c.stats()["network_errors"] < 4:    # default RetryPolicy: ~0.5 + 1 + 2 s so far, next in 2-4 s
        time.sleep(0.05)
    flaky.down = False
    t0 = time.perf_counter()
    ok = c.flush(60.0)
    rows.append([f"flush(60) once the collector is back (after 4 failed sends), ok={ok}",
                 (time.perf_counter() - t0) * 1e3])
    c.close(5.0)
    return rows


@contextlib.contextmanager
def client(state_dir: Path | None, **kwargs) -> Iterator[TelemetryClient]:
    registry = parse_registry(REGISTRY)
    kw = {"state": MemoryState()} if state_dir is None else {"state_dir": state_dir}
    c = TelemetryClient(registry=registry, transport=NetworkStub(), **kw, **kwargs)
    try:
        yield c
    finally:
        c.close(30.0)


def percentiles(samples_ns: list[int]) -> tuple[float, float, float]:
    s = sorted(samples_ns)
    return statistics.median(s) / 1e3, s[int(0.99 * (len(s) - 1))] / 1e3, s[-1] / 1e3


def latency(metric: str, count: int, paced: bool, tmp: Path) -> tuple[float, float, float]:
    """(p50, p99, max) µs of report() on this thread.

    paced=False: back-to-back, the worker idle while we measure (the queue is flushed,
    untimed, every 500 reports) — report()'s own cost. paced=True: one report every
    0.5 ms (time.sleep between, like an I/O-bound app) while the worker batches
    (100 reports or 50 ms), charges the ledger, writes the outbox and sends.
    """
    value = VALUES.get(metric, "v042")
    kwargs = {"batch_size": 100, "max_batch_age": 0.05} if paced else \
        {"batch_size": 10**9, "max_batch_age": 1e9}
    with client(tmp / f"lat-{metric}-{paced}", queue_size=count + 10, **kwargs) as c:
        for _ in range(200):  # warm-up: protocol caches, first ledger write
            c.report(metric, value)
        c.flush(30.0)
        samples = []
        next_at = time.perf_counter()
        for i in range(count):
            if paced:
                next_at += 0.0005
                time.sleep(max(0.0, next_at - time.perf_counter()))
            elif i % 500 == 499:
                c.flush(30.0)
            t0 = time.perf_counter_ns()
            c.report(metric, value)
            samples.append(time.perf_counter_ns() - t0)
        c.flush(60.0)
    return percentiles(samples)


def refused_latency(count: int, tmp: Path) -> tuple[float, float, float]:
    with client(tmp / "refused") as c:
        c.report("budgeted", "dark")
        samples = []
        for _ in range(count):
            t0 = time.perf_counter_ns()
            c.report("budgeted", "dark")
            samples.append(time.perf_counter_ns() - t0)
        assert c.stats()["refused_window"] == count
    return percentiles(samples)


def worker_throughput(n: int, batch_size: int, disk: bool, tmp: Path, endpoint: str | None = None) -> tuple[float, int]:
    """Reports/s from a full queue to acknowledged (the worker alone), and batches sent."""
    state = tmp / f"tp-{batch_size}-{disk}-{bool(endpoint)}" if disk else None
    registry = parse_registry(REGISTRY)
    kw = {"state": MemoryState()} if state is None else {"state_dir": state}
    transport = {"endpoint": endpoint} if endpoint else {"transport": NetworkStub()}
    c = TelemetryClient(registry=registry, batch_size=batch_size, max_batch_age=3600.0,
                        queue_size=n + 1, **kw, **transport)
    # Fill the queue while the worker waits (batches are due by size only, so hold it back).
    c.uploader.batcher.batch_size = n + 1
    for i in range(n):
        c.report("oue", f"v{i % 128:03d}")
    c.uploader.batcher.batch_size = batch_size
    t0 = time.perf_counter()
    ok = c.flush(300.0)
    elapsed = time.perf_counter() - t0
    batches = c.stats()["batches_acked"]
    c.close(10.0)
    if not ok:
        print(f"warning: flush did not complete (batch {batch_size})", file=sys.stderr)
    return n / elapsed, batches


# --- lean-SDK bars ----------------------------------------------------------------------------------
#: Metrics of the bars' latency table: (metric, protocol, registry lines, value).
BAR_CATEGORIES = ", ".join(f'"v{i:04d}"' for i in range(1024))
BAR_METRICS = [
    ("rr", "rr", 'kind = "boolean"', True),
    ("grr", "grr", 'kind = "categorical"\ncategories = ["light", "dark", "system"]', "dark"),
    ("olh", "olh", f"kind = \"categorical\"\ncategories = [{CATEGORIES}]", "v042"),
    ("hr", "hr", f"kind = \"categorical\"\ncategories = [{CATEGORIES}]", "v042"),
    ("ss", "ss", f"kind = \"categorical\"\ncategories = [{CATEGORIES}]", "v042"),
    ("mean", "auto", 'kind = "numeric"\nrange = [0, 120]', 37.5),
    ("histogram", "auto", 'kind = "numeric"\nrange = [0, 5000]\nbuckets = [0, 250, 500, 1000, 2000, 5000]', 812.0),
    ("lgrr", "lgrr", 'kind = "categorical"\ncategories = ["light", "dark", "system"]\nepsilon_inf = 4.0', "dark"),
    ("loloha", "loloha", f"kind = \"categorical\"\ncategories = [{CATEGORIES}]\nepsilon_inf = 4.0", "v042"),
    ("memobitmean", "memobitmean", 'kind = "numeric"\nrange = [0, 120]\nepsilon_inf = 4.0', 37.5),
    ("discover", "discover", 'kind = "string"\nepsilon = 4.0', "www.example.org"),
    ("oue", "oue", f"kind = \"categorical\"\ncategories = [{CATEGORIES}]", "v042"),
    ("oue1024", "oue", f"kind = \"categorical\"\ncategories = [{BAR_CATEGORIES}]", "v0042"),
    ("sue", "sue", f"kind = \"categorical\"\ncategories = [{CATEGORIES}]", "v042"),
    ("losue", "losue", f"kind = \"categorical\"\ncategories = [{CATEGORIES}]\nepsilon_inf = 4.0", "v042"),
    ("dbitflip", "dbitflip", f"kind = \"categorical\"\ncategories = [{CATEGORIES}]\nepsilon_inf = 4.0", "v042"),
    ("rappor", "rappor", 'kind = "string"', "www.example.org"),
]
#: Unary encodings: their bar grows by 0.5 µs per payload bit.
UNARY = ("oue", "sue", "losue", "rappor", "dbitflip")
BAR_US, BAR_US_PER_BIT = 100.0, 0.5


def bar_registry(metrics: list[tuple[str, str, str, object]]) -> str:
    out = []
    for name, protocol, lines, _ in metrics:
        eps = "" if protocol in ("rappor", "discover") else "epsilon = 1.0\n"
        out.append(f"[metrics.{name}]\n{lines}\nprotocol = \"{protocol}\"\n{eps}reports_per_window = 10000000\n")
    return "\n".join(out)


#: Run by a fresh interpreter, on this tree or the baseline's: report() latency per metric.
LATENCY_SCRIPT = """
import json, statistics, sys, time
from client_sdk import MemoryState, TelemetryClient
from client_sdk.registry import load_registry
from client_sdk.transport import Response, Transport

class Ok(Transport):
    def request(self, method, path, body=None, headers=None):
        return Response(200, {"content-type": "application/json"}, b'{"accepted": 1, "duplicate": false}')

registry = load_registry(sys.argv[1])
values, count = json.loads(sys.argv[2]), int(sys.argv[3])
out = {}
for name, value in values.items():
    c = TelemetryClient(registry=registry, state=MemoryState(), transport=Ok(), batch_size=10**9,
                        max_batch_age=1e9, queue_size=count + 1000)
    for _ in range(200):
        c.report(name, value)
    c.flush(30.0)
    time.sleep(0.05)
    samples, walls = [], []
    for i in range(count):
        if i % 500 == 499:
            c.flush(30.0)
            time.sleep(0.05)  # let the worker finish with the batch: time report() alone
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        ok = c.report(name, value)
        t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        samples.append(c1 - c0)
        walls.append(t1 - t0)
        assert ok, name
    c.close(30.0)
    samples.sort()
    walls.sort()
    bits = c.registry.get(name).protocol_impl.payload_bits
    p99 = int(0.99 * (len(samples) - 1))
    out[name] = [statistics.median(samples) / 1e3, samples[p99] / 1e3, walls[p99] / 1e3, bits]
print(json.dumps(out))
"""

#: A fresh process: a client from a registry file (docs/examples/metrics.toml's metrics, auto
#: included, with room for 100 reports a day), 100 reports of mixed kinds, close.
STARTUP_SCRIPT = """
import sys, tempfile
from client_sdk import TelemetryClient
from client_sdk.transport import Response, Transport

class Ok(Transport):
    def request(self, method, path, body=None, headers=None):
        return Response(200, {"content-type": "application/json"}, b'{"accepted": 1, "duplicate": false}')

values = {"theme": "dark", "crashed_today": True, "country": "FR", "session_minutes": 37.5, "startup_ms": 812.0}
names = list(values)
with tempfile.TemporaryDirectory() as state:
    c = TelemetryClient(registry=sys.argv[1], state_dir=state, transport=Ok())
    for i in range(100):
        assert c.report(names[i % len(names)], values[names[i % len(names)]])
    c.close(30.0)
"""


def startup_registry(path: Path) -> Path:
    """docs/examples/metrics.toml with reports_per_window = 100 on every metric."""
    text = (ROOT / "docs" / "examples" / "metrics.toml").read_text(encoding="utf-8")
    path.write_text(text.replace("\nprotocol = ", "\nreports_per_window = 100\nprotocol = "), encoding="utf-8")
    return path


def fresh_process(cmd: list[str], cwd: Path, runs: int = 10, env: dict | None = None) -> tuple[float, float]:
    """(median wall ms, median CPU ms) of ``runs`` fresh processes, run in ``cwd`` (not the
    repository, whose client_sdk would shadow the one installed or named by PYTHONPATH). CPU
    time (user + system) leaves out the time a busy machine gives other processes."""
    walls, cpus = [], []
    for _ in range(runs):
        r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=cwd)
        t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        walls.append((t1 - t0) * 1e3)
        cpus.append((r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1e3)
    return statistics.median(walls), statistics.median(cpus)


def tree_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def sdk_environment(tmp: Path) -> tuple[Path, Path]:
    """(bare venv python, SDK-only venv python): the SDK wheel built from this tree and installed alone."""
    dist, src = tmp / "dist", tmp / "sdk-src"
    shutil.copytree(ROOT / "client_sdk", src, ignore=shutil.ignore_patterns("__pycache__", "build", "dist",
                                                                           "*.egg-info"))
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(src)],
                   check=True, capture_output=True)
    wheel = next(dist.glob("ldp_telemetry_sdk-*.whl"))
    for name in ("bare", "sdk"):
        venv.create(tmp / name, with_pip=True)
    subprocess.run([str(tmp / "sdk" / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], check=True,
                   capture_output=True)
    return tmp / "bare" / "bin" / "python", tmp / "sdk" / "bin" / "python"


def baseline_tree(ref: str, tmp: Path) -> Path | None:
    """The baseline commit's tree (git archive), or None when the ref is unknown."""
    out = tmp / f"baseline-{ref.replace('/', '_')}"
    archive = subprocess.run(["git", "archive", ref, "client_sdk"], cwd=ROOT, capture_output=True)
    if archive.returncode:
        return None
    out.mkdir()
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


def lean_bars(tmp: Path, baseline: str, count: int) -> None:
    bare, sdk = sdk_environment(tmp)
    extra_kb = (tree_size(sdk.parent.parent) - tree_size(bare.parent.parent)) / 1024
    listed = json.loads(subprocess.run([str(sdk), "-m", "pip", "list", "--format", "json"], check=True,
                                       capture_output=True, text=True).stdout)
    packages = sorted(p["name"] for p in listed)
    banned = [p for p in packages if p.lower() in ("numpy", "scipy", "pandas", "aiohttp", "click")]
    print_table(["what", "value", "bar", "within"],
                [["installed beyond a bare venv (KiB)", extra_kb, "<= 5,120", "yes" if extra_kb <= 5120 else "NO"],
                 ["packages", " ".join(packages), "no numpy/scipy/pandas/aiohttp/click", "no" if banned else "yes"]],
                "SDK alone (ldp-telemetry-sdk wheel in a bare virtual environment)")

    registry = tmp / "bars.toml"
    registry.write_text(bar_registry(BAR_METRICS))
    base = fresh_process([str(sdk), "-c", "pass"], tmp)
    runs = [("from client_sdk import TelemetryClient", [str(sdk), "-c", "from client_sdk import TelemetryClient"], 60),
            ("import + client from docs/examples/metrics.toml + 100 mixed reports + close",
             [str(sdk), "-c", STARTUP_SCRIPT, str(startup_registry(tmp / "startup.toml"))], 100)]
    rows = [["python -c pass", *base, "", "", "", ""]]
    for label, cmd, bar in runs:
        wall, cpu = fresh_process(cmd, tmp)
        rows.append([label, wall, cpu, wall - base[0], cpu - base[1], bar,
                     "/".join("yes" if v <= bar else "NO" for v in (wall - base[0], cpu - base[1]))])
    tree = baseline_tree(baseline, tmp)
    if tree is not None:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        old = fresh_process([sys.executable, "-c", "from client_sdk import TelemetryClient"], tmp, env=env)
        old_base = fresh_process([sys.executable, "-c", "pass"], tmp)
        rows.append([f"{baseline} (numpy): from client_sdk import TelemetryClient", *old, old[0] - old_base[0],
                     old[1] - old_base[1], "", ""])
    print_table(["fresh process", "wall ms", "CPU ms", "wall over bare", "CPU over bare", "bar ms",
                 "within (wall/CPU)"], rows, "start-up, medians of 10 fresh processes, SDK-only environment")

    values = json.dumps({name: value for name, _, _, value in BAR_METRICS})
    pure = json.loads(subprocess.run([str(sdk), "-c", LATENCY_SCRIPT, str(registry), values, str(count)],
                                     check=True, capture_output=True, text=True, cwd=tmp).stdout)
    old: dict = {}
    if tree is not None:
        # The baseline (numpy on the device path) runs in this interpreter, with its tree first on the path.
        env = {**os.environ, "PYTHONPATH": str(tree)}
        run_old = subprocess.run([sys.executable, "-c", LATENCY_SCRIPT, str(registry), values, str(count)],
                                 capture_output=True, text=True, env=env, cwd=tmp)
        old = json.loads(run_old.stdout) if run_old.returncode == 0 else {}
    rows = []
    for name, protocol, _, _ in BAR_METRICS:
        p50, p99, wall99, bits = pure[name]
        bar = BAR_US + (BAR_US_PER_BIT * bits if protocol in UNARY else 0.0)
        o50, o99 = old.get(name, [None, None])[:2]
        rows.append([name, bits, p50, p99, wall99, bar, "yes" if p99 <= bar else "NO",
                     "-" if o50 is None else o50, "-" if o99 is None else o99])
    print_table(["metric", "bits", "p50 µs", "p99 µs", "wall p99", "bar µs", "within", f"{baseline} p50",
                 f"{baseline} p99"], rows,
                f"report() ({count:,} each, worker idle, state in memory), thread CPU time (wall p99 beside: "
                f"it adds the time this busy machine runs other processes): plain Python in the SDK-only "
                f"environment, and the numpy path of {baseline}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--collector", metavar="URL", help="also measure throughput against a running ldpt serve "
                        "(its registry must be this benchmark's; see REGISTRY)")
    parser.add_argument("--startup-only", action="store_true", help="only the start-up and recovery table")
    parser.add_argument("--bars", action="store_true", help="only the lean-SDK bars")
    parser.add_argument("--baseline", default="main", help="git ref whose numpy path the bars compare with")
    args = parser.parse_args()
    count = 2_000 if args.quick else 10_000
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        if args.bars:
            lean_bars(tmp, args.baseline, count)
            return
        print_table(["what", "ms"], startup_and_recovery(tmp), "start-up and recovery (wall time)")
        if args.startup_only:
            return
        rows = []
        for name in PROTOCOLS:
            rows.append([name, *latency(name, count, False, tmp), *latency(name, count, True, tmp)[:2]])
        print_table(["protocol", "p50 µs", "p99 µs", "max µs", "paced p50", "paced p99"], rows,
                    f"report() on the app thread ({count:,} reports each, state on disk, OS CSPRNG): "
                    "back-to-back with the worker idle, and paced at 2,000/s with the worker sending")
        print_table(["path", "p50 µs", "p99 µs", "max µs"], [["refused (budget)", *refused_latency(count, tmp)]],
                    "report() refused by the privacy ledger (reports_per_window reached)")
        n = 20_000 if args.quick else 100_000
        rows = []
        for batch_size in (100, 500, 2000):
            for disk in (True, False):
                rate, batches = worker_throughput(n, batch_size, disk, tmp)
                rows.append([batch_size, "disk" if disk else "memory", rate, batches])
            if args.collector:
                rate, batches = worker_throughput(n, batch_size, True, tmp, args.collector)
                rows.append([batch_size, "disk -> ldpt serve", rate, batches])
        print_table(["batch size", "state", "reports/s", "batches"], rows,
                    f"worker throughput: {n:,} queued oue (d=128) reports to acknowledged "
                    "(ledger charge + msgpack + outbox fsync + send, 1 ms simulated round trip)")
        lean_bars(tmp, args.baseline, count)


if __name__ == "__main__":
    main()
