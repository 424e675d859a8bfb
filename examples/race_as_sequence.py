# examples/race_as_sequence.py
"""Test recipe: a race written as a sequence (gates and wait_all_tasks_blocked, never sleep)."""

import sys

import anyio

from live_steering import Input, LiveRuntime


async def test_submit_wakes_the_parked_engine() -> None:
    runtime = LiveRuntime()
    woke: list[bool] = []

    async def engine() -> None:
        async with runtime.open_generation("g1") as gen:
            woke.append(await gen.wait_for_input())
            await gen.boundary(lambda item, metadata: None)

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await anyio.wait_all_tasks_blocked()  # the engine is parked
        runtime.submit_steering_nowait(Input("steer", "go", id="a"), "g1")
        assert runtime.statistics().pending == 1  # queued inside submit (C8)
        assert woke == []  # and no other task ran yet
        await anyio.wait_all_tasks_blocked()
        assert woke == [True]  # woken by that submit


if __name__ == "__main__":
    anyio.run(test_submit_wakes_the_parked_engine, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
