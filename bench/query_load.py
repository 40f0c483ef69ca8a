"""Queries against ingestion: an ingest probe's latency and the collector's memory while a
d = 10⁶ estimate is served by a real `ldpt serve`.

The store holds ``--reports`` simulated reports of an hr metric over 10⁶ values (a numbered
domain). An ingest probe posts a 10-report batch every ``--interval`` seconds over its own
connection and records each acknowledgement's latency; after a quiet baseline the bench asks
``GET /v1/metrics/hr1m/estimates`` — the default page (1,000 rows), then every row
(``full=true``, streamed), then three full queries at once (all but ``max_heavy_queries`` get
503 too-many-queries) — and prints, per phase, the probe's p50/p99, the query's wall time and
bytes, and the collector's RSS growth (peak during the phase minus before it).
Bars (issue 32): probe p99 <= 100 ms and RSS growth <= 200 MB during the full estimate.

    python bench/query_load.py [--reports 1000000] [--interval 0.02]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import psutil
from _common import ROOT, print_table

from sketches import server_half

sys.path.insert(0, str(ROOT / "bench"))
from ingest import collector  # noqa: E402

REGISTRY = """
[metrics.hr1m]
kind = "categorical"
categories = { ids = 1000000 }
protocol = "hr"
epsilon = 2.0

[metrics.probe]
kind = "categorical"
categories = ["a", "b", "c"]
protocol = "grr"
epsilon = 1.0
"""
TOKEN = "bench-query-token-0123456789"


PHASES = (("default page (1,000 rows)", [""]), ("top=20", ["top=20"]), ("full=true (10^6 rows)", ["full=true"]),
          ("full=true, CSV", ["full=true&format=csv"]), ("3 x full=true at once", ["full=true"] * 3))


class PeakRss:
    """Peak RSS of a process tree since construction, above its RSS then: the kernel's high-water
    mark (VmHWM) reset through /proc/PID/clear_refs, so no short peak is missed between samples."""

    def __init__(self, pid: int) -> None:
        self.procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        self.before = {}
        for p in self.procs:
            Path(f"/proc/{p.pid}/clear_refs").write_text("5")
            self.before[p.pid] = p.memory_info().rss

    def growth(self) -> int:
        """Sum over the tree of (peak since construction − RSS at construction), in bytes."""
        total = 0
        for p in self.procs:
            status = Path(f"/proc/{p.pid}/status").read_text()
            hwm = int(next(line for line in status.splitlines() if line.startswith("VmHWM")).split()[1]) * 1024
            total += max(0, hwm - self.before[p.pid])
        return total


class Probe(threading.Thread):
    """Posts a small batch every ``interval`` s on one keep-alive connection; latencies by time."""

    def __init__(self, port: int, body_of, interval: float) -> None:
        super().__init__(daemon=True)
        self.port, self.body_of, self.interval = port, body_of, interval
        self.samples: list[tuple[float, float]] = []   # (time sent, latency)
        self.done = threading.Event()

    def run(self) -> None:
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        while not self.done.is_set():
            t0 = time.perf_counter()
            conn.request("POST", "/v1/reports", self.body_of(), {"Content-Type": "application/msgpack"})
            resp = conn.getresponse()
            resp.read()
            self.samples.append((t0, time.perf_counter() - t0))
            self.done.wait(max(0.0, self.interval - (time.perf_counter() - t0)))
        conn.close()

    def latencies(self, since: float, until: float) -> np.ndarray:
        return np.asarray([lat for t, lat in self.samples if since <= t <= until] or [np.nan]) * 1e3


async def fetch(port: int, query: str) -> tuple[int, int, float]:
    """(status, bytes, seconds) of one estimates request, reading the body as it streams."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = time.perf_counter()
    writer.write(f"GET /v1/metrics/hr1m/estimates?{query} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                 "Connection: close\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    size = 0
    while chunk := await reader.read(1 << 16):
        size += len(chunk)
    writer.close()
    return int(head[9:12]), size, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=1_000_000)
    ap.add_argument("--interval", type=float, default=0.02)
    ap.add_argument("--baseline", type=float, default=5.0)
    args = ap.parse_args()
    from click.testing import CliRunner

    from cli.main import main as ldpt
    from client_sdk.registry import load_registry

    with tempfile.TemporaryDirectory(prefix="ldpt-query-") as tmp:
        reg, db, token = Path(tmp) / "metrics.toml", Path(tmp) / "store.sqlite", Path(tmp) / "token"
        reg.write_text(REGISTRY, encoding="utf-8")
        token.write_text(TOKEN + "\n")
        token.chmod(0o600)
        done = CliRunner().invoke(ldpt, ["simulate", "--metrics", str(reg), "--metric", "hr1m", "--clients",
                                         str(args.reports), "--db", str(db), "--silent", "--seed", "1"])
        if done.exit_code:
            sys.exit(done.output)
        spec = load_registry(reg).get("probe")
        rng = np.random.default_rng(2)

        def body() -> bytes:
            wire = server_half(spec).to_wire(server_half(spec).encode(rng.integers(0, 3, 10), rng))
            return msgpack.packb({"v": 1, "batch_id": os.urandom(16),
                                  "reports": [{"m": "probe", "f": spec.fingerprint, "p": w} for w in wire]})

        rows = []
        for label, queries in PHASES:
            # each phase on a fresh collector: memory a query leaves behind (the allocator keeps
            # it) would hide the next phase's growth
            with collector(reg, 1, ["--db", str(db), "--query-token-file", str(token)]) as (pid, port):
                probe = Probe(port, body, args.interval)
                probe.start()
                time.sleep(args.baseline)
                t_end = time.perf_counter()
                if not rows:
                    lat = probe.latencies(t_end - args.baseline, t_end)
                    rows.append(("baseline (no query)", "", "", "", f"{np.nanpercentile(lat, 50):.1f}",
                                 f"{np.nanpercentile(lat, 99):.1f}", "", len(lat)))
                peak = PeakRss(pid)
                t0 = time.perf_counter()

                async def all_of(qs=queries):
                    return await asyncio.gather(*(fetch(port, q) for q in qs))
                results = asyncio.run(all_of())
                t1 = time.perf_counter()
                growth = peak.growth()
                time.sleep(0.5)
                probe.done.set()
                probe.join()
                lat = probe.latencies(t0, t1)
                statuses = ",".join(str(r[0]) for r in results)
                rows.append((label, statuses, f"{max(r[2] for r in results):.2f}",
                             f"{max(r[1] for r in results) / 2**20:.1f}",
                             f"{np.nanpercentile(lat, 50):.1f}", f"{np.nanpercentile(lat, 99):.1f}",
                             f"{growth / 2**20:.0f}", len(lat)))
    print(f"\nAn ingest probe (10-report batches every {args.interval * 1e3:.0f} ms) while `ldpt serve` answers "
          f"estimates of hr over 10^6 values ({args.reports:,} reports, SQLite, one worker)")
    print_table(["phase", "HTTP", "query s", "MB", "probe p50 ms", "probe p99 ms", "RSS growth MB", "acks"], rows)


if __name__ == "__main__":
    main()
