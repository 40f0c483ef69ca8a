"""The device halves of the LDP protocols, one module each over the contract in ``device``.

The names below are the protocols as written in the registry; ``factory.build_protocol`` makes
a protocol's device half from a name and its parameters (docs/design.md, "Two halves").
"""

from __future__ import annotations

__all__ = ["PROTOCOL_NAMES", "LONGITUDINAL_PROTOCOL_NAMES", "LONGITUDINAL_NUMERIC_NAMES"]

#: Frequency-oracle protocols, in the order `ldpt plan` lists them.
PROTOCOL_NAMES = ("rr", "grr", "oue", "sue", "olh", "hr", "ss", "rappor", "discover")
#: Two-round memoised protocols (docs/protocols.md, "L-protocols"): they need ``epsilon_inf``.
LONGITUDINAL_PROTOCOL_NAMES = ("lgrr", "losue", "loloha", "dbitflip")
#: Memoised numeric mechanisms (need ``epsilon_inf``; wired to numeric metrics with that kind).
LONGITUDINAL_NUMERIC_NAMES = ("memobitmean",)
