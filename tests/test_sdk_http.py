"""The SDK over real HTTP: an aiohttp server speaking wire format v1 that accepts, answers 503
with Retry-After, 500, 422, or drops the connection; the registry fetched from /v1/registry."""

from __future__ import annotations

import logging
import time

import pytest

from client_sdk import HTTPTransport, RetryPolicy, TelemetryClient
from client_sdk.errors import FingerprintMismatch, RegistryError
from client_sdk.transport import TransportError
from collector.testing import FakeCollector

from .sdk_support import WireServer, decode_body, file_lock, make_registry, refusing_port  # noqa: F401 - file_lock: autouse

FAST = RetryPolicy(initial=0.02, maximum=0.1)


@pytest.fixture
def registry():
    return make_registry()


@pytest.fixture
def server(registry):
    with WireServer(FakeCollector(registry)) as srv:
        yield srv


def test_reports_survive_503_500_and_dropped_connections(tmp_path, registry, server, caplog):
    server.retry_after = "1"
    server.script = [503, "drop", 500]
    client = TelemetryClient(server.url, registry, tmp_path / "s", retry=FAST)
    for v in ("light-secret-theme",):
        client.report("theme", v)
    client.report("country", "country-03")
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="client_sdk"):
        assert client.flush(15.0) is True
    elapsed = time.monotonic() - start
    bodies = [body for _, body, _ in server.seen]
    assert len(bodies) == 4 and len(set(bodies)) == 1            # same batch id and bytes each time
    assert server.collector.accepted_reports == 2
    assert elapsed >= 1.0                                        # Retry-After: 1 was honoured
    assert server.seen[1][2] - server.seen[0][2] >= 0.95
    assert sum("collector unavailable" in r.getMessage() for r in caplog.records) == 1
    client.close()


def test_422_is_final_and_logged_once(tmp_path, registry, server, caplog):
    server.script = [422, 422]
    client = TelemetryClient(server.url, registry, tmp_path / "s", retry=FAST, batch_size=1)
    with caplog.at_level(logging.ERROR, logger="client_sdk"):
        client.report("crash", True)
        assert client.flush(5.0) is False
        client.report("crash", False)
        assert client.flush(5.0) is False
        client.report("crash", True)
        assert client.flush(5.0) is True
    assert len(server.seen) == 3 and server.collector.accepted_reports == 1
    assert sum("HTTP 422" in r.getMessage() for r in caplog.records) == 1
    client.close()


def test_headers_are_constant_and_identify_nobody(tmp_path, registry, server):
    for i in range(2):
        c = TelemetryClient(server.url, registry, tmp_path / f"c{i}")
        c.report("country", "country-11")
        assert c.flush(5.0)
        c.close()
    (h1, b1, _), (h2, b2, _) = server.seen
    assert list(h1) == ["User-Agent", "Accept", "Content-Type", "Cache-Control", "Pragma", "Host", "Connection",
                        "Content-Length"]   # conformance/vectors/headers.json (tests/test_sdk_headers.py: the bytes)
    assert {k: v for k, v in h1.items() if k != "Content-Length"} == \
        {k: v for k, v in h2.items() if k != "Content-Length"}
    assert h1["User-Agent"] == "ldpt-sdk" and h1["Content-Type"] == "application/msgpack"
    assert decode_body(b1)["batch_id"] != decode_body(b2)["batch_id"]


def test_the_registry_is_fetched_pinned_and_cached(tmp_path, registry, server):
    state = tmp_path / "s"
    client = TelemetryClient(server.url, state_dir=state)
    assert client.wait_for_registry(5.0)                          # fetched in the background
    assert client.registry.get("theme").fingerprint == registry.get("theme").fingerprint
    assert (state / "registry.json").exists()
    assert client.report("theme", "dark-secret-theme") and client.flush(5.0)
    client.close()
    with pytest.raises(FingerprintMismatch, match="pinned"):
        TelemetryClient(server.url, state_dir=state, pins={"theme": "0" * 32}, strict=True)
    changed = TelemetryClient(server.url, state_dir=state, pins={"theme": "0" * 32})   # never raises
    assert changed.wait_for_registry(5.0) is False and changed.report("theme", "dark-secret-theme") is False
    assert changed.stats()["disabled"] == 1
    changed.close(0.1)
    pinned = TelemetryClient(server.url, state_dir=state, pins={"theme": registry.get("theme").fingerprint})
    assert pinned.wait_for_registry(5.0)
    pinned.close(0.1)
    with refusing_port() as port:
        dead = f"http://127.0.0.1:{port}"
        offline = TelemetryClient(dead, state_dir=state, timeout=1.0)   # the collector is down: cached copy
        assert offline.wait_for_registry(5.0)
        assert offline.registry.get("crash").fingerprint == registry.get("crash").fingerprint
        assert offline.report("crash", True)
        offline.close(0.2)
        with pytest.raises(RegistryError, match="no cached copy"):
            TelemetryClient(dead, state_dir=tmp_path / "fresh", timeout=1.0, strict=True)


def test_http_transport_errors_and_keep_alive(server):
    transport = HTTPTransport(server.url)
    for _ in range(3):
        assert transport.get_registry().status == 200
    assert len(server.registry_peers) == 3 and len(set(server.registry_peers)) == 1   # one kept-alive connection
    transport.close()
    with refusing_port() as port, pytest.raises(TransportError):
        HTTPTransport(f"http://127.0.0.1:{port}", timeout=1.0).get_registry()
    with pytest.raises(ValueError):
        HTTPTransport("ftp://example.org")
