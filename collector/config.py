"""Collector settings, declared once as data.

``SETTINGS`` lists every setting with its default, type and help; the same tuple feeds the
``ServeConfig`` defaults, the ``LDPT_<NAME>`` environment variables, the keys of a
``--config serve.toml`` file, `ldpt serve --help` and docs/operations.md (a test checks every
setting is documented). One precedence, highest first:

    command-line argument  >  LDPT_<NAME> environment variable  >  TOML file  >  default

Relative paths in a TOML file are relative to the file's directory.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from client_sdk.errors import LdptError
from collector.storage.base import BATCH_ID_MIN_DAYS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

log = logging.getLogger("ldpt.collector")


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting: name (LDPT_<NAME> in the environment, the key in TOML), default, help.

    ``kind`` is the value type (that of the default unless the default is None); ``path``
    settings are resolved against a TOML file's directory; ``zero`` allows 0 for numbers.
    """

    name: str
    default: Any
    help: str
    kind: type | None = None
    path: bool = False
    zero: bool = False

    @property
    def type(self) -> type:
        return self.kind or type(self.default)


SETTINGS: tuple[Setting, ...] = (
    # --- what to serve, where ---------------------------------------------------------------------
    Setting("metrics_file", None, "Metric registry (TOML) shared with the SDKs.", str, path=True),
    Setting("db", "ldpt.sqlite", "SQLite store (created if missing); ignored with postgres_dsn.",
            path=True),
    Setting("postgres_dsn", None, "PostgreSQL DSN instead of SQLite (keep it out of `ps`: set "
            "LDPT_POSTGRES_DSN or put it in the TOML file).", str),
    Setting("host", "127.0.0.1", "Address to listen on."),
    Setting("port", 8080, "Port (0 picks a free one; the listening line says which).", zero=True),
    Setting("workers", 1, "Worker processes sharing the port (SO_REUSEPORT) and the store."),
    Setting("window", "day", "Time window of the sketches (UTC receive time): day or hour."),
    Setting("admin_port", None, "Serve /healthz, /readyz and /metrics also on this port, in a "
            "thread of each worker outside the ingest path (0 picks one), so monitoring answers "
            "under overload.", int, zero=True),
    Setting("admin_host", "127.0.0.1", "Address the admin port listens on: loopback unless set, "
            "whatever `host` is (the admin routes need no token; open it deliberately, e.g. "
            "0.0.0.0 for Kubernetes probes, behind a firewall)."),
    Setting("tls_cert", None, "PEM certificate (chain) to serve HTTPS; needs tls_key.", str, path=True),
    Setting("tls_key", None, "PEM private key of tls_cert.", str, path=True),
    # --- query API --------------------------------------------------------------------------------
    Setting("query_token_file", None, "Bearer token(s) of the estimates API, one per line "
            "(without it the query API is disabled). Must not be readable by group or others.",
            str, path=True),
    Setting("allow_insecure_token_file", False, "Start even if a token or key file is readable "
            "by group or others (refused otherwise, as ssh refuses such keys)."),
    Setting("min_reports", 0, "Refuse estimates for windows with fewer reports than this.", zero=True),
    Setting("access_log", False, "Log every request, without query values (off: client addresses "
            "are not logged)."),
    # --- retention --------------------------------------------------------------------------------
    Setting("retention_days", 0, "Delete windows older than this many days (checked every "
            "maintain_interval); 0 keeps everything.", zero=True),
    Setting("batch_id_days", 14, "Keep the batch ids that deduplicate SDK retries this many days "
            "(at least 8: the SDK retries a batch for up to 7 days), then delete them (checked every "
            "maintain_interval); 0 keeps them forever.", zero=True),
    # --- connections ------------------------------------------------------------------------------
    Setting("header_timeout", 10.0,
            "Seconds a connection may take to send a request's headers (from its first byte, or "
            "from connecting); slower ones are closed (408), so dripping headers cannot hold sockets."),
    Setting("keepalive_timeout", 15.0,
            "Seconds an idle keep-alive connection is kept open between requests."),
    Setting("max_connections", 1000,
            "Open connections per worker; beyond it the connection nearest its deadline that is "
            "not being served is closed (503 when all are busy). Keep it under `ulimit -n`."),
    Setting("body_read_timeout", 30.0,
            "Seconds a request body may take to arrive once its headers are in; slower bodies "
            "get 408 and free their in-flight allowance (no slow client can hold ingestion)."),
    Setting("max_heavy_queries", 2,
            "Estimates of large sketches (>= 65,536 cells) or of every row (full=true) computed "
            "at once per worker; more get 503 too-many-queries with Retry-After, so queries "
            "cannot take the memory and cores ingestion needs."),
    # --- poisoning bounds (docs/security.md) ------------------------------------------------------
    Setting("max_segments", 1000, "Segments (combinations of public dimension values) kept per "
            "metric and window; the reports of further segments count in their metric's total but in no "
            "segment (never refused)."),
    Setting("max_reports_per_metric", 8,
            "Reports of one metric in one batch, in units of the metric's reports_per_window "
            "(an honest device sends that many per window); more is a 422 too-many-reports. "
            "Relays are exempt."),
    Setting("rate_limit", 2.0, "Batches per second per source address (token bucket, per "
            "worker); beyond it 429 rate-limited with Retry-After. Relays are exempt."),
    Setting("rate_limit_burst", 60.0, "Batches a source address may send at once before "
            "rate_limit applies."),
    Setting("trusted_proxies", "", "Comma-separated addresses/networks of reverse proxies whose "
            "X-Forwarded-For names the source address."),
    Setting("relay_sources", "127.0.0.1,::1", "Comma-separated addresses/networks that batch "
            "many devices' reports (relays, `ldpt simulate --url`, load tests): exempt from the "
            "per-batch and rate limits. Empty: none."),
    Setting("cors_origins", "", "Comma-separated web origins (scheme://host[:port], or *) whose "
            "pages may POST /v1/reports and GET /v1/registry from a browser (the JavaScript SDK); "
            "the query API never answers other origins. Empty: none."),
    Setting("ingest_key_file", None, "If set, batches need Authorization: Bearer <key> with a "
            "key from this file (one per line), for apps that can hold a shared key.", str,
            path=True),
    # --- ingestion queue --------------------------------------------------------------------------
    Setting("ohttp_keys_dir", None, "Directory of the sealed-report gateway's HPKE keys "
            "(`ldpt keys generate --dir DIR`): with it the collector is an Oblivious HTTP gateway "
            "at /.well-known/ohttp-gateway (docs/operations.md, \"Sealed reports\").", str, path=True),
    Setting("shuffler_token_file", None, "Bearer token(s) of the shufflers (`ldpt shuffle`) allowed to "
            "POST /v1/shuffled-batches, one per line (without it that endpoint is disabled). Must not "
            "be readable by group or others.", str, path=True),
    Setting("max_shuffled_batch_bytes", 16 << 20,
            "Largest shuffled batch a shuffler may forward (bytes of the request body, at most "
            "max_inflight_bytes); larger gets 413. Keep it at least the shuffler's max_forward_bytes."),
    Setting("max_shuffled_envelopes", 100_000,
            "Most envelopes in one shuffled batch; more is a 422 invalid-batch."),
    Setting("max_body_bytes", 1 << 20,
            "Largest request body accepted; larger bodies get 413."),
    Setting("max_reports_per_batch", 10_000,
            "Most reports one batch may carry; more is a 422 invalid-batch."),
    Setting("max_inflight_bytes", 64 << 20,
            "Bytes of request bodies held at once (charged as they arrive, until decoded); a "
            "body that would exceed it gets 503 + Retry-After. Bounds memory."),
    Setting("max_inflight_bytes_per_source", 4 << 20,
            "Share of max_inflight_bytes one source address may hold at once (relays are "
            "exempt), so slow or unfinished bodies from a few addresses cannot fill it; at "
            "least max_body_bytes."),
    Setting("queue_max_batches", 4096,
            "Validated batches waiting for the committer; above it 503 + Retry-After."),
    Setting("queue_max_reports", 1_000_000,
            "Reports in the batches waiting for the committer; above it 503 + Retry-After."),
    Setting("group_max_batches", 2048,
            "Most batches committed in one transaction (group commit)."),
    Setting("shutdown_timeout", 30.0,
            "Seconds a graceful shutdown waits for in-flight requests before closing them."),
    Setting("maintain_interval", 30.0,
            "Seconds between store housekeeping runs (PostgreSQL compaction, retention)."),
    Setting("sqlite_synchronous", "FULL",
            "SQLite PRAGMA synchronous for the collector's commits (FULL = durable per commit)."),
)
SETTING_NAMES = tuple(s.name for s in SETTINGS)
SETTINGS_BY_NAME = {s.name: s for s in SETTINGS}


