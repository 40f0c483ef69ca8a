"""The Python SDK passes the delivery vectors (conformance/vectors/delivery.json; docs/conformance.md,
"Delivery"): the back-off schedule, Retry-After, and whole conversations — a real TelemetryClient
reports, flushes, and a scripted collector or shuffler answers its POSTs; which answers settle a
batch, what is sent again (the same bytes, or the survivors under a new id, never re-randomised),
what flush() returns and what is counted. The TypeScript SDK runs the same file
(client_sdk/js/test/delivery.test.ts), the Kotlin SDK's DeliveryTest (tests/test_jvm_sdk.py)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest

from client_sdk import TelemetryClient
from client_sdk.errors import TransportError
from client_sdk.registry import parse_registry
from client_sdk.transport import REPORTS_PATH, Response, Transport
from client_sdk.uploader import RetryPolicy
from conformance import generate

VECTORS = json.loads((generate.VECTORS / "delivery.json").read_text(encoding="utf-8"))


class Jitter:
    """The vector's jitter u as ``random.Random().random()``."""

    def __init__(self, u: float) -> None:
        self.u = u

    def random(self) -> float:
        return self.u


@pytest.mark.parametrize("case", VECTORS["retry_delays"], ids=lambda c: f"{c['policy']}-{c['attempt']}-{c['u']}")
def test_retry_delays(case: dict) -> None:
    policy = RetryPolicy(**case["policy"])
    assert policy.delay(case["attempt"], case["retry_after"], Jitter(case["u"])) == case["delay"]


@pytest.mark.parametrize("case", VECTORS["retry_after"], ids=lambda c: f"{c['header']!r}-{c['body']}")
def test_retry_after(case: dict) -> None:
    headers = {} if case["header"] is None else {"retry-after": case["header"]}
    assert Response(503, headers, case["body"].encode()).retry_after(case["now"]) == case["seconds"]


def test_the_multiplier_is_never_capped_below_the_maximum() -> None:
    """The bug the vectors caught: the exponent was capped at 64, so with a multiplier of 1.01 the
    back-off stopped growing at 1.01^64 = 1.9 s instead of reaching the 300 s maximum."""
    slow = RetryPolicy(initial=1.0, maximum=300.0, multiplier=1.01)
    assert slow.delay(600, None, Jitter(0.0)) == 150.0
    assert RetryPolicy().delay(10 ** 6, None, Jitter(0.0)) == 150.0    # overflow: the maximum


class Scripted(Transport):
    """A collector (or shuffler) that answers POSTs from a script, then acknowledges."""

    def __init__(self, answers: list[Any], shuffler: bool) -> None:
        self.answers = list(answers)
        self.shuffler = shuffler
        self.posts: list[tuple[float, bytes]] = []
        self.lock = threading.Lock()

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Any = None) -> Response:
        assert (method, path) == ("POST", REPORTS_PATH) and body is not None
        with self.lock:
            self.posts.append((time.monotonic(), body))
            answer = self.answers.pop(0) if self.answers else None
        if answer == "drop":
            raise TransportError("connection dropped (scripted)")
        if answer is not None:
            return Response(answer["status"], answer["headers"], answer["body"].encode())
        if self.shuffler:
            return Response(202, {"content-type": "application/json"}, b'{"stored": true}')
        n = len(msgpack.unpackb(body)["reports"])
        return Response(200, {"content-type": "application/json"},
                        json.dumps({"accepted": n, "duplicate": False}).encode())


class ShufflerSending:
    """The uploader's sealer in shuffler mode, minus the sealing (client_sdk/sealing.py returns the
    shuffler's answer as it is; the sealed bytes themselves are pinned by sealed.json)."""

    shuffler = True

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def try_seal(self, batch: Any) -> None:
        """No key: nothing to seal at build time."""

    def send(self, batch: Any, persist: Any) -> Response:
        return self.transport.post_batch(batch.body)

    def close(self) -> None:
        """Nothing to release."""


def converse(case: dict, client: TelemetryClient, sender: Any = None) -> None:
    """Report the vectors' values, flush, and check flush(), the counters and the stale metrics;
    ``sender`` replaces the uploader's sealer (shuffler sending) before anything is sent."""
    try:
        for metric, value in VECTORS["reports"]:
            assert client.report(metric, value)
        if sender is not None:
            client._uploader.batcher.sealer = sender
        assert client.flush(timeout=30) is case["flush"]
        stats = client.stats()
        for name in ("reports_acked", "reports_rejected", "duplicates"):
            assert stats[name] == case[name], name
        for metric, value in VECTORS["reports"]:
            assert client.report(metric, value) is (metric not in case["stale_metrics"]), metric
    finally:
        client.close(timeout=0.5)


