"""The SDK and ledger with memoised protocols and the device-wide budget (issue 9 bars).

- a device reporting one unchanged value daily for 365 simulated days (injected clock):
  lifetime spend <= ε∞ and every report is still sent;
- a value that changes every day under LOLOHA: lifetime <= g·ε∞;
- ``[device] epsilon_per_window = 2`` with three ε = 1 metrics: two reports a day, the third
  refused and counted — also with two processes reporting at once on one state directory;
- ``ldpt ledger`` shows the device totals.
"""

from __future__ import annotations

import json
import multiprocessing

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import main
from client_sdk import RetryPolicy, TelemetryClient
from client_sdk.ledger import read_ledger
from client_sdk.state import MemoryState
from client_sdk.testing import MemoryTransport
from collector.testing import FakeCollector
from sketches import server_half

from .sdk_support import make_registry

DAY = 86_400
START = 1_790_000_000.0   # some day in 2026

MEMO_TOML = """
[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system"]
protocol = "lgrr"
epsilon = 1.0
epsilon_inf = 4.0

[metrics.bars]
kind = "categorical"
categories = ["b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8", "b9"]
protocol = "losue"
epsilon = 1.0
epsilon_inf = 3.0

[metrics.city]
kind = "categorical"
categories = ["c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9", "c10", "c11"]
protocol = "loloha"
epsilon = 1.0
epsilon_inf = 3.0
hash_range = 2

[metrics.hist]
kind = "categorical"
categories = ["h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7"]
protocol = "dbitflip"
sampled_buckets = 2
epsilon = 1.0
epsilon_inf = 3.0

[metrics.plain]
kind = "categorical"
categories = ["light", "dark", "system"]
protocol = "grr"
epsilon = 1.0
"""

DEVICE_TOML = """
[device]
epsilon_per_window = 2

[metrics.a]
kind = "boolean"
protocol = "rr"
epsilon = 1.0

[metrics.b]
kind = "boolean"
protocol = "rr"
epsilon = 1.0

[metrics.c]
kind = "boolean"
protocol = "rr"
epsilon = 1.0
"""


