"""The conformance suite (docs/conformance.md): the committed vectors are what the Python
reference computes today, and they pin the mechanism rather than whatever bytes were lying around.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from client_sdk.registry import parse_registry
from client_sdk.remote import registry_from_json
from conformance import generate

VECTORS = generate.VECTORS


@pytest.fixture(scope="module")
def built() -> dict:
    return generate.build()


def test_vectors_are_up_to_date(built: dict) -> None:
    """Regenerate and diff: a change to any derivation, encoder, ledger rule or wire byte shows here.

    If the change is intended (a new protocol version), run ``python -m conformance.generate``
    and say so in the commit: every other SDK must follow."""
    stale = [name for name, doc in built.items()
             if (VECTORS / name).read_text(encoding="utf-8") != generate.render(doc)]
    assert not stale, f"conformance vectors differ from the reference: {stale}; see docs/conformance.md"
    assert sorted(p.name for p in VECTORS.glob("*.json")) == sorted(built)


def test_check_mode_reports_a_stale_file(tmp_path: Path) -> None:
    assert generate.main(["--out", str(tmp_path)]) == 0
    assert generate.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "ledger.json").write_text("{}\n", encoding="utf-8")
    assert generate.main(["--check", "--out", str(tmp_path)]) == 1


def test_report_vectors_are_driven_by_the_given_bytes() -> None:
    """Re-encoding a case with one random byte changed changes the payload somewhere: the
    vectors pin the encoder's use of the stream, not a hidden randomness source."""
    registry = parse_registry(generate.registry_text())
    cases = json.loads((VECTORS / "reports.json").read_text(encoding="utf-8"))["cases"]
    from client_sdk.client import ClientCore
    from client_sdk.options import ClientOptions
    from client_sdk.state import MemoryState

    secret = generate.SECRETS[0]
    core = ClientCore(registry=registry, state=MemoryState(secret=secret),
                      options=ClientOptions(strict=True, clock=lambda: generate.DAY * 86_400.0))
    core.install_registry(registry)
    moved = set()
    for case in cases:
        if case["secret"] != 0 or case["day"] != generate.DAY or not case["random"]:
            continue
        data = bytes.fromhex(case["random"])
        again, used = generate.with_bytes(data, lambda c=case: generate.client_encode(core, c["metric"], c["value"], secret))
        assert used == len(data) and again["payload"] == case["payload"], case["metric"]
        flipped = bytearray(data + bytes(4096))
        for top in (3, 7, 11):   # most significant bytes of the first 32-bit and 64-bit little-endian words
            flipped[top] ^= 0x80
        other, _ = generate.with_bytes(bytes(flipped), lambda c=case: generate.client_encode(core, c["metric"], c["value"], secret))
        if (other["payload"], other["index"]) != (case["payload"], case["index"]):
            moved.add(case["metric"])
    assert moved == set(generate.REPORT_VALUES), set(generate.REPORT_VALUES) - moved


def test_every_protocol_auto_chooses_is_covered() -> None:
    """The report vectors cover every protocol `auto` resolves to for each metric kind, the
    memoised ones, and every protocol an SDK can meet by name."""
    doc = json.loads((VECTORS / "registry.json").read_text(encoding="utf-8"))["registry"]
    covered = {m["resolved_protocol"] for m in doc["metrics"]}
    assert covered >= {"rr", "grr", "ss", "hr", "oue", "sue", "olh", "rappor", "discover", "lgrr", "losue",
                       "loloha", "dbitflip", "duchi", "bitmean", "piecewise", "hybrid", "laplace", "memobitmean"}
    tables = json.loads((VECTORS / "tables.json").read_text(encoding="utf-8"))["configs"]
    assert {c["protocol"] for c in tables} == covered


def test_published_registry_carries_the_encoder_and_round_trips() -> None:
    """GET /v1/registry's encoder objects are ignored by the Python SDK's parser (it derives its
    own) and agree with what that parser derives from the same document."""
    doc = json.loads((VECTORS / "registry.json").read_text(encoding="utf-8"))["registry"]
    again = registry_from_json(json.dumps(doc))
    for entry in doc["metrics"]:
        spec = again.get(entry["name"])
        assert spec.to_json()["encoder"] == entry["encoder"]
        assert spec.fingerprint == entry["fingerprint"]
