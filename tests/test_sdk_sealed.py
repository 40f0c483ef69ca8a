"""The Python SDK sending sealed batches: the one option, byte-identical resends, resealing after
a key rotation, the shuffler's acknowledgement, never a plain batch, and a lean import."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys

import pytest

from client_sdk import AsyncTelemetryClient, RetryPolicy, Seal, Sealer, TelemetryClient, Uploader, ohttp
from client_sdk.testing import AsyncMemoryTransport, Fault, MemoryTransport
from client_sdk.transport import Response
from collector.testing import FakeCollector

from .sdk_support import make_registry

FAST = RetryPolicy(initial=0.01, maximum=0.05, flush_interval=0.01)


def posts(collector, path=ohttp.GATEWAY_PATH):
    return [(h, b) for m, p, h, b in collector.requests if m == "POST" and p == path]


def make(tmp_path, keys, name="dev", **kw):
    collector = FakeCollector(make_registry(), gateway_keys=keys)
    kw.setdefault("seal", Seal.gateway())
    kw.setdefault("max_batch_age", 0.01)
    client = TelemetryClient(transport=MemoryTransport(collector), registry=make_registry(),
                             state_dir=tmp_path / name, retry=FAST, **kw)
    return collector, client


def test_sealed_batches_reach_the_gateway_with_the_fixed_headers_and_never_in_plain(tmp_path):
    key = ohttp.PrivateKey.generate(5)
    collector, client = make(tmp_path, [key])
    client.report("theme", "light-secret-theme")
    for crashed in (True, False):
        client.report("crash", crashed)
        assert client.flush(5)
    assert client.close(5)
    sent = posts(collector)
    assert collector.accepted_reports == 3 and len(collector.batches) == len(sent) >= 2
    assert posts(collector, "/v1/reports") == []
    assert [list(h) for h, _ in sent] == [["User-Agent", "Accept", "Content-Type"]] * len(sent)
    assert {h["Content-Type"] for h, _ in sent} == {"message/ohttp-req"}
    assert {len(b) for _, b in sent} == {1024 + ohttp.ENVELOPE_OVERHEAD}     # one size class
    for _, body in sent:
        assert b"secret-theme" not in body and b"theme" not in body
    gets = [p for m, p, _, _ in collector.requests if m == "GET"]
    assert gets == [ohttp.GATEWAY_PATH]        # the key configuration, fetched once
    assert client.uploader.batcher.sealer.counters["sealed"] == len(sent)


def test_a_retry_resends_the_same_envelope_bytes_also_after_a_restart(tmp_path):
    key = ohttp.PrivateKey.generate(1)
    collector, client = make(tmp_path, [key])
    collector.fail(Fault("status", 503), Fault("drop"), Fault("lost-ack"))
    client.report("theme", "light-secret-theme")
    assert client.flush(10)
    bodies = [b for _, b in posts(collector)]
    assert len(bodies) == 4 and len(set(bodies)) == 1          # 503, drop, lost ack, duplicate
    assert collector.accepted_reports == 1 and collector.duplicates == 1
    client.close(1)
    # an outage across a restart: the envelope waits on disk and goes out unchanged
    collector2 = FakeCollector(make_registry(), gateway_keys=[key])
    collector2.fail(*[Fault("status", 503)] * 100)
    client2 = TelemetryClient(transport=MemoryTransport(collector2), registry=make_registry(),
                              state_dir=tmp_path / "dev", retry=FAST, max_batch_age=0.01, seal=Seal.gateway())
    client2.report("crash", False)
    assert not client2.flush(0.3)
    client2.close(0.1)
    first = {b for _, b in posts(collector2)}
    assert len(first) == 1
    collector3 = FakeCollector(make_registry(), gateway_keys=[key])
    client3 = TelemetryClient(transport=MemoryTransport(collector3), registry=make_registry(),
                              state_dir=tmp_path / "dev", retry=FAST, seal=Seal.gateway())
    assert client3.flush(5)
    assert {b for _, b in posts(collector3)} == first
    assert [m for m, p, _, _ in collector3.requests if m == "GET"] == []   # sealed before: no key needed
    client3.close(1)


def test_a_rotated_key_is_refetched_and_the_batch_sealed_again_once(tmp_path):
    old, new = ohttp.PrivateKey.generate(1), ohttp.PrivateKey.generate(2)
    collector, client = make(tmp_path, [old])
    client.report("theme", "light-secret-theme")
    assert client.flush(5)
    collector.gateway_keys = [new]          # the overlap is over: key 1 is unknown now
    client.report("crash", True)
    assert client.flush(5)
    assert collector.accepted_reports == 2
    sealer = client.uploader.batcher.sealer
    assert sealer.counters["resealed"] == 1 and sealer.counters["key_fetches"] == 2
    assert [b[0] for _, b in posts(collector)] == [1, 1, 2]    # key ids of the three envelopes
    client.close(1)


def test_a_pinned_key_the_gateway_no_longer_holds_drops_the_batch_without_a_plain_resend(tmp_path, caplog):
    pinned, current = ohttp.PrivateKey.generate(1), ohttp.PrivateKey.generate(2)
    doc = ohttp.encode_key_configs([pinned.config])
    collector, client = make(tmp_path, [current], seal=Seal.gateway(key_config=base64.b64encode(doc).decode()))
    client.report("theme", "light-secret-theme")
    assert not client.flush(2)
    assert client.stats()["reports_rejected"] == 1 and collector.accepted_reports == 0
    assert posts(collector, "/v1/reports") == [] and len(posts(collector)) == 1
    assert [m for m, _, _, _ in collector.requests if m == "GET"] == []   # pinned: never fetched
    assert "does not know the key" in caplog.text
    client.close(1)


def test_no_key_configuration_means_the_batch_waits(tmp_path):
    key = ohttp.PrivateKey.generate(1)
    collector, client = make(tmp_path, [key])
    collector.gateway_keys = []          # GET /.well-known/ohttp-gateway answers 404 now
    client.report("crash", True)
    assert not client.flush(0.3)
    assert posts(collector) == [] and posts(collector, "/v1/reports") == []
    assert client.stats()["network_errors"] >= 1 and client.stats()["outbox_pending"] == 1
    collector.gateway_keys = [key]
    assert client.flush(5) and collector.accepted_reports == 1
    client.close(1)


def test_inner_answers_settle_batches_exactly_like_plain_ones(tmp_path):
    key = ohttp.PrivateKey.generate(1)
    collector, client = make(tmp_path, [key], max_batch_age=60)   # one batch: only flush() sends
    collector.respond = lambda body: Response(
        422, {"content-type": "application/problem+json"},
        json.dumps({"type": "https://ldp-telemetry.dev/problems/unknown-metric", "status": 422,
                    "title": "x", "detail": "gone", "metric": "crash", "report_index": 1}).encode())
    client.report("theme", "light-secret-theme")
    client.report("crash", True)
    assert not client.flush(2)
    collector.respond = None
    assert client.flush(5)
    # crash went stale, the rest of the batch was resent under a new id, sealed again
    assert collector.accepted_reports == 1 and collector.batches[0]["reports"][0]["m"] == "theme"
    assert client.stats()["reports_rejected"] == 1
    assert not client.report("crash", False)
    client.close(1)


class Shuffler:
    """A stand-in for `ldpt shuffle`'s ingest: stores envelopes, answers the documented ack."""

    def __init__(self, answers=()):
        self.answers = list(answers)
        self.stored: list[bytes] = []
        self.requests: list[tuple[dict, bytes]] = []

    def handle(self, method, path, headers, body):
        self.requests.append((dict(headers), body))
        if self.answers:
            return self.answers.pop(0)
        duplicate = body in self.stored
        if not duplicate:
            self.stored.append(body)
        return Response(202, {"content-type": "application/json"},
                        json.dumps({"stored": True, "duplicate": duplicate}).encode())


