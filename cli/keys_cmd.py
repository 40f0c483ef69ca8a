"""`ldpt keys`: the sealed-report gateway's HPKE keys — generate, rotate with overlap, list, prune,
and print the key configuration apps may pin (collector/ohttp_keys.py)."""

from __future__ import annotations

import base64
import csv
import datetime as dt
import hashlib
import io
import json
import re
import time
from pathlib import Path

import click

from .common import LdptGroup, emit, format_table, output_options

DIR_HELP = "The key directory (the collector's ohttp_keys_dir setting; or LDPT_OHTTP_KEYS_DIR)."
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds of "90", "90s", "30m", "12h" or "8d"."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if m is None:
        raise click.BadParameter(f"{text!r} is not a duration such as 8d, 12h, 30m or 3600")
    return float(m[1]) * _UNITS[m[2] or "s"]


def _dir_option(func):  # type: ignore[no-untyped-def]
    return click.option("--dir", "directory", envvar="LDPT_OHTTP_KEYS_DIR", required=True,
                        type=click.Path(file_okay=False, path_type=Path), help=DIR_HELP)(func)


def _when(t: float | None) -> str:
    return "-" if t is None else dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@click.group(cls=LdptGroup)
def keys() -> None:
    """The sealed-report gateway's keys: generate, rotate, list, prune, config."""


@keys.command("generate")
@_dir_option
def generate(directory: Path) -> None:
    """Create DIR (0700) and a first active key in it (0600)."""
    from collector.ohttp_keys import generate as make

    record = make(directory)
    click.echo(f"key {record.key_id} generated in {record.path}; start `ldpt serve` with "
               f"ohttp_keys_dir = {directory}")


@keys.command("rotate")
@_dir_option
@click.option("--overlap", default="8d", show_default=True,
              help="How long the retired keys still open envelopes (8d, 12h, 3600, ...).")
def rotate(directory: Path, overlap: str) -> None:
    """Make a new active key; retire the previous ones, deleting them after --overlap."""
    from collector.ohttp_keys import rotate as turn

    seconds = parse_duration(overlap)
    record = turn(directory, seconds)
    click.echo(f"key {record.key_id} is now active; the previous keys are accepted until "
               f"{_when(time.time() + seconds)} (running collectors reload the directory by themselves)")


@keys.command("prune")
@_dir_option
def prune(directory: Path) -> None:
    """Delete the keys whose overlap has ended."""
    from collector.ohttp_keys import prune as drop

    gone = drop(directory)
    click.echo(f"deleted {len(gone)} expired key(s){': ' + ', '.join(map(str, gone)) if gone else ''}")


@keys.command("list")
@_dir_option
@output_options
def list_keys(directory: Path, fmt: str, output: str | None) -> None:
    """Each key: id, state (active, retired, expired), times and public key fingerprint."""
    from collector.ohttp_keys import load_keys

    now = time.time()
    rows = [{"key_id": r.key_id, "state": r.state(now), "created": _when(r.created),
             "retired": _when(r.retired), "expires": _when(r.expires),
             "public_key_sha256": hashlib.sha256(r.key.config.public_key).hexdigest()[:16]}
            for r in load_keys(directory)]
    if fmt == "json":
        text = json.dumps(rows, indent=2) + "\n"
    elif fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, ["key_id", "state", "created", "retired", "expires", "public_key_sha256"])
        writer.writeheader()
        writer.writerows(rows)
        text = buf.getvalue()
    else:
        header = ("key", "state", "created (UTC)", "retired", "expires", "public key sha256")
        text = format_table(header, [tuple(str(v) for v in r.values()) for r in rows]).rstrip("\n") + "\n" if rows \
            else f"no keys in {directory}\n"
    emit(text, output)


@keys.command("config")
@_dir_option
@click.option("--binary", is_flag=True, help="Write the raw application/ohttp-keys bytes (with --output).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), help="Write to this file.")
def config(directory: Path, binary: bool, output: str | None) -> None:
    """The published key configurations (base64), e.g. to pin in an app as key_config."""
    from client_sdk import ohttp
    from collector.ohttp_keys import load_keys

    now = time.time()
    active = sorted((r for r in load_keys(directory) if r.state(now) == "active"), key=lambda r: -r.created)
    if not active:
        raise click.ClickException(f"{directory} has no active key (ldpt keys generate / rotate)")
    document = ohttp.encode_key_configs(r.key.config for r in active)
    if binary:
        if not output:
            raise click.ClickException("--binary writes bytes: give --output FILE")
        Path(output).write_bytes(document)
        return
    emit(base64.b64encode(document).decode() + "\n", output)