@pytest.mark.parametrize("case", VECTORS["conversations"], ids=lambda c: c["name"][:60])
def test_conversation(case: dict, tmp_path: Path) -> None:
    registry = parse_registry(generate.DELIVERY_TOML, "conformance/delivery")
    assert json.loads(json.dumps(registry.to_json())) == VECTORS["registry"]
    scripted = Scripted(case["answers"], case["sending"] == "shuffler")
    converse(case, TelemetryClient(registry=registry, state_dir=tmp_path, transport=scripted,
                                   retry=RetryPolicy(**VECTORS["policy"]), batch_size=100, max_batch_age=3600),
             ShufflerSending(scripted) if case["sending"] == "shuffler" else None)
    check_posts(case, [body for _, body in scripted.posts[:len(case["posts"])]])
    assert len(scripted.posts) >= len(case["posts"])
    times = [t for t, _ in scripted.posts]
    for index, gap in case["min_gap"].items():
        i = int(index)
        assert times[i] - times[i - 1] >= gap - 0.01, f"POST {i} came {times[i] - times[i - 1]:.3f} s after"


SEALABLE = [c for c in VECTORS["conversations"] if c["sending"] == "plain"]


@pytest.mark.parametrize("case", SEALABLE, ids=lambda c: c["name"][:60])
def test_conversation_sealed(case: dict, tmp_path: Path) -> None:
    """The same conversation sealed to a gateway (Seal.gateway()): each answer is the collector's
    answer inside the encapsulated response ('drop': no outer response), so the same rules hold,
    and a resend is the same envelope byte for byte."""
    from client_sdk import Seal, ohttp
    from client_sdk.testing import MemoryTransport
    from collector.testing import FakeCollector

    registry = parse_registry(generate.DELIVERY_TOML, "conformance/delivery")
    gateway = FakeCollector(registry, gateway_keys=[ohttp.PrivateKey.generate(3)])
    answers = list(case["answers"])
    inner: list[tuple[float, bytes]] = []

    def respond(batch: bytes) -> Response | None:
        inner.append((time.monotonic(), batch))
        answer = answers.pop(0) if answers else None
        if answer == "drop":
            raise TransportError("connection dropped (scripted)")
        return None if answer is None else Response(answer["status"], answer["headers"], answer["body"].encode())

    gateway.respond = respond
    converse(case, TelemetryClient(registry=registry, state_dir=tmp_path, transport=MemoryTransport(gateway),
                                   retry=RetryPolicy(**VECTORS["policy"]), batch_size=100, max_batch_age=3600,
                                   seal=Seal.gateway()))
    n = len(case["posts"])
    assert len(gateway.envelopes) >= n and len(inner) >= n
    envelopes = gateway.envelopes[:n]
    check_posts(case, [batch for _, batch in inner[:n]])
    for i, post in enumerate(case["posts"]):   # posts are in arrival order: any_order cases have no repeats
        if post["same_bytes_as"] is not None:
            assert envelopes[i] == envelopes[post["same_bytes_as"]], f"POST {i}: a resend is the same envelope"
        else:
            assert all(envelopes[i] != e for e in envelopes[:i]), f"POST {i}: a new batch, a new envelope"
    for index, gap in case["min_gap"].items():
        i = int(index)
        assert inner[i][0] - inner[i - 1][0] >= gap - 0.01


def check_posts(case: dict, bodies: list[bytes]) -> None:
    """Each POST carries the expected metrics; repeats are byte-identical; new batches have new ids
    and carry the very reports sent before (same payloads: never randomised again)."""
    assert len(bodies) == len(case["posts"])
    docs = [msgpack.unpackb(b) for b in bodies]
    first = {r["m"]: r for r in docs[0]["reports"]}
    posts = case["posts"]
    if case["any_order"]:      # the posts after the first in the order they came
        order = [[r["m"] for r in d["reports"]] for d in docs[1:]]
        rest = sorted(posts[1:], key=lambda p: order.index(p["metrics"]) if p["metrics"] in order else len(order))
        posts = [posts[0], *rest]
    for i, (post, doc, body) in enumerate(zip(posts, docs, bodies)):
        assert [r["m"] for r in doc["reports"]] == post["metrics"], f"POST {i}"
        if post["same_bytes_as"] is not None:
            assert body == bodies[post["same_bytes_as"]], f"POST {i} must repeat POST {post['same_bytes_as']}"
        else:
            assert all(doc["batch_id"] != d["batch_id"] for d in docs[:i]), f"POST {i} needs a new batch id"
        assert all(r == first[r["m"]] for r in doc["reports"]), f"POST {i} re-randomised a report"
