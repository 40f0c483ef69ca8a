"""The `ldpt` command: a thin layer over the library (parse, call, format).

Subcommands load lazily: `ldpt --help` imports none of them, and `ldpt NAME` imports only
NAME's module (and that module imports pandas, scipy or aiohttp only inside the functions that
need them), so the CLI answers at once (bench/cli.py; tests/test_cli_first_use.py).
"""

from __future__ import annotations

import gc
import importlib
import importlib.util

import click

from . import common
from .common import LdptGroup

#: name -> (module, attribute, the one line `ldpt --help` shows without importing the module;
#: tests/test_cli_first_use.py checks it is the command's own short help). A module that
#: is absent (a command still being built) is left out of the CLI.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "audit": ("cli.audit_cmd", "audit", "Play the best distinguishing attacker on METRIC's real reports; "
              "compare with e^eps/(1+e^eps)."),
    "compare": ("cli.compare_cmd", "compare", "Compare METRIC between two windows: per value the change of "
                "proportion, its interval, a p-value."),
    "demo": ("cli.demo_cmd", "demo", "Run a collector, drive CLIENTS simulated apps through the real SDK "
             "over HTTP, print estimates vs truth."),
    "estimate": ("cli.estimate_cmd", "estimate", "Estimate METRIC's frequencies with confidence intervals."),
    "keys": ("cli.keys_cmd", "keys", "The sealed-report gateway's keys: generate, rotate, list, prune, config."),
    "ledger": ("cli.ledger_cmd", "ledger", "Show the privacy ledger of a device: epsilon spent per metric, "
               "per window and lifetime."),
    "metrics": ("cli.metrics_cmd", "metrics", "Work with the metric registry (TOML)."),
    "plan": ("cli.plan_cmd", "plan", "Compare protocols for EPSILON, DOMAIN (or --range) and CLIENTS; mark the one `auto` picks."),
    "prune": ("cli.prune_cmd", "prune", "Delete windows before a date from the store (safe while collectors "
              "serve it)."),
    "rappor": ("cli.rappor_cmd", "rappor", "RAPPOR tools: decode google/rappor's files, export sketches in "
               "their format."),
    "serve": ("cli.serve_cmd", "serve", "Run the collector until SIGTERM/SIGINT (then commit what was "
              "accepted and exit 0)."),
    "shuffle": ("cli.shuffle_cmd", "shuffle", "Run an anonymising shuffler for sealed reports until "
                "SIGTERM/SIGINT."),
    "simulate": ("cli.simulate_cmd", "simulate", "Simulate CLIENTS devices reporting METRIC once each into a "
                 "sketch store (or a collector)."),
}


class LazyGroup(LdptGroup):
    """A group whose subcommands are imported on first use, from ``COMMANDS``."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        lazy = [name for name, (module, _, _) in COMMANDS.items() if importlib.util.find_spec(module)]
        return sorted(set(self.commands) | set(lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module_name, attr, _ = COMMANDS[cmd_name]
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if exc.name != module_name:
                    raise
                return None
            self.add_command(getattr(module, attr), cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of `ldpt --help`, from ``COMMANDS`` (nothing is imported)."""
        rows = []
        for name in self.list_commands(ctx):
            loaded = self.commands.get(name)
            text = loaded.get_short_help_str(formatter.width) if loaded is not None else COMMANDS[name][2]
            rows.append((name, text))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ldp-telemetry")
def main() -> None:
    """ldp-telemetry: local-differential-privacy telemetry (simulate, collect, estimate)."""


def run() -> None:
    """The `ldpt` console script: ``main``, then every object left is frozen for the exit.

    The interpreter's exit runs full collections of the cyclic garbage collector over every
    object the command's imports made (~25,000: numpy, click, the query layer), a few percent of
    a fresh `ldpt estimate` (issue 32); the process ends here, so they are frozen instead (the
    memory is the operating system's to take back). In process (tests, ``CliRunner``) ``main`` is
    called as it is; here a command's start-up imports are frozen too (cli.common.startup_imports)."""
    common.FREEZE_STARTUP = True
    try:
        main()
    finally:
        gc.freeze()
