"""The privacy ledger: the per-user budget book of the device (docs/privacy.md).

Per metric it records the epsilon spent in the current window (a UTC day) and over the
client's lifetime, and refuses a report that would go beyond the registry's
``reports_per_window`` (default 1) or its optional ``lifetime_epsilon``. A refused report is
counted and never sent.

What a report costs (docs/math.md §10):

- a protocol without memoisation (rr, grr, oue, ...): ε per report, in the window and over
  the lifetime — T reports compose to T·ε;
- a memoised protocol (RAPPOR: the permanent randomised response is a deterministic function
  of secret, metric and value): in the window, what its reports there reveal together — ε₁ per
  report where that composes (a symmetric memo, one report per window), else the window charges
  C(k) of k reports (client_sdk.window_charge: r reports sharing a GRR memo reveal more
  than r·ε₁); and ε∞ over the lifetime the
  first time a *distinct* value is reported — any number of reports of one value cost at most
  ε∞, so the lifetime spend is (number of distinct values) × ε∞. Distinct values are
  recognised by a keyed digest HMAC(secret, fingerprint‖value) (client_sdk.state), never by
  the value itself.

Device-wide caps (the registry's ``[device]`` table; sequential composition adds the
budgets of different metrics): a report is also refused when the sum over *all* metrics of
the epsilon charged in the current window, or of the lifetime charges, would exceed
``epsilon_per_window`` or ``lifetime_epsilon``. The check runs inside the same locked
read-modify-write as the per-metric limits, so it holds across processes.

Clock errors: the ledger's windows are UTC days of the device's wall clock, which anyone able
to set the clock controls. The book therefore keeps ONE current window for the device and lets
the device's elapsed clock (a boot or monotonic clock, which never runs faster than real time)
decide how fast new windows may open: at most two in any 24 hours of real time, plus one per
new elapsed-clock epoch (a reboot, a process without a boot clock). A charge dated before the
window counts in it, or, more than ``MAX_WINDOW_AHEAD_DAYS`` before, re-dates it with its
spend kept (client_sdk.device_clock; docs/privacy.md, "Clock errors").

The file ``ledger.json`` holds no true value. Every update is a read-modify-write under an
exclusive lock on ``ledger.lock`` (flock(2), or msvcrt.locking on Windows: client_sdk.files),
written by write-temp-fsync-rename, so several processes sharing the state directory never
overspend and a crash never tears the file (a killed write's temporary file is removed when
the ledger is next opened).
The SDK charges the ledger on its worker, once per batch and before the batch is written to
the outbox or sent: a report is either charged and (eventually) sent, or refused and never
sent. A crash between the charge and the send errs on the safe side (spent, not sent).
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import functools
import math
import os
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .device_clock import (
    MAX_WINDOW_AHEAD_DAYS,  # noqa: F401 - re-exported (the ledger's rule)
    DeviceClock,
    ElapsedClock,
    Move,
    Reading,
    place,
    system_elapsed,
)
from .errors import LedgerError
from .files import atomic_write, flocked, remove_stale_temps
from .window_charge import WindowCharges, next_charge

if TYPE_CHECKING:
    from pathlib import Path

LEDGER_FILE = "ledger.json"
LOCK_FILE = "ledger.lock"
LEDGER_FORMAT = "ldpt-ledger"
LEDGER_VERSION = 2   # 2: the device clock state (``clock``); version-1 files are read
#: Relative slack when comparing spends with a budget: realised epsilons are quantised floats.
BUDGET_SLACK = 1e-9
SECONDS_PER_DAY = 86_400
#: The last day a window can name (9999-12-31): a wall clock beyond it charges that day.
LAST_DAY = 2_932_896
#: Charges applied between cooperative GIL releases: the worker never holds the interpreter
#: for long stretches, so an app thread calling report() waits behind it only briefly.
YIELD_EVERY = 16


def yield_gil() -> None:
    """Let other threads run (the app's): time.sleep(0) releases the GIL."""
    time.sleep(0)



class Refusal(str, enum.Enum):
    """Why a report was refused (never sent)."""

    WINDOW = "window"       # reports_per_window already reached in this window
    LIFETIME = "lifetime"   # the lifetime epsilon budget would be exceeded
    DEVICE_WINDOW = "device_window"       # the device's epsilon_per_window would be exceeded
    DEVICE_LIFETIME = "device_lifetime"   # the device's lifetime_epsilon would be exceeded


def day_of(timestamp: float) -> int:
    """UTC day number (days since 1970-01-01) of a POSIX timestamp: the ledger's window.

    Any reading maps to a day a window can name: before 1970 (or not a number) is day 0,
    after 9999 the last day — the clock rule then treats it as any other wrong clock.
    """
    if not timestamp >= 0:          # negative or NaN
        return 0
    if timestamp >= (LAST_DAY + 1) * SECONDS_PER_DAY:
        return LAST_DAY
    return int(timestamp // SECONDS_PER_DAY)


@functools.lru_cache(maxsize=16)
def window_name(day: int) -> str:
    """The window as shown to users and in the file: YYYY-MM-DD (UTC)."""
    import datetime as dt  # here: datetime and json load on first use, not on the SDK's import

    return (dt.date(1970, 1, 1) + dt.timedelta(days=day)).isoformat()


class Charge(NamedTuple):
    """One report asking to be charged: what it costs and the limits that apply.

    A NamedTuple, not a dataclass: one is built on the app's thread for every report.
    """

    metric: str
    fingerprint: str
    day: int                                # UTC day of the report (the window)
    epsilon: float                          # ε per report (ε₁ for memoised protocols)
    epsilon_longitudinal: float | None      # ε∞ when the protocol is memoised, else None
    digest: str | None                      # keyed digest of the value (memoised protocols)
    reports_per_window: int = 1
    lifetime_budget: float | None = None
    device_window_budget: float | None = None     # [device] epsilon_per_window
    device_lifetime_budget: float | None = None   # [device] lifetime_epsilon
    window_charges: WindowCharges | None = None   # memoised, r reports > r·ε₁: C(k) (window_charge)

    @property
    def memoised(self) -> bool:
        return self.epsilon_longitudinal is not None


@dataclasses.dataclass
class MetricAccount:
    """What one metric has spent on this device."""

    window: str                             # current window, YYYY-MM-DD
    window_reports: int = 0
    window_epsilon: float = 0.0
    lifetime_reports: int = 0
    lifetime_epsilon: float = 0.0
    refused_window: int = 0                 # refusals ever, by reason
    refused_lifetime: int = 0
    refused_device_window: int = 0          # refused by the [device] caps
    refused_device_lifetime: int = 0
    fingerprint: str = ""                   # parameters of the last charge
    epsilon_per_report: float = 0.0
    epsilon_longitudinal: float | None = None
    reports_per_window: int = 1
    lifetime_budget: float | None = None
    memo: dict[str, set[str]] = dataclasses.field(default_factory=dict)  # fingerprint -> digests
    previous_window: str = ""               # the window before ``window`` and its spend: a re-date
    previous_reports: int = 0               # back onto that day adds them (the clock returned to
    previous_epsilon: float = 0.0           # a day it had spent in: _redate)

    @property
    def distinct_values(self) -> int:
        """Distinct values charged at ε∞ (memoised protocols), over all fingerprints."""
        return sum(len(s) for s in self.memo.values())

    def copy(self) -> MetricAccount:
        return dataclasses.replace(self, memo={k: set(v) for k, v in self.memo.items()})

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["memo"] = {fp: sorted(d) for fp, d in self.memo.items()}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MetricAccount:
        """Parse one account; ValueError when a field has the wrong type (an edited or foreign file)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in fields}
        kwargs["memo"] = {fp: set(d) for fp, d in dict(data.get("memo") or {}).items()}
        account = cls(**kwargs)
        _check_types(account)
        return account


_COUNT_FIELDS = ("window_reports", "lifetime_reports", "refused_window", "refused_lifetime", "reports_per_window",
                 "refused_device_window", "refused_device_lifetime", "previous_reports")
_EPSILON_FIELDS = ("window_epsilon", "lifetime_epsilon", "epsilon_per_report", "previous_epsilon")
_OPTIONAL_EPSILON_FIELDS = ("epsilon_longitudinal", "lifetime_budget")


def _check_types(account: MetricAccount) -> None:
    """The budget arithmetic only ever sees ints, finite floats and strings where it expects them."""
    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    bad = [name for name in _COUNT_FIELDS
           if not isinstance(getattr(account, name), int) or isinstance(getattr(account, name), bool)]
    bad += [name for name in _EPSILON_FIELDS if not number(getattr(account, name))]
    bad += [name for name in _OPTIONAL_EPSILON_FIELDS
            if getattr(account, name) is not None and not number(getattr(account, name))]
    bad += [name for name in ("window", "fingerprint", "previous_window")
            if not isinstance(getattr(account, name), str)]
    if not all(isinstance(fp, str) and all(isinstance(d, str) for d in digests)
               for fp, digests in account.memo.items()):
        bad.append("memo")
    if bad:
        raise ValueError(f"field(s) {', '.join(bad)} have the wrong type")


class Book(dict[str, MetricAccount]):
    """Every metric's account (a dict, metric -> MetricAccount) and the device's clock state.

    ``clock`` holds the device's current window and what the elapsed-time rule needs
    (client_sdk.device_clock); every charge counts in ``clock.window``.
    """

    def __init__(self, accounts: Mapping[str, MetricAccount] | None = None,
                 clock: DeviceClock | None = None) -> None:
        super().__init__(accounts or {})
        self.clock = clock if clock is not None else DeviceClock()

    def copy(self) -> Book:   # type: ignore[override]
        """A deep copy: accounts and clock."""
        return Book({k: v.copy() for k, v in self.items()}, self.clock.copy())


def as_book(accounts: Mapping[str, MetricAccount]) -> Book:
    """``accounts`` itself when it is a Book; else a Book over copies of them with a new clock
    (a book written before the clock rule: docs/conformance.md)."""
    if isinstance(accounts, Book):
        return accounts
    return Book({k: v.copy() for k, v in accounts.items()})


def _roll(account: MetricAccount, window: str) -> None:
    """Start a new window when the charge is later; a late charge counts in the current one.

    The window left and its spend are remembered (``previous_*``): a re-date back onto that
    day adds them (the spend made there binds when the clock returns to it).
    """
    if window > account.window:
        account.previous_window = account.window
        account.previous_reports, account.previous_epsilon = account.window_reports, account.window_epsilon
        account.window = window
        account.window_reports = 0
        account.window_epsilon = 0.0


def _new_account(charge: Charge, window: str) -> MetricAccount:
    return MetricAccount(window=window, fingerprint=charge.fingerprint,
                         epsilon_per_report=charge.epsilon,
                         epsilon_longitudinal=charge.epsilon_longitudinal,
                         reports_per_window=charge.reports_per_window,
                         lifetime_budget=charge.lifetime_budget)


def lifetime_cost(account: MetricAccount | None, charge: Charge) -> float:
    """Lifetime epsilon this report adds: ε, or ε∞ for a value not seen before (memoised)."""
    if not charge.memoised:
        return charge.epsilon
    seen = account is not None and charge.digest in account.memo.get(charge.fingerprint, ())
    return 0.0 if seen else float(charge.epsilon_longitudinal)  # type: ignore[arg-type]


def window_cost(account: MetricAccount | None, charge: Charge) -> float:
    """Window epsilon this report adds: ε, or with ``window_charges`` what brings the window's
    spend of n reports to C(n + 1) (client_sdk.window_charge.next_charge)."""
    if charge.window_charges is None:
        return charge.epsilon
    if account is None or window_name(charge.day) > account.window:
        return next_charge(charge.window_charges, charge.epsilon, 0, 0.0)
    return next_charge(charge.window_charges, charge.epsilon, account.window_reports, account.window_epsilon)


def device_totals(accounts: Mapping[str, MetricAccount], window: str) -> tuple[float, float]:
    """(epsilon charged in ``window``, lifetime epsilon) summed over every metric of the device."""
    in_window = sum(a.window_epsilon for a in accounts.values() if a.window == window)
    return in_window, sum(a.lifetime_epsilon for a in accounts.values())


def _redate(book: Book, day: int) -> None:
    """The window was re-dated back to ``day`` (the clock was set back): every account of a
    later window moves there with its spend, plus the spend it had made on that very day."""
    window = window_name(day)
    for account in book.values():
        if account.window > window:
            if account.previous_window == window:
                account.window_reports += account.previous_reports
                account.window_epsilon += account.previous_epsilon
            account.window = window
            account.previous_window, account.previous_reports, account.previous_epsilon = "", 0, 0.0


def _resume(book: Book, left: int, day: int) -> None:
    """Forward onto the day a re-date left: the accounts of the window continue there."""
    window, target = window_name(left), window_name(day)
    for account in book.values():
        if account.window == window:
            account.window = target


def place_charge(book: Book, charge: Charge, reading: Reading, may_open: bool = True) -> Charge:
    """The charge re-dated to the window it counts in (the device clock rule, which may
    open, hold, re-date or resume the book's window: client_sdk.device_clock.place)."""
    before = book.clock.window
    day, move = place(book.clock, charge.day, reading, may_open)
    if move is Move.REDATE:
        _redate(book, day)
    elif move is Move.RESUME:
        _resume(book, before, day)  # type: ignore[arg-type]
    return charge if day == charge.day else charge._replace(day=day)


def decide_device(accounts: Mapping[str, MetricAccount], charge: Charge) -> Refusal | None:
    """Whether ``charge`` fits the device-wide caps (pure; None means it fits)."""
    if charge.device_window_budget is None and charge.device_lifetime_budget is None:
        return None
    window_spent, lifetime_spent = device_totals(accounts, window_name(charge.day))
    if charge.device_window_budget is not None \
            and window_spent + window_cost(accounts.get(charge.metric), charge) \
            > charge.device_window_budget * (1 + BUDGET_SLACK):
        return Refusal.DEVICE_WINDOW
    if charge.device_lifetime_budget is not None:
        cost = lifetime_cost(accounts.get(charge.metric), charge)
        if lifetime_spent + cost > charge.device_lifetime_budget * (1 + BUDGET_SLACK):
            return Refusal.DEVICE_LIFETIME
    return None


def decide(account: MetricAccount | None, charge: Charge) -> Refusal | None:
    """Whether ``charge`` fits the budget of ``account`` (pure; None means it fits)."""
    window = window_name(charge.day)
    in_window = 0 if account is None or window > account.window else account.window_reports
    if in_window + 1 > charge.reports_per_window:
        return Refusal.WINDOW
    if charge.lifetime_budget is not None:
        spent = 0.0 if account is None else account.lifetime_epsilon
        if spent + lifetime_cost(account, charge) > charge.lifetime_budget * (1 + BUDGET_SLACK):
            return Refusal.LIFETIME
    return None


def apply(book: Book, charge: Charge, reading: Reading) -> Refusal | None:
    """Charge ``book`` in place if the report fits; otherwise count the refusal.

    ``reading`` is the device's elapsed clock read when the book is updated (under its lock:
    client_sdk.device_clock); the charge's own day is the wall clock's, read at report().
    """
    charge = place_charge(book, charge, reading)
    window = window_name(charge.day)
    account = book.get(charge.metric)
    refusal = decide(account, charge) or decide_device(book, charge)
    if account is None:
        account = book[charge.metric] = _new_account(charge, window)
    _roll(account, window)
    if refusal is not None:
        count_refusal(account, refusal)
        return refusal
    cost = lifetime_cost(account, charge)
    account.window_epsilon += window_cost(account, charge)
    account.window_reports += 1
    account.lifetime_reports += 1
    account.lifetime_epsilon += cost
    if charge.memoised and cost > 0:
        account.memo.setdefault(charge.fingerprint, set()).add(charge.digest)  # type: ignore[arg-type]
    account.fingerprint = charge.fingerprint
    account.epsilon_per_report = charge.epsilon
    account.epsilon_longitudinal = charge.epsilon_longitudinal
    account.reports_per_window = charge.reports_per_window
    account.lifetime_budget = charge.lifetime_budget
    return None


def record_refusal(book: Book, charge: Charge, reason: Refusal, n: int, reading: Reading) -> None:
    """Count ``n`` refusals decided earlier (on the app's thread) in the book; never opens a window."""
    charge = place_charge(book, charge, reading, may_open=False)
    window = window_name(charge.day)
    account = book.get(charge.metric)
    if account is None:
        account = book[charge.metric] = _new_account(charge, window)
    _roll(account, window)
    count_refusal(account, reason, n)


def count_refusal(account: MetricAccount, reason: Refusal, n: int = 1) -> None:
    if reason is Refusal.WINDOW:
        account.refused_window += n
    elif reason is Refusal.LIFETIME:
        account.refused_lifetime += n
    elif reason is Refusal.DEVICE_WINDOW:
        account.refused_device_window += n
    else:
        account.refused_device_lifetime += n


RefusalCounts = Sequence[tuple[Charge, Refusal, int]]
"""Refusals decided before the worker (on the app's thread), to be recorded in the book."""


class CommitResult(NamedTuple):
    """Outcome per charge (None = charged), the book after the commit, and whether someone
    else (another process or ledger object) changed the book since this object last wrote it."""

    outcomes: list[Refusal | None]
    accounts: Book
    foreign: bool


class LedgerBase(abc.ABC):
    """A budget book: read a snapshot, commit charges atomically."""

    @abc.abstractmethod
    def snapshot(self) -> Book:
        """A copy of the book: every metric's account and the device clock state."""

    @abc.abstractmethod
    def commit(self, charges: Sequence[Charge], refusals: RefusalCounts = (),
               elapsed: ElapsedClock = system_elapsed) -> CommitResult:
        """Apply charges in order, in one transaction; ``elapsed`` is read once, inside it."""

    @abc.abstractmethod
    def forget_values(self) -> None:
        """Drop the memoisation digests (opt-out: the secret they are keyed by is gone)."""


def _commit(book: Book, charges: Sequence[Charge], refusals: RefusalCounts,
            reading: Reading) -> list[Refusal | None]:
    for charge, reason, n in refusals:
        record_refusal(book, charge, reason, n, reading)
    outcomes = []
    for i, c in enumerate(charges, start=1):
        outcomes.append(apply(book, c, reading))
        if i % YIELD_EVERY == 0:
            yield_gil()
    return outcomes


class MemoryLedger(LedgerBase):
    """The ledger in memory (tests, simulated clients)."""

    def __init__(self, accounts: Mapping[str, MetricAccount] | None = None) -> None:
        """Start empty, or from ``accounts`` (a book read from a directory that cannot be written)."""
        self._book = as_book(accounts or {}).copy()
        self._lock = threading.Lock()
        _LOCKED_OBJECTS.add(self)

    def snapshot(self) -> Book:
        with self._lock:
            return self._book.copy()

    def commit(self, charges: Sequence[Charge], refusals: RefusalCounts = (),
               elapsed: ElapsedClock = system_elapsed) -> CommitResult:
        with self._lock:
            outcomes = _commit(self._book, charges, refusals, elapsed())
            return CommitResult(outcomes, self._book.copy(), False)

    def forget_values(self) -> None:
        with self._lock:
            for account in self._book.values():
                account.memo.clear()


class Ledger(LedgerBase):
    """The ledger of a state directory, shared by every process of the app."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        from pathlib import Path  # here: not on the SDK's import

        self.dir = Path(state_dir)
        self.path = self.dir / LEDGER_FILE
        self.lock_path = self.dir / LOCK_FILE
        self._lock = threading.Lock()
        self._written: str | None = None   # generation tag of our last write
        _LOCKED_OBJECTS.add(self)
        self._remove_stale_temps()

    def _remove_stale_temps(self) -> None:
        """Every writer holds the lock, so under it any temporary ledger file is a killed write's."""
        prefix = f".{LEDGER_FILE}."
        try:
            if not any(name.startswith(prefix) for name in os.listdir(self.dir)):
                return   # the common case: no lock file created, no lock taken
            with self._lock, flocked(self.lock_path):
                remove_stale_temps(self.dir, LEDGER_FILE)
        except OSError:
            pass  # a directory that cannot be read or written: nothing to clean that we could

    def snapshot(self) -> Book:
        """Read without the lock: renames are atomic, so the file is always whole."""
        return read_ledger_file(self.path)

    def commit(self, charges: Sequence[Charge], refusals: RefusalCounts = (),
               elapsed: ElapsedClock = system_elapsed) -> CommitResult:
        with self._lock, flocked(self.lock_path):
            book, generation = _read(self.path)
            foreign = generation != self._written
            outcomes = _commit(book, charges, refusals, elapsed())   # read under the lock
            if charges or refusals:
                self._written = os.urandom(8).hex()
                atomic_write(self.path, dump_ledger(book, self._written))
            return CommitResult(outcomes, book, foreign)

    def forget_values(self) -> None:
        with self._lock, flocked(self.lock_path):
            book, _ = _read(self.path)
            if any(a.memo for a in book.values()):
                for account in book.values():
                    account.memo.clear()
                self._written = os.urandom(8).hex()
                atomic_write(self.path, dump_ledger(book, self._written))


def dump_ledger(accounts: Mapping[str, MetricAccount], generation: str = "") -> bytes:
    """The file's bytes: JSON, metrics sorted, readable by `ldpt ledger` and by people.

    ``generation`` is a random tag of this write: a writer that finds its own tag knows
    nobody else changed the book since. ``clock`` is the device clock state
    (client_sdk.device_clock; docs/conformance.md, "The device clock").
    """
    book = as_book(accounts)
    doc = {"format": LEDGER_FORMAT, "version": LEDGER_VERSION, "generation": generation,
           "clock": book.clock.to_json(),
           "metrics": {name: book[name].to_json() for name in sorted(book)}}
    import json

    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def read_ledger_file(path: Path) -> Book:
    """Parse a ledger file (empty book when it does not exist yet)."""
    return _read(path)[0]


def _read(path: Path) -> tuple[Book, str | None]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Book(), None
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read the privacy ledger ({exc.strerror or exc})") from None
    return parse_ledger(raw, str(path))


def parse_ledger(raw: bytes | str, where: str = "ledger") -> tuple[Book, str | None]:
    """The book and generation tag of a ledger file's bytes; LedgerError when it is not one.

    A version-1 file (before the device clock) gets a new clock: its first charge creates the
    window (an account of a later window keeps spending from it), its first update is a new epoch.
    """
    import json

    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or doc.get("format") != LEDGER_FORMAT:
            raise ValueError("not an ldp-telemetry ledger")
        version = doc.get("version", 0)
        if not isinstance(version, int) or version > LEDGER_VERSION:
            raise ValueError(f"written by a newer SDK (version {version})")
        accounts = {name: MetricAccount.from_json(data) for name, data in doc["metrics"].items()}
        if "clock" in doc:
            if not isinstance(doc["clock"], dict):
                raise ValueError("the clock is not an object")
            book = Book(accounts, DeviceClock.from_json(doc["clock"]))
        else:
            book = as_book(accounts)
        generation = doc.get("generation")
        return book, generation if isinstance(generation, str) else None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise LedgerError(f"{where}: the privacy ledger is unreadable ({exc}); the SDK refuses to "
                          "report until it is repaired or removed (removing it forgets past spend)") from None


def read_ledger(state_dir: str | os.PathLike[str]) -> Book:
    """The book of a state directory, for `ldpt ledger` and apps that show it to users."""
    from pathlib import Path

    return read_ledger_file(Path(state_dir) / LEDGER_FILE)


def summarise(accounts: Mapping[str, MetricAccount]) -> list[dict[str, Any]]:
    """One plain row per metric (what `ldpt ledger` prints)."""
    rows = []
    for name in sorted(accounts):
        a = accounts[name]
        rows.append({
            "metric": name,
            "window": a.window,
            "window_reports": a.window_reports,
            "reports_per_window": a.reports_per_window,
            "window_epsilon": a.window_epsilon,
            "lifetime_reports": a.lifetime_reports,
            "lifetime_epsilon": a.lifetime_epsilon,
            "lifetime_budget": a.lifetime_budget,
            "epsilon_per_report": a.epsilon_per_report,
            "epsilon_longitudinal": a.epsilon_longitudinal,
            "distinct_values": a.distinct_values if a.epsilon_longitudinal is not None else None,
            "refused_window": a.refused_window,
            "refused_lifetime": a.refused_lifetime,
            "refused_device": a.refused_device_window + a.refused_device_lifetime,
        })
    return rows


def summarise_device(accounts: Mapping[str, MetricAccount], day: int | None = None) -> dict[str, Any]:
    """The device totals `ldpt ledger` prints: spend in the latest (or ``day``'s) window and
    over the lifetime, summed over every metric, and the device-cap refusals."""
    windows = [a.window for a in accounts.values()]
    window = window_name(day) if day is not None else (max(windows) if windows else "")
    in_window, lifetime = device_totals(accounts, window)
    clock = as_book(accounts).clock
    return {"window": window, "window_epsilon": in_window, "lifetime_epsilon": lifetime,
            "metrics": len(accounts),
            "refused_device_window": sum(a.refused_device_window for a in accounts.values()),
            "refused_device_lifetime": sum(a.refused_device_lifetime for a in accounts.values()),
            "windows_opened": clock.opened, "charges_held": clock.held, "window_redates": clock.redated}


# --- fork safety -------------------------------------------------------------------------------------
# Before fork: take every ledger's thread lock, so no commit (and no flock descriptor, which
# the child would inherit and keep locked) is in progress; release in both processes after.

_LOCKED_OBJECTS: weakref.WeakSet[Any] = weakref.WeakSet()
_HELD: list[Any] = []


def _before_fork() -> None:
    _HELD[:] = list(_LOCKED_OBJECTS)
    for obj in _HELD:
        obj._lock.acquire()


def _after_fork_parent() -> None:
    for obj in _HELD:
        obj._lock.release()
    _HELD.clear()


def _after_fork_child() -> None:
    for obj in _HELD:
        obj._lock = threading.Lock()
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent,
                        after_in_child=_after_fork_child)
