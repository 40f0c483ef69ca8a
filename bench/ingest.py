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
    python bench/ingest.py --large --batch 1000 --workers 2    # d = 10^6 (hr, olh) and discover
                                                               # beside grr d = 128 and a trivial
                                                               # handler that only unpacks the body

    python bench/ingest.py --replay                 # distinct honest reports until a window fills:
                                                    # olh, hr, discover at d = 10^6, sqlite (+ postgres)

``--replay`` sends what devices send instead of one template: every batch holds ``--batch``
distinct reports (default 100) encoded by the real encoders from random values of distinct
simulated devices (OLH cohorts drawn as devices draw them), with a fresh batch id. It fills one
window: the rate over the first ``--phase`` seconds (20) is the fresh window's; then it sends
``--fill`` more reports (2.2 M) and measures ``--phase`` seconds again; it prints both rates,
their ratio, p50/p99 acknowledgement latency, the collector's CPU per batch in each phase (and
fresh over full: the rate ratio where the collector is CPU-bound, which other load on a shared
machine does not move) and its RSS, and the rows the store holds at the end
(docs/operations.md, "Large domains and store size").

``--large`` adds categorical metrics over d = 10^6 values with hr and olh: the sketches whose
dense delta (16 MB) dwarfs a batch, which the store writes as sparse deltas
(docs/design.md, "Sparse deltas"); ``trivial`` is an aiohttp server that msgpack-unpacks the
body and answers 200, the ceiling of HTTP + decoding on this machine. "vs grr" is the rate over
grr d = 128's on the same store and workers; "RSS growth" the collector's resident memory at
the end of the measured run minus at its start.
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

from sketches import server_half

try:  # the collector's peak RSS and CPU time are read through psutil (in the [dev] extra)
    import psutil
except ModuleNotFoundError:
    sys.exit("bench/ingest.py measures the collector's memory and CPU with psutil, which is not "
             "installed: run `.venv/bin/pip install -e '.[dev]'` (or `pip install psutil`) first")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from client_sdk.registry import load_registry  # noqa: E402

BATCH = 100  # reports per request (--batch)
D = 128
D_LARGE = 1_000_000
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
LARGE = """
[metrics.hr1m]
kind = "categorical"
categories = [{cats}]
protocol = "hr"
epsilon = 2.0

[metrics.olh1m]
kind = "categorical"
categories = [{cats}]
protocol = "olh"
epsilon = 2.0
"""
METRIC_OF = {"grr": "grr128", "oue": "oue128", "rappor": "rappor128", "discover": "discover16",
             "hr": "hr1m", "olh": "olh1m"}
