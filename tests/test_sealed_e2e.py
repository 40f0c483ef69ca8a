"""End to end: the Python SDK sends sealed batches to a real `ldpt serve` gateway, directly and
through a minimal OHTTP relay; the collector sees only the relay's address, and the estimates
cover the truth."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

from cli.estimate_cmd import load_sketch
from client_sdk import MemoryState, RetryPolicy, Seal, Sealer, TelemetryClient, Uploader
from client_sdk.transport import HTTPTransport
from collector import ohttp_keys
from estimators.frequency import estimate_frame

from .ohttp_relay import Relay
from .sdk_support import REGISTRY_TOML, collector, make_registry

pytestmark = pytest.mark.e2e

THEMES = ["light-secret-theme", "dark-secret-theme", "system-secret-theme"]
FAST = RetryPolicy(initial=0.05, maximum=0.5)
#: Simulated devices through the relay (8 per batch: the per-batch cap of one device applies to
#: every envelope). They encode on the OS CSPRNG (TelemetryClient takes no seed): intervals at
#: 1 - 1e-7, 3e-7 per run for the 3 values (was 1 - 1e-5 over 1,600: 3e-5); 2,400 devices keep the
#: power relative to the counts (5.33 σ at 2,400 is 4.35 σ of 1,600 as a share of each count).
DEVICES = 2400
CONFIDENCE = 1 - 1e-7
ACCESS = re.compile(r"INFO (\S+) \[[^\]]*\] \"(\w+) (\S+) HTTP")


def serve_args(tmp_path):
    keys = tmp_path / "keys"
    ohttp_keys.generate(keys)
    settings = tmp_path / "serve.toml"
    settings.write_text('relay_sources = "127.0.0.2"\n', encoding="utf-8")   # the relay's address
    return ("--ohttp-keys-dir", str(keys), "--access-log", "--config", str(settings))


def test_a_device_sends_sealed_batches_straight_to_the_gateway(tmp_path):
    with collector(tmp_path, REGISTRY_TOML, serve_args(tmp_path)) as col:
        client = TelemetryClient(col.url, make_registry(), tmp_path / "device", seal=Seal.gateway(), retry=FAST,
                                 max_batch_age=0.05)
        client.report("theme", THEMES[1])
        client.report("crash", True)
        assert client.flush(20)
        stats = client.stats()
        assert stats["reports_acked"] == 2 and stats["duplicates"] == 0
        assert client.close(5)
    log = col.log.read_text(errors="replace")
    requests = [(m, p) for _, m, p in ACCESS.findall(log)]
    assert ("POST", "/.well-known/ohttp-gateway") in requests and ("GET", "/.well-known/ohttp-gateway") in requests
    assert ("POST", "/v1/reports") not in requests
    sketch = load_sketch(make_registry().get("theme"), str(col.db), None, None, None)
    assert int(sketch.reports.sum()) == 1


def test_through_a_relay_the_collector_sees_only_the_relays_address_and_estimates_cover_the_truth(tmp_path):
    rng = np.random.default_rng(11)
    labels = rng.choice(3, size=DEVICES, p=[0.6, 0.3, 0.1])
    registry = make_registry()
    with collector(tmp_path, REGISTRY_TOML, serve_args(tmp_path)) as col:
        with Relay(col.url + "/.well-known/ohttp-gateway") as relay:
            key_source = HTTPTransport(col.url)   # the key configuration, fetched once from the collector
            sealer = Sealer(Seal.relay(relay.url), key_source)
            uploader = Uploader(HTTPTransport(col.url), batch_size=8, max_batch_age=0.05, retry=FAST, sealer=sealer)
            for label in labels:
                device = TelemetryClient(registry=registry, state=MemoryState(), uploader=uploader)
                device.report("theme", THEMES[label])
            assert uploader.flush(120)
            assert uploader.batcher.counters["reports_acked"] == DEVICES
            assert uploader.batcher.counters["duplicates"] == 0
            uploader.close(5)
            seen = list(relay.seen)
        time.sleep(0.2)
    assert len(seen) == DEVICES // 8 == sealer.counters["sealed"]
    assert {s["client"] for s in seen} == {"127.0.0.1"}            # the relay saw the devices ...
    assert {tuple(s["headers"]) for s in seen} <= {("Accept", "Cache-Control", "Connection", "Content-Length",
                                                    "Content-Type", "Host", "Pragma", "User-Agent")}
    assert len({s["bytes"] for s in seen}) == 1                     # ... one envelope size for all
    assert all(b"secret-theme" not in s["body"] for s in seen)
    log = col.log.read_text(errors="replace")
    gateway_posts = [addr for addr, m, p in ACCESS.findall(log) if (m, p) == ("POST", "/.well-known/ohttp-gateway")]
    assert len(gateway_posts) == len(seen)
    assert set(gateway_posts) == {"127.0.0.2"}                      # ... the collector only the relay
    spec = registry.get("theme")
    sketch = load_sketch(spec, str(col.db), None, None, None)
    assert int(sketch.reports.sum()) == DEVICES
    df = estimate_frame(spec, sketch, confidence=CONFIDENCE)
    truth = {THEMES[i]: int((labels == i).sum()) for i in range(3)}
    missed = [(v, truth[v], lo, hi) for v, lo, hi in zip(df["value"], df["ci_low"], df["ci_high"])
              if not lo <= truth[v] <= hi]
    assert not missed   # an estimate off by >= 5.33 standard errors (~330 of ~1,470 light) fails
