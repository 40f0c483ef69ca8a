"""The `ldpt` command: a thin layer over the library (parse, call, format)."""

from __future__ import annotations

import importlib

import click

from .common import LdptGroup
from .estimate_cmd import estimate
from .metrics_cmd import metrics
from .plan_cmd import plan
from .simulate_cmd import simulate

#: Commands that live in their own modules and may be absent while being built.
_OPTIONAL_COMMANDS = (("cli.rappor_cmd", "rappor"), ("cli.serve_cmd", "serve"),
                      ("cli.demo_cmd", "demo"), ("cli.ledger_cmd", "ledger"), ("cli.prune_cmd", "prune"))


@click.group(cls=LdptGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ldp-telemetry")
def main() -> None:
    """ldp-telemetry: local-differential-privacy telemetry (simulate, collect, estimate)."""


main.add_command(metrics)
main.add_command(simulate)
main.add_command(estimate)
main.add_command(plan)
for module_name, attr in _OPTIONAL_COMMANDS:
    try:
        main.add_command(getattr(importlib.import_module(module_name), attr))
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
