"""``EventBridge``, what the integrations hand a framework's event bus: never a dropped, never a
reordered event, whatever the awaited ``emit`` does (on both anyio backends)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from live_steering import LiveRuntime
from live_steering.integrations._bridge import EventBridge
from live_steering.testing import Gate

pytestmark = pytest.mark.anyio


async def publish(runtime: LiveRuntime, count: int) -> None:
    """``count`` runtime events: a generation started, then stopped (two events), as often as needed."""
    for _ in range(count // 2):
        async with runtime.open_generation() as gen:
            gen.stop()


async def test_two_flushes_at_once_hand_every_event_on_once_in_order() -> None:
    """A second flush while the first one's emit waits returns at once; the first hands on
    everything, the events published meanwhile too, in publication order."""
    runtime = LiveRuntime()
    bridge = EventBridge(runtime)
    seen: list[int] = []
    gate = Gate()

    async def emit(name: str, event: dict[str, Any]) -> None:
        if not seen:
            await gate.passage()
        seen.append(event["sequence"])

    await publish(runtime, 4)
    async with anyio.create_task_group() as tg:
        tg.start_soon(bridge.flush, emit)
        await gate.wait_reached()
        await publish(runtime, 4)
        await bridge.flush(emit)  # returns at once: the first flush is handing them on
        assert seen == []
        gate.release()
    assert seen == sorted(seen)
    assert len(seen) == len(set(seen)) == 8
    assert bridge.buffered == 0
    await runtime.aclose()


async def test_an_emit_cut_short_leaves_its_event_for_the_next_flush() -> None:
    """Cancelled while the hooks take an event: that event is first in the next flush, nothing lost."""
    runtime = LiveRuntime()
    bridge = EventBridge(runtime)
    seen: list[int] = []
    gate = Gate()

    async def emit(name: str, event: dict[str, Any]) -> None:
        if not gate.released:
            await gate.passage()
        seen.append(event["sequence"])

    await publish(runtime, 2)
    published = [e["sequence"] for e in runtime.recent_events()]
    async with anyio.create_task_group() as tg:
        tg.start_soon(bridge.flush, emit)
        await gate.wait_reached()
        tg.cancel_scope.cancel()
    assert seen == []
    assert bridge.buffered == 2
    gate.release()
    await bridge.flush(emit)
    assert seen == published
    await runtime.aclose()
