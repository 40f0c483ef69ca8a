"""A registry document the app ships, read with ``registry_from_json(..., rederive=False)``
(issue 29 §4): every metric encodes from its published block with the published ε, nothing is
derived at start-up, the pins vouch for it; without that flag the SDK re-derives each metric and
refuses a block its parameters do not give (a collector cannot change the device's ε)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from client_sdk.client import _MetricTable
from client_sdk.errors import FingerprintMismatch, RegistryError
from client_sdk.registry import Registry, parse_registry
from client_sdk.remote import registry_from_json
from conformance import golden

from .block_support import reports

#: Memoised metrics whose window charges exceed k·ε₁ (published in their blocks), beside the
#: registries of every protocol and docs/examples.
WINDOWED = parse_registry("""
[metrics.mood]
kind = "categorical"
categories = ["a", "b", "c", "d", "e"]
protocol = "lgrr"
epsilon = 0.5
epsilon_inf = 2.0
reports_per_window = 3

[metrics.start]
kind = "categorical"
categories = ["p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8"]
protocol = "loloha"
epsilon = 0.5
epsilon_inf = 2.0
reports_per_window = 2
""", "windowed")
REGISTRIES = {**golden.registries(), "windowed": WINDOWED}


def published(registry: Registry) -> dict[str, Any]:
    """The document GET /v1/registry serves for ``registry``, as JSON."""
    return json.loads(json.dumps(registry.to_json()))


def values_of(registry: Registry):
    """The file domains' values, as ``fetch_registry`` would fetch them."""
    return lambda metric, _published: list(registry.get(metric).categories)


def pins(doc: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: m["fingerprint"] for m in doc["metrics"]}


def compiled(registry: Registry) -> Registry:
    doc = published(registry)
    return registry_from_json(doc, pinned=pins(doc), domains=values_of(registry), rederive=False)


@pytest.mark.parametrize("name", sorted(REGISTRIES))
def test_a_compiled_registry_encodes_and_charges_as_the_toml_one(name: str):
    registry = REGISTRIES[name]
    local, shipped = _MetricTable(registry), _MetricTable(compiled(registry))
    for spec in registry:
        a, b = local.get(spec.name), shipped.get(spec.name)
        assert (a.fingerprint, a.eps, a.eps_inf, a.window_charges, a.max_bytes, a.two_round, a.memoised) == \
            (b.fingerprint, b.eps, b.eps_inf, b.window_charges, b.max_bytes, b.two_round, b.memoised), spec.name
        assert reports(b.encoder, spec) == reports(a.encoder, spec), spec.name
    assert any(local.get(s.name).window_charges is not None for s in registry) or name != "windowed"


def test_a_compiled_registry_derives_nothing():
    """No protocol is built: the numeric mechanisms' window and mixture searches never run."""
    shipped = compiled(golden.registries()["conformance"])
    table = _MetricTable(shipped)
    for spec in shipped:
        table.get(spec.name)
        assert "protocol_impl" not in spec.__dict__ and "fingerprint" not in spec.__dict__, spec.name


def test_a_compiled_registry_needs_a_pin_for_every_metric():
    doc = published(WINDOWED)
    with pytest.raises(RegistryError, match="needs the app's pins"):
        registry_from_json(doc, rederive=False)
    with pytest.raises(RegistryError, match="trusts pinned metrics only") as caught:
        registry_from_json(doc, pinned={"mood": pins(doc)["mood"]}, rederive=False)
    assert caught.value.metric == "start"
    with pytest.raises(FingerprintMismatch, match="the app is pinned to"):
        registry_from_json(doc, pinned={**pins(doc), "mood": "0" * 32}, rederive=False)


def test_a_compiled_registry_still_checks_its_blocks():
    doc = published(WINDOWED)
    doc["metrics"][0]["encoder"]["p1_threshold"] = 1 << 33
    with pytest.raises(RegistryError, match="field 'p1_threshold'"):
        registry_from_json(doc, pinned=pins(doc), rederive=False)
    doc = published(WINDOWED)
    doc["metrics"][0]["epsilon_per_report"] = float("nan")
    with pytest.raises(RegistryError, match="field 'epsilon_per_report'"):
        registry_from_json(doc, pinned=pins(doc), rederive=False)


def test_by_default_a_block_the_parameters_do_not_give_is_refused():
    """A collector publishing a consistent block with a larger keep threshold (a larger ε than the
    fingerprinted parameters give) is refused by the re-derivation, pinned or not."""
    doc = published(WINDOWED)
    tampered = copy.deepcopy(doc)
    tampered["metrics"][0]["encoder"]["p2_threshold"] += 1 << 20
    with pytest.raises(RegistryError, match="field 'p2_threshold'"):
        registry_from_json(tampered)
    with pytest.raises(RegistryError, match="field 'p2_threshold'"):
        registry_from_json(tampered, pinned=pins(doc))
    assert registry_from_json(doc, pinned=pins(doc)).published["mood"].derived


