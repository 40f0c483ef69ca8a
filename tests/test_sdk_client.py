"""TelemetryClient against the in-memory collector: what goes on the wire, bad input, queue,
retries, rejections, the offline queue, opt-out and close."""

from __future__ import annotations

import logging
import os
import random
import time

import numpy as np
import pytest

from client_sdk import MemoryState, RetryPolicy, TelemetryClient
from client_sdk.errors import DomainError, LdptError, UnknownMetricError
from client_sdk.queue import DiskOutbox, DropPolicy, OutboxLimits, StoredBatch
from client_sdk.registry import parse_registry
from client_sdk.testing import Fault, MemoryTransport
from client_sdk.transport import Response
from client_sdk.uploader import Batcher, QueuedReport, pack_batch
from collector.testing import FakeCollector
from sketches import server_half

from .sdk_support import REGISTRY_TOML, decode_body, file_lock, make_registry, wait_until  # noqa: F401 - file_lock: autouse

FAST = RetryPolicy(initial=0.01, maximum=0.05)


@pytest.fixture
def registry():
    return make_registry()


@pytest.fixture
def fake(registry):
    return FakeCollector(registry)


def client_for(tmp_path, registry, fake, **kw):
    kw.setdefault("retry", FAST)
    if "state" not in kw:
        kw.setdefault("state_dir", tmp_path / "state")
    return TelemetryClient(registry=registry, transport=MemoryTransport(fake), **kw)


# --- the basic path --------------------------------------------------------------------------------

def test_report_flush_close_delivers_every_report(tmp_path, registry, fake):
    client = client_for(tmp_path, registry, fake)
    assert client.report("theme", "dark-secret-theme") is True
    assert client.report("crash", True) is True
    assert client.report("country", "country-07") is True
    assert client.report("app", "c") is True
    assert client.report("site", "www.example.org") is True
    assert client.flush(5.0) is True
    assert fake.accepted_reports == 5
    assert {r["m"] for b in fake.batches for r in b["reports"]} == {"theme", "crash", "country", "app", "site"}
    stats = client.stats()
    assert stats["reported"] == stats["charged"] == stats["reports_acked"] == 5
    assert stats["queued"] == 0 and stats["outbox_pending"] == 0
    assert client.close(2.0) is True
    assert client.report("crash", False) is False
    assert client.stats()["closed"] == 1


def test_reports_are_batched_by_size_and_age(tmp_path, registry, fake):
    client = client_for(tmp_path, registry, fake, batch_size=10, max_batch_age=3600)
    for i in range(25):
        client.report("country", f"country-{i:02d}")
    assert wait_until(lambda: fake.accepted_reports == 20, 5)   # two full batches go at once
    assert client.stats()["queued"] == 5                         # the last 5 wait for their age
    batcher = client.uploader.batcher
    oldest = batcher.queue.oldest_time()
    assert not batcher.batch_due(oldest + 3599.9) and batcher.batch_due(oldest + 3600.01)
    assert client.flush(5.0) and fake.accepted_reports == 25
    assert [len(b["reports"]) for b in fake.batches] == [10, 10, 5]
    client.close()


# --- the bytes on the wire -----------------------------------------------------------------------------

def test_wire_bytes_hold_no_true_value_no_secret_no_identifier(tmp_path, registry, fake):
    clients = [client_for(tmp_path / f"c{i}", registry, fake, batch_size=1000) for i in range(2)]
    secrets = [c.state.secret for c in clients]
    true_values = ["dark-secret-theme", "country-33", "very-private-home-page.example"]
    for c in clients:
        for _ in range(3):
            c.report("theme", "dark-secret-theme")
            c.report("country", "country-33")
            c.report("site", "very-private-home-page.example")
            c.report("app", "h")
        assert c.flush(5.0)
    requests = [r for r in fake.requests if r[1] == "/v1/reports"]
    assert len(requests) == 2
    for _, _, headers, body in requests:
        for secret in secrets:
            assert secret not in body and secret.hex().encode() not in body
        for value in true_values:
            assert value.encode() not in body
        doc = decode_body(body)
        assert set(doc) == {"v", "batch_id", "reports"}      # no client id, device id, timestamp
        assert doc["v"] == 1 and len(doc["batch_id"]) == 16
        for rep in doc["reports"]:
            assert set(rep) == {"m", "f", "p"}
            assert rep["f"] == registry.get(rep["m"]).fingerprint
        assert headers == {"User-Agent": "ldpt-sdk", "Accept": "application/json", "Content-Type": "application/msgpack"}
    # Batch ids are fresh random bytes, not a function of the client.
    ids = [decode_body(b)["batch_id"] for _, _, _, b in requests]
    assert ids[0] != ids[1]
    # The only per-client constant is the cohort of cohort protocols: a coarse group of n/m
    # clients (RAPPOR m = 8 here; OLH its resolved cohort count), derived from the secret, that
    # the decoder needs.
    for _, _, _, body in requests:
        cohorts = {(r["m"], r["p"][0]) for r in decode_body(body)["reports"] if r["m"] in ("app", "site")}
        assert len(cohorts) == 2
        assert all(0 <= c < server_half(registry.get(m)).cohorts <= 1024 for m, c in cohorts)


