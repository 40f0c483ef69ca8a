"""1BitMean on the server (Ding, Kulkarni, Yekhanin 2017): Duchi's server half under the name
Windows telemetry uses (sketches.duchi)."""

from __future__ import annotations

from client_sdk.protocols.duchi import BitMean

from .duchi import DuchiServer
from .registry import register


@register(BitMean)
class BitMeanServer(DuchiServer):
    """1BitMean on the server: Duchi's two cells."""


__all__ = ["BitMeanServer"]
