"""The SDK encodes from the encoder block alone (issue 29 §4; client_sdk/protocols/blocks.py), and
each protocol's draw has one home, its block encoder, which the device half delegates to (issue 29
§2). So nothing here compares the block encoders with another Python path: they replay the
committed vectors (conformance/vectors/, generated before the device halves delegated, and read by
the TypeScript and Kotlin SDKs too) from the published blocks alone, and a block that differs in
one threshold gives other reports."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from client_sdk.encoder_block import check_block, encoder_block
from client_sdk.errors import RegistryError
from client_sdk.protocols.blocks import block_protocol, encoder_from_block
from client_sdk.protocols.device import Context
from client_sdk.randomness import OS_WORDS, SCALE
from client_sdk.registry import MetricSpec
from conformance import golden
from conformance.generate import wire_json, with_bytes

from .block_support import reports

SPECS = [(f"{reg}:{spec.name}", spec) for reg, registry in golden.registries().items() for spec in registry]
VECTORS = Path(__file__).resolve().parent.parent / "conformance" / "vectors"


@functools.cache
def vectors(name: str) -> dict[str, Any]:
    """A committed vector file."""
    return json.loads((VECTORS / name).read_text(encoding="utf-8"))


@functools.cache
def published_blocks() -> dict[str, dict[str, Any]]:
    """registry.json's encoder blocks by metric name, each checked as an SDK checks it."""
    blocks = {m["name"]: m["encoder"] for m in vectors("registry.json")["registry"]["metrics"]}
    for name, block in blocks.items():
        check_block(block, name)
    return blocks


def published(spec: MetricSpec) -> dict[str, Any]:
    """The metric's block as an SDK reads it from GET /v1/registry, checked."""
    block = json.loads(json.dumps(encoder_block(spec)))
    check_block(block, spec.name)
    return block


def test_every_protocol_is_covered():
    """The registries below hold a metric of every protocol of the schema, each registers one block
    encoder, and the committed report vectors hold reports of every one of them."""
    protocols = {spec.protocol for _, spec in SPECS}
    assert len(protocols) == 19
    assert all(block_protocol(p) is not None for p in protocols)
    assert block_protocol("nope") is None
    blocks = published_blocks()
    assert {blocks[case["metric"]]["protocol"] for case in vectors("reports.json")["cases"]} == protocols


@pytest.mark.parametrize("name, spec", SPECS, ids=[n for n, _ in SPECS])
def test_a_device_half_encodes_through_its_own_block_encoder(name: str, spec: MetricSpec):
    """One home per draw: the device half's encoder is the one its block registers, built once."""
    proto = spec.protocol_impl
    assert type(proto.block_encoder) is block_protocol(spec.protocol).encoder
    assert proto.block_encoder is proto.block_encoder
    assert proto.block_encoder.two_round == proto.two_round


def replay(encoder: Any, case: dict[str, Any], secret: bytes) -> tuple[Any, int]:
    """(payload in JSON, bytes consumed) of one report case by ``encoder`` alone: the case's
    looked-up index and key, its secret, metric and day, its random bytes as the OS CSPRNG."""
    random = bytes.fromhex(case["random"])
    # a mean metric's client rounds the value first with one word (roundings.json pins that
    # rounding); a memoised mean rounds by its secret, with no word
    skip = 4 if "range" in published_blocks()[case["metric"]] and not encoder.two_round else 0
    ctx = Context(secret, case["metric"], case["day"], OS_WORDS)
    payload, used = with_bytes(random[skip:], lambda: encoder.encode_one(case["index"], case["key"], ctx))
    return wire_json(payload), skip + used


def test_the_block_encoders_replay_every_committed_report():
    """Every case of reports.json (every protocol, three stream prefixes, two secrets, three days
    for OLH): the encoder built from the published block gives the committed payload and consumes
    exactly the committed bytes, and a memoised metric's committed key is the encoder's memo key."""
    doc = vectors("reports.json")
    secrets = [bytes.fromhex(s) for s in doc["secrets"]]
    encoders = {name: encoder_from_block(block) for name, block in published_blocks().items()}
    failures = []
    for n, case in enumerate(doc["cases"]):
        encoder, secret = encoders[case["metric"]], secrets[case["secret"]]
        payload, used = replay(encoder, case, secret)
        if (payload, used) != (case["payload"], len(case["random"]) // 2):
            failures.append(f"case {n} ({case['metric']}): {payload!r} from {used} bytes")
        if encoder.two_round and encoder.memo_key(case["index"], secret, case["metric"]) != case["key"]:
            failures.append(f"case {n} ({case['metric']}): memo key")
    assert not failures, failures[:10]


def test_the_replay_can_fail():
    """The replay above sees a wrong payload and an unconsumed byte."""
    case = dict(vectors("reports.json")["cases"][0])
    encoder = encoder_from_block(published_blocks()[case["metric"]])
    secret = bytes.fromhex(vectors("reports.json")["secrets"][0])
    payload, used = replay(encoder, case, secret)
    assert (payload, used) == (case["payload"], len(case["random"]) // 2)
    case["random"] += "00"
    assert replay(encoder, case, secret)[1] != len(case["random"]) // 2
    assert replay(encoder, {**case, "index": 1 - case["index"]}, secret)[0] != case["payload"]


def test_the_block_encoders_replay_the_committed_roundings():
    """roundings.json: a mean's grid index for one given word, and a memoised mean's α-point index
    for a given secret, from the published block alone."""
    doc = vectors("roundings.json")
    secrets = [bytes.fromhex(s) for s in vectors("derivations.json")["secrets"]]
    blocks = published_blocks()
    for case in doc["randomised"]:
        encoder = encoder_from_block(blocks[case["metric"]])
        j, used = with_bytes(case["word"].to_bytes(4, "little"), lambda e=encoder, t=case["t"]: e.discretise_one(t))
        assert (j, used) == (case["index"], 4), case
    for case in doc["alpha_point"]:
        encoder = encoder_from_block(blocks[case["metric"]])
        assert encoder.alpha_round(case["t"], secrets[case["secret"]], case["metric"]) == case["index"], case
    assert len(doc["randomised"]) > 100 and len(doc["alpha_point"]) > 10


#: The member a block's reports depend on most directly, per protocol: the first one present.
PERTURBED = ("keep_threshold", "include_threshold", "p2_threshold", "p_threshold", "gamma_threshold", "h", "low",
             "a", "bounds")


def perturbed(block: dict[str, Any]) -> dict[str, Any]:
    """``block`` with one threshold moved (halved, or halfway to 2^32 when small)."""
    out = json.loads(json.dumps(block))
    key = next(k for k in PERTURBED if k in out)
    value = out[key]
    if key == "bounds":   # Laplace's inverse CDF: every boundary halved
        out[key] = [str(int(b) // 2) for b in value]
    elif key == "low":    # out of 2^64, a decimal string
        out[key] = str(int(value) // 2)
    elif key == "a":
        out[key] = max(1, value // 2)
    else:
        out[key] = value // 2 if value > 1 << 30 else (value + SCALE) // 2
    assert out[key] != value
    return out


@pytest.mark.parametrize("name, spec", SPECS, ids=[n for n, _ in SPECS])
def test_a_block_with_another_threshold_gives_other_reports(name: str, spec: MetricSpec):
    block = published(spec)
    assert reports(encoder_from_block(perturbed(block)), spec) != reports(encoder_from_block(block), spec)


def test_an_unknown_protocol_has_no_encoder():
    with pytest.raises(RegistryError, match="unknown: upgrade this SDK"):
        encoder_from_block({"version": 1, "protocol": "quantum", "d": 2})