class ConfigError(LdptError):
    """A collector setting or command-line argument is invalid (``setting``: which one, if known)."""

    status = 400
    type = "invalid-config"

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


@dataclasses.dataclass(frozen=True)
class ServeConfig:
    """Everything `ldpt serve` needs; every field is a ``SETTINGS`` entry (same defaults,
    checked by a test)."""

    metrics_file: Path
    db: Path | None = Path("ldpt.sqlite")
    postgres_dsn: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    window: str = "day"
    admin_port: int | None = None
    admin_host: str = "127.0.0.1"
    tls_cert: Path | None = None
    tls_key: Path | None = None
    query_token_file: Path | None = None
    allow_insecure_token_file: bool = False
    min_reports: int = 0
    access_log: bool = False
    retention_days: int = 0
    batch_id_days: int = 14
    header_timeout: float = 10.0
    keepalive_timeout: float = 15.0
    max_connections: int = 1000
    body_read_timeout: float = 30.0
    max_segments: int = 1000
    max_heavy_queries: int = 2
    max_reports_per_metric: int = 8
    rate_limit: float = 2.0
    rate_limit_burst: float = 60.0
    trusted_proxies: str = ""
    relay_sources: str = "127.0.0.1,::1"
    cors_origins: str = ""
    ingest_key_file: Path | None = None
    ohttp_keys_dir: Path | None = None
    shuffler_token_file: Path | None = None
    max_shuffled_batch_bytes: int = 16 << 20
    max_shuffled_envelopes: int = 100_000
    max_body_bytes: int = 1 << 20
    max_reports_per_batch: int = 10_000
    max_inflight_bytes: int = 64 << 20
    max_inflight_bytes_per_source: int = 4 << 20
    queue_max_batches: int = 4096
    queue_max_reports: int = 1_000_000
    group_max_batches: int = 2048
    shutdown_timeout: float = 30.0
    maintain_interval: float = 30.0
    sqlite_synchronous: str = "FULL"

    def __post_init__(self) -> None:
        if self.window not in ("day", "hour"):
            raise ConfigError(f"window {self.window!r}: use day or hour", setting="window")
        if self.sqlite_synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigError(f"sqlite_synchronous {self.sqlite_synchronous!r}: use OFF, NORMAL, "
                              "FULL or EXTRA", setting="sqlite_synchronous")
        for name in ("port", "admin_port"):
            port = getattr(self, name)
            if port is not None and not 0 <= port <= 65535:
                raise ConfigError(f"{name} must be a TCP port in 0..65535, got {port}", setting=name)
        if 0 < self.batch_id_days < BATCH_ID_MIN_DAYS:
            raise ConfigError(f"batch_id_days {self.batch_id_days} is below {BATCH_ID_MIN_DAYS}: SDKs retry "
                              "a batch for up to 7 days, and a retry whose id is gone is counted twice",
                              setting="batch_id_days")
        if self.max_inflight_bytes_per_source < self.max_body_bytes:
            raise ConfigError(f"max_inflight_bytes_per_source ({self.max_inflight_bytes_per_source}) "
                              f"must be at least max_body_bytes ({self.max_body_bytes}): a largest "
                              "batch could never be accepted", setting="max_inflight_bytes_per_source")
        check_tls_and_numbers(self, SETTINGS)

    @property
    def postgres(self) -> str | None:
        return self.postgres_dsn

    @property
    def store_description(self) -> str:
        return "postgres" if self.postgres_dsn else f"sqlite:{self.db}"


