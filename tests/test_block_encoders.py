"""The SDK encodes from the encoder block alone (issue 29 §4; client_sdk/protocols/blocks.py): for
every protocol and every docs/examples registry metric, the encoder built from the published block
(after a JSON round trip) and the device half built from the parameters give the same reports from
the same word streams, over distinct inputs across the whole domain; a block that differs in one
threshold gives other reports."""

from __future__ import annotations

import json
from typing import Any

import pytest

from client_sdk.encoder_block import check_block, encoder_block
from client_sdk.errors import RegistryError
from client_sdk.protocols.blocks import MeanEncoder, MemoEncoder, block_protocol, encoder_from_block
from client_sdk.randomness import SeededWords
from client_sdk.registry import MetricSpec
from conformance import golden

from .block_support import STREAMS, context, inputs, reports

SPECS = [(f"{reg}:{spec.name}", spec) for reg, registry in golden.registries().items() for spec in registry]


def published(spec: MetricSpec) -> dict[str, Any]:
    """The metric's block as an SDK reads it from GET /v1/registry, checked."""
    block = json.loads(json.dumps(encoder_block(spec)))
    check_block(block, spec.name)
    return block


def test_every_protocol_is_covered():
    """The registries below hold a metric of every protocol of the schema, and each registers one
    block encoder."""
    protocols = {spec.protocol for _, spec in SPECS}
    assert len(protocols) == 19
    assert all(block_protocol(p) is not None for p in protocols)
    assert block_protocol("nope") is None


@pytest.mark.parametrize("name, spec", SPECS, ids=[n for n, _ in SPECS])
def test_the_block_encoder_gives_the_device_halfs_reports(name: str, spec: MetricSpec):
    proto = spec.protocol_impl
    encoder = encoder_from_block(published(spec))
    assert reports(encoder, spec) == reports(proto, spec)
    if isinstance(encoder, MemoEncoder):   # the ledger's memo keys too
        for index, _ in inputs(spec):
            ctx = context(index, spec.name)
            assert encoder.memo_key(index, ctx.secret, spec.name) == proto.memo_key(index, ctx.secret, spec.name)
    if spec.is_mean:   # and the grid rounding of the value (α-point for the memoised mean)
        for t in (-1.0, -0.999, -0.3, 0.0, 1 / 3, 0.77, 1.0):
            ctx = context(0, spec.name)
            if isinstance(encoder, MemoEncoder):
                assert encoder.alpha_round(t, ctx.secret, spec.name) == proto.alpha_round(t, ctx.secret, spec.name)
            else:
                assert isinstance(encoder, MeanEncoder)
                for stream in range(STREAMS):
                    assert encoder.discretise_one(t, SeededWords(stream)) == \
                        proto.discretise_one(t, SeededWords(stream))


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
        out[key] = value // 2 if value > 1 << 30 else (value + (1 << 32)) // 2
    assert out[key] != value
    return out


@pytest.mark.parametrize("name, spec", SPECS, ids=[n for n, _ in SPECS])
def test_a_block_with_another_threshold_gives_other_reports(name: str, spec: MetricSpec):
    block = published(spec)
    assert reports(encoder_from_block(perturbed(block)), spec) != reports(encoder_from_block(block), spec)


def test_an_unknown_protocol_has_no_encoder():
    with pytest.raises(RegistryError, match="unknown: upgrade this SDK"):
        encoder_from_block({"version": 1, "protocol": "quantum", "d": 2})