def tampered(mutate) -> dict[str, Any]:
    """WINDOWED's published document with its first metric (mood: L-GRR, 3 reports per window) changed."""
    doc = published(WINDOWED)
    mutate(doc["metrics"][0])
    return doc


@pytest.mark.parametrize("charges", [
    {"cumulative": [0.5, float("nan"), 1.5], "slope": 0.51},      # NaN passes every budget check
    {"cumulative": ["0.5", "1.0", "1.5"], "slope": 0.51},         # numbers as strings
    {"cumulative": [0.5, 1.0, 1.5], "slope": True},               # a bool as a number
    {"cumulative": [0.5, 1.0, 1.5], "slope": float("inf")},
    {"cumulative": [0.0, 0.0, 0.0], "slope": 0.0},                # charges nothing for a report
    {"cumulative": [0.5, 1.0], "slope": 0.51},                    # J = min(reports_per_window, 64) = 3
    {"cumulative": [0.5, 1.0, 1.5]},                              # no slope
    [0.5, 1.0, 1.5],                                              # not an object
])
def test_a_compiled_registry_refuses_window_charges_that_are_not_finite_figures(charges: Any):
    """docs/conformance.md: an SDK refuses a registry whose window charges are not finite numbers;
    the compiled path charges from them unchecked otherwise (and a list crashed with a TypeError)."""
    doc = tampered(lambda m: m["encoder"].__setitem__("window_charges", charges))
    with pytest.raises(RegistryError, match="field 'window_charges'") as caught:
        registry_from_json(doc, pinned=pins(doc), rederive=False)
    assert caught.value.metric == "mood"


def test_a_compiled_memoised_metric_needs_its_longitudinal_epsilon():
    """Without epsilon_longitudinal an L-GRR block still encodes memoised reports, but the ledger
    would charge no ε∞ for a new value: the lifetime budget would not bound what is revealed."""
    doc = tampered(lambda m: m.pop("epsilon_longitudinal"))
    with pytest.raises(RegistryError, match="field 'epsilon_longitudinal'") as caught:
        registry_from_json(doc, pinned=pins(doc), rederive=False)
    assert caught.value.metric == "mood"
    doc = tampered(lambda m: m.__setitem__("epsilon_longitudinal", m["epsilon_per_report"] / 2))
    with pytest.raises(RegistryError, match="field 'epsilon_longitudinal'"):
        registry_from_json(doc, pinned=pins(doc), rederive=False)
    url = published(golden.registries()["conformance"])
    url["metrics"] = [m for m in url["metrics"] if m["resolved_protocol"] == "rappor"]
    url["metrics"][0].pop("epsilon_longitudinal")   # RAPPOR's permanent randomised response is memoised
    with pytest.raises(RegistryError, match="field 'epsilon_longitudinal'"):
        registry_from_json(url, pinned=pins(url), rederive=False)


DOMAINS = parse_registry("""
[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system", "contrast", "sepia"]
protocol = "grr"
epsilon = 1.0

[metrics.crash]
kind = "boolean"
protocol = "rr"
epsilon = 1.0

[metrics.latency]
kind = "numeric"
range = [0, 400]
buckets = 4
protocol = "oue"
epsilon = 1.0
""", "domains")


@pytest.mark.parametrize("name, d", [("theme", 1 << 40), ("theme", 6), ("theme", 4), ("crash", 3), ("latency", 5)])
def test_a_compiled_block_over_another_domain_than_its_metric_is_refused(name: str, d: int):
    """GRR at d = 2^40 for five themes keeps the value with the published p but spreads the rest over
    2^40 values: P(x | x) / P(x | x') ≈ 2^40·p/(1 − p), an ε near 28 charged as 1; a smaller d reports
    outside no value it should. The metric's own domain size is known without deriving anything."""
    doc = published(DOMAINS)
    entry = next(m for m in doc["metrics"] if m["name"] == name)
    entry["encoder"]["d"] = d
    if "edges" in entry["encoder"]:   # consistent with d, so that only the domain disagrees
        entry["encoder"]["edges"] = [0, 50, 100, 200, 300, 400][: d + 1]
    with pytest.raises(RegistryError, match="field 'd'") as caught:
        registry_from_json(doc, pinned=pins(doc), rederive=False)
    assert caught.value.metric == name
