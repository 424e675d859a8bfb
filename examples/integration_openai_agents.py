# examples/integration_openai_agents.py
"""Steer an OpenAI Agents SDK run while a tool runs (the SDK is asyncio-only)."""

import anyio
from agents import Agent, RunConfig, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from live_steering import Input, LiveRuntime
from live_steering.integrations.openai_agents import LiveSteering


async def main() -> None:
    runtime = LiveRuntime()
    running, may_finish = anyio.Event(), anyio.Event()

    @function_tool
    async def run_tests() -> str:
        """Run the test suite."""
        running.set()
        await may_finish.wait()
        return "12 passed, 1 failed"

    # The SDK's own scripted model stands in for a real one: one tool call, then an answer.
    model = ScriptedModel([[function_call("run_tests", {}, call_id="c1")], [assistant_message("Fixed it.")]])
    agent = Agent(name="fixer", model=model, tools=[run_tests])
    steering = LiveSteering(runtime)

    async def host() -> None:
        await running.wait()
        generation_id = runtime.generation["id"]
        receipt = await runtime.capability["submit"](Input("steer", "Only fix the failing test", id="host-1"),
                                                     generation_id)
        print("host got:", receipt.to_dict())
        may_finish.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(host)
        result = await steering.run(agent, "Make the suite pass", run_config=RunConfig(tracing_disabled=True))
    print("output:", result.final_output)
    print("second model call ends with:", model.calls[1].input[-1])
    print("metadata:", steering.entries[0].metadata)
    assert model.calls[1].input[-1]["content"] == "Only fix the failing test"
    assert runtime.receipt("host-1").disposition == "applied"


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
