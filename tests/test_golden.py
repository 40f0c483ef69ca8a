"""The behaviour freeze (conformance/golden.py): fingerprints, encoder blocks, ε, seeded simulation
and estimate digests and the collector's verdicts on fixed bodies are what conformance/golden.json
recorded, for every protocol and every docs/examples registry.

If a change is meant to alter behaviour, rerun ``python -m conformance.golden`` and say why in the
commit; a refactoring must leave it unchanged."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conformance import golden

ALL_PROTOCOLS = {"rr", "grr", "oue", "sue", "olh", "hr", "ss", "rappor", "discover", "lgrr", "losue",
                 "loloha", "dbitflip", "laplace", "duchi", "bitmean", "piecewise", "hybrid", "memobitmean"}


@pytest.fixture(scope="module")
def committed() -> dict:
    return json.loads(golden.GOLDEN.read_text(encoding="utf-8"))


def test_every_protocol_and_example_registry_is_frozen(committed: dict) -> None:
    from client_sdk.protocols import LONGITUDINAL_NUMERIC_NAMES, LONGITUDINAL_PROTOCOL_NAMES, PROTOCOL_NAMES
    from client_sdk.protocols.numeric import NUMERIC_PROTOCOL_NAMES

    every = {*PROTOCOL_NAMES, *NUMERIC_PROTOCOL_NAMES, *LONGITUDINAL_PROTOCOL_NAMES, *LONGITUDINAL_NUMERIC_NAMES}
    assert every == ALL_PROTOCOLS   # a new protocol must join the conformance registry
    frozen = {e["protocol"] for r in committed["registries"].values() for e in r["metrics"].values()}
    assert frozen == every
    examples = {f"docs/examples/{p.name}" for p in golden.EXAMPLES.glob("*.toml")}
    assert examples | {"conformance"} == set(committed["registries"])
    for reg in committed["registries"].values():
        for entry in reg["metrics"].values():
            verdicts = [v for _, v in entry["verdicts"]]
            assert any(v.startswith("accepted") for v in verdicts)
            assert any(v.startswith("422 ") for v in verdicts)   # hostile bodies are refused
            assert "error" not in entry["simulate"]["estimate"] or entry["protocol"] == "discover"


def test_behaviour_is_unchanged_but_discovery(committed: dict) -> None:
    """Every metric but the discover ones (their decoding takes ~5 s: the e2e test below runs them),
    rebuilt in process and compared entry by entry."""
    rebuilt = golden.build(keep=lambda spec: spec.protocol != "discover")
    for name, reg in rebuilt["registries"].items():
        old = committed["registries"][name]
        assert reg["document"] == old["document"], name
        for metric, entry in reg["metrics"].items():
            moved = golden.differences(old["metrics"][metric], entry)
            assert not moved, f"{name} {metric}: {moved[:5]}"


def test_differences_name_the_moved_entry(committed: dict) -> None:
    changed = json.loads(json.dumps(committed))
    changed["registries"]["conformance"]["metrics"]["theme"]["simulate"]["sketch"] = "0" * 32
    changed["registries"]["conformance"]["metrics"]["crash"]["verdicts"].pop()
    moved = golden.differences(committed, changed)
    assert len(moved) == 2
    assert moved[0].startswith("/registries/conformance/metrics/crash/verdicts:")
    assert moved[1].startswith("/registries/conformance/metrics/theme/simulate/sketch:")


@pytest.mark.e2e
def test_check_mode_is_green() -> None:
    """``python -m conformance.golden --check`` in a fresh process: the command CI and a refactoring run."""
    result = subprocess.run([sys.executable, "-m", "conformance.golden", "--check"], cwd=golden.ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "unchanged"
