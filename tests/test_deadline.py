"""client_sdk.deadline.within: a deadline that never loses the caller's cancellation."""

from __future__ import annotations

import asyncio

import pytest

from client_sdk.deadline import within


@pytest.fixture(params=["asyncio.timeout", "asyncio.wait"])
def path(request, monkeypatch):
    """Both implementations: 3.11's asyncio.timeout and the 3.10 fallback."""
    if request.param == "asyncio.wait":
        monkeypatch.delattr(asyncio, "timeout", raising=False)
    return request.param


def test_the_result_comes_back_and_a_late_awaitable_times_out(path):
    async def scenario():
        assert await within(asyncio.sleep(0, result=7), 5) == 7
        assert await within(asyncio.sleep(0, result=8), None) == 8
        never = asyncio.Event()
        with pytest.raises(asyncio.TimeoutError):
            await within(never.wait(), 0.01)
    asyncio.run(scenario())


def test_a_cancellation_in_the_step_the_inner_awaitable_completes_propagates(path):
    async def scenario():
        gate, finished = asyncio.Event(), []

        async def inner():
            await gate.wait()
            finished.append(True)
            return 1

        async def caller():
            await within(inner(), 30)
            await asyncio.Event().wait()   # ran on: the cancellation was lost

        task = asyncio.create_task(caller())
        await asyncio.sleep(0)
        gate.set()
        while not finished:
            await asyncio.sleep(0)
        assert task.cancel()
        done, _ = await asyncio.wait({task}, timeout=30)   # a hang guard only
        assert done and task.cancelled()
    asyncio.run(scenario())


def test_the_inner_awaitable_is_cancelled_with_its_caller(path):
    async def scenario():
        started, inner_cancelled = asyncio.Event(), []

        async def inner():
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                inner_cancelled.append(True)
                raise

        task = asyncio.create_task(within(inner(), 30))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)
        assert inner_cancelled
    asyncio.run(scenario())
