"""The integers a metric's one-report encoder needs, as published to SDKs in other languages.

Several parameters are derived with floating-point mathematics (``math.exp``, ``math.log``,
window and mixture searches): a threshold computed by another language's libm could differ in
its last bit and give a different integer, i.e. a different mechanism from the one the
collector decodes. So the Python reference is the only place they are derived: ``GET
/v1/registry`` publishes, per metric, an ``encoder`` object holding every resolved integer
(thresholds out of 2^32 or 2^64, hash ranges, cohorts, windows, bucket edges), and an SDK in
another language encodes from those integers alone, never re-deriving them (docs/conformance.md).

Integers that can reach 2^53 (thresholds out of 2^64, Laplace's inverse-CDF bounds) are decimal
strings: JSON numbers beyond 2^53 are not exact in JavaScript.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .protocols.blocks import BlockReader, block_protocol
from .protocols.device import DeviceHalf
from .randomness import SCALE

#: Version of the block's layout; an SDK refuses a version it does not know.
ENCODER_VERSION = 1


def protocol_block(proto: DeviceHalf) -> dict[str, Any]:
    """The resolved integers of protocol ``proto`` (docs/conformance.md, "The encoder block"), as
    its device half states them (``DeviceHalf.encoder_block``)."""
    return proto.encoder_block()


def encoder_block(spec: Any) -> dict[str, Any]:
    """The ``encoder`` object of one published metric (a ``MetricSpec``)."""
    block: dict[str, Any] = {"version": ENCODER_VERSION, "protocol": spec.protocol}
    block.update(protocol_block(spec.protocol_impl))
    if spec.is_histogram:
        block["edges"] = list(spec.edge_list)
    if spec.is_mean:
        block["range"] = list(spec.bounds)
    charges = getattr(spec, "window_charges", None)
    if charges is not None:   # a GRR memo (lgrr, loloha) at reports_per_window > 1 (client_sdk.window_charge)
        block["window_charges"] = charges.to_json()
    return block


#: Members that are integers (not booleans, not floats such as 4.0, which JSON Schema's `integer`
#: accepts), checked before the consistency checks below.
_INTEGERS = ("d", "m", "g", "t", "k", "h", "s", "sampled", "seeds", "max_length", "groups", "grid", "window",
             "a", "b")
#: Members that are probabilities out of 2^32, in every protocol (a protocol registers its others).
_THRESHOLDS = ("keep_threshold", "include_threshold", "half_f_threshold", "p_threshold", "q_threshold",
               "p1_threshold", "q1_threshold", "p2_threshold", "gamma_threshold")


def check_block(block: Mapping[str, Any], metric: str, source: str = "GET /v1/registry") -> None:
    """RegistryError naming the metric and member when a published block is inconsistent (the
    SDK-side checks of docs/conformance.md, "Checks an SDK applies to a block", in that order):
    an SDK never encodes from a block whose members disagree with each other. (1) the members'
    types, (2)–(12) the protocol's own checks (registered with its block encoder,
    client_sdk.protocols.blocks), (13) histogram edges, (14) a mean metric's range."""
    reader = BlockReader(block, metric, source)
    if not isinstance(block, Mapping):
        reader.fail("encoder", "the encoder object must be a JSON object")
    if block.get("version") != ENCODER_VERSION:
        reader.fail("version", f"encoder version {block.get('version')!r} is unknown: upgrade this SDK")
    registered = block_protocol(block.get("protocol"))
    if registered is None:
        reader.fail("protocol", f"protocol {block.get('protocol')!r} is unknown: upgrade this SDK")
    for key in registered.members:                                           # (1) every member present
        if block.get(key) is None:   # JSON null too, which the TypeScript SDK reads as absent
            reader.fail(key, f"a {block['protocol']} block needs {key} (docs/conformance.md, \"The encoder block\")")
    thresholds = registered.thresholds
    for key in _INTEGERS:                                                    # (1) integers
        if key in block and key not in thresholds:
            reader.int(key)
    for key in _THRESHOLDS + thresholds:
        if key in block and not 0 <= reader.int(key) <= SCALE:
            reader.fail(key, f"{key} must be in [0, 2^32]")
    if registered.check is not None:                                         # (2)–(12)
        registered.check(reader)
    edges = block.get("edges")
    if edges is not None:                                                    # (13) histogram edges
        d = block.get("d", 2)
        if not isinstance(edges, list) or len(edges) != d + 1:
            reader.fail("edges", f"a histogram over d = {d} buckets has d + 1 = {d + 1} edges")
        if not all(isinstance(e, (int, float)) and not isinstance(e, bool) and math.isfinite(e) for e in edges) \
                or any(not x < y for x, y in zip(edges, edges[1:])):
            reader.fail("edges", "edges must be finite numbers in increasing order")
    bounds_range = block.get("range")
    if bounds_range is not None:                                             # (14) a mean metric's range
        ok = isinstance(bounds_range, list) and len(bounds_range) == 2 and all(
            isinstance(e, (int, float)) and not isinstance(e, bool) and math.isfinite(e) for e in bounds_range)
        if not ok or not bounds_range[0] < bounds_range[1]:
            reader.fail("range", "range must be [lo, hi], finite, lo < hi")


__all__ = ["ENCODER_VERSION", "check_block", "encoder_block", "protocol_block"]
