"""Planning a metric before any report exists: what each protocol's estimate would cost.

What ``ldpt plan`` prints (docs/guide-analysts.md): for ε, a domain of d values and n reports per
window, every protocol ``auto`` considers with the standard error of a count (the root of the mean
per-value variance, client_sdk.protocols.factory.mean_count_variance: what ``auto`` minimises), its
ratio to the optimum 4e^ε/(e^ε−1)² (docs/math.md §2), the report size, what sizes its sketch and
the forged reports that move an estimate by one point (docs/security.md); for a numeric range, each
mean mechanism's worst-case standard error of the mean; for ``protocol = "discover"``, its resolved
defaults and errors per level (docs/discovery.md); for a joint metric, each part's marginal against
a separate metric of it. Planning with a shuffler is estimators/shuffle_plan.py.
"""

from __future__ import annotations

import math
from typing import Any

from client_sdk.protocols.factory import (
    AUTO_CANDIDATES,
    DEFAULT_MAX_REPORT_BYTES,
    applicable,
    choose_numeric_protocol,
    choose_protocol,
    mean_count_variance,
    report_bytes,
)
from client_sdk.protocols.numeric import NUMERIC_PROTOCOL_NAMES
from sketches import build_server

from .poisoning import poisoning_bound

__all__ = ["discover_plan", "joint_plan_rows", "numeric_rows", "optimum_variance", "plan_rows"]


def numeric_rows(epsilon: float, lo: float, hi: float, clients: int,
                 options: dict | None = None) -> list[dict]:
    """One row per numeric mean mechanism: worst-case standard error of the mean of ``clients``
    reports in the range's units, ((hi − lo)/2)·√(max_t Var[v | t] / n), and payload bits.

    ``best`` marks the smallest error, ``auto`` what ``protocol = "auto"`` resolves to."""
    auto = choose_numeric_protocol(epsilon, options)
    rows = []
    for name in NUMERIC_PROTOCOL_NAMES:
        try:
            proto = build_server(name, None, epsilon, dict(options or {}))
        except ValueError as exc:
            rows.append({"protocol": name, "available": False, "note": str(exc)})
            continue
        var = proto.worst_case_variance()
        rows.append({"protocol": name, "available": True, "auto": name == auto,
                     "epsilon": proto.epsilon, "variance_per_report": var,
                     "std_err_mean": (hi - lo) / 2.0 * math.sqrt(var / clients),
                     "payload_bits": proto.payload_bits, "note": ""})
    best = min((r["std_err_mean"] for r in rows if r["available"]), default=math.nan)
    for r in rows:
        r["best"] = bool(r["available"] and r["std_err_mean"] == best)
    return rows


def optimum_variance(epsilon: float) -> float:
    """n·Var[f̂] per value of OUE/OLH, 4e^ε/(e^ε−1)²: the reference `plan` divides by (docs/math.md §2)."""
    e = math.exp(epsilon)
    return 4 * e / (e - 1) ** 2


def plan_rows(epsilon: float, domain: int, clients: int,
              max_report_bytes: int = DEFAULT_MAX_REPORT_BYTES) -> list[dict]:
    """One row per protocol: std error of a count and a proportion, the variance over the optimum
    4e^ε/(e^ε−1)², the report size in bytes and whether it fits ``max_report_bytes``.

    The error is the root of the mean per-value variance (mean_count_variance): exact for any
    distribution (variances are linear in the true count) and what `auto` minimises."""
    try:
        auto = choose_protocol(domain, epsilon, max_report_bytes)
    except ValueError:
        auto = None  # nothing fits: every row says so
    rows = []
    for name in AUTO_CANDIDATES:
        if not applicable(name, domain):
            continue
        try:
            proto = build_server(name, domain, epsilon, {})
        except ValueError as exc:
            rows.append({"protocol": name, "available": False, "note": str(exc)})
            continue
        var = mean_count_variance(proto, clients)
        size = report_bytes(proto)
        rows.append({"protocol": name, "available": True, "auto": name == auto,
                     "epsilon": proto.epsilon, "std_err_count": math.sqrt(var),
                     "std_err_proportion": math.sqrt(var) / clients,
                     "vs_optimum": var / clients / optimum_variance(epsilon),
                     "payload_bits": proto.payload_bits, "report_bytes": size,
                     "fits": size <= max_report_bytes, "note": proto.design_note(clients),
                     "empty_cohorts": proto.expected_empty_cohorts(clients),
                     # forged reports that move one estimate by 1 point (docs/security.md)
                     "forged_per_point": poisoning_bound(proto).forged_for_one_point(clients)})
    return rows


