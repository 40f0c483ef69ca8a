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

from typing import Any

from .protocols.device import DeviceHalf

#: Version of the block's layout; an SDK refuses a version it does not know.
ENCODER_VERSION = 1


def protocol_block(name: str, proto: DeviceHalf) -> dict[str, Any]:
    """The resolved integers of protocol ``name`` (docs/conformance.md, "The encoder block"), as
    its device half states them (``DeviceHalf.encoder_block``)."""
    return proto.encoder_block()


def encoder_block(spec: Any) -> dict[str, Any]:
    """The ``encoder`` object of one published metric (a ``MetricSpec``)."""
    block: dict[str, Any] = {"version": ENCODER_VERSION, "protocol": spec.protocol}
    block.update(protocol_block(spec.protocol, spec.protocol_impl))
    if spec.is_histogram:
        block["edges"] = list(spec.edge_list)
    if spec.is_mean:
        block["range"] = list(spec.bounds)
    charges = getattr(spec, "window_charges", None)
    if charges is not None:   # a GRR memo (lgrr, loloha) at reports_per_window > 1 (client_sdk.window_charge)
        block["window_charges"] = charges.to_json()
    return block


__all__ = ["ENCODER_VERSION", "encoder_block", "protocol_block"]