def test_two_reports_of_one_value_differ(tmp_path, registry, fake):
    client = client_for(tmp_path, registry, fake, batch_size=1000)
    for _ in range(20):
        client.report("country", "country-05")             # OUE: 40 fresh random bits per report
        client.report("site", "same-string.example")       # RAPPOR: memoised PRR, fresh IRR
    assert client.flush(5.0)
    reports = [r for b in fake.batches for r in b["reports"]]
    oue = [r["p"] for r in reports if r["m"] == "country"]
    rappor = [r["p"] for r in reports if r["m"] == "site"]
    assert len(oue) == len(rappor) == 20
    # Fresh bits per report: 20 memoised reports would be 1 value. Two fresh OUE reports at eps 2 are
    # equal with probability ((1-q)^2 + q^2)^39 / 2 = 5.1e-5 (q = 1/(e^2+1)), so "all 20 distinct"
    # failed about 1 run in 100; three or more equal pairs have probability < 1e-6.
    assert len(set(oue)) >= 18
    assert len({bytes(p[1]) for p in rappor}) == 20
    assert len({p[0] for p in rappor}) == 1                 # one client: one cohort


def test_report_uses_the_os_csprng(tmp_path, registry, fake, monkeypatch):
    calls = []
    real = os.urandom

    def spy(n):
        calls.append(n)
        return real(n)

    client = client_for(tmp_path, registry, fake)
    monkeypatch.setattr(os, "urandom", spy)
    client.report("theme", "light-secret-theme")
    assert calls, "encoding must draw from os.urandom (the OS CSPRNG)"



def test_no_sdk_draw_uses_a_seedable_generator():
    """Even the retry jitter (send timing is a side channel) comes from the OS CSPRNG."""
    assert isinstance(Batcher().rand, random.SystemRandom)


# --- bad input: counted, logged once, never raised ---------------------------------------------------

def test_bad_input_is_counted_and_logged_once_without_the_value(tmp_path, registry, fake, caplog):
    client = client_for(tmp_path, registry, fake)
    with caplog.at_level(logging.WARNING, logger="client_sdk"):
        for _ in range(3):
            assert client.report("theme", "purple-private-value") is False
            assert client.report("no-such-metric", 1) is False
            assert client.report("site", 42) is False
    stats = client.stats()
    assert stats["invalid_value"] == 6 and stats["unknown_metric"] == 3
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3                          # theme, site, unknown metric: once each
    assert not any("purple-private-value" in m for m in messages)


def test_strict_mode_and_validate_raise(tmp_path, registry, fake):
    client = client_for(tmp_path, registry, fake, strict=True)
    with pytest.raises(UnknownMetricError):
        client.report("no-such-metric", 1)
    with pytest.raises(DomainError):
        client.report("theme", "purple")
    with pytest.raises(DomainError):
        client.report("site", 42)
    client.report("theme", "dark-secret-theme")
    with pytest.raises(LdptError, match="refused by the privacy ledger"):
        client.report("theme", "dark-secret-theme")            # reports_per_window = 1
    lax = client_for(tmp_path / "lax", registry, fake)
    lax.validate("theme", "light-secret-theme")
    lax.validate("crash", "true")
    with pytest.raises(DomainError):
        lax.validate("theme", "purple")
    with pytest.raises(UnknownMetricError):
        lax.validate("nope", "x")
    assert lax.stats()["reported"] == 0                         # validate reports nothing