def discover_plan(epsilon: float, clients: int, max_length: int) -> dict:
    """Resolved defaults of a ``protocol = "discover"`` metric and its expected errors
    (docs/discovery.md): each of the L+1 groups holds clients/(L+1) reports."""
    proto = build_server("discover", None, epsilon, {"max_length": max_length})
    par = proto.params
    from .discovery import cap_margin  # pandas/scipy: not on `ldpt --help`'s path

    per_group = clients / par.groups
    level_se = math.sqrt(float(proto.variance(per_group, 0.0)))
    bound = poisoning_bound(proto)
    return {"protocol": "discover", "epsilon": proto.epsilon, "max_length": par.max_length,
            "groups": par.groups, "hash_range": par.g, "seeds": par.seeds,
            "reports_per_group": per_group, "std_err_count_per_level": level_se,
            "std_err_count_population": level_se * par.groups,
            "detection_floor_share": 4 * level_se / per_group,
            # wherever forged reports claim to be (docs/security.md): g per report, plus at most
            # the prefix caps' margin: CAP_Z population-scale standard errors, taken at the bound
            "forged_gain": bound.gain, "forged_per_point": bound.forged_for_one_point(clients),
            "forged_margin_count": cap_margin(proto, per_group),
            # down: a report in the held-out group that supports none of a string's cells, scaled
            # by the group's expected share (estimators/poisoning.py)
            "forged_deflation": bound.deflation,
            "sketch_bytes": 8 * par.groups * par.seeds * par.g, "payload_bits": proto.payload_bits}


def joint_plan_rows(spec: Any, clients: int, max_report_bytes: int = DEFAULT_MAX_REPORT_BYTES) -> list[dict]:
    """A joint metric's cost, one row per part: the variance of one value's marginal count from
    the joint report (every cell n/d: the sum of d/k cells, covariance of docs/math.md "Joint
    reports") against a separate metric of that part at the same ε (its own `auto` protocol,
    each value n/k), and against separate metrics sharing the joint's ε (ε/parts each)."""
    import numpy as np

    from sketches import server_half

    from .joint import count_covariance

    joint = spec.joint
    proto = server_half(spec)
    d = joint.size
    cov = count_covariance(proto, clients, [clients / d] * d)
    eps = float(spec.epsilon)
    rows = []
    for k, part in enumerate(joint.parts):
        size = joint.shape[k]
        w = [0.0] * d
        for cell in range(d):   # cells whose part-k value is 0 (all values alike under the uniform law)
            w[cell] = 1.0 if (cell // math.prod(joint.shape[k + 1:])) % size == 0 else 0.0
        wv = np.asarray(w)
        var_joint = float(wv @ cov @ wv)
        own = build_server(choose_protocol(size, eps, max_report_bytes), size, eps, {})
        split_eps = eps / len(joint.parts)
        split = build_server(choose_protocol(size, split_eps, max_report_bytes), size, split_eps, {})
        var_own = mean_count_variance(own, clients)
        var_split = mean_count_variance(split, clients)
        rows.append({"part": part.name, "values": size, "joint_protocol": proto.name, "cells": d,
                     "std_err_joint": math.sqrt(var_joint), "own_protocol": own.name,
                     "std_err_own": math.sqrt(var_own), "variance ratio": var_joint / var_own,
                     "split_protocol": split.name, "std_err_split": math.sqrt(var_split),
                     "split_epsilon": split_eps})
    return rows
