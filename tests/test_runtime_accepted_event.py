"""When ``steering.accepted`` is published: after the engine an admission woke had its first step.

An awaited ``submit_steering`` wakes the parked engine and yields so that the engine
runs first; the admission's ``steering.accepted`` is published when the submitter
resumes, or earlier if anything else is published, a record moves, or the event
log, a read that shows the input, or a new listener or subscription is asked for
(``statistics()`` is a pure read and publishes nothing). These tests
pin what a host and an engine can observe of that: the event is never missing,
never duplicated, never out of order, and always out before ``submit`` returns.
Each race is a scripted sequence: the engine acts in its first step after the
wake-up, before any other await.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from live_steering import Disposition, Input, LiveRuntime, Receipt

pytestmark = pytest.mark.anyio

Event = dict[str, Any]


def steer(id_: str) -> Input:
    return Input("steer", "Use the corrected path", id=id_)


def about(events: list[Event], input_id: str) -> list[str]:
    return [e["type"] for e in events if e.get("input_id") == input_id]


async def run_with_engine(
    runtime: LiveRuntime, first_step: Callable[[], None], host: Callable[[], Any]
) -> None:
    """Park an engine of generation "g1", run ``host``; ``first_step`` runs right after the engine wakes."""

    async def engine() -> None:
        async with runtime.open_generation("g1") as gen:
            assert await gen.wait_for_input()
            first_step()  # no await since the wake-up: this is the engine's first step
            await gen.boundary(lambda item, metadata: None)
            assert not gen.continue_after_checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await anyio.wait_all_tasks_blocked()
        await host()


async def test_the_engine_first_step_sees_the_acceptance_in_the_log_and_statistics() -> None:
    runtime = LiveRuntime()
    seen: dict[str, Any] = {}

    def first_step() -> None:
        seen["log"] = [(e["type"], e.get("input_id")) for e in runtime.recent_events()]
        seen["emitted"] = runtime.statistics().events_emitted

    async def host() -> None:
        seen["receipt"] = await runtime.submit_steering(steer("a"), "g1")

    await run_with_engine(runtime, first_step, host)
    assert seen["log"] == [("generation.started", None), ("steering.accepted", "a")]
    assert seen["emitted"] == 2
    assert seen["receipt"] == Receipt(True, "a", "g1", Disposition.QUEUED)
    events = runtime.recent_events()
    assert about(events, "a") == ["steering.accepted", "input.delivered", "steering.applied"]
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))


async def test_statistics_in_the_engine_first_step_is_a_pure_read() -> None:
    """``statistics()`` publishes nothing: it counts the admission, not yet its owed event."""
    runtime = LiveRuntime()
    events: list[Event] = []
    runtime.add_listener(events.append)
    seen: list[tuple[int, int, int, list[str]]] = []

    def first_step() -> None:
        stats = runtime.statistics()
        seen.append((stats.accepted, stats.pending, stats.events_emitted, about(events, "a")))

    async def host() -> None:
        await runtime.submit_steering(steer("a"), "g1")
        assert about(events, "a")[0] == "steering.accepted"  # out before submit returned

    await run_with_engine(runtime, first_step, host)
    assert seen == [(1, 1, 1, [])]
    assert runtime.statistics().events_emitted == len(runtime.recent_events())


async def test_a_boundary_in_the_engine_first_step_publishes_the_acceptance_first() -> None:
    """The engine writes before the submitter resumes: accepted still precedes delivered, once."""
    runtime = LiveRuntime()
    events: list[Event] = []
    runtime.add_listener(events.append)
    at_return: list[list[str]] = []

    async def engine() -> None:
        async with runtime.open_generation("g1") as gen:
            assert await gen.wait_for_input()
            # A synchronous writer: the whole boundary runs before the engine's next yield.
            applied = await gen.boundary(lambda item, metadata: None)
            assert [r.input_id for r in applied] == ["a"]
            assert not gen.continue_after_checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await anyio.wait_all_tasks_blocked()
        receipt = await runtime.submit_steering(steer("a"), "g1")
        at_return.append(about(events, "a"))
    assert receipt.disposition is Disposition.QUEUED  # C9: the answer to the admission
    assert at_return[0][0] == "steering.accepted"
    assert about(events, "a") == ["steering.accepted", "input.delivered", "steering.applied"]
    sequences = [e["sequence"] for e in events]
    assert sequences == sorted(set(sequences))


async def test_a_listener_or_subscription_added_in_the_first_step_starts_after_the_acceptance() -> None:
    """Both see what is published from then on; the admission before them is not theirs to see."""
    runtime = LiveRuntime()
    late: list[Event] = []
    subscription: list[Any] = []

    def first_step() -> None:
        runtime.add_listener(late.append)
        subscription.append(runtime.subscribe())

    async def host() -> None:
        await runtime.submit_steering(steer("a"), "g1")

    await run_with_engine(runtime, first_step, host)
    assert about(late, "a") == ["input.delivered", "steering.applied"]
    received: list[str] = []
    while (event := subscription[0].receive_nowait()) is not None:
        received.append(event["type"])
    assert received[:2] == ["input.delivered", "steering.applied"]
    assert about(runtime.recent_events(), "a")[0] == "steering.accepted"


async def test_submitters_of_one_round_are_published_in_admission_order() -> None:
    """Two admissions before the engine runs: the second publishes the first's event before its own."""
    runtime = LiveRuntime()
    events: list[Event] = []
    runtime.add_listener(events.append)
    receipts: dict[str, Receipt] = {}
    go = anyio.Event()

    async def submitter(id_: str) -> None:
        await go.wait()
        receipts[id_] = await runtime.submit_steering(steer(id_), "g1")

    async def host() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(submitter, "a")
            tg.start_soon(submitter, "b")
            await anyio.wait_all_tasks_blocked()
            go.set()  # both resume in one scheduling round

    await run_with_engine(runtime, lambda: None, host)
    assert set(receipts) == {"a", "b"}
    accepted = [e["input_id"] for e in events if e["type"] == "steering.accepted"]
    admitted = sorted(("a", "b"), key=lambda i: runtime._core.identities[i].sequence)
    assert accepted == admitted
    for input_id in ("a", "b"):
        assert about(events, input_id)[0] == "steering.accepted"
        assert receipts[input_id] == Receipt(True, input_id, "g1", Disposition.QUEUED)


