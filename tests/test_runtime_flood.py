"""Floods (C11, C12, C24): 10,000 concurrent submitters against one runtime while its engine runs.

Submitters are staggered by a deterministic number of checkpoints (never sleeps),
so admissions interleave with the engine's boundaries on both backends. The
identity table is smaller than the set of distinct ids, so it fills mid-flood.
Every submission is recorded and the whole history is checked at the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from live_steering import Disposition, Generation, Input, LiveRuntime, Receipt
from live_steering.testing import History

pytestmark = pytest.mark.anyio

SUBMITTERS = 10_000
DISTINCT_IDS = 3_000
LIMIT = 1_000


def submission(n: int) -> tuple[Input, str]:
    """The n-th submitter's input: ids repeat across submitters; every 11th conflicts in content."""
    input_id = f"flood-{(n * 7919) % DISTINCT_IDS}"
    text = f"steer {input_id}" if n % 11 else f"conflicting steer {n}"
    return Input("steer", text, id=input_id), "gen-flood"


class Engine:
    """A minimal engine: boundary, then park until input arrives or the flood is over."""

    def __init__(self, gen: Generation, done: anyio.Event) -> None:
        self.gen = gen
        self.done = done
        self.written: list[str] = []
        self.boundaries = 0
        self.boundaries_during_flood = 0

    async def write(self, input: Input, metadata: Mapping[str, Any]) -> None:
        assert metadata["target_generation_id"] == self.gen.id
        await anyio.lowlevel.checkpoint()  # submits may land while a write is in flight
        self.written.append(input.id)

    async def run(self) -> None:
        while True:
            await self.gen.boundary(self.write)
            self.boundaries += 1
            if self.done.is_set():
                if self.gen.continue_after_checkpoint():
                    continue
                return
            self.boundaries_during_flood += 1
            async with anyio.create_task_group() as tg:

                async def input_arrives() -> None:
                    await self.gen.wait_for_input()
                    tg.cancel_scope.cancel()

                tg.start_soon(input_arrives)
                await self.done.wait()
                tg.cancel_scope.cancel()


async def test_ten_thousand_submitters_lose_nothing_and_fill_the_cap_exactly() -> None:
    """10,000 concurrent submits: exactly LIMIT identities, each applied once, capacity refusals exact."""
    runtime = LiveRuntime(identity_limit=LIMIT, event_log_size=64)
    history = History.attach(runtime)
    receipts: list[tuple[int, Receipt]] = []
    start = anyio.Event()
    done = anyio.Event()

    async def submitter(n: int) -> None:
        await start.wait()
        for _ in range(n % 13):  # deterministic stagger: interleave with the engine's boundaries
            await anyio.lowlevel.checkpoint()
        input, anchor = submission(n)
        receipts.append((n, await history.submit(input, anchor)))

    async with runtime.open_generation("gen-flood") as gen:
        engine = Engine(gen, done)
        async with anyio.create_task_group() as outer:
            outer.start_soon(engine.run)
            async with anyio.create_task_group() as flood:
                for n in range(SUBMITTERS):
                    flood.start_soon(submitter, n)
                await anyio.wait_all_tasks_blocked()
                start.set()
            runtime._check()
            done.set()

    # every submitter got a receipt, none raised
    assert len(receipts) == SUBMITTERS
    stats = runtime.statistics()
    # the cap filled exactly: LIMIT identities, none evicted
    assert stats.identities == LIMIT
    assert stats.accepted == LIMIT
    accepted_ids = [e["input_id"] for e in history.events if e["type"] == "steering.accepted"]
    assert len(accepted_ids) == len(set(accepted_ids)) == LIMIT
    retained = set(accepted_ids)
    # nothing lost, nothing duplicated: each accepted input written exactly once, in admission order
    assert engine.written == accepted_ids
    assert all(runtime.receipt(i) == Receipt(True, i, "gen-flood", Disposition.APPLIED) for i in retained)
    # the engine reached boundaries while the flood was still going
    assert engine.boundaries_during_flood >= 1
    # capacity refusals are exact, conflicts exact: decide every receipt from the admitted content
    admitted_text: dict[str, str] = {}
    for op in history.operations:  # invocation order == decision order (admission is synchronous)
        assert isinstance(op.input, Input)
        assert op.receipt is not None
        if op.receipt.accepted:
            admitted_text.setdefault(op.input.id, op.input.text)
    assert set(admitted_text) == retained
    for op in history.operations:
        assert isinstance(op.input, Input)
        assert op.receipt is not None
        if op.input.id not in retained:
            assert op.receipt.reason == "capacity", op.receipt
        elif op.input.text == admitted_text[op.input.id]:
            assert op.receipt.accepted, op.receipt
        else:
            assert op.receipt.reason == "identity-conflict", op.receipt
    all_ids = {submission(n)[0].id for n, _ in receipts}
    assert len(all_ids) == DISTINCT_IDS
    assert stats.repeated + stats.refused + stats.accepted == SUBMITTERS
    report = history.check(require_final=True).assert_ok()
    assert report.operations == SUBMITTERS
    assert report.applied == LIMIT


async def test_concurrent_submitters_of_one_new_id_get_one_admission_and_the_same_receipt() -> None:
    """2,000 submitters of the same new id at once: one admission, identical receipts (C12)."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    receipts: list[Receipt] = []
    start = anyio.Event()
    async with runtime.open_generation("g") as gen:

        async def submitter() -> None:
            await start.wait()
            receipts.append(await history.submit(Input("steer", "same", id="same-id"), "g"))

        async with anyio.create_task_group() as tg:
            for _ in range(2_000):
                tg.start_soon(submitter)
            await anyio.wait_all_tasks_blocked()
            start.set()
        assert set(receipts) == {Receipt(True, "same-id", "g", Disposition.QUEUED)}
        assert runtime.statistics().accepted == 1
        assert runtime.statistics().repeated == 1_999
        written: list[str] = []
        await gen.boundary(lambda input, metadata: written.append(input.id))
        assert written == ["same-id"]
        assert not gen.continue_after_checkpoint()
    history.check(require_final=True).assert_ok()
