"""`ldpt plan`: expected per-item standard error, its ratio to the optimum and the report size of
every protocol within a report-size budget (or, with --range, every numeric mechanism's standard
error of the mean)."""

from __future__ import annotations

import math

import click

from client_sdk.protocols.factory import DEFAULT_MAX_REPORT_BYTES
from client_sdk.registry import MAX_NUMERIC_MAGNITUDE, MIN_NUMERIC_WIDTH
from estimators.amplification import DEFAULT_DELTA
from estimators.plan import discover_plan, joint_plan_rows, numeric_rows, plan_rows
from estimators.shuffle_plan import DEFAULT_EPSILONS

from .common import FiniteFloatRange, emit, output_options


def parse_range(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[float, float] | None:
    """LO,HI: two finite numbers with LO < HI."""
    if value is None:
        return None
    try:
        lo, hi = (float(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not LO,HI (two numbers, e.g. 0,120)") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise click.BadParameter(f"{value!r}: LO and HI must be finite with LO < HI")
    if max(abs(lo), abs(hi)) > MAX_NUMERIC_MAGNITUDE or hi - lo < MIN_NUMERIC_WIDTH:   # as the registry
        raise click.BadParameter(f"{value!r}: LO and HI must lie within ±{MAX_NUMERIC_MAGNITUDE:g} "
                                 f"and HI − LO be at least {MIN_NUMERIC_WIDTH:g}")
    return lo, hi


def format_discover_plan(row: dict, fmt: str) -> str:
    """A discover plan (estimators.plan.discover_plan) as a table, CSV or JSON."""
    if fmt == "json":
        import json

        return json.dumps(row, indent=2) + "\n"
    if fmt == "csv":
        return rows_to_csv([row], list(row))
    return "\n".join([
        f"discover: epsilon {row['epsilon']:.4g}, max_length {row['max_length']} bytes -> "
        f"{row['groups']} groups, hash_range {row['hash_range']}, seeds {row['seeds']} (the defaults)",
        f"  reports per group          {row['reports_per_group']:>14,.0f}",
        f"  std err of a count (level) {row['std_err_count_per_level']:>14,.1f}",
        f"  std err (population scale) {row['std_err_count_population']:>14,.1f}",
        f"  share found reliably       {row['detection_floor_share']:>14.4f}  (4 std errs at every level)",
        f"  forged reports per point   {row['forged_per_point']:>14,}  (g = {row['forged_gain']:.2f} per report "
        f"wherever placed; placement adds at most {row['forged_margin_count']:,.0f}, 4 std errs at the bound; docs/security.md)",
        f"  forged report, downwards   {row['forged_deflation']:>14.2f}  (at most, per report, wherever placed)",
        f"  sketch per window          {row['sketch_bytes'] / 2**20:>11.1f} MiB",
        f"  payload                    {_bits(row['payload_bits']):>14}"]) + "\n"


def format_joint_plan(spec, clients: int, max_report_bytes: int, fmt: str) -> str:  # noqa: ANN001
    """A joint metric's plan (estimators.plan.joint_plan_rows) as a table, CSV or JSON."""
    rows = joint_plan_rows(spec, clients, max_report_bytes)
    if fmt == "json":
        import json

        return json.dumps({"metric": spec.name, "epsilon": spec.epsilon, "clients": clients,
                           "rows": rows}, indent=2) + "\n"
    if fmt == "csv":
        return rows_to_csv(rows, list(rows[0]))
    lines = [f"{spec.name}: a joint of {' x '.join(str(r['values']) for r in rows)} = {rows[0]['cells']} cells "
             f"({rows[0]['joint_protocol']}), epsilon {spec.epsilon:g}, clients {clients:,}: std err of one "
             "value's count of each part",
             f"  {'part':<16}{'from the joint':>16}{'own metric, same eps':>22}{'x variance':>12}"
             f"{'separate, eps split':>21}"]
    for r in rows:
        lines.append(f"  {r['part']:<16}{r['std_err_joint']:>16,.1f}{r['std_err_own']:>15,.1f} ({r['own_protocol']:<4})"
                     f"{r['variance ratio']:>12.2f}{r['std_err_split']:>14,.1f} ({r['split_protocol']:<4})")
    lines.append("x variance = the joint's variance over its own metric's: the clients a marginal from the joint "
                 "needs for the same error; separate metrics can never be joined (docs/guide-analysts.md, "
                 "\"Breakdowns by private attributes\"), and reporting both costs both epsilons, or splits one")
    return "\n".join(lines) + "\n"


@click.command()
@click.option("--epsilon", type=FiniteFloatRange(0, 20, min_open=True), default=None,
              help="Per-report privacy budget (required unless --metric names a joint metric).")
@click.option("--metrics", "metrics_file", type=click.Path(dir_okay=False), default=None,
              help="With --metric: the registry of a joint metric to plan (what it costs against "
                   "separate metrics).")
@click.option("--metric", default=None, help="A joint metric of --metrics.")
@click.option("--domain", type=click.IntRange(min=2), default=None,
              help="Number of distinct values (categorical metrics and histogram buckets).")
@click.option("--range", "value_range", callback=parse_range, default=None, metavar="LO,HI",
              help="Instead of --domain: a numeric mean metric's range; compares the numeric "
                   "mechanisms' standard error of the mean.")
@click.option("--clients", required=True, type=click.IntRange(min=1),
              help="Reports per window (with --shuffled or --central-epsilon: devices in the smallest "
                   "shuffled batch).")
@click.option("--max-report-bytes", type=click.IntRange(min=1), default=DEFAULT_MAX_REPORT_BYTES,
              show_default=True, help="Report-size budget `auto` respects (registry key max_report_bytes).")
@click.option("--discover", is_flag=True,
              help="Instead of --domain: a string metric with protocol = \"discover\" (docs/discovery.md); "
                   "shows its resolved defaults and expected errors.")
@click.option("--max-length", type=click.IntRange(1, 64), default=16, show_default=True,
              help="With --discover: bytes kept on the device.")
@click.option("--shuffled", is_flag=True,
              help="The central epsilon of reports shuffled in batches of --clients devices, next to the "
                   "local one: for --epsilon (default 1, 2 and 4), or a --metric's own (docs/privacy.md, "
                   "\"The central claim of shuffled reports\").")
@click.option("--central-epsilon", type=FiniteFloatRange(0, 20, min_open=True), default=None,
              help="Target central epsilon: the largest epsilon per report that shuffling in batches of "
                   "--clients devices allows, the protocol for --domain (or --range) at it, and its variance "
                   "against the best local-only protocol at the target.")
@click.option("--delta", type=FiniteFloatRange(0, 1, min_open=True, max_open=True), default=DEFAULT_DELTA,
              show_default=True, help="With --shuffled or --central-epsilon: the delta of the central claim.")
@output_options
def plan(epsilon: float | None, metrics_file: str | None, metric: str | None, domain: int | None,
         value_range: tuple[float, float] | None, clients: int, max_report_bytes: int, discover: bool,
         max_length: int, shuffled: bool, central_epsilon: float | None, delta: float, fmt: str,
         output: str | None) -> None:
    """Compare protocols for EPSILON, DOMAIN (or --range) and CLIENTS; mark the one `auto` picks.

    With --metrics FILE --metric NAME of a joint metric: what it costs against separate metrics.
    With --shuffled or --central-epsilon: what a shuffler buys (central epsilon, and the inverse).
    """
    if shuffled or central_epsilon is not None:
        _plan_shuffled(epsilon, metrics_file, metric, domain, value_range, clients, max_report_bytes,
                       discover, shuffled, central_epsilon, delta, fmt, output)
        return
    if metric is not None or metrics_file is not None:
        if metric is None or metrics_file is None:
            raise click.UsageError("--metrics FILE and --metric NAME go together (a joint metric to plan)")
        if domain is not None or value_range is not None or discover or epsilon is not None:
            raise click.UsageError("--metric plans a joint metric from the registry: leave out --epsilon, "
                                   "--domain, --range and --discover")
        from client_sdk.registry import Kind

        from .common import load_metric

        spec = load_metric(metrics_file, metric)[1]
        if spec.kind is not Kind.JOINT:
            raise click.UsageError(f"--metric plans joint metrics; {metric!r} is {spec.kind.value} (use "
                                   "--epsilon and --domain)")
        emit(format_joint_plan(spec, clients, max_report_bytes, fmt), output)
        return
    if epsilon is None:
        raise click.UsageError("give --epsilon (or --metrics FILE --metric NAME of a joint metric)")
    if discover:
        if domain is not None or value_range is not None:
            raise click.UsageError("--discover plans a string metric: leave out --domain and --range")
        try:
            row = discover_plan(epsilon, clients, max_length)
        except ValueError as exc:
            raise click.ClickException(f"discover: {exc}") from None
        emit(format_discover_plan(row, fmt), output)
        return
    if (domain is None) == (value_range is None):
        raise click.UsageError("give --domain D (categorical) or --range LO,HI (numeric), not both")
    if value_range is not None:
        emit(format_numeric_plan(epsilon, value_range, clients, fmt), output)
        return
    rows = plan_rows(epsilon, domain, clients, max_report_bytes)
    if fmt == "json":
        import json

        emit(json.dumps({"epsilon": epsilon, "domain": domain, "clients": clients,
                         "max_report_bytes": max_report_bytes, "protocols": rows}, indent=2) + "\n", output)
        return
    if fmt == "csv":
        emit(rows_to_csv(rows, ["protocol", "auto", "epsilon", "std_err_count", "std_err_proportion",
                                "vs_optimum", "payload_bits", "report_bytes", "fits", "forged_per_point",
                                "note"]), output)
        return
    lines = [f"epsilon {epsilon:g}, domain {domain}, clients {clients}: expected error of a value's "
             "estimate (root mean variance over the domain)",
             f"{'':2}{'protocol':<9}{'std err (count)':>17}{'std err (share)':>17}{'x optimum':>11}"
             f"{'report':>18}{'forged/1 pt':>13}  sketch"]
    for r in rows:
        mark = "* " if r.get("auto") else "  "
        if not r["available"]:
            lines.append(f"{mark}{r['protocol']:<9}  not available: {r['note']}")
            continue
        over = "" if r["fits"] else " (over budget)"
        lines.append(f"{mark}{r['protocol']:<9}{r['std_err_count']:>17,.1f}{r['std_err_proportion']:>17.5f}"
                     f"{r['vs_optimum']:>11.3f}  {_bits(r['payload_bits']):>16}{r['forged_per_point']:>13,}"
                     f"  {r['note']}{over}")   # 2 spaces: wide payloads stay apart
    lines.append(f"(*) = what protocol = \"auto\" chooses within max_report_bytes = {max_report_bytes} (smallest "
                 "variance; near-ties go to the smaller report); x optimum = variance / 4e^eps/(e^eps-1)^2; "
                 "forged/1 pt = forged reports that move an estimate by 1 point (docs/security.md)")
    sizes = [r["report_bytes"] for r in rows if r["available"]]
    if sizes and not any(r.get("auto") for r in rows):
        lines.append(f"no protocol's report fits max_report_bytes = {max_report_bytes} (the smallest takes "
                     f"{min(sizes)} bytes): a metric with protocol = \"auto\" is refused; raise max_report_bytes")
    emit("\n".join(lines) + "\n", output)


def _plan_shuffled(epsilon: float | None, metrics_file: str | None, metric: str | None, domain: int | None,
                   value_range: tuple[float, float] | None, clients: int, max_report_bytes: int, discover: bool,
                   shuffled: bool, central_epsilon: float | None, delta: float, fmt: str,
                   output: str | None) -> None:
    """`plan --shuffled` / `--central-epsilon` (cli/plan_shuffle.py)."""
    from . import plan_shuffle

    if shuffled and central_epsilon is not None:
        raise click.UsageError("--shuffled prints the central epsilon of given ones; --central-epsilon asks the "
                               "inverse: give one of them")
    if discover:
        raise click.UsageError("--discover does not combine with --shuffled or --central-epsilon")
    if central_epsilon is not None:
        if epsilon is not None or metric is not None or metrics_file is not None:
            raise click.UsageError("--central-epsilon finds the epsilon per report itself: leave out --epsilon "
                                   "and --metric")
        if (domain is None) == (value_range is None):
            raise click.UsageError("--central-epsilon needs --domain D (categorical) or --range LO,HI (a mean)")
        emit(plan_shuffle.format_inverse(central_epsilon, clients, delta, domain, value_range,
                                         max_report_bytes, fmt), output)
        return
    if metric is not None or metrics_file is not None:
        if metric is None or metrics_file is None:
            raise click.UsageError("--metrics FILE and --metric NAME go together")
        if epsilon is not None or domain is not None or value_range is not None:
            raise click.UsageError("--shuffled --metric takes the metric's own epsilon and domain: leave out "
                                   "--epsilon, --domain and --range")
        from .common import load_metric

        spec = load_metric(metrics_file, metric)[1]
        emit(plan_shuffle.format_metric_claim(spec, clients, delta, fmt), output)
        return
    if value_range is not None:
        raise click.UsageError("--shuffled tabulates epsilon per report (any protocol) or, with --domain, "
                               "auto's protocol; a numeric range adds nothing: leave out --range")
    epsilons = (epsilon,) if epsilon is not None else DEFAULT_EPSILONS
    emit(plan_shuffle.format_central(clients, delta, epsilons, domain, max_report_bytes, fmt), output)


def _bits(bits: int) -> str:
    return f"{bits} bit{'' if bits == 1 else 's'}" if bits < 64 else f"{math.ceil(bits / 8):,} bytes"


def format_numeric_plan(epsilon: float, value_range: tuple[float, float], clients: int, fmt: str) -> str:
    """The numeric mechanisms' comparison as a table, CSV or JSON."""
    lo, hi = value_range
    rows = numeric_rows(epsilon, lo, hi, clients)
    if fmt == "json":
        import json

        return json.dumps({"epsilon": epsilon, "range": [lo, hi], "clients": clients,
                           "protocols": rows}, indent=2) + "\n"
    if fmt == "csv":
        return rows_to_csv(rows, ["protocol", "best", "auto", "epsilon", "variance_per_report",
                                  "std_err_mean", "payload_bits", "note"])
    lines = [f"epsilon {epsilon:g}, range [{lo:g}, {hi:g}], clients {clients}: worst-case standard "
             "error of the mean (any data in the range)",
             f"{'':2}{'protocol':<10}{'std err (mean)':>16}{'var/report (t)':>16}{'payload':>10}"]
    for r in rows:
        mark = "* " if r.get("best") else "  "
        if not r["available"]:
            lines.append(f"{mark}{r['protocol']:<10}  not available: {r['note']}")
            continue
        auto = "  <- auto" if r["auto"] else ""
        lines.append(f"{mark}{r['protocol']:<10}{r['std_err_mean']:>16.4g}{r['variance_per_report']:>16.4g}"
                     f"{_bits(r['payload_bits']):>10}{auto}")
    lines.append("(*) = smallest standard error; var/report is in normalised units t in [-1, 1]")
    return "\n".join(lines) + "\n"


def rows_to_csv(rows: list[dict], keys: list[str]) -> str:
    """Plan rows as CSV with the given columns (unavailable protocols leave theirs empty)."""
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, keys, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()