def test_an_internal_error_is_counted_not_raised(tmp_path, registry, fake, monkeypatch, caplog):
    client = client_for(tmp_path, registry, fake)
    encoder = client._table.get("country").encoder   # built from the metric's encoder block

    def broken(*a, **k):
        raise RuntimeError("encoder bug")

    monkeypatch.setattr(type(encoder), "encode_one", broken)  # the SDK's single-report path
    with caplog.at_level(logging.ERROR, logger="client_sdk"):
        assert client.report("country", "country-01") is False
        assert client.report("country", "country-01") is False
    assert client.stats()["internal_error"] == 2
    assert len(caplog.records) == 1
    monkeypatch.undo()
    assert client.report("country", "country-01") is True      # the reservation was undone


def test_metrics_are_resolved_before_the_first_report(registry, fake):
    """Resolving a metric (domain index, fingerprint) took 0.35 s on the first report() of a
    10⁶-value metric; the constructor does it, so report() stays in microseconds."""
    client = client_for(None, registry, fake, state=MemoryState())
    assert set(client._table.metrics) == set(registry.metrics)
    client.close(0.2)


def test_report_never_raises_even_for_unprintable_arguments(tmp_path, registry, fake):
    class Hostile:
        def __hash__(self):
            raise RuntimeError("no hash")

        def __eq__(self, other):
            raise RuntimeError("no eq")

        def __repr__(self):
            raise RuntimeError("no repr")

        __str__ = __repr__

    client = client_for(tmp_path, registry, fake, state=MemoryState())
    assert client.report(Hostile(), "x") is False              # used to raise from the error log
    assert client.report("theme", Hostile()) is False
    assert client.stats()["internal_error"] == 2


# --- the bounded queue ------------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", [DropPolicy.DROP_NEWEST, DropPolicy.DROP_OLDEST])
def test_a_full_queue_drops_by_policy_and_charges_nothing_dropped(tmp_path, registry, fake, policy):
    client = client_for(tmp_path, registry, fake, queue_size=3, batch_size=100, max_batch_age=3600,
                        drop_policy=policy)
    results = [client.report("country", f"country-{i:02d}") for i in range(5)]
    if policy is DropPolicy.DROP_NEWEST:
        assert results == [True, True, True, False, False]
        assert client.stats()["dropped_queue_full"] == 2
    else:
        assert all(results)
        assert client.stats()["queue_evicted"] == 2
    assert client.flush(5.0)
    assert fake.accepted_reports == 3
    assert client.ledger_snapshot()["country"].window_reports == 3   # dropped reports cost nothing


# --- retries -----------------------------------------------------------------------------------------------

def test_backoff_and_retry_after_on_a_fake_clock():
    clock = [100.0]
    batcher = Batcher(batch_size=1, retry=RetryPolicy(initial=1.0, maximum=8.0), clock=lambda: clock[0])
    _, body = pack_batch([("m", "f", 1)])
    batcher.outbox.add(StoredBatch(b"i" * 16, body, 1, time.time()))
    batch = batcher.claim(clock[0])
    batcher.handle(batch, Response(503, {"retry-after": "7"}), None, clock[0])
    assert batcher.backoff_until == 107.0                     # Retry-After wins, exactly
    assert batcher.claim(106.9) is None
    batch = batcher.claim(107.0)
    assert batch is not None and batch.body == body           # same bytes, same batch id
    delays = []
    for _ in range(5):                                         # network errors: exponential + jitter
        batcher.handle(batch, None, OSError("down"), clock[0])
        delays.append(batcher.backoff_until - clock[0])
        batch = batcher.claim(batcher.backoff_until)
    for k, d in enumerate(delays, start=2):                   # attempt 1 was the 503
        nominal = min(8.0, 2.0 ** (k - 1))
        assert nominal / 2 <= d <= nominal
    batcher.handle(batch, Response(429, {}, b'{"retry_after": 3}'), None, clock[0])
    assert batcher.backoff_until == clock[0] + 3              # the problem body's retry_after
    batch = batcher.claim(clock[0] + 3)
    batcher.handle(batch, Response(200, {}, b'{"accepted": 1}'), None, clock[0])
    assert batcher.attempts == 0 and batcher.counters["reports_acked"] == 1
    assert batcher.idle()


