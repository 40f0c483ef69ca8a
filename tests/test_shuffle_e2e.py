"""End to end (issue 28's bars, at CI size): devices of the real Python SDK and of the real
JavaScript SDK in Node (client_sdk/js/e2e/node-shuffle.mjs, many devices in one process), both in
shuffler mode and at the same time → `ldpt shuffle` → `ldpt serve`. The collector's request
records hold only the shuffler's address; the order it forwards is independent of the order
envelopes arrived from either SDK (a rank test against uniform shuffles); the estimates cover the truth of both
populations; and SIGKILLs of shuffler and collector at several points, while devices of both SDKs
send, lose and duplicate nothing — the stored totals equal the acknowledged envelopes exactly.

(bench/shuffle_e2e.py runs the same chain with 20,000 devices of the two SDKs and prints the
figures of docs/benchmarks.md.)
"""

from __future__ import annotations

import re
import signal
import threading
import time
import urllib.request

import msgpack
import numpy as np
import pytest

from cli.estimate_cmd import StoreReader, load_sketch
from client_sdk import MemoryState, RetryPolicy, Seal, Sealer, TelemetryClient, Uploader
from client_sdk.registry import parse_registry
from client_sdk.transport import HTTPTransport
from collector.storage.sqlite import SQLiteStore
from estimators.frequency import estimate_frame
from sketches import server_half

from .js_runtime_support import built_sdk
from .order_statistic import order_dependence_z
from .sdk_support import wait_until
from .shuffle_support import (
    NodeDevices,
    Proxy,
    RecordingTransport,
    Shuffler,
    collector_for_shuffling,
    shuffler_keys,
)

pytestmark = pytest.mark.e2e

THEMES = ["light-secret-theme", "dark-secret-theme", "system-secret-theme"]
REGISTRY = """
shuffle = "required"

[metrics.theme]
kind = "categorical"
categories = ["light-secret-theme", "dark-secret-theme", "system-secret-theme"]
protocol = "grr"
epsilon = 2.0
"""
FAST = RetryPolicy(initial=0.05, maximum=0.5)
#: The order test's bound on |z|: a uniform shuffle exceeds it with probability ~6e-7 (two-sided
#: normal tail), so a CI run is not red by chance; a shuffler that forwards arrival order scores
#: z = sqrt(n_b - 1) per batch (~20 for one batch of 400), far past it.
Z_BOUND = 5.0
ACCESS = re.compile(r"INFO (\S+) \[[^\]]*\] \"(\w+) (\S+) HTTP")


