"""Client state on the device: the 32-byte secret, the opt-out marker and the privacy ledger.

A state directory holds (mode 0700)::

    secret          32 random bytes, mode 0600, created atomically (never overwritten)
    ledger.json     epsilon spent per metric (client_sdk.ledger), no true value
    ledger.lock     lock file shared by every process of the app (client_sdk.files)
    owner           "python": the SDK whose lock guards this directory (claim_directory)
    outbox/         randomised batches waiting for the collector (client_sdk.queue)
    opted-out       present after opt_out(): nothing is reported any more

Nothing here holds a true value. Cohorts (``client_sdk.hashing.derive_cohort``, for OLH and
RAPPOR alike), RAPPOR's permanent randomised response and the ledger's memoisation keys are
all derived from the secret with HMAC (docs/design.md, "Privacy rules of the house";
docs/math.md §11), so a value
reported every day costs no more than the longitudinal bound ε∞ (docs/math.md §10).

``MemoryState`` keeps the same things in memory: tests, and simulated fleets of clients.
``UnusableState`` stands for a directory that cannot persist the spend or the secret: a
client on it reports nothing (``open_state``; docs/privacy.md).
"""

from __future__ import annotations

import abc
import hashlib
import hmac
import os
import stat
import threading
import time
from typing import TYPE_CHECKING

from ._lazy import LazyLogger
from .errors import LedgerError, OptedOutError, StateError
from .files import OPEN_FLAGS, remove_stale_temps, temp_name
from .files import atomic_write as _atomic_write
from .files import fsync_dir as _fsync_dir
from .hashing import derive_cohort  # noqa: F401 - re-exported: cohorts for every protocol
from .ledger import Ledger, LedgerBase, MemoryLedger, read_ledger

if TYPE_CHECKING:
    from pathlib import Path

log = LazyLogger("client_sdk")  # logging loads with the first message (client_sdk._lazy)

SECRET_BYTES = 32
SECRET_FILE = "secret"
OPT_OUT_FILE = "opted-out"
OUTBOX_DIR = "outbox"
REGISTRY_CACHE_FILE = "registry.json"
#: A corrupt secret is renamed to this (plus a timestamp) and a new one is created.
CORRUPT_SECRET_PREFIX = "secret.corrupt-"
#: Temporary files older than this at start-up were left by a killed process (seconds).
STALE_TEMP_AGE = 600.0


# --- derivations from the secret -----------------------------------------------------------------

def ledger_key(secret: bytes) -> bytes:
    """Key of the ledger's memoisation digests (a sub-key, so the secret itself is never reused)."""
    return hmac.new(secret, b"ldpt/ledger-key", hashlib.sha256).digest()


def value_digest(key: bytes, fingerprint: str, value: str) -> str:
    """HMAC(key, fingerprint‖value), 128 bits hex: tells "a value seen before" without the value.

    The fingerprint is part of the message, so a metric whose parameters change starts a new
    memoisation set (a new PRR is a new ε∞ spend). Whoever holds the secret can test guesses
    against these digests — the state directory is as sensitive as the secret (docs/privacy.md).
    """
    msg = fingerprint.encode() + b"\x00" + value.encode("utf-8", "surrogatepass")
    return hmac.new(key, msg, hashlib.sha256).hexdigest()[:32]


# --- state objects ---------------------------------------------------------------------------------

class ClientState(abc.ABC):
    """What a client needs from the device: a secret, a ledger, an outbox, the opt-out flag."""

    @property
    @abc.abstractmethod
    def secret(self) -> bytes:
        """The client secret (OptedOutError after opt-out)."""

    @property
    @abc.abstractmethod
    def ledger(self) -> LedgerBase:
        """The privacy ledger."""

    @property
    def outbox_dir(self) -> Path | None:
        """Directory of the on-disk offline queue (None: keep retries in memory)."""
        return None

    @property
    @abc.abstractmethod
    def opted_out(self) -> bool:
        """Whether the user opted out."""

    @abc.abstractmethod
    def opt_out(self) -> None:
        """Delete the secret and the offline queue; report nothing from now on."""

    @abc.abstractmethod
    def opt_in(self) -> None:
        """Undo opt_out: a fresh secret (a fresh ε∞ spend) is created on next use."""


class MemoryState(ClientState):
    """State kept in memory: for tests and many simulated clients in one process (the demo)."""

    def __init__(self, secret: bytes | None = None, ledger: LedgerBase | None = None) -> None:
        if secret is not None and len(secret) != SECRET_BYTES:
            raise ValueError(f"a client secret is {SECRET_BYTES} bytes")
        self._secret = secret if secret is not None else os.urandom(SECRET_BYTES)
        self._ledger = ledger if ledger is not None else MemoryLedger()
        self._opted_out = False

    @property
    def secret(self) -> bytes:
        if self._opted_out or self._secret is None:
            raise OptedOutError("this client opted out; there is no secret")
        return self._secret

    @property
    def ledger(self) -> LedgerBase:
        return self._ledger

    @property
    def opted_out(self) -> bool:
        return self._opted_out

    def opt_out(self) -> None:
        self._opted_out = True
        self._secret = None
        self._ledger.forget_values()

    def opt_in(self) -> None:
        if self._opted_out:
            self._opted_out = False
            self._secret = os.urandom(SECRET_BYTES)