class Clock:
    """An injectable wall clock (seconds since the epoch) that is right: the elapsed clock
    (client_sdk.device_clock) moves with it, so simulated days are real days to the ledger."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def elapsed(self) -> tuple[str, int]:
        return "boot:simulated", int(self.now)


def client_for(registry, clock, **kw):
    fake = FakeCollector(registry)
    client = TelemetryClient(registry=registry, transport=MemoryTransport(fake), clock=clock,
                             elapsed_clock=clock.elapsed, batch_size=50, max_batch_age=0.01, **kw)
    return client, fake


def test_a_year_of_one_unchanged_value_costs_at_most_epsilon_inf():
    registry = make_registry(MEMO_TOML)
    clock = Clock(START)
    client, fake = client_for(registry, clock, state=MemoryState(), strict=True)
    for day in range(365):
        clock.now = START + day * DAY
        for metric in ("theme", "bars", "plain"):
            assert client.report(metric, "dark" if metric != "bars" else "b3")
        assert client.flush(10.0)   # the worker charges each day's reports that day (the elapsed clock)
    assert client.flush(10.0)
    book = client.ledger_snapshot()
    client.close()
    for metric in ("theme", "bars"):
        eps_inf = server_half(registry.get(metric)).epsilon_longitudinal
        assert book[metric].lifetime_reports == 365
        assert book[metric].lifetime_epsilon <= eps_inf * (1 + 1e-9)
        assert book[metric].distinct_values == 1
    assert book["plain"].lifetime_epsilon == pytest.approx(365 * server_half(registry.get("plain")).epsilon)
    assert fake.accepted_reports == 3 * 365      # every report still sent


def test_loloha_spends_at_most_g_epsilon_inf_however_often_the_value_changes():
    registry = make_registry(MEMO_TOML)
    clock = Clock(START)
    client, fake = client_for(registry, clock, state=MemoryState(), strict=True)
    for day in range(365):
        clock.now = START + day * DAY
        assert client.report("city", f"c{day % 12}")       # a new value every day
        assert client.report("theme", ["light", "dark", "system"][day % 3])
        assert client.report("hist", f"h{day % 8}")
        assert client.flush(10.0)
    assert client.flush(10.0)
    book = client.ledger_snapshot()
    client.close()
    proto = server_half(registry.get("city"))
    assert proto.params.g == 2
    assert book["city"].lifetime_reports == 365
    assert book["city"].distinct_values <= 2
    assert book["city"].lifetime_epsilon <= 2 * proto.epsilon_longitudinal * (1 + 1e-9)
    # L-GRR: one ε∞ per distinct value (3 values), not per report
    theme_inf = server_half(registry.get("theme")).epsilon_longitudinal
    assert book["theme"].lifetime_epsilon == pytest.approx(3 * theme_inf)
    # dBitFlipPM: one ε∞ per sampled bucket holding the value, or none: at most (d+1)·ε∞
    hist = server_half(registry.get("hist"))
    assert book["hist"].distinct_values <= 3
    assert book["hist"].lifetime_epsilon <= 3 * hist.epsilon_longitudinal * (1 + 1e-9)
    assert fake.accepted_reports == 3 * 365


def test_device_cap_sends_two_reports_a_day_and_refuses_the_third():
    registry = make_registry(DEVICE_TOML)
    clock = Clock(START)
    client, fake = client_for(registry, clock, state=MemoryState())
    for day in range(3):
        clock.now = START + day * DAY
        sent = [client.report(m, True) for m in ("a", "b", "c")]
        assert sent == [True, True, False], day
        assert client.flush(10.0)
    assert client.flush(10.0)
    stats = client.stats()
    book = client.ledger_snapshot()
    client.close()
    assert fake.accepted_reports == 6
    assert stats["refused_device_window"] == 3
    assert book["c"].refused_device_window == 3 and book["c"].lifetime_reports == 0


def test_device_lifetime_cap_refuses_once_spent():
    registry = make_registry(DEVICE_TOML.replace("epsilon_per_window = 2", "lifetime_epsilon = 4.5"))
    clock = Clock(START)
    client, _ = client_for(registry, clock, state=MemoryState())
    sent = []
    for day in range(3):
        clock.now = START + day * DAY
        sent += [client.report(m, True) for m in ("a", "b", "c")]
        assert client.flush(10.0)
    assert client.flush(10.0)
    assert sum(sent) == 4 and client.stats()["refused_device_lifetime"] == 5
    client.close()


def _device_process(state_dir: str, day: int, queue) -> None:
    registry = make_registry(DEVICE_TOML)
    fake = FakeCollector(registry)
    client = TelemetryClient(registry=registry, state_dir=state_dir, transport=MemoryTransport(fake),
                             clock=lambda: START + day * DAY,
                             elapsed_clock=lambda: ("boot:simulated", int(START + day * DAY)),
                             batch_size=1, max_batch_age=0.001,
                             retry=RetryPolicy(initial=0.01))
    for metric in ("a", "b", "c", "c", "b", "a"):
        client.report(metric, True)
    client.flush(10.0)
    client.close(5.0)
    queue.put(fake.accepted_reports)


def test_two_processes_share_the_device_cap(tmp_path):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    state = str(tmp_path / "shared")
    for day in range(2):
        procs = [ctx.Process(target=_device_process, args=(state, day, queue)) for _ in range(2)]
        for p in procs:
            p.start()
        sent = [queue.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
        assert sum(sent) == 2, (day, sent)        # two reports that day across both processes
        book = read_ledger(state)
        window = [a for a in book.values() if a.window_reports and a.window == max(x.window for x in book.values())]
        assert sum(a.window_epsilon for a in window) <= 2 * (1 + 1e-9)
    book = read_ledger(state)
    assert sum(a.lifetime_reports for a in book.values()) == 4
    assert sum(a.refused_device_window for a in book.values()) == 2 * 2 * 6 - 4 - \
        sum(a.refused_window for a in book.values())


def test_ldpt_ledger_shows_device_totals(tmp_path):
    registry = make_registry(DEVICE_TOML)
    clock = Clock(START)
    client = TelemetryClient(registry=registry, state_dir=tmp_path / "s",
                             transport=MemoryTransport(FakeCollector(registry)), clock=clock,
                             elapsed_clock=clock.elapsed)
    for m in ("a", "b", "c"):
        client.report(m, True)
    assert client.flush(5.0)
    client.close()
    runner = CliRunner()
    out = runner.invoke(main, ["ledger", "--state-dir", str(tmp_path / "s")])
    assert out.exit_code == 0, out.output
    assert "device: eps 2 in window" in out.output and "1 (window)" in out.output
    doc = json.loads(runner.invoke(main, ["ledger", "--state-dir", str(tmp_path / "s"), "--format", "json"]).output)
    assert doc["device"]["window_epsilon"] == pytest.approx(2.0)
    assert doc["device"]["refused_device_window"] == 1


def test_registry_with_epsilon_inf_and_device_round_trips_through_toml_and_json():
    from client_sdk.registry import parse_registry
    from client_sdk.remote import registry_from_json

    original = make_registry(DEVICE_TOML + MEMO_TOML.replace("[metrics.theme]", "[metrics.theme2]"))
    for again in (parse_registry(original.to_toml()), registry_from_json(json.dumps(original.to_json()))):
        assert again.device == original.device
        assert list(again.metrics) == list(original.metrics)
        for name, spec in original.metrics.items():
            other = again.get(name)
            for field in ("kind", "protocol", "epsilon", "categories", "options", "epsilon_inf", "fingerprint"):
                assert getattr(other, field) == getattr(spec, field), (name, field)
    assert original.get("theme2").epsilon_inf == 4.0 and original.device.epsilon_per_window == 2.0


MEMO_NUMERIC_TOML = """
[metrics.minutes]
kind = "numeric"
range = [0, 120]
epsilon = 1.0
epsilon_inf = 3.0
"""


@pytest.mark.statistical
def test_numeric_mean_with_epsilon_inf_is_memoised_and_charged_once_per_grid_point():
    """kind = "numeric" + epsilon_inf resolves to memoised 1BitMean: a year of a value that
    stays inside one grid step costs ε∞ once; the estimate of many devices is unbiased."""
    from estimators.frequency import estimate_frame

    registry = make_registry(MEMO_NUMERIC_TOML)
    spec = registry.get("minutes")
    assert spec.protocol == "memobitmean"
    clock = Clock(START)
    client, _ = client_for(registry, clock, state=MemoryState(), strict=True)
    for day in range(365):
        clock.now = START + day * DAY
        assert client.report("minutes", 41.0 + 0.001 * (day % 3))   # jitter within one grid step
        assert client.flush(10.0)
    assert client.flush(10.0)
    book = client.ledger_snapshot()
    client.close()
    assert book["minutes"].lifetime_reports == 365
    assert book["minutes"].distinct_values == 1
    assert book["minutes"].lifetime_epsilon <= server_half(spec).epsilon_longitudinal * (1 + 1e-9)

    # many devices (one client each: its own secret, so its own α and memoised bit), one report each;
    # secrets and flips from the OS CSPRNG (TelemetryClient takes no seed), so the bound is 5.5
    # standard errors: 3.8e-8 per run (was 4 over 3,000 devices: 6.3e-5); 5,700 devices keep the
    # power, a bias of 9.5 minutes in 120 (5.5 σ over 5,700, as 4 σ over 3,000 was) fails it
    fake = FakeCollector(registry)
    values = np.random.default_rng(5).uniform(0, 120, 5700)
    for x in values:
        c = TelemetryClient(registry=registry, transport=MemoryTransport(fake), state=MemoryState(),
                            strict=True, batch_size=1, max_batch_age=0.001)
        assert c.report("minutes", float(x))
        assert c.flush(10.0)
        c.close(0.1)
    df = estimate_frame(spec, fake.sketch("minutes")).set_index("statistic")
    mean, se = df.loc["mean", "estimate"], df.loc["mean", "std_err"]
    assert abs(mean - values.mean()) <= 5.5 * se, (mean, values.mean(), se)
