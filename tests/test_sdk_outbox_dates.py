"""The offline outbox's dates (issue 26 §5): a batch built under a clock that ran ahead is
re-dated to the present when the clock is right again, the new date is stored, and the batch
expires on schedule — conformance/vectors/outbox.json, run on the memory and disk outboxes,
plus the whole client on a state directory with a clock set 30 days ahead and back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from client_sdk import RetryPolicy, TelemetryClient
from client_sdk.queue import DiskOutbox, MemoryOutbox, OutboxLimits, StoredBatch
from client_sdk.testing import Fault, ManualClock, MemoryTransport
from collector.testing import FakeCollector

from .sdk_support import make_registry

VECTORS = json.loads((Path(__file__).resolve().parents[1] / "conformance/vectors/outbox.json").read_text())
DAY = 86_400
T = 1_800_000_000


def _outboxes(tmp_path: Path):
    limits = OutboxLimits(max_age=VECTORS["max_age"])
    yield "memory", lambda: MemoryOutbox(limits)
    # A disk outbox that sweeps at every claim, and one that never sweeps (the claim's own path).
    yield "disk, sweeping", lambda: DiskOutbox(tmp_path / "sweep", limits, durable=False, sweep_interval=0.0)
    yield "disk, claim only", lambda: DiskOutbox(tmp_path / "claim", limits, durable=False, sweep_interval=1e12)


@pytest.mark.parametrize("case", VECTORS["cases"], ids=[c["name"] for c in VECTORS["cases"]])
def test_every_outbox_follows_the_vector(tmp_path, case):
    for kind, make in _outboxes(tmp_path / "x"):
        outbox = make()
        outbox.add(StoredBatch(bytes(16), b"\x80", case["reports"], case["created"]))
        for step in case["steps"]:
            batch = outbox.claim(step["now"])
            got = None if batch is None else batch.created
            assert got == step["created"], (kind, step)
            if batch is not None:
                outbox.release(batch)
        assert outbox.expired_reports == case["expired_reports"], kind
        assert outbox.pending() == 0, kind


def test_the_disk_outbox_stores_the_new_date_in_the_file_name(tmp_path):
    """Re-dated once, a batch keeps its new date for every other process and after a restart."""
    limits = OutboxLimits(max_age=7 * DAY)
    first = DiskOutbox(tmp_path, limits, durable=False, sweep_interval=1e12)
    first.add(StoredBatch(b"\x01" * 16, b"\x80", 2, T + 30 * DAY))
    (name,) = [p.name for p in first.iter_batches()]
    assert name.startswith(f"{(T + 30 * DAY) * 10**9:020d}-2-")
    batch = first.claim(T)
    assert batch.created == T
    first.release(batch)
    (renamed,) = [p.name for p in first.iter_batches()]
    assert renamed == f"{T * 10**9:020d}{name[20:]}"
    # A new process (a restart) reads the stored date: the batch expires 7 days after the repair.
    second = DiskOutbox(tmp_path, limits, durable=False, sweep_interval=0.0)
    assert second.claim(T + 7 * DAY + 1) is None and second.expired_reports == 2 and second.pending() == 0


def test_a_redated_batch_is_dropped_by_the_caps_as_the_oldest(tmp_path):
    """Dated in the future it sorted as the newest, so a cap dropped honest batches before it;
    re-dated, it takes its place among them."""
    for outbox in (MemoryOutbox(OutboxLimits(max_batches=2)),
                   DiskOutbox(tmp_path, OutboxLimits(max_batches=2), durable=False, sweep_interval=0.0)):
        outbox.add(StoredBatch(b"\x01" * 16, b"\x80", 1, T + 30 * DAY))   # under the clock ahead
        outbox.add(StoredBatch(b"\x02" * 16, b"\x80", 1, T))              # the clock is right again
        outbox.add(StoredBatch(b"\x03" * 16, b"\x80", 1, T + 60))
        ids = []
        while (batch := outbox.claim(T + 120)) is not None:
            ids.append(batch.batch_id)
        assert ids == [b"\x02" * 16, b"\x03" * 16], type(outbox).__name__
        assert outbox.dropped_reports == 1


def test_a_client_built_under_a_clock_30_days_ahead_expires_its_batch_on_schedule(tmp_path):
    """The issue's replay: a batch built under a +30-day clock was still sent 20 real days later
    (after the collector forgot its id). Now it is re-dated when the clock is repaired and
    expires max_age (7 days) after that; nothing is sent."""
    registry = make_registry()
    down = FakeCollector(registry)
    down.fail(*[Fault("drop")] * 10_000)
    clock = ManualClock(T + 30 * DAY)
    client = TelemetryClient(registry=registry, state_dir=tmp_path / "state", transport=MemoryTransport(down),
                             clock=clock, elapsed_clock=clock.elapsed, batch_size=1,
                             retry=RetryPolicy(initial=0.01, maximum=0.01, flush_interval=0.01))
    try:
        assert client.report("crash", True)
        client.flush(0.5)                                  # built and stored; the collector is down
        outbox = tmp_path / "state" / "outbox"
        (name,) = [p.name for p in outbox.glob("*.ldpb*")]
        assert int(name[:20]) == (T + 30 * DAY) * 10**9
        clock.set_wall(T)                                  # NTP sets the clock right
        client.flush(0.5)                                  # claims and retries re-date it
        (name,) = [p.name for p in outbox.glob("*.ldpb*")]
        assert int(name[:20]) == T * 10**9
        clock.advance(7 * DAY - 60)
        client.flush(0.5)
        assert client.stats()["outbox_pending"] == 1       # not yet 7 days since the repair
        clock.advance(120)
        client.flush(0.5)
        stats = client.stats()
        assert stats["outbox_pending"] == 0 and stats["outbox_expired_reports"] == 1
        assert down.accepted_reports == 0
    finally:
        client.close(0.5)
