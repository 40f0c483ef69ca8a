"""`ldpt serve`: run the collector (ingest over HTTP, query API, health and metrics)."""

from __future__ import annotations

import logging
import sys

import click

from collector.config import SETTINGS, make_config


def _settings_help() -> str:
    return "Tuning (environment LDPT_<NAME>): " + "; ".join(
        f"{s.name.upper()} (default {s.default})" for s in SETTINGS)


@click.command(epilog=_settings_help())
@click.option("--metrics", "metrics_file", required=True, type=click.Path(dir_okay=False),
              help="Metric registry (TOML).")
@click.option("--db", type=click.Path(dir_okay=False), default=None,
              help="SQLite store (default ./ldpt.sqlite; created if missing).")
@click.option("--postgres", metavar="DSN", default=None,
              help="PostgreSQL DSN instead of SQLite, for many collectors sharing one store "
                   "(needs the 'postgres' extra).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port (0 picks a free one; the listening line says which).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes sharing the port (SO_REUSEPORT) and the store.")
@click.option("--window", type=click.Choice(["day", "hour"]), default="day", show_default=True,
              help="Time window of the sketches (UTC receive time).")
@click.option("--query-token-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="File with the bearer token(s) for the estimates API, one per line "
                   "(without it the query API is disabled).")
@click.option("--min-reports", type=click.IntRange(min=0), default=0, show_default=True,
              help="Refuse estimates for windows with fewer reports than this.")
@click.option("--access-log", is_flag=True,
              help="Log every request (off by default: client addresses are not logged).")
def serve(metrics_file: str, db: str | None, postgres: str | None, host: str, port: int,
          workers: int, window: str, query_token_file: str | None, min_reports: int,
          access_log: bool) -> None:
    """Run the collector until SIGTERM/SIGINT (then commit what was accepted and exit 0)."""
    if db and postgres:
        raise click.UsageError("use either --db or --postgres, not both")
    if postgres:
        try:
            import asyncpg  # noqa: F401
        except ImportError:
            raise click.ClickException("--postgres needs asyncpg: pip install 'ldp-telemetry[postgres]'") from None
    from collector.server import serve as run

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="ldpt serve[%(process)d]: %(levelname)s %(message)s")
    config = make_config(metrics_file, db=None if postgres else (db or "ldpt.sqlite"),
                         postgres=postgres, host=host, port=port, workers=workers, window=window,
                         query_token_file=query_token_file, min_reports=min_reports,
                         access_log=access_log)
    code = run(config)
    if code:
        raise click.exceptions.Exit(code)