def check_tls_and_numbers(config: Any, settings: tuple[Setting, ...]) -> None:
    """The checks every service's config shares: tls_cert and tls_key together, and each numeric
    setting positive (non-negative where ``zero``) and finite; ConfigError naming the setting."""
    if (config.tls_cert is None) != (config.tls_key is None):
        raise ConfigError("tls_cert and tls_key go together: give both or neither")
    for s in settings:
        value = getattr(config, s.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        low_ok = value >= 0 if s.zero else value > 0
        if not (low_ok and value < math.inf):  # also refuses nan
            raise ConfigError(f"setting {s.name} must be a {'non-negative' if s.zero else 'positive'} "
                              f"finite number, got {value}", setting=s.name)


def _coerce(setting: Setting, raw: Any, where: str) -> Any:
    """A value from the environment (text) or TOML (typed) as the setting's type."""
    kind = setting.type
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
    elif isinstance(raw, str) or (kind is float and isinstance(raw, int) and not isinstance(raw, bool)) \
            or (type(raw) is kind):
        try:
            return kind(raw) if kind is not int or not isinstance(raw, str) else int(raw.replace("_", ""))
        except ValueError:
            pass
    raise ConfigError(f"{where}: {raw!r} is not a valid {kind.__name__} for setting {setting.name}")


def settings_from_env(environ: Mapping[str, str] | None = None, settings: tuple[Setting, ...] = SETTINGS,
                      prefix: str = "LDPT_") -> dict[str, Any]:
    """Settings given as <prefix><NAME> environment variables (empty ones are ignored); ``settings``
    and ``prefix``: whose (the collector's by default; `ldpt shuffle` passes its own, LDPT_SHUFFLE_)."""
    env = os.environ if environ is None else environ
    out = {}
    for s in settings:
        raw = env.get(f"{prefix}{s.name.upper()}")
        # empty means unset, except for lists of networks, where it is the empty list
        if raw is not None and (raw != "" or s.default == "" or s.name == "relay_sources"):
            out[s.name] = _coerce(s, raw, f"{prefix}{s.name.upper()}")
    return out


def settings_from_toml(path: str | Path, settings: tuple[Setting, ...] = SETTINGS) -> dict[str, Any]:
    """Settings from a TOML file of ``name = value`` lines (the setting names, lower case)."""
    by_name = {s.name: s for s in settings}
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a TOML file ({exc})") from None
    out = {}
    for key, raw in doc.items():
        setting = by_name.get(key)
        if setting is None:
            from client_sdk.registry import did_you_mean

            guess = did_you_mean(key, tuple(by_name))
            raise ConfigError(f"{path}: unknown setting {key!r}" + (f"; did you mean {guess!r}?" if guess else
                                                                    f" (known: {', '.join(by_name)})"))
        value = _coerce(setting, raw, f"{path}: {key}")
        if setting.path and isinstance(value, str):
            value = str(path.parent / value)
        out[key] = value
    return out


def make_config(metrics_file: str | Path | None = None, environ: Mapping[str, str] | None = None,
                toml: str | Path | None = None, check_files: bool = False, **arguments: Any) -> ServeConfig:
    """Build a ServeConfig: arguments > LDPT_* variables > TOML file > defaults. ``check_files``
    (`ldpt serve`): a file the TOML names that does not exist is an error naming file and key."""
    values = {s.name: s.default for s in SETTINGS}
    source: dict[str, str] = {}  # where a setting's value came from, to name it in errors
    from_toml = settings_from_toml(toml) if toml is not None else {}
    values.update(from_toml)
    source.update(dict.fromkeys(from_toml, str(toml)))
    values.update(from_env := settings_from_env(environ))
    source.update({name: f"LDPT_{name.upper()}" for name in from_env})
    if metrics_file is not None:
        arguments["metrics_file"] = metrics_file
    if "postgres" in arguments:  # the flag's name
        arguments["postgres_dsn"] = arguments.pop("postgres")
    unknown = set(arguments) - set(SETTING_NAMES)
    if unknown:
        raise ConfigError(f"unknown setting {sorted(unknown)[0]!r}")
    values.update({k: v for k, v in arguments.items() if v is not None})
    if values["metrics_file"] is None:
        raise ConfigError("no metric registry: give --metrics FILE (or metrics_file in the "
                          "config file, or LDPT_METRICS_FILE)")
    if values["postgres_dsn"]:
        values["db"] = None
    for s in SETTINGS:
        if s.path and values[s.name] is not None:
            values[s.name] = Path(values[s.name])
        if arguments.get(s.name) is not None:
            source.pop(s.name, None)  # a command-line value: click names the option itself
    if toml is not None and values["postgres_dsn"] and values["postgres_dsn"] == from_toml.get("postgres_dsn") \
            and dsn_has_password(values["postgres_dsn"]):
        # the DSN moved out of `ps` into this file must not be readable by everyone instead
        check_private(Path(toml), values["allow_insecure_token_file"], "config",
                      " (its postgres_dsn holds a password)")
    try:
        config = ServeConfig(**values)
    except ConfigError as exc:
        if exc.setting in source:
            raise ConfigError(f"{source[exc.setting]}: {exc}", setting=exc.setting) from None
        raise
    if toml is not None and check_files:  # a file the collector reads, named by the config file (not overridden)
        for name, raw in from_toml.items():
            setting = SETTINGS_BY_NAME[name]
            if setting.path and name != "db" and source.get(name) == str(toml) and not Path(raw).is_file():
                raise ConfigError(f"{toml}: {name}: no such file {raw} (a relative path is relative to the "
                                  "config file's directory)", setting=name)
    return config


def dsn_has_password(dsn: str) -> bool:
    """Whether a PostgreSQL DSN (URL or ``key=value`` form) carries a password."""
    try:
        if urlsplit(dsn).password:
            return True
    except ValueError:  # not a URL (e.g. a bracket in a key=value DSN)
        pass
    return re.search(r"(^|[\s?&])password\s*=", dsn) is not None


def check_private(path: Path, allow_insecure: bool, what: str, why: str = "") -> None:
    """Refuse (or, when allowed, warn about) a secret file readable by group or others."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # reading it reports the error
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        message = (f"{path}: the {what} file{why} is readable by group or others (mode "
                   f"{stat.S_IMODE(mode):04o}); run `chmod 600 {path}`")
        if not allow_insecure:
            raise ConfigError(message + " (or pass --allow-insecure-token-file)")
        log.warning("%s", message)


def read_tokens(path: Path | None, *, what: str = "query token",
                allow_insecure: bool = True) -> tuple[bytes, ...]:
    """Tokens, one per line (several allow rotation); empty tuple = none configured (for query
    tokens: the query API is disabled). ``allow_insecure=False`` refuses a file others can read."""
    if path is None:
        return ()
    check_private(Path(path), allow_insecure, what)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what} file ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: the {what} file is not UTF-8 text") from None
    tokens = tuple(line.strip().encode() for line in text.splitlines() if line.strip())
    if not tokens:
        raise ConfigError(f"{path}: the {what} file is empty")
    if any(len(t) < 16 for t in tokens):
        raise ConfigError(f"{path}: {what}s must be at least 16 characters "
                          "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")
    return tokens