def test_shuffler_mode_settles_on_the_shufflers_ack_and_retries_the_same_bytes(tmp_path):
    key = ohttp.PrivateKey.generate(4)
    collector = FakeCollector(make_registry(), gateway_keys=[key])
    busy = Response(503, {"retry-after": "0", "content-type": "application/problem+json"},
                    b'{"type": "https://ldp-telemetry.dev/problems/overloaded", "status": 503}')
    shuffler = Shuffler([busy, Response(200, {"content-type": "text/html"}, b"<html>portal</html>")])
    sealer = Sealer(Seal.shuffler("https://shuffler.example/v1/envelopes"), MemoryTransport(collector),
                    post=MemoryTransport(shuffler))
    uploader = Uploader(MemoryTransport(collector), batch_size=10, max_batch_age=0.01, retry=FAST, sealer=sealer)
    client = TelemetryClient(registry=make_registry(), state_dir=tmp_path / "dev", uploader=uploader)
    client.report("theme", "dark-secret-theme")
    assert uploader.flush(5)
    assert len(shuffler.requests) == 3 and len({b for _, b in shuffler.requests}) == 1
    assert [h["Content-Type"] for h, _ in shuffler.requests] == ["message/ohttp-req"] * 3
    assert posts(collector) == [] and posts(collector, "/v1/reports") == []   # only the shuffler saw it
    # what a shuffler forwards, the gateway opens and counts (once, however often forwarded)
    for _ in range(2):
        assert collector.handle("POST", ohttp.GATEWAY_PATH, {"Content-Type": ohttp.REQUEST_TYPE},
                                shuffler.stored[0]).status == 200
    assert collector.accepted_reports == 1 and collector.duplicates == 1
    uploader.close(1)


