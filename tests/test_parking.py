"""``Parker``, the engine's parking spot, on asyncio and trio: wake, cancel, one task at a time,
and the submitter's shielded yield that lets the woken task run first.

Every race is a sequence: ``anyio.wait_all_tasks_blocked()`` lets the other tasks
run until they park. No test sleeps or looks at the wall clock.
"""

from __future__ import annotations

import asyncio
import gc
import weakref

import anyio
import anyio.lowlevel
import pytest
import trio.lowlevel

from live_steering import GenerationStateError, Input, LiveRuntime
from live_steering._parking import Parker

pytestmark = pytest.mark.anyio


class _Probe:
    """A task parked on a parker, recording how its ``park()`` ended."""

    def __init__(self, parker: Parker) -> None:
        self.parker = parker
        self.returned = False
        self.cancelled = False
        self.scope = anyio.CancelScope()

    async def run(self) -> None:
        with self.scope:
            try:
                await self.parker.park()
            except anyio.get_cancelled_exc_class():
                self.cancelled = True
                raise
            self.returned = True


async def test_unpark_wakes_the_parked_task() -> None:
    """A parked task stays parked until unpark(), which wakes it and frees the spot."""
    parker = Parker.for_running_backend()
    probe = _Probe(parker)
    async with anyio.create_task_group() as tg:
        tg.start_soon(probe.run)
        await anyio.wait_all_tasks_blocked()
        assert parker.occupied
        assert not probe.returned
        assert parker.unpark() is True
        assert parker.unpark() is False  # already woken: a second unpark does nothing
    assert probe.returned
    assert not parker.occupied


async def test_unpark_before_park_is_not_remembered() -> None:
    """unpark() with nobody parked does nothing: a later park() waits for the next unpark()."""
    parker = Parker.for_running_backend()
    assert parker.unpark() is False
    probe = _Probe(parker)
    async with anyio.create_task_group() as tg:
        tg.start_soon(probe.run)
        await anyio.wait_all_tasks_blocked()
        assert not probe.returned
        assert parker.occupied
        parker.unpark()
    assert probe.returned


async def test_cancel_while_parked_frees_the_spot_and_leaks_nothing() -> None:
    """Cancelled by an anyio scope while parked: park() raises the cancellation, the spot is free,
    a later unpark() finds nobody, and the parker holds no reference to the task."""
    parker = Parker.for_running_backend()
    probe = _Probe(parker)
    async with anyio.create_task_group() as tg:
        tg.start_soon(probe.run)
        await anyio.wait_all_tasks_blocked()
        probe.scope.cancel()
    assert probe.cancelled
    assert probe.scope.cancelled_caught
    assert not parker.occupied
    assert parker.unpark() is False
    # a new task parks and wakes normally after the cancelled one
    again = _Probe(parker)
    async with anyio.create_task_group() as tg:
        tg.start_soon(again.run)
        await anyio.wait_all_tasks_blocked()
        assert parker.unpark() is True
    assert again.returned


async def test_cancelled_parked_task_is_not_kept_alive(anyio_backend: str) -> None:
    """After a cancelled park, the parker (still alive) keeps no reference to the task."""
    parker = Parker.for_running_backend()
    tasks: list[weakref.ref[object]] = []

    async def park() -> None:
        current = trio.lowlevel.current_task() if anyio_backend == "trio" else asyncio.current_task()
        tasks.append(weakref.ref(current))
        del current
        await parker.park()

    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(park)
            await anyio.wait_all_tasks_blocked()
            scope.cancel()
    gc.collect()
    assert tasks[0]() is None
    assert not parker.occupied


async def test_a_second_park_raises_and_the_first_still_wakes() -> None:
    """One task at a time: park() while another task is parked raises RuntimeError."""
    parker = Parker.for_running_backend()
    probe = _Probe(parker)
    async with anyio.create_task_group() as tg:
        tg.start_soon(probe.run)
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(RuntimeError, match="already parked"):
            await parker.park()
        parker.unpark()
    assert probe.returned


async def test_a_woken_task_cancelled_before_it_ran_still_returns() -> None:
    """A wake is not lost to a cancellation that arrives after it: park() returns, the next
    checkpoint raises."""
    parker = Parker.for_running_backend()
    reached_checkpoint = False
    scope = anyio.CancelScope()

    async def park_then_checkpoint() -> None:
        nonlocal reached_checkpoint
        with scope:
            await parker.park()
            reached_checkpoint = True
            await anyio.lowlevel.checkpoint()
            pytest.fail("the checkpoint after park() must raise the cancellation")

    async with anyio.create_task_group() as tg:
        tg.start_soon(park_then_checkpoint)
        await anyio.wait_all_tasks_blocked()
        parker.unpark()
        scope.cancel()  # in the same step: the woken task has not run yet
    assert reached_checkpoint
    assert scope.cancelled_caught
    assert not parker.occupied