def test_backoff_after_thousands_of_failures_stays_at_the_maximum():
    """A device offline for days fails thousands of times: 2.0 ** 1100 overflows a float, and the
    worker raised OverflowError on every cycle, never sending again once the network was back."""
    rand = random.Random(1)
    policy = RetryPolicy(initial=1.0, maximum=300.0)
    for attempt in (1_025, 1_100, 10**6):
        assert 150.0 <= policy.delay(attempt, None, rand) <= 300.0
    clock = [100.0]
    batcher = Batcher(batch_size=1, retry=policy, clock=lambda: clock[0])
    _, body = pack_batch([("m", "f", 1)])
    batcher.outbox.add(StoredBatch(b"i" * 16, body, 1, time.time()))
    batcher.attempts = 5_000
    batch = batcher.claim(clock[0])
    batcher.handle(batch, None, OSError("down"), clock[0])
    assert 150.0 <= batcher.backoff_until - clock[0] <= 300.0


@pytest.mark.parametrize("response", [
    Response(404, {"content-type": "text/html"}, b"<h1>Not Found</h1>"),     # a wrong endpoint path
    Response(403, {"content-type": "text/html"}, b"blocked by proxy"),       # a proxy or gateway
    Response(200, {"content-type": "text/html"}, b"<html>sign in</html>"),  # a captive portal
    Response(302, {"location": "http://portal/"}, b""),
    Response(204, {}, b""),
])
def test_an_answer_that_is_not_the_collectors_keeps_the_batch(response):
    """Only the collector's ack deletes a batch and only its problem document rejects one:
    anything else (a proxy, a portal, a wrong path) is retried like an unreachable collector."""
    clock = [100.0]
    batcher = Batcher(batch_size=1, retry=RetryPolicy(initial=1.0, maximum=8.0), clock=lambda: clock[0])
    _, body = pack_batch([("m", "f", 1)])
    batcher.outbox.add(StoredBatch(b"i" * 16, body, 1, time.time()))
    batch = batcher.claim(clock[0])
    batcher.handle(batch, response, None, clock[0])
    assert batcher.counters["reports_acked"] == 0 and batcher.counters["reports_rejected"] == 0
    assert batcher.counters["retries"] == 1 and batcher.backoff_until > clock[0]
    again = batcher.claim(batcher.backoff_until)
    assert again is not None and again.body == body
    batcher.handle(again, Response(400, {"content-type": "application/problem+json"},
                                   b'{"type": "https://ldp-telemetry.dev/problems/undecodable-body"}'),
                   None, clock[0])
    assert batcher.counters["reports_rejected"] == 1 and batcher.idle()   # the collector's own answer


def test_an_absurd_retry_after_is_ignored_not_a_worker_crash():
    """A problem body's integer retry_after beyond float range raised OverflowError in handle(); it is
    no finite delay, so it is ignored (conformance/vectors/delivery.json, as the TypeScript SDK's
    JSON.parse reads it: Infinity) and the client's own back-off applies; a huge header is capped."""
    assert Response(503, {}, b'{"retry_after": 1' + b"0" * 400 + b'}').retry_after() is None
    assert Response(503, {}, b'{"retry_after": -1' + b"0" * 400 + b'}').retry_after() is None
    clock = [100.0]
    batcher = Batcher(batch_size=1, retry=RetryPolicy(initial=4.0, max_retry_after=60.0), clock=lambda: clock[0])
    _, body = pack_batch([("m", "f", 1)])
    batcher.outbox.add(StoredBatch(b"i" * 16, body, 1, time.time()))
    batch = batcher.claim(clock[0])
    batcher.handle(batch, Response(503, {}, b'{"retry_after": 1' + b"0" * 400 + b'}'), None, clock[0])
    assert 102.0 <= batcher.backoff_until <= 104.0 and not batcher.server_backoff
    batch = batcher.claim(batcher.backoff_until)
    batcher.handle(batch, Response(503, {"retry-after": "1" + "0" * 400}, b""), None, clock[0])
    assert batcher.backoff_until == 160.0 and batcher.server_backoff


def test_retry_after_is_honoured_in_real_time_with_the_same_batch(tmp_path, registry, fake):
    fake.fail(Fault("status", 503, retry_after=0.4), Fault("status", 500))
    client = client_for(tmp_path, registry, fake)
    client.report("theme", "dark-secret-theme")
    start = time.monotonic()
    assert client.flush(10.0) is True
    posts = [r for r in fake.requests if r[1] == "/v1/reports"]
    assert len(posts) == 3
    assert time.monotonic() - start >= 0.4
    assert len({body for *_, body in posts}) == 1              # one batch id, one body, 3 attempts
    assert fake.accepted_reports == 1 and client.stats()["retries"] == 2


