"""A boundary ends at its last confirmed write (issue 25): what a loop and a host can observe.

``gen.boundary()`` no longer asks the core once more for an input after the queue is drained:
the confirmation of the last input written ends the boundary in the same step. Nothing can be
admitted in that step (a submit runs only while the boundary awaits), so the ending changes
no event, receipt or order; these tests pin that, with scripted gates and no sleeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from anyio import wait_all_tasks_blocked

from live_steering import Disposition, GenerationStopped, HoldReason, Input, LiveRuntime

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def steer(id_: str) -> Input:
    return Input("steer", f"text of {id_}", id=id_)


def input_types(runtime: LiveRuntime) -> list[tuple[str, str]]:
    return [(e["type"], e["input_id"]) for e in runtime.recent_events() if "input_id" in e]


class GatedWriter:
    """Writes into ``written``; the write of ``gate_on`` waits until ``release`` is set."""

    def __init__(self, gate_on: str) -> None:
        self.gate_on = gate_on
        self.writing = anyio.Event()
        self.release = anyio.Event()
        self.written: list[str] = []

    async def __call__(self, input: Input, metadata: Mapping[str, Any]) -> None:
        if input.id == self.gate_on:
            self.writing.set()
            await self.release.wait()
        self.written.append(input.id)


async def test_a_drained_boundary_leaves_the_same_events_and_receipts_and_ends() -> None:
    runtime = LiveRuntime()
    async with runtime.open_generation() as gen:
        for id_ in ("a", "b"):
            await runtime.submit_steering(steer(id_), gen.id)
        written: list[str] = []

        async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
            written.append(input.id)

        receipts = await gen.boundary(writer)
        assert written == ["a", "b"]
        assert [(r.input_id, r.disposition) for r in receipts] == [
            ("a", Disposition.APPLIED),
            ("b", Disposition.APPLIED),
        ]
        assert receipts == [runtime.receipt("a"), runtime.receipt("b")]
        assert input_types(runtime) == [
            ("steering.accepted", "a"),
            ("steering.accepted", "b"),
            ("input.delivered", "a"),
            ("steering.applied", "a"),
            ("input.delivered", "b"),
            ("steering.applied", "b"),
        ]
        # The boundary is over: the checkpoint decision (refused while a boundary runs) is
        # allowed, and the next boundary runs (one at a time is not tripped).
        assert await gen.boundary(writer) == []
        assert not gen.continue_after_checkpoint()
    assert runtime.recent_events()[-1]["type"] == "generation.finished"
    assert runtime.recent_events()[-1]["input_ids"] == ["a", "b"]
    runtime._check()


async def test_a_submit_while_the_last_input_is_written_joins_the_same_boundary() -> None:
    runtime = LiveRuntime()
    writer = GatedWriter(gate_on="last")
    async with runtime.open_generation() as gen:
        await runtime.submit_steering(steer("last"), gen.id)
        receipts: list[Any] = []

        async def engine() -> None:
            receipts.extend(await gen.boundary(writer))

        async with anyio.create_task_group() as tg:
            tg.start_soon(engine)
            await writer.writing.wait()  # the only input pending is being written
            racing = await runtime.submit_steering(steer("racing"), gen.id)
            assert racing.disposition is Disposition.QUEUED
            writer.release.set()
        assert writer.written == ["last", "racing"]
        assert [r.input_id for r in receipts] == ["last", "racing"]
        assert runtime.receipt("racing").disposition is Disposition.APPLIED  # type: ignore[union-attr]
        assert gen.pending == 0
        assert not gen.continue_after_checkpoint()
    runtime._check()


async def test_a_submit_right_after_the_last_write_waits_for_the_next_boundary() -> None:
    runtime = LiveRuntime()
    async with runtime.open_generation() as gen:
        await runtime.submit_steering(steer("first"), gen.id)
        written: list[str] = []

        async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
            written.append(input.id)

        async with anyio.create_task_group() as tg:
            # the host task is ready to submit as soon as the engine yields after its boundary
            async def host() -> None:
                await wait_all_tasks_blocked()
                await runtime.submit_steering(steer("next"), gen.id)

            tg.start_soon(host)
            assert [r.input_id for r in await gen.boundary(writer)] == ["first"]
            assert runtime.receipt("next") is None  # the boundary did not yield: not yet submitted
            assert await gen.wait_for_input()  # the host's submit lands here, for the next boundary
        assert runtime.receipt("next").disposition is Disposition.QUEUED  # type: ignore[union-attr]
        assert gen.continue_after_checkpoint()
        assert [r.input_id for r in await gen.boundary(writer)] == ["next"]
        assert written == ["first", "next"]
        assert not gen.continue_after_checkpoint()
    assert runtime.recent_events()[-1]["input_ids"] == ["first", "next"]
    runtime._check()


async def test_a_submit_racing_the_last_write_of_a_stopped_generation_is_held_not_lost() -> None:
    runtime = LiveRuntime()
    writer = GatedWriter(gate_on="last")
    async with runtime.open_generation() as gen:
        await runtime.submit_steering(steer("last"), gen.id)

        async def engine() -> None:
            await gen.boundary(writer)  # "last" is applied; "racing" was held by the stop
            with pytest.raises(GenerationStopped):
                await gen.boundary(writer)

        async with anyio.create_task_group() as tg:
            tg.start_soon(engine)
            await writer.writing.wait()
            await runtime.submit_steering(steer("racing"), gen.id)
            assert runtime.stop(gen.id)
            writer.release.set()
    assert writer.written == ["last"]
    assert runtime.receipt("last").disposition is Disposition.APPLIED  # type: ignore[union-attr]
    held = runtime.receipt("racing")
    assert held is not None
    assert held.disposition is Disposition.HELD
    assert held.reason == HoldReason.GENERATION_STOPPED.value
    terminal = runtime.recent_events()[-1]
    assert terminal["type"] == "generation.stopped"
    assert terminal["input_ids"] == ["last"]
    assert terminal["accepted_input_ids"] == ["racing"]
    runtime._check()


async def test_a_writer_that_raises_on_the_last_input_ends_the_boundary_too() -> None:
    runtime = LiveRuntime()

    async def failing(input: Input, metadata: Mapping[str, Any]) -> None:
        raise ValueError("the context store is down")

    async def writing(input: Input, metadata: Mapping[str, Any]) -> None:
        await anyio.lowlevel.checkpoint()

    async with runtime.open_generation() as gen:
        await runtime.submit_steering(steer("lost"), gen.id)
        with pytest.raises(ValueError, match="store is down"):
            await gen.boundary(failing)
        assert runtime.receipt("lost").disposition is Disposition.UNKNOWN  # type: ignore[union-attr]
        await runtime.submit_steering(steer("after"), gen.id)
        assert [r.input_id for r in await gen.boundary(writing)] == ["after"]  # not "already running"
        assert not gen.continue_after_checkpoint()
    runtime._check()


async def test_one_at_a_time_stops_at_the_quota_and_leaves_the_rest_for_the_next_boundary() -> None:
    runtime = LiveRuntime(steering_mode="one-at-a-time")
    written: list[str] = []

    async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
        written.append(input.id)

    async with runtime.open_generation() as gen:
        for id_ in ("a", "b"):
            await runtime.submit_steering(steer(id_), gen.id)
        assert [r.input_id for r in await gen.boundary(writer)] == ["a"]
        assert gen.pending == 1
        assert [r.input_id for r in await gen.boundary(writer)] == ["b"]
        assert await gen.boundary(writer) == []
        assert not gen.continue_after_checkpoint()
    assert written == ["a", "b"]
    runtime._check()
