# examples/wait_for_input.py
"""A long job parked between steps: wait_for_input() wakes on admission, stop() ends it."""

import sys
from collections.abc import Mapping
from typing import Any

import anyio

from live_steering import Input, LiveRuntime


async def main() -> None:
    notes: list[str] = []
    two_written = anyio.Event()

    def write(steer: Input, metadata: Mapping[str, Any]) -> None:
        notes.append(steer.text)
        if len(notes) == 2:
            two_written.set()

    async with LiveRuntime() as runtime:
        gen = runtime.open_generation("job-1")
        opened = anyio.Event()

        async def job() -> None:
            async with gen:
                opened.set()
                # True: input is pending. False: admission closed (stop, aclose) and nothing is pending.
                while await gen.wait_for_input():
                    await gen.boundary(write)

        async with anyio.create_task_group() as tg:
            tg.start_soon(job)
            await opened.wait()
            await runtime.submit_steering(Input("steer", "first note", id="n1"), "job-1")
            await runtime.submit_steering(Input("steer", "second note", id="n2"), "job-1")
            await two_written.wait()
            # Admitted and stopped in one synchronous step: the job never gets to write it.
            late = runtime.submit_steering_nowait(Input("steer", "third note", id="n3"), "job-1")
            assert late.disposition == "queued"
            gen.stop()  # holds n3 and wakes the parked job, whose wait returns False

        assert gen.terminal_event is not None
        print("terminal:", gen.terminal_event)
        held = runtime.receipt("n3")
        assert held is not None
        print("n3:", held.to_dict())

    assert notes == ["first note", "second note"]
    assert gen.terminal_event["input_ids"] == ["n1", "n2"]
    assert gen.terminal_event["accepted_input_ids"] == ["n3"]
    assert (held.disposition, held.reason) == ("held", "generation-stopped")


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
