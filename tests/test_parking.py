"""``Parker``, the engine's parking spot, on asyncio and trio: wake, cancel, one task at a time,
and the submitter's shielded yield that lets the woken task run first; and the same behaviour on
the public paths it takes on an anyio or trio whose private state it does not know.

Every race is a sequence: ``anyio.wait_all_tasks_blocked()`` lets the other tasks
run until they park. No test sleeps or looks at the wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.metadata
import re
import sys
import threading
import tomllib
import types
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import outcome
import pytest
import sniffio
import trio.abc
import trio.lowlevel
import trio.testing

from live_steering import Disposition, GenerationStateError, Input, LiveRuntime, Receipt, _parking
from live_steering._parking import Parker, checkpoint

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


async def test_for_running_backend_reuses_only_a_free_asyncio_parker_of_this_loop(anyio_backend: str) -> None:
    """``reuse`` is returned only for an asyncio parker of the running loop with nobody parked;
    otherwise (occupied, another backend's parker, None) a new parker is made."""
    first = Parker.for_running_backend()
    again = Parker.for_running_backend(first)
    assert (again is first) is (anyio_backend == "asyncio")
    assert Parker.for_running_backend(None) is not first
    probe = _Probe(first)
    async with anyio.create_task_group() as tg:
        tg.start_soon(probe.run)
        await anyio.wait_all_tasks_blocked()
        occupied = Parker.for_running_backend(first)
        assert occupied is not first  # a task is parked on it: never shared
        first.unpark()
    assert probe.returned


def test_an_asyncio_parker_of_a_finished_loop_is_not_reused() -> None:
    """A parker of another (finished) event loop is never handed to a generation of this one."""

    async def make() -> Parker:
        return Parker.for_running_backend()

    old = asyncio.run(make())

    async def again() -> bool:
        return Parker.for_running_backend(old) is old

    assert asyncio.run(again()) is False


async def test_a_generation_started_while_the_last_ones_waiter_has_not_resumed_parks_apart() -> None:
    """The next generation does not share the parker a woken, not yet resumed waiter of the last
    one still holds: its engine waits at once and is woken by a steer, the old waiter ends False;
    once nobody is parked, the generation after reuses the parker (asyncio)."""
    runtime = LiveRuntime()
    results: list[bool] = []

    async def wait(gen: Any) -> None:
        results.append(await gen.wait_for_input())

    async def steer(gen: Any, id_: str) -> None:
        await anyio.wait_all_tasks_blocked()
        await runtime.submit_steering(Input("steer", "go left", id=id_), gen.id)

    async with anyio.create_task_group() as tg:
        async with runtime.open_generation() as first:
            tg.start_soon(wait, first)
            await anyio.wait_all_tasks_blocked()
        # Leaving woke that waiter, which has not run yet: the next engine waits in this same step.
        async with runtime.open_generation() as second:
            tg.start_soon(steer, second, "a")
            assert await second.wait_for_input() is True
            assert results == [False]
            second.stop()  # "a" stays unwritten on purpose
        async with runtime.open_generation() as third:
            if sniffio.current_async_library() == "asyncio":
                assert third._parker is second._parker  # nobody parked on it any more
            tg.start_soon(steer, third, "b")
            assert await third.wait_for_input() is True
            third.stop()


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


# -- every awaited submit is a full checkpoint of the running backend (C8) ----------------------------

_PATHS = ["repeat", "refusal", "repeat-after-close", "refusal-without-generation"]


@contextlib.asynccontextmanager
async def _submit_on(path: str) -> AsyncIterator[Callable[[], Awaitable[Receipt]]]:
    """An awaited submit that changes nothing, on ``path``, with or without a running generation."""
    runtime = LiveRuntime()
    if path == "refusal-without-generation":
        yield lambda: runtime.submit_steering(Input("steer", "x", id="n-1"), "no-such-generation")
        return
    async with runtime.open_generation() as gen:
        assert runtime.submit_steering_nowait(Input("steer", "x", id="r-1"), gen.id).accepted
        if path == "repeat":
            yield lambda: runtime.submit_steering(Input("steer", "x", id="r-1"), gen.id)
        elif path == "refusal":
            yield lambda: runtime.submit_steering(Input("steer", "y", id="r-2"), "not-running")
        gen.stop()
    if path == "repeat-after-close":
        yield lambda: runtime.submit_steering(Input("steer", "x", id="r-1"), gen.id)


@pytest.mark.parametrize("path", _PATHS)
async def test_a_submit_in_a_scope_whose_deadline_passed_is_cancelled(path: str) -> None:
    """A repeat or refusal in a scope past its deadline raises, even before the scheduler noticed.

    On trio a deadline set in the past is only acted on by the scheduler: the cancel
    test must come after the submit's yield, as in ``trio.lowlevel.checkpoint``.
    """
    async with _submit_on(path) as submit:
        with anyio.CancelScope() as scope:
            scope.deadline = anyio.current_time() - 1
            await submit()
            pytest.fail("the submit was not a cancel point")  # pragma: no cover
        assert scope.cancelled_caught


class _CancelDuringNextYield(trio.abc.Instrument):
    """trio runs a batch's tasks in either order, so "another task runs while the submit yields"
    is scripted at the scheduler: right after ``task``'s next step ends (the submit's yield)."""

    def __init__(self, task: trio.lowlevel.Task, scope: anyio.CancelScope, ran: list[bool]) -> None:
        self.task, self.scope, self.ran = task, scope, ran

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task and not self.ran:
            self.ran.append(True)
            self.scope.cancel()


@pytest.mark.parametrize("path", _PATHS)
async def test_a_submit_cancelled_by_another_task_during_its_yield_raises(
    path: str, anyio_backend: str
) -> None:
    """A scope cancelled by someone else while the submit yields is raised there: the cancel test
    follows the yield, as in ``trio.lowlevel.checkpoint``."""
    async with _submit_on(path) as submit, anyio.create_task_group() as tg:
        scope = anyio.CancelScope()
        ran: list[bool] = []

        async def other() -> None:  # asyncio runs it first in, first out: during the yield
            ran.append(True)
            scope.cancel()

        with scope:
            if anyio_backend == "trio":
                trio.lowlevel.add_instrument(_CancelDuringNextYield(trio.lowlevel.current_task(), scope, ran))
            else:
                tg.start_soon(other)
            await submit()
            pytest.fail("the cancellation made during the yield was not raised")  # pragma: no cover
        assert scope.cancelled_caught
        assert ran == [True]


@pytest.mark.parametrize("path", _PATHS)
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_counts_every_changeless_submit_as_a_checkpoint(path: str) -> None:
    """trio.testing.assert_checkpoints() holds around a repeat or refusal (cancel and schedule point)."""
    async with _submit_on(path) as submit:
        with trio.testing.assert_checkpoints():
            await submit()


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_counts_an_admission_that_wakes_the_engine_as_a_checkpoint() -> None:
    """trio.testing.assert_checkpoints() holds around an admission handed over to a parked engine."""
    runtime = LiveRuntime()
    async with runtime.open_generation() as gen, anyio.create_task_group() as tg:
        woke: list[bool] = []

        async def wait() -> None:
            woke.append(await gen.wait_for_input())

        tg.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        with trio.testing.assert_checkpoints():
            receipt = await runtime.submit_steering(Input("steer", "go", id="a"), gen.id)
        assert receipt.disposition is Disposition.QUEUED
        assert woke == [True]
        gen.stop()


# -- trio as a guest on an asyncio loop: trio's parker, not asyncio's --------------------------------


def _guest_run(async_fn: Callable[[], Awaitable[object]]) -> object:
    """Run ``async_fn`` under trio as a guest on a fresh asyncio loop; its return value."""

    async def host() -> object:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[outcome.Outcome[object]] = loop.create_future()
        trio.lowlevel.start_guest_run(
            async_fn,
            run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            done_callback=done.set_result,
        )
        return (await done).unwrap()

    return asyncio.run(host())


def test_trio_in_guest_mode_on_an_asyncio_loop_steers_end_to_end() -> None:
    """Under trio's guest mode the asyncio loop runs too, yet trio runs the tasks: the runtime parks,
    wakes and yields trio's way (open generation, submit, wake, boundary, repeat, refusal)."""
    written: list[str] = []

    async def guest() -> object:
        assert sniffio.current_async_library() == "trio"
        assert asyncio.get_running_loop() is not None  # the host loop: what used to mislead
        runtime = LiveRuntime()

        async def engine() -> None:
            async with runtime.open_generation() as gen:
                ready.set()
                while await gen.wait_for_input():
                    await gen.boundary(lambda item, metadata: written.append(item.id or ""))
                    if not gen.continue_after_checkpoint():
                        break

        ready = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(engine)
            await ready.wait()
            await trio.testing.wait_all_tasks_blocked()  # the engine is parked
            generation = runtime.generation
            assert generation is not None
            queued = await runtime.submit_steering(Input("steer", "go left", id="g-1"), generation["id"])
            with trio.testing.assert_checkpoints():
                repeat = await runtime.submit_steering(Input("steer", "go left", id="g-1"), generation["id"])
            refusal = await runtime.submit_steering(Input("steer", "go", id="g-2"), "not-running")
            await trio.testing.wait_all_tasks_blocked()  # the engine wrote g-1 and parked again
            applied = runtime.receipt("g-1")
            nursery.cancel_scope.cancel()
        return queued.disposition, repeat.accepted, refusal.accepted, applied and applied.disposition

    assert _guest_run(guest) == (Disposition.QUEUED, True, False, Disposition.APPLIED)
    assert written == ["g-1"]


def test_the_parker_follows_sniffio_not_the_running_loop() -> None:
    """Parker.for_running_backend() and checkpoint() pick trio's under guest mode, asyncio's on asyncio."""

    async def guest() -> object:
        parker = Parker.for_running_backend()
        await checkpoint()
        await parker.checkpoint()
        return type(parker).__name__

    async def on_asyncio() -> object:
        await checkpoint()
        return type(Parker.for_running_backend()).__name__

    assert _guest_run(guest) == "_TrioParker"
    assert asyncio.run(on_asyncio()) == "_AsyncioParker"


def test_a_guest_run_and_its_host_loop_are_different_loops_to_a_runtime() -> None:
    """C8 under guest mode: a runtime of the asyncio host refuses a submit from the trio guest, and a
    runtime of the guest refuses one from the host, before admitting anything (one thread, two loops)."""

    async def host() -> tuple[str, int, str, int]:
        loop = asyncio.get_running_loop()
        hosts = LiveRuntime()
        async with hosts.open_generation() as gen:

            async def guest_submits() -> str:
                with pytest.raises(RuntimeError, match="another thread or event loop") as raised:
                    await hosts.submit_steering(Input("steer", "x", id="h-1"), gen.id)
                return str(raised.value)

            done: asyncio.Future[outcome.Outcome[str]] = loop.create_future()
            trio.lowlevel.start_guest_run(
                guest_submits,
                run_sync_soon_threadsafe=loop.call_soon_threadsafe,
                done_callback=done.set_result,
            )
            from_guest = (await done).unwrap()
            gen.stop()
        opened = asyncio.Event()
        held: dict[str, Any] = {}

        async def guest_owns() -> str:
            guests = LiveRuntime()
            finish = trio.Event()
            async with guests.open_generation() as own:
                held.update(runtime=guests, gen=own, finish=finish, token=trio.lowlevel.current_trio_token())
                loop.call_soon_threadsafe(opened.set)
                await finish.wait()
                own.stop()
            return "done"

        finished: asyncio.Future[outcome.Outcome[str]] = loop.create_future()
        trio.lowlevel.start_guest_run(
            guest_owns, run_sync_soon_threadsafe=loop.call_soon_threadsafe, done_callback=finished.set_result
        )
        await opened.wait()
        with pytest.raises(RuntimeError, match="another thread or event loop") as raised:
            await held["runtime"].submit_steering(Input("steer", "x", id="g-1"), held["gen"].id)
        held["token"].run_sync_soon(held["finish"].set)
        assert (await finished).unwrap() == "done"
        guests_accepted = held["runtime"].statistics().accepted
        return from_guest, hosts.statistics().accepted, str(raised.value), guests_accepted

    from_guest, hosts_accepted, from_host, guests_accepted = asyncio.run(host())
    assert (hosts_accepted, guests_accepted) == (0, 0)
    assert "submit_steering()" in from_guest
    assert "submit_steering()" in from_host


# -- at_home on asyncio: the thread test, and what it gives way to ------------------------------------


class _StillRunning:
    """A loop as a forked child inherits it: it says it runs, and runs nowhere."""

    def is_running(self) -> bool:
        return True


def test_an_asyncio_parker_answers_by_thread_and_in_a_forked_child_asks_the_running_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """C8: True in its loop, False from another thread; once the process forked (the counter moved),
    the thread test gives way to asking which loop runs: another loop in the same thread is refused."""

    async def in_its_loop() -> Parker:
        parker = Parker.for_running_backend()
        assert parker.at_home()
        assert not await asyncio.to_thread(parker.at_home)
        return parker

    parker = asyncio.run(in_its_loop())
    monkeypatch.setattr(parker, "_loop", _StillRunning())  # the parent's loop, as the child sees it

    async def in_another_loop() -> tuple[bool, bool]:
        same_process = parker.at_home()  # the thread test: one loop per thread, so it must be this one
        monkeypatch.setattr(_parking, "_forks", _parking._forks + 1)
        return same_process, parker.at_home()

    assert asyncio.run(in_another_loop()) == (True, False)


def test_a_loop_run_again_in_another_thread_gets_a_parker_of_that_thread() -> None:
    """A free asyncio parker is reused on its loop in its thread only: the same loop run later in
    another thread gets a new parker, whose thread test is that thread's."""
    loop = asyncio.new_event_loop()

    async def make(reuse: Parker | None = None) -> Parker:
        return Parker.for_running_backend(reuse)

    try:
        first = loop.run_until_complete(make())
        assert loop.run_until_complete(make(first)) is first
        made: list[Parker] = []
        thread = threading.Thread(target=lambda: made.append(loop.run_until_complete(make(first))))
        thread.start()
        thread.join()
        assert made[0] is not first
        assert made[0]._thread == thread.ident  # type: ignore[attr-defined]
    finally:
        loop.close()


# -- private state, fenced: the public paths of another anyio or trio (pyproject.toml) -------------

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


def test_the_installed_anyio_and_trio_are_the_tested_minors_and_the_dev_pins_end_there() -> None:
    """The suite runs the private shortcuts (the installed minors are the tested ones), and
    pyproject.toml's dev pins stop right after ``_TESTED_ANYIO`` / ``_TESTED_TRIO``: raising a pin
    without the constant (or the other way round) fails here."""
    assert _parking._tested("anyio", _parking._TESTED_ANYIO)
    assert _parking._tested("trio", _parking._TESTED_TRIO)
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    pins = {re.split(r"[<>=\[]", spec)[0]: spec for spec in dev}
    for name, (major, minor) in (("anyio", _parking._TESTED_ANYIO), ("trio", _parking._TESTED_TRIO)):
        assert pins[name].endswith(f",<{major}.{minor + 1}"), pins[name]


@pytest.mark.parametrize(
    ("version", "tested"),
    [
        ("4.16.0", True),
        ("4.16.3rc1", True),
        ("4.2.0", True),
        ("4.17.0", False),
        ("4.17.0.dev3", False),
        ("5.0", False),
        ("main", False),
        ("4", False),
        (None, False),
    ],
)
def test_a_version_is_tested_up_to_the_newest_minor_only(
    version: str | None, tested: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_tested``: no newer than (major, minor); a version it cannot read, or no install, is not."""

    def installed(distribution: str) -> str:
        if version is None:
            raise importlib.metadata.PackageNotFoundError(distribution)
        return version

    monkeypatch.setattr(importlib.metadata, "version", installed)
    assert _parking._tested("anyio", (4, 16)) is tested


_RELEASES = ["installed", "newer", "moved", "scopes-reshaped", "tasks-reshaped"]
"""``installed``: this anyio and trio. The others make them look, to the functions that read private
state, like a release this module was not tested with: a newer minor (the version gate), the private
names gone (an ``ImportError``), or the names there with other fields."""


def _simulate(release: str, m: pytest.MonkeyPatch) -> None:
    """Make the installed anyio and trio look like ``release`` to ``_parking``'s detection functions."""
    if release == "installed":
        return
    if release == "newer":
        (anyio_major, anyio_minor), (trio_major, trio_minor) = _parking._TESTED_ANYIO, _parking._TESTED_TRIO
        m.setattr(_parking, "_TESTED_ANYIO", (anyio_major, anyio_minor - 1))
        m.setattr(_parking, "_TESTED_TRIO", (trio_major, trio_minor - 1))
        return
    if release == "moved":
        for name in ("anyio._core._eventloop", "anyio._backends._asyncio", "trio._core._run"):
            m.setitem(sys.modules, name, types.ModuleType(name))
        return
    scopes = release == "scopes-reshaped"
    backend = types.ModuleType("anyio._backends._asyncio")
    vars(backend).update(
        # a cancel scope without ``_cancel_called``, or a task state without ``cancel_scope``
        CancelScope=type(
            "CancelScope",
            (),
            {"_shield": False, "_parent_scope": None, **({} if scopes else {"_cancel_called": False})},
        ),
        TaskState=type("TaskState", (), {"__slots__": ("parent_id",) if not scopes else ("cancel_scope",)}),
        _task_states={} if scopes else object(),
    )
    m.setitem(sys.modules, "anyio._backends._asyncio", backend)
    eventloop = types.ModuleType("anyio._core._eventloop")
    # a backend class without the function, or with something else under its name
    backend_class = type("Backend", (), {} if scopes else {"checkpoint_if_cancelled": None})
    vars(eventloop).update(get_async_backend=lambda name: backend_class)
    m.setitem(sys.modules, "anyio._core._eventloop", eventloop)
    # a trio task without ``_cancel_points``, or whose runner has no ``ki_pending``
    status = types.SimpleNamespace(effectively_cancelled=False)
    task = (
        types.SimpleNamespace(
            _cancel_status=status, _runner=types.SimpleNamespace(main_task=None, ki_pending=False)
        )
        if scopes
        else types.SimpleNamespace(
            _cancel_points=0, _cancel_status=status, _runner=types.SimpleNamespace(main_task=None)
        )
    )
    m.setattr(trio.lowlevel, "current_task", lambda: task)


@pytest.fixture(params=_RELEASES)
def release(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The detection made afresh under a simulated ``release``; the parkers the test makes then take
    the paths it chose (the caches are put back after the test)."""
    name: str = request.param
    for cache, empty in (
        ("_TASK_STATES", None),
        ("_TASK_STATES_READ", False),
        ("_TRIO_CHECKPOINT", None),
        ("_TRIO_CHECKPOINT_READ", False),
        ("_checkpoints_if_cancelled", {}),
    ):
        monkeypatch.setattr(_parking, cache, empty)
    with monkeypatch.context() as m:
        _simulate(name, m)
        task_states = _parking._anyio_asyncio_task_states()
        private = _parking._private_checkpoint_if_cancelled("asyncio")
        bound = _parking._backend_checkpoint_if_cancelled("asyncio")  # kept for the test
        one_frame = _parking._one_frame_trio_checkpoint() if name != "installed" else None
    if name == "installed":
        assert task_states is not None
        assert private is not None
        assert bound == private
        _parking._TRIO_CHECKPOINT_READ = False  # read in the first trio task, as in production
    else:
        assert (task_states, private, one_frame) == (None, None, None)
        assert bound is anyio.lowlevel.checkpoint_if_cancelled
    monkeypatch.setattr(_parking, "_TASK_STATES", task_states)
    monkeypatch.setattr(_parking, "_TASK_STATES_READ", True)
    return name


async def test_each_release_gets_the_paths_it_can_serve(release: str, anyio_backend: str) -> None:
    """The installed anyio and trio get the shortcuts; any other release the public functions: anyio's
    ``checkpoint_if_cancelled`` (asking it at every boundary) and trio's ``checkpoint``."""
    parker: Any = Parker.for_running_backend()
    public = release != "installed"
    if anyio_backend == "asyncio":
        assert (parker._task_states is None) is public
        assert parker.cancel_pending() is public  # nothing is cancelled: only the public path must ask
        assert (parker.checkpoint_if_cancelled is anyio.lowlevel.checkpoint_if_cancelled) is public
    else:
        assert (parker.checkpoint is trio.lowlevel.checkpoint) is public
        assert parker.checkpoint_if_cancelled is trio.lowlevel.checkpoint_if_cancelled


@types.coroutine
def _count_yields(awaitable: Awaitable[T], yields: list[object]) -> Generator[Any, Any, T]:
    """Await ``awaitable``, appending to ``yields`` each time it suspends its task (hands the
    scheduler a future or a trap), passing every value and exception through unchanged."""
    inner = awaitable.__await__()
    step: Callable[[Any], Any] = inner.send
    value: Any = None
    while True:
        try:
            suspended = step(value)
        except StopIteration as stop:
            result: T = stop.value
            return result
        yields.append(suspended)
        try:
            value, step = (yield suspended), inner.send
        except BaseException as exc:  # a cancellation delivered at the suspension: to the awaitable
            value, step = exc, inner.throw


async def test_every_awaited_submit_yields_exactly_once(release: str) -> None:
    """C8 on every release: an admission that wakes the engine, one with nobody parked, a repeat, a
    refusal, and both after the generation: each suspends its caller once, and the woken engine ran
    (and wrote) before the admitting submit returned."""
    runtime = LiveRuntime()
    order: list[str] = []
    async with runtime.open_generation() as gen, anyio.create_task_group() as tg:

        async def engine() -> None:
            while await gen.wait_for_input():
                order.append("engine woke")
                await gen.boundary(lambda item, metadata: order.append(f"wrote {item.id}"))

        tg.start_soon(engine)
        for number in range(3):
            await anyio.wait_all_tasks_blocked()
            yields: list[object] = []
            receipt = await _count_yields(
                runtime.submit_steering(Input("steer", "go", id=f"s-{number}"), gen.id), yields
            )
            order.append(f"s-{number} returned")
            assert (receipt.disposition, len(yields)) == (Disposition.QUEUED, 1)
        for submit in (
            runtime.submit_steering(Input("steer", "go", id="s-0"), gen.id),  # a repeat
            runtime.submit_steering(Input("steer", "go", id="s-9"), "not-running"),  # a refusal
        ):
            yields = []
            await _count_yields(submit, yields)
            assert len(yields) == 1
        gen.stop()
    assert order == [item for n in range(3) for item in ("engine woke", f"wrote s-{n}", f"s-{n} returned")]
    for submit in (
        runtime.submit_steering(Input("steer", "go", id="s-1"), gen.id),  # a repeat, nothing running
        runtime.submit_steering(Input("steer", "go", id="s-8"), gen.id),  # a refusal, nothing running
    ):
        yields = []
        await _count_yields(submit, yields)
        assert len(yields) == 1
    async with runtime.open_generation() as idle:  # nobody parked: the admission still yields once
        yields = []
        assert (
            await _count_yields(runtime.submit_steering(Input("steer", "x", id="i-1"), idle.id), yields)
        ).accepted
        assert len(yields) == 1
        idle.stop()


async def test_cancellation_is_delivered_on_every_release(release: str) -> None:
    """On every release: a boundary in a cancelled scope raises before it takes an input (which stays
    pending), a parked engine cancelled frees its spot, and a repeat or refusal past its deadline
    raises; the runtime's state stays consistent throughout."""
    runtime = LiveRuntime()
    written: list[str] = []
    async with runtime.open_generation() as gen:
        assert runtime.submit_steering_nowait(Input("steer", "go", id="c-1"), gen.id).accepted
        with anyio.CancelScope() as scope:
            scope.cancel()
            await gen.boundary(lambda item, metadata: written.append(item.id or ""))
            pytest.fail("the boundary did not raise the cancellation")  # pragma: no cover
        assert scope.cancelled_caught
        assert (written, gen.pending) == ([], 1)
        with anyio.CancelScope() as shielded:  # a shield ends the walk: no cancellation reaches it
            shielded.shield = True
            with anyio.CancelScope() as inner:
                inner.shield = True
                assert [receipt.input_id for receipt in await gen.boundary(lambda i, m: None)] == ["c-1"]
        assert not shielded.cancelled_caught
        assert not inner.cancelled_caught
        with anyio.CancelScope() as parked:
            async with anyio.create_task_group() as tg:
                tg.start_soon(gen.wait_for_input)
                await anyio.wait_all_tasks_blocked()
                parked.cancel()
        assert parked.cancelled_caught
        assert gen._parker is not None
        assert not gen._parker.occupied
        for item, anchor in (
            (Input("steer", "go", id="c-1"), gen.id),
            (Input("steer", "go", id="c-2"), "gone"),
        ):
            with anyio.CancelScope() as late:  # a repeat, then a refusal
                late.deadline = anyio.current_time() - 1
                await runtime.submit_steering(item, anchor)
                pytest.fail("the submit was not a cancel point")  # pragma: no cover
            assert late.cancelled_caught
        runtime._check()
        gen.stop()
    assert runtime.receipt("c-1") == Receipt(True, "c-1", gen.id, Disposition.APPLIED)


def test_a_boundary_from_a_guest_run_or_its_host_loop_is_refused_before_it_takes_anything() -> None:
    """C8 under guest mode, for the engine's boundary: one thread, two loops. The host's engine ran a
    boundary first (so its parker knows the engine's task); a boundary of the host's generation from the
    guest, and of the guest's from the host, each raise RuntimeError and leave their input pending."""

    def write(item: Input, metadata: object) -> None:
        pytest.fail("nothing is written from another loop")  # pragma: no cover

    async def host() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        hosts = LiveRuntime()
        async with hosts.open_generation() as gen:
            assert await gen.boundary(write) == []  # at home: the engine's task is now the one seen
            assert hosts.submit_steering_nowait(Input("steer", "x", id="h-1"), gen.id).accepted

            async def guest_boundary() -> None:
                with pytest.raises(RuntimeError, match="another thread or event loop"):
                    await gen.boundary(write)

            done: asyncio.Future[outcome.Outcome[None]] = loop.create_future()
            trio.lowlevel.start_guest_run(
                guest_boundary,
                run_sync_soon_threadsafe=loop.call_soon_threadsafe,
                done_callback=done.set_result,
            )
            (await done).unwrap()
            host_pending = gen.pending
            gen.stop()
        opened = asyncio.Event()
        held: dict[str, Any] = {}

        async def guest_owns() -> None:
            guests = LiveRuntime()
            finish = trio.Event()
            async with guests.open_generation() as own:
                assert guests.submit_steering_nowait(Input("steer", "x", id="g-1"), own.id).accepted
                held.update(gen=own, finish=finish, token=trio.lowlevel.current_trio_token())
                loop.call_soon_threadsafe(opened.set)
                await finish.wait()
                held["pending"] = own.pending
                own.stop()

        finished: asyncio.Future[outcome.Outcome[None]] = loop.create_future()
        trio.lowlevel.start_guest_run(
            guest_owns, run_sync_soon_threadsafe=loop.call_soon_threadsafe, done_callback=finished.set_result
        )
        await opened.wait()
        with pytest.raises(RuntimeError, match="another thread or event loop"):
            await held["gen"].boundary(write)
        held["token"].run_sync_soon(held["finish"].set)
        (await finished).unwrap()
        return host_pending, held["pending"]

    assert asyncio.run(host()) == (1, 1)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_asyncio_park_future_is_freed_by_unpark_and_by_its_abandoned_wait() -> None:
    """asyncio's ``park_future()`` (``wait_for_input``'s park without a coroutine): the spot is
    taken until ``unpark()`` wakes it, a second park is refused meanwhile, and a wait cancelled
    while parked frees the spot through ``abandon`` (which never frees a later park's)."""
    parker = Parker.for_running_backend()
    woke: list[str] = []

    async def wait(name: str) -> None:
        future = parker.park_future()
        assert future is not None
        try:
            await future
        except BaseException:
            parker.abandon(future)
            raise
        woke.append(name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait, "first")
        await anyio.wait_all_tasks_blocked()
        assert parker.occupied
        assert parker.waiting
        with pytest.raises(RuntimeError, match="already parked"):
            parker.park_future()
        assert parker.unpark() is True
        assert not parker.occupied  # woken: free at once, before the woken task runs
        assert parker.unpark() is False
    assert woke == ["first"]

    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait, "cancelled")
            await anyio.wait_all_tasks_blocked()
            scope.cancel()
    assert woke == ["first"]
    assert not parker.occupied
    stale = parker.park_future()
    assert stale is not None
    parker.abandon(asyncio.get_running_loop().create_future())  # not its future: nothing freed
    assert parker.occupied
    parker.abandon(stale)
    assert not parker.occupied


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_has_no_park_future() -> None:
    """trio parks through ``park()`` only (its follower is rescheduled as ``park()`` returns)."""
    assert Parker.for_running_backend().park_future() is None


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_asyncio_hand_over_to_a_wait_cancelled_before_it_resumed_raises_nothing() -> None:
    """A submit's hand-over that finds the parked future already cancelled (``task.cancel()``, the
    waiter not resumed yet) wakes nobody and raises nothing: the spot stays the waiter's until its
    ``abandon``, and the caller resumes after the cancelled waiter ran."""
    parker = Parker.for_running_backend()
    steps: list[str] = []

    async def wait() -> None:
        future = parker.park_future()
        assert future is not None
        try:
            await future
        except BaseException:
            steps.append("waiter cancelled")
            parker.abandon(future)
            raise
        steps.append("waiter woken")

    task = asyncio.ensure_future(wait())
    await anyio.wait_all_tasks_blocked()
    task.cancel()  # cancels the parked future at once; the waiter runs later
    assert parker.occupied
    await parker.hand_over()
    steps.append("caller resumed")
    assert steps == ["waiter cancelled", "caller resumed"]
    assert not parker.occupied
    with pytest.raises(asyncio.CancelledError):
        await task


def test_an_asyncio_parker_answers_the_same_whether_or_not_trio_was_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """C8: where trio was never imported (``sys.modules`` has no ``trio``) no trio step can run, so
    the thread test answers alone, without reading sniffio's thread-local; either way the parker is
    home in its loop's thread and nowhere else."""

    async def answers() -> tuple[bool, bool]:
        parker = Parker.for_running_backend()
        return parker.at_home(), await asyncio.to_thread(parker.at_home)

    assert asyncio.run(answers()) == (True, False)
    monkeypatch.setattr(_parking, "_modules", {k: v for k, v in sys.modules.items() if k != "trio"})
    assert asyncio.run(answers()) == (True, False)
