"""`ldpt metrics check FILE`: validate a registry and show each metric's protocol and epsilon."""

from __future__ import annotations

import click

from client_sdk.registry import load_registry

from .common import LdptGroup, format_table


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
                     f"{proto.payload_bits}", spec.fingerprint))  # in full: it is what pins= takes
    header = ("metric", "kind", "domain", "protocol", "eps/report", "eps/lifetime-of-value",
              "payload bits", "fingerprint")
    click.echo(f"{file}: {len(registry)} metric(s) OK")
    click.echo(format_table(header, rows), nl=False)
