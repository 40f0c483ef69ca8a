"""An SDK that embeds anywhere and never hurts its host app: portable file locking and
atomic replace, construction that never raises or blocks, flush that sends now, opt-in,
refusal logs, a stray outbox file, leaked temporary files, options, and test doubles that
validate with the collector's own code."""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import subprocess
import sys
import threading
import time

import msgpack
import pytest

from client_sdk import AsyncTelemetryClient, ClientOptions, MemoryState, RetryPolicy, TelemetryClient, files
from client_sdk.errors import RegistryError, StateError
from client_sdk.ledger import LEDGER_FILE
from client_sdk.queue import MemoryOutbox, StoredBatch
from client_sdk.state import FileState, UnusableState
from client_sdk.testing import FlockMsvcrt, MemoryTransport
from client_sdk.transport import Response, TransportError
from client_sdk.uploader import Batcher, pack_batch
from collector.testing import FakeCollector

from .sdk_support import file_lock, make_registry  # noqa: F401 - file_lock: autouse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = RetryPolicy(initial=0.01, maximum=0.05)


@pytest.fixture
def registry():
    return make_registry()


class Switch(MemoryTransport):
    """A MemoryTransport whose collector can be down (TransportError) or hang on GET /v1/registry."""

    def __init__(self, collector: FakeCollector, *, down: bool = False) -> None:
        super().__init__(collector)
        self.down = down
        self.hang = threading.Event()       # set: GET /v1/registry blocks until `release`
        self.release = threading.Event()
        self.fetches = 0

    def request(self, method, path, body=None, headers=None):
        if path == "/v1/registry":
            self.fetches += 1
            if self.hang.is_set() and not self.release.wait(30):
                raise TransportError("hung (test)")
        if self.down:
            raise TransportError("connection refused (test)")
        return super().request(method, path, body, headers)


# --- portable locking and atomic replace ---------------------------------------------------------------

