"""Property: whatever the loop does and wherever the process dies, recovery keeps C22/C23.

Hypothesis draws a program (submits, boundaries whose writer succeeds, raises or is
cancelled, stops, finishes) and one point to "die" at: before a step, or inside a
context write. Dying is a SQLite backup of the live file at that point (the state
kill -9 would leave); the program then runs on, and the copy is recovered.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal_helpers import snapshot
from live_steering import Disposition, Generation, Input, LiveRuntime, Receipt
from live_steering.journal import ReceiptJournal, read_receipts

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


Step = tuple[str, int, str]

steps = st.one_of(
    st.tuples(st.just("submit"), st.integers(1, 3), st.just("")),
    st.tuples(st.just("boundary"), st.integers(-1, 3), st.sampled_from(["raise", "cancel"])),
    st.tuples(st.just("stop"), st.just(0), st.just("")),
    st.tuples(st.just("finish"), st.just(0), st.just("")),
)


class Program:
    """Runs drawn steps on one journaled runtime and takes the snapshot at the chosen point."""

    def __init__(self, runtime: LiveRuntime, journal: ReceiptJournal, live: Path, crashed: Path, at: int):
        self.runtime = runtime
        self.journal = journal
        self.live = live
        self.crashed = crashed
        self.at = at
        self.points = 0
        self.submitted: list[str] = []
        self.begun: list[str] = []
        self.generations = 0
        self.gen: Generation | None = None
        self.durable_at_crash: dict[str, Receipt] | None = None
        self.begun_at_crash: set[str] = set()

    def point(self, *, last: bool = False) -> None:
        """A place the process may die (``last``: the end of the run, if no earlier point was chosen)."""
        if (self.points == self.at or last) and self.durable_at_crash is None:
            durable = {i: self.journal.durable_receipt(i) for i in self.submitted}
            self.durable_at_crash = {i: r for i, r in durable.items() if r is not None}
            self.begun_at_crash = set(self.begun)
            snapshot(self.live, self.crashed)  # after reading memory: the file holds at least that
        self.points += 1

    async def generation(self) -> Generation:
        if self.gen is None:
            self.generations += 1
            self.gen = self.runtime.open_generation(f"g{self.generations}")
            await self.gen.__aenter__()
        return self.gen

    async def end(self, exc: BaseException | None = None) -> None:
        assert self.gen is not None
        gen, self.gen = self.gen, None
        await gen.__aexit__(None if exc is None else type(exc), exc, None)

    async def run(self, program: list[Step]) -> None:
        for kind, n, mode in program:
            self.point()
            if kind == "submit":
                gen = await self.generation()
                for _ in range(n):
                    input_id = f"i{len(self.submitted)}"
                    self.submitted.append(input_id)
                    receipt = await self.runtime.submit_steering(
                        Input("steer", f"t {input_id}", id=input_id), gen.id
                    )
                    assert receipt.accepted
            elif kind == "boundary":
                await self.boundary(await self.generation(), n, mode)
            elif kind == "stop" and self.gen is not None:
                self.gen.stop()
                await self.end()
            elif kind == "finish" and self.gen is not None and not self.gen.continue_after_checkpoint():
                await self.end()
        self.point()
        if self.gen is not None:
            self.gen.stop()
            await self.end()
        await self.journal.flush()
        self.point(last=True)  # a crash point past the end: the copy is the final state

    async def boundary(self, gen: Generation, fail_at: int, mode: str) -> None:
        writes = 0

        async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
            nonlocal writes
            self.begun.append(input.id)
            self.point()
            writes += 1
            if writes - 1 == fail_at:
                if mode == "cancel":
                    scope.cancel()
                    await anyio.lowlevel.checkpoint()
                raise OSError("write failed")

        with anyio.CancelScope() as scope:
            try:
                await gen.boundary(writer)
            except OSError as exc:
                await self.end(exc)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=st.lists(steps, min_size=1, max_size=12), at=st.integers(0, 40))
async def test_recovery_holds_the_contract_wherever_the_process_dies(program: list[Step], at: int) -> None:
    """Durable receipts survive with the same or a later disposition, nothing stays queued, and no input
    the writer was handed is recovered held; the final file agrees with the runtime."""
    with tempfile.TemporaryDirectory() as tmp:
        live, crashed = Path(tmp) / "live.db", Path(tmp) / "crashed.db"
        runtime = LiveRuntime()
        async with ReceiptJournal(live) as journal:
            journal.attach(runtime)
            driver = Program(runtime, journal, live, crashed, at)
            await driver.run(program)
            runtime._check()
        final = {e.input_id: e.receipt() for e in read_receipts(live)}
        assert final == {i: runtime.receipt(i) for i in driver.submitted}
        async with ReceiptJournal(crashed) as recovered:
            entries = {e.input_id: e for e in await recovered.entries()}
        assert driver.durable_at_crash is not None
        for input_id, durable in driver.durable_at_crash.items():
            entry = entries[input_id]
            if durable.disposition is not Disposition.QUEUED:
                assert entry.receipt() == durable
        for input_id, entry in entries.items():
            assert entry.disposition is not Disposition.QUEUED
            if input_id in driver.begun_at_crash:
                assert entry.disposition is not Disposition.HELD, f"{input_id} may be in a context"
            if entry.disposition is Disposition.APPLIED:
                assert input_id in driver.begun_at_crash
