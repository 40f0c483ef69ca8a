"""One lookup from a device half to its server half: the only protocol table of the server.

Each ``sketches/<name>.py`` registers its server half once, at import, with
``@register(DeviceClass)``; ``server_half`` imports that module the first time a device half of
the protocol is looked up.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar

from client_sdk.protocols.device import DeviceHalf
from client_sdk.protocols.factory import build_protocol

from .base import ServerHalf

_HALVES: dict[type[DeviceHalf], type[ServerHalf]] = {}
S = TypeVar("S", bound=type[ServerHalf])


def register(device_type: type[DeviceHalf]) -> Callable[[S], S]:
    """Class decorator: the decorated server half serves device halves of exactly ``device_type``."""
    def decorate(cls: S) -> S:
        if device_type in _HALVES:
            raise ValueError(f"{device_type.__name__} already has a server half: {_HALVES[device_type].__name__}")
        cls.device_type = device_type
        _HALVES[device_type] = cls
        return cls
    return decorate


def server_half(of: Any) -> Any:
    """The server half of a metric (a ``MetricSpec``: its ``protocol_impl``) or of a device half,
    built once per device half and cached on it; a server half is its own."""
    device = getattr(of, "protocol_impl", of)
    if isinstance(device, ServerHalf):   # a server half already
        return device
    half = device.server_half_cache
    if half is None:
        kind = type(device)
        if kind not in _HALVES:
            importlib.import_module(f"{__package__}.{device.name}")   # registers it
        half = device.server_half_cache = _HALVES[kind](device)
    return half


def build_server(name: str, domain_size: int | None, epsilon: float | None,
          options: dict[str, Any] | None = None) -> Any:
    """The server half of protocol ``name`` at these parameters (ValueError with a reason on bad ones)."""
    return server_half(build_protocol(name, domain_size, epsilon, options))


__all__ = ["build_server", "register", "server_half"]
