# examples/testing_tool_call.py
"""Test recipe: steer while a tool runs (the tool is not interrupted)."""

import sys

import anyio

from live_steering import Input, LiveRuntime
from live_steering.loop import AgentLoop, Reply, ToolCall
from live_steering.testing import ScriptedProvider, ScriptedTools


async def test_steer_while_a_tool_runs() -> None:
    runtime = LiveRuntime()
    provider = ScriptedProvider([Reply("Testing.", [ToolCall("c1", "run_tests")]), "Green."])
    tools = ScriptedTools({"run_tests": "1 failed, 11 passed"})
    running = tools.gate("run_tests")  # hold the first run_tests call while it runs
    loop = AgentLoop(runtime, provider, tools)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run, "Make the suite pass")
        await running.wait_reached()
        generation = runtime.generation
        assert generation is not None
        for n, text in enumerate(["Skip the flaky test", "Then run lint"], 1):
            await runtime.submit_steering(Input("steer", text, id=f"b{n}"), generation["id"])
        await anyio.wait_all_tasks_blocked()
        assert provider.calls == 1  # nothing moved: the tool is still running
        running.release()
    request = provider.requests[1]
    assert [e.role for e in request] == ["user", "assistant", "tool", "steer", "steer"]
    assert provider.texts_of(1, "steer") == ["Skip the flaky test", "Then run lint"]
    assert [call.name for call in tools.calls] == ["run_tests"]  # ran once, to completion


if __name__ == "__main__":
    anyio.run(test_steer_while_a_tool_runs, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
