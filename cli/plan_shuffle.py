"""`ldpt plan --shuffled` and `ldpt plan --central-epsilon`: what a shuffler buys, formatted.

The numbers come from estimators/shuffle_plan.py (upper bounds of estimators/amplification.py);
printed figures are rounded UP (an upper bound stays one when shown with 3 digits)."""

from __future__ import annotations

import json

from estimators.shuffle_plan import central_rows, inverse_plan, metric_claims, round_up

ASSUMES = ("valid only for reports shuffled uniformly with every other report of the batch, metadata "
           "stripped, one envelope per device per batch unless composed; if the shuffler and the collector "
           "collude only the local epsilon holds (docs/privacy.md, \"The central claim of shuffled reports\")")


def _up(x: float | None) -> str:
    return "n.a." if x is None else f"{round_up(x):.3g}"


def format_central(clients: int, delta: float, epsilons: tuple[float, ...], domain: int | None,
                   max_report_bytes: int, fmt: str) -> str:
    rows = central_rows(clients, delta, epsilons, domain, max_report_bytes)
    if fmt == "json":
        return json.dumps({"clients": clients, "delta": delta, "domain": domain, "rows": rows}, indent=2) + "\n"
    if fmt == "csv":
        from .plan_cmd import rows_to_csv

        return rows_to_csv(rows, list(rows[0]))
    head = f"{'local eps0':>11}{'central eps':>13}  {'theorem':<48}{'closed form':>12}"  # noqa: E501
    if domain is not None:
        head += f"  {'auto (d=' + str(domain) + ')':>12}{'its central eps':>17}"
    lines = [f"central (epsilon, delta = {delta:g}) of reports shuffled in batches of {clients:,} devices "
             "(upper bounds, rounded up)", head]
    for r in rows:
        line = (f"{r['epsilon0']:>11g}{_up(r['central_epsilon']):>13}  {r['theorem']:<48}"
                f"{_up(r['fmt21_closed_form']):>12}")
        if domain is not None:
            line += f"  {r['auto_protocol']:>12}{_up(r['auto_central_epsilon']):>17}"
        lines.append(line)
    lines.append("central eps = the smallest certified by Feldman-McMillan-Talwar 2021 (numerical bound; closed "
                 "form = their Theorem 3.1) or, for rr/grr, k-RR's own clones; the local eps0 when nothing below "
                 f"it is certified; {ASSUMES}")
    return "\n".join(lines) + "\n"


def format_inverse(target: float, clients: int, delta: float, domain: int | None,
                   value_range: tuple[float, float] | None, max_report_bytes: int, fmt: str) -> str:
    plan = inverse_plan(target, clients, delta, domain, value_range, max_report_bytes)
    if fmt == "json":
        return json.dumps(plan, indent=2) + "\n"
    if fmt == "csv":
        from .plan_cmd import rows_to_csv

        return rows_to_csv([plan], list(plan))
    what = f"domain {domain}" if domain is not None else f"range [{value_range[0]:g}, {value_range[1]:g}]"
    var = "n*Var per value" if domain is not None else "Var per report (worst t)"
    lines = [f"target central epsilon {target:g} (delta {delta:g}), {clients:,} devices per shuffled batch, {what}:"]
    if plan["epsilon0"] is None or plan["note"]:
        lines += [f"  no epsilon0 above {target:g} is certified for batches of {clients:,}: report at the target "
                  f"locally ({plan['local_protocol']})"]
        return "\n".join(lines) + "\n"
    eps0_down = int(plan["epsilon0"] * 1e4) / 1e4
    lines += [
        f"  largest eps0 per report     {eps0_down:<10g} ({plan['theorem']})",
        f"  protocol                    {plan['protocol']:<10} ({plan['chosen_by']}; realised eps0 "
        f"{plan['protocol_epsilon0']:.6g}, central eps {_up(plan['central_epsilon'])})"]
    if plan["generic_epsilon0"] is not None and plan["generic_epsilon0"] != plan["epsilon0"]:
        lines.append(f"  any protocol (FMT 2021)     {plan['generic_epsilon0']:<10g}")
    lines += [
        f"  {var:<28}{plan['variance']:<10.4g}",
        f"  local only, eps {target:g}: {plan['local_protocol']:<8}{plan['local_variance']:.4g}",
        f"  variance ratio              {plan['variance_ratio']:,.0f}x lower through the shuffler",
        f"({ASSUMES})"]
    return "\n".join(lines) + "\n"


def format_metric_claim(spec, clients: int, delta: float, fmt: str) -> str:  # noqa: ANN001
    claims = metric_claims(spec, clients, delta)
    if fmt == "json":
        return json.dumps({"metric": spec.name, "clients": clients, "delta": delta,
                           **{k: c.as_dict() for k, c in claims.items()}}, indent=2) + "\n"
    if fmt == "csv":
        from .plan_cmd import rows_to_csv

        rows = [{"case": k, **c.as_dict()} for k, c in claims.items()]
        return rows_to_csv(rows, list(rows[0]))
    c = claims["claim"]
    head = (f"{spec.name}: {spec.protocol}, local epsilon {c.epsilon0:.4g} per envelope, "
            f"{spec.reports_per_window} report(s) per window; smallest shuffled batch {clients:,}, delta {delta:g}")
    if c.amplified:
        body = [f"  central epsilon  {_up(c.epsilon)}  ({c.theorem.value}; n = {c.n:,} per envelope, "
                f"{c.envelopes} envelope(s) composed)"]
    else:
        body = [f"  central epsilon  {c.epsilon:.4g} = the local epsilon ({c.reason})"]
    body.append(f"  local epsilon    {c.local_epsilon:.4g} per window (what holds if shuffler and collector collude)")
    if c.lifetime_epsilon is not None:
        body.append(f"  across windows   {c.lifetime_epsilon:.4g} (local epsilon_inf: no theorem amplifies a "
                    "memoised response)")
    if c.reason and c.amplified:
        body.append(f"  ({c.reason})")
    if "bundled" in claims:
        body.append(f"  (the weaker of the window's reports as separate envelopes, {_up(claims['separate'].epsilon)}, "
                    f"and bundled in one, {_up(claims['bundled'].epsilon)})")
    return "\n".join([head, *body, f"({ASSUMES})"]) + "\n"
