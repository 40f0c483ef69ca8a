"""Robustness benchmark: a real `ldpt serve` on loopback, attacked and overloaded (issue 13).

Prints one table per question, bounded in time (about 4 minutes on a busy 2-core machine;
--quick less) and count:

1. hostile bodies sent (random bytes, mutations of valid batches, undecodable
   Content-Encoding, duplicate msgpack keys, HTTP/1.0 without a length) and the 5xx seen;
2. slow connections (header bytes dripped) opened, and how many the collector closed by
   its header deadline, while a real client posts batches;
3. /metrics latency (p50/p99) on the main port and on the admin port while ingest is
   overloaded (offered/acknowledged batches reported);
4. batches acknowledged vs stored after SIGKILL under load;
5. for each limit, the largest shift of an estimate one source can cause (measured where a
   single loopback source can reach it, and extrapolated from the limit for an hour/day);
6. the device's storage failing: the epsilon one device's runs (new clients on one state
   directory, the way an app restarts) deliver in one window when the state directory is
   read-only (``chattr +i`` as root, mode 0500 otherwise) or the secret is a directory,
   against the registry's [device] epsilon_per_window.
7-10. issue 18: an honest client's success while 64 sockets hold lying slow bodies, scrapes
   answered through a socket flood on the admin port, forged first X-Forwarded-For lines
   behind a proxy that appends its own, and the discover estimate moved per forged report by
   where the reports claim to be; then the issue's bars in one table.
11-13. issue 26: the segment-cap flood (1,000 one-report batches from 17 addresses fill the cap
   of a 1,024-combination registry, then 10 SDK devices: their reports acknowledged and in the
   stored totals), forged discover reports that deflate (250 among 50,000: the top strings'
   estimates moved per forged report against poisoning_bound and the frame's
   forged_report_max_down), and the collector's smaller defects (non-UTF-8 Authorization under
   an ingest key, a token in a query string with --access-log, control bytes in CSV, a batch
   replayed after batch_id_days); then the issue's bars in one table.
14-15. issue 26 §1-§2: a device clock cycling over three days (or advancing a day per reading) in one
   real day, Python and Node SDKs against the collector; a SIGSTOPped ledger-lock holder.

    python bench/robustness.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import msgpack
import numpy as np

from sketches import server_half

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import print_table  # noqa: E402
from client_sdk.registry import load_registry  # noqa: E402
from estimators.poisoning import poisoning_bound  # noqa: E402

REGISTRY = """
[metrics.page]
kind = "categorical"
categories = [{cats}]
protocol = "oue"
epsilon = 1.0
"""
HONEST = 100_000  # honest reports per window the shifts are quoted against


@contextlib.contextmanager
def collector(workdir: Path, env: dict[str, str], *args: str):
    """`ldpt serve` subprocess; yields (process, main port, admin port, log lines)."""
    cmd = [sys.executable, "-c", "from cli.main import main; main()", "serve", "--metrics",
           str(workdir / "metrics.toml"), "--db", str(workdir / "c.sqlite"), "--port", "0",
           "--admin-port", "0", *args]
    full_env = {**{k: v for k, v in os.environ.items() if not k.startswith("LDPT_")}, **env}
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True, env=full_env)
    log: list[str] = []
    ports: list[int] = []
    ready = threading.Event()

    def drain() -> None:
        for line in proc.stderr:
            log.append(line)
            m = re.search(r"on http://[\d.]+:(\d+)", line)
            if m:
                ports.append(int(m.group(1)))
                if len(ports) == 2:
                    ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    if not ready.wait(60) or len(ports) < 2:
        proc.kill()
        raise RuntimeError("collector did not start:\n" + "".join(log))
    try:
        yield proc, ports[0], ports[1], log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


def valid_bodies(spec, n: int, size: int, rng: np.random.Generator) -> list[bytes]:
    proto = server_half(spec)
    out = []
    for _ in range(n):
        wire = proto.to_wire(proto.encode(rng.integers(0, proto.domain_size, size), rng))
        reports = [{"m": spec.name, "f": spec.fingerprint, "p": w} for w in wire]
        out.append(msgpack.packb({"v": 1, "batch_id": rng.bytes(16), "reports": reports}))
    return out


def hostile_requests(spec, count: int, rng: np.random.Generator) -> list[bytes]:
    """Raw HTTP requests: a mix of garbage, mutations and the issue's crafted cases."""
    base = valid_bodies(spec, 20, 8, rng)
    rnd = random.Random(1)

    def request(body: bytes, extra: str = "", version: str = "1.1", length: bool = True) -> bytes:
        head = f"POST /v1/reports HTTP/{version}\r\nHost: x\r\nContent-Type: application/msgpack\r\n"
        head += f"Content-Length: {len(body)}\r\n" if length else ""
        return (head + extra + "Connection: close\r\n\r\n").encode() + body

    out = []
    for i in range(count):
        kind = i % 6
        body = bytearray(rnd.choice(base))
        if kind == 0:
            out.append(request(rng.bytes(rnd.randint(1, 400))))
        elif kind == 1:  # byte flips
            for _ in range(rnd.randint(1, 8)):
                body[rnd.randrange(len(body))] = rnd.randrange(256)
            out.append(request(bytes(body)))
        elif kind == 2:  # truncation / insertion
            cut = rnd.randrange(1, len(body))
            out.append(request(bytes(body[:cut]) + rng.bytes(rnd.randint(0, 20))))
        elif kind == 3:  # undecodable or truncated Content-Encoding
            enc = rnd.choice(["deflate", "gzip"])
            data = zlib.compress(bytes(body))[: rnd.randrange(2, 40)] if rnd.random() < 0.5 else rng.bytes(50)
            out.append(request(data, f"Content-Encoding: {enc}\r\n"))
        elif kind == 4:  # duplicate keys: "v" twice in the envelope
            dup = b"\x84\xa1v\x01" + bytes(body[1:])
            out.append(request(dup))
        else:  # HTTP/1.0 without Content-Length
            out.append(request(bytes(body), version="1.0", length=False))
    return out


