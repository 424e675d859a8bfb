"""The runtime's write-ahead hook: ``LiveRuntime.set_write_barrier`` and ``Generation.boundary``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import pytest

from live_steering import Disposition, HoldReason, Input, LiveRuntime

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Log:
    """Records barrier calls and writes in one sequence, to assert their order."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, tuple[str, ...]]] = []

    async def barrier(self, generation_id: str, inputs: Sequence[Input]) -> None:
        self.steps.append(("barrier", tuple(i.id for i in inputs)))
        await anyio.lowlevel.checkpoint()

    async def writer(self, input: Input, metadata: Mapping[str, Any]) -> None:
        self.steps.append(("write", (input.id,)))
        await anyio.lowlevel.checkpoint()


async def _submit(runtime: LiveRuntime, gen_id: str, *ids: str) -> None:
    for input_id in ids:
        receipt = await runtime.submit_steering(Input("steer", f"text {input_id}", id=input_id), gen_id)
        assert receipt.accepted


async def test_barrier_announces_each_input_right_before_its_write() -> None:
    """C23: each input gets its own barrier call just before its write, so only it is "maybe written"."""
    log = Log()
    runtime = LiveRuntime()
    runtime.set_write_barrier(log.barrier)
    async with runtime.open_generation() as gen:
        await _submit(runtime, gen.id, "a", "b", "c")
        applied = await gen.boundary(log.writer)
        assert [r.input_id for r in applied] == ["a", "b", "c"]
        gen.stop()
    assert log.steps == [
        ("barrier", ("a",)),
        ("write", ("a",)),
        ("barrier", ("b",)),
        ("write", ("b",)),
        ("barrier", ("c",)),
        ("write", ("c",)),
    ]
    runtime._check()


async def test_a_follow_ups_barrier_names_the_generation_it_is_written_into() -> None:
    """C29: a follow-up anchored to g1 is written at g2's first boundary; the barrier is told g2,
    as ``input.delivered`` is, so a write-ahead mark (the fleet's ``writing`` row) names where the
    write happens. A steer's barrier names its own generation."""
    told: list[tuple[str, str]] = []

    async def barrier(generation_id: str, inputs: Sequence[Input]) -> None:
        told.append((generation_id, inputs[0].id))
        await anyio.lowlevel.checkpoint()

    runtime = LiveRuntime()
    runtime.set_write_barrier(barrier)
    async with runtime:
        async with runtime.open_generation("g1") as gen:
            assert (await runtime.submit_steering(Input("follow_up", "then test", id="f1"), "g1")).accepted
            await _submit(runtime, "g1", "s1")
            await gen.boundary(lambda input, metadata: None)
            assert not gen.continue_after_checkpoint()
        async with runtime.open_generation("g2") as gen:
            await gen.boundary(lambda input, metadata: None)
            assert not gen.continue_after_checkpoint()
        receipt = runtime.receipt("f1")
        assert receipt is not None
        assert (receipt.generation_id, receipt.disposition) == ("g1", Disposition.APPLIED)  # the anchor
    assert told == [("g1", "s1"), ("g2", "f1")]


async def test_no_barrier_call_for_an_empty_boundary() -> None:
    """A boundary with nothing pending never calls the barrier (no cost when idle)."""
    log = Log()
    runtime = LiveRuntime()
    runtime.set_write_barrier(log.barrier)
    async with runtime.open_generation() as gen:
        assert await gen.boundary(log.writer) == []
        gen.stop()
    assert log.steps == []


async def test_input_admitted_during_a_write_gets_its_own_barrier_call() -> None:
    """An input admitted while the writer runs is announced before it is written, not after."""
    log = Log()
    runtime = LiveRuntime()
    runtime.set_write_barrier(log.barrier)
    async with runtime.open_generation() as gen:

        async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
            await log.writer(input, metadata)
            if input.id == "a":
                await _submit(runtime, gen.id, "late")

        await _submit(runtime, gen.id, "a")
        await gen.boundary(writer)
        gen.stop()
    assert log.steps == [
        ("barrier", ("a",)),
        ("write", ("a",)),
        ("barrier", ("late",)),
        ("write", ("late",)),
    ]
    assert runtime.receipt("late") is not None
    assert runtime.receipt("late").disposition is Disposition.APPLIED  # type: ignore[union-attr]


