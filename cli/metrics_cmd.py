"""`ldpt metrics check FILE`: validate a registry and show each metric's protocol and epsilon."""

from __future__ import annotations

import click

from client_sdk.registry import load_registry

from .common import LdptGroup


@click.group(cls=LdptGroup)
def metrics() -> None:
    """Work with the metric registry (TOML)."""


@metrics.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
def check(file: str) -> None:
    """Validate FILE; print each metric with its protocol and epsilon per report."""
    registry = load_registry(file)
    rows = []
    for spec in registry:
        proto = spec.protocol_impl
        chosen = f"{spec.protocol} (auto)" if spec.requested_protocol == "auto" else spec.protocol
        longitudinal = proto.epsilon_longitudinal
        rows.append((spec.name, spec.kind.value, str(spec.domain_size or "open"), chosen,
                     f"{proto.epsilon:.4f}", "-" if longitudinal is None else f"{longitudinal:.4f}",
                     f"{proto.payload_bits}", spec.fingerprint[:12]))
    header = ("metric", "kind", "domain", "protocol", "eps/report", "eps/lifetime-of-value",
              "payload bits", "fingerprint")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    click.echo(f"{file}: {len(registry)} metric(s) OK")
    for row in [header, *rows]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    for spec in registry:
        if spec.protocol == "loloha":
            g = spec.protocol_impl.params.g
            click.echo(f"{spec.name}: loloha memoises per hashed value: at most g = {g} x eps inf = "
                       f"{g * spec.protocol_impl.epsilon_longitudinal:.4f} over the lifetime")
    for line in device_warnings(registry):
        click.echo(line, err=True)


def device_warnings(registry) -> list[str]:
    """Warn when the metrics' per-window sum exceeds the [device] cap, naming what goes unsent.

    Each metric may charge eps/report x reports_per_window in a window; the ledger refuses the
    reports that would exceed ``epsilon_per_window``, first come first served. Listed in file
    order: which metrics fit if they report in that order, and which are then refused.
    """
    device = registry.device
    if device is None:
        return []
    out = []
    cap = device.epsilon_per_window
    demand = [(spec.name, spec.protocol_impl.epsilon * spec.reports_per_window) for spec in registry]
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
