"""End to end through a shuffler: devices of the real Python and Node SDKs -> `ldpt shuffle` -> `ldpt serve`.

    python bench/shuffle_e2e.py                    # 10,000 Python + 10,000 Node devices, batches of 2,000
    python bench/shuffle_e2e.py --devices 4000 --node-devices 2000 --batch 500

Each simulated device is its own client (own state and secret) in shuffler mode, reporting one
categorical value: one sealed envelope per device. Python devices are ``TelemetryClient``s with
``Seal.shuffler``, sent by a few uploader threads of this process; Node devices are Node
``TelemetryClient``s of the built JavaScript SDK (client_sdk/js/e2e/node-shuffle.mjs: one `node`
process, 50 devices at a time, each its own ``MemoryStore``, ``Seal.shuffler`` to the key
configuration the shuffler serves), sending at the same time as the Python ones. The shuffler
and the collector are real subprocesses on 127.0.0.1 (SQLite stores). Printed:

- devices/s: devices whose envelope the shuffler acknowledged, per second of wall time from the
  first report to the last acknowledgement of either SDK (the machine's load is printed beside it);
- per SDK: devices, reports acknowledged, retries, ack latency p50/p99 (the SDK's POST to the
  shuffler until its 202, per envelope, wall time), the device side's CPU per device (this
  process's, or the node process's, user + system CPU over its devices);
- CPU per envelope at the shuffler and the collector: each process's user + system CPU
  (/proc/PID/stat) over the run, divided by the envelopes it handled;
- the estimate of every value against the true count of both populations, with its 95 % interval;
- the central (epsilon, delta) each window got, as `ldpt estimate` states it (collector/claims.py
  from what the collector recorded).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import _common  # noqa: F401 - puts the repository root on sys.path
import numpy as np
from _common import print_table

from client_sdk import MemoryState, RetryPolicy, Seal, Sealer, TelemetryClient, Uploader
from client_sdk.registry import parse_registry
from client_sdk.transport import HTTPTransport
from tests.sdk_support import wait_until
from tests.shuffle_support import NodeDevices, Shuffler, collector_for_shuffling, shuffler_keys

REGISTRY = """
shuffle = "required"

[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system", "high-contrast"]
protocol = "grr"
epsilon = 2.0
"""
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a live process (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class TimedTransport:
    """The SDK's transport to the shuffler, timing each POST until its answer."""

    def __init__(self, inner) -> None:  # noqa: ANN001
        self.inner = inner
        self.latencies: list[float] = []
        self.acked = 0
        self.lock = threading.Lock()

    def request(self, method, path, body=None, headers=None):  # noqa: ANN001, ANN201
        start = time.perf_counter()
        resp = self.inner.request(method, path, body, headers)
        if method == "POST":
            with self.lock:
                self.latencies.append(time.perf_counter() - start)
                self.acked += resp.status == 202
        return resp

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name):  # noqa: ANN001, ANN204
        return getattr(self.inner, name)


