# examples/integration_amplifier.py
"""Steer a real AmplifierSession while a tool runs, holding only its coordinator (asyncio-only)."""

from typing import Any

import anyio
from amplifier_core import AmplifierSession, ModuleLoader, ToolResult
from amplifier_core.message_models import ChatRequest, ChatResponse, TextBlock, ToolCall
from amplifier_core.models import ProviderInfo

from live_steering import Input
from live_steering.integrations.amplifier import CAPABILITY, RUNTIME_CAPABILITY

# The mount plan: this package's orchestrator by its entry-point name, and the session's other
# modules. A real app names its own (context-simple, provider-anthropic, ...); this example
# brings three small stand-ins, defined below, so that it runs offline.
MOUNT_PLAN: dict[str, Any] = {
    "session": {"orchestrator": "loop-live-steering", "context": "context-memory"},
    "orchestrator": {"config": {"max_iterations": 16}},
    "providers": [{"module": "provider-scripted"}],
    "tools": [{"module": "tool-run-tests"}],
}


class Provider:
    """Stands in for a provider module: asks for one tool, then answers."""

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


class Context:
    """Stands in for a context module: the conversation, in memory."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def add_message(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    async def get_messages_for_request(self, token_budget: Any = None, provider: Any = None) -> list[Any]:
        return list(self.messages)

    async def get_messages(self) -> list[dict[str, Any]]:
        return list(self.messages)

    async def set_messages(self, messages: list[dict[str, Any]]) -> None:
        self.messages = list(messages)

    async def clear(self) -> None:
        self.messages.clear()


class RunTests:
    """Stands in for a tool module: says it is running, and finishes when the host lets it."""

    name, description, input_schema = "run_tests", "Run the test suite", {"type": "object"}

    def __init__(self) -> None:
        self.running, self.may_finish = anyio.Event(), anyio.Event()

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        self.running.set()
        await self.may_finish.wait()
        return ToolResult(success=True, output="12 passed, 1 failed")


PROVIDER, TOOL = Provider(), RunTests()


async def mount_provider(coordinator: Any, config: dict[str, Any]) -> None:
    await coordinator.mount("providers", PROVIDER, name="scripted")


async def mount_context(coordinator: Any, config: dict[str, Any]) -> None:
    await coordinator.mount("context", Context())


async def mount_tool(coordinator: Any, config: dict[str, Any]) -> None:
    await coordinator.mount("tools", TOOL, name="run_tests")


#: The stand-ins by module id, as the mount plan names them.
STAND_INS = {
    "provider-scripted": mount_provider,
    "context-memory": mount_context,
    "tool-run-tests": mount_tool,
}


class Loader(ModuleLoader):  # type: ignore[misc]
    """Amplifier's loader, which also knows the stand-ins; every other name (the orchestrator's
    "loop-live-steering" included) it resolves as usual, here through its entry point."""

    async def load(
        self, module_id: str, config: Any = None, source_hint: Any = None, coordinator: Any = None
    ) -> Any:
        if module_id not in STAND_INS:
            return await super().load(module_id, config, source_hint, coordinator)
        mount = STAND_INS[module_id]

        async def mount_with_config(coordinator: Any) -> None:
            await mount(coordinator, config or {})

        return mount_with_config


async def main() -> None:
    session = AmplifierSession(MOUNT_PLAN)
    session.coordinator.loader = Loader(coordinator=session.coordinator)  # where initialize() looks
    answers: list[str] = []

    async def agent() -> None:
        answers.append(await session.execute("Make the suite pass"))

    async def host() -> None:  # holds only the coordinator
        await TOOL.running.wait()
        capability = session.coordinator.get_capability(CAPABILITY)
        runtime = session.coordinator.get_capability(RUNTIME_CAPABILITY)
        generation_id = runtime.generation["id"]  # the running execute's generation
        steer = Input("steer", "Only fix the failing test", id="host-1")
        receipt = await capability["submit"](steer, generation_id)
        print("host got:", receipt.to_dict())
        TOOL.may_finish.set()  # (runtime.stop(generation_id) would end the run at its next boundary)

    async with session:  # initialize() mounts the plan; leaving it runs the modules' cleanups
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent)
            tg.start_soon(host)
        runtime = session.coordinator.get_capability(RUNTIME_CAPABILITY)
        assert runtime.receipt("host-1").disposition == "applied"
    steer = PROVIDER.requests[1].messages[-1]  # the second request ends with the steer
    print("second request ends with:", steer.role, repr(steer.content), steer.metadata)
    print("answer:", answers[0])
    assert steer.content == "Only fix the failing test"
    assert steer.metadata["input_id"] == "host-1"
    mode = session.coordinator.get_capability(CAPABILITY)["mode"]
    assert mode == "unavailable"  # closed by cleanup
    print("after cleanup the capability's mode is", mode)


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
