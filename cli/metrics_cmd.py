"""`ldpt metrics check FILE`: validate a registry and show each metric's protocol and epsilon."""

from __future__ import annotations

import click

from client_sdk.registry import MetricSpec, load_registry
from estimators.plan import numeric_rows
from sketches import server_half

from .common import LdptGroup, format_table
from .plan_cmd import _bits


@click.group(cls=LdptGroup)
def metrics() -> None:
    """Work with the metric registry (TOML)."""


@metrics.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--max-segments", type=click.IntRange(min=1), default=None,
              help="The collector's segment cap to check the dimensions against [default: "
                   "LDPT_MAX_SEGMENTS, else the collector's default, 1000].")
def check(file: str, max_segments: int | None) -> None:
    """Validate FILE; print each metric with its protocol and epsilon per report."""
    registry = load_registry(file)
    rows, notes = [], []
    for spec in registry:
        proto = spec.protocol_impl
        chosen = f"{spec.protocol} (auto)" if spec.requested_protocol == "auto" else spec.protocol
        longitudinal = proto.epsilon_longitudinal
        if spec.is_mean:
            lo, hi = spec.range  # type: ignore[misc]
            domain = f"[{lo}, {hi}]"
            notes.append(numeric_choice(spec))
        elif spec.is_histogram:
            domain = f"{spec.domain_size} buckets"
        else:
            domain = str(spec.domain_size or "open")
        rows.append((spec.name, spec.kind.value, domain, chosen,
                     f"{proto.epsilon:.4f}", "-" if longitudinal is None else f"{longitudinal:.4f}",
                     variance_cell(spec), _bits(proto.payload_bits),
                     spec.fingerprint))  # in full: it is what pins= takes
    header = ("metric", "kind", "domain", "protocol", "eps/report", "eps/lifetime-of-value",
              "n*var", "report", "fingerprint")
    click.echo(f"{file}: {len(registry)} metric(s) OK")
    click.echo(format_table(header, rows), nl=False)
    click.echo("n*var: n x the variance of one value's estimated share (averaged over the domain), or of the "
               "mean in normalised units [-1, 1] (worst case); report: one report's size, which "
               "max_report_bytes bounds")
    for note in notes:
        click.echo(note)
    for spec in registry:
        g = server_half(spec).hashed_memo_keys
        if g is not None:
            click.echo(f"{spec.name}: {spec.protocol} memoises per hashed value: at most g = {g} x eps inf = "
                       f"{g * spec.protocol_impl.epsilon_longitudinal:.4f} over the lifetime")
    for line in device_warnings(registry) + memo_window_notes(registry):
        click.echo(line, err=True)
    check_dimensions(registry, file)
    check_segment_cap(registry, max_segments)
    check_linking(registry)


def check_segment_cap(registry, max_segments: int | None) -> None:  # noqa: ANN001 - a Registry
    """Warn for each metric whose dimension combinations exceed the collector's segment cap
    (collector/segments.py: beyond it a segment's reports count in the total only)."""
    import os

    from collector.config import SETTINGS_BY_NAME
    from collector.segments import cap_warnings

    if max_segments is None:
        env = os.environ.get("LDPT_MAX_SEGMENTS", "").strip()
        max_segments = int(env) if env.isdigit() and int(env) > 0 else int(SETTINGS_BY_NAME["max_segments"].default)
    for line in cap_warnings(registry, max_segments):
        click.echo(f"warning: {line}", err=True)


