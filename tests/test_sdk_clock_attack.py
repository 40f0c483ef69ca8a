"""Issue 26 §1 through a real client against a live collector: a device clock that cycles
between three days (or advances steadily) within one real day gains no budget.

The attack of the issue: a yes/no metric at ε 1, one report per window, ``[device]
epsilon_per_window = 1.0``, no lifetime cap; 91 wall-clock readings 15 minutes apart (22¾
real hours) cycling over today−6, today−3, today (or today, +3, +6; or {0, 1, 3}). Before the
device clock rule it sent 61 reports; the bar is at most 3. The clocks are injected
(``client_sdk.testing.ManualClock``): the wall clock jumps, real time advances 15 minutes per
reading; every report is charged (flushed) at its reading. Nothing sleeps.
"""

from __future__ import annotations

import pytest

from client_sdk import RetryPolicy, TelemetryClient
from client_sdk.testing import ManualClock
from collector.storage.sqlite import open_store
from sketches import server_half

from .sdk_support import collector, file_lock, make_registry  # noqa: F401 - file_lock: autouse

pytestmark = pytest.mark.e2e

DAY = 86_400
TODAY = 20_000 * DAY + 9 * 3600          # 09:00 UTC of 2024-10-04
ATTACK_TOML = """
[device]
epsilon_per_window = 1.0

[metrics.vote]
kind = "boolean"
protocol = "rr"
epsilon = 1.0
reports_per_window = 1
"""
CYCLES = {"past": (-6, -3, 0), "future": (0, 3, 6), "near": (0, 1, 3)}


def attack(url: str, state_dir, offsets, readings: int = 91, step: float = 900.0) -> tuple[int, object]:
    """One device whose wall clock reads today + offsets[i % len] at reading i; returns what the
    collector acknowledged and the ledger's clock state."""
    clock = ManualClock(TODAY)
    client = TelemetryClient(url, make_registry(ATTACK_TOML), state_dir, clock=clock, elapsed_clock=clock.elapsed,
                             retry=RetryPolicy(initial=0.05, maximum=0.5), max_batch_age=0.01)
    assert client.wait_for_registry(10.0)
    for i in range(readings):
        clock.set_wall(TODAY + i * step + offsets[i % len(offsets)] * DAY)
        client.report("vote", True)
        assert client.flush(10.0)
        clock.advance(step)
        clock.set_wall(TODAY + (i + 1) * step)
    stats = client.stats()
    book = client.ledger_snapshot()
    assert client.close(10.0)
    refused = stats["refused_window"] + stats["refused_device_window"]
    assert stats["reports_acked"] + refused == readings     # every other report refused, never sent
    return stats["reports_acked"], book


def stored(tmp_path) -> int:
    spec = make_registry(ATTACK_TOML).get("vote")
    store = open_store(tmp_path / "store.sqlite")
    try:
        return store.load(spec.name, spec.fingerprint, server_half(spec).new_sketch()).total_reports  # all windows
    finally:
        store.close()


@pytest.mark.parametrize("name", sorted(CYCLES))
def test_the_three_day_clock_cycle_sends_at_most_three_reports_in_a_real_day(tmp_path, name):
    with collector(tmp_path, ATTACK_TOML) as col:
        acked, book = attack(col.url, tmp_path / "device", CYCLES[name])
    assert acked <= 3, acked                       # was 61 of 91
    assert stored(tmp_path) == acked               # the collector holds what was acknowledged
    assert book["vote"].lifetime_reports == acked
    print(f"clock cycle {CYCLES[name]}: {acked} of 91 reports sent in 22.75 real hours")


def test_a_steadily_advancing_fake_clock_sends_at_most_three_reports_in_a_real_day(tmp_path):
    """0, +1, +2, … +90 days in 91 readings over 22¾ real hours: each reading a new day."""
    with collector(tmp_path, ATTACK_TOML) as col:
        acked, book = attack(col.url, tmp_path / "device", tuple(range(91)))
    assert acked <= 3, acked
    assert stored(tmp_path) == acked
    assert book.clock.opened <= 2


def test_the_cycle_across_restarts_and_a_reboot_gains_one_window_per_boot(tmp_path):
    """The same cycle, the app restarted after every report (each restart reads the book from
    disk) and the device rebooted once: the boot clock connects the restarts; the reboot is a
    new epoch, which may open one window (docs/privacy.md)."""
    clock = ManualClock(TODAY)
    with collector(tmp_path, ATTACK_TOML) as col:
        acked = 0
        for i in range(91):
            if i == 45:
                clock.reboot()
            client = TelemetryClient(col.url, make_registry(ATTACK_TOML), tmp_path / "device", clock=clock,
                                     elapsed_clock=clock.elapsed, retry=RetryPolicy(initial=0.05, maximum=0.5))
            assert client.wait_for_registry(10.0)
            clock.set_wall(TODAY + i * 900.0 + (-6, -3, 0)[i % 3] * DAY)
            client.report("vote", True)
            assert client.close(10.0)
            acked += client.stats()["reports_acked"]
            clock.advance(900.0)
    assert acked <= 3 + 1, acked
    assert stored(tmp_path) == acked
