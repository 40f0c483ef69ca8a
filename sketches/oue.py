"""OUE's server half (Wang et al. 2017): the unary encoding's (sketches.unary) at p = ½."""

from __future__ import annotations

from client_sdk.protocols.unary import OUE

from .registry import register
from .unary import UnaryServer


@register(OUE)
class OUEServer(UnaryServer):
    """Optimised unary encoding on the server."""


__all__ = ["OUEServer"]
