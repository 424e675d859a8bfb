# examples/testing_cancel_write.py
"""Test recipe: cancel between two writes of one boundary."""

import sys

import anyio

from live_steering import Input, LiveRuntime
from live_steering.loop import AgentLoop, Reply, ToolCall
from live_steering.testing import EventRecorder, RecordingContext, ScriptedProvider, ScriptedTools


async def test_cancel_between_two_writes() -> None:
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    context = RecordingContext()
    provider = ScriptedProvider([Reply("Reading.", [ToolCall("c1", "read_file")])], then="Done.")
    loop = AgentLoop(runtime, provider, ScriptedTools({"read_file": "..."}), context=context)
    in_flight = provider.gate(0)
    second_write = context.gate_write(1)  # write 0 completes; write 1 is held before it takes effect
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run, "Write the migration")
        await in_flight.wait_reached()
        generation = runtime.generation
        assert generation is not None
        for n in (1, 2, 3):
            await runtime.submit_steering(Input("steer", f"Note {n}", id=f"n{n}"), generation["id"])
        in_flight.release()
        await second_write.wait_reached()
        tg.cancel_scope.cancel()  # cancel the loop while write 1 is in progress
    assert context.steer_ids() == ["n1"]
    assert recorder.dispositions("n1") == ["queued", "applied"]
    assert recorder.dispositions("n2") == ["queued", "unknown"]  # handed over, never confirmed
    assert recorder.dispositions("n3") == ["queued", "held"]  # never handed over: not unknown
    (cancelled,) = recorder.of_type("generation.cancelled")
    assert (cancelled["input_ids"], cancelled["accepted_input_ids"]) == (["n1"], ["n2", "n3"])


if __name__ == "__main__":
    anyio.run(test_cancel_between_two_writes, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