async def test_a_failing_barrier_leaves_the_inputs_pending_not_unknown() -> None:
    """A barrier that raises hands nothing to the writer: inputs stay queued and a retry writes them."""
    log = Log()
    runtime = LiveRuntime()
    failures = [RuntimeError("journal down")]

    async def barrier(generation_id: str, inputs: Sequence[Input]) -> None:
        if failures:
            raise failures.pop()
        await log.barrier(generation_id, inputs)

    runtime.set_write_barrier(barrier)
    async with runtime.open_generation() as gen:
        await _submit(runtime, gen.id, "a", "b")
        with pytest.raises(RuntimeError, match="journal down"):
            await gen.boundary(log.writer)
        assert log.steps == []
        assert gen.pending == 2
        for input_id in ("a", "b"):
            assert runtime.receipt(input_id).disposition is Disposition.QUEUED  # type: ignore[union-attr]
        runtime._check()
        await gen.boundary(log.writer)
        gen.stop()
    assert log.steps == [("barrier", ("a",)), ("write", ("a",)), ("barrier", ("b",)), ("write", ("b",))]
    assert runtime.statistics().unknown == 0
    runtime._check()


async def test_cancelled_barrier_then_cancelled_generation_holds_the_inputs() -> None:
    """Cancelling a generation parked in its barrier holds its inputs (never handed), none unknown."""
    runtime = LiveRuntime()
    entered = anyio.Event()
    written: list[str] = []

    async def barrier(generation_id: str, inputs: Sequence[Input]) -> None:
        entered.set()
        await anyio.sleep_forever()

    async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
        written.append(input.id)

    runtime.set_write_barrier(barrier)
    gen_ids: list[str] = []

    async def engine() -> None:
        async with runtime.open_generation() as gen:
            gen_ids.append(gen.id)
            await _submit(runtime, gen.id, "a", "b")
            await gen.boundary(writer)

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await entered.wait()
        tg.cancel_scope.cancel()
    assert written == []
    for input_id in ("a", "b"):
        receipt = runtime.receipt(input_id)
        assert receipt is not None
        assert receipt.disposition is Disposition.HELD
        assert receipt.reason == HoldReason.GENERATION_CANCELLED
    assert runtime.statistics().unknown == 0
    runtime._check()


async def test_stop_while_the_barrier_runs_holds_instead_of_writing() -> None:
    """A stop that lands while the barrier is parked holds the input: it is never written."""
    runtime = LiveRuntime()
    entered = anyio.Event()
    release = anyio.Event()
    written: list[str] = []

    async def barrier(generation_id: str, inputs: Sequence[Input]) -> None:
        entered.set()
        await release.wait()

    async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
        written.append(input.id)

    runtime.set_write_barrier(barrier)
    async with runtime.open_generation() as gen:
        await _submit(runtime, gen.id, "a", "b")
        async with anyio.create_task_group() as tg:
            tg.start_soon(gen.boundary, writer)
            await entered.wait()
            gen.stop()
            runtime._check()
            release.set()
    assert written == []
    for input_id in ("a", "b"):
        receipt = runtime.receipt(input_id)
        assert receipt is not None
        assert (receipt.disposition, receipt.reason) == (Disposition.HELD, HoldReason.GENERATION_STOPPED)
    assert gen.terminal_event is not None
    assert gen.terminal_event["accepted_input_ids"] == ["a", "b"]
    runtime._check()


async def test_barrier_can_be_removed_and_must_be_callable() -> None:
    """``set_write_barrier(None)`` removes the hook; a non-callable is a TypeError."""
    log = Log()
    runtime = LiveRuntime()
    runtime.set_write_barrier(log.barrier)
    assert runtime.write_barrier is not None
    runtime.set_write_barrier(None)
    assert runtime.write_barrier is None
    not_callable: Any = "not callable"
    with pytest.raises(TypeError, match="async callable"):
        runtime.set_write_barrier(not_callable)
    async with runtime.open_generation() as gen:
        await _submit(runtime, gen.id, "a")
        await gen.boundary(log.writer)
        gen.stop()
    assert log.steps == [("write", ("a",))]
