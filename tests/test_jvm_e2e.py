"""The Kotlin SDK end to end on the JVM, against a real `ldpt serve` (client_sdk/jvm; driver
src/test/kotlin/dev/ldptelemetry/sdk/e2e/Fleet.kt, started with ``java -cp``).

2,000 simulated devices in one JVM, each a `TelemetryClient` with its own state directory
(secret, ledger, outbox), report a categorical (GRR), a string (RAPPOR) and a numeric metric
(auto) of the TypeScript SDK's e2e registry; the collector's estimates cover the truth. Then two
JVM processes share one state directory (one device budget) and together never spend more than
the registry's [device] cap, and `ldpt ledger` reads the book the JVM SDK wrote. Then a
collector outage: the batch waits in the outbox and is counted once when the collector is back.
Last, a fleet sends every batch sealed (Oblivious HTTP) to the collector's gateway.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request

import pytest

from tests.collector_support import ROOT, serving, wait_until
from tests.js_runtime_support import assert_covers_truth, e2e_collector, estimate
from tests.jvm_runtime_support import built_jvm_sdk, java

pytestmark = pytest.mark.e2e

DEVICES = 2000
FLEET = "dev.ldptelemetry.sdk.e2e.Fleet"


def result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


def test_jvm_fleet_estimates_cover_the_truth(tmp_path):
    cp = built_jvm_sdk()
    with e2e_collector(tmp_path) as server:
        fleet = result(java(cp, FLEET, "fleet", server.url, str(tmp_path / "devices"), str(DEVICES)))
        assert fleet["disabled"] == []
        assert fleet["devices"] == fleet["flushed"] == DEVICES
        assert fleet["reported"] == fleet["acked"] == 3 * DEVICES
        device = tmp_path / "devices" / "device-7"
        assert (device / "secret").stat().st_size == 32 and (device / "ledger.json").exists()
        assert (device / "secret").stat().st_mode & 0o077 == 0, "the secret is readable by others"
        assert not list((device / "outbox").glob("*"))   # everything acknowledged was deleted
        assert_covers_truth(server, tmp_path, DEVICES)


def test_two_jvm_processes_never_overspend_one_device_budget(tmp_path):
    cp = built_jvm_sdk()
    with e2e_collector(tmp_path) as server:
        shared, gate = str(tmp_path / "shared"), tmp_path / "go"
        procs = [java(cp, FLEET, "shared", server.url, shared, "5", str(gate)) for _ in range(2)]
        assert wait_until(lambda: len(list(tmp_path.glob("go.*"))) == 2, 120), "a process did not start"
        gate.touch()   # both have read the (empty) book: each mirror allows the whole budget
        results = [result(p) for p in procs]
    # [device] epsilon_per_window = 6, load costs ε = 2: three reports in the window in all; the
    # three more the mirrors allowed were refused by the locked commit and never sent
    assert [r["accepted"] for r in results] == [3, 3], results
    assert sum(r["acked"] for r in results) == sum(r["charged"] for r in results) == 3, results
    assert sum(r["refusedAtCommit"] for r in results) == 3, results
    done = subprocess.run([str(ROOT / ".venv" / "bin" / "ldpt"), "ledger", "--state-dir", shared, "--format", "json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = {row["metric"]: row for row in json.loads(done.stdout)["metrics"]}
    # the book counts every refusal: 2 + 2 against each process's mirror, 3 at the locked commit
    assert rows["load"]["window_reports"] == 3 and rows["load"]["refused_device"] == 7, rows


def test_a_collector_outage_keeps_the_batch_and_the_retry_is_counted_once(tmp_path):
    cp = built_jvm_sdk()
    with e2e_collector(tmp_path) as server:
        url, port = server.url, server.port
        with urllib.request.urlopen(f"{url}/v1/registry", timeout=30) as resp:
            (tmp_path / "registry.json").write_bytes(resp.read())
        server.terminate()
        gate = tmp_path / "up"
        proc = java(cp, FLEET, "outage", url, str(tmp_path / "device"), str(tmp_path / "registry.json"), str(gate))
        assert wait_until(lambda: (tmp_path / "up.down").exists(), 120), "the device did not report"
        assert len(list((tmp_path / "device" / "outbox").glob("*.ldpb*"))) == 1
        args = ["--metrics", "metrics.toml", "--db", "store.sqlite", "--port", str(port), "--query-token-file", "token"]
        with serving(args, tmp_path) as again:   # the same port: the endpoint the device knows
            gate.touch()
            out = result(proc)
            assert out["during"] is False and out["after"] is True, out
            assert out["network_errors"] >= 1 and out["reports_acked"] == 1 and out["outbox_pending"] == 0, out
            assert estimate(again, tmp_path, "theme")["meta"]["n_reports"] == 1


ACCESS = re.compile(r"INFO (\S+) \[[^\]]*\] \"(\w+) (\S+) HTTP")
SEALED_DEVICES = 1000


def test_a_jvm_fleet_sends_sealed_batches_to_the_gateway_and_the_estimates_cover_the_truth(tmp_path):
    cp = built_jvm_sdk()
    with e2e_collector(tmp_path, sealed=True) as server:   # also the collector's OHTTP gateway, access log on
        fleet = result(java(cp, FLEET, "sealed", server.url, str(tmp_path / "devices"), str(SEALED_DEVICES)))
        assert fleet["disabled"] == []
        assert fleet["devices"] == fleet["flushed"] == SEALED_DEVICES
        assert fleet["reported"] == fleet["acked"] == 3 * SEALED_DEVICES
        # one batch per device (3 reports), sealed once; one key fetch for the process
        assert fleet["seal"] == {"sealed": SEALED_DEVICES, "resealed": 0, "key_fetches": 1, "undecryptable_answers": 0}
        assert_covers_truth(server, tmp_path, SEALED_DEVICES)
        requests = [(m, p) for _, m, p in ACCESS.findall("".join(server.log))]
    assert requests.count(("POST", "/.well-known/ohttp-gateway")) == SEALED_DEVICES
    assert requests.count(("GET", "/.well-known/ohttp-gateway")) == 1
    assert ("POST", "/v1/reports") not in requests
