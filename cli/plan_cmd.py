"""`ldpt plan`: expected per-item standard error and payload size of every protocol."""

from __future__ import annotations

import math

import click

from client_sdk.protocols.factory import AUTO_CANDIDATES, applicable, build_protocol, choose_protocol
from estimators.poisoning import poisoning_bound

from .common import emit, output_options


def plan_rows(epsilon: float, domain: int, clients: int) -> list[dict]:
    """One row per protocol: std error of a count and a proportion, payload bits.

    The error is the root of the mean per-value variance, variance(n, n/d): exact for any
    distribution (variances are linear in the true count) and what `auto` minimises."""
    auto = choose_protocol(domain, epsilon)
    rows = []
    for name in AUTO_CANDIDATES:
        if not applicable(name, domain):
            continue
        try:
            proto = build_protocol(name, domain, epsilon, {})
        except ValueError as exc:
            rows.append({"protocol": name, "available": False, "note": str(exc)})
            continue
        var = float(proto.variance(clients, clients / domain))
        rows.append({"protocol": name, "available": True, "auto": name == auto,
                     "epsilon": proto.epsilon, "std_err_count": math.sqrt(var),
                     "std_err_proportion": math.sqrt(var) / clients,
                     "payload_bits": proto.payload_bits, "note": "",
                     # forged reports that move one estimate by 1 point (docs/security.md)
                     "forged_per_point": poisoning_bound(proto).forged_for_one_point(clients)})
    return rows


@click.command()
@click.option("--epsilon", required=True, type=click.FloatRange(0, 20, min_open=True),
              help="Per-report privacy budget.")
@click.option("--domain", required=True, type=click.IntRange(min=2), help="Number of distinct values.")
@click.option("--clients", required=True, type=click.IntRange(min=1), help="Reports per window.")
@output_options
def plan(epsilon: float, domain: int, clients: int, fmt: str, output: str | None) -> None:
    """Compare protocols for EPSILON, DOMAIN and CLIENTS; mark the one `auto` picks."""
    rows = plan_rows(epsilon, domain, clients)
    if fmt == "json":
        import json

        emit(json.dumps({"epsilon": epsilon, "domain": domain, "clients": clients, "protocols": rows},
                        indent=2) + "\n", output)
        return
    if fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        keys = ["protocol", "auto", "epsilon", "std_err_count", "std_err_proportion", "payload_bits",
                "forged_per_point", "note"]
        writer = csv.DictWriter(buf, keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        emit(buf.getvalue(), output)
        return
    lines = [f"epsilon {epsilon:g}, domain {domain}, clients {clients}: expected error of a value's "
             "estimate (root mean variance over the domain)",
             f"{'':2}{'protocol':<9}{'std err (count)':>17}{'std err (share)':>17}{'payload':>18}"
             f"{'forged/1 pt':>13}"]
    for r in rows:
        mark = "* " if r.get("auto") else "  "
        if not r["available"]:
            lines.append(f"{mark}{r['protocol']:<9}  not available: {r['note']}")
            continue
        lines.append(f"{mark}{r['protocol']:<9}{r['std_err_count']:>17,.1f}{r['std_err_proportion']:>17.5f}"
                     f"  {_bits(r['payload_bits']):>16}{r['forged_per_point']:>13,}")  # 2 spaces: wide payloads stay apart
    lines.append("(*) = what protocol = \"auto\" chooses (smallest variance; near-ties go to the smaller payload); "
                 "forged/1 pt = forged reports that move an estimate by 1 point (docs/security.md)")
    emit("\n".join(lines) + "\n", output)


def _bits(bits: int) -> str:
    return f"{bits} bits" if bits < 64 else f"{math.ceil(bits / 8):,} bytes"
