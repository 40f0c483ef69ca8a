"""Planning with a shuffler: the central ε bought per local ε₀, and the inverse question.

What ``ldpt plan --shuffled`` and ``ldpt plan --central-epsilon`` print (docs/guide-analysts.md,
"Planning with a shuffler"): for n devices per shuffled batch and δ, the central ε each ε₀ buys
(estimators/amplification.py's upper bounds), and, for a target central ε, the largest ε₀ a
report may carry, the protocol ``auto`` would then pick, and the variance that buys against
the best local-only protocol at the target ε. ``metric_window`` turns a registry metric into
the ``ShuffledWindow`` the claim policy takes, for a given batch size.
"""

from __future__ import annotations

import math

from client_sdk.protocols.factory import (
    DEFAULT_MAX_REPORT_BYTES,
    build_protocol,
    choose_numeric_protocol,
    choose_protocol,
    per_item_variance,
)

from .amplification import (
    DEFAULT_DELTA,
    CentralClaim,
    ShuffledWindow,
    Theorem,
    central_claim,
    central_epsilon,
    fmt21_closed_form,
    krr_size,
    largest_epsilon0,
)

__all__ = ["DEFAULT_EPSILONS", "central_rows", "inverse_plan", "metric_claims", "metric_window",
           "round_up"]

#: The local ε₀ ``ldpt plan --shuffled`` tabulates unless given one.
DEFAULT_EPSILONS = (1.0, 2.0, 4.0)


def round_up(x: float, digits: int = 3) -> float:
    """x rounded UP to ``digits`` significant digits (what a printed upper bound may show)."""
    if x <= 0 or not math.isfinite(x):
        return x
    scale = 10.0 ** (digits - 1 - math.floor(math.log10(x)))
    up = math.ceil(x * scale - 1e-9) / scale
    return up if up >= x else math.nextafter(up + 1.0 / scale, math.inf)


def central_rows(clients: int, delta: float = DEFAULT_DELTA, epsilons: tuple[float, ...] = DEFAULT_EPSILONS,
                 domain: int | None = None, max_report_bytes: int = DEFAULT_MAX_REPORT_BYTES) -> list[dict]:
    """One row per ε₀: the central ε of ``clients`` shuffled reports at ``delta`` for any ε₀-LDP
    protocol (the best certified bound and its theorem; FMT 2021's closed form beside it), and
    with ``domain`` the protocol ``auto`` picks at ε₀ and the central ε of its realised ε
    (k-RR's clones when it is rr or grr)."""
    rows = []
    for e0 in epsilons:
        bound = central_epsilon(clients, e0, delta)
        row = {"epsilon0": e0, "clients": clients, "delta": delta,
               "central_epsilon": bound.epsilon if bound else e0,
               "theorem": (bound.theorem if bound else Theorem.LOCAL).value,
               "fmt21_closed_form": fmt21_closed_form(clients, e0, delta)}
        if domain is not None:
            name = choose_protocol(domain, e0, max_report_bytes)
            proto = build_protocol(name, domain, e0, {})
            own = central_epsilon(clients, proto.epsilon, delta, krr_size(proto))
            row.update({"auto_protocol": name, "auto_epsilon0": proto.epsilon,
                        "auto_central_epsilon": own.epsilon if own else proto.epsilon,
                        "auto_theorem": (own.theorem if own else Theorem.LOCAL).value})
        rows.append(row)
    return rows


