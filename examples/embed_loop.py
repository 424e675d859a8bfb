# examples/embed_loop.py
"""Embed a LiveRuntime in your own agent loop: a complete loop, steered while a tool runs."""

import sys
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.lowlevel

from live_steering import Input, LiveRuntime


class Model:
    """A stand-in for your provider: asks for one tool, then answers."""

    def __init__(self) -> None:
        self.requests: list[list[dict[str, Any]]] = []

    async def complete(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        self.requests.append(list(messages))  # what was sent, as sent
        await anyio.lowlevel.checkpoint()
        if len(self.requests) == 1:
            return {"text": "Running the tests.", "tool": "run_tests"}
        return {"text": "All green.", "tool": None}


class ToolGate:
    """A tool that tells the host it is running, and finishes when the host says so."""

    def __init__(self) -> None:
        self.running = anyio.Event()
        self.may_finish = anyio.Event()

    async def run(self) -> str:
        self.running.set()
        await self.may_finish.wait()
        return "12 passed, 1 failed"


async def agent(
    runtime: LiveRuntime, model: Model, messages: list[dict[str, Any]], tool: ToolGate
) -> dict[str, Any] | None:
    """Your loop: one generation, a boundary before every model request."""

    async def write_steer(steer: Input, metadata: Mapping[str, Any]) -> None:
        # Your context store. Keep the metadata: it ties the entry to its input (C13).
        messages.append({"role": "user", "content": steer.text, "metadata": dict(metadata)})

    async with runtime.open_generation() as gen:  # admission opens: generation.started
        while True:
            await gen.boundary(write_steer)  # pending steers, in order, into the context
            reply = await model.complete(messages)
            messages.append({"role": "assistant", "content": reply["text"]})
            if reply["tool"] is not None:
                messages.append({"role": "tool", "content": await tool.run()})
                continue  # a tool round ends: back to the boundary
            await save_checkpoint(messages)  # your durable checkpoint
            if not gen.continue_after_checkpoint():  # False: admission is now closed
                break
    return gen.terminal_event  # generation.finished's fields


async def save_checkpoint(messages: list[dict[str, Any]]) -> None:
    await anyio.lowlevel.checkpoint()  # a real loop writes its transcript durably here


async def host(runtime: LiveRuntime, tool: ToolGate) -> None:
    """A host: anchors a steer to the running generation while the tool runs."""
    await tool.running.wait()
    generation = runtime.generation
    assert generation is not None
    submit = runtime.capability["submit"]
    receipt = await submit(Input("steer", "Only fix the failing test", id="host-1"), generation["id"])
    print("host got:", receipt.to_dict())
    tool.may_finish.set()


async def main() -> None:
    model, tool = Model(), ToolGate()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Make the suite pass"}]
    terminal: list[dict[str, Any] | None] = []
    async with LiveRuntime() as runtime:

        async def run_agent() -> None:
            terminal.append(await agent(runtime, model, messages, tool))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_agent)
            tg.start_soon(host, runtime, tool)
        final = runtime.receipt("host-1")
        assert final is not None
        print("finally:", final.to_dict())

    # The steer reached the second request, once, after the tool result it followed.
    second = model.requests[1]
    assert [m["role"] for m in second] == ["user", "assistant", "tool", "user"]
    assert second[-1]["content"] == "Only fix the failing test"
    assert second[-1]["metadata"]["input_id"] == "host-1"
    assert final.disposition == "applied"
    assert terminal[0] is not None
    assert terminal[0]["input_ids"] == ["host-1"]
    print("terminal event fields:", terminal[0])


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