async def _wake_and_yield(parker: Parker, how: str) -> None:
    """The two ways a submitter wakes the engine and lets it run first."""
    if how == "hand_over":
        await parker.hand_over()
    else:
        parker.unpark()
        await parker.yield_shielded()


HOW = pytest.mark.parametrize("how", ["unpark+yield_shielded", "hand_over"])


@HOW
@pytest.mark.parametrize("rounds", [64])
async def test_yield_shielded_lets_the_unparked_task_run_first(rounds: int, how: str) -> None:
    """After unpark(), yield_shielded() (or hand_over(), both in one) resumes its caller only
    once the woken task ran (trio runs one batch in either order, so this is repeated to
    catch a coin flip)."""
    parker = Parker.for_running_backend()
    order: list[str] = []

    async def engine() -> None:
        for _ in range(rounds):
            await parker.park()
            order.append("engine")

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        for _ in range(rounds):
            await anyio.wait_all_tasks_blocked()
            await _wake_and_yield(parker, how)
            order.append("submitter")
    assert order == ["engine", "submitter"] * rounds


@pytest.mark.parametrize("how", ["yield_shielded", "hand_over"])
async def test_yield_shielded_without_a_woken_task_is_a_plain_yield(how: str) -> None:
    """With nobody unparked (or parked), each lets other ready tasks run and returns."""
    parker = Parker.for_running_backend()
    ran = False

    async def other() -> None:
        nonlocal ran
        ran = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(other)
        plain_yield = parker.hand_over if how == "hand_over" else parker.yield_shielded
        await plain_yield()
        await plain_yield()
        assert ran


@HOW
async def test_yield_shielded_is_shielded_from_cancellation(how: str) -> None:
    """A cancelled caller is not interrupted in yield_shielded() (with or without a woken task);
    the cancellation arrives at its next checkpoint."""
    parker = Parker.for_running_backend()
    probe = _Probe(parker)
    steps: list[str] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(probe.run)
        await anyio.wait_all_tasks_blocked()
        with anyio.CancelScope() as scope:
            scope.cancel()
            await _wake_and_yield(parker, how)  # hands over to the woken task
            steps.append("after handing over")
            await parker.yield_shielded()  # nobody woken: a plain shielded yield
            steps.append("after a plain yield")
            await anyio.lowlevel.checkpoint()
            steps.append("unreachable")
        assert scope.cancelled_caught
    assert steps == ["after handing over", "after a plain yield"]
    assert probe.returned


async def test_handing_over_to_a_task_cancelled_before_it_ran_resumes_the_caller() -> None:
    """If the parked task is cancelled (not unparked) and the caller yields before it ran,
    the caller still resumes once that task has left park()."""
    parker = Parker.for_running_backend()
    probe = _Probe(parker)
    async with anyio.create_task_group() as tg:
        tg.start_soon(probe.run)
        await anyio.wait_all_tasks_blocked()
        probe.scope.cancel()
        await parker.yield_shielded()
        assert probe.cancelled
    assert not parker.occupied


async def test_wait_for_input_cancelled_while_parked_leaves_no_waiter() -> None:
    """Generation level: a wait_for_input cancelled while parked frees the spot; a second wait
    parks and an admission wakes it (C8)."""
    runtime = LiveRuntime()
    async with runtime.open_generation("g1") as gen:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(gen.wait_for_input)
                await anyio.wait_all_tasks_blocked()
                scope.cancel()
        assert scope.cancelled_caught
        woke: list[bool] = []

        async def wait() -> None:
            woke.append(await gen.wait_for_input())

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.wait_all_tasks_blocked()
            with pytest.raises(GenerationStateError, match="already waiting"):
                await gen.wait_for_input()
            receipt = await runtime.submit_steering(Input("steer", "go left", id="a"), "g1")
            assert woke == [True]  # the admission's yield let the engine run first
        assert receipt.accepted
        gen.stop()  # "a" stays unwritten on purpose


async def test_many_tasks_yield_at_once_and_all_resume() -> None:
    """Concurrent yield_shielded() calls (one shared done future on asyncio) all resume, each
    once, and the parker stays usable."""
    parker = Parker.for_running_backend()
    resumed: list[int] = []

    async def yielder(number: int) -> None:
        await parker.yield_shielded()
        resumed.append(number)
        await parker.yield_shielded()
        resumed.append(number)

    async with anyio.create_task_group() as tg:
        for number in range(5):
            tg.start_soon(yielder, number)
    assert sorted(resumed) == sorted([*range(5), *range(5)])
    probe = _Probe(parker)
    async with anyio.create_task_group() as tg:
        tg.start_soon(probe.run)
        await anyio.wait_all_tasks_blocked()
        parker.unpark()
        await parker.yield_shielded()
        assert probe.returned
