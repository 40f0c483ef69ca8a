"""SUE's server half (basic one-time RAPPOR, Erlingsson et al. 2014): the unary encoding's
(sketches.unary) at p = e^{ε/2}/(e^{ε/2}+1)."""

from __future__ import annotations

from client_sdk.protocols.unary import SUE

from .registry import register
from .unary import UnaryServer


@register(SUE)
class SUEServer(UnaryServer):
    """Symmetric unary encoding on the server."""


__all__ = ["SUEServer"]
