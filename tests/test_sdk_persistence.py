"""The ledger's promise when the device's storage fails (docs/privacy.md, "When the state
directory cannot be written").

A read-only state directory, a secret that cannot be read, a ledger that stops being
writable after start, a full disk at commit time: in none of them may restarts (new client
objects on the same directory) send more than the window's budget, nor memoised responses
drawn from a fresh secret. The tests run as root too, so read-only directories and
unreadable files are simulated by refusing the system calls under the state directory (a
non-root run also tries the real chmod).
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from client_sdk import TelemetryClient
from client_sdk.errors import StateError
from client_sdk.registry import parse_registry
from client_sdk.state import UnusableState
from client_sdk.testing import MemoryTransport
from client_sdk.uploader import RetryPolicy
from collector.testing import FakeCollector
from sketches import server_half

from .sdk_support import file_lock  # noqa: F401 - autouse: both lock implementations

FAST = RetryPolicy(initial=0.01, maximum=0.05)
DAY = 20_000 * 86_400.0 + 3600.0          # a fixed UTC day (2024-10-04), one hour in
CAP = 2.0

REGISTRY = parse_registry(f"""
[device]
epsilon_per_window = {CAP}

[metrics.crash]
kind = "boolean"
protocol = "rr"
epsilon = 1.0
reports_per_window = 10

[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system"]
protocol = "lgrr"
epsilon = 1.0
epsilon_inf = 3.0
reports_per_window = 10
""", "persistence.toml")

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Refuse:
    """Refuse system calls on paths under ``root`` as a read-only file system (or a full disk,
    or a permission) would: writes and namespace changes; reads of the paths in ``unreadable``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path, *, writes: bool = True,
                 unreadable: tuple[Path, ...] = (), code: int = errno.EROFS) -> None:
        self.root, self.writes, self.code = str(root), writes, code
        self.unreadable = {str(p) for p in unreadable}
        real = {name: getattr(os, name) for name in ("open", "access", "mkdir", "replace", "rename",
                                                     "link", "unlink")}

        def under(path: object) -> bool:
            if isinstance(path, int):
                return False
            p = os.path.abspath(os.fspath(path))  # type: ignore[arg-type]
            return p == self.root or p.startswith(self.root + os.sep)

        def fail(path: object) -> OSError:
            return OSError(self.code, os.strerror(self.code), os.fspath(path))  # type: ignore[arg-type]

        def open_(path, flags, mode=0o777, *args, **kw):
            if under(path):
                if os.path.abspath(os.fspath(path)) in self.unreadable:
                    raise OSError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
                if self.writes and flags & WRITE_FLAGS:
                    raise fail(path)
            return real["open"](path, flags, mode, *args, **kw)

        def access(path, mode, *args, **kw):
            if self.writes and under(path) and mode & os.W_OK:
                return False
            return real["access"](path, mode, *args, **kw)

        def namespace(name):
            def call(*paths, **kw):
                if self.writes and any(under(p) for p in paths):
                    raise fail(paths[0])
                return real[name](*paths, **kw)
            return call

        monkeypatch.setattr(os, "open", open_)
        monkeypatch.setattr(os, "access", access)
        for name in ("mkdir", "replace", "rename", "link", "unlink"):
            monkeypatch.setattr(os, name, namespace(name))


def run(state: Path, fake: FakeCollector, values=(("crash", True), ("theme", "dark")), **kw) -> TelemetryClient:
    """One run of the app: a new client on ``state``, a few reports, flush, close."""
    client = TelemetryClient(registry=REGISTRY, state_dir=state, transport=MemoryTransport(fake),
                             retry=FAST, clock=lambda: DAY, **kw)
    for metric, value in values:
        client.report(metric, value)
    client.flush(5.0)
    client.close(1.0)
    return client


def epsilon_sent(fake: FakeCollector) -> float:
    """ε the collector received from this device (one window here), to 6 decimals: the realised
    epsilons are quantised floats (1 - 7e-10 for rr at ε = 1)."""
    eps = {name: float(server_half(spec).epsilon) for name, spec in REGISTRY.metrics.items()}
    return round(sum(eps[r["m"]] for batch in fake.batches for r in batch["reports"]), 6)


