"""Ingestion benchmark: a loopback load generator against a real `ldpt serve`.

For each (store, workers, protocol) it starts `ldpt serve` as a subprocess, drives it with
``--connections`` keep-alive HTTP/1.1 connections posting batches of 100 randomised reports,
and reports sustained reports/s (acknowledged, i.e. committed), p50/p99 request latency and
the peak RSS of the collector's processes. Commits are durable (SQLite synchronous=FULL in WAL
mode; PostgreSQL synchronous_commit=on).

The generator must stay cheap, because it shares the machine's cores with the collector: the
request bodies are encoded once with the real protocol code (one template per protocol) and
only the 16-byte batch id is patched per request; HTTP is spoken with a minimal asyncio
protocol (one request in flight per connection, response parsed by Content-Length).

    python bench/ingest.py                       # sqlite, 1 and 2 workers, grr/oue/rappor
    python bench/ingest.py --postgres postgresql://postgres@127.0.0.1:5432/test
    python bench/ingest.py --seconds 5 --protocols grr --workers 1
    python bench/ingest.py --seconds 5 --protocols rappor discover --workers 1   # string metrics
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import msgpack
import numpy as np

try:  # the collector's peak RSS and CPU time are read through psutil (in the [dev] extra)
    import psutil
except ModuleNotFoundError:
    sys.exit("bench/ingest.py measures the collector's memory and CPU with psutil, which is not "
             "installed: run `.venv/bin/pip install -e '.[dev]'` (or `pip install psutil`) first")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from client_sdk.registry import load_registry  # noqa: E402

BATCH = 100
D = 128
ID_MARK = b"\xa5" * 16  # placeholder batch id in the template body

REGISTRY = """
[metrics.grr128]
kind = "categorical"
categories = [{cats}]
protocol = "grr"
epsilon = 1.0