def test_a_lost_ack_is_retried_and_counted_once(tmp_path, registry, fake):
    fake.fail(Fault("drop"), Fault("lost-ack"))
    client = client_for(tmp_path, registry, fake)
    for i in range(4):
        client.report("country", f"country-{i:02d}")
    assert client.flush(10.0) is True
    assert fake.accepted_reports == 4                          # committed once
    assert fake.duplicates == 1                                # the retry after the lost ack
    assert client.stats()["duplicates"] == 1


def test_4xx_is_not_retried_and_logged_once(tmp_path, registry, fake, caplog):
    fake.fail(Fault("status", 400, slug="undecodable-body"), Fault("status", 413, slug="too-large"),
              Fault("status", 400, slug="undecodable-body"))
    client = client_for(tmp_path, registry, fake, batch_size=1)
    with caplog.at_level(logging.WARNING, logger="client_sdk"):
        client.report("crash", True)
        assert client.flush(5.0) is False                      # rejected, not acknowledged
        client.report("crash", False)
        client.flush(5.0)
        client.report("crash", True)
        assert client.flush(5.0) is False
    posts = [r for r in fake.requests if r[1] == "/v1/reports"]
    assert len(posts) == 3                                     # never retried
    rejected = [r for r in caplog.records if "HTTP 400" in r.getMessage()]
    assert len(rejected) == 1
    assert client.stats()["reports_rejected"] == 3


def test_flush_never_reports_a_rejected_batch_as_acknowledged(tmp_path, registry, fake):
    """The worker logs a rejection after removing the batch from the outbox: with a slow log
    handler, flush() used to poll in that gap, see nothing pending and return True."""

    class SlowHandler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            time.sleep(0.15)  # longer than flush's 50 ms poll

    handler = SlowHandler(logging.ERROR)
    logger = logging.getLogger("client_sdk")
    logger.addHandler(handler)
    try:
        fake.fail(Fault("status", 400, slug="undecodable-body"))
        client = client_for(tmp_path, registry, fake, state=MemoryState())
        client.report("crash", True)
        assert client.flush(5.0) is False
        assert client.stats()["reports_rejected"] == 1
        client.close(1.0)
    finally:
        logger.removeHandler(handler)


def test_a_changed_registry_marks_the_metric_stale_and_saves_the_rest(tmp_path, registry, caplog):
    server_registry = parse_registry(REGISTRY_TOML.replace('protocol = "grr"\nepsilon = 1.0',
                                                           'protocol = "grr"\nepsilon = 1.5'))
    fake = FakeCollector(server_registry)
    client = client_for(tmp_path, registry, fake, batch_size=100)
    with caplog.at_level(logging.ERROR, logger="client_sdk"):
        client.report("theme", "dark-secret-theme")
        client.report("country", "country-01")
        client.report("crash", True)
        client.flush(5.0)
    assert fake.accepted_reports == 2                          # the other metrics were re-sent
    assert {r["m"] for b in fake.batches for r in b["reports"]} == {"country", "crash"}
    assert any("theme" in r.getMessage() and "fingerprint-mismatch" in r.getMessage() for r in caplog.records)
    assert client.report("theme", "light-secret-theme") is False
    assert client.stats()["stale_metric"] == 1


# --- offline queue ------------------------------------------------------------------------------------------

def test_the_offline_queue_survives_a_restart_and_keeps_its_batch_id(tmp_path, registry):
    down = FakeCollector(registry)
    down.fail(*[Fault("drop")] * 1000)
    state_dir = tmp_path / "state"
    first = TelemetryClient(registry=registry, state_dir=state_dir, transport=MemoryTransport(down),
                            retry=FAST)
    first.report("theme", "dark-secret-theme")
    first.report("country", "country-09")
    assert first.flush(0.3) is False
    assert first.close(0.3) is False
    files = list(DiskOutbox(state_dir / "outbox").iter_batches())
    assert len(files) == 1
    stored = files[0].read_bytes()
    sent_while_down = {body for *_, body in down.requests}
    assert sent_while_down == {stored}                         # every attempt: these exact bytes
    up = FakeCollector(registry)
    second = TelemetryClient(registry=registry, state_dir=state_dir, transport=MemoryTransport(up), retry=FAST)
    assert wait_until(lambda: up.accepted_reports == 2, 5)     # sent without any new report
    assert [body for *_, body in up.requests if body] == [stored]
    assert decode_body(stored)["batch_id"] in up.committed
    assert second.flush(2.0) and second.stats()["outbox_pending"] == 0
    second.close()


