"""`ldpt shuffle`: run an anonymising shuffler in front of a collector (shuffler/).

Every option is a shuffler setting (shuffler/config.py ``SETTINGS``); an option not given falls
back to its LDPT_SHUFFLE_<NAME> environment variable, then to the ``--config`` TOML file, then to
the default.
"""

from __future__ import annotations

import logging
import sys

import click


def _settings_help() -> str:
    from shuffler.config import SETTINGS

    return ("Every setting can also come from LDPT_SHUFFLE_<NAME> or from --config FILE (keys = names "
            "below); precedence: option > environment > file > default. Settings: " + "; ".join(
                f"{s.name} (default {s.default})" for s in SETTINGS))


@click.command(epilog=_settings_help())
@click.option("--config", "config_file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="TOML file of settings (name = value); see docs/operations.md, \"Running a shuffler\".")
@click.option("--collector", "collector_url", metavar="URL", default=None,
              help="The collector's base URL. Required here, in --config or in LDPT_SHUFFLE_COLLECTOR_URL.")
@click.option("--token-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="This shuffler's token for the collector (first line), mode 0600. Required.")
@click.option("--allow-insecure-token-file", is_flag=True, default=None,
              help="Start even if the token file is readable by group or others.")
@click.option("--db", type=click.Path(dir_okay=False), default=None,
              help="SQLite file of the pool [default: ./shuffler.sqlite; created if missing].")
@click.option("--host", default=None, help="Address to listen on [default: 127.0.0.1].")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="Port (0 picks a free one; the listening line says which) [default: 8090].")
@click.option("--min-batch", type=click.IntRange(min=1), default=None,
              help="Fewest envelopes per forwarded batch; fewer are never forwarded [default: 1000].")
@click.option("--max-batch", type=click.IntRange(min=1), default=None,
              help="Most envelopes per forwarded batch; a batch goes as soon as this many wait [default: 10000].")
@click.option("--max-delay", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds the oldest envelope may wait before what is pooled goes (if at least "
                   "--min-batch) [default: 3600].")
@click.option("--source-address", default=None,
              help="Local address the connections to the collector leave from.")
@click.option("--collector-ca-file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="PEM CA bundle for an https:// collector.")
@click.option("--tls-cert", type=click.Path(dir_okay=False, exists=True), default=None,
              help="PEM certificate (chain): serve HTTPS (with --tls-key).")
@click.option("--tls-key", type=click.Path(dir_okay=False, exists=True), default=None,
              help="PEM private key of --tls-cert.")
@click.option("--access-log", is_flag=True, default=None,
              help="Log every request, with its client address (off by default: no address is written).")
def shuffle(config_file: str | None, collector_url: str | None, token_file: str | None,
            allow_insecure_token_file: bool | None, db: str | None, host: str | None, port: int | None,
            min_batch: int | None, max_batch: int | None, max_delay: float | None, source_address: str | None,
            collector_ca_file: str | None, tls_cert: str | None, tls_key: str | None,
            access_log: bool | None) -> None:
    """Run an anonymising shuffler for sealed reports until SIGTERM/SIGINT."""
    from collector.config import ConfigError
    from shuffler.config import make_config

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="ldpt shuffle[%(process)d]: %(levelname)s %(message)s")
    try:
        config = make_config(toml=config_file, collector_url=collector_url, token_file=token_file,
                             allow_insecure_token_file=allow_insecure_token_file, db=db, host=host, port=port,
                             min_batch=min_batch, max_batch=max_batch, max_delay=max_delay,
                             source_address=source_address, collector_ca_file=collector_ca_file,
                             tls_cert=tls_cert, tls_key=tls_key, access_log=access_log)
        from shuffler.server import serve

        code = serve(config)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if code:
        raise click.exceptions.Exit(code)
