"""Subscriptions around ``aclose()``: they see how a running generation ended, and never hang (C21)."""

from __future__ import annotations

import anyio
import pytest

from live_steering import Input, LiveRuntime

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_subscription_receives_terminal_event_of_generation_running_at_close() -> None:
    """C21: a generation running at aclose() publishes its terminal event to subscribers, then they end."""
    runtime = LiveRuntime()
    subscription = runtime.subscribe()
    async with runtime.open_generation("g1"):
        await runtime.submit_steering(Input("steer", "x", id="a"), "g1")
        await runtime.aclose()
    with anyio.fail_after(5):
        types = [event["type"] async for event in subscription]
    assert types == ["generation.started", "steering.accepted", "steering.held", "generation.stopped"]


async def test_subscription_ends_at_close_when_idle() -> None:
    """C21: with no generation running, aclose() ends subscriptions once their buffers are drained."""
    runtime = LiveRuntime()
    subscription = runtime.subscribe()
    async with runtime.open_generation("g1"):
        pass
    await runtime.aclose()
    with anyio.fail_after(5):
        types = [event["type"] async for event in subscription]
    assert types == ["generation.started", "generation.finished"]


async def test_subscription_made_after_close_ends_at_once() -> None:
    """C21: subscribing to a closed runtime gives an empty iterator, not one that waits forever."""
    runtime = LiveRuntime()
    await runtime.aclose()
    with anyio.fail_after(5):
        types = [event["type"] async for event in runtime.subscribe()]
    assert types == []
    assert runtime.statistics().subscribers == 0
