"""1BitMean (Ding, Kulkarni, Yekhanin 2017): Duchi's one-bit mechanism, see ``duchi``."""

from __future__ import annotations

from typing import Any

from .duchi import BLOCK, OPTION_KEYS, BitMean, params_from_options

__all__ = ["BLOCK", "OPTION_KEYS", "BitMean", "from_options"]


def from_options(domain_size: int | None, epsilon: float, options: dict[str, Any]) -> BitMean:
    """Build from registry fields (the domain size is not used: numeric metrics have a range)."""
    return BitMean(params_from_options(epsilon, options))
