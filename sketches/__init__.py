"""The server half of every protocol (docs/design.md, "Two halves"): vectorised simulate, wire
decoding, validate, accumulate, cells, estimate and the exact output tables, built from the
device halves in client_sdk.protocols and looked up with one function::

    from sketches import server_half
    half = server_half(spec)          # a MetricSpec, or a device half
    half.validate(half.from_wire(objects)); half.accumulate(sketch, payloads)

Dependency direction: collector, estimators, cli -> sketches -> client_sdk (tests/test_layering.py).
"""

from __future__ import annotations

from .base import CountEstimate, DirectServer, Payloads, PureServer, ServerHalf, Sketch
from .registry import build_server, register, server_half

__all__ = ["CountEstimate", "DirectServer", "Payloads", "PureServer", "ServerHalf", "Sketch",
           "build_server", "register", "server_half"]
