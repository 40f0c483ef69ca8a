"""Window and date options (--window, --since, --until), shared by the commands that read a store.

Kept apart from the commands so that `ldpt estimate --help` imports no numeric code: the
window label check is imported when a value is given (bench/cli.py).
"""

from __future__ import annotations

import datetime as dt

import click


def today_utc() -> str:
    return dt.datetime.now(dt.timezone.utc).date().isoformat()


def validate_day(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Accept YYYY-MM-DD (or YYYY-MM-DDTHH for hourly windows); returns the zero-padded label."""
    if value is None:
        return None
    from collector.storage.base import canonical_window

    window = canonical_window(value)
    if window is None:
        raise click.BadParameter(f"{value!r} is not a date YYYY-MM-DD (or hour YYYY-MM-DDTHH)")
    return window


def validate_date(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Accept YYYY-MM-DD only (--since/--until select whole UTC days); zero-padded."""
    if value is None:
        return None
    from collector.storage.base import canonical_window

    day = canonical_window(value, hour_ok=False)
    if day is None:
        raise click.BadParameter(f"{value!r} is not a date YYYY-MM-DD (--since and --until "
                                 "select whole days; use --window for one hour)")
    # whichever of --since/--until click parses second sees the other: a reversed range is empty
    since, until = (day, ctx.params.get("until")) if param.name == "since" else (ctx.params.get("since"), day)
    if since and until and since > until:
        raise click.UsageError(f"--since {since} is after --until {until}: the range is empty "
                               "(swap them; both days are inclusive)")
    return day
