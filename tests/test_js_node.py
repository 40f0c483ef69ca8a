"""The JavaScript SDK end to end in Node, against a real `ldpt serve` (client_sdk/js/e2e).

2,000 simulated devices, each a Node `TelemetryClient` with its own state directory (secret,
ledger, outbox), report a categorical, a string (RAPPOR) and a numeric metric; the collector's
estimates cover the truth. Then two Node processes share one state directory (one device
budget) and together never spend more than the registry's [device] cap, and `ldpt ledger`
reads the book the Node SDK wrote. Last, a collector outage: the batch waits in the outbox
through refused connections and is counted once when the collector is back.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request

import pytest

from tests.collector_support import serving, wait_until
from tests.js_runtime_support import E2E, assert_covers_truth, built_sdk, e2e_collector, estimate
from tests.ohttp_relay import Relay

pytestmark = pytest.mark.e2e

DEVICES = 2000


def node_fleet(*args: str) -> subprocess.Popen:
    return subprocess.Popen(["node", str(E2E / "node-fleet.mjs"), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return json.loads(out)


def test_node_fleet_estimates_cover_the_truth(tmp_path):
    built_sdk()
    with e2e_collector(tmp_path) as server:
        fleet = result(node_fleet("fleet", server.url, str(tmp_path / "devices"), str(DEVICES)))
        assert fleet["disabled"] == []
        assert fleet["devices"] == fleet["flushed"] == DEVICES
        assert fleet["reported"] == fleet["acked"] == 3 * DEVICES
        device = tmp_path / "devices" / "device-7"
        assert (device / "secret").stat().st_size == 32 and (device / "ledger.json").exists()
        assert not list((device / "outbox").glob("*"))   # everything acknowledged was deleted
        assert_covers_truth(server, tmp_path, DEVICES)


def test_two_node_processes_never_overspend_one_device_budget(tmp_path):
    built_sdk()
    with e2e_collector(tmp_path) as server:
        shared, gate = str(tmp_path / "shared"), tmp_path / "go"
        procs = [node_fleet("shared", server.url, shared, "5", str(gate)) for _ in range(2)]
        assert wait_until(lambda: len(list(tmp_path.glob("go.*"))) == 2, 120), "a process did not start"
        gate.touch()   # both have read the (empty) book: each mirror allows the whole budget
        results = [result(p) for p in procs]
    # [device] epsilon_per_window = 6, load costs ε = 2: three reports in the window in all; the
    # three more the mirrors allowed were refused by the locked commit and never sent
    assert [r["accepted"] for r in results] == [3, 3], results
    assert sum(r["acked"] for r in results) == sum(r["charged"] for r in results) == 3, results
    assert sum(r["refusedAtCommit"] for r in results) == 3, results
    done = subprocess.run([".venv/bin/ldpt", "ledger", "--state-dir", shared, "--format", "json"],
                          cwd=E2E.parent.parent.parent, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert "load" in done.stdout and rows, rows


def test_a_collector_outage_keeps_the_batch_and_the_retry_is_counted_once(tmp_path):
    built_sdk()
    with e2e_collector(tmp_path) as server:
        url, port = server.url, server.port
        (tmp_path / "registry.json").write_text(json.dumps(fetch_json(f"{url}/v1/registry")), encoding="utf-8")
        server.terminate()
        gate = tmp_path / "up"
        proc = node_fleet("outage", url, str(tmp_path / "device"), str(tmp_path / "registry.json"), str(gate))
        assert wait_until(lambda: (tmp_path / "up.down").exists(), 120), "the device did not report"
        # the batch waits in the outbox (the exact bytes), through refused connections; a retry
        # may hold it claimed (renamed *.ldpb.<pid>.<tag>.sending) at this very moment
        assert len(list((tmp_path / "device" / "outbox").glob("*.ldpb*"))) == 1
        args = ["--metrics", "metrics.toml", "--db", "store.sqlite", "--port", str(port),
                "--query-token-file", "token"]
        with serving(args, tmp_path) as again:   # the same port: the endpoint the device knows
            gate.touch()
            out = result(proc)
            assert out["during"] is False and out["after"] is True, out
            assert out["network_errors"] >= 1 and out["reports_acked"] == 1 and out["outbox_pending"] == 0, out
            assert estimate(again, tmp_path, "theme")["meta"]["n_reports"] == 1


def fetch_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


@pytest.mark.parametrize("offsets", [[-6, -3, 0], [0, 3, 6], [0, 1, 3], list(range(91))])
def test_a_clock_cycling_over_three_days_sends_at_most_three_reports(tmp_path, offsets):
    """Issue 26 §1 in the Node SDK against a live collector: 91 wall readings within 22¾ real
    hours (injected clocks) cycling over three days, or advancing a day per reading; it sent
    61 of 91 before the device clock rule (client_sdk/js/src/deviceClock.ts)."""
    from tests.test_sdk_clock_attack import ATTACK_TOML

    built_sdk()
    (tmp_path / "metrics.toml").write_text(ATTACK_TOML, encoding="utf-8")
    with serving(["--metrics", "metrics.toml", "--db", "store.sqlite", "--port", "0"], tmp_path) as server:
        stats = result(node_fleet("clock", server.url, str(tmp_path / "device"), json.dumps(offsets)))
    assert stats["reports_acked"] <= 3, stats
    assert stats["reports_acked"] + stats["refused_window"] + stats["refused_device_window"] == 91, stats
    assert stats["reports_acked"] == stats["charged"]


ACCESS = re.compile(r"INFO (\S+) \[[^\]]*\] \"(\w+) (\S+) HTTP")


@pytest.mark.parametrize("via", ["gateway", "relay"])
def test_node_devices_send_sealed_batches_and_the_estimates_cover_the_truth(tmp_path, via):
    """Sealed batches from Node (dist/sealed.js): straight to the gateway, or through a relay, after
    which the collector's log holds only the relay's address."""
    built_sdk()
    devices = 600
    # both loopback addresses bring many devices' batches (the fleet in one process, the relay)
    with e2e_collector(tmp_path, sealed=True, relay="127.0.0.1,127.0.0.2") as server:
        with Relay(server.url + "/.well-known/ohttp-gateway") as relay:
            args = ["sealed", server.url, str(tmp_path / "devices"), str(devices)] + ([relay.url] if via == "relay" else [])
            fleet = result(node_fleet(*args))
            seen = list(relay.seen)
        assert fleet["disabled"] == [] and fleet["devices"] == fleet["flushed"] == devices
        assert fleet["reported"] == fleet["acked"] == 3 * devices
        assert_covers_truth(server, tmp_path, devices)
        log = server.text()
    posts = [(addr, p) for addr, m, p in ACCESS.findall(log) if m == "POST" and not p.startswith("/v1/metrics/")]
    assert posts and {p for _, p in posts} == {"/.well-known/ohttp-gateway"}      # never a plain batch
    if via == "relay":
        assert len(seen) == len(posts) and {s["client"] for s in seen} == {"127.0.0.1"}
        assert {a for a, _ in posts} == {"127.0.0.2"}                           # only the relay's address
        assert {s["bytes"] for s in seen} == {1024 + 55}
    else:
        assert not seen
