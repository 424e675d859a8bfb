# examples/follow_ups.py
"""A steer, a follow-up and a skipped tool batch, with the reference loop and scripted parts."""

import sys

import anyio

from live_steering import Disposition, Input, LiveRuntime
from live_steering.loop import SKIPPED_TOOL_RESULT, AgentLoop, Reply, ToolCall
from live_steering.testing import ScriptedProvider, ScriptedTools


async def main() -> None:
    batch = Reply("reading", (ToolCall("c1", "read"), ToolCall("c2", "read"), ToolCall("c3", "read")))
    provider = ScriptedProvider([batch, "fixed", "tests pass"])
    tools = ScriptedTools({"read": "file contents"})
    first_read = tools.gate("read")  # hold the first tool call while the host steers

    async with LiveRuntime() as runtime:
        loop = AgentLoop(runtime, provider, tools, skip_tools_on_steer=True)
        async with anyio.create_task_group() as tg:
            results = []

            async def run() -> None:
                results.append(await loop.run("Fix the failing test"))

            tg.start_soon(run)
            await first_read.wait_reached()  # the agent runs its first tool now
            generation = runtime.generation
            assert generation is not None
            submit = runtime.capability["submit"]
            # A steer for this generation, and a follow-up for after it.
            await submit(Input("steer", "Only touch src/a.py", id="steer-1"), generation["id"])
            await submit(Input("follow_up", "Then run the whole suite", id="next-1"), generation["id"])
            first_read.release()

    (result,) = results
    steer, follow_up = runtime.receipt("steer-1"), runtime.receipt("next-1")
    assert steer is not None
    assert follow_up is not None
    assert steer.disposition is Disposition.APPLIED  # written before request 2
    assert follow_up.disposition is Disposition.APPLIED  # written as the next generation's request
    assert follow_up.generation_id == result.generation_ids[0]  # its receipt keeps its anchor
    assert result.skipped_tool_call_ids == ("c2", "c3")  # not run: the steer made them pointless
    second, third = provider.requests[1], provider.requests[2]
    skipped = SKIPPED_TOOL_RESULT
    assert [e.text for e in second if e.role == "tool"] == ["file contents", skipped, skipped]
    assert [e.text for e in third if e.role == "user"] == ["Fix the failing test", "Then run the whole suite"]
    print("generations:", len(result.generation_ids), "skipped:", ", ".join(result.skipped_tool_call_ids))
    print("steer-1", steer.disposition.value, "next-1", follow_up.disposition.value)


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
