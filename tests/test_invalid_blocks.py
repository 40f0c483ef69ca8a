"""conformance/vectors/invalid_blocks.json: every inconsistent encoder block is refused by the
Python SDK when it reads a published registry (a RegistryError naming the metric and member,
never a silent encode), the schema refuses exactly the cases it says it does, and every block a
registry publishes passes the checks (docs/conformance.md, "Checks an SDK applies to a block")."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest

from client_sdk.encoder_block import check_block
from client_sdk.errors import RegistryError
from client_sdk.remote import registry_from_json
from conformance import block_types, generate

VALIDATOR = jsonschema.Draft202012Validator(block_types.load_schema())
REGISTRY = json.loads((generate.VECTORS / "registry.json").read_text(encoding="utf-8"))["registry"]
CASES = json.loads((generate.VECTORS / "invalid_blocks.json").read_text(encoding="utf-8"))["cases"]


def with_block(metric: str, block: Any) -> dict[str, Any]:
    """registry.json's document with one metric's encoder block replaced."""
    doc = copy.deepcopy(REGISTRY)
    next(m for m in doc["metrics"] if m["name"] == metric)["encoder"] = block
    return doc


def test_every_published_block_passes_the_checks() -> None:
    for entry in REGISTRY["metrics"]:
        check_block(entry["encoder"], entry["name"])
    assert len(registry_from_json(REGISTRY)) == len(REGISTRY["metrics"])


def test_the_cases_cover_every_check_and_protocol_family() -> None:
    fields = {c["field"] for c in CASES}
    assert {"version", "t", "keep_threshold", "g", "m", "h", "s", "sampled", "groups", "p1_threshold", "window",
            "piecewise.grid", "step", "low", "bounds", "edges", "range"} <= fields
    assert any(c["schema_refuses"] for c in CASES) and any(not c["schema_refuses"] for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["reason"] for c in CASES])
def test_an_inconsistent_block_is_refused(case: dict[str, Any]) -> None:
    assert VALIDATOR.is_valid(case["block"]) is not case["schema_refuses"]
    with pytest.raises(RegistryError) as caught:
        check_block(case["block"], case["metric"])
    assert (caught.value.metric, caught.value.field) == (case["metric"], case["field"])
    with pytest.raises(RegistryError, match=f"metric '{case['metric']}': field '{case['field']}'"):
        registry_from_json(with_block(case["metric"], case["block"]))


@pytest.mark.parametrize("member, value", [("d", 5.0), ("d", True), ("keep_threshold", 3.0e9)])
def test_an_integer_member_must_be_a_json_integer(member: str, value: Any) -> None:
    """JSON Schema's `integer` takes 5.0, and JavaScript's JSON.parse cannot tell it from 5: the
    Python SDK refuses it (this case is not in the shared vectors)."""
    block = dict(next(m["encoder"] for m in REGISTRY["metrics"] if m["name"] == "theme"), **{member: value})
    with pytest.raises(RegistryError, match=f"field '{member}'"):
        check_block(block, "theme")


@pytest.mark.parametrize("metric, member, value", [
    ("theme", "keep_threshold", None),           # one more or less than the reference's integer
    ("region", "g", None),
    ("load_laplace", "window", None),
])
def test_a_consistent_block_that_is_not_the_parameters_own_is_refused(metric: str, member: str, value: Any) -> None:
    """A block that passes every check but differs from what the metric's parameters give: the
    Python SDK names the member instead of encoding from other integers than the published ones."""
    block = copy.deepcopy(next(m["encoder"] for m in REGISTRY["metrics"] if m["name"] == metric))
    block[member] += 1
    if metric == "load_laplace":   # keep check 12: two more bounds of 2^64
        block["bounds"] += [str(1 << 64)] * 2
    check_block(block, metric)
    with pytest.raises(RegistryError, match=f"metric '{metric}': field '{member}'"):
        registry_from_json(with_block(metric, block))


SCHEMA_DEFS = block_types.load_schema()["$defs"]


@pytest.mark.parametrize("entry", REGISTRY["metrics"], ids=[m["name"] for m in REGISTRY["metrics"]])
def test_a_block_without_a_member_its_protocol_needs_is_refused(entry: dict[str, Any]) -> None:
    """Every member the schema requires of the block's protocol, left out, is a RegistryError naming
    it, in the checks and in both reading paths (before: a KeyError from the encoder of a compiled
    registry, a TypeError from the mean mechanisms' checks)."""
    name, block = entry["name"], entry["encoder"]
    pins = {m["name"]: m["fingerprint"] for m in REGISTRY["metrics"]}
    for member, null in [(m, null) for m in SCHEMA_DEFS[block["protocol"]]["required"] for null in (False, True)]:
        partial = {k: v for k, v in block.items() if k != member}
        if null:   # JSON null, as the TypeScript SDK reads it: absent
            partial[member] = None
        with pytest.raises(RegistryError) as caught:
            check_block(partial, name)
        assert (caught.value.metric, caught.value.field) == (name, member)
        for rederive in (True, False):
            with pytest.raises(RegistryError, match=f"metric '{name}': field '{member}'"):
                registry_from_json(with_block(name, partial), pinned=pins, rederive=rederive)


@pytest.mark.parametrize("rederive", [True, False])
def test_a_metric_listed_twice_is_refused(rederive: bool) -> None:
    """The later entry would replace the earlier one unseen (another block, another ε); the
    document is refused naming the metric, as the TypeScript and Kotlin SDKs refuse it."""
    doc = copy.deepcopy(REGISTRY)
    doc["metrics"].append(copy.deepcopy(next(m for m in doc["metrics"] if m["name"] == "theme")))
    pins = {m["name"]: m["fingerprint"] for m in doc["metrics"]}
    with pytest.raises(RegistryError, match="listed twice") as caught:
        registry_from_json(doc, pinned=pins, rederive=rederive)
    assert caught.value.metric == "theme" and caught.value.field == "name"