def first_rounds(fake: FakeCollector) -> list:
    return [r["p"] for batch in fake.batches for r in batch["reports"] if r["m"] == "theme"]


def test_a_writable_directory_keeps_restarts_within_the_device_cap(tmp_path):
    """The baseline the failure modes are held to: four runs, ε sent in the window = the cap."""
    fake = FakeCollector(REGISTRY)
    for _ in range(4):
        run(tmp_path / "s", fake)
    assert epsilon_sent(fake) == CAP


def test_a_read_only_state_directory_reports_nothing_across_restarts(tmp_path, monkeypatch, caplog):
    state = tmp_path / "s"
    state.mkdir(mode=0o700)
    fake = FakeCollector(REGISTRY)
    Refuse(monkeypatch, state)
    with caplog.at_level(logging.ERROR, logger="client_sdk"):
        clients = [run(state, fake) for _ in range(4)]   # four runs on one day, 2 reports each
    assert epsilon_sent(fake) == 0.0 <= CAP                 # was 8.0: 2 per run, nothing persisted
    for client in clients:
        assert isinstance(client.state, UnusableState)
        assert client.stats()["disabled_state"] == 2 and client.stats()["reported"] == 0
        assert "not writable" in client.disabled_reason and "nothing is reported" in client.disabled_reason
    lines = [r.getMessage() for r in caplog.records if "reporting is disabled" in r.getMessage()]
    assert len(lines) == 4                                   # one line per run


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes to a 0500 directory")
def test_a_real_read_only_directory_reports_nothing(tmp_path):
    state = tmp_path / "s"
    state.mkdir(mode=0o700)
    state.chmod(0o500)
    try:
        fake = FakeCollector(REGISTRY)
        for _ in range(3):
            assert run(state, fake).stats()["disabled_state"] == 2
        assert epsilon_sent(fake) == 0.0
    finally:
        state.chmod(0o700)


def test_a_read_only_directory_keeps_the_book_and_the_opt_out_for_display(tmp_path, monkeypatch):
    state = tmp_path / "s"
    fake = FakeCollector(REGISTRY)
    run(state, fake, values=(("crash", True),))
    Refuse(monkeypatch, state)
    client = run(state, fake)
    assert client.ledger_snapshot()["crash"].window_reports == 1     # what was spent, readable
    assert fake.accepted_reports == 1


def test_a_directory_where_the_secret_should_be_reports_nothing_across_restarts(tmp_path, caplog):
    state = tmp_path / "s"
    (state / "secret").mkdir(parents=True)        # the secret cannot be read (nor created)
    fake = FakeCollector(REGISTRY)
    with caplog.at_level(logging.ERROR, logger="client_sdk"):
        clients = [run(state, fake, values=(("theme", "dark"),)) for _ in range(6)]
    # Before: six runs, six secrets, six freshly drawn memoised responses for one value.
    assert first_rounds(fake) == [] and epsilon_sent(fake) == 0.0
    for client in clients:
        assert client.stats()["disabled_state"] == 1
        assert "cannot use the client secret" in client.disabled_reason
        assert "Is a directory" in client.disabled_reason
    assert sum("reporting is disabled" in r.getMessage() for r in caplog.records) == 6
    with pytest.raises(StateError, match="cannot use the client secret"):   # strict: one error type
        TelemetryClient(registry=REGISTRY, state_dir=state, transport=MemoryTransport(fake), strict=True)


@pytest.mark.parametrize("how", ["injected", "chmod"])
def test_an_unreadable_secret_file_reports_nothing_across_restarts(tmp_path, monkeypatch, how):
    if how == "chmod" and (os.name != "posix" or os.geteuid() == 0):
        pytest.skip("root reads a mode-000 file")
    state = tmp_path / "s"
    fake = FakeCollector(REGISTRY)
    run(state, fake, values=(("crash", True),))            # a secret exists, one report spent
    secret = state / "secret"
    if how == "chmod":
        secret.chmod(0)
    else:
        Refuse(monkeypatch, state, writes=False, unreadable=(secret,))
    for _ in range(4):
        client = run(state, fake)
        assert client.stats()["disabled_state"] == 2
        assert "cannot use the client secret" in client.disabled_reason
    assert fake.accepted_reports == 1 and epsilon_sent(fake) == 1.0
    if how == "chmod":
        secret.chmod(0o600)