def check_linking(registry) -> None:  # noqa: ANN001 - a Registry
    """The numbers a device repeats in every report (estimators/linking.py) with their bits,
    and what they carry together with the public dimensions (docs/privacy.md); a warning when
    that exceeds the registry's max_bits, the bound ``check_dimensions`` holds the dimensions to."""
    from client_sdk.dimensions import DEFAULT_MAX_BITS, combination_bits
    from estimators.linking import PERMANENT, linking_numbers, permanent_bits

    numbers = linking_numbers(registry)
    if not numbers:
        return
    table = registry.dimension_table
    dims = list(table.dimensions.values()) if table is not None else []
    dim_bits = combination_bits(dims) if dims else 0.0
    max_bits = table.max_bits if table is not None else DEFAULT_MAX_BITS
    rows = [(", ".join(n.metrics), n.what, f"{n.values:,}", f"{n.bits:.2f}",
             "every report, across days" if n.lasts == PERMANENT else f"every report of {n.lasts}")
            for n in numbers]
    click.echo("linking numbers: derived from the device's secret, the same in every report of the "
               "metric (docs/privacy.md, \"What leaves the device\")")
    click.echo(format_table(("metric", "number", "values", "bits", "repeats in"), rows), nl=False)
    total = permanent_bits(numbers) + dim_bits
    with_dims = f" and the public dimensions' {dim_bits:.2f}" if dims else ""
    click.echo(f"linkability: {total:.2f} bits repeat in a device's batches across days (the permanent "
               f"numbers{with_dims}; at most, with uniform independent numbers)")
    if total > max_bits:
        click.echo(f"warning: {total:.2f} bits of linking numbers exceed max_bits = {max_bits:g}: the "
                   f"tuple can single out about 1 device in {2 ** total:,.0f} and link its batches across "
                   "days; use fewer cohorts or groups, or fewer such metrics", err=True)


def check_dimensions(registry, file: str) -> None:  # noqa: ANN001 - a Registry
    """The public dimensions' combinations, in bits; above the registry's ``max_bits`` (default
    10) the file is refused: a device's clear values would come close to singling it out
    (docs/privacy.md, "Public dimensions")."""
    from client_sdk.dimensions import combination_bits, combination_count

    table = registry.dimension_table
    if table is None or not table.dimensions:
        return
    dims = list(table.dimensions.values())
    bits, count = combination_bits(dims), combination_count(dims)
    names = ", ".join(f"{d.name} ({len(d.domain)})" for d in dims)
    click.echo(f"public dimensions, sent in clear with every batch: {names}: {count:,} combinations, "
               f"{bits:.2f} bits (limit {table.max_bits:g}, [dimensions] max_bits); segments under "
               f"{table.min_reports:,} reports are suppressed unless a metric sets min_reports")
    if bits > table.max_bits:
        raise click.ClickException(
            f"{file}: field 'dimensions': the public dimensions' {count:,} combinations carry {bits:.2f} "
            f"bits, above max_bits = {table.max_bits:g}: a device's clear values could nearly single it "
            "out (docs/privacy.md, \"Public dimensions\"). Merge values (rule = \"major\"), drop a "
            "dimension, or raise max_bits deliberately")


def variance_cell(spec: MetricSpec) -> str:
    """n·Var per value of a frequency oracle (what `auto` minimises), or a mean mechanism's
    worst-case variance per report in normalised units; '-' where neither applies (RAPPOR)."""
    proto = spec.protocol_impl
    if spec.is_mean:
        return f"{proto.worst_case_variance():.4g}"
    if spec.domain_size is None:
        return "-"
    from client_sdk.protocols.factory import per_item_variance

    return f"{per_item_variance(proto):.4g}"


def device_warnings(registry) -> list[str]:
    """Warn when the metrics' per-window sum exceeds the [device] cap, naming what goes unsent.
    (A cap below one report of some metric is refused by the registry itself.)

    Each metric may charge its window charge of reports_per_window reports in a window
    (``window_charge``); the ledger refuses the
    reports that would exceed ``epsilon_per_window``, first come first served. Listed in file
    order: which metrics fit if they report in that order, and which are then refused.
    """
    device = registry.device
    out: list[str] = []
    if device is None:
        return out
    cap = device.epsilon_per_window
    demand = [(spec.name, window_charge(spec)) for spec in registry]
    total = sum(e for _, e in demand)
    if cap is not None:
        out.append(f"[device] epsilon_per_window = {cap:g}; the metrics may charge {total:.4g} per window")
        if total > cap * (1 + 1e-9):
            spent, unsent = 0.0, []
            for name, eps in demand:
                if spent + eps <= cap * (1 + 1e-9):
                    spent += eps
                else:
                    unsent.append(name)
            out.append(f"warning: the per-window sum {total:.4g} exceeds the device cap {cap:g}: reported in "
                       f"file order, {', '.join(unsent)} would go unsent (refused by the ledger) in a window "
                       "where every metric reports; raise the cap or lower epsilons")
    if device.lifetime_epsilon is not None:
        out.append(f"[device] lifetime_epsilon = {device.lifetime_epsilon:g}: once the device has spent it, "
                   "every further report is refused")
    return out


