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
from .device import DeviceHalf
from .longitudinal import check_epsilon_pair
from .numeric import NUMERIC_PROTOCOL_NAMES

#: Protocols `auto` chooses among for a fixed categorical domain (RAPPOR needs candidates).
AUTO_CANDIDATES = ("rr", "grr", "oue", "sue", "olh", "hr", "ss")
#: Protocols for string metrics only (an open set of values).
STRING_PROTOCOLS = ("rappor", "discover")
#: What `auto` is for a string metric: RAPPOR, decoding a candidate list.
AUTO_STRING = STRING_PROTOCOLS[0]
#: Memoised protocols `auto` chooses among when the metric has epsilon_inf (dBitFlipPM's
#: variance is k/d times larger: it is chosen by name, for its (d+1)·ε∞ lifetime bound).
AUTO_LONGITUDINAL = ("lgrr", "losue", "loloha")
#: Variances within this relative margin count as a tie; the smaller payload then wins.
AUTO_TIE_MARGIN = 0.02
#: Default report-size budget of `auto` (registry key ``max_report_bytes``; docs/protocols.md,
#: "Report size"): a 1,000,000-value metric gets a 3-byte Hadamard response, not a 125 KB unary
#: report. Mobile apps typically set 1 KiB or less.
DEFAULT_MAX_REPORT_BYTES = 8192


def report_bytes(protocol: DeviceHalf) -> int:
    """A report's size as budgeted by ``max_report_bytes``: ⌈payload_bits/8⌉ bytes (its
    information content; msgpack framing adds at most a few bytes, docs/wire-format.md)."""
    return _bytes(protocol.payload_bits)


def _bytes(bits: int) -> int:
    return -(-bits // 8)


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
                   options: dict[str, Any] | None = None) -> DeviceHalf:
    """Instantiate protocol ``name``; raises ValueError with a readable reason on bad params."""
    return protocol_module(name).from_options(domain_size, epsilon, dict(options or {}))


def reports_strings(name: str) -> bool:
    """Whether protocol ``name`` is for string metrics (an open set of values)."""
    return name in STRING_PROTOCOLS


def domain_refusal(name: str, domain_size: int | None) -> str | None:
    """Why protocol ``name`` cannot serve a domain of this size (its module's ``domain_refusal``:
    rr is binary), or None."""
    refusal = getattr(protocol_module(name), "domain_refusal", None)
    return None if refusal is None else refusal(domain_size)


def epsilon_optional(name: str) -> bool:
    """Whether a metric of protocol ``name`` may leave epsilon out (its module's
    ``EPSILON_OPTIONAL``: RAPPOR's ε follows from prob_f, prob_p, prob_q and the hashes)."""
    return bool(getattr(protocol_module(name), "EPSILON_OPTIONAL", False))


def carries_joint(name: str) -> bool:
    """Whether a joint metric may use protocol ``name``: its module's ``CARRIES_JOINT``, set where
    docs/math.md ("Joint reports") gives the count estimates' covariance exactly (False for a name
    that is no protocol)."""
    try:
        module = protocol_module(name)
    except KeyError:
        return False
    return bool(getattr(module, "CARRIES_JOINT", False))


def joint_protocols() -> tuple[str, ...]:
    """The protocols a joint metric may use, in PROTOCOL_NAMES order (a joint metric is a product
    of fixed domains: the string protocols' modules are not loaded to ask)."""
    return tuple(name for name in PROTOCOL_NAMES if not reports_strings(name) and carries_joint(name))


def applicable(name: str, domain_size: int) -> bool:
    """Whether `auto` may consider ``name`` for a domain of this size."""
    return not reports_strings(name) and domain_refusal(name, domain_size) is None


def mean_count_variance(protocol: DeviceHalf, n: int) -> float:
    """The mean over the domain of Var[ĉ(v)] for ``n`` reports, ``variance(n, n/d)`` (a device or
    server half): what `auto` scores and `ldpt plan` prints (per_item_variance).

    Every variance here is linear in the true count, n·a + c(v)·b, and the counts average n/d
    over the domain whatever the distribution, so the mean per-item variance (the MSE of the
    count vector, per item) is exactly ``variance(n, n/d)``."""
    return float(protocol.variance(n, n / protocol.domain_size))


def per_item_variance(protocol: DeviceHalf) -> float:
    """n·(mean over the domain of Var[f̂(v)]): the figure `auto` minimises (mean_count_variance
    over n, at n = 10⁶). At f = 0 alone (the docs/math.md §2 table) GRR and SS tie at small d, yet
    SS wins by 10–20% on real, skewed data.
    """
    n = 1_000_000
    return mean_count_variance(protocol, n) / n


def choose_protocol(domain_size: int, epsilon: float,
                    max_report_bytes: int = DEFAULT_MAX_REPORT_BYTES,
                    candidates: tuple[str, ...] | None = None) -> str:
    """Protocol with the smallest per-item variance among those whose report is at most
    ``max_report_bytes``; near-ties (AUTO_TIE_MARGIN) go to the smaller payload.
    ``candidates`` narrows AUTO_CANDIDATES (joint metrics: ``joint_protocols()``).
    ValueError when no protocol can be built (epsilon too small for the probability grid) or
    none fits the budget."""
    scored = []
    for name in AUTO_CANDIDATES:
        if not applicable(name, domain_size) or (candidates is not None and name not in candidates):
            continue
        try:
            proto = build_protocol(name, domain_size, epsilon, {})
        except ValueError:
            continue
        scored.append((per_item_variance(proto), proto.payload_bits, AUTO_CANDIDATES.index(name), name))
    if not scored:
        raise ValueError(f"no protocol can realise epsilon {epsilon} for {domain_size} values on the "
                         "2^-32 probability grid; use a larger epsilon")
    return _best_within(scored, max_report_bytes)


def _best_within(scored: list[tuple[float, int, int, str]], max_report_bytes: int) -> str:
    """Smallest variance among (variance, bits, rank, name) rows whose report fits the budget;
    near-ties (AUTO_TIE_MARGIN) go to the smaller payload."""
    fitting = [s for s in scored if _bytes(s[1]) <= max_report_bytes]
    if not fitting:
        smallest = min(scored, key=lambda s: s[1])
        raise ValueError(f"no protocol's report fits max_report_bytes = {max_report_bytes}: the smallest "
                         f"is {smallest[3]} at {_bytes(smallest[1])} bytes; raise max_report_bytes")
    best_var = min(s[0] for s in fitting)
    near = [s for s in fitting if s[0] <= best_var * (1 + AUTO_TIE_MARGIN)]
    return min(near, key=lambda s: (s[1], s[0], s[2]))[3]


def choose_longitudinal_protocol(domain_size: int, epsilon: float, epsilon_inf: float,
                                 max_report_bytes: int = DEFAULT_MAX_REPORT_BYTES) -> str:
    """The memoised protocol (L-GRR, L-OSUE, LOLOHA) with the smallest per-item variance at
    (ε₁, ε∞, d) among those whose report is at most ``max_report_bytes``; near-ties
    (AUTO_TIE_MARGIN) go to the smaller payload. ValueError when none can be built or fits."""
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
    return _best_within(scored, max_report_bytes)


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