def test_the_outbox_is_capped_by_count_bytes_and_age(tmp_path):
    outbox = DiskOutbox(tmp_path / "outbox", OutboxLimits(max_batches=3, max_bytes=10_000, max_age=3600))
    now = time.time()
    bodies = []
    for i in range(5):
        bid = bytes([i]) * 16
        _, body = pack_batch([("m", "f", i)], bid)
        bodies.append(body)
        outbox.add(StoredBatch(bid, body, 1, now + i * 1e-3))
    assert outbox.pending() == 3 and outbox.dropped_batches == 2   # oldest dropped first
    kept = [p.read_bytes() for p in outbox.iter_batches()]
    assert kept == bodies[2:]
    big = DiskOutbox(tmp_path / "big", OutboxLimits(max_batches=100, max_bytes=100, max_age=3600))
    for i in range(3):
        big.add(StoredBatch(bytes([i]) * 16, b"x" * 60, 1, now + i * 1e-3))
    assert big.pending() == 1 and big.dropped_batches == 2
    old = DiskOutbox(tmp_path / "old", OutboxLimits(max_batches=100, max_bytes=10**6, max_age=60))
    old.add(StoredBatch(b"o" * 16, b"old", 7, now - 3600))
    old.add(StoredBatch(b"n" * 16, b"new", 1, now))
    assert old.pending() == 1 and old.expired_batches == 1 and old.expired_reports == 7


def test_two_senders_share_an_outbox_without_sending_one_batch_twice(tmp_path):
    a = DiskOutbox(tmp_path / "outbox")
    b = DiskOutbox(tmp_path / "outbox")
    for i in range(10):
        a.add(StoredBatch(bytes([i]) * 16, b"body%d" % i, 1, time.time() + i * 1e-3))
    claimed = []
    while True:
        got = [x for x in (a.claim(time.time()), b.claim(time.time())) if x is not None]
        if not got:
            break
        claimed += got
    assert sorted(c.batch_id for c in claimed) == [bytes([i]) * 16 for i in range(10)]
    for c in claimed:
        (a if random.random() < 0.5 else b).done(c)
    assert a.pending() == 0


def test_an_abandoned_claim_is_returned_to_the_queue(tmp_path):
    now = [time.time()]
    a = DiskOutbox(tmp_path / "outbox", claim_timeout=120, sweep_interval=0.0, clock=lambda: now[0])
    a.add(StoredBatch(b"z" * 16, b"body", 1, now[0]))
    assert a.claim(now[0]) is not None                         # claimed, then the sender "dies"
    now[0] += 119                                              # the claim's age starts at the claim
    assert a.claim(now[0]) is None
    now[0] += 2
    again = a.claim(now[0])
    assert again is not None and again.body == b"body"


# --- opt-out and close --------------------------------------------------------------------------------------

def test_opt_out_deletes_queue_and_secret_and_stops_reporting(tmp_path, registry):
    down = FakeCollector(registry)
    down.fail(*[Fault("drop")] * 1000)
    state_dir = tmp_path / "state"
    client = TelemetryClient(registry=registry, state_dir=state_dir, transport=MemoryTransport(down),
                             retry=RetryPolicy(initial=30), batch_size=1)
    client.report("site", "a-value.example")
    client.report("country", "country-01")
    assert wait_until(lambda: len(list((state_dir / "outbox").glob("*.ldpb"))) >= 1, 5)
    assert (state_dir / "secret").exists()
    assert client.ledger_snapshot()["site"].memo
    client.opt_out()
    assert not (state_dir / "secret").exists()
    assert not (state_dir / "outbox").exists() or not any((state_dir / "outbox").iterdir())
    assert len(client.uploader.batcher.queue) == 0
    assert client.ledger_snapshot()["site"].memo == {}         # digests keyed by the deleted secret
    assert client.report("theme", "dark-secret-theme") is False
    assert client.stats()["opted_out"] == 1
    client.close(0.2)
    again = TelemetryClient(registry=registry, state_dir=state_dir, transport=MemoryTransport(down))
    assert again.opted_out and again.report("theme", "dark-secret-theme") is False
    assert not (state_dir / "secret").exists()                 # opting out sticks across restarts
    again.close(0.2)