def post_request(body: bytes) -> bytes:
    """A complete POST /v1/reports request (Connection: close)."""
    return (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/msgpack\r\n"
            b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


async def send_raw(port: int, data: bytes) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        with contextlib.suppress(OSError):
            writer.write_eof()
        raw = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    m = re.match(rb"HTTP/1\.[01] (\d{3})", raw)
    return int(m.group(1)) if m else 0


async def fuzz(port: int, requests: list[bytes]) -> dict[int, int]:
    sem = asyncio.Semaphore(16)
    statuses: dict[int, int] = {}

    async def one(data: bytes) -> None:
        async with sem:
            status = await send_raw(port, data)
            statuses[status] = statuses.get(status, 0) + 1

    await asyncio.gather(*(one(r) for r in requests))
    return statuses


async def slow_connections(port: int, count: int, header_timeout: float, body: bytes) -> tuple[int, int, int]:
    """(opened, closed within the deadline + 1.5 s of sweep and scheduling slack, real batches ok)."""
    deadline = header_timeout + 1.5
    closed_in_time = 0

    async def drip() -> None:
        nonlocal closed_in_time
        start = time.monotonic()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return
        try:
            for byte in b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000:
                writer.write(bytes([byte]))
                await writer.drain()
                with contextlib.suppress(asyncio.TimeoutError):
                    if not await asyncio.wait_for(reader.read(1 << 16), 0.5) or reader.at_eof():
                        break
                if time.monotonic() - start > deadline + 5:
                    break
        except OSError:
            pass
        if time.monotonic() - start <= deadline:
            closed_in_time += 1
        writer.close()

    async def real_client() -> int:
        ok = 0
        for _ in range(20):
            await asyncio.sleep(0.1)
            doc = msgpack.unpackb(body)
            doc["batch_id"] = os.urandom(16)  # same reports, a new batch
            status = await send_raw(port, post_request(msgpack.packb(doc)))
            ok += status == 200
        return ok

    tasks = [asyncio.create_task(drip()) for _ in range(count)]
    real = await real_client()
    await asyncio.gather(*tasks)
    return count, closed_in_time, real


LOADGEN = r"""
import asyncio, os, sys, time, aiohttp, msgpack
port, seconds, conns = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
body = sys.stdin.buffer.read()
doc = msgpack.unpackb(body)
acked = refused = 0
ack_file = open(sys.argv[4], "a") if len(sys.argv) > 4 else None
async def worker(session, stop):
    global acked, refused
    while time.monotonic() < stop:
        batch_id = os.urandom(16)
        data = msgpack.packb({**doc, "batch_id": batch_id})
        try:
            async with session.post(f"http://127.0.0.1:{port}/v1/reports", data=data,
                                    headers={"Content-Type": "application/msgpack"}) as r:
                await r.read()
                if r.status == 200:
                    acked += 1
                    if ack_file:
                        ack_file.write(batch_id.hex() + "\n"); ack_file.flush()
                else:
                    refused += 1
        except Exception:
            refused += 1
            await asyncio.sleep(0.01)
async def main():
    stop = time.monotonic() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conns)) as s:
        await asyncio.gather(*(worker(s, stop) for _ in range(conns)))
    print(acked, refused)
asyncio.run(main())
"""


def start_load(port: int, seconds: float, conns: int, body: bytes, ack_file: Path | None = None):
    args = [sys.executable, "-c", LOADGEN, str(port), str(seconds), str(conns)]
    if ack_file is not None:
        args.append(str(ack_file))
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=False)
    proc.stdin.write(body)
    proc.stdin.close()
    return proc


def load_result(proc: subprocess.Popen) -> tuple[int, int]:
    """(acknowledged, refused) batches printed by a finished load generator."""
    out = proc.stdout.read()
    proc.wait(60)
    acked, refused = map(int, out.split())
    return acked, refused


def scrape_latencies(port: int, seconds: float) -> list[float]:
    import http.client

    out = []
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        start = time.perf_counter()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/metrics")
            conn.getresponse().read()
            conn.close()
            out.append(time.perf_counter() - start)
        except OSError:
            out.append(10.0)
        time.sleep(0.05)
    return out


# --- issue 18: starving ingestion, flooding the admin port, two-line X-Forwarded-For, forged groups ---
def xff_request(body: bytes, lines: list[str], declared: int | None = None) -> bytes:
    """A POST /v1/reports with one X-Forwarded-For header line per entry of ``lines``."""
    head = (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/msgpack\r\n"
            b"Connection: close\r\nContent-Length: " + str(len(body) if declared is None else declared).encode())
    for line in lines:
        head += b"\r\nX-Forwarded-For: " + line.encode()
    return head + b"\r\n\r\n" + body


def fresh_batch(body: bytes) -> bytes:
    doc = msgpack.unpackb(body)
    doc["batch_id"] = os.urandom(16)
    return msgpack.packb(doc)


async def honest_client(port: int, body: bytes, count: int, pause: float) -> list[int]:
    """``count`` batches from 203.0.113.50 (through the trusted loopback proxy), one at a time."""
    out = []
    for _ in range(count):
        out.append(await send_raw(port, xff_request(fresh_batch(body), ["203.0.113.50"])))
        await asyncio.sleep(pause)
    return out


async def slow_bodies(port: int, sockets: int, body: bytes, honest: int) -> tuple[int, list[int]]:
    """Issue 18's attack: ``sockets`` POSTs from two addresses, each declaring 1 MiB and sending
    one byte, held open while an honest client posts; (attack requests in flight, statuses)."""
    writers = []
    for i in range(sockets):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(xff_request(b"\x00", [f"198.51.100.{1 + i % 2}"], declared=1 << 20))
        await writer.drain()
        writers.append((reader, writer))
    await asyncio.sleep(0.5)  # let the collector start every handler (bench: a pause is fine)
    alive = sum(not r.at_eof() for r, _ in writers)
    statuses = await honest_client(port, body, honest, 0.05)
    for _, w in writers:
        w.close()
    return alive, statuses


