# examples/integration_amplifier.py
"""Steer an Amplifier orchestrator while a tool runs (amplifier-core is asyncio-only)."""

from typing import Any

import anyio
from amplifier_core import ToolResult
from amplifier_core.message_models import ChatRequest, ChatResponse, TextBlock, ToolCall
from amplifier_core.models import ProviderInfo
from amplifier_core.testing import EventRecorder, MockContextManager, MockCoordinator

from live_steering import Input
from live_steering.integrations.amplifier import CAPABILITY, mount


class Provider:
    """A stand-in for your provider module: asks for one tool, then answers."""

    name = "scripted"

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    def get_info(self) -> ProviderInfo:
        return ProviderInfo(id="scripted", display_name="Scripted")

    async def list_models(self) -> list[Any]:
        return []

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        self.requests.append(request)
        if len(self.requests) == 1:
            call = ToolCall(id="call-1", name="run_tests", arguments={})
            return ChatResponse(content=[TextBlock(text="Running the tests.")], tool_calls=[call])
        return ChatResponse(content=[TextBlock(text="Fixed the failing test only.")])

    def parse_tool_calls(self, response: ChatResponse) -> list[ToolCall]:
        return list(response.tool_calls or [])


class RunTests:
    """A tool module that tells the host it is running, and finishes when the host says so."""

    name, description, input_schema = "run_tests", "Run the test suite", {"type": "object"}

    def __init__(self) -> None:
        self.running, self.may_finish = anyio.Event(), anyio.Event()

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        self.running.set()
        await self.may_finish.wait()
        return ToolResult(success=True, output="12 passed, 1 failed")


async def main() -> None:
    coordinator = MockCoordinator()  # your session's coordinator
    cleanup = await mount(coordinator, {})  # or by name: "loop-live-steering"
    orchestrator = coordinator.mount_points["orchestrator"]
    provider, tool, context = Provider(), RunTests(), MockContextManager()
    answers: list[str] = []

    async def agent() -> None:
        answers.append(
            await orchestrator.execute(
                "Make the suite pass", context, {"default": provider}, {"run_tests": tool}, EventRecorder()
            )
        )

    async def host() -> None:
        await tool.running.wait()
        capability = coordinator.get_capability(CAPABILITY)  # the seed's shape
        generation_id = orchestrator.runtime.generation["id"]
        steer = Input("steer", "Only fix the failing test", id="host-1")
        receipt = await capability["submit"](steer, generation_id)
        print("host got:", receipt.to_dict())
        tool.may_finish.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(agent)
        tg.start_soon(host)
    steer = provider.requests[1].messages[-1]  # the second request ends with the steer
    print("second request ends with:", steer.role, repr(steer.content), steer.metadata)
    print("answer:", answers[0])
    assert steer.content == "Only fix the failing test"
    assert steer.metadata["input_id"] == "host-1"
    assert orchestrator.runtime.receipt("host-1").disposition == "applied"
    await cleanup()


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