def test_close_flushes_within_its_timeout(tmp_path, registry, fake):
    slow = MemoryTransport(fake, latency=0.05)
    client = TelemetryClient(registry=registry, state_dir=tmp_path / "a", transport=slow, batch_size=5)
    for i in range(20):
        client.report("country", f"country-{i:02d}")
    assert client.close(timeout=5.0) is True
    assert fake.accepted_reports == 20
    down = FakeCollector(registry)
    down.fail(*[Fault("drop")] * 1000)
    stuck = TelemetryClient(registry=registry, state_dir=tmp_path / "b", transport=MemoryTransport(down),
                            retry=FAST)
    stuck.report("country", "country-01")
    assert stuck.close(timeout=0.5) is False
    assert stuck.uploader.closed and stuck.report("country", "country-02") is False
    assert len(list((tmp_path / "b" / "outbox").glob("*.ldpb"))) == 1   # kept for the next run


def test_a_client_needs_a_state_and_a_way_to_send(registry):
    with pytest.raises(ValueError, match="state_dir"):
        TelemetryClient(registry=registry, transport=MemoryTransport(FakeCollector()))
    with pytest.raises(ValueError, match="endpoint"):
        TelemetryClient(registry=registry, state=MemoryState())


def test_many_clients_can_share_one_uploader(registry, fake):
    from client_sdk import Uploader

    shared = Uploader(MemoryTransport(fake), batch_size=50, max_batch_age=0.05)
    truth = np.zeros(3, dtype=int)
    values = ["light-secret-theme", "dark-secret-theme", "system-secret-theme"]
    for i in range(300):
        c = TelemetryClient(registry=registry, state=MemoryState(), uploader=shared)
        c.report("theme", values[i % 3])
        c.report("theme", values[i % 3])                       # refused: one per window
        truth[i % 3] += 1
    assert shared.flush(5.0)
    assert fake.accepted_reports == 300
    assert fake.sketch("theme").total_reports == 300
    shared.close()


def test_queued_report_holds_no_true_value(tmp_path, registry, fake):
    client = client_for(tmp_path, registry, fake, batch_size=1000, max_batch_age=3600)
    client.report("site", "hidden-value.example")
    item = client.uploader.batcher.queue.take(1)[0]
    assert isinstance(item, QueuedReport)
    blob = repr((item.metric, item.fingerprint, item.payload, item.charge))
    assert "hidden-value" not in blob


# --- cohorts: no fingerprint across metrics or windows ---------------------------------------------

def test_rappor_cohort_is_one_per_client_across_metrics():
    from sketches import build_server

    options = {"bloom_bits": 32, "hashes": 2, "cohorts": 64, "prob_f": 0.5, "prob_p": 0.5, "prob_q": 0.75}
    proto = build_server("rappor", None, None, options)
    secrets = [os.urandom(32) for _ in range(50)]
    for secret in secrets:
        a = proto.encode(["x"], secret=secret, metric="home_page")["cohort"][0]
        b = proto.encode(["y"], secret=secret, metric="process_name")["cohort"][0]
        assert a == b  # a per-metric cohort would make the tuple of cohorts a fingerprint
    assert len({int(proto.cohort_of(s)) for s in secrets}) > 20  # still spread over the cohorts


def test_olh_cohort_changes_with_the_utc_day(tmp_path, registry, fake, monkeypatch):
    client = client_for(tmp_path, registry, fake)
    day0 = 20_000 * 86_400.0
    cohorts = []
    for day in range(12):
        monkeypatch.setattr(time, "time", lambda d=day: day0 + d * 86_400 + 5)
        first = client.encode_value("app", "a").payload[0]   # a report's [cohort, y]: the clock's day's cohort
        assert client.encode_value("app", "b").payload[0] == first  # stable within the day
        cohorts.append(first)
    assert len(set(cohorts)) > 1
    client.close(1.0)


def test_a_fake_collectors_sketch_of_a_metric_without_reports_is_empty(registry, fake):
    """Before any report, ``FakeCollector.sketch`` is the metric's empty sketch, for split
    protocols too (their device half has no sketch: the server half's, sketches.server_half)."""
    for spec in registry.metrics.values():
        sketch = fake.sketch(spec.name)
        assert sketch.total_reports == 0 and not sketch.counts.any(), spec.name
        assert sketch.counts.shape == server_half(spec).new_sketch().counts.shape, spec.name