def admin_flood(port: int, sockets: int, scrapes: int) -> tuple[int, int]:
    """``sockets`` silent connections from 127.0.0.2 that reconnect whenever closed, while a
    scraper on 127.0.0.1 opens a new connection per scrape; (connects made, scrapes answered 200)."""
    import http.client
    import selectors
    import socket

    stop = threading.Event()
    connects = [0]

    def flood() -> None:
        sel = selectors.DefaultSelector()

        def connect() -> None:
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            sel.register(s, selectors.EVENT_READ)
            connects[0] += 1
        for _ in range(sockets):
            connect()
        while not stop.is_set():
            for key, _ in sel.select(0.05):
                try:
                    data = key.fileobj.recv(1024)
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(key.fileobj)
                    key.fileobj.close()
                    connect()
        for key in list(sel.get_map().values()):
            key.fileobj.close()

    flooder = threading.Thread(target=flood, daemon=True)
    flooder.start()
    deadline = time.monotonic() + 30
    while connects[0] < 2 * sockets and time.monotonic() < deadline:
        time.sleep(0.01)
    ok = 0
    for _ in range(scrapes):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/metrics")
            resp = conn.getresponse()
            resp.read()
            ok += resp.status == 200
            conn.close()
        except OSError:
            pass
    stop.set()
    flooder.join(10)
    return connects[0], ok


async def two_line_xff(port: int, capped: bytes, big: bytes, batches: int) -> tuple[int, int, list[int]]:
    """Forged first lines behind a proxy that appends its own: (attacker batches accepted of
    ``batches`` with random first lines, 10,000-report batches accepted of 5 with a first line
    127.0.0.1, an honest client's statuses meanwhile)."""
    rnd = random.Random(18)
    honest = asyncio.create_task(honest_client(port, capped, 40, 0.05))
    accepted = 0
    for _ in range(batches):
        forged = ".".join(str(rnd.randrange(1, 255)) for _ in range(4))
        accepted += await send_raw(port, xff_request(fresh_batch(capped), [forged, "198.51.100.7"])) == 200
    relay = 0
    for i in range(5):
        relay += await send_raw(port, xff_request(fresh_batch(big), ["127.0.0.1", f"198.51.100.{20 + i}"])) == 200
    return accepted, relay, await honest


def forged_groups(quick: bool) -> list[list]:
    """Discover estimate of "evil.example" (held by nobody) moved per forged report, by where
    1,000 forged reports claim to be (100,000 honest reports, ε = 4, default seeds)."""
    import copy

    from client_sdk.protocols.discover import fingerprint, key_bytes, truncate
    from client_sdk.registry import parse_registry
    from estimators.discovery import decode_candidates
    from estimators.simulation import Population, host_names, simulate_sketch
    from sketches.discover import bucket

    length = 8 if quick else 16
    spec = parse_registry({"metrics": {"home": {"kind": "string", "protocol": "discover", "epsilon": 4.0,
                                                "max_length": length}}}).get("home")
    proto, par = server_half(spec), server_half(spec).params
    w = np.arange(1, 301) ** -1.1
    pop = Population(host_names(300), np.round(HONEST * w / w.sum()).astype(np.int64))
    honest = simulate_sketch(spec, pop, np.random.default_rng(18))
    target, m, last = "evil.example", 1000, par.groups - 1
    b = truncate(target, length)
    fps = np.array([fingerprint(key_bytes(b, min(t + 1, length))) for t in range(par.groups)], dtype=np.uint64)
    before = float(decode_candidates(proto, honest, [target]).estimate.iloc[0])
    placements = {"spread like honest devices": np.arange(m) % par.groups,
                  "all in the held-out group": np.full(m, last),
                  "last two groups": last - np.arange(m) % 2,
                  "spread + 300 more held-out": np.r_[np.arange(m - 300) % par.groups, np.full(300, last)]}
    rows = []
    for name, groups in placements.items():
        sketch = copy.deepcopy(honest)
        seeds = np.arange(m, dtype=np.int64) % par.seeds
        proto.accumulate(sketch, {"group": groups.astype(np.int64), "seed": seeds,
                                  "y": bucket(seeds, fps[groups], par.g).astype(np.int64)})
        df = decode_candidates(proto, sketch, [target])
        rows.append([name, (float(df.estimate.iloc[0]) - before) / m, df.attrs["held_out_excess_z"],
                     df.attrs["group_size_p_value"], "warning" in df.attrs])
    return rows


def issue18(workdir: Path, spec, rng: np.random.Generator, quick: bool) -> list[list]:
    """Tables 6-9 and the rows of the issue-18 summary."""
    capped = valid_bodies(spec, 1, 8, rng)[0]
    big = valid_bodies(spec, 1, 10_000, rng)[0]
    summary = []
    env = {"LDPT_TRUSTED_PROXIES": "127.0.0.1", "LDPT_RELAY_SOURCES": ""}
    with collector(workdir, env) as (proc, port, admin, log):
        alive, statuses = asyncio.run(slow_bodies(port, 64, capped, 60))
    ok = statuses.count(200)
    print_table(["attack sockets (2 addresses)", "still open when the client ran", "honest batches ok / sent",
                 "their statuses"], [[64, alive, f"{ok} / {len(statuses)}",
                                      ", ".join(f"{s}: {statuses.count(s)}" for s in sorted(set(statuses)))]],
                "6. slow bodies: Content-Length 1 MiB, one byte sent (before: 503 overloaded 141/141)")
    summary.append(["slow bodies (64 sockets, 2 addresses)", ok / len(statuses)])

    sockets, scrapes = (150, 20) if quick else (600, 75)
    with collector(workdir, {}) as (proc, port, admin, log):
        connects, answered = admin_flood(admin, sockets, scrapes)
    print_table(["flood sockets (one address)", "connects (incl. reconnects)", "scrapes answered / sent"],
                [[sockets, connects, f"{answered} / {scrapes}"]],
                "7. admin-port slowloris (before: 4 of 75 scrapes answered)")
    summary.append([f"admin slowloris ({sockets} sockets, 1 address)", answered / scrapes])

    with collector(workdir, {"LDPT_TRUSTED_PROXIES": "127.0.0.1"}) as (proc, port, admin, log):
        accepted, relay, statuses = asyncio.run(two_line_xff(port, capped, big, 150))
    ok = statuses.count(200)
    print_table(["forged-first-line batches accepted / 150", "'127.0.0.1' first line: 10,000-report batches accepted / 5",
                 "honest batches ok / sent"], [[accepted, relay, f"{ok} / {len(statuses)}"]],
                "8. two X-Forwarded-For lines (proxy appends its own; before: 150/150 and 5/5)")
    summary.append(["two-line X-Forwarded-For", ok / len(statuses)])
    return summary


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000 if values else float("nan")


