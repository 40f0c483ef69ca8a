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
Run: `python bench/sdk.py` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from _common import print_table

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--collector", metavar="URL", help="also measure throughput against a running ldpt serve "
                        "(its registry must be this benchmark's; see REGISTRY)")
    parser.add_argument("--startup-only", action="store_true", help="only the start-up and recovery table")
    args = parser.parse_args()
    count = 2_000 if args.quick else 10_000
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
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


if __name__ == "__main__":
    main()