[metrics.oue128]
kind = "categorical"
categories = [{cats}]
protocol = "oue"
epsilon = 1.0
"""
RAPPOR = """
[metrics.rappor128]
kind = "string"
protocol = "rappor"
bloom_bits = 128
hashes = 2
cohorts = 64
prob_f = 0.5
prob_p = 0.5
prob_q = 0.75
"""
DISCOVER = """
[metrics.discover16]
kind = "string"
protocol = "discover"
epsilon = 4.0
"""
METRIC_OF = {"grr": "grr128", "oue": "oue128", "rappor": "rappor128", "discover": "discover16"}


def write_registry(path: Path) -> None:
    cats = ", ".join(f'"c{i}"' for i in range(D))
    text = REGISTRY.format(cats=cats) + RAPPOR + DISCOVER
    path.write_text(text, encoding="utf-8")


def template_body(registry_path: Path, protocol: str, seed: int = 1) -> tuple[bytes, int]:
    """One batch of BATCH reports encoded with the real protocol code; offset of the batch id."""
    spec = load_registry(registry_path).get(METRIC_OF[protocol])
    proto = spec.protocol_impl
    rng = np.random.default_rng(seed)
    if protocol in ("rappor", "discover"):  # string metrics
        values = np.asarray([f"value-{i % 100}" for i in rng.integers(0, 10**6, BATCH)], dtype=object)
        payloads = proto.encode(values, rng)
    else:
        payloads = proto.encode(rng.integers(0, D, BATCH), rng)
    reports = [{"m": spec.name, "f": spec.fingerprint, "p": w} for w in proto.to_wire(payloads)]
    body = msgpack.packb({"v": 1, "batch_id": ID_MARK, "reports": reports})
    return body, body.index(ID_MARK)


def request_bytes(host: str, port: int, body: bytes) -> tuple[bytes, int]:
    """The full HTTP request for a template body, and where its batch id sits."""
    head = (f"POST /v1/reports HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/msgpack\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    return head + body, len(head) + body.index(ID_MARK)


class Generator:
    """Keep-alive connections posting batches with fresh ids; counts acks and latencies."""

    def __init__(self, host: str, port: int, request: bytes, id_offset: int, connections: int) -> None:
        self.host, self.port = host, port
        self.request, self.id_offset = request, id_offset
        self.connections = connections
        self.prefix = os.urandom(8)
        self.counter = 0
        self.acked = 0
        self.overloaded = 0
        self.errors = 0
        self.latencies: list[float] = []
        self.recording = False

    def next_request(self) -> bytes:
        self.counter += 1
        buf = bytearray(self.request)
        buf[self.id_offset:self.id_offset + 16] = self.prefix + struct.pack(">Q", self.counter)
        return bytes(buf)

    async def connection(self, stop: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            req = self.next_request()
            while not stop.is_set():
                t0 = time.perf_counter()
                writer.write(req)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head[9:12])
                m = re.search(rb"(?i)content-length: *(\d+)", head)
                await reader.readexactly(int(m.group(1)) if m else 0)
                elapsed = time.perf_counter() - t0
                if status == 200:
                    if self.recording:
                        self.acked += BATCH
                        self.latencies.append(elapsed)
                    req = self.next_request()
                elif status == 503:  # overloaded: honour a short back-off, retry the same batch
                    self.overloaded += 1
                    await asyncio.sleep(0.05)
                else:
                    self.errors += 1
                    req = self.next_request()
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def run(self, warmup: float, seconds: float) -> float:
        stop = asyncio.Event()
        tasks = [asyncio.create_task(self.connection(stop)) for _ in range(self.connections)]
        await asyncio.sleep(warmup)
        self.recording = True
        t0 = time.perf_counter()
        await asyncio.sleep(seconds)
        self.recording = False
        elapsed = time.perf_counter() - t0
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        return elapsed


class RssSampler(threading.Thread):
    """Peak total RSS of a process tree, sampled every 100 ms; CPU seconds it used."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.proc = psutil.Process(pid)
        self.peak = 0
        self.done = threading.Event()

    def tree(self) -> list[psutil.Process]:
        return [self.proc, *self.proc.children(recursive=True)]

    def cpu_seconds(self) -> float:
        total = 0.0
        for p in self.tree():
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    def run(self) -> None:
        while not self.done.is_set():
            try:
                self.peak = max(self.peak, sum(p.memory_info().rss for p in self.tree()))
            except psutil.Error:
                pass
            self.done.wait(0.1)


def run_measured(gen: Generator, sampler: RssSampler, warmup: float, seconds: float) -> tuple[float, float, float]:
    """Run the load; (elapsed, collector CPU cores, generator CPU cores) over the measured part."""
    marks: dict[str, float] = {}

    async def go() -> float:
        async def mark() -> None:
            await asyncio.sleep(warmup)
            marks["srv0"], marks["gen0"] = sampler.cpu_seconds(), time.process_time()
            await asyncio.sleep(seconds)
            marks["srv1"], marks["gen1"] = sampler.cpu_seconds(), time.process_time()
        marker = asyncio.create_task(mark())
        elapsed = await gen.run(warmup, seconds)
        await marker
        return elapsed

    elapsed = asyncio.run(go())
    return (elapsed, (marks["srv1"] - marks["srv0"]) / seconds, (marks["gen1"] - marks["gen0"]) / seconds)


@contextlib.contextmanager
def collector(registry: Path, workers: int, store_args: list[str]):
    """A running `ldpt serve` subprocess; yields (pid, port)."""
    cmd = [sys.executable, "-c", "from cli.main import main; main()", "serve", "--metrics", str(registry), "--port", "0",
           "--workers", str(workers), *store_args]
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        m = re.search(r"http://([\d.]+):(\d+)", line)
        if not m:
            raise RuntimeError(f"collector did not start: {line}{proc.stderr.read()}")
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # drain logs
        yield proc.pid, int(m.group(2))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclasses.dataclass
class Result:
    store: str
    workers: int
    protocol: str
    reports_per_s: float
    p50_ms: float
    p99_ms: float
    peak_rss_mb: float
    overloaded: int
    errors: int
    server_cpu: float     # cores used by the collector's processes
    generator_cpu: float  # cores used by the load generator


