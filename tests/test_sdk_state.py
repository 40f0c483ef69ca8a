"""Device state: the secret (32 bytes, 0600, created atomically, one per directory), derivations
from it, opt-out, and fork safety."""

from __future__ import annotations

import multiprocessing
import os
import stat

import pytest

from client_sdk import MemoryState, TelemetryClient
from client_sdk.state import (
    FileState,
    OptedOutError,
    StateError,
    derive_cohort,
    ledger_key,
    load_or_create_secret,
    value_digest,
)
from client_sdk.testing import MemoryTransport
from collector.testing import FakeCollector

from .sdk_support import file_lock, make_registry, wait_until  # noqa: F401 - file_lock: autouse


def test_the_secret_is_32_private_bytes_created_once(tmp_path):
    state = FileState(tmp_path / "s")
    secret = state.secret
    path = tmp_path / "s" / "secret"
    assert len(secret) == 32 and path.read_bytes() == secret
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "s").stat().st_mode) == 0o700
    assert FileState(tmp_path / "s").secret == secret            # stable across restarts
    assert FileState(tmp_path / "other").secret != secret
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["owner", "secret"]   # no temporary left


@pytest.mark.parametrize("owner", ["node", "jvm", "swift"])
def test_a_directory_another_sdk_owns_is_refused_and_reports_nothing(tmp_path, owner):
    """The SDKs' ledger locks do not exclude one another (flock(2), a lock file, fcntl(2)), so
    a directory owned by another SDK is refused before anything is charged (docs/conformance.md)."""
    state_dir = tmp_path / "s"
    state_dir.mkdir()
    (state_dir / "owner").write_text(f"{owner}\n")
    with pytest.raises(StateError, match=f"belongs to the '{owner}' SDK .*own state directory"):
        FileState(state_dir)
    client = TelemetryClient(make_registry(), state_dir=state_dir, transport=MemoryTransport(FakeCollector()))
    try:
        assert "belongs to the" in client.disabled_reason
        assert client.report("theme", "dark-secret-theme") is False
    finally:
        client.close()
    assert sorted(p.name for p in state_dir.iterdir()) == ["owner"]       # nothing written, no secret


def test_a_directory_used_by_the_jvm_sdk_before_owner_files_is_refused(tmp_path):
    (tmp_path / "ledger.jvmlock").write_bytes(b"")
    with pytest.raises(StateError, match="'jvm' SDK \\(its lock file ledger.jvmlock\\)"):
        FileState(tmp_path)
    assert not (tmp_path / "owner").exists()


def test_the_python_sdk_claims_its_own_and_unowned_directories(tmp_path):
    old = tmp_path / "old"                  # used by this SDK before owner files existed
    old.mkdir()
    (old / "ledger.lock").write_bytes(b"")
    FileState(old)
    assert (old / "owner").read_bytes() == b"python\n"
    FileState(old)                          # its own: opened again
    assert FileState(tmp_path / "new").path.joinpath("owner").read_bytes() == b"python\n"


def _create(path: str, queue) -> None:
    queue.put(load_or_create_secret(__import__("pathlib").Path(path)))


def test_processes_racing_to_create_the_secret_agree(tmp_path):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_create, args=(str(tmp_path / "secret"), queue)) for _ in range(6)]
    for p in procs:
        p.start()
    secrets = {queue.get(timeout=30) for _ in procs}
    for p in procs:
        p.join(10)
    assert len(secrets) == 1 and secrets == {(tmp_path / "secret").read_bytes()}


def test_a_foreign_secret_is_refused_and_a_loose_one_tightened(tmp_path):
    (tmp_path / "secret").write_bytes(b"short")
    with pytest.raises(StateError, match="not a client secret"):
        load_or_create_secret(tmp_path / "secret")
    (tmp_path / "secret").write_bytes(os.urandom(32))
    os.chmod(tmp_path / "secret", 0o644)
    load_or_create_secret(tmp_path / "secret")
    assert stat.S_IMODE((tmp_path / "secret").stat().st_mode) == 0o600


def test_derivations_are_stable_keyed_and_separated():
    a, b = os.urandom(32), os.urandom(32)
    assert derive_cohort(a, "app", 64) == derive_cohort(a, "app", 64)
    cohorts = {derive_cohort(os.urandom(32), "app", 8) for _ in range(200)}
    assert cohorts == set(range(8))                              # uniform enough to hit every cohort
    ka, kb = ledger_key(a), ledger_key(b)
    assert ka != a and len(ka) == 32
    d = value_digest(ka, "fp1", "dark")
    assert d == value_digest(ka, "fp1", "dark") and len(d) == 32
    assert d != value_digest(kb, "fp1", "dark")                  # keyed by the secret
    assert d != value_digest(ka, "fp2", "dark")                  # new parameters: new memo set
    assert d != value_digest(ka, "fp1", "light")


def test_memory_state_and_opt_out():
    state = MemoryState()
    assert len(state.secret) == 32
    state.opt_out()
    with pytest.raises(OptedOutError):
        state.secret  # noqa: B018
    state.opt_in()
    assert len(state.secret) == 32
    with pytest.raises(ValueError):
        MemoryState(secret=b"x")


def test_opt_in_after_opt_out_creates_a_new_secret(tmp_path):
    state = FileState(tmp_path / "s")
    old = state.secret
    state.opt_out()
    assert state.opted_out and not (tmp_path / "s" / "secret").exists()
    with pytest.raises(OptedOutError):
        FileState(tmp_path / "s").secret  # noqa: B018
    state.opt_in()
    assert not state.opted_out and state.secret != old


def test_an_unwritable_state_dir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StateError, match="cannot create the state directory"):
        FileState(blocker / "sub")


def test_a_forked_child_starts_with_an_empty_queue_and_its_own_worker(tmp_path):
    registry = make_registry()
    fake = FakeCollector(registry)
    client = TelemetryClient(registry=registry, state_dir=tmp_path / "s", transport=MemoryTransport(fake),
                             batch_size=100, max_batch_age=3600)
    client.report("country", "country-01")                     # queued in the parent, not sent yet
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()

    def child() -> None:
        before = len(client.uploader.batcher.queue)
        client.report("country", "country-02")
        ok = client.flush(5.0)
        queue.put((before, ok, fake.accepted_reports, [r["p"] for b in fake.batches for r in b["reports"]]))

    proc = ctx.Process(target=child)
    proc.start()
    before, ok, accepted, _ = queue.get(timeout=30)
    proc.join(10)
    assert proc.exitcode == 0
    assert before == 0                     # the parent's queued report is the parent's to send
    assert ok and accepted == 1            # the child sent only its own report
    assert client.flush(5.0)
    assert fake.accepted_reports == 1      # the parent sent its own, once
    acct = client.ledger_snapshot()["country"]
    assert acct.window_reports == 2        # one shared ledger: both reports charged, once each
    assert wait_until(lambda: client.stats()["queued"] == 0)
    client.close()