TRIVIAL_SERVER = """
import sys, msgpack
from aiohttp import web
async def handle(request):
    msgpack.unpackb(await request.read())
    return web.json_response({"accepted": 1})
app = web.Application(client_max_size=16 * 2**20)
app.router.add_post("/v1/reports", handle)
async def ready(app):
    print(f"listening on http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}", file=sys.stderr, flush=True)
runner = web.AppRunner(app, access_log=None)
import asyncio
async def main():
    global site
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    await ready(app)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def write_registry(path: Path, large: bool = False) -> None:
    cats = ", ".join(f'"c{i}"' for i in range(D))
    text = REGISTRY.format(cats=cats) + RAPPOR + DISCOVER
    if large:
        text += LARGE.format(cats=", ".join(f'"c{i}"' for i in range(D_LARGE)))
    path.write_text(text, encoding="utf-8")


def template_body(registry_path: Path, protocol: str, seed: int = 1) -> tuple[bytes, int]:
    """One batch of BATCH reports encoded with the real protocol code; offset of the batch id."""
    if protocol == "trivial":  # any valid body: the grr one
        protocol = "grr"
    spec = load_registry(registry_path).get(METRIC_OF[protocol])
    proto = server_half(spec)
    rng = np.random.default_rng(seed)
    if protocol in ("rappor", "discover"):  # string metrics
        values = np.asarray([f"value-{i % 100}" for i in rng.integers(0, 10**6, BATCH)], dtype=object)
        payloads = proto.encode(values, rng)
    else:
        payloads = proto.encode(rng.integers(0, proto.domain_size, BATCH), rng)
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

    def __init__(self, host: str, port: int, request: bytes, id_offset: int, connections: int,
                 batch: int = BATCH) -> None:
        self.host, self.port = host, port
        self.batch = batch
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
                        self.acked += self.batch
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
        self.last = 0
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
                self.last = sum(p.memory_info().rss for p in self.tree())
                self.peak = max(self.peak, self.last)
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
            marks["rss0"], marks["pg0"] = sampler.last, postgres_cpu_seconds()
            await asyncio.sleep(seconds)
            marks["srv1"], marks["gen1"] = sampler.cpu_seconds(), time.process_time()
            marks["rss1"], marks["pg1"] = sampler.last, postgres_cpu_seconds()
        marker = asyncio.create_task(mark())
        elapsed = await gen.run(warmup, seconds)
        await marker
        return elapsed

    elapsed = asyncio.run(go())
    sampler.growth = marks["rss1"] - marks["rss0"]
    sampler.pg_cpu = marks["pg1"] - marks["pg0"]  # backends live as long as the collector's pool
    return (elapsed, (marks["srv1"] - marks["srv0"]) / seconds, (marks["gen1"] - marks["gen0"]) / seconds)


@contextlib.contextmanager
def collector(registry: Path, workers: int, store_args: list[str], trivial: bool = False):
    """A running `ldpt serve` subprocess (or the trivial handler); yields (pid, port)."""
    cmd = [sys.executable, "-c", "from cli.main import main; main()", "serve", "--metrics", str(registry), "--port", "0",
           "--workers", str(workers), *store_args]
    if trivial:
        cmd = [sys.executable, "-c", TRIVIAL_SERVER]
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
    rss_growth_mb: float
    pg_cpu_seconds: float  # PostgreSQL server CPU over the measured seconds
    overloaded: int
    errors: int
    server_cpu: float     # cores used by the collector's processes
    generator_cpu: float  # cores used by the load generator


def run_one(store: str, store_args: list[str], workers: int, protocol: str, registry: Path,
            connections: int, warmup: float, seconds: float) -> Result:
    body, _ = template_body(registry, protocol)
    with collector(registry, workers, store_args, trivial=protocol == "trivial") as (pid, port):
        request, offset = request_bytes("127.0.0.1", port, body)
        gen = Generator("127.0.0.1", port, request, offset, connections, BATCH)
        sampler = RssSampler(pid)
        sampler.start()
        elapsed, srv_cpu, gen_cpu = run_measured(gen, sampler, warmup, seconds)
        sampler.done.set()
        sampler.join()
    lat = np.asarray(gen.latencies) * 1000 if gen.latencies else np.asarray([np.nan])
    return Result(store, workers, protocol, gen.acked / elapsed, float(np.percentile(lat, 50)),
                  float(np.percentile(lat, 99)), sampler.peak / 2**20, sampler.growth / 2**20,
                  sampler.pg_cpu, gen.overloaded, gen.errors,
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


def postgres_cpu_seconds() -> float:
    """CPU seconds used so far by every PostgreSQL server process on this machine."""
    total = 0.0
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] in ("postgres", "postmaster"):
            try:
                t = proc.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
    return total


class ReplaySource:
    """Bodies of distinct honest batches: ``batch`` reports of distinct simulated devices each,
    encoded by the real protocol code, a fresh random batch id per body. A producer thread
    encodes ``chunk`` reports at a time (vectorised) and packs them per batch into a bounded
    queue, so the load generator's event loop never stalls on encoding (which would show up
    as acknowledgement latency)."""

    def __init__(self, spec, batch: int, seed: int, chunk: int = 2_000, depth: int = 400) -> None:
        import queue

        self.spec, self.proto, self.batch, self.chunk = spec, server_half(spec), batch, chunk
        self.rng = np.random.default_rng(seed)
        self.bodies: queue.Queue[bytes] = queue.Queue(depth)
        self.stopped = threading.Event()
        self.producer = threading.Thread(target=self._produce, daemon=True)
        self.producer.start()

    def _produce(self) -> None:
        import queue

        name, fp, n = self.spec.name, self.spec.fingerprint, self.chunk
        while not self.stopped.is_set():
            if self.spec.kind.value == "string":
                values = np.asarray([f"host-{i}.example" for i in self.rng.integers(0, 10**7, n)], dtype=object)
            else:
                values = self.rng.integers(0, self.proto.domain_size, n)
            reports = [{"m": name, "f": fp, "p": w} for w in self.proto.to_wire(self.proto.encode(values, self.rng))]
            for i in range(0, n, self.batch):
                body = msgpack.packb({"v": 1, "batch_id": os.urandom(16), "reports": reports[i:i + self.batch]})
                while not self.stopped.is_set():
                    try:
                        self.bodies.put(body, timeout=0.2)
                        break
                    except queue.Full:
                        continue

    async def next_body(self) -> bytes:
        import queue

        while True:
            try:
                return self.bodies.get_nowait()
            except queue.Empty:
                await asyncio.sleep(0.001)   # the producer is behind: the generator waits, not the loop

    def stop(self) -> None:
        self.stopped.set()


class ReplayGenerator:
    """Keep-alive connections posting distinct batches; every acknowledgement timestamped."""

    def __init__(self, host: str, port: int, source: ReplaySource, connections: int) -> None:
        self.host, self.port, self.source, self.connections = host, port, source, connections
        self.acks: list[tuple[float, float]] = []   # (time of the ack, its latency)
        self.overloaded = self.errors = 0
        self.acked = 0

    def request(self, body: bytes) -> bytes:
        head = (f"POST /v1/reports HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/msgpack\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        return head + body

    async def connection(self, stop: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            req = self.request(await self.source.next_body())
            while not stop.is_set():
                t0 = time.perf_counter()
                writer.write(req)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head[9:12])
                m = re.search(rb"(?i)content-length: *(\d+)", head)
                await reader.readexactly(int(m.group(1)) if m else 0)
                t1 = time.perf_counter()
                if status == 200:
                    self.acks.append((t1, t1 - t0))
                    self.acked += self.source.batch
                    req = self.request(await self.source.next_body())
                elif status == 503:  # overloaded: back off, retry the same batch
                    self.overloaded += 1
                    await asyncio.sleep(0.05)
                else:
                    self.errors += 1
                    req = self.request(await self.source.next_body())
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


@dataclasses.dataclass
class ReplayPhase:
    reports_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_us_per_batch: float
    rss_mb: float


@dataclasses.dataclass
class ReplayResult:
    store: str
    protocol: str
    fresh: ReplayPhase
    full: ReplayPhase
    filled: int          # reports acknowledged before the second phase began
    rows: int            # rows the store held at the end
    overloaded: int
    errors: int


def replay_one(store: str, store_args: list[str], protocol: str, registry: Path, connections: int,
               batch: int, phase: float, fill: int) -> ReplayResult:
    """One window filled by distinct batches: a fresh phase, ``fill`` more reports, a full phase."""
    spec = load_registry(registry).get(METRIC_OF[protocol])
    source = ReplaySource(spec, batch, seed=hash((store, protocol)) & 0xFFFF)
    with collector(registry, 1, store_args) as (pid, port):
        gen = ReplayGenerator("127.0.0.1", port, source, connections)
        sampler = RssSampler(pid)
        sampler.start()

        async def go() -> tuple[ReplayPhase, ReplayPhase, int]:
            stop = asyncio.Event()
            tasks = [asyncio.create_task(gen.connection(stop)) for _ in range(connections)]
            await asyncio.sleep(2.0)   # warm-up (connections, first commits)

            async def measure() -> ReplayPhase:
                n0, cpu0, t0 = len(gen.acks), sampler.cpu_seconds(), time.perf_counter()
                await asyncio.sleep(phase)
                n1, cpu1, t1 = len(gen.acks), sampler.cpu_seconds(), time.perf_counter()
                lat = np.asarray([a[1] for a in gen.acks[n0:n1]] or [np.nan]) * 1e3
                return ReplayPhase((n1 - n0) * batch / (t1 - t0), float(np.percentile(lat, 50)),
                                   float(np.percentile(lat, 99)), (cpu1 - cpu0) / max(n1 - n0, 1) * 1e6,
                                   sampler.last / 2**20)
            fresh = await measure()
            target = gen.acked + fill
            while gen.acked < target:
                await asyncio.sleep(0.5)
                if any(t.done() for t in tasks):
                    break
            filled = gen.acked
            full = await measure()
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            return fresh, full, filled
        try:
            fresh, full, filled = asyncio.run(go())
        finally:
            source.stop()
        sampler.done.set()
        sampler.join()
        rows = store_rows(store, store_args)
    return ReplayResult(store, protocol, fresh, full, filled, rows, gen.overloaded, gen.errors)


def store_rows(store: str, store_args: list[str]) -> int:
    """Rows of sketch data the store holds (all windows)."""
    if store == "sqlite":
        import sqlite3

        conn = sqlite3.connect(store_args[1])
        try:
            return sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("sketches", "sketch_deltas"))
        finally:
            conn.close()
    import asyncpg

    async def count() -> int:
        conn = await asyncpg.connect(store_args[1])
        try:
            return int(await conn.fetchval("SELECT count(*) FROM ldpt_deltas"))
        finally:
            await conn.close()
    return asyncio.run(count())


def main_replay(args: argparse.Namespace) -> None:
    protocols = args.protocols or ["olh", "hr", "discover"]
    results: list[ReplayResult] = []
    with tempfile.TemporaryDirectory(prefix="ldpt-bench-") as tmp:
        registry = Path(tmp) / "metrics.toml"
        write_registry(registry, large=True)
        stores: list[tuple[str, object]] = [] if args.no_sqlite else [("sqlite", None)]
        if args.postgres:
            stores.append(("postgres", args.postgres))
        for store, dsn in stores:
            for protocol in protocols:
                if store == "sqlite":
                    store_args, schema = ["--db", str(Path(tmp) / f"replay-{protocol}.sqlite")], None
                else:
                    schema = f"ldpt_bench_{uuid.uuid4().hex[:12]}"
                    sep = "&" if "?" in str(dsn) else "?"
                    store_args = ["--postgres", f"{dsn}{sep}search_path={schema}"]
                try:
                    r = replay_one(store, store_args, protocol, registry, args.connections, args.batch,
                                   args.phase, args.fill)
                finally:
                    if schema:
                        drop_schema(str(dsn), schema)
                results.append(r)
                print(f"  {store:8s} {protocol:8s} fresh {r.fresh.reports_per_s:10,.0f}/s  after {r.filled:,}: "
                      f"{r.full.reports_per_s:10,.0f}/s", file=sys.stderr, flush=True)
    print(f"\nReplay: distinct honest reports in batches of {args.batch}, {args.connections} connections, "
          f"one worker, d = {D_LARGE:,} (discover: strings), durable commits; fresh = the first {args.phase:g} s "
          f"of a new window, full = {args.phase:g} s after {args.fill:,} more reports\n")
    print(f"{'store':8s} {'protocol':8s} {'fresh /s':>10s} {'full /s':>10s} {'full/fresh':>10s} "
          f"{'p50 ms':>13s} {'p99 ms':>15s} {'µs CPU/batch':>13s} {'CPU ratio':>9s} {'RSS MB':>11s} {'filled':>10s} "
          f"{'rows':>5s} "
          f"{'503s':>5s} {'errors':>6s}")
    for r in results:
        f, g = r.fresh, r.full
        print(f"{r.store:8s} {r.protocol:8s} {f.reports_per_s:10,.0f} {g.reports_per_s:10,.0f} "
              f"{g.reports_per_s / f.reports_per_s if f.reports_per_s else float('nan'):10.0%} "
              f"{f.p50_ms:6.1f}->{g.p50_ms:6.1f} {f.p99_ms:7.1f}->{g.p99_ms:7.1f} "
              f"{f.cpu_us_per_batch:6.0f}->{g.cpu_us_per_batch:6.0f} "
              f"{f.cpu_us_per_batch / g.cpu_us_per_batch if g.cpu_us_per_batch else float('nan'):9.0%} "
              f"{f.rss_mb:5.0f}->{g.rss_mb:5.0f} "
              f"{r.filled:10,d} {r.rows:5d} {r.overloaded:5d} {r.errors:6d}")
    print("\np50/p99 ms: acknowledgement latency, fresh -> full; µs CPU/batch: the collector's CPU per "
          "acknowledged batch (PostgreSQL's own processes not included); CPU ratio: fresh over full CPU per "
          "batch, the full window's rate as a share of the fresh one's where the collector is CPU-bound "
          "(on a machine shared with other load the rates also follow that load); RSS: the collector's resident "
          "memory at the end of each phase; filled: reports acknowledged before the full phase; rows: "
          "sketch rows the store held at the end.")


def main() -> None:
    global BATCH
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--connections", type=int, default=None, help="keep-alive connections (64; --replay: 8)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--protocols", nargs="+", default=None,
                    help="grr oue rappor discover hr olh trivial (default: grr oue rappor; with "
                         "--large: trivial grr hr olh discover)")
    ap.add_argument("--large", action="store_true", help="add the d = 10^6 hr and olh metrics")
    ap.add_argument("--batch", type=int, default=BATCH, help="reports per request")
    ap.add_argument("--postgres", default=os.environ.get("LDPT_TEST_POSTGRES_DSN"),
                    help="also run against this PostgreSQL DSN")
    ap.add_argument("--no-sqlite", action="store_true")
    ap.add_argument("--replay", action="store_true",
                    help="distinct honest reports until a window fills (olh, hr, discover; see above)")
    ap.add_argument("--phase", type=float, default=20.0, help="--replay: seconds of each measured phase")
    ap.add_argument("--fill", type=int, default=2_200_000, help="--replay: reports sent between the phases")
    args = ap.parse_args()
    BATCH = args.batch
    if args.replay:
        args.connections = args.connections or 8
        main_replay(args)
        return
    args.connections = args.connections or 64
    protocols = list(args.protocols or (["trivial", "grr", "hr", "olh", "discover"] if args.large
                                        else ["grr", "oue", "rappor"]))
    if not args.large and {"hr", "olh"} & set(protocols):
        ap.error("hr and olh run on the d = 10^6 metrics: add --large")
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="ldpt-bench-") as tmp:
        registry = Path(tmp) / "metrics.toml"
        write_registry(registry, large=args.large)
        stores: list[tuple[str, object]] = []
        if not args.no_sqlite:
            stores.append(("sqlite", None))
        if args.postgres:
            stores.append(("postgres", args.postgres))
        for store, dsn in stores:
            for workers in args.workers:
                for protocol in protocols:
                    if protocol == "trivial" and (store, workers) != (stores[0][0], args.workers[0]):
                        continue  # the baseline needs no store: once per run
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
                    if protocol == "trivial":
                        r.store, r.workers = "-", 1
                    results.append(r)
                    print(f"  {r.store:8s} workers={r.workers} {r.protocol:8s} "
                          f"{r.reports_per_s:12,.0f} reports/s", file=sys.stderr, flush=True)
    print(f"\nIngest: batches of {BATCH} reports, d = k = {D} (hr, olh: d = {D_LARGE:,}), "
          f"{args.connections} connections, {args.seconds:g} s measured, durable commits, "
          f"{os.cpu_count()} cores shared with the generator\n")
    grr = {(r.store, r.workers): r.reports_per_s for r in results if r.protocol == "grr"}
    print(f"{'store':8s} {'workers':>7s} {'protocol':8s} {'reports/s':>12s} {'vs grr':>7s} {'p50 ms':>8s} "
          f"{'p99 ms':>8s} {'peak RSS MB':>11s} {'RSS growth':>10s} {'srv CPU':>7s} {'gen CPU':>7s} "
          f"{'µs CPU/batch':>12s} {'PG s/M':>7s} {'503s':>6s} {'errors':>6s}")
    for r in results:
        per_batch = r.server_cpu / (r.reports_per_s / BATCH) * 1e6 if r.reports_per_s else float("nan")
        ratio = r.reports_per_s / grr[(r.store, r.workers)] if grr.get((r.store, r.workers)) else float("nan")
        measured_reports = r.reports_per_s * args.seconds
        pg_per_m = r.pg_cpu_seconds / measured_reports * 1e6 if r.store == "postgres" and measured_reports \
            else float("nan")
        print(f"{r.store:8s} {r.workers:7d} {r.protocol:8s} {r.reports_per_s:12,.0f} {ratio:7.0%} "
              f"{r.p50_ms:8.2f} {r.p99_ms:8.2f} {r.peak_rss_mb:11.0f} {r.rss_growth_mb:10.0f} "
              f"{r.server_cpu:7.2f} {r.generator_cpu:7.2f} {per_batch:12.0f} {pg_per_m:7.2f} "
              f"{r.overloaded:6d} {r.errors:6d}")
    print("\nsrv CPU / gen CPU: cores used by the collector's processes / the load generator while "
          "measuring (PostgreSQL's own backends are not included); µs CPU/batch: collector CPU "
          "per acknowledged batch; PG s/M: PostgreSQL server CPU-seconds (all its processes) per million "
          "acknowledged reports over the measured seconds; RSS growth: MB from the start "
          "to the end of the measured run.")


if __name__ == "__main__":
    main()
