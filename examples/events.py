# examples/events.py
"""Three ways to watch a runtime: a listener, a subscription, and the recent-event log."""

import json
import sys
from collections.abc import Mapping
from typing import Any

import anyio

from live_steering import Input, LiveRuntime


def write(steer: Input, metadata: Mapping[str, Any]) -> None:
    pass  # the engine's context store


async def main() -> None:
    seen_by_listener: list[str] = []
    streamed: list[dict[str, Any]] = []
    runtime = LiveRuntime(session_id="session-42", event_log_size=4)
    # A listener runs synchronously, in the step that published the event.
    remove = runtime.add_listener(lambda event: seen_by_listener.append(event["type"]))
    # A slow consumer with room for two events: the rest is dropped and counted.
    lagging = runtime.subscribe(max_buffer=2)

    async def consume() -> None:
        with runtime.subscribe() as events:  # ends once the runtime is closed and drained
            async for event in events:
                streamed.append(event)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await anyio.wait_all_tasks_blocked()  # the consumer has subscribed
        async with runtime.open_generation("g1") as gen:
            await runtime.submit_steering(Input("steer", "Use src/a.py", id="a"), "g1")
            await gen.boundary(write)
            gen.continue_after_checkpoint()
        await runtime.aclose()

    remove()
    print("listener saw:", seen_by_listener)
    for event in streamed:
        print(json.dumps(event))  # every event is a JSON-ready dict

    types = [e["type"] for e in streamed]
    assert (
        types
        == seen_by_listener
        == [
            "generation.started",
            "steering.accepted",
            "input.delivered",
            "steering.applied",
            "generation.finished",
        ]
    )
    assert [e["sequence"] for e in streamed] == [1, 2, 3, 4, 5]
    assert all(e["session_id"] == "session-42" for e in streamed)
    assert [e["type"] for e in runtime.recent_events()] == types[-4:]  # bounded log: the oldest fell out

    stats = runtime.statistics()
    print("log:", stats.events_logged, "kept,", stats.events_dropped, "dropped")
    assert (stats.events_logged, stats.events_dropped) == (4, 1)
    print("lagging subscription kept 2, dropped", lagging.dropped)
    assert lagging.dropped == 3
    first = lagging.receive_nowait()
    assert first is not None
    assert first["type"] == "generation.started"


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