def run_one(store: str, store_args: list[str], workers: int, protocol: str, registry: Path,
            connections: int, warmup: float, seconds: float) -> Result:
    body, _ = template_body(registry, protocol)
    with collector(registry, workers, store_args) as (pid, port):
        request, offset = request_bytes("127.0.0.1", port, body)
        gen = Generator("127.0.0.1", port, request, offset, connections)
        sampler = RssSampler(pid)
        sampler.start()
        elapsed, srv_cpu, gen_cpu = run_measured(gen, sampler, warmup, seconds)
        sampler.done.set()
        sampler.join()
    lat = np.asarray(gen.latencies) * 1000 if gen.latencies else np.asarray([np.nan])
    return Result(store, workers, protocol, gen.acked / elapsed, float(np.percentile(lat, 50)),
                  float(np.percentile(lat, 99)), sampler.peak / 2**20, gen.overloaded, gen.errors,
                  srv_cpu, gen_cpu)


def drop_schema(dsn: str, schema: str) -> None:
    import asyncpg

    async def drop() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()
    asyncio.run(drop())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--protocols", nargs="+", default=["grr", "oue", "rappor"])
    ap.add_argument("--postgres", default=os.environ.get("LDPT_TEST_POSTGRES_DSN"),
                    help="also run against this PostgreSQL DSN")
    ap.add_argument("--no-sqlite", action="store_true")
    args = ap.parse_args()
    protocols = list(args.protocols)
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="ldpt-bench-") as tmp:
        registry = Path(tmp) / "metrics.toml"
        write_registry(registry)
        stores: list[tuple[str, object]] = []
        if not args.no_sqlite:
            stores.append(("sqlite", None))
        if args.postgres:
            stores.append(("postgres", args.postgres))
        for store, dsn in stores:
            for workers in args.workers:
                for protocol in protocols:
                    if store == "sqlite":
                        db = Path(tmp) / f"bench-{workers}-{protocol}.sqlite"
                        store_args, schema = ["--db", str(db)], None
                    else:
                        schema = f"ldpt_bench_{uuid.uuid4().hex[:12]}"
                        sep = "&" if "?" in str(dsn) else "?"
                        store_args = ["--postgres", f"{dsn}{sep}search_path={schema}"]
                    try:
                        r = run_one(store, store_args, workers, protocol, registry, args.connections,
                                    args.warmup, args.seconds)
                    finally:
                        if schema:
                            drop_schema(str(dsn), schema)
                    results.append(r)
                    print(f"  {r.store:8s} workers={r.workers} {r.protocol:6s} "
                          f"{r.reports_per_s:12,.0f} reports/s", file=sys.stderr, flush=True)
    print(f"\nIngest: batches of {BATCH} reports, d = k = {D}, {args.connections} connections, "
          f"{args.seconds:g} s measured, durable commits, {os.cpu_count()} cores shared with the generator\n")
    print(f"{'store':8s} {'workers':>7s} {'protocol':8s} {'reports/s':>12s} {'p50 ms':>8s} {'p99 ms':>8s} "
          f"{'peak RSS MB':>11s} {'srv CPU':>7s} {'gen CPU':>7s} {'µs CPU/batch':>12s} {'503s':>6s} {'errors':>6s}")
    for r in results:
        per_batch = r.server_cpu / (r.reports_per_s / BATCH) * 1e6 if r.reports_per_s else float("nan")
        print(f"{r.store:8s} {r.workers:7d} {r.protocol:8s} {r.reports_per_s:12,.0f} {r.p50_ms:8.2f} "
              f"{r.p99_ms:8.2f} {r.peak_rss_mb:11.0f} {r.server_cpu:7.2f} {r.generator_cpu:7.2f} "
              f"{per_batch:12.0f} {r.overloaded:6d} {r.errors:6d}")
    print("\nsrv CPU / gen CPU: cores used by the collector's processes / the load generator while "
          "measuring (PostgreSQL's own backends are not included); µs CPU/batch: collector CPU "
          "per acknowledged batch.")


if __name__ == "__main__":
    main()
