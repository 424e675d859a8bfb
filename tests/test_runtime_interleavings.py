"""Random interleavings of hosts and an engine on the real runtime, on asyncio and trio (C8-C20).

Hypothesis draws a script of host actions (submit new, repeat, conflicting or stale
inputs, stop, cancel, close, start the next generation, make the next write fail) and
engine steps. The engine is a small loop whose every await is a gate the script
releases one at a time, so each interleaving is an exact, replayable sequence with
no sleeps. After every action all tasks run until they park, then the runtime's
receipts are checked against what the context actually received.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from live_steering import Disposition, Generation, HoldReason, Input, LiveRuntime, Receipt, StopReason

Op = tuple[Any, ...]

_FORWARD = {
    Disposition.QUEUED: {Disposition.QUEUED, Disposition.APPLIED, Disposition.HELD, Disposition.UNKNOWN},
    Disposition.APPLIED: {Disposition.APPLIED},
    Disposition.HELD: {Disposition.HELD},
    Disposition.UNKNOWN: {Disposition.UNKNOWN},
}


class WriteFailure(Exception):
    """The context store failing one write, on the script's request."""


class Stepper:
    """Gates every await of the engine: each ``release()`` lets exactly one step through."""

    def __init__(self) -> None:
        self.permits = 0
        self.free = False
        self._event = anyio.Event()

    async def step(self) -> None:
        while not self.free and self.permits == 0:
            self._event = anyio.Event()
            await self._event.wait()
        if not self.free:
            self.permits -= 1
        await anyio.lowlevel.checkpoint()

    def release(self, free: bool = False) -> None:
        self.permits += 1
        self.free = self.free or free
        self._event.set()


class Scenario:
    """One runtime, its context, the engine's generations, and the checks run after every action."""

    def __init__(self, limit: int) -> None:
        self.runtime = LiveRuntime(identity_limit=limit, event_log_size=100_000)
        self.stepper = Stepper()
        self.written: list[tuple[str, str]] = []  # (input id, generation running at the write)
        self.confirmed: list[str] = []
        self.fail_next_write = False
        self.gen: Generation | None = None
        self.scope: anyio.CancelScope | None = None
        self.engine_done = anyio.Event()
        self.engine_done.set()
        self.generations: list[str] = []
        self.accepted: dict[str, tuple[Input, str]] = {}
        self.seen: dict[str, Disposition] = {}
        self.fresh = 0

    # -- the engine ------------------------------------------------------------------------------

    async def writer(self, item: Input, metadata: Mapping[str, Any]) -> None:
        await self.stepper.step()
        if self.fail_next_write:
            self.fail_next_write = False
            raise WriteFailure(item.id)
        assert self.gen is not None
        self.written.append((item.id, self.gen.id))
        assert metadata["target_generation_id"] == self.gen.id  # C13/C18: written where anchored
        await self.stepper.step()
        self.confirmed.append(item.id)

    async def engine(self, generation_id: str) -> None:
        with anyio.CancelScope() as self.scope:
            try:
                async with self.runtime.open_generation(generation_id) as gen:
                    self.gen = gen
                    while gen.accepting:
                        await gen.boundary(self.writer)
                        if not gen.accepting:
                            break
                        await self.stepper.step()  # the provider call, tools
                        await self.stepper.step()  # the durable checkpoint
                        if not gen.continue_after_checkpoint():
                            break
                    await self.stepper.step()  # leaving the block
            except WriteFailure:
                pass
        self.engine_done.set()

    # -- the host's actions ------------------------------------------------------------------------

    def anchor(self) -> str:
        info = self.runtime.generation
        return info["id"] if info is not None else (self.generations[-1] if self.generations else "g0")

    async def submit(self, item: Input, anchor: str) -> Receipt:
        before = self.runtime.receipt(item.id)
        receipt: Receipt = await self.runtime.capability["submit"](item, anchor)
        known = self.accepted.get(item.id)
        if known is None and receipt.accepted:
            assert receipt.disposition is Disposition.QUEUED
            self.accepted[item.id] = (item, anchor)
        elif known is not None and receipt.accepted:
            assert known == (item, anchor)  # C10: only an identical repeat answers
            assert before is not None
            assert before.disposition is not None
            assert receipt.disposition in _FORWARD[before.disposition]
        elif known is not None:
            assert receipt.reason in {"identity-conflict", "closed"}
        return receipt

    async def act(self, op: Op, tg: anyio.abc.TaskGroup) -> None:
        kind = op[0]
        if kind == "new":
            self.fresh += 1
            await self.submit(Input("steer", f"steer {self.fresh}", id=f"i{self.fresh}"), self.anchor())
        elif kind == "repeat" and self.accepted:
            item, anchor = list(self.accepted.values())[op[1] % len(self.accepted)]
            receipt = await self.submit(item, anchor)
            if not self.runtime.closed:
                assert receipt == self.runtime.receipt(item.id)
        elif kind == "conflict" and self.accepted:
            item, anchor = list(self.accepted.values())[op[1] % len(self.accepted)]
            receipt = await self.submit(Input("steer", item.text + "!", id=item.id), anchor)
            assert not receipt.accepted
        elif kind == "stale" and self.generations:
            self.fresh += 1
            receipt = await self.submit(Input("steer", "late", id=f"i{self.fresh}"), self.generations[0])
            if self.generations[0] != self.anchor() or self.runtime.generation is None:
                assert not receipt.accepted
        elif kind == "step":
            self.stepper.release()
        elif kind == "stop" and self.gen is not None and self.runtime.generation is not None:
            self.gen.stop(op[1])
        elif kind == "cancel" and self.scope is not None:
            self.scope.cancel()
        elif kind == "fail":
            self.fail_next_write = True
        elif kind == "close":
            await self.runtime.aclose()
        elif kind == "start" and self.engine_done.is_set() and not self.runtime.closed:
            generation_id = f"g{len(self.generations) + 1}"
            self.generations.append(generation_id)
            self.engine_done = anyio.Event()
            tg.start_soon(self.engine, generation_id)

    # -- checks ------------------------------------------------------------------------------------

    def check(self) -> None:
        runtime = self.runtime
        runtime._check()
        written_ids = {input_id for input_id, _ in self.written}
        assert len(self.confirmed) == len(set(self.confirmed))  # C20: applied at most once
        for input_id, (_, anchor) in self.accepted.items():
            receipt = runtime.receipt(input_id)
            assert receipt is not None  # C11: never evicted
            assert receipt.generation_id == anchor
            disposition = receipt.disposition
            assert disposition is not None
            assert disposition in _FORWARD[self.seen.get(input_id, Disposition.QUEUED)]  # C20
            self.seen[input_id] = disposition
            if disposition is Disposition.APPLIED:
                assert input_id in self.confirmed  # C14: applied means its write returned
            elif disposition is Disposition.HELD:
                assert input_id not in written_ids  # never handed to a writer
                assert receipt.reason in {r.value for r in HoldReason}
            elif disposition is Disposition.UNKNOWN:
                assert receipt.reason == "write-interrupted"
            elif runtime.generation is None or runtime.generation["id"] != anchor:
                raise AssertionError(f"{input_id} queued outside its running generation")  # C17/C18
        for input_id, generation_id in self.written:
            assert self.accepted[input_id][1] == generation_id  # C18: never moved
        started = [e for e in runtime.recent_events() if e["type"] == "generation.started"]
        assert len(started) == len(self.generations)  # C16: continuing never starts a new one