def children_cpu() -> float:
    """User + system CPU of this process's children that exited and were waited for: the
    difference around the node process's run is its CPU (the shuffler and the collector are
    waited for only after it)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def build_js() -> None:
    """`npm run build` in client_sdk/js (the Node devices run on the built package)."""
    js = Path(__file__).resolve().parent.parent / "client_sdk" / "js"
    done = subprocess.run(["npm", "run", "build", "--silent"], cwd=js, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"npm run build failed in client_sdk/js:\n{done.stdout}{done.stderr}")


def percentiles(latencies: list[float]) -> tuple[float, float]:
    """p50 and p99 in milliseconds."""
    lat = sorted(latencies)
    if not lat:
        return float("nan"), float("nan")
    return statistics.median(lat) * 1e3, lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3


def run(devices: int, node_devices: int, batch: int, uploaders: int) -> None:
    rng = np.random.default_rng(20_000)
    total = devices + node_devices
    labels = rng.choice(4, size=total, p=[0.5, 0.3, 0.15, 0.05])   # [0, node_devices): Node's
    registry = parse_registry(REGISTRY)
    spec = registry.get("theme")
    with tempfile.TemporaryDirectory(prefix="ldpt-shuffle-bench-") as tmp:
        tmp_path = Path(tmp)
        collector = collector_for_shuffling(tmp_path, REGISTRY).start()
        try:
            # one-report envelopes are 1,079 bytes: a 4 KiB cap lets min_batch of them fit the
            # default max_forward_bytes (16 MiB) at batches of up to 4,000
            shuffler = Shuffler(tmp_path, collector.url, {"min_batch": batch, "max_batch": batch,
                                                          "max_delay": 3600.0,
                                                          "max_envelope_bytes": 4096}).start()
            try:
                if not wait_until(lambda: _ready(shuffler), 60):   # the collector's keys fetched
                    raise RuntimeError("the shuffler never became ready")
                ups, timed = [], []
                for _ in range(uploaders):    # each uploader its own connection to the shuffler
                    timed.append(TimedTransport(HTTPTransport(shuffler.envelopes_url, timeout=60)))
                    sealer = Sealer(Seal.shuffler(shuffler.envelopes_url), HTTPTransport(shuffler.url),
                                    post=timed[-1])
                    ups.append(Uploader(HTTPTransport(shuffler.url), batch_size=1, max_batch_age=0.01,
                                        retry=RetryPolicy(initial=0.05, maximum=0.5), sealer=sealer))
                keys = shuffler_keys(shuffler.url)
                node_values = [spec.categories[k] for k in labels[:node_devices]]
                cpu0 = (cpu_seconds(shuffler.proc.pid), cpu_seconds(collector.proc.pid))
                load = os.getloadavg()[0]
                py_cpu0, node_cpu0 = time.process_time(), children_cpu()
                start = time.perf_counter()
                node = NodeDevices(tmp_path, shuffler.url, keys, registry, "theme", node_values,
                                   envelopes=False) if node_devices else None
                deadline = time.monotonic() + 3600
                ok = True
                # in rounds of 250 devices per uploader: an uploader's outbox holds at most 1,000
                # batches (it drops the oldest beyond), as a device's would
                for first in range(node_devices, total, 250 * uploaders):
                    for i in range(first, min(total, first + 250 * uploaders)):
                        TelemetryClient(registry=registry, state=MemoryState(),
                                        uploader=ups[i % uploaders]).report("theme", spec.categories[labels[i]])
                    ok &= all(u.flush(max(0.1, deadline - time.monotonic())) for u in ups)
                py_cpu = time.process_time() - py_cpu0
                from_node = node.result(3600) if node is not None else {"acked": 0, "retries": 0, "latencies": [],
                                                                        "flushed": 0, "duplicates": 0}
                elapsed = time.perf_counter() - start
                node_cpu_s = children_cpu() - node_cpu0
                ok &= from_node["flushed"] == node_devices
                drained = wait_until(lambda: _pooled(shuffler) == 0, 600)
                cpu1 = (cpu_seconds(shuffler.proc.pid), cpu_seconds(collector.proc.pid))
                for u in ups:
                    u.close(5)
            finally:
                shuffler.stop()
        finally:
            collector.stop()
        from cli.estimate_cmd import StoreReader, load_sketch
        from estimators.frequency import estimate_frame

        with StoreReader("db", str(collector.db)) as reader:
            privacy = reader.privacy(spec, None, None, None)
            stored = reader.load(spec, None, None, None).total_reports
        frame = estimate_frame(spec, load_sketch(spec, str(collector.db), None, None, None), confidence=0.95)
    py_acked = sum(t.acked for t in timed)
    acked = py_acked + from_node["acked"]
    py_retries = sum(u.batcher.counters["retries"] for u in ups)
    print(f"{devices:,} Python + {node_devices:,} Node devices, batches of {batch:,}, {uploaders} uploader "
          f"threads; load average {load:.1f} on {os.cpu_count()} cores; all flushed: {ok}, pool drained: "
          f"{drained}; stored reports {stored:,} (acknowledged {acked:,}: Python {py_acked:,}, Node "
          f"{from_node['acked']:,}; duplicates answered {from_node['duplicates']:,} Node)")
    rows = []
    for name, n, got, retries, lat, cpu in [
            ("Python", devices, py_acked, py_retries, [x for t in timed for x in t.latencies], py_cpu),
            ("Node", node_devices, from_node["acked"], from_node["retries"], from_node["latencies"], node_cpu_s)]:
        p50, p99 = percentiles(lat)
        rows.append([name, f"{n:,}", f"{got:,}", f"{retries:,}", f"{p50:.2f}", f"{p99:.2f}",
                     f"{cpu / n * 1e3:.3f}" if n else "-"])
    print_table(["SDK", "devices", "acknowledged", "retries", "ack p50 (ms)", "ack p99 (ms)", "device CPU per device (ms)"],
                rows)
    print_table(["measure", "value"], [
        ["devices/s through the shuffler (both SDKs)", f"{total / elapsed:,.0f}"],
        ["shuffler CPU per envelope (ms)", f"{(cpu1[0] - cpu0[0]) / total * 1e3:.3f}"],
        ["collector CPU per envelope (ms)", f"{(cpu1[1] - cpu0[1]) / total * 1e3:.3f}"],
    ])
    truth = {spec.categories[k]: int((labels == k).sum()) for k in range(len(spec.categories))}
    print_table(["value", "true count", "estimate", "95 % interval", "covers"],
                [[v, f"{truth[v]:,}", f"{est:,.0f}", f"[{lo:,.0f}, {hi:,.0f}]", "yes" if lo <= truth[v] <= hi else "NO"]
                 for v, est, lo, hi in zip(frame["value"], frame["estimate"], frame["ci_low"], frame["ci_high"])])
    print_table(["window", "reports", "shuffled", "central epsilon", "delta", "theorem", "crowd", "local epsilon"],
                [[w["window"], f"{w['reports']:,}", f"{w['shuffled_reports']:,}", f"{w['epsilon']:.4g}",
                  f"{w['delta']:.0e}", w["theorem"], f"{w['n']:,}" if w["n"] else "-", f"{w['local_epsilon']:.4g}"]
                 for w in privacy["windows"]])


def _ready(shuffler: Shuffler) -> bool:
    import urllib.request

    try:
        return urllib.request.urlopen(shuffler.url + "/readyz", timeout=10).status == 200
    except OSError:
        return False


def _pooled(shuffler: Shuffler) -> float:
    import re
    import urllib.request

    try:
        text = urllib.request.urlopen(shuffler.url + "/metrics", timeout=10).read().decode()
    except OSError:
        return -1
    found = re.findall(r"^ldpt_shuffler_(?:pooled|assigned)_envelopes (\S+)$", text, re.M)
    return sum(float(x) for x in found) if len(found) == 2 else -1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=10_000, help="Python SDK devices")
    parser.add_argument("--node-devices", type=int, default=10_000, help="Node SDK devices (0: none)")
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--uploaders", type=int, default=8)
    args = parser.parse_args(argv)
    if (args.devices + args.node_devices) % args.batch:
        parser.error("--devices + --node-devices must be a multiple of --batch (fewer than min_batch are never forwarded)")
    if args.node_devices:
        build_js()
    run(args.devices, args.node_devices, args.batch, args.uploaders)
    return 0


if __name__ == "__main__":
    sys.exit(main())