DEVICE_REGISTRY = """
[device]
epsilon_per_window = 2.0

[metrics.crash]
kind = "boolean"
protocol = "rr"
epsilon = 1.0
reports_per_window = 10

[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system"]
protocol = "lgrr"
epsilon = 1.0
epsilon_inf = 3.0
reports_per_window = 10
"""


@contextlib.contextmanager
def read_only(path: Path):
    """Make the directory ``path`` read-only for this process, even as root (immutable flag)."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(path)], check=True)
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        path.chmod(0o500)
        try:
            yield
        finally:
            path.chmod(0o700)


def device_runs(port: int, metrics: Path, state: Path, runs: int) -> list[int]:
    """``runs`` runs of an app on one state directory (a new client each), two reports each;
    returns stats()["disabled_state"] per run."""
    from client_sdk import TelemetryClient

    disabled = []
    for _ in range(runs):
        client = TelemetryClient(endpoint=f"http://127.0.0.1:{port}", registry=metrics, state_dir=state)
        client.report("crash", True)
        client.report("theme", "dark")
        client.flush(10.0)
        client.close(2.0)
        disabled.append(client.stats()["disabled_state"])
    return disabled


def epsilon_per_window(db: Path, eps: dict[str, float]) -> dict[str, float]:
    """Epsilon the collector received per window (one device sends here: the sum of its reports)."""
    out: dict[str, float] = {}
    with contextlib.closing(sqlite3.connect(db)) as conn:
        for metric, window, reports in conn.execute(
                "SELECT metric, window, sum(reports) FROM sketches GROUP BY metric, window"):
            out[window] = out.get(window, 0.0) + reports * eps[metric]
    return out


def storage_failures(runs: int) -> None:
    """6. One device, ``runs`` runs per case, against a live collector; epsilon per window."""
    logging.getLogger("client_sdk").setLevel(logging.CRITICAL)   # one ERROR line per run, by design
    rows = []
    for case in ("writable (baseline)", "read-only state directory", "secret path is a directory"):
        workdir = Path(tempfile.mkdtemp(prefix="ldpt-state-"))
        (workdir / "metrics.toml").write_text(DEVICE_REGISTRY)
        registry = load_registry(workdir / "metrics.toml")
        eps = {spec.name: float(server_half(spec).epsilon) for spec in registry}
        state = workdir / "state"
        state.mkdir(mode=0o700)
        if case.startswith("secret"):
            (state / "secret").mkdir()
        with collector(workdir, {}) as (_, port, _admin, _log):
            if case.startswith("read-only"):
                with read_only(state):
                    disabled = device_runs(port, workdir / "metrics.toml", state, runs)
            else:
                disabled = device_runs(port, workdir / "metrics.toml", state, runs)
        windows = epsilon_per_window(workdir / "c.sqlite", eps)
        worst = max(windows.values(), default=0.0)
        rows.append([case, runs, 2 * runs, sum(disabled), f"{worst:.2f}", "2.00",
                     "yes" if worst <= 2.0 + 1e-6 else "NO"])
    print_table(["state", "runs", "reports asked", "not made (disabled_state)", "eps received, worst window",
                 "[device] epsilon_per_window", "within the cap"], rows,
                "6. the device's storage fails: epsilon one device delivers per window over restarts")


# --- issue 26: floods and forgeries that silenced honest reports or moved estimates ----------------------
FLOOD_A = [f"a{i:02d}" for i in range(30)]
FLOOD_B = [f"b{i:02d}" for i in range(30)]
FLOOD_REGISTRY = f"""
[dimensions]
min_reports = 1

[dimensions.a]
values = [{", ".join(f'"{v}"' for v in FLOOD_A)}]

[dimensions.b]
values = [{", ".join(f'"{v}"' for v in FLOOD_B)}]

[metrics.crashed]
kind = "boolean"
epsilon = 1.0
dimensions = ["a", "b"]

[metrics.plain]
kind = "boolean"
epsilon = 1.0
"""


def stored_totals(db: Path, registry, names: list[str]) -> tuple[dict[str, int], int]:
    """Each metric's total reports in the SQLite store, and the segments of 'crashed' stored."""
    from collector.storage.aio import ThreadedStore

    async def read():
        store = ThreadedStore(db)
        try:
            totals = {}
            for name in names:
                spec = registry.get(name)
                totals[name] = (await store.aload(name, spec.fingerprint,
                                                  server_half(spec).new_sketch())).total_reports
            segments = len({w.metric for w in await store.awindows() if w.metric.startswith("crashed@")})
            return totals, segments
        finally:
            await store.aclose()
    totals, segments = asyncio.run(read())
    with contextlib.closing(sqlite3.connect(db)) as conn:
        in_segments = conn.execute("SELECT coalesce(sum(reports), 0) FROM sketches WHERE metric LIKE 'crashed@%'")
        totals["crashed segments"] = in_segments.fetchone()[0]
    return totals, segments


