# examples/testing_checkpoint.py
"""Test recipe: steer during the final checkpoint (the same generation continues)."""

import sys

import anyio

from live_steering import Input, LiveRuntime
from live_steering.loop import AgentLoop, Context
from live_steering.testing import EventRecorder, Gate, ScriptedProvider, ScriptedTools


async def test_steer_during_the_final_checkpoint() -> None:
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    saving = Gate()

    async def checkpoint(context: Context) -> None:  # the loop's durable checkpoint, held by the test
        await saving.passage()

    provider = ScriptedProvider(["Done.", "Done, changelog updated."])
    loop = AgentLoop(runtime, provider, ScriptedTools({}), checkpoint=checkpoint)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run, "Bump the version")
        await saving.wait_reached()  # the last reply is in; the loop is saving
        generation = runtime.generation
        assert generation is not None
        steer = Input("steer", "Also update the changelog", id="late")
        await runtime.submit_steering(steer, generation["id"])
        saving.release()  # later passages go straight through
    assert recorder.count("generation.started") == 1
    assert recorder.count("generation.continued") == 1
    recorder.assert_order("generation.continued", "steering.applied", "generation.finished")
    assert provider.texts_of(1, "user") == ["Bump the version"]  # the prompt is not replayed
    assert provider.texts_of(1, "steer") == ["Also update the changelog"]


if __name__ == "__main__":
    anyio.run(test_steer_during_the_final_checkpoint, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
