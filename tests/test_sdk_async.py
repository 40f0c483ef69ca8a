"""AsyncTelemetryClient: the same behaviour as the threaded client, driven by an asyncio task."""

from __future__ import annotations

import asyncio
import threading
import time

from client_sdk import AsyncHTTPTransport, AsyncTelemetryClient, MemoryState, RetryPolicy
from client_sdk.testing import AsyncMemoryTransport, Fault
from collector.testing import FakeCollector

from .sdk_support import WireServer, decode_body, file_lock, make_registry  # noqa: F401 - file_lock: autouse

FAST = RetryPolicy(initial=0.02, maximum=0.1)


def test_async_report_aflush_aclose():
    registry = make_registry()
    fake = FakeCollector(registry)

    async def main():
        async with AsyncTelemetryClient(registry=registry, state=MemoryState(),
                                        transport=AsyncMemoryTransport(fake), batch_size=10) as client:
            for i in range(25):
                assert client.report("country", f"country-{i:02d}")
            assert client.report("theme", "dark-secret-theme")
            assert not client.report("theme", "dark-secret-theme")   # refused: one per window
            assert await client.aflush(5.0) is True
            assert fake.accepted_reports == 26
            stats = client.stats()
            assert stats["reports_acked"] == 26 and stats["refused_window"] == 1
        assert client.report("crash", True) is False                   # closed

    asyncio.run(main())


def test_async_retries_with_the_same_batch_and_offline_queue(tmp_path):
    registry = make_registry()
    fake = FakeCollector(registry)
    fake.fail(Fault("status", 503, retry_after=0.2), Fault("drop"), Fault("lost-ack"))

    async def main():
        client = AsyncTelemetryClient(registry=registry, state_dir=tmp_path / "s",
                                      transport=AsyncMemoryTransport(fake), retry=FAST)
        client.report("crash", True)
        start = time.monotonic()
        assert await client.aflush(10.0) is True
        assert time.monotonic() - start >= 0.2
        assert await client.aclose(2.0) is True

    asyncio.run(main())
    posts = [body for _, path, _, body in fake.requests if path == "/v1/reports"]
    assert len(posts) == 4 and len(set(posts)) == 1
    assert fake.accepted_reports == 1 and fake.duplicates == 1


def test_async_client_keeps_unsent_batches_on_disk(tmp_path):
    registry = make_registry()
    down = FakeCollector(registry)
    down.fail(*[Fault("drop")] * 100)

    async def first():
        client = AsyncTelemetryClient(registry=registry, state_dir=tmp_path / "s",
                                      transport=AsyncMemoryTransport(down), retry=FAST)
        client.report("country", "country-01")
        assert await client.aclose(0.3) is False

    asyncio.run(first())
    stored = [p.read_bytes() for p in (tmp_path / "s" / "outbox").glob("*.ldpb")]
    assert len(stored) == 1
    up = FakeCollector(registry)

    async def second():
        client = AsyncTelemetryClient(registry=registry, state_dir=tmp_path / "s",
                                      transport=AsyncMemoryTransport(up), retry=FAST)
        assert await client.aflush(5.0) is True
        await client.aclose()

    asyncio.run(second())
    assert [b for _, p, _, b in up.requests if p == "/v1/reports"] == stored


def test_reports_from_other_threads_wake_the_loop():
    registry = make_registry()
    fake = FakeCollector(registry)

    async def main():
        client = AsyncTelemetryClient(registry=registry, state=MemoryState(),
                                      transport=AsyncMemoryTransport(fake), batch_size=5,
                                      max_batch_age=3600)
        client.uploader.start()
        threads = [threading.Thread(target=lambda: [client.report("country", "country-02") for _ in range(5)])
                   for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for _ in range(1000):                      # full batches go without any flush (10 s at most)
            if fake.accepted_reports == 10:
                break
            await asyncio.sleep(0.01)
        assert fake.accepted_reports == 10
        await client.aclose()

    asyncio.run(main())


def test_async_http_transport_against_a_wire_server(tmp_path):
    registry = make_registry()
    with WireServer(FakeCollector(registry)) as server:
        server.retry_after = "0"
        server.script = [503, 500]

        async def main():
            client = AsyncTelemetryClient(server.url, registry, tmp_path / "s", retry=FAST)
            assert isinstance(client.uploader.transport, AsyncHTTPTransport)
            client.report("site", "async.example")
            assert await client.aflush(10.0) is True
            await client.aclose()

        asyncio.run(main())
        assert server.collector.accepted_reports == 1
        bodies = [b for _, b, _ in server.seen]
        assert len(bodies) == 3 and len(set(bodies)) == 1
        headers = server.seen[-1][0]
        assert headers["User-Agent"] == "ldpt-sdk"            # not aiohttp's versioned agent
        assert decode_body(bodies[0])["reports"][0]["m"] == "site"


def test_async_create_fetches_the_registry_off_the_loop(tmp_path):
    registry = make_registry()
    with WireServer(FakeCollector(registry)) as server:
        async def main():
            client = await AsyncTelemetryClient.create(server.url, state_dir=tmp_path / "s")
            assert await asyncio.to_thread(client.wait_for_registry, 5.0)
            assert client.registry.get("theme").fingerprint == registry.get("theme").fingerprint
            client.report("theme", "light-secret-theme")
            assert await client.aflush(5.0)
            await client.aclose()

        asyncio.run(main())
        assert server.collector.accepted_reports == 1
