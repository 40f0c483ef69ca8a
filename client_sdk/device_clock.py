"""The device clock rule: which window a charge counts in, whatever the wall clock says.

The ledger's windows are UTC days of the device's wall clock, which anyone who can set the
clock (a user, a spoofed NTP server) controls. Elapsed time is harder to forge: a boot clock
(Linux ``CLOCK_BOOTTIME``) or a process's monotonic clock never runs faster than real time.
So the wall clock names the window and the elapsed clock decides how fast new windows may
open (docs/privacy.md, "Clock errors"; the state and the steps are docs/conformance.md,
"The device clock"):

- the book has ONE current window W for the whole device (every metric's charges count in it);
- a charge dated W counts in W; dated up to ``MAX_WINDOW_AHEAD_DAYS`` before W, in W too
  (a clock set back a little gains nothing); dated further back, W is *re-dated* to that
  day with its spend kept (a clock that jumped years ahead and came back does not silence
  the device for years, and the spend made under the wrong clock binds the present); a later
  charge dated exactly the day a re-date left *resumes* it, spend kept (the step back was the
  error: a real-time clock reset at boot, then corrected);
- a charge dated after W *opens* a fresh window only when the elapsed clock shows at least
  ``DAY_SECONDS + CLOCK_MARGIN`` seconds since the opening before the last one; otherwise it
  is *held*: it counts in W. At most two windows open in any 24 hours of real time — what an
  honest clock also does around midnight (23:59, 00:01) — so any 24 hours of real time
  charge at most three windows, whatever the wall clock reads.

Elapsed readings are ``(epoch, seconds)``: the epoch names the clock a reading comes from
(``boot:<kernel boot id>`` for the Linux boot clock, shared by every process of one boot;
``run:<random>`` for one process's monotonic clock elsewhere). Readings of different epochs
are never compared. Per epoch the book keeps ``since``: the epoch's reading at its first
update at or after the second-to-last opening, and at or after the last one — so an epoch
measures the time since an opening from readings taken after it, never before (a lower
bound). A new epoch (a reboot; a process without a shared boot clock; a browser page) cannot
measure anything yet; it is given one opening (its ``since[0]`` is set a day before its
first reading), valid until any window opens: without that, a device switched off every
night would never open a new day. That credit is the one the elapsed clock cannot back: each
new epoch can add one window (docs/privacy.md says per platform what an epoch is).

Everything here is integers and strings, so another SDK ports it exactly
(conformance/vectors/ledger.json pins it).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

DAY_SECONDS = 86_400
#: How far before the current window (UTC days) a charge still counts in it. Within it, a
#: clock set back by a day or two (a time zone fixed, drift corrected) spends from the window
#: it already used; further back the window is re-dated to the clock's day.
MAX_WINDOW_AHEAD_DAYS = 2
#: Seconds of elapsed time an opening needs beyond a day: readings are whole seconds, floored
#: (one second), and two processes may floor one clock one second apart.
CLOCK_MARGIN = 2
#: Epochs the book remembers (most recently used kept); an epoch forgotten and seen again is
#: a new epoch, so more processes than this reporting in turn (without a boot clock) weaken
#: the bound.
EPOCH_SLOTS = 16
#: What an opening needs: ``reading - since[0] >= OPEN_AFTER``.
OPEN_AFTER = DAY_SECONDS + CLOCK_MARGIN

Reading = tuple[str, int]
"""An elapsed-clock reading: (epoch id, whole seconds of that epoch's clock)."""

ElapsedClock = Callable[[], Reading]
"""Returns a reading of a clock that never runs faster than real time (see module docstring)."""


class Move(str, enum.Enum):
    """What the rule did with a charge's day."""

    CREATE = "create"   # an empty book: the charge's day becomes the window
    SAME = "same"       # the charge is dated the window
    LATE = "late"       # dated up to MAX_WINDOW_AHEAD_DAYS before: counts in the window
    REDATE = "redate"   # dated further back: the window is re-dated to that day, spend kept
    RESUME = "resume"   # dated the day the last re-date left: back to it, spend kept
    OPEN = "open"       # dated later, and the elapsed clock allows a fresh window
    HELD = "held"       # dated later, too soon for a fresh window: counts in the window


@dataclasses.dataclass
class Epoch:
    """One elapsed clock the book has seen, and its readings since the last two openings."""

    id: str
    since: list[int | None]   # [first reading at/after the second-to-last opening, ... the last]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "since": list(self.since)}


@dataclasses.dataclass
class DeviceClock:
    """The device-wide clock state of a book (the ledger file's ``clock`` object)."""

    window: int | None = None                      # the current window, a UTC day number
    left: int | None = None                        # the window the last re-date left (until a new one)
    epochs: list[Epoch] = dataclasses.field(default_factory=list)   # least recently used first
    opened: int = 0                                # windows opened by the elapsed rule, ever
    held: int = 0                                  # charges held in the window, ever
    redated: int = 0                               # re-dates of the window (clock set back), ever

    def copy(self) -> DeviceClock:
        return DeviceClock(self.window, self.left, [Epoch(e.id, list(e.since)) for e in self.epochs],
                           self.opened, self.held, self.redated)

    def to_json(self) -> dict[str, Any]:
        return {"window": self.window, "left": self.left, "epochs": [e.to_json() for e in self.epochs],
                "opened": self.opened, "held": self.held, "redated": self.redated}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DeviceClock:
        """Parse the ``clock`` object; ValueError when a field has the wrong type."""
        def integer(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        window, left = data.get("window"), data.get("left")
        epochs_raw = data.get("epochs", [])
        counts = [data.get(k, 0) for k in ("opened", "held", "redated")]
        if not all(v is None or integer(v) for v in (window, left)) or not all(integer(c) for c in counts) \
                or not isinstance(epochs_raw, list):
            raise ValueError("the clock object has a field of the wrong type")
        epochs = []
        for e in epochs_raw:
            since = e.get("since") if isinstance(e, Mapping) else None
            if not isinstance(e, Mapping) or not isinstance(e.get("id"), str) or not isinstance(since, list) \
                    or len(since) != 2 or not all(s is None or integer(s) for s in since):
                raise ValueError("the clock object has an epoch of the wrong shape")
            epochs.append(Epoch(e["id"], list(since)))
        return cls(window, left, epochs[-EPOCH_SLOTS:], *counts)


def touch(clock: DeviceClock, reading: Reading) -> Epoch:
    """Record an update by the reading's epoch: fill its empty ``since`` slots, mark it most
    recently used; a new epoch gets one opening's credit (``since[0]`` a day before)."""
    epoch_id, seconds = reading
    for i, e in enumerate(clock.epochs):
        if e.id == epoch_id:
            if i != len(clock.epochs) - 1:
                clock.epochs.append(clock.epochs.pop(i))
            if e.since[0] is None:
                e.since[0] = seconds
            if e.since[1] is None:
                e.since[1] = seconds
            return e
    e = Epoch(epoch_id, [seconds - OPEN_AFTER, seconds])
    clock.epochs.append(e)
    del clock.epochs[:-EPOCH_SLOTS]
    return e


def place(clock: DeviceClock, day: int, reading: Reading, may_open: bool = True) -> tuple[int, Move]:
    """The window a charge dated ``day`` (the wall clock's UTC day) counts in, updating ``clock``.

    ``may_open`` is False when recording a refusal: it never opens a window.
    """
    epoch = touch(clock, reading)
    window = clock.window
    if window is None:
        clock.window = day
        return day, Move.CREATE
    if day == window:
        return window, Move.SAME
    if day < window:
        if window - day <= MAX_WINDOW_AHEAD_DAYS:
            return window, Move.LATE
        clock.window, clock.left = day, window
        clock.redated += 1
        return day, Move.REDATE
    if day == clock.left:
        clock.window, clock.left = day, None
        return day, Move.RESUME
    start = epoch.since[0]
    if may_open and start is not None and reading[1] - start >= OPEN_AFTER:
        for e in clock.epochs:
            e.since = [e.since[1], None]
        epoch.since[1] = reading[1]
        clock.window, clock.left = day, None
        clock.opened += 1
        return day, Move.OPEN
    if may_open:
        clock.held += 1
    return window, Move.HELD


# --- the platform's elapsed clock ---------------------------------------------------------------------

_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_run_id: list[str] = []            # this process's epoch id when there is no boot clock
_boot: list[str | None] = []       # cached "boot:<id>", or None when there is none
_ids_lock = threading.Lock()


def _boot_epoch() -> str | None:
    """``boot:<kernel boot id>`` on Linux with CLOCK_BOOTTIME, else None (read once)."""
    with _ids_lock:
        if not _boot:
            epoch = None
            if sys.platform.startswith("linux") and hasattr(time, "CLOCK_BOOTTIME"):
                try:
                    with open(_BOOT_ID_PATH, encoding="ascii") as f:
                        boot_id = f.read().strip()
                    if boot_id:
                        time.clock_gettime(time.CLOCK_BOOTTIME)
                        epoch = f"boot:{boot_id}"
                except (OSError, ValueError):
                    epoch = None
            _boot.append(epoch)
        return _boot[0]


def _run_epoch() -> str:
    with _ids_lock:
        if not _run_id:
            _run_id.append(f"run:{os.urandom(8).hex()}")
        return _run_id[0]


def system_elapsed() -> Reading:
    """The device's elapsed clock: the Linux boot clock (counts suspend, shared by every process
    of one boot, named by the kernel's boot id), else this process's monotonic clock (which
    may stop during suspend: that only delays new windows)."""
    boot = _boot_epoch()
    if boot is not None:
        return boot, math.floor(time.clock_gettime(time.CLOCK_BOOTTIME))
    return _run_epoch(), math.floor(time.monotonic())


def _after_fork_child() -> None:
    # a child is another process: its own epoch where the clock is per process
    global _ids_lock
    _ids_lock = threading.Lock()
    _run_id.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_child)
