"""Collector settings, declared once as data.

``SETTINGS`` lists every tuning knob with its default and help; the same tuple feeds the
``ServeConfig`` defaults, the ``LDPT_*`` environment overrides and docs/operations.md (a test
checks every setting is documented). Precedence: argument, ``LDPT_<NAME>`` environment,
default.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from client_sdk.errors import LdptError


@dataclasses.dataclass(frozen=True)
class Setting:
    """One tuning knob: name (also LDPT_<NAME> in the environment), default, help."""

    name: str
    default: Any
    help: str


SETTINGS: tuple[Setting, ...] = (
    Setting("max_body_bytes", 1 << 20,
            "Largest request body accepted; larger bodies get 413."),
    Setting("body_read_timeout", 30.0,
            "Seconds a request body may take to arrive once its headers are in; slower bodies "
            "get 408 and free their in-flight allowance (no slow client can hold ingestion)."),
    Setting("header_timeout", 10.0,
            "Seconds a connection may take to send a request's headers (from its first byte, or "
            "from connecting); slower ones are closed (408), so dripping headers cannot hold sockets."),
    Setting("keepalive_timeout", 15.0,
            "Seconds an idle keep-alive connection is kept open between requests."),
    Setting("max_connections", 1000,
            "Open connections per worker; beyond it the connection nearest its deadline that is "
            "not being served is closed (503 when all are busy). Keep it under `ulimit -n`."),
    Setting("max_reports_per_batch", 10_000,
            "Most reports one batch may carry; more is a 422 invalid-batch."),
    Setting("max_inflight_bytes", 64 << 20,
            "Request bodies being read or decoded at once (by Content-Length); above it new "
            "requests get 503 + Retry-After before their body is read. Bounds memory."),
    Setting("queue_max_batches", 4096,
            "Validated batches waiting for the committer; above it 503 + Retry-After."),
    Setting("queue_max_reports", 1_000_000,
            "Reports in the batches waiting for the committer; above it 503 + Retry-After."),
    Setting("group_max_batches", 2048,
            "Most batches committed in one transaction (group commit)."),
    Setting("shutdown_timeout", 30.0,
            "Seconds a graceful shutdown waits for in-flight requests before closing them."),
    Setting("maintain_interval", 30.0,
            "Seconds between store housekeeping runs (PostgreSQL: compaction of delta rows)."),
    Setting("sqlite_synchronous", "FULL",
            "SQLite PRAGMA synchronous for the collector's commits (FULL = durable per commit)."),
)
SETTING_NAMES = tuple(s.name for s in SETTINGS)


class ConfigError(LdptError):
    """A collector setting or command-line argument is invalid."""

    status = 400
    type = "invalid-config"


@dataclasses.dataclass(frozen=True)
class ServeConfig:
    """Everything `ldpt serve` needs; tuning fields come from ``SETTINGS``."""

    metrics_file: Path
    db: Path | None = Path("ldpt.sqlite")
    postgres: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    window: str = "day"
    query_token_file: Path | None = None
    min_reports: int = 0
    access_log: bool = False
    body_read_timeout: float = 30.0
    header_timeout: float = 10.0
    keepalive_timeout: float = 15.0
    max_connections: int = 1000
    max_body_bytes: int = 1 << 20
    max_reports_per_batch: int = 10_000
    max_inflight_bytes: int = 64 << 20
    queue_max_batches: int = 4096
    queue_max_reports: int = 1_000_000
    group_max_batches: int = 2048
    shutdown_timeout: float = 30.0
    maintain_interval: float = 30.0
    sqlite_synchronous: str = "FULL"

    def __post_init__(self) -> None:
        if self.window not in ("day", "hour"):
            raise ConfigError(f"window {self.window!r}: use day or hour")
        if self.workers < 1:
            raise ConfigError("workers must be at least 1")
        if self.sqlite_synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigError(f"sqlite_synchronous {self.sqlite_synchronous!r}: use OFF, NORMAL, "
                              "FULL or EXTRA")
        for s in SETTINGS:
            value = getattr(self, s.name)
            if isinstance(value, (int, float)) and not 0 < value < math.inf:  # also refuses nan
                raise ConfigError(f"setting {s.name} must be a positive finite number, got {value}")

    @property
    def store_description(self) -> str:
        return "postgres" if self.postgres else f"sqlite:{self.db}"


def _coerce(setting: Setting, raw: str) -> Any:
    kind = type(setting.default)
    try:
        return kind(raw) if kind is not int else int(raw.replace("_", ""))
    except ValueError:
        raise ConfigError(f"LDPT_{setting.name.upper()}={raw!r} is not a valid "
                          f"{kind.__name__}") from None


def settings_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Tuning values given as LDPT_<NAME> environment variables."""
    env = os.environ if environ is None else environ
    out = {}
    for s in SETTINGS:
        raw = env.get(f"LDPT_{s.name.upper()}")
        if raw is not None and raw != "":
            out[s.name] = _coerce(s, raw)
    return out


def make_config(metrics_file: str | Path, environ: Mapping[str, str] | None = None,
                **arguments: Any) -> ServeConfig:
    """Build a ServeConfig: explicit arguments win over LDPT_* variables, then defaults."""
    values = {s.name: s.default for s in SETTINGS}
    values.update(settings_from_env(environ))
    values.update({k: v for k, v in arguments.items() if v is not None})
    return ServeConfig(metrics_file=Path(metrics_file), **values)


def read_tokens(path: Path | None) -> tuple[bytes, ...]:
    """Query tokens, one per line (several allow rotation); empty tuple = query API disabled."""
    if path is None:
        return ()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read query token file ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: the query token file is not UTF-8 text") from None
    tokens = tuple(line.strip().encode() for line in text.splitlines() if line.strip())
    if not tokens:
        raise ConfigError(f"{path}: the query token file is empty")
    if any(len(t) < 16 for t in tokens):
        raise ConfigError(f"{path}: query tokens must be at least 16 characters "
                          "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")
    return tokens
