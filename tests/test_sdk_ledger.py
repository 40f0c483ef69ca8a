"""The privacy ledger: refusal at the budget, lifetime accounting with memoisation, windows,
the file (atomic, no true value), `ldpt ledger`, and processes that share a state directory."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import threading
import time

import pytest
from click.testing import CliRunner

from cli.main import main
from client_sdk import RetryPolicy, TelemetryClient
from client_sdk.ledger import (
    Book,
    Charge,
    Ledger,
    LedgerError,
    MemoryLedger,
    Refusal,
    apply,
    decide,
    read_ledger,
    window_name,
)
from client_sdk.testing import MemoryTransport
from collector.testing import FakeCollector
from sketches import server_half

from .sdk_support import REGISTRY_TOML, file_lock, make_registry, wait_until  # noqa: F401 - file_lock: autouse

DAY = 20_000   # a UTC day number


def charge(day=DAY, eps=1.0, eps_inf=None, digest=None, rpw=1, budget=None, metric="m", fp="fp"):
    return Charge(metric, fp, day, eps, eps_inf, digest, rpw, budget)


def noon(day):
    """The elapsed reading of an honest clock at noon of ``day`` (one boot since 1970)."""
    return ("boot:test", day * 86_400 + 43_200)


def honest(book, c):
    """Apply ``c`` as a device whose clock is right: real time is noon of the charge's day."""
    return apply(book, c, noon(c.day))


# --- the accounting rules ------------------------------------------------------------------------------

def test_reports_per_window_refuses_the_extra_report_and_a_new_window_resets():
    book = Book()
    assert [honest(book, charge(rpw=2)) for _ in range(4)] == [None, None, Refusal.WINDOW, Refusal.WINDOW]
    acct = book["m"]
    assert acct.window == window_name(DAY) and acct.window_reports == 2
    assert acct.window_epsilon == pytest.approx(2.0) and acct.refused_window == 2
    assert honest(book, charge(day=DAY + 1, rpw=2)) is None      # the next UTC day
    assert acct.window == window_name(DAY + 1) and acct.window_reports == 1
    assert acct.lifetime_reports == 3 and acct.lifetime_epsilon == pytest.approx(3.0)
    assert honest(book, charge(day=DAY, rpw=2)) is None           # late: counts in the current window
    assert honest(book, charge(day=DAY, rpw=2)) is Refusal.WINDOW


def test_the_lifetime_budget_refuses_the_report_that_would_exceed_it():
    book = Book()
    outcomes = [honest(book, charge(day=DAY + i, eps=0.9999999992, budget=3.0)) for i in range(5)]
    assert outcomes == [None, None, None, Refusal.LIFETIME, Refusal.LIFETIME]
    assert book["m"].lifetime_epsilon <= 3.0 and book["m"].refused_lifetime == 2


