"""LDP frequency oracles, one module each, sharing the contract in ``base``.

``PROTOCOLS`` maps a protocol name (as written in the registry) to its class; ``build``
makes a protocol object from a name and a parameter mapping.
"""

from __future__ import annotations

from .base import CountEstimate, Payloads, Protocol, Sketch

__all__ = ["CountEstimate", "Payloads", "Protocol", "Sketch", "PROTOCOL_NAMES", "LONGITUDINAL_PROTOCOL_NAMES",
           "LONGITUDINAL_NUMERIC_NAMES"]

#: Frequency-oracle protocols, in the order `ldpt plan` lists them.
PROTOCOL_NAMES = ("rr", "grr", "oue", "sue", "olh", "hr", "ss", "rappor", "discover")
#: Two-round memoised protocols (docs/protocols.md, "L-protocols"): they need ``epsilon_inf``.
LONGITUDINAL_PROTOCOL_NAMES = ("lgrr", "losue", "loloha", "dbitflip")
#: Memoised numeric mechanisms (need ``epsilon_inf``; wired to numeric metrics with that kind).
LONGITUDINAL_NUMERIC_NAMES = ("memobitmean",)
