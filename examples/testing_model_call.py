# examples/testing_model_call.py
"""Test recipe: steer while the model call is in flight."""

import sys

import anyio

from live_steering import Input, LiveRuntime
from live_steering.loop import AgentLoop, Reply, ToolCall
from live_steering.testing import EventRecorder, ScriptedProvider, ScriptedTools


async def test_steer_while_model_call_is_in_flight() -> None:
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    provider = ScriptedProvider([Reply("Reading.", [ToolCall("c1", "read_file")]), "Fixed."])
    loop = AgentLoop(runtime, provider, ScriptedTools({"read_file": "def test_a(): ..."}))
    in_flight = provider.gate(0)  # hold model call 0 after its request was recorded
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run, "Fix the failing test")
        await in_flight.wait_reached()  # request 0 is sent; its reply is held
        generation = runtime.generation
        assert generation is not None
        steer = Input("steer", "Use src/a.py", id="s1")
        receipt = await runtime.submit_steering(steer, generation["id"])
        assert receipt.disposition == "queued"
        in_flight.release()
    assert provider.texts_of(0, "steer") == []  # request 0 could not carry it
    assert provider.texts_of(1, "steer") == ["Use src/a.py"]  # request 1 carries it, once
    assert recorder.dispositions("s1") == ["queued", "applied"]
    recorder.assert_order("steering.accepted", "steering.applied", "generation.finished")


if __name__ == "__main__":
    anyio.run(
        test_steer_while_model_call_is_in_flight, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio"
    )
