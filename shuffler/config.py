"""`ldpt shuffle` settings, declared once as data (as the collector's, collector/config.py).

``SETTINGS`` feeds the ``ShuffleConfig`` defaults, the ``LDPT_SHUFFLE_<NAME>`` environment
variables (their own prefix, so a shuffler and a collector can share an environment), the keys of
a ``--config shuffle.toml`` file, `ldpt shuffle --help` and docs/operations.md ("Running a
shuffler"; a test checks every setting is documented). One precedence, highest first:

    command-line argument  >  LDPT_SHUFFLE_<NAME> environment variable  >  TOML file  >  default
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from client_sdk import ohttp
from collector.config import (
    ConfigError,
    Setting,
    check_tls_and_numbers,
    read_tokens,
    settings_from_env,
    settings_from_toml,
)

ENV_PREFIX = "LDPT_SHUFFLE_"
#: The SDK's padding classes up to 16 KiB, sealed: every batch of an app with up to ~200 metrics.
DEFAULT_MAX_ENVELOPE_BYTES = 16_384 + ohttp.ENVELOPE_OVERHEAD

SETTINGS: tuple[Setting, ...] = (
    # --- where envelopes come from and go -------------------------------------------------------------
    Setting("collector_url", None, "The collector's base URL (e.g. https://collector.example): shuffled "
            "batches go to {url}/v1/shuffled-batches, key configurations come from "
            "{url}/.well-known/ohttp-gateway.", str),
    Setting("token_file", None, "File whose first line is this shuffler's token, one of the collector's "
            "shuffler_token_file; mode 0600 (refused when group or others can read it).", str, path=True),
    Setting("allow_insecure_token_file", False, "Start even if the token file is readable by group or "
            "others (refused otherwise, as ssh refuses such keys)."),
    Setting("collector_ca_file", None, "PEM CA bundle to verify an https:// collector with (default: the "
            "system's).", str, path=True),
    Setting("source_address", "", "Local address the connections to the collector leave from (a "
            "multi-homed host); empty: the system's choice."),
    Setting("db", "shuffler.sqlite", "SQLite file of the pool (created if missing): envelopes are stored "
            "here before they are acknowledged.", path=True),
    Setting("host", "127.0.0.1", "Address to listen on."),
    Setting("port", 8090, "Port (0 picks a free one; the listening line says which).", zero=True),
    Setting("tls_cert", None, "PEM certificate (chain) to serve HTTPS; needs tls_key.", str, path=True),
    Setting("tls_key", None, "PEM private key of tls_cert.", str, path=True),
    # --- shuffling ------------------------------------------------------------------------------------
    Setting("min_batch", 1000, "Fewest envelopes in a forwarded batch: fewer are never forwarded, "
            "however long they wait (the crowd each device hides in; docs/privacy.md)."),
    Setting("max_batch", 10_000, "Most envelopes in a forwarded batch: a batch is forwarded as soon as "
            "this many are pooled."),
    Setting("max_delay", 3600.0, "Seconds the oldest pooled envelope may wait: then everything pooled "
            "(up to max_batch) is forwarded — if at least min_batch envelopes are; fewer keep waiting."),
    Setting("max_forward_bytes", 16 << 20, "Largest forwarded batch in bytes (at most the collector's "
            "max_shuffled_batch_bytes); must hold min_batch envelopes of max_envelope_bytes."),
    Setting("forward_timeout", 120.0, "Seconds one forwarding request may take (the collector answers "
            "after its commit); then it is retried."),
    Setting("retry_max", 300.0, "Longest wait between forwarding attempts after failures (the wait "
            "doubles from 1 s; a Retry-After is honoured up to it)."),
    Setting("key_refresh", 300.0, "Seconds between fetches of the collector's key configurations (an "
            "envelope sealed to a key id not among them is refused with ohttp-key)."),
    Setting("seen_days", 8, "Days the digests of forwarded envelopes are kept, so an SDK's late retry "
            "of an acknowledged envelope is still a duplicate (the SDK retries for up to 7 days).",
            zero=True),
    # --- bounds ---------------------------------------------------------------------------------------
    Setting("max_envelope_bytes", DEFAULT_MAX_ENVELOPE_BYTES, "Largest envelope accepted (413 beyond: the "
            "SDK splits its batch); the default takes padding classes up to 16 KiB."),
    Setting("max_pool_envelopes", 1_000_000, "Envelopes the pool may hold (pooled and being forwarded); "
            "beyond it 503 pool-full with Retry-After. Bounds the disk."),
    Setting("max_pool_bytes", 1 << 30, "Bytes of envelopes the pool may hold; beyond it 503 pool-full."),
    Setting("rate_limit", 2.0, "Envelopes per second per source address (token bucket); beyond it 429 "
            "rate-limited with Retry-After."),
    Setting("rate_limit_burst", 60.0, "Envelopes a source address may send at once before rate_limit "
            "applies."),
    Setting("trusted_proxies", "", "Comma-separated addresses/networks of reverse proxies whose "
            "X-Forwarded-For names the source address (for the rate limit only: never stored)."),
    Setting("header_timeout", 10.0, "Seconds a connection may take to send a request's headers; slower "
            "ones are closed (408)."),
    Setting("keepalive_timeout", 15.0, "Seconds an idle keep-alive connection is kept open."),
    Setting("body_read_timeout", 30.0, "Seconds an envelope may take to arrive once the headers are in "
            "(408 beyond)."),
    Setting("max_connections", 1000, "Open connections; beyond it the connection nearest its deadline "
            "that is not being served is closed."),
    Setting("shutdown_timeout", 30.0, "Seconds a graceful shutdown waits for in-flight requests and a "
            "forwarding under way."),
    Setting("sqlite_synchronous", "FULL", "SQLite PRAGMA synchronous of the pool (FULL: an acknowledged "
            "envelope survives a power cut)."),
    Setting("access_log", False, "Log every request (off: no client address is ever written anywhere)."),
)
SETTING_NAMES = tuple(s.name for s in SETTINGS)


@dataclasses.dataclass(frozen=True)
class ShuffleConfig:
    """Everything `ldpt shuffle` needs; every field is a ``SETTINGS`` entry (same defaults)."""

    collector_url: str
    token_file: Path
    allow_insecure_token_file: bool = False
    collector_ca_file: Path | None = None
    source_address: str = ""
    db: Path = Path("shuffler.sqlite")
    host: str = "127.0.0.1"
    port: int = 8090
    tls_cert: Path | None = None
    tls_key: Path | None = None
    min_batch: int = 1000
    max_batch: int = 10_000
    max_delay: float = 3600.0
    max_forward_bytes: int = 16 << 20
    forward_timeout: float = 120.0
    retry_max: float = 300.0
    key_refresh: float = 300.0
    seen_days: int = 8
    max_envelope_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES
    max_pool_envelopes: int = 1_000_000
    max_pool_bytes: int = 1 << 30
    rate_limit: float = 2.0
    rate_limit_burst: float = 60.0
    trusted_proxies: str = ""
    header_timeout: float = 10.0
    keepalive_timeout: float = 15.0
    body_read_timeout: float = 30.0
    max_connections: int = 1000
    shutdown_timeout: float = 30.0
    sqlite_synchronous: str = "FULL"
    access_log: bool = False

    def __post_init__(self) -> None:
        parts = urlsplit(self.collector_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"collector_url {self.collector_url!r}: give the collector's base URL, "
                              "http(s)://host[:port]", setting="collector_url")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be a TCP port in 0..65535, got {self.port}", setting="port")
        if self.sqlite_synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigError(f"sqlite_synchronous {self.sqlite_synchronous!r}: use OFF, NORMAL, FULL or "
                              "EXTRA", setting="sqlite_synchronous")
        check_tls_and_numbers(self, SETTINGS)
        if self.max_batch < self.min_batch:
            raise ConfigError(f"max_batch ({self.max_batch}) is below min_batch ({self.min_batch})",
                              setting="max_batch")
        if self.min_batch * (self.max_envelope_bytes + 5) + 64 > self.max_forward_bytes:
            raise ConfigError(f"min_batch ({self.min_batch}) envelopes of max_envelope_bytes "
                              f"({self.max_envelope_bytes}) do not fit in max_forward_bytes "
                              f"({self.max_forward_bytes}): a batch of min_batch could be impossible to "
                              "forward; raise max_forward_bytes or lower max_envelope_bytes",
                              setting="max_forward_bytes")
        if self.max_pool_envelopes < self.max_batch:
            raise ConfigError(f"max_pool_envelopes ({self.max_pool_envelopes}) is below max_batch "
                              f"({self.max_batch})", setting="max_pool_envelopes")

    @property
    def base_url(self) -> str:
        return self.collector_url.rstrip("/")


def make_config(environ: Mapping[str, str] | None = None, toml: str | Path | None = None,
                **arguments: Any) -> ShuffleConfig:
    """Build a ShuffleConfig: arguments > LDPT_SHUFFLE_* variables > TOML file > defaults."""
    values = {s.name: s.default for s in SETTINGS}
    source: dict[str, str] = {}
    from_toml = settings_from_toml(toml, SETTINGS) if toml is not None else {}
    values.update(from_toml)
    source.update(dict.fromkeys(from_toml, str(toml)))
    from_env = settings_from_env(environ, SETTINGS, ENV_PREFIX)
    values.update(from_env)
    source.update({name: f"{ENV_PREFIX}{name.upper()}" for name in from_env})
    unknown = set(arguments) - set(SETTING_NAMES)
    if unknown:
        raise ConfigError(f"unknown setting {sorted(unknown)[0]!r}")
    values.update({k: v for k, v in arguments.items() if v is not None})
    for name, flag in (("collector_url", "--collector"), ("token_file", "--token-file")):
        if values[name] is None:
            raise ConfigError(f"no {name}: give {flag} (or {name} in the config file, or "
                              f"{ENV_PREFIX}{name.upper()})", setting=name)
    for s in SETTINGS:
        if s.path and values[s.name] is not None:
            values[s.name] = Path(values[s.name])
        if arguments.get(s.name) is not None:
            source.pop(s.name, None)
    try:
        return ShuffleConfig(**values)
    except ConfigError as exc:
        if exc.setting in source:
            raise ConfigError(f"{source[exc.setting]}: {exc}", setting=exc.setting) from None
        raise


def read_token(config: ShuffleConfig) -> bytes:
    """The shuffler's token (the first line of token_file), refusing a file others can read."""
    return read_tokens(config.token_file, what="shuffler token",
                       allow_insecure=config.allow_insecure_token_file)[0]