def window_charge(spec) -> float:  # noqa: ANN001 - a MetricSpec
    """What the ledger charges reports_per_window reports of ``spec`` in one window: r·ε₁, or
    C(r) where reports sharing a memoised response reveal more (client_sdk.window_charge)."""
    r, charges = int(spec.reports_per_window), spec.window_charges
    return spec.protocol_impl.epsilon * r if charges is None else charges.total(r)


def memo_window_notes(registry) -> list[str]:  # noqa: ANN001 - a Registry
    """Say where a memoised metric's reports_per_window reports in one window reveal more than
    r·ε₁ (they share the memoised response, so they do not compose) and what the ledger charges
    for them instead (client_sdk.window_charge; docs/privacy.md, "Memoisation")."""
    out = []
    for spec in registry:
        r, charges = int(spec.reports_per_window), spec.window_charges
        if charges is None:
            continue
        out.append(f"note: {spec.name}: {r} reports in one window share the memoised response and "
                   f"reveal up to eps {charges.total(r):.4g}, more than {r} x eps/report "
                   f"({r * spec.protocol_impl.epsilon:.4g}); the ledger charges eps {charges.total(r):.4g} "
                   "per window for them (docs/privacy.md, \"Memoisation\")")
    return out


def numeric_choice(spec: MetricSpec) -> str:
    """A mean metric's mechanism beside the runner-up: worst-case variance per report, in the
    metric's units squared ((hi − lo)/2)²·max_t Var[v | t]; the mean of n reports has 1/n of it."""
    lo, hi = spec.bounds
    grid = {k: v for k, v in spec.options if k == "grid"}
    rows = sorted((r for r in numeric_rows(spec.epsilon, lo, hi, 1, grid) if r["available"]),
                  key=lambda r: r["variance_per_report"])
    scale = ((hi - lo) / 2.0) ** 2
    if not any(r["protocol"] == spec.protocol for r in rows):   # memoised (memobitmean)
        worst = spec.protocol_impl.worst_case_variance() * scale
        return (f"{spec.name}: uses {spec.protocol} (memoised), worst-case variance per report "
                f"{worst:.4g} (the variance of the mean of n reports is this over n)")
    chosen = next(r for r in rows if r["protocol"] == spec.protocol)
    # the alternative is a different mechanism: not bitmean for duchi (one mechanism, two names),
    # nor a hybrid whose mix degenerates to the chosen piecewise or duchi (equal variance)
    best = chosen["variance_per_report"]
    runner = next((r for r in rows if r["protocol"] != chosen["protocol"]
                   and abs(r["variance_per_report"] - best) > 1e-9 * best), None)
    how = "auto chose" if spec.requested_protocol == "auto" else "uses"
    text = (f"{spec.name}: {how} {chosen['protocol']}, worst-case variance per report "
            f"{chosen['variance_per_report'] * scale:.4g}")
    if runner is not None:
        better = runner["variance_per_report"] < chosen["variance_per_report"]
        label = "auto would choose" if better else "runner-up"
        text += (f"; {label} {runner['protocol']}: {runner['variance_per_report'] * scale:.4g} "
                 f"({runner['variance_per_report'] / chosen['variance_per_report']:.3f}x)")
    return text + " (the variance of the mean of n reports is this over n)"
