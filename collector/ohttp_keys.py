"""The gateway's HPKE keys on disk: generation, rotation with overlap, and the live key ring.

A key directory (setting ``ohttp_keys_dir``; `ldpt keys` manages it) holds one JSON file per
key, ``key-<id>.json``, mode 0600 in a 0700 directory::

    {"version": 1, "key_id": 7, "kem": "X25519", "kdf": "HKDF-SHA256", "aead": "AES-128-GCM",
     "private_key": "<64 hex>", "created": 1767225600, "retired": null, "expires": null}

A key is **active** (published in ``GET /.well-known/ohttp-gateway`` and accepted), **retired**
(``retired`` set, ``expires`` in the future: no longer published, still accepted, so envelopes
sealed to it before a rotation — waiting in device outboxes, or in a shuffler's pool — still
open), or **expired** (refused with the ``ohttp-key`` problem, and deleted by `ldpt keys
rotate`/`prune`). ``rotate`` makes a new active key under the next free key id and retires
the previous active ones with ``expires = now + overlap`` — as OHTTP gateways do (RFC 9458
§6.4: clients refetch configurations; the overlap covers what is in flight). A running
collector reloads the directory when it changes (checked every ``RELOAD_INTERVAL`` seconds),
so rotation needs no restart. Times are POSIX seconds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from client_sdk import ohttp
from client_sdk.files import atomic_write

from .config import ConfigError

KEY_FILE_VERSION = 1
KEY_GLOB = "key-*.json"
#: Default overlap of a rotation: how long a retired key still opens envelopes (s). Cover the
#: longest a sealed batch may wait before it reaches the collector: device outboxes keep
#: batches 7 days by default, and a key config cached by an SDK lives a day.
DEFAULT_OVERLAP = 8 * 86_400.0
RELOAD_INTERVAL = 2.0
#: The Cache-Control max-age of the published key configurations (s).
KEYS_MAX_AGE = 3600


@dataclasses.dataclass(frozen=True)
class KeyRecord:
    """One key file: the key and its lifecycle times."""

    key: ohttp.PrivateKey
    created: float
    retired: float | None = None
    expires: float | None = None
    path: Path | None = None

    @property
    def key_id(self) -> int:
        return self.key.config.key_id

    def state(self, now: float) -> str:
        if self.expires is not None and now >= self.expires:
            return "expired"
        return "retired" if self.retired is not None else "active"

    def to_json(self) -> dict[str, Any]:
        return {"version": KEY_FILE_VERSION, "key_id": self.key_id, "kem": "X25519",
                "kdf": "HKDF-SHA256", "aead": "AES-128-GCM", "private_key": self.key.private.hex(),
                "created": self.created, "retired": self.retired, "expires": self.expires}


def _file(directory: Path, key_id: int) -> Path:
    return directory / f"key-{key_id:03d}.json"


def read_key(path: Path, allow_insecure: bool = False) -> KeyRecord:
    """One key file; ConfigError naming the file and field for anything wrong with it."""
    if not allow_insecure and os.name == "posix":
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(f"{path}: a gateway key must not be readable by group or others "
                              f"(mode {stat.S_IMODE(mode):04o}); chmod 600 it")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read the key file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("version") != KEY_FILE_VERSION:
        raise ConfigError(f"{path}: not a version-{KEY_FILE_VERSION} gateway key file")
    if (doc.get("kem"), doc.get("kdf"), doc.get("aead")) != ("X25519", "HKDF-SHA256", "AES-128-GCM"):
        raise ConfigError(f"{path}: field kem/kdf/aead: only X25519, HKDF-SHA256, AES-128-GCM are supported")
    try:
        key = ohttp.PrivateKey.from_private(int(doc["key_id"]), bytes.fromhex(doc["private_key"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: field key_id/private_key is invalid ({exc})") from None

    def when(name: str) -> float | None:
        value = doc.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(f"{path}: field {name} must be POSIX seconds or null")
        return None if value is None else float(value)

    created = when("created")
    return KeyRecord(key, created if created is not None else 0.0, when("retired"), when("expires"), path)


def write_key(directory: Path, record: KeyRecord) -> Path:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = _file(directory, record.key_id)
    atomic_write(path, (json.dumps(record.to_json(), indent=1) + "\n").encode(), mode=0o600)
    return path


def load_keys(directory: Path, allow_insecure: bool = False) -> list[KeyRecord]:
    """Every key file of ``directory`` (none when it does not exist), by key id."""
    if not directory.is_dir():
        return []
    records = [read_key(p, allow_insecure) for p in sorted(directory.glob(KEY_GLOB))]
    ids = [r.key_id for r in records]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{directory}: two key files hold the same key id")
    return records


def _next_id(records: list[KeyRecord]) -> int:
    used = {r.key_id for r in records}
    start = (max((r.key_id for r in records if r.retired is None), default=-1) + 1) % 256
    for step in range(256):
        candidate = (start + step) % 256
        if candidate not in used:
            return candidate
    raise ConfigError("all 256 key ids are in use; run `ldpt keys prune` once retired keys expire")


def generate(directory: Path, now: float | None = None) -> KeyRecord:
    """A first active key; ConfigError if the directory already has one (use ``rotate``)."""
    now = time.time() if now is None else now
    records = load_keys(directory)
    if any(r.state(now) == "active" for r in records):
        raise ConfigError(f"{directory} already has an active key; `ldpt keys rotate` makes a new one")
    record = KeyRecord(ohttp.PrivateKey.generate(_next_id(records)), now)
    return dataclasses.replace(record, path=write_key(directory, record))


def rotate(directory: Path, overlap: float = DEFAULT_OVERLAP, now: float | None = None) -> KeyRecord:
    """A new active key; the previous active keys retire and expire after ``overlap`` seconds.

    The new key is written before any old one is retired, so a collector reloading in between
    publishes both rather than none; expired keys are deleted.
    """
    if overlap < 0:
        raise ConfigError("the overlap must be >= 0 seconds")
    now = time.time() if now is None else now
    records = load_keys(directory)
    new = KeyRecord(ohttp.PrivateKey.generate(_next_id([r for r in records if r.state(now) != "expired"])), now)
    for old in records:
        if old.state(now) == "expired":
            assert old.path is not None
            old.path.unlink(missing_ok=True)
    new = dataclasses.replace(new, path=write_key(directory, new))
    for old in records:
        if old.state(now) == "active":
            write_key(directory, dataclasses.replace(old, retired=now, expires=now + overlap))
    return new


def prune(directory: Path, now: float | None = None) -> list[int]:
    """Delete expired keys; returns their ids."""
    now = time.time() if now is None else now
    gone = []
    for record in load_keys(directory):
        if record.state(now) == "expired" and record.path is not None:
            record.path.unlink(missing_ok=True)
            gone.append(record.key_id)
    return gone


class KeyRing:
    """The keys a running gateway serves and accepts, reloaded when the directory changes."""

    def __init__(self, directory: Path | None, *, allow_insecure: bool = False,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.directory = directory
        self.allow_insecure = allow_insecure
        self.clock, self.monotonic = clock, monotonic
        self.records: list[KeyRecord] = []
        self._stamp: Any = None
        self._checked = -float("inf")
        self.reload_error: str | None = None
        if directory is not None:
            self._load()
            if not self.records:
                raise ConfigError(f"ohttp_keys_dir {directory}: no gateway key; create one with "
                                  f"`ldpt keys generate --dir {directory}`")

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def _listing(self) -> Any:
        assert self.directory is not None
        try:
            return tuple(sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size)
                                for p in self.directory.glob(KEY_GLOB)))
        except OSError:
            return None

    def _load(self) -> None:
        assert self.directory is not None
        stamp = self._listing()
        self.records = load_keys(self.directory, self.allow_insecure)
        self._stamp = stamp

    def refresh(self) -> None:
        """Reload if the key files changed (at most every RELOAD_INTERVAL s); a directory that
        fails to load keeps the keys already loaded (the error is kept in ``reload_error``)."""
        if self.directory is None:
            return
        now = self.monotonic()
        if now - self._checked < RELOAD_INTERVAL:
            return
        self._checked = now
        stamp = self._listing()
        if stamp == self._stamp:
            return
        try:
            self._load()
            self.reload_error = None
        except (ConfigError, OSError) as exc:
            self.reload_error = str(exc)

    def accepted(self) -> dict[int, ohttp.PrivateKey]:
        """Key id -> key, for the keys that still open envelopes (active and retired)."""
        self.refresh()
        now = self.clock()
        return {r.key_id: r.key for r in self.records if r.state(now) != "expired"}

    def published(self) -> bytes:
        """The ``application/ohttp-keys`` document: the active keys, newest first."""
        self.refresh()
        now = self.clock()
        active = sorted((r for r in self.records if r.state(now) == "active"), key=lambda r: -r.created)
        return ohttp.encode_key_configs(r.key.config for r in active)