class FileState(ClientState):
    """State in a directory shared by every process of one app (see the module docstring)."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        from pathlib import Path  # here: not on the SDK's import

        self.path = Path(state_dir)
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"{self.path}: cannot create the state directory "
                             f"({exc.strerror or exc})") from None
        if not os.access(self.path, os.W_OK | os.X_OK):
            raise StateError(f"{self.path}: the state directory is not writable")
        claim_directory(self.path)
        self._secret: bytes | None = None
        self._lock = threading.Lock()
        remove_stale_temps(self.path, None, STALE_TEMP_AGE)   # writes a kill interrupted
        self._ledger = Ledger(self.path)

    @property
    def secret_path(self) -> Path:
        return self.path / SECRET_FILE

    @property
    def ledger(self) -> LedgerBase:
        return self._ledger

    @property
    def outbox_dir(self) -> Path:
        return self.path / OUTBOX_DIR

    @property
    def opted_out(self) -> bool:
        return (self.path / OPT_OUT_FILE).exists()

    @property
    def secret(self) -> bytes:
        if self._secret is not None:
            return self._secret
        with self._lock:
            if self._secret is None:
                if self.opted_out:
                    raise OptedOutError(f"{self.path}: the user opted out; there is no secret")
                self._secret = load_or_create_secret(self.secret_path)
            return self._secret

    def quarantine_secret(self) -> Path:
        """Move a corrupt secret aside (``secret.corrupt-<time>``); the next use creates a new one.

        A new secret is a new privacy spend: memoised responses and cohorts change, and the
        ledger charges every value reported from now on afresh (its totals are kept).
        """
        with self._lock:
            self._secret = None
            target = self.path / f"{CORRUPT_SECRET_PREFIX}{time.strftime('%Y%m%dT%H%M%S')}-{os.urandom(2).hex()}"
            os.replace(self.secret_path, target)
            _fsync_dir(self.path)
            return target

    def opt_out(self) -> None:
        with self._lock:
            _atomic_write(self.path / OPT_OUT_FILE, b"opted out: nothing is reported\n")
            self._secret = None
            for victim in (self.secret_path,):
                try:
                    victim.unlink()
                except FileNotFoundError:
                    pass
            import shutil  # here: shutil loads zlib, bz2 and lzma (2 ms of every start-up)

            shutil.rmtree(self.outbox_dir, ignore_errors=True)
            self._ledger.forget_values()
            _fsync_dir(self.path)

    def opt_in(self) -> None:
        with self._lock:
            try:
                (self.path / OPT_OUT_FILE).unlink()
            except FileNotFoundError:
                pass


def load_or_create_secret(path: Path) -> bytes:
    """Read the 32-byte secret, creating it atomically (mode 0600) when absent."""
    try:
        return _read_secret(path)
    except FileNotFoundError:
        pass
    create_once(path, os.urandom(SECRET_BYTES))  # the secret: never leaves this directory
    return _read_secret(path)


def create_once(path: Path, data: bytes) -> None:
    """Create ``path`` holding ``data`` (mode 0600) unless it exists; never overwrite it.

    Writes a private temporary file, fsyncs it and hard-links it into place: link(2) fails if
    the name exists, so two processes racing here end up with the same file and neither ever
    overwrites it.
    """
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | OPEN_FLAGS, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # another process won the race; its file stands
    except OSError:  # file systems without hard links (FAT, some network shares): rename is atomic too
        if not path.exists():
            os.replace(tmp, path)
    finally:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
    _fsync_dir(path.parent)


# --- which SDK owns a state directory ----------------------------------------------------------------

#: The file naming the SDK whose lock guards a state directory (docs/conformance.md, "The state
#: directory"): each SDK locks the ledger its own way (flock(2) on ledger.lock, a lock file
#: ledger.nodelock, fcntl(2) on ledger.jvmlock), and those locks do not exclude one another, so
#: two SDKs charging one ledger could both spend the same budget. The first SDK to open a
#: directory writes its name here; every other SDK refuses the directory.
OWNER_FILE = "owner"
OWNER = "python"
#: The lock file each SDK leaves in a directory it used before OWNER_FILE existed.
OWNER_LOCK_FILES = {"python": "ledger.lock", "jvm": "ledger.jvmlock"}


def claim_directory(path: Path, sdk: str = OWNER) -> None:
    """Make ``sdk`` the owner of the state directory ``path``, or StateError if another SDK is.

    A directory without an owner file is claimed (a directory another SDK used before owner
    files existed is recognised by that SDK's lock file and refused).
    """
    owner_path = path / OWNER_FILE
    if not owner_path.exists():
        others = [name for name, lock in OWNER_LOCK_FILES.items() if name != sdk and (path / lock).exists()]
        if others:
            _refuse(path, others[0], f"its lock file {OWNER_LOCK_FILES[others[0]]}")
        create_once(owner_path, f"{sdk}\n".encode())
    try:
        with open(owner_path, "rb") as f:
            owner = f.read(64).decode("utf-8", "replace").strip()
    except OSError as exc:
        raise StateError(f"{owner_path}: cannot read the state directory's owner "
                         f"({exc.strerror or exc})") from None
    if owner != sdk:
        _refuse(path, owner, f"its {OWNER_FILE} file")


def _refuse(path: Path, owner: str, evidence: str) -> None:
    raise StateError(f"{path}: the state directory belongs to the {owner!r} SDK ({evidence}); SDKs "
                     "lock the ledger differently, so two of them sharing one directory could "
                     "spend one budget twice — give each SDK its own state directory")


#: Appended to the corrupt-secret error for strict callers (non-strict clients move the file aside).
CORRUPT_SECRET_ADVICE = "; delete the file to start over (a new secret is a new privacy spend)"


def _read_secret(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | OPEN_FLAGS)
    try:
        info = os.fstat(fd)
        # POSIX only: Windows reports every file as 0o666 and has ACLs instead.
        if os.name == "posix" and info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            os.fchmod(fd, 0o600)  # tighten a secret someone made group/world readable
        data = os.read(fd, SECRET_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) != SECRET_BYTES:
        raise StateError(f"{path}: not a client secret ({len(data)} bytes, expected {SECRET_BYTES})"
                         f"{CORRUPT_SECRET_ADVICE}")
    return data


# --- opening a state directory without ever failing the app ------------------------------------------

class UnusableState(ClientState):
    """A state directory that cannot persist the privacy spend or hold the secret: report nothing.

    The ledger's promise (docs/privacy.md) rests on two things written to the directory: the
    spend (so a restart cannot spend the window's budget again) and the secret (so a memoised
    response is drawn once, not once per run). When either cannot be persisted, every run of
    the app would start from a clean slate, and restarts would compose without bound. So the
    client built on this state reports nothing — a budget it can prove (zero) — and says why
    (``TelemetryClient.disabled_reason``, ``stats()["disabled_state"]``, one log line).

    What can still be read is kept for display: the ledger's book (``ledger_snapshot()``) and
    the opt-out marker. Tests and ephemeral apps that want reports without a directory pass
    ``state=MemoryState()`` explicitly.
    """

    def __init__(self, path: Path | None, reason: str) -> None:
        self.path = path
        self.reason = reason
        accounts = {}
        if path is not None:
            try:
                accounts = read_ledger(path)
            except (LedgerError, OSError):
                accounts = {}
        self._ledger = MemoryLedger(accounts)
        try:
            self._opted_out = path is not None and (path / OPT_OUT_FILE).exists()
        except OSError:
            self._opted_out = False

    @property
    def secret(self) -> bytes:
        raise StateError(f"no client secret: {self.reason}")

    @property
    def ledger(self) -> LedgerBase:
        return self._ledger

    @property
    def opted_out(self) -> bool:
        return self._opted_out

    def opt_out(self) -> None:
        """Remember it in this process; write the marker too when the directory allows it."""
        self._opted_out = True
        self._ledger.forget_values()
        if self.path is not None:
            try:
                _atomic_write(self.path / OPT_OUT_FILE, b"opted out: nothing is reported\n")
            except OSError:
                pass

    def opt_in(self) -> None:
        self._opted_out = False


def open_state(state_dir: str | os.PathLike[str], *, strict: bool = False) -> ClientState:
    """``FileState(state_dir)``; when the directory cannot be used, an ``UnusableState``.

    A read-only or uncreatable directory must not crash the app (strict mode raises
    ``StateError``), and must not let the app report either: the spend of this run could not
    be persisted, so every restart would spend the budget again (UnusableState). The caller
    logs the reason once.
    """
    try:
        return FileState(state_dir)
    except (StateError, OSError) as exc:
        if strict:
            if isinstance(exc, StateError):
                raise
            raise StateError(f"{state_dir}: cannot open the state directory ({exc})") from None
        from pathlib import Path

        return unusable(Path(state_dir), str(exc))


def unusable(path: Path | None, problem: str) -> UnusableState:
    """The UnusableState of ``path``, its reason naming the problem and what to do."""
    return UnusableState(path, f"{problem}; the privacy spend and the client secret cannot be "
                               "persisted, so nothing is reported (make the state directory "
                               "writable and its secret a readable file, then restart the app)")
