"""Symmetric unary encoding = basic one-time RAPPOR (docs/math.md §4).

p = e^{ε/2}/(e^{ε/2}+1) and q = 1−p: one of the two variants implemented in ``unary``.
"""

from __future__ import annotations

from typing import Any

from .unary import BLOCK, SUE, SUEParams

__all__ = ["BLOCK", "CARRIES_JOINT", "SUE", "SUEParams", "OPTION_KEYS", "from_options"]

OPTION_KEYS: frozenset[str] = frozenset()
#: A joint metric may use it: its count estimates' covariance is derived exactly (docs/math.md,
#: "Joint reports"; protocols.factory.carries_joint).
CARRIES_JOINT = True


def from_options(domain_size: int, epsilon: float, options: dict[str, Any]) -> SUE:
    """Build from registry fields (SUE takes no extra options)."""
    return SUE(SUEParams(d=domain_size, epsilon=epsilon))
