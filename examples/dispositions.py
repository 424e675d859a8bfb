# examples/dispositions.py
"""The four dispositions, each produced with the engine-side API directly (no agent loop)."""

import contextlib
import sys
from collections.abc import Mapping
from typing import Any

import anyio

from live_steering import Disposition, Input, LiveRuntime


async def main() -> None:
    context: list[str] = []

    def write(steer: Input, metadata: Mapping[str, Any]) -> None:  # a synchronous writer
        context.append(steer.text)

    def broken_write(steer: Input, metadata: Mapping[str, Any]) -> None:
        raise OSError("disk full")  # the write fails: its effect cannot be established

    async with LiveRuntime() as runtime:
        submit = runtime.capability["submit"]

        # queued -> applied: written into the context at a boundary.
        async with runtime.open_generation("g1") as gen:
            receipt = await submit(Input("steer", "Use src/a.py", id="a"), "g1")
            assert receipt.disposition is Disposition.QUEUED
            await gen.boundary(write)
            assert not gen.continue_after_checkpoint()  # nothing pending: admission closes

        # queued -> held: the generation stops before its next boundary.
        async with runtime.open_generation("g2") as gen:
            await submit(Input("steer", "Rename the module", id="b"), "g2")
            gen.stop()

        # queued -> unknown: the write raised, so nobody knows whether it took effect.
        with contextlib.suppress(OSError):
            async with runtime.open_generation("g3") as gen:
                await submit(Input("steer", "Add a test", id="c"), "g3")
                await gen.boundary(broken_write)  # raises; the block publishes generation.failed

        seen = []
        for input_id in ("a", "b", "c"):
            receipt = runtime.receipt(input_id)  # the current receipt of an accepted id
            assert receipt is not None
            assert receipt.disposition is not None
            print(input_id, receipt.disposition.value, receipt.reason)
            seen.append((receipt.disposition.value, receipt.reason))

    assert context == ["Use src/a.py"]
    assert seen == [("applied", None), ("held", "generation-stopped"), ("unknown", "write-interrupted")]


if __name__ == "__main__":
    anyio.run(main, backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