def test_a_ledger_that_becomes_unwritable_after_start_sends_nothing_more(tmp_path, monkeypatch):
    state = tmp_path / "s"
    fake = FakeCollector(REGISTRY)
    client = TelemetryClient(registry=REGISTRY, state_dir=state, transport=MemoryTransport(fake),
                             retry=FAST, clock=lambda: DAY)
    assert client.report("crash", True) and client.flush(5.0)
    refuse = Refuse(monkeypatch, state)                       # e.g. remounted read-only
    assert client.report("theme", "dark")                     # within the cap in the mirror ...
    assert client.flush(5.0) is False                         # ... but never charged, never sent
    stats = client.stats()
    assert stats["ledger_errors"] == 1 and stats["charged"] == 1 and fake.accepted_reports == 1
    client.close(1.0)
    for _ in range(3):                                        # restarts on the same directory
        assert run(state, fake).stats()["disabled_state"] == 2
    assert epsilon_sent(fake) == 1.0
    refuse.writes = False                                     # writable again: the book binds
    run(state, fake)
    assert epsilon_sent(fake) == CAP


def test_a_full_disk_at_commit_time_drops_the_batch_and_restarts_stay_within_the_cap(tmp_path, monkeypatch):
    from client_sdk import ledger as ledger_module

    real = ledger_module.atomic_write
    full = {"on": False}

    def write(path, data, *args, **kw):
        if full["on"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, data, *args, **kw)

    monkeypatch.setattr(ledger_module, "atomic_write", write)
    state = tmp_path / "s"
    fake = FakeCollector(REGISTRY)
    run(state, fake, values=(("crash", True),))
    full["on"] = True
    for _ in range(4):
        client = run(state, fake, values=(("theme", "dark"), ("crash", True)))
        stats = client.stats()       # the mirror lets theme through; crash then meets the cap
        assert stats["ledger_errors"] == 1 and stats["charged"] == 0 and stats["refused_device_window"] == 1
    assert epsilon_sent(fake) == 1.0                          # nothing charged, nothing sent
    full["on"] = False
    run(state, fake)
    assert epsilon_sent(fake) == CAP


# --- [device] cap refusals (issue: every one raised KeyError) ---------------------------------------

def test_a_device_cap_refusal_is_counted_logged_and_strict_raises_an_ldpt_error(tmp_path, caplog):
    from client_sdk.errors import LdptError

    fake = FakeCollector(REGISTRY)
    with caplog.at_level(logging.INFO, logger="client_sdk"):
        client = run(tmp_path / "s", fake, values=(("crash", True), ("theme", "dark"), ("crash", False)))
    stats = client.stats()
    assert stats["refused_device_window"] == 1 and stats["internal_error"] == 0
    assert any("epsilon_per_window" in r.getMessage() and "[device]" in r.getMessage() for r in caplog.records)
    strict = TelemetryClient(registry=REGISTRY, state_dir=tmp_path / "s", transport=MemoryTransport(fake),
                             retry=FAST, clock=lambda: DAY, strict=True)
    with pytest.raises(LdptError, match="device_window"):
        strict.report("crash", True)
    strict.close(1.0)