def test_the_sdk_imports_and_reports_without_fcntl(tmp_path):
    """As on Windows: no fcntl module; msvcrt.locking does the locking."""
    code = f"""
import sys, types
sys.modules["fcntl"] = None          # import fcntl raises ImportError, as on Windows
calls = []
sys.modules["msvcrt"] = types.SimpleNamespace(LK_UNLCK=0, LK_NBLCK=2,
                                              locking=lambda fd, mode, n: calls.append(mode))
from client_sdk import TelemetryClient, files
from client_sdk.registry import parse_registry
assert files.LOCK.name == "portable", files.LOCK
reg = parse_registry('[metrics.crash]\\nkind = "boolean"\\nprotocol = "rr"\\nepsilon = 1.0\\n')
class Ok:
    def post_batch(self, body):
        from client_sdk.transport import Response
        return Response(200, {{}}, b'{{"accepted": 1, "duplicate": false}}')
    def close(self): pass
from client_sdk.transport import Transport
class T(Ok, Transport): pass
client = TelemetryClient(registry=reg, state_dir={str(tmp_path / "s")!r}, transport=T())
assert client.report("crash", True) and client.flush(5.0)
client.close()
assert calls.count(2) >= 1 and calls.count(2) == calls.count(0), calls
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_default_lock_is_flock_here_and_msvcrt_without_fcntl(monkeypatch):
    assert isinstance(files.default_lock(), files.FlockLock)
    shim = FlockMsvcrt()
    monkeypatch.setitem(sys.modules, "fcntl", None)
    monkeypatch.setitem(sys.modules, "msvcrt", shim)
    assert isinstance(files.default_lock(), files.ByteRangeLock)


def test_byte_range_lock_excludes_a_second_handle_until_released(tmp_path):
    path = tmp_path / "l.lock"
    waits: list[float] = []
    fake = FlockMsvcrt()
    held = os.open(path, os.O_RDWR | os.O_CREAT)
    first = files.ByteRangeLock(fake)
    first.acquire(held)

    def sleep(delay: float) -> None:        # the second handle polls; the holder lets go meanwhile
        waits.append(delay)
        if len(waits) == 3:
            first.release(held)

    second = files.ByteRangeLock(fake, poll=0.001, max_poll=0.004, sleep=sleep)
    fd = os.open(path, os.O_RDWR)
    second.acquire(fd)                      # same process, another handle: excluded, as on Windows
    assert waits == [0.001, 0.002, 0.004]   # exponential back-off, capped
    second.release(fd)
    os.close(fd)
    os.close(held)
    assert fake.calls[fake.LK_NBLCK] == 5 and fake.calls[fake.LK_UNLCK] == 2


def test_byte_range_lock_raises_errors_other_than_busy(tmp_path):
    class Broken(FlockMsvcrt):
        def locking(self, fd, mode, nbytes):
            raise OSError(9, "bad file descriptor")

    with pytest.raises(OSError, match="bad file"):
        files.ByteRangeLock(Broken()).acquire(0)


def test_replace_retries_sharing_violations_then_gives_up(tmp_path, monkeypatch):
    src, dst = tmp_path / "a", tmp_path / "b"
    src.write_bytes(b"new")
    real, failures = os.replace, []

    def flaky(a, b):
        if len(failures) < 2:
            failures.append(a)
            raise PermissionError(13, "sharing violation")
        real(a, b)

    monkeypatch.setattr(files.os, "replace", flaky)
    slept: list[float] = []
    files.replace(src, dst, retries=3, sleep=slept.append)
    assert dst.read_bytes() == b"new" and len(slept) == 2
    failures.clear()
    src.write_bytes(b"x")
    with pytest.raises(PermissionError):
        files.replace(src, dst, retries=1, sleep=slept.append)


def test_atomic_write_leaves_no_temporary_when_the_replace_fails(tmp_path, monkeypatch):
    def refuse(a, b, **kw):
        raise PermissionError(13, "denied")

    monkeypatch.setattr(files, "replace", refuse)
    with pytest.raises(PermissionError):
        files.atomic_write(tmp_path / "f", b"data")
    assert list(tmp_path.iterdir()) == []


def test_temporary_files_left_by_killed_writes_are_removed_at_open(tmp_path):
    state = tmp_path / "s"
    outbox = state / "outbox"
    outbox.mkdir(parents=True)
    ledger_tmp = state / f".{LEDGER_FILE}.4242.deadbeef.tmp"       # a kill between write and rename
    old_secret_tmp = state / ".secret.4242.deadbeef.tmp"
    old_batch_tmp = outbox / ".00000000000000000001-1-00.ldpb.4242.deadbeef.tmp"
    fresh_batch_tmp = outbox / ".00000000000000000002-1-00.ldpb.4243.deadbeef.tmp"   # a live writer's
    for p in (ledger_tmp, old_secret_tmp, old_batch_tmp, fresh_batch_tmp):
        p.write_bytes(b"partial")
    hour_ago = time.time() - 3600
    for p in (old_secret_tmp, old_batch_tmp):
        os.utime(p, (hour_ago, hour_ago))
    client = TelemetryClient(registry=make_registry(), state_dir=state,
                             transport=MemoryTransport(FakeCollector(make_registry())), retry=FAST)
    assert not ledger_tmp.exists()          # under the ledger lock: removed whatever its age
    assert not old_secret_tmp.exists() and not old_batch_tmp.exists()
    assert fresh_batch_tmp.exists()
    client.close(1.0)


# --- construction never raises, never blocks --------------------------------------------------------

def test_unwritable_state_dir_never_raises_and_reports_nothing(tmp_path, registry, monkeypatch, caplog):
    """The spend of a run that cannot persist it would be spent again by the next run: no report
    (tests/test_sdk_persistence.py holds the budget across restarts)."""
    state = tmp_path / "s"
    fake = FakeCollector(registry)
    first = TelemetryClient(registry=registry, state_dir=state, transport=MemoryTransport(fake), retry=FAST)
    assert first.report("theme", "dark-secret-theme") and first.flush(5.0)
    first.close(1.0)
    real_access = os.access
    monkeypatch.setattr("client_sdk.state.os.access",
                        lambda p, mode: False if str(p) == str(state) else real_access(p, mode))
    with pytest.raises(StateError, match="not writable"):
        TelemetryClient(registry=registry, state_dir=state, transport=MemoryTransport(fake), strict=True)
    with caplog.at_level(logging.WARNING, logger="client_sdk"):
        client = TelemetryClient(registry=registry, state_dir=state, transport=MemoryTransport(fake), retry=FAST)
    assert isinstance(client.state, UnusableState)
    assert sum("reporting is disabled" in r.getMessage() for r in caplog.records) == 1
    assert client.ledger_snapshot()["theme"].window_reports == 1   # the book on disk, for display
    assert client.report("crash", True) is False and client.flush(5.0)
    assert client.stats()["disabled_state"] == 1 and fake.accepted_reports == 1
    client.close(1.0)


def test_uncreatable_state_dir_and_unreadable_secret_never_raise(tmp_path, registry):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    fake = FakeCollector(registry)
    client = TelemetryClient(registry=registry, state_dir=blocker / "s", transport=MemoryTransport(fake), retry=FAST)
    assert isinstance(client.state, UnusableState)
    assert client.report("crash", True) is False and client.flush(5.0) and fake.accepted_reports == 0
    assert "cannot create the state directory" in client.disabled_reason
    client.close(1.0)
    with pytest.raises(StateError):
        TelemetryClient(registry=registry, state_dir=blocker / "s", transport=MemoryTransport(fake), strict=True)
    odd = tmp_path / "odd"
    (odd / "secret").mkdir(parents=True)                         # the secret cannot be read as a file
    other = TelemetryClient(registry=registry, state_dir=odd, transport=MemoryTransport(fake), retry=FAST)
    assert isinstance(other.state, UnusableState) and other.report("crash", True) is False
    assert other.stats()["disabled_state"] == 1 and fake.accepted_reports == 0
    other.close(1.0)
    mem = TelemetryClient(registry=registry, state=MemoryState(), transport=MemoryTransport(fake), retry=FAST)
    assert mem.report("crash", True) and mem.flush(5.0)          # in memory when asked for explicitly
    mem.close(1.0)


def test_a_corrupt_secret_is_moved_aside_and_replaced(tmp_path, registry, caplog):
    state = tmp_path / "s"
    state.mkdir()
    (state / "secret").write_bytes(b"short")
    fake = FakeCollector(registry)
    with pytest.raises(StateError, match="not a client secret"):
        TelemetryClient(registry=registry, state_dir=state, transport=MemoryTransport(fake), strict=True)
    with caplog.at_level(logging.WARNING, logger="client_sdk"):
        client = TelemetryClient(registry=registry, state_dir=state, transport=MemoryTransport(fake), retry=FAST)
    assert isinstance(client.state, FileState)
    assert len((state / "secret").read_bytes()) == 32
    moved = [p for p in state.iterdir() if p.name.startswith("secret.corrupt-")]
    assert len(moved) == 1 and moved[0].read_bytes() == b"short"
    warning = next(r.getMessage() for r in caplog.records if "new secret" in r.getMessage())
    assert "delete the file" not in warning   # the strict error's advice; here the SDK did it itself
    assert client.report("site", "www.example.org") and client.flush(5.0)
    client.close(1.0)


def test_a_missing_or_mismatched_registry_file_disables_reporting_instead_of_raising(tmp_path, registry, caplog):
    missing = tmp_path / "metrics.toml"
    with pytest.raises(RegistryError, match="not found"):
        TelemetryClient(registry=missing, state=MemoryState(), transport=MemoryTransport(FakeCollector()), strict=True)
    with caplog.at_level(logging.ERROR, logger="client_sdk"):
        client = TelemetryClient(registry=missing, state=MemoryState(), transport=MemoryTransport(FakeCollector()))
        pinned = TelemetryClient(registry=registry, state=MemoryState(), transport=MemoryTransport(FakeCollector()),
                                 pins={"theme": "0" * 32})
    for c in (client, pinned):
        assert c.report("crash", True) is False and c.stats()["disabled"] == 1
        assert c.flush(1.0) is True                   # nothing to send
        c.close(0.5)
    assert sum("reporting is disabled" in r.getMessage() for r in caplog.records) == 2


def test_without_registry_a_hung_collector_never_blocks_construction(tmp_path, registry):
    transport = Switch(FakeCollector(registry))
    transport.hang.set()
    client = TelemetryClient(state_dir=tmp_path / "s", transport=transport, retry=FAST)
    assert client.registry is None                    # returned while GET /v1/registry hangs
    assert client.report("theme", "dark-secret-theme") is True
    assert client.stats()["awaiting_registry"] == 1
    with pytest.raises(RegistryError, match="not known yet"):
        client.validate("theme", "dark-secret-theme")
    transport.release.set()
    assert client.flush(10.0) is True
    assert transport.collector.accepted_reports == 1 and client.stats()["reported"] == 1
    client.close(1.0)


def test_collector_down_at_start_then_back_flush_sends_at_once(tmp_path, registry):
    transport = Switch(FakeCollector(registry), down=True)
    slow = RetryPolicy(initial=60.0, maximum=60.0)                 # a back-off no test waits out
    client = TelemetryClient(state_dir=tmp_path / "s", transport=transport, retry=slow)
    assert client.report("crash", True) is True
    assert client.flush(0.0) is False
    transport.down = False
    assert client.flush(10.0) is True                               # the fetch is retried now
    assert transport.collector.accepted_reports == 1
    client.close(1.0)
    never = TelemetryClient(state_dir=tmp_path / "n", transport=Switch(FakeCollector(registry), down=True))
    assert never.report("crash", True) is True
    never.close(0.0)
    assert never.stats()["dropped_no_registry"] == 1 and never.report("crash", True) is False


def _child_has_nothing_waiting(client, out) -> None:
    out.put(client.stats()["awaiting_registry"])


def test_a_forked_child_does_not_replay_what_waited_in_the_parent(tmp_path, registry):
    import multiprocessing

    transport = Switch(FakeCollector(registry))
    transport.hang.set()
    client = TelemetryClient(state_dir=tmp_path / "s", transport=transport, retry=FAST)
    assert client.report("crash", True) and client.stats()["awaiting_registry"] == 1
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_child_has_nothing_waiting, args=(client, out))
    child.start()
    assert out.get(timeout=30) == 0 and client.stats()["awaiting_registry"] == 1
    child.join(30)
    transport.release.set()
    assert client.flush(10.0) and transport.collector.accepted_reports == 1
    client.close(1.0)


def test_async_client_without_registry_never_blocks(tmp_path, registry):
    import asyncio

    transport = Switch(FakeCollector(registry))
    transport.hang.set()

    async def main():
        client = AsyncTelemetryClient(state_dir=tmp_path / "s", transport=transport, retry=FAST)
        assert client.registry is None and client.report("crash", True)
        transport.release.set()
        assert await client.aflush(10.0) is True
        await client.aclose()

    asyncio.run(main())
    assert transport.collector.accepted_reports == 1


# --- flush means "send now" -------------------------------------------------------------------------

def _one_batch(batcher: Batcher) -> None:
    batch_id, body = pack_batch([("crash", "f", 1)])
    batcher.outbox.add(StoredBatch(batch_id, body, 1, time.time()))


def test_flush_cuts_our_back_off_but_not_the_servers_retry_after():
    batcher = Batcher(MemoryOutbox(), retry=RetryPolicy(initial=100.0, maximum=100.0, flush_interval=0.5))
    _one_batch(batcher)
    batch = batcher.claim(0.0)
    batcher.handle(batch, None, TransportError("down"), 0.0)
    assert batcher.backoff_until >= 50.0 and batcher.claim(1.0) is None
    batcher.begin_flush(1.0)                       # flush: one attempt right away ...
    batch = batcher.claim(1.0)
    assert batch is not None
    batcher.handle(batch, None, TransportError("still down"), 1.0)
    assert batcher.backoff_until <= 1.5            # ... then at most flush_interval apart
    batch = batcher.claim(1.5)
    retry_after = Response(503, {"retry-after": "30"}, b"")
    batcher.handle(batch, retry_after, None, 1.5)
    assert batcher.backoff_until == 31.5           # the collector asked: honoured even in a flush
    batcher.end_flush()
    batcher.begin_flush(2.0)
    assert batcher.claim(2.0) is None
    batcher.end_flush()


def test_flush_after_an_outage_returns_once_the_collector_is_back(tmp_path, registry):
    transport = Switch(FakeCollector(registry), down=True)
    slow = RetryPolicy(initial=60.0, maximum=60.0)
    client = TelemetryClient(registry=registry, state_dir=tmp_path / "s", transport=transport, retry=slow,
                             max_batch_age=0.0)
    assert client.report("crash", True)            # the worker sends at once; the send fails
    assert _wait(lambda: client.stats()["network_errors"] >= 1)
    transport.down = False                          # back; our back-off still has ~30-60 s to run
    assert client.flush(10.0) is True
    assert transport.collector.accepted_reports == 1
    client.close(1.0)


def test_aflush_after_an_outage_returns_once_the_collector_is_back(tmp_path, registry):
    import asyncio

    from client_sdk.testing import AsyncMemoryTransport

    class Down(AsyncMemoryTransport):
        down = True

        async def arequest(self, method, path, body=None, headers=None):
            if self.down:
                raise TransportError("connection refused (test)")
            return await super().arequest(method, path, body, headers)

    transport = Down(FakeCollector(registry))

    async def main():
        client = AsyncTelemetryClient(registry=registry, state_dir=tmp_path / "s", transport=transport,
                                      retry=RetryPolicy(initial=60.0, maximum=60.0), max_batch_age=0.0)
        client.report("crash", True)
        for _ in range(1000):                       # the worker's first send fails by itself
            if client.stats()["network_errors"]:
                break
            await asyncio.sleep(0.01)
        assert client.stats()["network_errors"] >= 1
        transport.down = False
        assert await client.aflush(10.0) is True    # not after the 30-60 s back-off
        await client.aclose()

    asyncio.run(main())
    assert transport.collector.accepted_reports == 1


def _wait(predicate, timeout: float = 10.0) -> bool:
    """Poll for a condition the worker reaches by itself (not a race against a timeout)."""
    from .sdk_support import wait_until

    return wait_until(predicate, timeout)


# --- opt-in, refusal logs, stray outbox files ----------------------------------------------------------

@pytest.mark.parametrize("where", ["dir", "memory"])
def test_opt_in_resumes_reporting_on_the_same_client(tmp_path, registry, where):
    fake = FakeCollector(registry)
    kw = {"state_dir": tmp_path / "s"} if where == "dir" else {"state": MemoryState()}
    client = TelemetryClient(registry=registry, transport=MemoryTransport(fake), retry=FAST, **kw)
    old_secret = client.state.secret
    client.opt_out()
    assert client.report("crash", True) is False and client.opted_out
    client.opt_in()
    assert not client.opted_out and client.state.secret != old_secret
    assert client.report("crash", True) is True and client.flush(5.0) is True
    assert fake.accepted_reports == 1
    client.close(1.0)


def test_budget_refusals_are_logged_once_per_metric_and_kind(tmp_path, registry, caplog):
    client = TelemetryClient(registry=registry, state=MemoryState(),
                             transport=MemoryTransport(FakeCollector(registry)), retry=FAST)
    with caplog.at_level(logging.INFO, logger="client_sdk"):
        results = [client.report("crash", True) for _ in range(6)]          # 3 per window
        results += [client.report("theme", "dark-secret-theme") for _ in range(3)]
    assert results == [True] * 3 + [False] * 3 + [True, False, False]
    refusals = [r.getMessage() for r in caplog.records if "refused by the privacy budget" in r.getMessage()]
    assert len(refusals) == 2 and "'crash'" in refusals[0] and "'theme'" in refusals[1]
    assert all("reports_per_window" in m and "secret-theme" not in m for m in refusals)
    client.close(1.0)


def test_a_refusal_at_commit_time_is_logged_too(tmp_path, registry, caplog):
    fake = FakeCollector(registry)
    a, b = (TelemetryClient(registry=registry, state_dir=tmp_path / "shared", transport=MemoryTransport(fake),
                            retry=FAST) for _ in range(2))          # two processes of one app, say
    assert all(a.report("crash", True) for _ in range(3)) and a.flush(5.0)
    with caplog.at_level(logging.INFO, logger="client_sdk"):
        assert b.report("crash", True) is True                      # b's mirror predates a's spend
        b.flush(5.0)
    assert b.stats()["refused_window"] == 1 and fake.accepted_reports == 3
    assert sum("refused by the privacy budget" in r.getMessage() for r in caplog.records) == 1
    a.close(1.0)
    b.close(1.0)


def test_stray_files_in_the_outbox_never_block_flush(tmp_path, registry, caplog):
    outbox = tmp_path / "s" / "outbox"
    outbox.mkdir(parents=True)
    (outbox / "garbage.ldpb").write_bytes(b"not a batch")
    (outbox / "notes.txt").write_text("left by someone")
    (outbox / "00000000000000000001-1-0011.ldpb").mkdir()               # a batch name, not a file
    fake = FakeCollector(registry)
    with caplog.at_level(logging.WARNING, logger="client_sdk"):
        client = TelemetryClient(registry=registry, state_dir=tmp_path / "s", transport=MemoryTransport(fake),
                                 retry=FAST)
        assert client.report("crash", True) and client.flush(5.0) is True
    assert fake.accepted_reports == 1 and client.stats()["outbox_pending"] == 0
    quarantined = sorted(p.name.split(".ldpb")[0] for p in (outbox / "quarantine").iterdir())
    assert quarantined == ["00000000000000000001-1-0011", "garbage"]
    assert (outbox / "notes.txt").exists()                               # not ours: left alone
    assert sum("quarantine" in r.getMessage() for r in caplog.records) == 1
    client.close(1.0)


# --- options and test doubles --------------------------------------------------------------------------

def test_one_options_object_for_both_clients(tmp_path, registry):
    sync_params = inspect.signature(TelemetryClient.__init__).parameters
    async_params = inspect.signature(AsyncTelemetryClient.__init__).parameters
    assert list(sync_params) == list(async_params)
    assert "options" in sync_params and "batch_size" not in sync_params
    with pytest.raises(TypeError, match="batch_sise"):
        TelemetryClient(registry=registry, state=MemoryState(), transport=MemoryTransport(FakeCollector()), batch_sise=5)
    opts = ClientOptions(batch_size=7, retry=FAST)
    client = TelemetryClient(registry=registry, state=MemoryState(), transport=MemoryTransport(FakeCollector()),
                             options=opts, max_batch_age=2.0)
    assert client.options == dataclasses.replace(opts, max_batch_age=2.0)
    assert client.uploader.batcher.batch_size == 7 and client.uploader.batcher.max_batch_age == 2.0
    client.close(0.5)


def test_fake_collector_answers_with_the_collectors_own_problems(registry):
    from collector.ingest import BatchDecoder
    from collector.problems import Problem

    body = msgpack.packb({"v": 1, "batch_id": b"\x01" * 16,
                          "reports": [{"m": "crash", "f": registry.get("crash").fingerprint, "p": 1, "x": 0}]},
                         use_bin_type=True)
    with pytest.raises(Problem) as real:
        BatchDecoder(registry).decode(body, "2026-12-01")
    fake = FakeCollector(registry).ingest(body)
    doc = fake.json()
    assert fake.status == real.value.status == 422
    assert doc["type"].endswith("/" + real.value.slug) and doc["detail"] == real.value.detail
    assert doc["report_index"] == 0 and doc["field"] == "x"


def test_close_reports_what_it_could_not_deliver(tmp_path, registry, caplog):
    """Registry never fetched, collector down: close() returned True after dropping reports
    (issue 23). It returns False, undelivered() names the loss, and one warning says it."""
    never = TelemetryClient(state_dir=tmp_path / "n", transport=Switch(FakeCollector(registry), down=True))
    assert never.report("crash", True) is True and never.report("crash", False) is True
    with caplog.at_level("WARNING", logger="ldpt"):
        assert never.close(0.0) is False
    assert never.undelivered() == {"dropped_no_registry": 2}
    assert "not delivered: dropped_no_registry 2" in caplog.text
    fine = TelemetryClient(state_dir=tmp_path / "f", transport=Switch(FakeCollector(registry), down=False))
    assert fine.report("crash", True) is True
    assert fine.close(10.0) is True and fine.undelivered() == {}


def test_aclose_reports_what_it_could_not_deliver(tmp_path, registry):
    import asyncio

    async def scenario() -> tuple[bool, dict[str, int]]:
        client = AsyncTelemetryClient(state_dir=tmp_path / "a", transport=Switch(FakeCollector(registry), down=True))
        client.report("crash", True)
        return await client.aclose(0.0), client.undelivered()

    assert asyncio.run(scenario()) == (False, {"dropped_no_registry": 1})
