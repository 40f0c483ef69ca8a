"""The SDK's public surface: a guarded ``__all__``, lazy imports, and the published registry."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import client_sdk
from client_sdk import AsyncTelemetryClient, TelemetryClient
from client_sdk.errors import FingerprintMismatch, RegistryError
from client_sdk.remote import registry_from_json
from sketches import server_half

from .sdk_support import REGISTRY_TOML, file_lock, make_registry  # noqa: F401 - file_lock: autouse

try:
    import tomllib
except ImportError:   # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent

EXPECTED_EXPORTS = {
    "AsyncHTTPTransport", "AsyncTelemetryClient", "AsyncTransport", "AsyncUploader",
    "ClientOptions", "DropPolicy", "FileState", "HTTPTransport", "LdptError", "MemoryState",
    "OutboxLimits", "Refusal", "RetryPolicy", "Seal", "Sealer", "TelemetryClient", "Transport", "TransportError",
    "Uploader", "load_registry", "read_ledger", "registry_from_json",
}
#: Test doubles: importable from client_sdk.testing only, never from the production surface
#: (FakeCollector too, through the hook: test_fake_collector_resolves_through_the_entry_point).
TEST_DOUBLES = {"AsyncMemoryTransport", "Fault", "MemoryTransport", "RecordingCollector"}


def test_exported_names_are_exactly_the_public_surface():
    assert set(client_sdk.__all__) == EXPECTED_EXPORTS
    assert client_sdk.__all__ == sorted(client_sdk.__all__)
    for name in client_sdk.__all__:
        assert getattr(client_sdk, name) is not None
        assert name in dir(client_sdk)
    with pytest.raises(AttributeError):
        client_sdk.NotAThing  # noqa: B018


def test_test_doubles_live_in_client_sdk_testing_only():
    import client_sdk.testing
    import client_sdk.transport

    for name in TEST_DOUBLES:
        assert getattr(client_sdk.testing, name) is not None
        assert name in client_sdk.testing.__all__
        assert not hasattr(client_sdk, name) and not hasattr(client_sdk.transport, name)


def test_fake_collector_resolves_through_the_entry_point(tmp_path, monkeypatch):
    """``client_sdk.testing.FakeCollector`` is the server distribution's collector.testing.FakeCollector,
    found through the entry point pyproject.toml declares (no SDK module imports the collector);
    a group nobody fills gives ImportError naming what to install, not a silent stand-in."""
    import importlib

    import client_sdk.testing
    from collector.testing import FakeCollector

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"]
    target = declared[client_sdk.testing.DOUBLES_GROUP]["FakeCollector"]
    module, attr = target.split(":")
    assert getattr(importlib.import_module(module), attr) is FakeCollector
    planted = tmp_path / "planted_doubles-1.0.dist-info"   # an installed distribution naming the same target
    planted.mkdir()
    (planted / "METADATA").write_text("Metadata-Version: 2.1\nName: planted-doubles\nVersion: 1.0\n")
    (planted / "entry_points.txt").write_text(f"[ldpt_tests.planted]\nFakeCollector = {target}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert client_sdk.testing.server_double("FakeCollector", "ldpt_tests.planted") is FakeCollector
    with pytest.raises(ImportError, match="install ldp-telemetry"):
        client_sdk.testing.server_double("FakeCollector", "ldpt_tests.nobody")
    with pytest.raises(AttributeError):
        client_sdk.testing.NotADouble  # noqa: B018
    assert "FakeCollector" not in client_sdk.testing.__all__   # `import *` must work with the SDK alone


@pytest.mark.parametrize("kwargs", [{"kind": "lost_ack"}, {"kind": "timeout"}, {"kind": "status", "status": 200},
                                    {"kind": "status", "status": 600}])
def test_a_misspelt_fault_is_refused_not_silently_ignored(kwargs):
    """A Fault FakeCollector cannot act on would let a test pass without injecting anything."""
    from client_sdk.testing import Fault

    with pytest.raises(ValueError, match="Fault"):
        Fault(**kwargs)


def test_every_documented_fault_kind_is_accepted():
    from client_sdk.testing import Fault

    for fault in (Fault(), Fault("drop"), Fault("lost-ack"), Fault("status", 429, retry_after=1.0),
                  Fault("status", 400, slug="undecodable-body")):
        assert fault.kind in ("status", "drop", "lost-ack")


def test_sync_and_async_twins_have_matching_names():
    for sync_name, async_name in (("flush", "aflush"), ("close", "aclose")):
        assert callable(getattr(TelemetryClient, sync_name))
        assert callable(getattr(AsyncTelemetryClient, async_name))
    for shared in ("report", "validate", "opt_out", "stats", "ledger_snapshot"):
        assert getattr(TelemetryClient, shared) is getattr(AsyncTelemetryClient, shared)


def test_importing_the_registry_does_not_load_the_transport():
    code = ("import sys, client_sdk.registry; "
            "print(sorted(m for m in ('client_sdk.client', 'client_sdk.uploader', 'client_sdk.transport', "
            "'client_sdk.aio', 'aiohttp') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_sdk_imports_no_heavy_dependency():
    code = ("import sys, client_sdk; client_sdk.TelemetryClient; "
            "print(sorted(m for m in ('aiohttp', 'pandas', 'scipy', 'collector', 'estimators') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_registry_from_json_round_trips_every_field():
    registry = make_registry()
    doc = json.loads(json.dumps(registry.to_json()))             # what GET /v1/registry serves
    again = registry_from_json(doc)
    assert list(again.metrics) == list(registry.metrics)
    for name, spec in registry.metrics.items():
        other = again.get(name)
        for field in dataclasses.fields(spec):
            assert getattr(other, field.name) == getattr(spec, field.name), (name, field.name)
        assert other.fingerprint == spec.fingerprint
        assert server_half(other).epsilon == server_half(spec).epsilon


def test_auto_is_rebuilt_as_the_collector_resolved_it():
    registry = make_registry(REGISTRY_TOML.replace('protocol = "grr"', 'protocol = "auto"'))
    doc = registry.to_json()
    again = registry_from_json(doc)
    assert again.get("theme").requested_protocol == "auto"
    assert again.get("theme").protocol == registry.get("theme").protocol
    assert again.get("theme").fingerprint == registry.get("theme").fingerprint


def test_a_disagreeing_fingerprint_or_pin_is_a_clear_error():
    doc = make_registry().to_json()
    doc["metrics"][0]["fingerprint"] = "0" * 32
    with pytest.raises(FingerprintMismatch, match="would not encode what the collector expects"):
        registry_from_json(doc)
    good = make_registry().to_json()
    with pytest.raises(FingerprintMismatch, match="pinned"):
        registry_from_json(good, pinned={"theme": "f" * 32})
    with pytest.raises(RegistryError, match="not published"):
        registry_from_json(good, pinned={"gone": "f" * 32})
    with pytest.raises(RegistryError):
        registry_from_json({"metrics": []})
    newer = make_registry().to_json()
    newer["metrics"][0]["a_future_member"] = 1                   # newer collectors may add members
    assert registry_from_json(newer).get("theme")


def test_the_uploader_uses_only_the_owner_protocol_and_the_client_implements_it():
    """client_sdk.uploader reaches a client only through ``Owner``'s public members (no private
    method of the client), and ``ClientCore`` implements every one with the same parameters."""
    import ast
    import inspect
    from pathlib import Path

    import client_sdk.uploader as uploader
    from client_sdk.client import ClientCore

    members = {n for n in vars(uploader.Owner) if not n.startswith("_")}
    assert members == {"ledger", "elapsed_clock", "drain_refusals", "note_committed", "accepts_reports",
                       "wire_dimensions"}
    for name in members:
        ours, theirs = getattr(uploader.Owner, name), getattr(ClientCore, name)
        assert isinstance(theirs, property) == isinstance(ours, property), name
        if not isinstance(ours, property):
            assert list(inspect.signature(theirs).parameters) == list(inspect.signature(ours).parameters), name

    def owner_expr(node: ast.AST) -> bool:   # owner, it.owner, item.owner
        return (isinstance(node, ast.Name) and node.id == "owner") or \
            (isinstance(node, ast.Attribute) and node.attr == "owner")

    tree = ast.parse(Path(uploader.__file__).read_text(encoding="utf-8"))
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and owner_expr(node.value)}
    assert used and used <= members, used - members
    assert not any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                   and node.args and owner_expr(node.args[0]) for node in ast.walk(tree))
