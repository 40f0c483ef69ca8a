"""Build protocol objects from registry fields, and choose one for ``protocol = "auto"``.

Each protocol module exposes ``OPTION_KEYS`` (the registry keys it accepts besides kind,
protocol and epsilon) and ``from_options(domain_size, epsilon, options)``. Modules are
imported lazily so the SDK only loads what its metrics use.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from . import LONGITUDINAL_NUMERIC_NAMES, LONGITUDINAL_PROTOCOL_NAMES, PROTOCOL_NAMES
from ._longitudinal import check_epsilon_pair
from .base import Protocol
from .numeric import NUMERIC_PROTOCOL_NAMES

#: Protocols `auto` chooses among for a fixed categorical domain (RAPPOR needs candidates).
AUTO_CANDIDATES = ("rr", "grr", "oue", "sue", "olh", "hr", "ss")
#: Protocols for string metrics only (an open set of values).
STRING_PROTOCOLS = ("rappor", "discover")
#: Memoised protocols `auto` chooses among when the metric has epsilon_inf (dBitFlipPM's
#: variance is k/d times larger: it is chosen by name, for its (d+1)·ε∞ lifetime bound).
AUTO_LONGITUDINAL = ("lgrr", "losue", "loloha")
#: Variances within this relative margin count as a tie; the smaller payload then wins.
AUTO_TIE_MARGIN = 0.02
#: `auto` never picks a protocol whose report exceeds this many bits (8 KiB) when another
#: fits: a 1,000,000-value metric gets Hadamard response, not a 125 KB unary report.
AUTO_MAX_PAYLOAD_BITS = 8 * 8192
#: Numeric mechanisms whose worst-case variances agree to this relative precision are tied
#: (the same mechanism computed through different tables); otherwise the smallest wins.
NUMERIC_TIE_RELATIVE = 1e-9


def protocol_module(name: str) -> ModuleType:
    """The module implementing protocol ``name`` (KeyError if unknown)."""
    if name not in PROTOCOL_NAMES and name not in NUMERIC_PROTOCOL_NAMES \
            and name not in LONGITUDINAL_PROTOCOL_NAMES and name not in LONGITUDINAL_NUMERIC_NAMES:
        raise KeyError(name)
    return importlib.import_module(f"{__package__}.{name}")


def option_keys(name: str) -> frozenset[str]:
    return protocol_module(name).OPTION_KEYS


def build_protocol(name: str, domain_size: int | None, epsilon: float | None,
                   options: dict[str, Any] | None = None) -> Protocol:
    """Instantiate protocol ``name``; raises ValueError with a readable reason on bad params."""
    return protocol_module(name).from_options(domain_size, epsilon, dict(options or {}))


def applicable(name: str, domain_size: int) -> bool:
    """Whether `auto` may consider ``name`` for a domain of this size."""
    if name == "rr":
        return domain_size == 2
    return name not in STRING_PROTOCOLS


def per_item_variance(protocol: Protocol) -> float:
    """n·(mean over the domain of Var[f̂(v)]): the figure `auto` minimises.

    Every variance here is linear in the true count, n·a + c(v)·b, and the counts average n/d
    over the domain whatever the distribution, so the mean per-item variance (the MSE of the
    frequency vector, per item) is exactly ``variance(n, n/d)``. At f = 0 alone (the docs/math.md
    §2 table) GRR and SS tie at small d, yet SS wins by 10–20% on real, skewed data.
    """
    n = 1_000_000
    return float(protocol.variance(n, n / protocol.domain_size)) / n


def choose_protocol(domain_size: int, epsilon: float) -> str:
    """Protocol with the smallest per-item variance among those with a report of at most
    AUTO_MAX_PAYLOAD_BITS; near-ties (AUTO_TIE_MARGIN) go to the smaller payload.
    ValueError when no protocol can be built (epsilon too small for the probability grid)."""
    scored = []
    for name in AUTO_CANDIDATES:
        if not applicable(name, domain_size):
            continue
        try:
            proto = build_protocol(name, domain_size, epsilon, {})
        except ValueError:
            continue
        scored.append((per_item_variance(proto), proto.payload_bits, AUTO_CANDIDATES.index(name), name))
    if not scored:
        raise ValueError(f"no protocol can realise epsilon {epsilon} for {domain_size} values on the "
                         "2^-32 probability grid; use a larger epsilon")
    compact = [s for s in scored if s[1] <= AUTO_MAX_PAYLOAD_BITS]
    scored = compact or scored
    best_var = min(s[0] for s in scored)
    near = [s for s in scored if s[0] <= best_var * (1 + AUTO_TIE_MARGIN)]
    return min(near, key=lambda s: (s[1], s[0], s[2]))[3]


def choose_longitudinal_protocol(domain_size: int, epsilon: float, epsilon_inf: float) -> str:
    """The memoised protocol (L-GRR, L-OSUE, LOLOHA) with the smallest per-item variance at
    (ε₁, ε∞, d) among those with a report of at most AUTO_MAX_PAYLOAD_BITS; near-ties
    (AUTO_TIE_MARGIN) go to the smaller payload. ValueError when none can be built."""
    check_epsilon_pair(epsilon, epsilon_inf, "auto")
    scored = []
    for rank, name in enumerate(AUTO_LONGITUDINAL):
        try:
            proto = build_protocol(name, domain_size, epsilon, {"epsilon_inf": epsilon_inf})
        except ValueError:
            continue
        scored.append((per_item_variance(proto), proto.payload_bits, rank, name))
    if not scored:
        raise ValueError(f"no memoised protocol can realise epsilon {epsilon} < epsilon_inf {epsilon_inf} "
                         f"for {domain_size} values; check that epsilon < epsilon_inf")
    scored = [s for s in scored if s[1] <= AUTO_MAX_PAYLOAD_BITS] or scored
    best_var = min(s[0] for s in scored)
    near = [s for s in scored if s[0] <= best_var * (1 + AUTO_TIE_MARGIN)]
    return min(near, key=lambda s: (s[1], s[0], s[2]))[3]


def choose_numeric_protocol(epsilon: float, options: dict[str, Any] | None = None) -> str:
    """Numeric mean mechanism with the smallest worst-case per-report variance at ``epsilon``
    (the variance of the mean is that over n). Variances equal up to rounding
    (NUMERIC_TIE_RELATIVE) go to the smaller report, then the earlier name: below ε ≈ 0.61
    the optimised hybrid is pure Duchi, and `duchi` (one bit) is the one chosen.
    ValueError when no mechanism can realise ``epsilon`` (too small for the integer grids)."""
    scored = []
    for rank, name in enumerate(NUMERIC_PROTOCOL_NAMES):
        try:
            proto = build_protocol(name, None, epsilon, dict(options or {}))
        except ValueError:
            continue
        scored.append((proto.worst_case_variance(), proto.payload_bits, rank, name))
    if not scored:
        raise ValueError(f"no numeric mechanism can realise epsilon {epsilon}; use a larger epsilon")
    best_var = min(s[0] for s in scored)
    near = [s for s in scored if s[0] <= best_var * (1 + NUMERIC_TIE_RELATIVE)]
    return min(near, key=lambda s: (s[1], s[2]))[3]