async def test_a_submitter_cancelled_at_its_yield_still_publishes_the_acceptance(anyio_backend: str) -> None:
    """asyncio's bare ``task.cancel()`` lands on the yield; a trio cancel scope's at the next checkpoint."""
    runtime = LiveRuntime()
    events: list[Event] = []
    runtime.add_listener(events.append)
    cancel: list[Callable[[], object]] = []
    outcome: list[str] = []
    released = anyio.Event()

    async def submitter() -> None:
        with anyio.CancelScope() as scope:
            if anyio_backend == "asyncio":
                task = asyncio.current_task()
                assert task is not None
                cancel.append(task.cancel)
            else:
                cancel.append(scope.cancel)
            try:
                await runtime.submit_steering(steer("a"), "g1")
                outcome.append("returned")
                await anyio.lowlevel.checkpoint()
            except BaseException:
                outcome.append("cancelled")
                raise
            outcome.append("not cancelled")

    async def engine() -> None:
        async with runtime.open_generation("g1") as gen:
            assert await gen.wait_for_input()
            cancel[0]()  # in the engine's first step: the submitter has not resumed yet
            await released.wait()
            await gen.boundary(lambda item, metadata: None)
            assert not gen.continue_after_checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await anyio.wait_all_tasks_blocked()
        if anyio_backend == "asyncio":
            with pytest.raises(asyncio.CancelledError):
                await asyncio.ensure_future(submitter())
            assert outcome == ["cancelled"]
        else:
            tg.start_soon(submitter)
            await anyio.wait_all_tasks_blocked()
            assert outcome == ["returned", "cancelled"]
        # Nothing else was published since the admission: the submitter's own step did it.
        assert about(events, "a") == ["steering.accepted"]
        assert runtime.receipt("a") == Receipt(True, "a", "g1", Disposition.QUEUED)
        released.set()
    assert about(events, "a") == ["steering.accepted", "input.delivered", "steering.applied"]


async def test_an_input_held_by_a_stop_in_the_first_step_is_accepted_then_held() -> None:
    runtime = LiveRuntime()
    events: list[Event] = []
    runtime.add_listener(events.append)

    async def engine() -> None:
        async with runtime.open_generation("g1") as gen:
            assert await gen.wait_for_input()
            gen.stop()

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await anyio.wait_all_tasks_blocked()
        receipt = await runtime.submit_steering(steer("a"), "g1")
    assert receipt.disposition is Disposition.QUEUED
    assert runtime.receipt("a") == Receipt(True, "a", "g1", Disposition.HELD, "generation-stopped")
    assert about(events, "a") == ["steering.accepted", "steering.held"]
    assert events[-1]["type"] == "generation.stopped"


async def test_a_listener_or_subscription_removed_in_the_first_step_still_gets_the_acceptance() -> None:
    """Both were attached when the input was admitted, so its acceptance is theirs to see."""
    runtime = LiveRuntime()
    early: list[Event] = []
    remove = runtime.add_listener(early.append)
    subscription = runtime.subscribe()

    def first_step() -> None:
        remove()
        subscription.close()

    async def host() -> None:
        await runtime.submit_steering(steer("a"), "g1")

    await run_with_engine(runtime, first_step, host)
    assert about(early, "a") == ["steering.accepted"]
    received: list[str] = []
    while (event := subscription.receive_nowait()) is not None:
        received.append(event["type"])
    assert received == ["generation.started", "steering.accepted"]


@pytest.mark.parametrize("read", ["receipt", "generation", "pending"])
async def test_reading_the_input_queued_in_the_first_step_publishes_the_acceptance(read: str) -> None:
    """An input a reader sees queued, or counts pending, has its steering.accepted out."""
    runtime = LiveRuntime()
    events: list[Event] = []
    runtime.add_listener(events.append)
    seen: list[object] = []
    handle: list[Any] = []

    def first_step() -> None:
        if read == "receipt":
            receipt = runtime.receipt("a")
            assert receipt is not None
            seen.append(receipt.disposition)
        elif read == "generation":
            generation = runtime.generation
            assert generation is not None
            seen.append(generation["pending"])
        else:
            seen.append(handle[0].pending)
        seen.append(about(events, "a"))

    async def engine() -> None:
        async with runtime.open_generation("g1") as gen:
            handle.append(gen)
            assert await gen.wait_for_input()
            first_step()
            await gen.boundary(lambda item, metadata: None)
            assert not gen.continue_after_checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await anyio.wait_all_tasks_blocked()
        await runtime.submit_steering(steer("a"), "g1")
    expected = Disposition.QUEUED if read == "receipt" else 1
    assert seen == [expected, ["steering.accepted"]]
