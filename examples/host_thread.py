# examples/host_thread.py
"""For hosts in a thread: steer an agent whose runtime runs in an event loop, through a portal.

The host here is plain synchronous code (a web framework's worker thread, a GUI
callback). The runtime and its engine live in the event loop of an anyio
``BlockingPortal``; every call the host makes goes through ``portal.call``, which
runs it in that loop and blocks this thread until it returns.
"""

import sys
from collections.abc import Mapping
from typing import Any

import anyio
from anyio.abc import TaskStatus
from anyio.from_thread import start_blocking_portal

from live_steering import Input, LiveRuntime, Receipt, StopReason, UnknownInputError

context: list[str] = []  # stands in for the engine's context store


def write(steer: Input, metadata: Mapping[str, Any]) -> None:
    context.append(steer.text)


async def engine(runtime: LiveRuntime, *, task_status: TaskStatus[str]) -> str:
    """The agent's loop, reduced to its steering: park for input, write it at the boundary."""
    async with runtime.open_generation() as gen:
        task_status.started(gen.id)  # the host gets the anchor
        while await gen.wait_for_input():  # False once the generation is stopped
            await gen.boundary(write)
    assert gen.terminal_event is not None
    return str(gen.terminal_event["reason"])


async def wait_final_within(runtime: LiveRuntime, input_id: str, seconds: float) -> Receipt:
    """The host's deadline is its own cancel scope around wait_final."""
    with anyio.fail_after(seconds):
        return await runtime.wait_final(input_id)


def main(backend: str) -> None:
    with start_blocking_portal(backend=backend) as portal:
        runtime = LiveRuntime()
        finished, generation_id = portal.start_task(engine, runtime)

        # Submit, then block this thread until the input is final (applied, held or unknown).
        fix = Input("steer", "Use the staging database, not production", id="fix-1")
        receipt = portal.call(runtime.submit_steering, fix, generation_id)
        print("submitted:", receipt.to_dict())
        final = portal.call(wait_final_within, runtime, "fix-1", 10.0)
        print("final:", final.to_dict())
        assert final.disposition == "applied"
        assert context == ["Use the staging database, not production"]

        # An id the runtime never accepted can never be final: a clear error, not a hang.
        try:
            portal.call(runtime.wait_final, "never-sent")
        except UnknownInputError as error:
            print("UnknownInputError:", error)

        # Calling the runtime directly from this thread is refused before anything happens.
        try:
            runtime.submit_steering_nowait(Input("steer", "Directly", id="direct"), generation_id)
        except RuntimeError as error:
            print("RuntimeError:", str(error).split(":")[0])
        assert portal.call(runtime.receipt, "direct") is None

        # Stop the generation by its id: the engine's loop ends, its block publishes generation.stopped.
        assert portal.call(runtime.stop, generation_id, StopReason.GENERATION_STOPPED)
        print("engine ended:", finished.result(timeout=10))
        portal.call(runtime.aclose)

        # After the close, a repeat still answers its receipt; a new input is refused.
        again = portal.call(runtime.submit_steering, fix, generation_id)
        assert again == final
        late = portal.call(runtime.submit_steering, Input("steer", "Too late", id="late"), generation_id)
        print("after close:", again.to_dict()["disposition"], "/", late.reason)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "asyncio")