def test_memoised_reports_cost_epsilon_inf_per_distinct_value():
    book = Book()
    eps1, eps_inf = 1.07, 4.39
    seq = ["A"] * 5 + ["B"] * 2 + ["A"] * 3
    for i, v in enumerate(seq):
        assert honest(book, charge(day=DAY + i // 3, eps=eps1, eps_inf=eps_inf, digest=v, rpw=3)) is None
    acct = book["m"]
    assert acct.lifetime_epsilon == pytest.approx(2 * eps_inf)   # 2 distinct values, 10 reports
    assert acct.lifetime_reports == 10 and acct.distinct_values == 2
    assert acct.window_epsilon == pytest.approx(acct.window_reports * eps1)  # ε₁ per report in a window
    # Budget 2.5 ε∞: a third distinct value is refused, a known one still fits.
    budget = 2.5 * eps_inf
    assert decide(acct, charge(day=DAY + 9, eps=eps1, eps_inf=eps_inf, digest="C", budget=budget,
                               rpw=3)) is Refusal.LIFETIME
    assert decide(acct, charge(day=DAY + 9, eps=eps1, eps_inf=eps_inf, digest="A", budget=budget,
                               rpw=3)) is None
    # New parameters (fingerprint) are a new PRR: a known value costs ε∞ again.
    assert honest(book, charge(day=DAY + 9, eps=eps1, eps_inf=eps_inf, digest="A", fp="fp2", rpw=3)) is None
    assert acct.lifetime_epsilon == pytest.approx(3 * eps_inf)


def test_the_ledger_file_is_atomic_json_and_holds_no_value(tmp_path):
    ledger = Ledger(tmp_path)
    result = ledger.commit([charge(eps_inf=4.0, digest="0f" * 16, rpw=5)] * 2,
                           [(charge(), Refusal.WINDOW, 3)])
    assert result.outcomes == [None, None]
    doc = json.loads((tmp_path / "ledger.json").read_text())
    assert doc["format"] == "ldpt-ledger" and doc["version"] == 2
    assert doc["metrics"]["m"]["memo"] == {"fp": ["0f" * 16]}
    assert doc["metrics"]["m"]["refused_window"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.json", "ledger.lock"]  # no temp left
    assert read_ledger(tmp_path)["m"].lifetime_epsilon == pytest.approx(4.0)
    (tmp_path / "ledger.json").write_text("{not json")
    with pytest.raises(LedgerError, match="unreadable"):
        ledger.commit([charge()])


def test_a_corrupt_ledger_disables_reporting_instead_of_crashing(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "ledger.json").write_text("garbage")
    client = TelemetryClient(registry=make_registry(), state_dir=tmp_path / "state",
                             transport=MemoryTransport(FakeCollector()))
    assert client.report("crash", True) is False
    assert client.stats()["disabled"] == 1
    client.close(0.2)



def test_a_ledger_with_wrongly_typed_fields_disables_reporting(tmp_path):
    """Parseable JSON with a string where a number belongs used to surface as a TypeError per report."""
    state = tmp_path / "state"
    state.mkdir()
    doc = {"format": "ldpt-ledger", "version": 1, "generation": "x",
           "metrics": {"crash": {"window": "2024-01-01", "lifetime_epsilon": "5", "window_reports": 0}}}
    (state / "ledger.json").write_text(json.dumps(doc))
    with pytest.raises(LedgerError, match="lifetime_epsilon"):
        read_ledger(state)
    client = TelemetryClient(registry=make_registry(), state_dir=state, transport=MemoryTransport(FakeCollector()))
    assert client.report("crash", True) is False
    assert client.stats()["disabled"] == 1 and client.stats()["internal_error"] == 0
    client.close(0.2)


# --- through the client -------------------------------------------------------------------------------------

def test_client_accounting_with_memoisation_matches_the_ledger(tmp_path):
    registry = make_registry()
    fake = FakeCollector(registry)
    client = TelemetryClient(registry=registry, state_dir=tmp_path / "s", transport=MemoryTransport(fake))
    values = ["alpha.example", "beta.example", "alpha.example", "alpha.example", "gamma.example",
              "beta.example", "alpha.example", "delta.example", "epsilon.example"]
    outcomes = [client.report("site", v) for v in values]
    assert client.flush(5.0)
    proto = server_half(registry.get("site"))
    eps_inf, eps1 = proto.epsilon_longitudinal, proto.epsilon
    # lifetime_epsilon = 20 = 4.55 ε∞: the 5th distinct value ("epsilon.example") is refused.
    assert outcomes == [True] * 8 + [False]
    acct = client.ledger_snapshot()["site"]
    assert acct.distinct_values == 4
    assert acct.lifetime_epsilon == pytest.approx(4 * eps_inf)
    assert acct.window_epsilon == pytest.approx(8 * eps1)
    assert acct.refused_lifetime == 1
    text = (tmp_path / "s" / "ledger.json").read_text()
    for v in values:
        assert v not in text                                    # digests only, never the value
    assert fake.accepted_reports == 8
    # crash: reports_per_window 3, lifetime 5 ε.
    assert [client.report("crash", True) for _ in range(4)] == [True, True, True, False]
    client.close()


def test_threads_of_one_client_never_overspend(tmp_path):
    registry = make_registry()
    fake = FakeCollector(registry)
    client = TelemetryClient(registry=registry, state_dir=tmp_path / "s", transport=MemoryTransport(fake),
                             batch_size=7, max_batch_age=0.01)
    results = []

    def hammer():
        results.extend(client.report("crash", i % 2 == 0) for i in range(200))

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert client.flush(5.0)
    assert sum(results) == 3 and fake.accepted_reports == 3
    assert client.ledger_snapshot()["crash"].window_reports == 3
    client.close()


#: Noon UTC of a fixed day: the processes' wall clock runs on from it at real speed, so no UTC
#: midnight (a new window, a fresh per-window cap) falls inside the run; on time.time one did
#: with probability ~2e-5 a run (the two variants' ~1.7 s in 86,400).
NOON = 20_000 * 86_400 + 43_200


def _process_reports(state_dir: str, attempts: int, queue, t0: float) -> None:
    """One app process: its own client on the shared state directory and its own transport."""
    registry = make_registry(REGISTRY_TOML)
    fake = FakeCollector(registry)
    client = TelemetryClient(registry=registry, state_dir=state_dir, transport=MemoryTransport(fake),
                             batch_size=2, max_batch_age=0.001, retry=RetryPolicy(initial=0.01),
                             clock=lambda: NOON + (time.monotonic() - t0))
    for i in range(attempts):
        client.report("crash", i % 2 == 0)
        client.report("site", f"value-{i % 7}.example")
    client.flush(10.0)
    client.close(5.0)
    sent = {m: sum(1 for b in fake.batches for r in b["reports"] if r["m"] == m) for m in ("crash", "site")}
    queue.put(sent)


def test_processes_sharing_a_state_dir_never_overspend(tmp_path):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    t0 = time.monotonic()   # CLOCK_MONOTONIC: one clock for the parent and its forks
    procs = [ctx.Process(target=_process_reports, args=(str(tmp_path / "shared"), 30, queue, t0)) for _ in range(4)]
    for p in procs:
        p.start()
    sent = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    registry = make_registry()
    acct = read_ledger(tmp_path / "shared")
    # crash: 3 per window across every process, whatever the interleaving.
    assert sum(s["crash"] for s in sent) == 3 == acct["crash"].window_reports
    # site: lifetime budget 20 with ε∞ = 4.39 allows 4 distinct values across all processes.
    eps_inf = server_half(registry.get("site")).epsilon_longitudinal
    assert acct["site"].distinct_values == 4
    assert acct["site"].lifetime_epsilon == pytest.approx(4 * eps_inf)
    assert acct["site"].lifetime_epsilon <= 20.0
    assert sum(s["site"] for s in sent) == acct["site"].lifetime_reports
    assert acct["crash"].refused_window + acct["crash"].window_reports == 4 * 30


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return stat[stat.rindex(")") + 2:].startswith("T")


def _commit_paused(state_dir: str) -> None:
    """A child process: one charge under reports_per_window = 1, SIGSTOPping itself inside the
    transaction (the elapsed clock is read there, with the lock held and the book read)."""
    def paused_clock():
        os.kill(os.getpid(), signal.SIGSTOP)
        return noon(DAY)
    outcome = Ledger(state_dir).commit([charge()], elapsed=paused_clock).outcomes[0]
    os._exit(0 if outcome is None else 3)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc to see the holder stopped")
def test_a_paused_holder_keeps_the_ledger_lock_however_old_its_file(tmp_path):
    """Issue 26 §2 for the Python SDK: flock(2) (or the Windows byte-range lock) belongs to the
    holder's open file until it closes it or dies; its age never matters. A SIGSTOPped holder
    keeps it, the next process waits, then is refused: 1 report under reports_per_window = 1."""
    import fcntl
    ctx = multiprocessing.get_context("fork")
    holder = ctx.Process(target=_commit_paused, args=(str(tmp_path),))
    holder.start()
    try:
        assert wait_until(lambda: _stopped(holder.pid), timeout=60), "the holder never stopped"
        lock = tmp_path / "ledger.lock"
        os.utime(lock, (0, 0))   # as old as can be
        fd = os.open(lock, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):   # held by the paused process
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        assert _stopped(holder.pid)
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.join(30)
    assert holder.exitcode == 0   # the holder's charge went through
    assert Ledger(tmp_path).commit([charge()], elapsed=lambda: noon(DAY)).outcomes == [Refusal.WINDOW]
    assert read_ledger(tmp_path)["m"].window_reports == 1


# --- ldpt ledger ----------------------------------------------------------------------------------------------

def test_ldpt_ledger_prints_the_book(tmp_path):
    registry = make_registry()
    client = TelemetryClient(registry=registry, state_dir=tmp_path / "s",
                             transport=MemoryTransport(FakeCollector(registry)))
    client.report("theme", "dark-secret-theme")
    client.report("theme", "dark-secret-theme")
    client.report("site", "x.example")
    assert client.flush(5.0)
    client.close()
    runner = CliRunner()
    out = runner.invoke(main, ["ledger", "--state-dir", str(tmp_path / "s")])
    assert out.exit_code == 0, out.output
    assert "theme" in out.output and "1/1" in out.output and "secret: present" in out.output
    as_json = runner.invoke(main, ["ledger", "--state-dir", str(tmp_path / "s"), "--format", "json"])
    rows = {r["metric"]: r for r in json.loads(as_json.output)["metrics"]}
    assert rows["theme"]["refused_window"] == 1
    assert rows["site"]["distinct_values"] == 1
    assert rows["site"]["lifetime_epsilon"] == pytest.approx(server_half(registry.get("site")).epsilon_longitudinal)
    as_csv = runner.invoke(main, ["ledger", "--state-dir", str(tmp_path / "s"), "--format", "csv"])
    assert as_csv.output.splitlines()[0].startswith("metric,window,window_reports")
    (tmp_path / "empty").mkdir()
    bad = runner.invoke(main, ["ledger", "--state-dir", str(tmp_path / "empty")])
    assert bad.exit_code != 0 and "not an ldp-telemetry state directory" in bad.output


def test_memory_ledger_matches_the_file_ledger(tmp_path):
    charges = [charge(day=DAY + i // 4, eps_inf=3.0, digest=str(i % 3), rpw=2, budget=7.0) for i in range(12)]
    a = MemoryLedger().commit(charges, elapsed=lambda: noon(DAY))
    b = Ledger(tmp_path).commit(charges, elapsed=lambda: noon(DAY))
    assert a.outcomes == b.outcomes
    assert a.accounts["m"].to_json() == b.accounts["m"].to_json()
    assert a.accounts.clock == b.accounts.clock


def test_a_late_charge_cannot_overspend_the_device_window_cap():
    """The device's clock steps back a day after it reported today: the late report counts in
    the device's current window (as a late charge of one metric does), so the [device] cap on
    the sum over metrics still holds in that window."""
    def dev(metric, day):
        return Charge(metric, "fp", day, 1.0, None, None, 5, None, 2.0, None)

    book = Book()
    assert honest(book, dev("a", DAY)) is None
    assert honest(book, dev("c", DAY)) is None
    assert honest(book, dev("a", DAY + 1)) is None   # the next day: a only
    assert honest(book, dev("c", DAY)) is None       # clock stepped back: counts in DAY + 1
    assert honest(book, dev("b", DAY + 1)) is Refusal.DEVICE_WINDOW
    current = window_name(DAY + 1)
    assert sum(a.window_epsilon for a in book.values() if a.window == current) <= 2.0
    assert sum(a.window_epsilon for a in book.values() if a.window == window_name(DAY)) == 0


# --- clock errors (the device clock rule: client_sdk/device_clock.py; docs/privacy.md) ------------------
# Readings are the elapsed clock of one boot; ``t`` is real time in seconds. The rule's
# property tests (any sequence of wall readings, restarts, reboots) are in
# tests/test_sdk_clock_rule.py.

TEN_YEARS = 3652
HOUR = 3_600


def dev(metric, day, rpw=5):
    return Charge(metric, "fp", day, 1.0, None, None, rpw, None, 2.0, None)


def test_a_forward_clock_jump_corrected_the_same_day_binds_that_day():
    book, t = Book(), DAY * 86_400 + 12 * HOUR
    boot = "boot:test"
    assert apply(book, charge(day=DAY, rpw=3), (boot, t)) is None
    assert apply(book, charge(day=DAY + TEN_YEARS, rpw=3), (boot, t + 60)) is None   # the clock jumps
    assert apply(book, charge(day=DAY, rpw=3), (boot, t + 120)) is None   # corrected: both spends bind
    assert apply(book, charge(day=DAY, rpw=3), (boot, t + 180)) is Refusal.WINDOW   # 3 in all
    assert book["m"].window == window_name(DAY) and book["m"].window_reports == 3
    assert book.clock.window == DAY and book.clock.redated == 1
    assert apply(book, charge(day=DAY + 1), (boot, t + 25 * HOUR)) is None   # the next day reports again
    assert book["m"].lifetime_reports == 4


def test_a_clock_set_back_within_the_cap_still_spends_from_the_current_window():
    from client_sdk.ledger import MAX_WINDOW_AHEAD_DAYS

    book, t = Book(), noon(DAY)[1]
    at = [t]

    def step(day):
        at[0] += 60
        return apply(book, charge(day=day), ("boot:test", at[0]))

    assert step(DAY + MAX_WINDOW_AHEAD_DAYS) is None
    for day in range(DAY, DAY + MAX_WINDOW_AHEAD_DAYS + 1):     # back by up to the cap: no new budget
        assert step(day) is Refusal.WINDOW
    assert step(DAY - 1) is Refusal.WINDOW                      # further back: re-dated, spend kept
    assert book["m"].window == window_name(DAY - 1) and book["m"].window_reports == 1
    assert step(DAY + MAX_WINDOW_AHEAD_DAYS) is Refusal.WINDOW  # forward onto the day it left: resumed
    assert book.clock.window == DAY + MAX_WINDOW_AHEAD_DAYS and book.clock.opened == 0


def test_a_forward_clock_jump_under_device_caps_redates_every_metric():
    book, boot, t = Book(), "boot:test", noon(DAY)[1]
    assert apply(book, dev("a", DAY + TEN_YEARS), (boot, t)) is None
    assert apply(book, dev("b", DAY + TEN_YEARS), (boot, t)) is None
    assert apply(book, dev("c", DAY), (boot, t + 60)) is Refusal.DEVICE_WINDOW     # back: the 2 spent bind today
    assert {a.window for a in book.values()} == {window_name(DAY)}
    t += 25 * HOUR
    assert apply(book, dev("c", DAY + 1), (boot, t)) is None and apply(book, dev("a", DAY + 1), (boot, t)) is None
    assert apply(book, dev("b", DAY + 1), (boot, t)) is Refusal.DEVICE_WINDOW  # the device cap holds per window


def test_a_clock_reset_to_the_past_and_corrected_gains_no_budget():
    """A real-time clock reset at boot (to 2000-01-01), a report while it is wrong, NTP puts it
    back on the day it left: that day's spend binds, with the report made meanwhile."""
    reset, boot, t = DAY - 9000, "boot:test", noon(DAY)[1]
    book = Book()
    assert apply(book, charge(day=DAY, rpw=3), (boot, t)) is None
    assert apply(book, charge(day=reset, rpw=3), (boot, t + 60)) is None        # counts with DAY's: 2 of 3
    assert book["m"].window == window_name(reset) and book["m"].window_reports == 2
    assert apply(book, charge(day=DAY, rpw=3), (boot, t + 120)) is None          # back on DAY: 3 of 3
    assert apply(book, charge(day=DAY, rpw=3), (boot, t + 180)) is Refusal.WINDOW
    assert book["m"].window == window_name(DAY) and book["m"].window_reports == 3
    assert book.clock.opened == 0                                                # no window opened for it
    assert apply(book, charge(day=DAY + 1, rpw=3), (boot, t + 25 * HOUR)) is None   # a new day as usual


def test_a_clock_oscillating_between_now_and_ten_years_ahead_gains_one_window_at_most():
    """Within one real hour: the jump opens a window (a new epoch's one credit), the way back
    re-dates it onto today with today's spend, and the next jump resumes it: one window's budget."""
    book, t = Book(), noon(DAY)[1]
    outcomes = [apply(book, charge(day=day, rpw=2), ("boot:test", t + 60 * i))
                for i, day in enumerate([DAY, DAY + TEN_YEARS] * 30)]
    assert outcomes.count(None) == 2                              # one window's budget, then refusals
    assert book["m"].lifetime_reports == 2 and book.clock.opened == 1


def test_a_clock_reset_under_device_caps_gains_no_budget_for_any_metric():
    reset, boot, t = DAY - 9000, "boot:test", noon(DAY)[1]
    book = Book()
    assert apply(book, dev("a", DAY), (boot, t)) is None
    assert apply(book, dev("b", reset), (boot, t)) is None                   # 2 of 2, in the reset window
    assert apply(book, dev("a", DAY), (boot, t)) is Refusal.DEVICE_WINDOW    # back on DAY: a and b bind it
    assert apply(book, dev("c", DAY), (boot, t)) is Refusal.DEVICE_WINDOW
    assert sum(a.window_epsilon for a in book.values() if a.window == window_name(DAY)) == pytest.approx(2.0)


def test_the_issue_26_cycle_sends_at_most_three_reports_in_a_real_day():
    """91 wall readings cycling over today-6, today-3 and today (and the other cycles of the
    issue) within one real day: at most three windows, whatever the book held before."""
    for cycle in ([-6, -3, 0], [0, 3, 6], [0, 1, 3]):
        for history in (0, 1):
            book, boot = Book(), "boot:test"
            t = noon(DAY)[1]
            if history:   # an established device: yesterday's window, opened by the elapsed rule
                apply(book, dev("m", DAY - 2, rpw=1), (boot, t - 2 * 86_400))
                apply(book, dev("m", DAY - 1, rpw=1), (boot, t - 86_400))
            sent = sum(apply(book, dev("m", DAY + cycle[i % 3], rpw=1), (boot, t + i * 900)) is None
                       for i in range(91))
            assert sent <= 3, (cycle, history, sent)
