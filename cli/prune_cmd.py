"""`ldpt prune`: delete whole windows before a date from a store (retention).

Safe while collectors serve the same store: the deletion is one transaction, exactly like a
group commit (SQLite waits for the writer lock; PostgreSQL row locks), so a collector
committing at the same moment either lands before it or after it. Batch ids received
before the date go too, except those of the last ``BATCH_ID_MIN_DAYS`` days: SDKs retry a
batch for up to 7 days with the same id, and a retry whose id is gone would be counted again
(docs/operations.md, "Batch ids").
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from pathlib import Path

import click

from collector.storage.base import BATCH_ID_MIN_DAYS, PruneResult, batch_id_cutoff, canonical_window

from .common import plural


def _day(ctx: click.Context, param: click.Parameter, value: str) -> str:
    day = canonical_window(value, hour_ok=False)
    if day is None:
        raise click.BadParameter(f"{value!r} is not a date (YYYY-MM-DD)")
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()
    if day > today:  # ISO dates order as text
        raise click.BadParameter(f"--before {day} is after today ({today} UTC): it would delete the "
                                 "window collectors are writing and the batch ids that keep SDK "
                                 "retries from being counted twice")
    return day


def prune_sqlite(path: str | Path, before: str, ids_before: str) -> PruneResult:
    from collector.storage.sqlite import SQLiteStore

    if not Path(path).exists():
        raise click.ClickException(f"{path}: no such store")
    with SQLiteStore(path, create=False) as store:
        return store.prune(before, ids_before)


def prune_postgres(dsn: str, before: str, ids_before: str) -> PruneResult:
    try:
        import asyncpg  # noqa: F401

        from collector.storage.postgres import PostgresStore
    except ImportError:
        raise click.ClickException("a PostgreSQL DSN needs asyncpg: pip install "
                                   "'ldp-telemetry[postgres]'") from None

    async def run() -> PruneResult:
        store = await PostgresStore.open(dsn, create=False, min_size=1, max_size=1)
        try:
            return await store.aprune(before, ids_before)
        finally:
            await store.aclose()

    return asyncio.run(run())


@click.command()
@click.option("--before", required=True, callback=_day, metavar="YYYY-MM-DD",
              help="Delete every window whose day is before this date (it is kept).")
@click.option("--db", type=click.Path(dir_okay=False), default=None, help="SQLite store.")
@click.option("--postgres", metavar="DSN", default=None,
              help="PostgreSQL store (default: LDPT_POSTGRES_DSN when --db is not given).")
def prune(before: str, db: str | None, postgres: str | None) -> None:
    """Delete windows before a date from the store (safe while collectors serve it)."""
    if db and postgres:
        raise click.UsageError("use either --db or --postgres, not both")
    postgres = postgres or (None if db else os.environ.get("LDPT_POSTGRES_DSN") or None)
    if not db and not postgres:
        raise click.UsageError("give --db PATH or --postgres DSN (or set LDPT_POSTGRES_DSN)")
    ids_before = batch_id_cutoff(before, dt.datetime.now(dt.timezone.utc).date())
    result = prune_postgres(postgres, before, ids_before) if postgres else \
        prune_sqlite(db, before, ids_before)
    click.echo(f"deleted {plural(result.windows, 'window')} ({plural(result.rows, 'row')}) and "
               f"{plural(result.batch_ids, 'batch id')} before {before}")
    if ids_before != before:
        click.echo(f"kept the batch ids received since {ids_before}: SDK retries of the last "
                   f"{BATCH_ID_MIN_DAYS} days stay deduplicated")
