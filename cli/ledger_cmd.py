"""`ldpt ledger`: show a device's privacy ledger (what each metric has spent, and what was refused)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from client_sdk.ledger import LEDGER_FILE, read_ledger, summarise, summarise_device
from client_sdk.state import OPT_OUT_FILE, OUTBOX_DIR, SECRET_FILE

from .common import emit, format_table, output_options

COLUMNS = ("metric", "window", "window_reports", "reports_per_window", "window_epsilon",
           "lifetime_reports", "lifetime_epsilon", "lifetime_budget", "epsilon_per_report",
           "epsilon_longitudinal", "distinct_values", "refused_window", "refused_lifetime", "refused_device")


def _fmt_eps(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def device_line(device: dict) -> str:
    """The device totals: the sum over metrics that a registry's [device] caps limit."""
    return (f"device: eps {_fmt_eps(device['window_epsilon'])} in window {device['window'] or '-'}, "
            f"eps {_fmt_eps(device['lifetime_epsilon'])} over the lifetime ({device['metrics']} metrics); "
            f"refused by the [device] caps: {device['refused_device_window']} (window) + "
            f"{device['refused_device_lifetime']} (lifetime); clock rule: {device['windows_opened']} windows "
            f"opened, {device['charges_held']} charges held, {device['window_redates']} re-dates "
            f"(docs/privacy.md, \"Clock errors\")")


def ledger_table(rows: list[dict], state_dir: Path, device: dict | None = None) -> str:
    """The human view: one line per metric, then what the directory holds."""
    lines = [f"privacy ledger of {state_dir}"]
    if rows:
        header = ("metric", "window (UTC)", "reports", "eps window", "eps lifetime", "eps/report",
                  "eps inf", "distinct", "refused")
        lines.append(format_table(header, [(
            r["metric"],
            r["window"],
            f"{r['window_reports']}/{r['reports_per_window']}",
            _fmt_eps(r["window_epsilon"]),
            _fmt_eps(r["lifetime_epsilon"]) + (
                f"/{_fmt_eps(r['lifetime_budget'])}" if r["lifetime_budget"] is not None else ""),
            _fmt_eps(r["epsilon_per_report"]),
            _fmt_eps(r["epsilon_longitudinal"]),
            "-" if r["distinct_values"] is None else str(r["distinct_values"]),
            f"{r['refused_window']}+{r['refused_lifetime']}+{r['refused_device']}",
        ) for r in rows]).rstrip("\n"))
        lines.append("eps lifetime: T·eps for T reports; for memoised protocols (RAPPOR, lgrr, losue) distinct "
                     "values × eps inf (loloha: distinct hashed values, at most g). refused: beyond "
                     "reports_per_window + beyond the lifetime budget + beyond the [device] caps (never sent).")
        if device is not None:
            lines.append(device_line(device))
    else:
        lines.append("no report has been charged yet")
    outbox = state_dir / OUTBOX_DIR
    waiting = len(list(outbox.glob("*.ldpb"))) if outbox.is_dir() else 0
    lines.append(f"secret: {'present' if (state_dir / SECRET_FILE).exists() else 'absent'}; "
                 f"opted out: {'yes' if (state_dir / OPT_OUT_FILE).exists() else 'no'}; "
                 f"batches waiting in the offline queue: {waiting}")
    return "\n".join(lines) + "\n"


@click.command()
@click.option("--state-dir", required=True, type=click.Path(file_okay=False, exists=True),
              help="The SDK's state directory (the one passed as state_dir=).")
@output_options
def ledger(state_dir: str, fmt: str, output: str | None) -> None:
    """Show the privacy ledger of a device: epsilon spent per metric, per window and lifetime."""
    path = Path(state_dir)
    if not (path / LEDGER_FILE).exists() and not (path / SECRET_FILE).exists() \
            and not (path / OPT_OUT_FILE).exists():
        raise click.ClickException(f"{path}: not an ldp-telemetry state directory (no {LEDGER_FILE}, "
                                   f"no {SECRET_FILE})")
    accounts = read_ledger(path)
    rows = summarise(accounts)
    device = summarise_device(accounts)
    if fmt == "json":
        text = json.dumps({"state_dir": str(path), "metrics": rows, "device": device}, indent=2) + "\n"
    elif fmt == "csv":
        import pandas as pd  # only for CSV: the table and JSON print without it

        text = pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(index=False)  # floats round-trip exactly
    else:
        text = ledger_table(rows, path, device)
    emit(text, output)
