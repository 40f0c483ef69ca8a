"""The integers a metric's one-report encoder needs, as published to SDKs in other languages.

Several parameters are derived with floating-point mathematics (``math.exp``, ``math.log``,
window and mixture searches): a threshold computed by another language's libm could differ in
its last bit and give a different integer, i.e. a different mechanism from the one the
collector decodes. So the Python reference is the only place they are derived: ``GET
/v1/registry`` publishes, per metric, an ``encoder`` object holding every resolved integer
(thresholds out of 2^32 or 2^64, hash ranges, cohorts, windows, bucket edges), and an SDK in
another language encodes from those integers alone, never re-deriving them (docs/conformance.md).

Integers that can reach 2^53 (thresholds out of 2^64, Laplace's inverse-CDF bounds) are decimal
strings: JSON numbers beyond 2^53 are not exact in JavaScript.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .errors import RegistryError
from .protocols.device import DeviceHalf
from .protocols.projective import dimension, directions, is_prime

#: Version of the block's layout; an SDK refuses a version it does not know.
ENCODER_VERSION = 1


def protocol_block(proto: DeviceHalf) -> dict[str, Any]:
    """The resolved integers of protocol ``proto`` (docs/conformance.md, "The encoder block"), as
    its device half states them (``DeviceHalf.encoder_block``)."""
    return proto.encoder_block()


def encoder_block(spec: Any) -> dict[str, Any]:
    """The ``encoder`` object of one published metric (a ``MetricSpec``)."""
    block: dict[str, Any] = {"version": ENCODER_VERSION, "protocol": spec.protocol}
    block.update(protocol_block(spec.protocol_impl))
    if spec.is_histogram:
        block["edges"] = list(spec.edge_list)
    if spec.is_mean:
        block["range"] = list(spec.bounds)
    charges = getattr(spec, "window_charges", None)
    if charges is not None:   # a GRR memo (lgrr, loloha) at reports_per_window > 1 (client_sdk.window_charge)
        block["window_charges"] = charges.to_json()
    return block


#: Members that are integers (not booleans, not floats such as 4.0, which JSON Schema's `integer`
#: accepts), checked before the consistency checks below.
_INTEGERS = ("d", "m", "g", "t", "k", "h", "s", "sampled", "seeds", "max_length", "groups", "grid", "window",
             "a", "b")
_U32 = 1 << 32
_U64 = 1 << 64


def _fail(metric: str, field: str, why: str, source: str) -> None:
    raise RegistryError(f"encoder block: {why}", source=source, metric=metric, field=field)


def _int(block: Mapping[str, Any], key: str, metric: str, source: str) -> int:
    value = block.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(metric, key, f"{key} must be a JSON integer, got {value!r}", source)
    return value


def _u64(text: Any, metric: str, field: str, source: str) -> int:
    if not isinstance(text, str) or not text.isascii() or not text.isdigit() or (len(text) > 1 and text[0] == "0") \
            or int(text) > _U64:
        _fail(metric, field, f"{field} must be an integer in [0, 2^64] as a decimal string, got {text!r}", source)
    return int(text)


def check_block(block: Mapping[str, Any], metric: str, source: str = "GET /v1/registry") -> None:
    """RegistryError naming the metric and member when a published block is inconsistent (the
    SDK-side checks of docs/conformance.md, "Checks an SDK applies to a block", in that order):
    an SDK never encodes from a block whose members disagree with each other."""
    if not isinstance(block, Mapping):
        _fail(metric, "encoder", "the encoder object must be a JSON object", source)
    if block.get("version") != ENCODER_VERSION:
        _fail(metric, "version", f"encoder version {block.get('version')!r} is unknown: upgrade this SDK", source)
    proto = block.get("protocol")
    for key in _INTEGERS:                                                    # (1) integers
        if key in block and not (proto == "hybrid" and key == "h"):
            _int(block, key, metric, source)
    for key in ("keep_threshold", "include_threshold", "half_f_threshold", "p_threshold", "q_threshold",
                "p1_threshold", "q1_threshold", "p2_threshold", "gamma_threshold") + (("h",) if proto == "hybrid" else ()):
        if key in block and not 0 <= _int(block, key, metric, source) <= _U32:
            _fail(metric, key, f"{key} must be in [0, 2^32]", source)
    if proto == "olh":                                                       # (2) olh's t with the linear family only
        if block.get("family") == "linear" and "t" not in block:
            _fail(metric, "t", "the linear family needs t (base-g digits of a value)", source)
        if block.get("family") != "linear" and "t" in block:
            _fail(metric, "t", "t belongs to the linear family only", source)
    r = {"rr": 2, "grr": block.get("d"), "olh": block.get("g"), "hr": block.get("g"),
         "discover": block.get("g")}.get(proto)                              # (3) keep: p' > q'
    if r is not None and _int(block, "keep_threshold", metric, source) * r <= _U32:
        _fail(metric, "keep_threshold", f"keep_threshold × {r} must exceed 2^32 (a kept value more likely "
              "than any other)", source)
    if proto == "hr" or (proto == "olh" and block.get("family") == "linear"):  # (4) the projective field
        d, g, t, m = (_int(block, k, metric, source) for k in ("d", "g", "t", "m"))
        if not is_prime(g):
            _fail(metric, "g", f"g = {g} must be a prime (the field size)", source)
        if t != dimension(d, g):
            _fail(metric, "t", f"t = {t} must be ⌈log_g d⌉ = {dimension(d, g)} (g^(t−1) < d ≤ g^t)", source)
        if m != directions(g, t):
            _fail(metric, "m", f"m = {m} must be (g^t − 1)/(g − 1) = {directions(g, t)}", source)
    if proto == "rappor" and _int(block, "h", metric, source) > _int(block, "k", metric, source):  # (5)
        _fail(metric, "h", "h (hashes per value) must be at most k (Bloom filter bits)", source)
    if proto == "ss" and _int(block, "s", metric, source) >= _int(block, "d", metric, source):      # (6)
        _fail(metric, "s", "s (subset size) must be below d", source)
    if proto == "dbitflip" and _int(block, "sampled", metric, source) > _int(block, "d", metric, source):  # (7)
        _fail(metric, "sampled", "sampled (buckets a device reports) must be at most d", source)
    if proto == "discover" and _int(block, "groups", metric, source) != _int(block, "max_length", metric, source) + 1:
        _fail(metric, "groups", "groups must be max_length + 1", source)                           # (8)
    if proto == "losue" and block.get("p1_threshold") != 1 << 31:                                  # (9)
        _fail(metric, "p1_threshold", "p1_threshold must be 2^31 (L-OSUE's first round)", source)
    grid = block.get("grid")
    pieces = [("", block)] if proto == "piecewise" else [("piecewise.", block.get("piecewise"))] if proto == "hybrid" else []
    for prefix, pw in pieces:                                                # (10) piecewise window
        if not isinstance(pw, Mapping) or pw.get("grid") != grid:
            _fail(metric, prefix + "grid", "a nested block's grid must be the block's", source)
        window = _int(pw, "window", metric, source)
        if not 1 <= window <= grid or _int(pw, "a", metric, source) < 1 or _int(pw, "b", metric, source) < 0:
            _fail(metric, prefix + "window", f"window must be in [1, grid = {grid}], a ≥ 1 and b ≥ 0", source)
        if window * pw["a"] + grid * pw["b"] > _U32:
            _fail(metric, prefix + "a", "window × a + grid × b must be at most 2^32", source)
    duchis = [("", block)] if proto in ("duchi", "bitmean", "memobitmean") else \
        [("duchi.", block.get("duchi"))] if proto == "hybrid" else []
    for prefix, du in duchis:                                                # (11) Duchi's thresholds
        if not isinstance(du, Mapping) or du.get("grid") != grid:
            _fail(metric, prefix + "grid", "a nested block's grid must be the block's", source)
        low, step = _u64(du.get("low"), metric, prefix + "low", source), _u64(du.get("step"), metric, prefix + "step", source)
        if low + grid * step > _U64:
            _fail(metric, prefix + "step", "low + grid × step must be at most 2^64", source)
    if proto == "laplace":                                                   # (12) Laplace's inverse CDF
        window, bounds = _int(block, "window", metric, source), block.get("bounds")
        if not isinstance(bounds, list) or len(bounds) != 2 * (grid + window):
            _fail(metric, "bounds", f"bounds must hold 2 × (grid + window) = {2 * (grid + window)} words", source)
        words = [_u64(b, metric, "bounds", source) for b in bounds]
        if any(x > y for x, y in zip(words, words[1:])):
            _fail(metric, "bounds", "bounds must be non-decreasing", source)
    edges = block.get("edges")
    if edges is not None:                                                    # (13) histogram edges
        d = block.get("d", 2)
        if not isinstance(edges, list) or len(edges) != d + 1:
            _fail(metric, "edges", f"a histogram over d = {d} buckets has d + 1 = {d + 1} edges", source)
        if not all(isinstance(e, (int, float)) and not isinstance(e, bool) and math.isfinite(e) for e in edges) \
                or any(not x < y for x, y in zip(edges, edges[1:])):
            _fail(metric, "edges", "edges must be finite numbers in increasing order", source)
    bounds_range = block.get("range")
    if bounds_range is not None:                                             # (14) a mean metric's range
        ok = isinstance(bounds_range, list) and len(bounds_range) == 2 and all(
            isinstance(e, (int, float)) and not isinstance(e, bool) and math.isfinite(e) for e in bounds_range)
        if not ok or not bounds_range[0] < bounds_range[1]:
            _fail(metric, "range", "range must be [lo, hi], finite, lo < hi", source)


__all__ = ["ENCODER_VERSION", "check_block", "encoder_block", "protocol_block"]