def test_a_device_cap_refusal_at_commit_time_keeps_the_batchs_charged_reports(tmp_path):
    """Two clients (two processes of one app) on one state directory race the device cap: the
    second's mirror predates the first's spend, so its commit charges one report and refuses the
    other. The charged one must still be sent (it was lost with the batch before)."""
    state = tmp_path / "s"
    fake = FakeCollector(REGISTRY)
    kw = dict(registry=REGISTRY, state_dir=state, transport=MemoryTransport(fake), retry=FAST,
              clock=lambda: DAY, max_batch_age=3600)
    first, second = TelemetryClient(**kw), TelemetryClient(**kw)
    assert second.report("crash", True) and second.report("theme", "dark")   # 2 ≤ cap in its mirror
    assert first.report("crash", False) and first.flush(5.0)               # spends 1 first
    second.flush(5.0)
    stats = second.stats()
    assert stats["reports_refused_at_commit"] == 1 and stats["refused_device_window"] == 1
    assert stats["charged"] == 1 and stats["internal_error"] == 0
    assert fake.accepted_reports == 2                         # first's and second's charged report
    assert epsilon_sent(fake) == CAP
    book = second.ledger_snapshot()
    assert book["crash"].window_reports == 2 and book["theme"].refused_device_window == 1
    first.close(1.0)
    second.close(1.0)


# --- clock errors ------------------------------------------------------------------------------------

def test_a_ten_year_clock_jump_does_not_silence_a_metric_until_that_date(tmp_path):
    """Injected clocks: a run reports, the clock jumps 10 years ahead for one run, then is
    corrected. The next day's run reports again (it was refused until the future date)."""
    from client_sdk.testing import ManualClock

    state = tmp_path / "s"
    fake = FakeCollector(REGISTRY)
    clock = ManualClock(DAY + 36_000.0)

    def one_run():
        client = TelemetryClient(registry=REGISTRY, state_dir=state, transport=MemoryTransport(fake),
                                 retry=FAST, clock=clock, elapsed_clock=clock.elapsed)
        sent = client.report("crash", True)
        client.flush(5.0)
        client.close(1.0)
        clock.advance(60)
        return sent

    assert one_run()
    clock.set_wall(DAY + 3652 * 86_400.0)    # ten years ahead
    assert one_run()
    clock.set_wall(DAY + 36_600.0)           # corrected, the same day: both reports bind (cap 2)
    assert not one_run()
    clock.advance(86_400.0)                   # the next day: reports again (was: silent until 2034)
    assert one_run() and one_run() and not one_run()   # reports_per_window 10, device cap 2
    assert fake.accepted_reports == 4


def test_the_async_client_reports_nothing_on_an_unusable_state_directory(tmp_path):
    import asyncio

    from client_sdk import AsyncTelemetryClient
    from client_sdk.testing import AsyncMemoryTransport

    state = tmp_path / "s"
    (state / "secret").mkdir(parents=True)
    fake = FakeCollector(REGISTRY)

    async def main():
        client = AsyncTelemetryClient(registry=REGISTRY, state_dir=state, transport=AsyncMemoryTransport(fake),
                                      retry=FAST, clock=lambda: DAY)
        assert client.report("theme", "dark") is False
        assert await client.aflush(2.0) is True          # nothing to send
        await client.aclose(1.0)
        return client.stats(), client.disabled_reason

    stats, reason = asyncio.run(main())
    assert stats["disabled_state"] == 1 and "cannot use the client secret" in reason
    assert fake.accepted_reports == 0


def _racer(state: str, out) -> None:
    fake = FakeCollector(REGISTRY)
    client = TelemetryClient(registry=REGISTRY, state_dir=state, transport=MemoryTransport(fake),
                             retry=FAST, clock=lambda: DAY, max_batch_age=3600)
    for metric, value in (("crash", True), ("theme", "dark"), ("crash", False)):
        client.report(metric, value)
    client.flush(10.0)
    client.close(2.0)
    stats = client.stats()
    out.put((epsilon_sent(fake), fake.accepted_reports, stats["charged"], stats["internal_error"]))


def test_processes_racing_the_device_cap_send_exactly_what_they_charged(tmp_path):
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(str(tmp_path / "s"), out)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(10)
    assert round(sum(r[0] for r in results), 6) == CAP                 # the cap, across processes
    assert sum(r[1] for r in results) == sum(r[2] for r in results) == 2   # charged = sent
    assert all(r[3] == 0 for r in results)