def test_shuffler_key_problem_reseals_once_and_a_final_answer_drops(tmp_path):
    old, new = ohttp.PrivateKey.generate(1), ohttp.PrivateKey.generate(2)
    collector = FakeCollector(make_registry(), gateway_keys=[old])
    key_problem = Response(400, {"content-type": "application/problem+json"},
                           json.dumps({"type": ohttp.KEY_PROBLEM_TYPE, "title": "key identifier unknown"}).encode())
    too_big = Response(415, {"content-type": "application/problem+json"},
                       b'{"type": "https://ldp-telemetry.dev/problems/unsupported-media-type", "status": 415}')
    shuffler = Shuffler()
    sealer = Sealer(Seal.shuffler("https://s.example/"), MemoryTransport(collector), post=MemoryTransport(shuffler))
    uploader = Uploader(MemoryTransport(collector), max_batch_age=0.01, retry=FAST, sealer=sealer)
    client = TelemetryClient(registry=make_registry(), state_dir=tmp_path / "dev", uploader=uploader)
    client.report("theme", "dark-secret-theme")
    assert uploader.flush(5)
    collector.gateway_keys = [new]
    shuffler.answers = [key_problem]
    client.report("crash", True)
    assert uploader.flush(5)
    assert [b[0] for _, b in shuffler.requests] == [1, 1, 2] and sealer.counters["resealed"] == 1
    shuffler.answers = [too_big]
    client.report("crash", False)
    assert not uploader.flush(2)
    assert uploader.batcher.counters["reports_rejected"] == 1
    uploader.close(1)


def test_the_async_client_sends_sealed_too(tmp_path):
    key = ohttp.PrivateKey.generate(9)
    collector = FakeCollector(make_registry(), gateway_keys=[key])

    async def scenario():
        client = AsyncTelemetryClient(transport=AsyncMemoryTransport(collector), registry=make_registry(),
                                      state_dir=tmp_path / "a", seal=Seal.gateway(), retry=FAST)
        client.report("theme", "light-secret-theme")
        assert await client.aflush(5)
        await client.aclose(1)
    asyncio.run(scenario())
    assert collector.accepted_reports == 1 and len(posts(collector)) == 1 and not posts(collector, "/v1/reports")


def test_seal_options_are_checked_when_the_app_starts(tmp_path):
    with pytest.raises(ValueError, match="needs the relay's URL"):
        Seal.relay("")
    with pytest.raises(ValueError, match="base64"):
        Seal.gateway(key_config="not base64!")
    with pytest.raises(ValueError, match="ohttp-keys"):
        Seal.gateway(key_config=b"\x00\x03abc")
    with pytest.raises(ValueError, match="mode"):
        Seal("direct")
    with pytest.raises(TypeError, match="Seal.gateway"):
        TelemetryClient(transport=MemoryTransport(FakeCollector()), registry=make_registry(), state_dir=tmp_path / "x",
                        seal="gateway")
    with pytest.raises(ValueError, match="key configuration"):
        Sealer(Seal.relay("https://relay.example/x"), None)


@pytest.mark.e2e
def test_the_sdk_loads_no_hpke_until_a_batch_is_sealed():
    code = ("import sys\n"
            "from client_sdk import Seal, TelemetryClient, ohttp\n"
            "from client_sdk.state import MemoryState\n"
            "from client_sdk.testing import MemoryTransport, RecordingCollector\n"
            "key = Seal.gateway(key_config=ohttp.encode_key_configs([ohttp.KeyConfig(1, 32, bytes(32))]))\n"
            "c = TelemetryClient(transport=MemoryTransport(RecordingCollector()), registry={'metrics': {}}, state=MemoryState(), seal=key)\n"
            "c.close(0.1)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyhpke', 'cryptography')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
