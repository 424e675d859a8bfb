"""The demo's durable-receipt options: ``--journal PATH`` and ``--steers N``.

``--journal PATH`` attaches a ``ReceiptJournal`` to the demo's runtime and prints
``{"type": "receipt.durable", "input_id": ..., "disposition": ...}`` on its own line
each time a disposition becomes durable, only after the commit that made it so
returned. ``--steers N`` replaces the narrated cases with a long run: N steers over
many generations of the reference loop (some finish, some are stopped with steers
pending), for crash testing with ``kill -9``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import anyio

from .._runtime import LiveRuntime
from .._types import Disposition, Input
from ..journal import ChangeKind, JournalChange, ReceiptJournal
from ..loop import AgentLoop, LoopResult, Reply, ToolCall
from ..testing import ScriptedProvider, ScriptedTools

__all__ = ["journaled", "long_run"]

Line = Callable[[dict[str, Any]], None]


@contextlib.asynccontextmanager
async def journaled(runtime: LiveRuntime, path: str, line: Line) -> AsyncIterator[ReceiptJournal]:
    """Journal ``runtime`` at ``path``; ``line`` gets one ``receipt.durable`` dict per durable change."""

    def on_durable(changes: Sequence[JournalChange]) -> None:
        for change in changes:
            if change.change is not ChangeKind.WRITING:  # a write-ahead mark changes no disposition
                line(
                    {
                        "type": "receipt.durable",
                        "input_id": change.input_id,
                        "disposition": change.disposition.value,
                    }
                )

    async with ReceiptJournal(path) as journal:
        journal.add_durable_listener(on_durable)
        journal.attach(runtime)
        yield journal


#: Every STOP_EVERY-th generation of the long run is stopped with its steers pending (held).
STOP_EVERY = 5
#: Steers per generation of the long run cycle through 1..MAX_PER_GENERATION.
MAX_PER_GENERATION = 4


async def long_run(
    runtime: LiveRuntime,
    steers: int,
    say: Callable[[str], None],
    progress: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Submit ``steers`` steers over as many generations as it takes; returns counts by disposition.

    Each generation runs the reference loop with one tool call; the steers arrive while
    the tool runs (a scripted gate, no sleeps) and land at the next request boundary,
    except in every ``STOP_EVERY``-th generation, which is stopped first: its steers are held.
    ``progress`` is called with the number submitted so far after each generation.
    """
    if steers < 1:
        raise ValueError("--steers needs a positive count")
    submitted = 0
    generation = 0
    while submitted < steers:
        generation += 1
        count = min(steers - submitted, 1 + (generation - 1) % MAX_PER_GENERATION)
        stop = generation % STOP_EVERY == 0
        provider = ScriptedProvider([Reply("Checking.", (ToolCall("c1", "run_tests"),)), "Done."])
        tools = ScriptedTools({"run_tests": "12 passed"})
        running = tools.gate("run_tests")
        loop = AgentLoop(runtime, provider, tools)
        results: list[LoopResult] = []

        async def drive(
            loop: AgentLoop = loop, results: list[LoopResult] = results, task: int = generation
        ) -> None:
            # a runtime-issued id: the runtime remembers a counter, not each id (any N fits)
            results.append(await loop.run(f"Task {task}"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(drive)
            await running.wait_reached()
            running_generation = runtime.generation
            assert running_generation is not None  # the loop waits in its tool
            gen_id: str = running_generation["id"]
            for n in range(count):
                submitted += 1
                input = Input("steer", f"steer {submitted} for {gen_id}", id=f"steer-{submitted}")
                receipt = await runtime.submit_steering(input, gen_id)
                if not receipt.accepted:
                    raise RuntimeError(f"long run: steer {n} refused: {receipt.reason}")
            if stop:
                loop.stop()
            running.release()
        say(f"  {gen_id}: {count} steers, {results[0].outcome}")
        if progress is not None:
            progress(submitted)
    counts = {d.value: 0 for d in Disposition}
    for n in range(1, submitted + 1):
        final = runtime.receipt(f"steer-{n}")
        assert final is not None
        assert final.disposition is not None
        counts[final.disposition.value] += 1
    return counts
