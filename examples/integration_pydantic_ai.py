# examples/integration_pydantic_ai.py
"""Steer a pydantic-ai agent while a tool runs: one capability (pydantic-ai runs on asyncio)."""

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
from live_steering.integrations.pydantic_ai import LiveSteering


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
        generation_id = runtime.generation["id"]
        receipt = await runtime.capability["submit"](Input("steer", "Only fix the failing test", id="host-1"),
                                                     generation_id)
        print("host got:", receipt.to_dict())
        may_finish.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(host)
        result = await agent.run("Make the suite pass")
    print("output:", result.output)
    steer = next(m for m in result.all_messages() if isinstance(m, ModelRequest) and m.metadata)
    print("in history:", steer.parts[0].content, steer.metadata)
    assert result.output == "Done, as asked: Only fix the failing test"
    assert runtime.receipt("host-1").disposition == "applied"


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
