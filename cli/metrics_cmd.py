"""`ldpt metrics check FILE`: validate a registry and show each metric's protocol and epsilon."""

from __future__ import annotations

import click

from client_sdk.registry import MetricSpec, load_registry

from .common import LdptGroup
from .plan_cmd import numeric_rows


@click.group(cls=LdptGroup)
def metrics() -> None:
    """Work with the metric registry (TOML)."""


@metrics.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
def check(file: str) -> None:
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
                     f"{proto.payload_bits}", spec.fingerprint[:12]))
    header = ("metric", "kind", "domain", "protocol", "eps/report", "eps/lifetime-of-value",
              "payload bits", "fingerprint")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    click.echo(f"{file}: {len(registry)} metric(s) OK")
    for row in [header, *rows]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    for note in notes:
        click.echo(note)


def numeric_choice(spec: MetricSpec) -> str:
    """A mean metric's mechanism beside the runner-up: worst-case variance per report, in the
    metric's units squared ((hi − lo)/2)²·max_t Var[v | t]; the mean of n reports has 1/n of it."""
    lo, hi = spec.bounds
    grid = {k: v for k, v in spec.options if k == "grid"}
    rows = sorted((r for r in numeric_rows(spec.epsilon, lo, hi, 1, grid) if r["available"]),
                  key=lambda r: r["variance_per_report"])
    scale = ((hi - lo) / 2.0) ** 2
    chosen = next(r for r in rows if r["protocol"] == spec.protocol) if any(
        r["protocol"] == spec.protocol for r in rows) else rows[0]
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