def segment_flood() -> list:
    """§3: 1,000 one-report batches from 17 addresses open every combination of a 1,024-combination
    registry but 24 (the default cap is 1,000); then 10 real SDK devices in the 24 left report
    one 'crashed' (broken down) and one 'plain' (no dimensions) each."""
    import itertools

    from client_sdk import RetryPolicy, TelemetryClient

    workdir = Path(tempfile.mkdtemp(prefix="ldpt-flood-"))
    (workdir / "metrics.toml").write_text(FLOOD_REGISTRY)
    registry = load_registry(workdir / "metrics.toml")
    spec = registry.get("crashed")
    every = list(itertools.product(FLOOD_A + ["other", None], FLOOD_B + ["other", None]))
    every = [every[i] for i in np.random.default_rng(3).permutation(len(every))]
    flood, spared = every[:1000], every[1000:1010]
    dims = lambda a, b: {k: v for k, v in (("a", a), ("b", b)) if v is not None}  # noqa: E731
    rng = np.random.default_rng(26)
    bodies = [msgpack.packb({"v": 1, "batch_id": os.urandom(16), "d": dims(a, b),
                             "reports": msgpack.unpackb(valid_bodies(spec, 1, 1, rng)[0])["reports"]})
              for a, b in flood]
    env = {"LDPT_TRUSTED_PROXIES": "127.0.0.1", "LDPT_RELAY_SOURCES": ""}   # the rate limits apply

    async def attack(port: int) -> list[int]:
        return [await send_raw(port, xff_request(body, [f"203.0.113.{1 + i % 17}"]))
                for i, body in enumerate(bodies)]
    with collector(workdir, env) as (proc, port, admin, log):
        statuses = asyncio.run(attack(port))
        results: list = []

        def device(i: int, a, b) -> None:
            client = TelemetryClient(f"http://127.0.0.1:{port}", registry, workdir / f"dev{i}",
                                     retry=RetryPolicy(initial=0.05, maximum=0.5), max_batch_age=0.05,
                                     dimensions=dims(a, b))
            client.report("crashed", True)
            client.report("plain", False)
            client.close(30.0)
            results.append(client.stats())
        threads = [threading.Thread(target=device, args=(i, a, b)) for i, (a, b) in enumerate(spared)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        warned = any("above max_segments = 1,000" in line for line in log)
    totals, segments = stored_totals(workdir / "c.sqlite", registry, ["crashed", "plain"])
    acked = sum(s["reports_acked"] for s in results)
    counted = totals["crashed"] - statuses.count(200) + totals["plain"]
    print_table(["attack batches (17 addresses) accepted", "segments stored", "honest reports acked / sent",
                 "honest reports in the stored totals", "'crashed' reports in no segment", "serve warned"],
                [[f"{statuses.count(200)} / {len(bodies)}", segments, f"{acked} / {2 * len(spared)}",
                  f"{counted} / {2 * len(spared)}", totals["crashed"] - totals["crashed segments"],
                  "yes" if warned else "no"]],
                "11. issue 26 §3, the segment-cap flood: 1,024 combinations, cap 1,000 (before: 0 / 20 acked, "
                "the whole batch a 422 too-many-segments)")
    return [["§3 segment flood: honest reports acked and counted", f"{min(acked, counted)} / {2 * len(spared)}",
             "20 / 20", "ok" if min(acked, counted) == 2 * len(spared) else "FAIL"]]


def discover_deflation(quick: bool) -> list:
    """§4: forged discover reports that claim a group (250 among 50,000 honest, ε 4, L = 16), and
    the top strings' estimates moved per forged report, against poisoning_bound and the frame's
    own worst case."""
    import copy

    import estimators.discovery as discovery
    from client_sdk.protocols.discover import fingerprint, key_bytes, truncate
    from client_sdk.registry import parse_registry
    from estimators.discovery import decode_candidates
    from estimators.simulation import Population, host_names, simulate_sketch
    from sketches.discover import bucket

    length = 8 if quick else 16
    spec = parse_registry({"metrics": {"home": {"kind": "string", "protocol": "discover", "epsilon": 4.0,
                                                "max_length": length}}}).get("home")
    proto, par = server_half(spec), server_half(spec).params
    values = host_names(300)
    w = np.arange(1, 301) ** -1.1
    honest = simulate_sketch(spec, Population(values, np.round(50_000 * w / w.sum()).astype(np.int64)),
                             np.random.default_rng(18))
    tops = [truncate(v, length).decode() for v in values[:5]]
    before = decode_candidates(proto, honest, tops)
    rng = np.random.default_rng(26)
    m, last = 250, par.groups - 1
    top_fp = fingerprint(key_bytes(truncate(values[0], length), length))

    def forged(groups, avoid_top=False) -> dict:
        groups = np.asarray(groups, dtype=np.int64)
        seeds = rng.integers(0, par.seeds, len(groups))
        y = rng.integers(0, par.g, len(groups))
        if avoid_top:   # the cell next to the top string's: supports nothing of it
            y = (bucket(seeds, np.full(len(groups), top_fp, dtype=np.uint64), par.g).astype(np.int64) + 1) % par.g
        return {"group": groups, "seed": seeds.astype(np.int64), "y": y.astype(np.int64)}

    kept = [discovery.ancestor((truncate(v, length), len(truncate(v, length)) < length), length)
            for v in values[:5]]
    keys = discovery._search_and_hold_out(proto, honest, kept_extra=kept, keep=40, screen=160)[0]
    onehot, a_inv = discovery._held_group(proto, honest).system(
        discovery.fingerprints([discovery._key_blob(k) for k in keys]))
    worst = int(np.argmin(onehot @ a_inv[:, 0]))
    attacks = {"held-out group, random content (the issue's attack)": forged(np.full(m, last)),
               "held-out group, avoiding the top string's cells": forged(np.full(m, last), avoid_top=True),
               "held-out group, the worst cell for the top string": {
                   "group": np.full(m, last, dtype=np.int64), "seed": np.full(m, worst // par.g, dtype=np.int64),
                   "y": np.full(m, worst % par.g, dtype=np.int64)},
               "spread like honest devices, random content": forged(np.arange(m) % par.groups)}
    bound = poisoning_bound(proto)
    reach = float(before.attrs["forged_report_max_down"])
    rows, worst_down = [], 0.0
    for name, payloads in attacks.items():
        sketch = copy.deepcopy(honest)
        proto.accumulate(sketch, payloads)
        df = decode_candidates(proto, sketch, tops)
        moved = (df.estimate.to_numpy() - before.estimate.to_numpy()) / m
        worst_down = min(worst_down, float(moved.min()))
        rows.append([name, f"{moved[0]:+.2f}", f"{moved.min():+.2f} to {moved.max():+.2f}",
                     f"{100 * np.median(moved * m / before.estimate.to_numpy()):+.1f}%",
                     "yes" if "warning" in df.attrs else "no"])
    print_table(["250 forged reports claim", "top string, per forged report", "five top strings",
                 "median change, all five", "warning"], rows,
                f"12. issue 26 §4, discover deflation: 250 forged among 50,000 honest (eps 4, L = {length}); "
                f"bounds per report: deflation (L+1)·δ = {bound.deflation:.2f}, the frame's "
                f"forged_report_max_down = {reach:.2f}, gain = {bound.gain:.2f} (before: -5.9 for the top string)")
    return [["§4 discover: most a forged report lowered an estimate", f"{-worst_down:.2f}",
             f"<= forged_report_max_down {reach:.2f} (gain {bound.gain:.2f})",
             "ok" if -worst_down <= reach * (1 + 1e-6) and reach <= bound.gain else "FAIL"]]


def smaller_defects(workdir: Path, spec, rng: np.random.Generator) -> list:
    """§5's collector items: non-UTF-8 Authorization under an ingest key, a token in a query string
    with --access-log, control bytes in CSV, and a replay after the batch ids' retention."""
    from estimators.formats import frame_to_csv

    rows, bars = [], []
    body = valid_bodies(spec, 1, 8, rng)[0]
    key_dir = Path(tempfile.mkdtemp(prefix="ldpt-auth-"))
    (key_dir / "metrics.toml").write_text((workdir / "metrics.toml").read_text())
    (key_dir / "key").write_text("bench-ingest-key-0123456789\n")
    (key_dir / "key").chmod(0o600)
    env = {"LDPT_RELAY_SOURCES": "", "LDPT_INGEST_KEY_FILE": str(key_dir / "key")}
    sent = 200

    async def bad_auth(port: int) -> list[int]:
        req = post_request(body).replace(b"\r\n\r\n", b"\r\nAuthorization: Bearer \xff\xfe\xc3(\x80\r\n\r\n", 1)
        return [await send_raw(port, req) for _ in range(sent)]
    with collector(key_dir, env) as (proc, port, admin, log):
        statuses = asyncio.run(bad_auth(port))
    errors = sum("Traceback" in line or " ERROR " in line for line in log)
    counts = ", ".join(f"{s}: {statuses.count(s)}" for s in sorted(set(statuses)))
    rows.append([f"{sent} batches, non-UTF-8 Authorization (ingest key set)", counts,
                 f"{errors} ERROR/traceback log lines", "500 + a traceback each, before the rate limit"])
    bars.append(["§5 non-UTF-8 Authorization: 5xx / ERROR lines", f"{sum(s >= 500 for s in statuses)} / {errors}",
                 "0 / 0, 429s after the burst", "ok" if not errors and all(s in (401, 429) for s in statuses)
                 and 429 in statuses else "FAIL"])

    secret = "pasted-token-0123456789"
    log_dir = Path(tempfile.mkdtemp(prefix="ldpt-alog-"))
    (log_dir / "metrics.toml").write_text((workdir / "metrics.toml").read_text())
    with collector(log_dir, {}, "--access-log") as (proc, port, admin, log):
        req = (f"GET /v1/metrics/page/estimates?token={secret}&window=2026-01-02 HTTP/1.1\r\nHost: x\r\n"
               f"Referer: https://dash.example/ui/?token={secret}\r\nConnection: close\r\n\r\n").encode()
        status = asyncio.run(send_raw(port, req))
        asyncio.run(send_raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
        deadline = time.monotonic() + 20
        while not any("/healthz" in line for line in log) and time.monotonic() < deadline:
            time.sleep(0.05)
    leaked = sum(secret in line for line in log)
    logged = next((m.group(1) for line in log if (m := re.search(r'"GET (/v1/metrics/page/estimates\S*)', line))),
                  None)
    rows.append(["GET ?token=<secret> (and in Referer) with --access-log", f"HTTP {status}",
                 f"{leaked} log lines with the secret; logged as {logged}", "the target and Referer logged as sent"])
    bars.append(["§5 --access-log: lines carrying a query value", str(leaked), "0",
                 "ok" if not leaked and logged else "FAIL"])

    import pandas as pd

    title = "\x1b]0;pwned\x07evil.example"
    df = pd.DataFrame({"value": [title, "\x1b[2J\x1b[Hclear", "=cmd|' /C calc'!A0"], "estimate": [1.0, 2.0, 3.0]})
    controls = lambda text: sum(ord(c) < 0x20 and c not in "\r\n" or 0x7F <= ord(c) < 0xA0  # noqa: E731
                                for c in text)
    safe, raw = frame_to_csv(df), frame_to_csv(df, raw=True)
    rows.append(["CSV of 3 reporter-chosen strings (ESC, BEL, a formula)", "format=csv / --format csv",
                 f"{controls(safe)} control bytes ({controls(raw)} with --raw-csv)", "raw ESC and BEL"])
    bars.append(["§5 CSV: control bytes from reported strings", str(controls(safe)), "0",
                 "ok" if not controls(safe) else "FAIL"])

    # a batch replayed after its id left batch_id_days: the collector cannot date it (no time on
    # the wire), so it is counted again -- documented (docs/operations.md, "Batch ids")
    rep_dir = Path(tempfile.mkdtemp(prefix="ldpt-replay-"))
    (rep_dir / "metrics.toml").write_text((workdir / "metrics.toml").read_text())
    outcomes = []
    for step in ("first", "retry within batch_id_days", "replay after batch_id_days"):
        if step.startswith("replay"):
            with contextlib.closing(sqlite3.connect(rep_dir / "c.sqlite")) as conn, conn:
                old = (time.time() - 20 * 86400)
                conn.execute("UPDATE batches SET received = ?", (time.strftime("%Y-%m-%dT12:00:00+00:00",
                                                                               time.gmtime(old)),))
            subprocess.run([sys.executable, "-c", "from cli.main import main; main()", "prune", "--db",
                            str(rep_dir / "c.sqlite"), "--before", time.strftime("%Y-%m-%d", time.gmtime(old + 86400))],
                           cwd=ROOT, check=True, capture_output=True)
        with collector(rep_dir, {}) as (proc, port, admin, log):
            outcomes.append(asyncio.run(send_raw(port, post_request(body))))
    with contextlib.closing(sqlite3.connect(rep_dir / "c.sqlite")) as conn:
        stored = conn.execute("SELECT coalesce(sum(reports), 0) FROM sketches").fetchone()[0]
    rows.append(["one 8-report batch sent, retried, replayed 20 days later", ", ".join(map(str, outcomes)),
                 f"{stored} reports stored (the replay counted again: documented)", "the same"])
    print_table(["attack", "statuses", "result", "before"], rows, "13. issue 26 §5, the collector's smaller defects")
    return bars


def clock_attacks() -> None:
    """14. Issue 26 §1: a device whose wall clock cycles over three days (or advances a day per
    reading) within 22¾ real hours, through the Python and the Node SDK against a live collector;
    reports sent of 91 (1 per window, [device] epsilon_per_window = 1). Clocks are injected."""
    import json as _json

    from tests.js_runtime_support import built_sdk
    from tests.test_sdk_clock_attack import ATTACK_TOML, CYCLES, attack

    rows = []
    cases = [(f"cycle {list(v)}", v) for v in CYCLES.values()] + [("steady +1 day per reading", tuple(range(91)))]
    try:
        built_sdk()
        node = True
    except BaseException:   # no node/npm here: the Python SDK alone
        node = False
    for name, offsets in cases:
        workdir = Path(tempfile.mkdtemp(prefix="ldpt-clock-"))
        (workdir / "metrics.toml").write_text(ATTACK_TOML)
        with collector(workdir, {}) as (_, port, _admin, _log):
            url = f"http://127.0.0.1:{port}"
            py, _book = attack(url, workdir / "py-device", offsets)
            js = "-"
            if node:
                out = subprocess.run(["node", str(ROOT / "client_sdk/js/e2e/node-fleet.mjs"), "clock", url,
                                      str(workdir / "js-device"), _json.dumps(list(offsets))],
                                     capture_output=True, text=True, timeout=300, cwd=ROOT / "client_sdk/js")
                js = _json.loads(out.stdout)["reports_acked"] if out.returncode == 0 else "error"
        rows.append([name, 91, py, js, "<= 3", "ok" if py <= 3 and (js == "-" or js <= 3) else "FAIL"])
    print_table(["wall clock", "readings", "sent: Python", "sent: Node", "bar", ""], rows,
                "14. issue 26 §1: a lying device clock within one real day (was 61 of 91 for the cycles)")


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.rindex(")") + 2:].startswith("T")


def paused_lock_holder() -> None:
    """15. Issue 26 §2: a process SIGSTOPped while it holds the ledger's lock (its book read), the
    lock file aged an hour, a second process charging the same device meanwhile; reports
    charged under reports_per_window = 1 (Node: the JS SDK's charge worker; Python: flock)."""
    import multiprocessing

    from client_sdk.ledger import Ledger
    from tests.test_sdk_ledger import _commit_paused, charge, noon

    rows = []
    state = Path(tempfile.mkdtemp(prefix="ldpt-paused-py-"))
    holder = multiprocessing.get_context("fork").Process(target=_commit_paused, args=(str(state),))
    holder.start()
    while not _stopped(holder.pid):
        time.sleep(0.01)
    os.utime(state / "ledger.lock", (0, 0))
    second = threading.Thread(target=lambda: box.append(Ledger(state).commit([charge()], elapsed=lambda: noon(20_000))))
    box: list = []
    second.start()
    time.sleep(1.0)
    waited = second.is_alive()
    os.kill(holder.pid, signal.SIGCONT)
    holder.join(30)
    second.join(30)
    rows.append(["Python (flock)", "yes" if waited else "NO", int(holder.exitcode == 0) + int(box[0].outcomes[0] is None)])
    worker = ROOT / "client_sdk/js/build/test/charge_worker.js"
    if worker.exists():
        state = Path(tempfile.mkdtemp(prefix="ldpt-paused-js-"))
        first = subprocess.Popen(["node", str(worker), str(state), "1", "1", "stop"], stdout=subprocess.PIPE, text=True)
        while not _stopped(first.pid):
            time.sleep(0.01)
        os.utime(state / "ledger.nodelock", (time.time() - 3600,) * 2)
        other = subprocess.Popen(["node", str(worker), str(state), "1", "1"], stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        waited = other.poll() is None
        os.kill(first.pid, signal.SIGCONT)
        charged = int(first.communicate(timeout=60)[0].strip() or 0) + int(other.communicate(timeout=60)[0].strip() or 0)
        rows.append(["Node (lock file)", "yes" if waited else "NO", charged])
    print_table(["SDK", "second process waited (1 s)", "reports charged", "bar", ""],
                [r + ["<= 1", "ok" if r[2] <= 1 else "FAIL"] for r in rows],
                "15. issue 26 §2: a paused ledger-lock holder, reports_per_window = 1 (before, Node: 2)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller counts (CI smoke run)")
    opts = ap.parse_args()
    scale = 0.25 if opts.quick else 1.0
    workdir = Path(tempfile.mkdtemp(prefix="ldpt-robust-"))
    (workdir / "metrics.toml").write_text(REGISTRY.format(cats=", ".join(f'"p{i:02d}"' for i in range(20))))
    spec = load_registry(workdir / "metrics.toml").get("page")
    rng = np.random.default_rng(13)
    batch100 = valid_bodies(spec, 1, 100, rng)[0]
    header_timeout = 2.0
    env = {"LDPT_HEADER_TIMEOUT": str(header_timeout), "LDPT_MAX_CONNECTIONS": "400",
           "LDPT_QUEUE_MAX_BATCHES": "16", "LDPT_SQLITE_SYNCHRONOUS": "NORMAL"}
    started = time.monotonic()

    with collector(workdir, env) as (proc, port, admin, log):
        requests = hostile_requests(spec, int(2400 * scale), rng)
        statuses = asyncio.run(fuzz(port, requests))
        five = sum(n for s, n in statuses.items() if s >= 500)
        tracebacks = sum("Traceback" in line or " ERROR " in line for line in log)
        print_table(["hostile requests", "2xx (mutation still valid)", "4xx", "5xx", "no answer",
                     "ERROR/traceback log lines"],
                    [[len(requests), sum(n for s, n in statuses.items() if 200 <= s < 300),
                      sum(n for s, n in statuses.items() if 400 <= s < 500), five,
                      statuses.get(0, 0), tracebacks]], "1. hostile bodies")

        opened, closed, real = asyncio.run(slow_connections(port, int(300 * scale), header_timeout, batch100))
        print_table(["slow connections", f"closed by deadline ({header_timeout:g} s + 1.5 s)",
                     "real batches ok / sent"], [[opened, closed, f"{real} / 20"]],
                    "2. slow-header connections (cap 400 per worker)")

        loads = [start_load(port, 8.0, 128, batch100) for _ in range(2)]
        time.sleep(1.0)
        box: dict[str, list[float]] = {}
        threads = [threading.Thread(target=lambda k=k, p=p: box.__setitem__(k, scrape_latencies(p, 6.0)))
                   for k, p in (("main port", port), ("admin port", admin))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        acked, refused = map(sum, zip(*(load_result(p) for p in loads)))
        offered = acked + refused
        rows = [[k, len(v), pct(v, 0.5), pct(v, 0.99), max(v) * 1000] for k, v in box.items()]
        print_table(["/metrics on", "scrapes", "p50 ms", "p99 ms", "max ms"], rows,
                    f"3. monitoring under overload: {offered:,} batches offered, {acked:,} acknowledged "
                    f"(offered/acked = {offered / max(acked, 1):.1f}x)")

    # 4. SIGKILL under load
    kill_dir = Path(tempfile.mkdtemp(prefix="ldpt-kill-"))
    (kill_dir / "metrics.toml").write_text((workdir / "metrics.toml").read_text())
    acks = kill_dir / "acked.txt"
    with collector(kill_dir, {"LDPT_QUEUE_MAX_BATCHES": "256"}) as (proc, port, admin, log):
        load = start_load(port, 6.0, 32, batch100, acks)
        time.sleep(3.0)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        load.stdout.read()
        load.wait(60)
    acked_ids = {bytes.fromhex(x) for x in acks.read_text().split()} if acks.exists() else set()
    with contextlib.closing(sqlite3.connect(kill_dir / "c.sqlite")) as conn:
        stored = {bytes(r[0]) for r in conn.execute("SELECT batch_id FROM batches")}
        stored_reports = conn.execute("SELECT coalesce(sum(reports), 0) FROM batches").fetchone()[0]
        sketch_reports = conn.execute("SELECT coalesce(sum(reports), 0) FROM sketches").fetchone()[0]
    print_table(["acknowledged", "acknowledged and stored", "lost", "stored (incl. unacked)",
                 "reports: batches vs sketches"],
                [[len(acked_ids), len(acked_ids & stored), len(acked_ids - stored), len(stored),
                  f"{stored_reports:,} vs {sketch_reports:,}"]], "4. SIGKILL during ingest")

    # 5. poisoning bounds: one source, limits applied to loopback (no relay)
    bound = poisoning_bound(server_half(spec))
    shift = lambda m: 100 * m * bound.gain / (HONEST + m)  # noqa: E731 - points, target share 0
    lim_env = {"LDPT_RELAY_SOURCES": ""}
    from collector.config import SETTINGS_BY_NAME

    cap = SETTINGS_BY_NAME["max_reports_per_metric"].default
    rate = SETTINGS_BY_NAME["rate_limit"].default
    burst = SETTINGS_BY_NAME["rate_limit_burst"].default
    capped = valid_bodies(spec, 1, cap, rng)[0]
    big = valid_bodies(spec, 1, 10_000, rng)[0]
    seconds = 10.0
    with collector(workdir, lim_env) as (proc, port, admin, log):
        load = start_load(port, seconds, 8, capped)
        acked, refused = load_result(load)
        big_status = asyncio.run(send_raw(port, post_request(big)))
    key_dir = Path(tempfile.mkdtemp(prefix="ldpt-key-"))
    (key_dir / "metrics.toml").write_text((workdir / "metrics.toml").read_text())
    (key_dir / "key").write_text("bench-ingest-key-0123456789\n")
    (key_dir / "key").chmod(0o600)
    with collector(key_dir, {**lim_env, "LDPT_INGEST_KEY_FILE": str(key_dir / "key")}) as (proc, port, _, _):
        key_status = asyncio.run(send_raw(port, post_request(capped)))
    per_s = rate * cap
    rows = [
        ["none (a relay source)", "one 10,000-report batch", 10_000, f"{shift(10_000):.1f}"],
        [f"max_reports_per_metric = {cap}", f"one batch (10,000 reports: HTTP {big_status})", cap,
         f"{shift(cap):.3f}"],
        [f"rate_limit = {rate:g}/s, burst {burst:g}", f"measured {seconds:g} s ({acked} batches acked, "
         f"{refused} refused)", acked * cap, f"{shift(acked * cap):.2f}"],
        ["  (bound)", "1 minute", int(burst * cap + 60 * per_s), f"{shift(burst * cap + 60 * per_s):.1f}"],
        ["  (bound)", "1 hour", int(burst * cap + 3600 * per_s), f"{shift(burst * cap + 3600 * per_s):.1f}"],
        ["  (bound)", "1 day", int(burst * cap + 86400 * per_s), f"{shift(burst * cap + 86400 * per_s):.1f}"],
        ["ingest key (without it)", f"any (HTTP {key_status})", 0, "0"],
    ]
    print_table(["limit", "one source, over", "forged reports in", "shift, points"], rows,
                f"5. largest shift of an estimate one source can cause (OUE d=20, eps 1: "
                f"g = {bound.gain:.2f} per report, {HONEST:,} honest reports, target share 0)")

    storage_failures(4 if opts.quick else 6)
    # 7-10. issue 18
    summary = issue18(workdir, spec, rng, opts.quick)
    rows = forged_groups(opts.quick)
    honest_figure = rows[0][1]
    print_table(["forged reports claim", "estimate moved per forged report", "x honest placement",
                 "held-out excess (sd)", "group-size p", "warning"],
                [[r[0], f"{r[1]:.2f}", f"{r[1] / honest_figure:.2f}", f"{r[2]:+.1f}", f"{r[3]:.1e}",
                  "yes" if r[4] else "no"] for r in rows],
                f"9. discover, forged groups: 1,000 forged reports for a string nobody holds, {HONEST:,} honest "
                f"(eps 4, L = {8 if opts.quick else 16}; before: held-out 27.9 vs spread 2.05 per report)")
    worst = max(r[1] for r in rows) / honest_figure
    rows = [[name, f"{rate:.1%}", ">= 95%", "ok" if rate >= 0.95 else "FAIL"] for name, rate in summary]
    rows.append(["discover: moved per forged report, worst placement", f"{worst:.2f}x honest placement",
                 "<= 3x", "ok" if worst <= 3 else "FAIL"])
    print_table(["issue 18 attack", "honest success / figure", "bar", ""], rows, "issue 18 bars")
    # 11-13. issue 26 (the collector's half; the SDKs' clock and lock attacks beside them)
    issue26 = segment_flood() + discover_deflation(opts.quick) + smaller_defects(workdir, spec, rng)
    clock_attacks()        # 14-15. the SDKs' half
    paused_lock_holder()
    print_table(["issue 26 attack", "measured", "bar", ""], issue26, "issue 26 bars")
    print(f"\n(total {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
