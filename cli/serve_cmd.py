"""`ldpt serve`: run the collector (ingest over HTTP, query API, health and metrics).

Every option is a collector setting (collector/config.py ``SETTINGS``); an option not given
falls back to its LDPT_<NAME> environment variable, then to the ``--config`` TOML file, then
to the default.
"""

from __future__ import annotations

import logging
import sys

import click

from collector.config import SETTINGS, make_config


def _settings_help() -> str:
    return ("Every setting can also come from LDPT_<NAME> or from --config FILE (keys = names "
            "below); precedence: option > environment > file > default. Settings: " + "; ".join(
                f"{s.name} (default {s.default})" for s in SETTINGS))


@click.command(epilog=_settings_help())
@click.option("--config", "config_file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="TOML file of settings (name = value); see docs/operations.md.")
@click.option("--metrics", "metrics_file", type=click.Path(dir_okay=False), default=None,
              help="Metric registry (TOML). Required here, in --config or in LDPT_METRICS_FILE.")
@click.option("--db", type=click.Path(dir_okay=False), default=None,
              help="SQLite store (default ./ldpt.sqlite; created if missing).")
@click.option("--postgres", metavar="DSN", default=None,
              help="PostgreSQL DSN instead of SQLite (needs the 'postgres' extra). Prefer "
                   "LDPT_POSTGRES_DSN or --config: an argument shows in `ps`.")
@click.option("--host", default=None, help="Address to listen on [default: 127.0.0.1].")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="Port (0 picks a free one; the listening line says which) [default: 8080].")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Worker processes sharing the port (SO_REUSEPORT) and the store [default: 1].")
@click.option("--window", type=click.Choice(["day", "hour"]), default=None,
              help="Time window of the sketches (UTC receive time) [default: day].")
@click.option("--query-token-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="File with the bearer token(s) for the estimates API, one per line, mode 0600 "
                   "(without it the query API is disabled).")
@click.option("--allow-insecure-token-file", is_flag=True, default=None,
              help="Start even if a token or key file is readable by group or others.")
@click.option("--ingest-key-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Require Authorization: Bearer <key> on every batch (keys one per line).")
@click.option("--ohttp-keys-dir", type=click.Path(file_okay=False, exists=True), default=None,
              help="Be an Oblivious HTTP gateway for sealed batches with the keys of this directory "
                   "(`ldpt keys generate --dir DIR`).")
@click.option("--shuffler-token-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Take shuffled batches (POST /v1/shuffled-batches) from shufflers presenting a token "
                   "of this file (one per line, mode 0600); see `ldpt shuffle`.")
@click.option("--min-reports", type=click.IntRange(min=0), default=None,
              help="Refuse estimates for windows with fewer reports than this [default: 0].")
@click.option("--retention-days", type=click.IntRange(min=0), default=None,
              help="Delete windows older than this many days while serving (0 keeps all).")
@click.option("--tls-cert", type=click.Path(dir_okay=False, exists=True), default=None,
              help="PEM certificate (chain): serve HTTPS (with --tls-key).")
@click.option("--tls-key", type=click.Path(dir_okay=False, exists=True), default=None,
              help="PEM private key of --tls-cert.")
@click.option("--admin-port", type=click.IntRange(0, 65535), default=None,
              help="Also serve /healthz, /readyz, /metrics on this port, outside the ingest path.")
@click.option("--admin-host", default=None,
              help="Address of the admin port [default: 127.0.0.1, whatever --host is].")
@click.option("--access-log", is_flag=True, default=None,
              help="Log every request, query values stripped (off by default: client addresses are "
                   "not logged).")
def serve(config_file: str | None, metrics_file: str | None, db: str | None, postgres: str | None,
          host: str | None, port: int | None, workers: int | None, window: str | None,
          query_token_file: str | None, allow_insecure_token_file: bool | None,
          ingest_key_file: str | None, ohttp_keys_dir: str | None, shuffler_token_file: str | None,
          min_reports: int | None, retention_days: int | None,
          tls_cert: str | None, tls_key: str | None, admin_port: int | None,
          admin_host: str | None, access_log: bool | None) -> None:
    """Run the collector until SIGTERM/SIGINT (then commit what was accepted and exit 0)."""
    from collector.config import ConfigError

    if db and postgres:
        raise click.UsageError("use either --db or --postgres, not both")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="ldpt serve[%(process)d]: %(levelname)s %(message)s")
    try:
        config = make_config(
            metrics_file, toml=config_file, check_files=True, db=db, postgres_dsn=postgres, host=host, port=port,
            workers=workers, window=window, query_token_file=query_token_file,
            allow_insecure_token_file=allow_insecure_token_file, ingest_key_file=ingest_key_file,
            ohttp_keys_dir=ohttp_keys_dir, shuffler_token_file=shuffler_token_file, min_reports=min_reports, retention_days=retention_days, tls_cert=tls_cert,
            tls_key=tls_key, admin_port=admin_port, admin_host=admin_host, access_log=access_log)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if config.postgres_dsn:
        try:
            import asyncpg  # noqa: F401
        except ImportError:
            raise click.ClickException("a PostgreSQL DSN needs asyncpg: pip install "
                                       "'ldp-telemetry[postgres]'") from None
    from collector.server import serve as run

    code = run(config)
    if code:
        raise click.exceptions.Exit(code)