class Devices:
    """Simulated devices of the real SDK, one TelemetryClient (own state, own secret) each, sending
    through ``uploaders`` uploaders (threads) in shuffler mode with one report per batch — one
    envelope per device — the envelopes the shuffler acknowledged recorded as they are."""

    def __init__(self, shuffler: Shuffler, registry, uploaders: int = 8) -> None:  # noqa: ANN001
        self.registry = registry
        self.recording = RecordingTransport(HTTPTransport(shuffler.envelopes_url, timeout=30))
        # keys from the shuffler (it serves the collector's): the devices never contact the collector
        self.uploaders = []
        for _ in range(uploaders):
            sealer = Sealer(Seal.shuffler(shuffler.envelopes_url), HTTPTransport(shuffler.url),
                            post=self.recording)
            self.uploaders.append(Uploader(HTTPTransport(shuffler.url), batch_size=1, max_batch_age=0.01,
                                           retry=FAST, sealer=sealer))

    def report(self, labels) -> None:  # noqa: ANN001
        for i, label in enumerate(labels):
            device = TelemetryClient(registry=self.registry, state=MemoryState(),
                                     uploader=self.uploaders[i % len(self.uploaders)])
            device.report("theme", THEMES[label])

    def flush(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(u.flush(max(0.1, deadline - time.monotonic())) for u in self.uploaders)

    @property
    def acked(self) -> int:
        return sum(u.batcher.counters["reports_acked"] for u in self.uploaders)

    @property
    def duplicates(self) -> int:
        return sum(u.batcher.counters["duplicates"] for u in self.uploaders)

    def close(self) -> None:
        for u in self.uploaders:
            u.close(5)


def shuffler_metric(shuffler: Shuffler, name: str) -> float:
    text = urllib.request.urlopen(shuffler.url + "/metrics", timeout=10).read().decode()
    found = re.search(rf"^ldpt_shuffler_{name} (\S+)$", text, re.M)
    return float(found.group(1)) if found else float("nan")


def drained(shuffler: Shuffler) -> bool:
    try:
        return shuffler_metric(shuffler, "pooled_envelopes") == 0 and \
            shuffler_metric(shuffler, "assigned_envelopes") == 0
    except OSError:
        return False


def store_state(db, spec):  # noqa: ANN001, ANN201
    with SQLiteStore(db, create=False) as store:
        sketch = store.load(spec.name, spec.fingerprint, server_half(spec).new_sketch())
        batches = store._conn.execute("SELECT count(*) FROM batches").fetchone()[0]
        forwarded = store._conn.execute("SELECT count(*) FROM shuffled_batches").fetchone()[0]
        return sketch, batches, forwarded, store.shuffle_records(spec.name, spec.fingerprint)


def test_the_order_statistic_is_standard_normal_under_uniform_shuffles():
    """order_dependence_z's null moments: over seeded uniform shuffles of batches the size the
    e2e test forwards, z has mean 0 and variance 1 (tolerances 5 standard errors), and arrival
    order gives z = sqrt(n - 1) for one batch exactly."""
    rng = np.random.default_rng(7)
    sizes = (400, 400, 200, 350, 250, 400)
    arrival = {i: i for i in range(sum(sizes))}
    starts = np.cumsum((0, *sizes[:-1]))
    draws = 4000
    z = np.array([order_dependence_z([list(s + rng.permutation(n)) for s, n in zip(starts, sizes)], arrival)
                  for _ in range(draws)])
    assert abs(z.mean()) < 5 / np.sqrt(draws)
    assert abs(z.var() - 1) < 5 * np.sqrt(2 / draws)
    assert order_dependence_z([list(range(400))], arrival) == pytest.approx(np.sqrt(399), rel=1e-12)


def forwarded_batches(proxy: Proxy) -> list[list[bytes]]:
    """Each distinct forwarded batch's envelopes, in the order first sent."""
    seen, out = set(), []
    for body in proxy.forwarded:
        doc = msgpack.unpackb(body, raw=False)
        if doc["batch_id"] not in seen:
            seen.add(doc["batch_id"])
            out.append(doc["envelopes"])
    return out


def test_python_and_node_devices_through_the_shuffler_hide_address_and_order_and_estimates_cover_the_truth(tmp_path):
    built_sdk()
    devices_n, node_n, batch = 2000, 800, 400          # devices [0, node_n) are Node's, the rest Python's
    rng = np.random.default_rng(28)
    labels = rng.choice(3, size=devices_n, p=[0.55, 0.3, 0.15])
    registry = parse_registry(REGISTRY)
    collector = collector_for_shuffling(tmp_path, REGISTRY).start()
    node = None
    try:
        with Proxy(lambda: collector.url) as proxy:       # the shuffler's egress, from 127.0.0.3
            shuffler = Shuffler(tmp_path, proxy.url, {"min_batch": batch // 2, "max_batch": batch,
                                                      "max_delay": 3600.0}).start()
            try:
                node = NodeDevices(tmp_path, shuffler.url, shuffler_keys(shuffler.url), registry, "theme",
                                   [THEMES[i] for i in labels[:node_n]])
                devices = Devices(shuffler, registry)
                devices.report(labels[node_n:])
                assert devices.flush(300)
                from_node = node.result()
                assert from_node["devices"] == from_node["flushed"] == from_node["acked"] == node_n, from_node
                assert from_node["disabled"] == [] and len(from_node["envelopes"]) == node_n
                assert devices.acked == devices_n - node_n
                assert wait_until(lambda: drained(shuffler), 120)
                devices.close()
            finally:
                if node is not None:
                    node.kill()
                assert shuffler.stop() == 0
    finally:
        collector.stop()
    spec = registry.get("theme")
    sketch, ids, forwarded, records = store_state(collector.db, spec)
    assert int(sketch.reports.sum()) == devices_n and ids == devices_n and forwarded == devices_n // batch
    (record,) = records
    assert (record.reports, record.envelopes, record.batches) == (devices_n, devices_n, devices_n // batch)
    assert record.smallest_batch == record.largest_batch == batch
    # the central claim ldpt estimate states: from that record, a crowd of one batch
    with StoreReader("db", str(collector.db)) as reader:
        (window,) = reader.privacy(spec, None, None, None)["windows"]
    assert window["amplified"] and window["n"] == batch and window["epsilon"] < server_half(spec).epsilon / 2
    assert window["inputs"]["unshuffled_reports"] == 0 and window["shuffled_reports"] == devices_n
    # the collector's request records: the shuffler's egress address only, and only its routes
    requests = ACCESS.findall(collector.log.read_text(errors="replace"))
    assert {addr for addr, _, _ in requests} == {"127.0.0.3"}
    assert {(m, p) for _, m, p in requests} <= {("POST", "/v1/shuffled-batches"), ("GET", "/.well-known/ohttp-gateway")}
    logged = [line for line in shuffler.log.read_text(errors="replace").splitlines() if "listening on" not in line]
    assert logged and not any("127.0.0.1" in line for line in logged)      # no device address logged
    # order: independent of arrival within each batch (size α = 0.01); the identity order is rejected.
    # Arrival: both SDKs' acknowledgements merged by their wall-clock times
    answered = sorted([*zip(devices.recording.times, devices.recording.acknowledged), *from_node["envelopes"]])
    arrival: dict[bytes, int] = {}
    for _, envelope in answered:
        arrival.setdefault(envelope, len(arrival))
    assert len(arrival) == devices_n
    batches = forwarded_batches(proxy)
    assert sorted(e for b in batches for e in b) == sorted(arrival)     # every Node and Python envelope
    node_envelopes = {e for _, e in from_node["envelopes"]}
    assert sum(e in node_envelopes for b in batches for e in b) == node_n
    z_shuffled = order_dependence_z(batches, arrival)
    z_identity = order_dependence_z([sorted(b, key=arrival.get) for b in batches], arrival)
    assert abs(z_shuffled) < Z_BOUND, z_shuffled
    assert z_identity > 4 * Z_BOUND, z_identity                        # the test has the power
    assert all(b"secret-theme" not in body for body in proxy.forwarded)
    # the estimates cover the truth (both SDKs' devices)
    # 1 - 1e-7 per value: the three intervals miss by chance with probability < 3e-7 (CSPRNG draws)
    df = estimate_frame(spec, load_sketch(spec, str(collector.db), None, None, None), confidence=1 - 1e-7)
    truth = {THEMES[i]: int((labels == i).sum()) for i in range(3)}
    assert all(lo <= truth[v] <= hi for v, lo, hi in zip(df["value"], df["ci_low"], df["ci_high"])), df


def test_sigkill_of_shuffler_and_collector_loses_and_duplicates_nothing(tmp_path):
    built_sdk()
    # Python devices [0, 1200); Node devices: 300 sending beside the first Python ones, and 300
    # more started the moment the shuffler is killed (they find it down and retry)
    python_n, node_n, batch = 1200, 600, 200
    devices_n = python_n + node_n
    rng = np.random.default_rng(29)
    labels = rng.choice(3, size=devices_n)
    registry = parse_registry(REGISTRY)
    collector = collector_for_shuffling(tmp_path, REGISTRY).start()
    kills: list[str] = []
    nodes: list[NodeDevices] = []
    try:
        with Proxy(lambda: collector.url) as proxy:
            shuffler = Shuffler(tmp_path, proxy.url, {"min_batch": batch, "max_batch": batch,
                                                      "max_delay": 3600.0}).start()
            restarting = threading.Lock()

            def restart_later(proc, after=lambda: True) -> None:  # noqa: ANN001
                restarting.acquire()          # held until it serves again: one fault at a time

                def run() -> None:
                    try:
                        time.sleep(0.3)
                        wait_until(after, 60)
                        proc.start()
                    finally:
                        restarting.release()
                threading.Thread(target=run, daemon=True).start()

            # (phase, forwarded requests at least, what): each fires once, in order
            plan = [("after", 2, "shuffler-after-commit"),    # committed; the shuffler never hears it
                    ("sent", 4, "collector-mid-batch"),       # killed while opening or committing
                    ("before", 6, "collector-down")]          # the next delivery finds no collector

            def fault(phase: str) -> bool:
                if not plan or restarting.locked() or "shuffler-while-devices-send" not in kills:
                    return False
                when, after, what = plan[0]
                if phase != when or len(proxy.forwarded) < after:
                    return False
                plan.pop(0)
                kills.append(what)
                if what == "shuffler-after-commit":
                    shuffler.kill()
                    restart_later(shuffler)
                    return True
                if what == "collector-mid-batch":
                    time.sleep(0.02)
                collector.stop(signal.SIGKILL)
                restart_later(collector)
                return False

            proxy.fault = fault
            keys = shuffler_keys(shuffler.url)
            node_values = [THEMES[i] for i in labels[python_n:]]
            nodes.append(NodeDevices(tmp_path, shuffler.url, keys, registry, "theme", node_values[:node_n // 2],
                                     concurrency=10, envelopes=False))
            devices = Devices(shuffler, registry)
            devices.report(labels[:500])
            assert wait_until(lambda: devices.acked >= 300, 120)
            kills.append("shuffler-while-devices-send")
            shuffler.kill()                                  # devices retry the same envelopes
            nodes.append(NodeDevices(tmp_path, shuffler.url, keys, registry, "theme", node_values[node_n // 2:],
                                     envelopes=False))
            restart_later(shuffler, nodes[-1].failed.exists)     # once a Node device found it down
            devices.report(labels[500:python_n])
            assert devices.flush(300)
            assert devices.acked == python_n
            from_node = [n.result() for n in nodes]
            assert [r["acked"] for r in from_node] == [r["flushed"] for r in from_node] == [node_n // 2] * 2, from_node
            assert nodes[1].failed.exists() and from_node[1]["retries"] >= 1, from_node
            assert wait_until(lambda: not restarting.locked() and drained(shuffler), 180)
            devices.close()
            assert shuffler.stop() == 0
    finally:
        for n in nodes:
            n.kill()
        collector.stop()
    assert sorted(kills) == ["collector-down", "collector-mid-batch", "shuffler-after-commit",
                             "shuffler-while-devices-send"], kills
    spec = registry.get("theme")
    sketch, ids, forwarded, records = store_state(collector.db, spec)
    acked = devices.acked + sum(r["acked"] for r in from_node)
    assert int(sketch.reports.sum()) == acked == devices_n             # nothing lost, nothing twice
    assert ids == devices_n and forwarded == devices_n // batch
    (record,) = records
    assert (record.reports, record.envelopes, record.batches, record.smallest_batch) == \
        (devices_n, devices_n, devices_n // batch, batch)
    assert len(proxy.forwarded) > devices_n // batch                    # some batches went twice
