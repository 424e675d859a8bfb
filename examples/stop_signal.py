# examples/stop_signal.py
"""A host stops a loop while a tool runs: the loop ends cleanly, no try/except."""

import sys
from collections.abc import Mapping
from typing import Any

import anyio

from live_steering import Input, LiveRuntime, StopReason


async def main() -> None:
    context: list[str] = []
    tool_running, tool_done = anyio.Event(), anyio.Event()

    def add_steer(steer: Input, metadata: Mapping[str, Any]) -> None:
        context.append(steer.text)

    async with LiveRuntime() as runtime:
        gen = runtime.open_generation("run-1")

        async def engine() -> None:
            async with gen:  # the loop of docs/embedding.md, as written
                while True:
                    await gen.boundary(add_steer)  # raises GenerationStopped once stopped
                    tool_running.set()
                    await tool_done.wait()  # a running tool is never interrupted
                    if not gen.continue_after_checkpoint():
                        break
            print("the loop ended cleanly:", gen.terminal_event)

        async with anyio.create_task_group() as tg:
            tg.start_soon(engine)
            await tool_running.wait()
            await runtime.submit_steering(Input("steer", "also update the docs", id="s1"), "run-1")
            gen.stop(StopReason.GENERATION_STOPPED)  # the host's stop, while the tool runs
            tool_done.set()

        receipt = runtime.receipt("s1")
        assert receipt is not None
        print("s1:", receipt.to_dict())

    assert context == []
    assert gen.terminal_event is not None
    assert gen.terminal_event["reason"] == "generation-stopped"
    assert (receipt.disposition, receipt.reason) == ("held", "generation-stopped")


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
