"""Optimised unary encoding, Wang et al. USENIX Security 2017 (docs/math.md §4).

p = ½ and q = 1/(e^ε+1): one of the two variants implemented in ``unary``.
"""

from __future__ import annotations

from typing import Any

from .unary import BLOCK, OUE, OUEParams

__all__ = ["BLOCK", "CARRIES_JOINT", "OUE", "OUEParams", "OPTION_KEYS", "from_options"]

OPTION_KEYS: frozenset[str] = frozenset()
#: A joint metric may use it: its count estimates' covariance is derived exactly (docs/math.md,
#: "Joint reports"; protocols.factory.carries_joint).
CARRIES_JOINT = True


def from_options(domain_size: int, epsilon: float, options: dict[str, Any]) -> OUE:
    """Build from registry fields (OUE takes no extra options)."""
    return OUE(OUEParams(d=domain_size, epsilon=epsilon))