#: Weighted by repetition: engine steps dominate so that writes, checkpoints and
#: continuations really happen between the hosts' actions.
_OPS: list[Op] = [
    *[("step",)] * 10,
    *[("new",)] * 5,
    *[("repeat", n) for n in range(3)],
    *[("conflict", n) for n in range(2)],
    ("stale",),
    ("start",),
    ("start",),
    ("fail",),
    ("cancel",),
    ("close",),
    ("stop", StopReason.GENERATION_STOPPED),
    ("stop", StopReason.BUDGET_EXHAUSTED),
]
_ops = st.lists(st.sampled_from(_OPS), min_size=10, max_size=60)


async def settle() -> None:
    """Let every task run until it parks.

    A few plain checkpoints first: asyncio delivers a cancel scope's cancellation over
    several loop turns, and ``wait_all_tasks_blocked`` polls every 0.1 s on asyncio while
    any task is still runnable. The wait that follows is what guarantees the order.
    """
    for _ in range(4):
        await anyio.lowlevel.checkpoint()
    await anyio.wait_all_tasks_blocked()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(max_examples=300, deadline=None)
@given(ops=_ops, limit=st.sampled_from([3, 2_000]))
# Cancelled after the context write but before the writer returned: must end unknown, not held.
@example(ops=[("new",), ("step",), ("step",), ("step",), ("cancel",)], limit=2_000)
def test_random_interleavings_keep_receipts_honest(backend: str, ops: list[Op], limit: int) -> None:
    """C8-C20: under any interleaving of hosts and engine, receipts match what the context received."""

    async def main() -> None:
        scenario = Scenario(limit)
        async with anyio.create_task_group() as tg:
            await scenario.act(("start",), tg)
            await settle()
            for op in ops:
                await scenario.act(op, tg)
                await settle()
                scenario.check()
            # Wind down: let the engine run freely, then close; nothing may stay queued.
            scenario.stepper.release(free=True)
            await scenario.engine_done.wait()
            await scenario.runtime.aclose()
        scenario.check()
        assert scenario.runtime.generation is None
        for input_id in scenario.accepted:
            receipt = scenario.runtime.receipt(input_id)
            assert receipt is not None
            assert receipt.disposition is not None
            assert receipt.disposition is not Disposition.QUEUED  # C17: nothing left queued
            event(f"input ended {receipt.disposition.value} ({receipt.reason})")
        for e in scenario.runtime.recent_events():
            if e["type"].startswith("generation.") and e["type"] != "generation.started":
                event(f"{e['type']} ({e.get('reason')})")

    anyio.run(main, backend=backend)
