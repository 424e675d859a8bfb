# examples/integration_pydantic_ai.py
"""Steer a pydantic-ai agent while a tool runs, queue a follow-up, then stop a run (asyncio only)."""

import anyio
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from live_steering import Input, LiveRuntime
from live_steering.integrations.pydantic_ai import LiveSteering, RunStopped


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A stand-in for your model: asks for the tests, then answers the last user message it got."""
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("run_tests", {})])
    prompts = [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
               if isinstance(p, UserPromptPart)]
    return ModelResponse(parts=[TextPart(f"Done, as asked: {prompts[-1]}")])


async def main() -> None:
    runtime = LiveRuntime()
    agent = Agent(FunctionModel(model), capabilities=[LiveSteering(runtime)])
    running, may_finish = anyio.Event(), anyio.Event()

    @agent.tool_plain
    async def run_tests() -> str:
        """Run the test suite."""
        running.set()
        await may_finish.wait()
        return "12 passed, 1 failed"

    async def host() -> None:
        await running.wait()
        generation = runtime.generation  # None while no generation runs
        assert generation is not None
        generation_id = generation["id"]
        submit = runtime.capability["submit"]
        receipt = await submit(Input("steer", "Only fix the failing test", id="host-1"), generation_id)
        print("host got:", receipt.to_dict())
        # A follow-up waits for the end of this generation, then runs as the next turn of the run.
        await submit(Input("follow_up", "Then update the changelog", id="host-2"), generation_id)
        may_finish.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(host)
        result = await agent.run("Make the suite pass")
    print("output:", result.output)
    steer = next(m for m in result.all_messages() if isinstance(m, ModelRequest) and m.metadata)
    part = steer.parts[0]
    assert isinstance(part, UserPromptPart)  # the steer, as the user's words
    print("in history:", part.content, steer.metadata)
    assert result.output == "Done, as asked: Then update the changelog"
    for input_id in ("host-1", "host-2"):
        receipt = runtime.receipt(input_id)  # None if it was never accepted
        assert receipt is not None, input_id
        assert receipt.disposition == "applied", receipt

    # A host's stop (the same call the fleet and HTTP stop make) ends a run at its next boundary.
    running, may_finish = anyio.Event(), anyio.Event()

    async def stop_it() -> None:
        await running.wait()
        generation = runtime.generation
        assert generation is not None
        runtime.stop(generation["id"])
        may_finish.set()  # the running tool finishes; no model request follows

    async def run_until_stopped() -> None:
        try:
            await agent.run("Make the suite pass")
        except RunStopped as stopped:
            print("stopped:", stopped.reason, "after", len(stopped.history or []), "messages")

    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_it)
        tg.start_soon(run_until_stopped)
    assert runtime.recent_events()[-1]["type"] == "generation.stopped"


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