def inverse_plan(target: float, clients: int, delta: float = DEFAULT_DELTA, domain: int | None = None,
                 value_range: tuple[float, float] | None = None,
                 max_report_bytes: int = DEFAULT_MAX_REPORT_BYTES) -> dict:
    """For a target central ε and ``clients`` devices per shuffled batch: the largest per-report
    ε₀ the theorems certify, the protocol to use at it (``auto``'s choice; for a categorical
    metric also k-ary RR at the larger ε₀ its own clones allow, when that is better), the
    central ε of that protocol's realised ε, and its variance against the best local-only
    protocol at ε = target (n·Var per value for categorical metrics, the worst-case per-report
    variance on [−1, 1] for means)."""
    if (domain is None) == (value_range is None):
        raise ValueError("give a domain (categorical) or a value range (numeric mean)")
    generic = largest_epsilon0(target, clients, delta)
    options = []   # (variance, ε₀ bound, protocol object, how it was chosen)
    if domain is not None:
        local = build_protocol(choose_protocol(domain, target, max_report_bytes), domain, target, {})
        local_var = per_item_variance(local)
        if generic is not None:
            name = choose_protocol(domain, generic.epsilon0, max_report_bytes)
            proto = build_protocol(name, domain, generic.epsilon0, {})
            options.append((per_item_variance(proto), generic, proto, "auto"))
        rr = "rr" if domain == 2 else "grr"
        krr = largest_epsilon0(target, clients, delta, k=domain)
        if krr is not None and krr.theorem is Theorem.KRR_CLONES:
            proto = build_protocol(rr, domain, krr.epsilon0, {})
            if _report_fits(proto, max_report_bytes):
                picked = choose_protocol(domain, krr.epsilon0, max_report_bytes)
                options.append((per_item_variance(proto), krr, proto,
                                "auto" if picked == rr else f"set protocol = \"{rr}\" (auto would pick {picked})"))
    else:
        local = build_protocol(choose_numeric_protocol(target), None, target, {})
        local_var = local.worst_case_variance()
        if generic is not None:
            proto = build_protocol(choose_numeric_protocol(generic.epsilon0), None, generic.epsilon0, {})
            options.append((proto.worst_case_variance(), generic, proto, "auto"))
    out = {"target_central_epsilon": target, "delta": delta, "clients": clients, "domain": domain,
           "range": list(value_range) if value_range else None,
           "local_protocol": local.name, "local_epsilon": local.epsilon, "local_variance": local_var,
           "generic_epsilon0": generic.epsilon0 if generic else None}
    if not options:
        out.update({"epsilon0": None, "protocol": local.name, "variance": local_var, "variance_ratio": 1.0,
                    "note": "no epsilon0 above the target is certified at this batch size"})
        return out
    var, bound, proto, how = min(options, key=lambda o: o[0])
    realised = central_epsilon(clients, proto.epsilon, delta, krr_size(proto))
    claimed = realised.epsilon if realised else proto.epsilon
    if claimed > target:   # cannot happen: the realised ε₀ is at most the certified one, δ(ε) grows with ε₀
        raise RuntimeError(f"{proto.name} at epsilon {proto.epsilon!r} claims {claimed!r} > target {target!r}")
    out.update({"epsilon0": bound.epsilon0, "theorem": (realised.theorem if realised else bound.theorem).value,
                "protocol": proto.name, "chosen_by": how, "protocol_epsilon0": proto.epsilon,
                "central_epsilon": claimed, "variance": var, "variance_ratio": local_var / var,
                "note": "" if bound.epsilon0 > target else
                "no epsilon0 above the target is certified at this batch size"})
    return out


def _report_fits(proto, max_report_bytes: int) -> bool:  # noqa: ANN001
    from client_sdk.protocols.factory import report_bytes

    return report_bytes(proto) <= max_report_bytes


def metric_window(spec, batch: int, *, bundled: bool = False) -> ShuffledWindow:  # noqa: ANN001 - a MetricSpec
    """The ShuffledWindow a registry metric's window would record if its smallest shuffled batch
    held ``batch`` of its envelopes (alike in clear), for planning: a device's
    ``reports_per_window`` reports travel as that many envelopes (``bundled``: as one, an
    r·ε randomiser, or r·ε∞ for a memoised metric: post-processing of at most r memoised
    responses). With
    public dimensions, ``batch`` is taken as the smallest segment; with a permanent cohort
    number in clear, the smallest cohort is taken as batch/m − 3√(batch/m) (a typical smallest of
    m multinomial cells; the collector records the real one)."""
    from sketches import server_half
    proto = server_half(spec)
    r = int(spec.reports_per_window)
    m = proto.clear_cohorts   # discover's seed is fresh per report: only its group is a cohort in clear
    per_cohort = batch / m
    memo = proto.epsilon_longitudinal
    # r reports in one envelope: r·ε without memoisation; memoised, one report is ε₁ but r of them share
    # memoised responses, so the envelope is bounded by its at most r values' responses, r·ε∞
    bundle = r * proto.epsilon if memo is None or r == 1 else r * memo
    return ShuffledWindow(
        smallest_batch=batch,
        envelope_epsilon=bundle if bundled else proto.epsilon,
        envelopes_per_device=1 if bundled else r,
        smallest_segment=batch if spec.dimensions else None,
        has_cohorts=m > 1,
        cohorts_permanent=proto.cohort_permanent,   # a lifetime-fixed cohort in clear (discover: its group)
        smallest_cohort=max(0, math.floor(per_cohort - 3 * math.sqrt(per_cohort))) if m > 1 else None,
        epsilon_inf=memo,
        krr=krr_size(proto) if (r == 1 or not bundled) else None)


def metric_claims(spec, batch: int, delta: float = DEFAULT_DELTA) -> dict[str, CentralClaim]:  # noqa: ANN001
    """The claim policy's answer for a registry metric at ``batch``, for a device's reports as
    separate envelopes and bundled in one (when reports_per_window > 1), and the weaker of the
    two (what may be claimed when the SDK's batching is not fixed)."""
    claims = {"separate": central_claim(metric_window(spec, batch), delta)}
    if spec.reports_per_window > 1:
        claims["bundled"] = central_claim(metric_window(spec, batch, bundled=True), delta)
    claims["claim"] = max(claims.values(), key=lambda c: c.epsilon)
    return claims
