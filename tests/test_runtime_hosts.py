"""The host API, hardened (issue 11, items 8-15): awaited submits are checkpoints, a repeat
after close answers, ``wait_final``, ``stop`` by generation id, the runtime's own loop and
thread, no re-entrant submit from a listener, a clock that raises, bounded generation ids.

Every race is a sequence (``anyio.wait_all_tasks_blocked``, gates); nothing sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import tracemalloc
import warnings
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import pytest
import trio

from live_steering import (
    CheckpointDecisionWarning,
    Disposition,
    Generation,
    HoldReason,
    Input,
    LiveRuntime,
    Receipt,
    StopReason,
    UnknownInputError,
)
from live_steering._runtime import internals
from live_steering.journal import ReceiptJournal, read_receipts

pytestmark = pytest.mark.anyio

Event = dict[str, Any]


def steer(id_: str, text: str = "Use the corrected path") -> Input:
    return Input("steer", text, id=id_)


def write_nothing(item: Input, metadata: Mapping[str, Any]) -> None:
    """A context writer that keeps nothing (the tests read receipts and events)."""


def types(runtime: LiveRuntime) -> list[str]:
    return [e["type"] for e in runtime.recent_events()]


async def engine(runtime: LiveRuntime, ready: Callable[[Generation], None]) -> None:
    """A minimal engine: park for input, drain it, until admission closes."""
    async with runtime.open_generation() as gen:
        ready(gen)
        while await gen.wait_for_input():
            await gen.boundary(write_nothing)


class Ticker:
    """A task that counts its own scheduling rounds: how often others let it run."""

    def __init__(self) -> None:
        self.ticks = 0

    async def run(self) -> None:
        while True:
            self.ticks += 1
            await anyio.lowlevel.checkpoint()


# -- item 8: every awaited submit is a checkpoint (C8) -------------------------------------------------


async def test_a_host_polling_with_repeats_lets_a_parked_engine_run() -> None:
    """C8: a host that submits without yielding, then polls with awaited repeats, sees the engine apply it."""
    runtime = LiveRuntime()
    gens: list[Generation] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine, runtime, gens.append)
        await anyio.wait_all_tasks_blocked()
        gen_id = gens[0].id
        item = steer("poll-1")
        assert runtime.submit_steering_nowait(item, gen_id).disposition is Disposition.QUEUED
        polls = 0
        while (await runtime.submit_steering(item, gen_id)).disposition is Disposition.QUEUED:
            polls += 1
            assert polls < 50, "the awaited repeats never let the engine run"
        assert runtime.receipt("poll-1") == Receipt(True, "poll-1", gen_id, Disposition.APPLIED)
        gens[0].stop()


@pytest.mark.parametrize("path", ["repeat", "refusal"])
async def test_awaited_repeat_and_refusal_yield_to_other_tasks(path: str) -> None:
    """C8: each awaited repeat or refusal is one scheduling round: a busy task gets to run between them."""
    runtime = LiveRuntime()
    ticker = Ticker()
    async with runtime.open_generation() as gen, anyio.create_task_group() as tg:
        assert runtime.submit_steering_nowait(steer("r-1"), gen.id).accepted
        tg.start_soon(ticker.run)
        await anyio.lowlevel.checkpoint()  # the ticker started (it never blocks)
        before = ticker.ticks
        item, anchor = (steer("r-1"), gen.id) if path == "repeat" else (steer("r-2"), "not-running")
        for _ in range(100):
            receipt = await runtime.submit_steering(item, anchor)
        assert receipt.accepted is (path == "repeat")
        assert ticker.ticks - before >= 50
        tg.cancel_scope.cancel()
        gen.stop()


@pytest.mark.parametrize("path", ["repeat", "refusal"])
async def test_a_cancelled_host_repeating_is_cancelled_at_its_submit(path: str) -> None:
    """C8: a repeat or refusal is a cancellation point, so a host's timeout fires; nothing changes."""
    runtime = LiveRuntime()
    async with runtime.open_generation() as gen:
        assert runtime.submit_steering_nowait(steer("c-1"), gen.id).accepted
        before = runtime.statistics()
        item, anchor = (steer("c-1"), gen.id) if path == "repeat" else (steer("c-2"), "not-running")
        with anyio.CancelScope() as scope:
            scope.cancel()
            await runtime.submit_steering(item, anchor)
            pytest.fail("the submit was not a checkpoint")  # pragma: no cover
        assert scope.cancelled_caught
        after = runtime.statistics()
        assert (
            (after.accepted, after.identities, after.pending)
            == (1, 1, 1)
            == (
                before.accepted,
                before.identities,
                before.pending,
            )
        )
        gen.stop()


async def test_a_cancelled_admission_still_admits_and_answers() -> None:
    """C8: the admission's yield stays shielded: a cancelled caller's input is admitted and receipted."""
    runtime = LiveRuntime()
    async with runtime.open_generation() as gen:
        with anyio.CancelScope() as scope:
            scope.cancel()
            receipt = await runtime.submit_steering(steer("s-1"), gen.id)
            assert receipt.disposition is Disposition.QUEUED
            await anyio.lowlevel.checkpoint()
        assert scope.cancelled_caught
        assert runtime.receipt("s-1") is not None
        gen.stop()


# -- item 9: a repeat after close answers (C1, C10) ---------------------------------------------------


async def test_a_repeat_after_close_answers_with_the_current_receipt() -> None:
    """C1/C10: after aclose() an identical repeat gets its applied receipt and admits nothing."""
    runtime = LiveRuntime()
    heard: list[Event] = []
    async with runtime.open_generation() as gen:
        assert (await runtime.submit_steering(steer("done-1"), gen.id)).accepted
        await gen.boundary(write_nothing)
        gen.continue_after_checkpoint()
    await runtime.aclose()
    runtime.add_listener(heard.append)
    before = runtime.statistics()
    receipt = await runtime.submit_steering(steer("done-1"), gen.id)
    assert receipt == Receipt(True, "done-1", gen.id, Disposition.APPLIED)
    assert runtime.submit_steering_nowait(steer("done-1"), gen.id) == receipt
    assert [(e["type"], e["disposition"]) for e in heard] == [("steering.repeated", "applied")] * 2
    after = runtime.statistics()
    assert (after.accepted, after.identities, after.repeated) == (
        before.accepted,
        before.identities,
        before.repeated + 2,
    )


async def test_a_repeat_after_close_of_a_running_generation_is_held() -> None:
    """C10/C17: closing while a generation runs holds its input; a repeat then answers held."""
    runtime = LiveRuntime()
    async with runtime.open_generation() as gen:
        assert (await runtime.submit_steering(steer("held-1"), gen.id)).accepted
        await runtime.aclose()
        receipt = await runtime.submit_steering(steer("held-1"), gen.id)
        assert receipt == Receipt(True, "held-1", gen.id, Disposition.HELD, HoldReason.RUNTIME_CLOSED)
        assert types(runtime)[-1] == "steering.repeated"


@pytest.mark.parametrize(
    ("item", "anchor"),
    [
        pytest.param(steer("new-1"), "ANCHOR", id="new-identity"),
        pytest.param(steer("kept-1", "other text"), "ANCHOR", id="other-text"),
        pytest.param(steer("kept-1"), "another-generation", id="other-anchor"),
        pytest.param(Input("prompt", "Use the corrected path", id="kept-1"), "ANCHOR", id="other-kind"),
    ],
)
async def test_after_close_anything_but_an_identical_repeat_is_refused_closed(
    item: Input, anchor: str
) -> None:
    """C1/C7: after close a new identity, and a conflicting one, are refused ``closed`` (not conflict)."""
    runtime = LiveRuntime()
    async with runtime.open_generation() as gen:
        assert runtime.submit_steering_nowait(steer("kept-1"), gen.id).accepted
        gen.stop()
    await runtime.aclose()
    anchor = gen.id if anchor == "ANCHOR" else anchor
    receipt = await runtime.submit_steering(item, anchor)
    assert (receipt.accepted, receipt.reason) == (False, "closed")
    assert runtime.statistics().identities == 1


# -- item 10: wait_final --------------------------------------------------------------------------------


async def test_wait_final_returns_once_the_input_is_applied() -> None:
    """A host awaits the outcome: the wait returns the applied receipt when the engine wrote it."""
    runtime = LiveRuntime()
    got: list[Receipt] = []

    async def waiter(input_id: str) -> None:
        got.append(await runtime.wait_final(input_id))

    async with runtime.open_generation() as gen, anyio.create_task_group() as tg:
        assert (await runtime.submit_steering(steer("w-1"), gen.id)).accepted
        tg.start_soon(waiter, "w-1")
        tg.start_soon(waiter, "w-1")  # two hosts wait for the same input
        await anyio.wait_all_tasks_blocked()
        assert got == []
        await gen.boundary(write_nothing)
        await anyio.wait_all_tasks_blocked()
        assert got == [Receipt(True, "w-1", gen.id, Disposition.APPLIED)] * 2
        gen.continue_after_checkpoint()
    assert await runtime.wait_final("w-1") == got[0]  # already final: answers at once


@pytest.mark.parametrize("ending", ["stop", "writer-raises", "close"])
async def test_wait_final_returns_held_and_unknown_too(ending: str) -> None:
    """The final receipt is what the input ended as: held by a stop or close, unknown if the write failed."""
    runtime = LiveRuntime()
    got: list[Receipt] = []

    async def waiter() -> None:
        got.append(await runtime.wait_final("w-2"))

    def failing_writer(item: Input, metadata: Mapping[str, Any]) -> None:
        raise OSError("the context store is down")

    async with runtime.open_generation() as gen, anyio.create_task_group() as tg:
        assert (await runtime.submit_steering(steer("w-2"), gen.id)).accepted
        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        if ending == "stop":
            runtime.stop(gen.id)
        elif ending == "close":
            await runtime.aclose()
        else:
            with pytest.raises(OSError, match="context store is down"):
                await gen.boundary(failing_writer)
            gen.stop()
    expected = {
        "stop": Receipt(True, "w-2", gen.id, Disposition.HELD, HoldReason.GENERATION_STOPPED),
        "close": Receipt(True, "w-2", gen.id, Disposition.HELD, HoldReason.RUNTIME_CLOSED),
        "writer-raises": Receipt(True, "w-2", gen.id, Disposition.UNKNOWN, HoldReason.WRITE_INTERRUPTED),
    }[ending]
    assert got == [expected]


async def test_wait_final_respects_the_callers_deadline_and_cleans_up() -> None:
    """A timeout around wait_final cancels only the wait: the input stays queued and is applied later."""
    runtime = LiveRuntime()
    async with runtime.open_generation() as gen:
        assert (await runtime.submit_steering(steer("w-3"), gen.id)).accepted
        with anyio.move_on_after(0) as scope:  # a deadline already passed
            await runtime.wait_final("w-3")
        assert scope.cancelled_caught
        assert runtime.receipt("w-3") == Receipt(True, "w-3", gen.id, Disposition.QUEUED)
        assert runtime._final_waiters == {}
        assert runtime._remove_final_listener is None
        [applied] = await gen.boundary(write_nothing)
        assert await runtime.wait_final("w-3") == applied
        gen.continue_after_checkpoint()


async def test_wait_final_is_a_checkpoint_for_a_final_input() -> None:
    """An already-final answer is still a checkpoint: a cancelled caller is cancelled there."""
    runtime = LiveRuntime()
    async with runtime.open_generation() as gen:
        assert runtime.submit_steering_nowait(steer("w-4"), gen.id).accepted
        gen.stop()
    with anyio.CancelScope() as scope:
        scope.cancel()
        await runtime.wait_final("w-4")
    assert scope.cancelled_caught


async def test_wait_final_of_an_id_never_accepted_raises_unknown_input() -> None:
    """An id the runtime never accepted (a refused one too) can never be final: ``UnknownInputError``."""
    runtime = LiveRuntime()
    async with runtime.open_generation() as gen:
        refused = await runtime.submit_steering(steer("w-5"), "not-running")
        assert not refused.accepted
        for input_id in ("w-5", "never-seen"):
            with pytest.raises(UnknownInputError, match="never accepted") as raised:
                await runtime.wait_final(input_id)
            assert isinstance(raised.value, LookupError)
        with pytest.raises(TypeError):
            await runtime.wait_final(7)  # type: ignore[arg-type]
        gen.stop()


# -- item 11: stop by generation id ----------------------------------------------------------------------


async def test_a_host_stops_a_generation_by_its_id() -> None:
    """C17: runtime.stop(id) holds what is pending, wakes the parked engine, and the block ends stopped."""
    runtime = LiveRuntime()
    gens: list[Generation] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine, runtime, gens.append)
        await anyio.wait_all_tasks_blocked()
        gen = gens[0]
        # input admitted without a yield: pending when the stop lands
        assert runtime.submit_steering_nowait(steer("p-1"), gen.id).accepted
        assert runtime.stop(gen.id) is True
        assert runtime.stop(gen.id) is False  # already stopped: the first ending stands
    assert runtime.receipt("p-1") == Receipt(
        True, "p-1", gen.id, Disposition.HELD, HoldReason.GENERATION_STOPPED
    )
    terminal = gen.terminal_event
    assert terminal is not None
    assert terminal["reason"] == "generation-stopped"
    assert types(runtime)[-1] == "generation.stopped"
    assert runtime.stop(gen.id) is False  # ended: nothing to stop


async def test_a_host_stop_by_id_ends_the_contracts_sketch_loop_cleanly() -> None:
    """C17: stopped by id while a tool runs, the sketch loop's next boundary ends it cleanly."""
    runtime = LiveRuntime()
    tool_running, tool_done = anyio.Event(), anyio.Event()
    rounds: list[int] = []
    gens: list[Generation] = []

    async def sketch_loop() -> None:
        async with runtime.open_generation() as gen:
            gens.append(gen)
            while True:
                await gen.boundary(write_nothing)  # raises the stop signal once stopped
                rounds.append(len(rounds))
                if len(rounds) == 1:  # the model asked for a tool: run it, then the next request
                    tool_running.set()
                    await tool_done.wait()  # a running tool is never interrupted
                    continue
                if not gen.continue_after_checkpoint():  # pragma: no cover - stopped before
                    break

    async with anyio.create_task_group() as tg:
        tg.start_soon(sketch_loop)
        await tool_running.wait()
        gen_id = gens[0].id
        assert (await runtime.submit_steering(steer("k-1"), gen_id)).accepted
        assert runtime.stop(gen_id)
        tool_done.set()
    assert rounds == [0]
    held = Receipt(True, "k-1", gen_id, Disposition.HELD, HoldReason.GENERATION_STOPPED)
    assert runtime.receipt("k-1") == held
    assert types(runtime).count("generation.stopped") == 1
    assert types(runtime)[-1] == "generation.stopped"


async def test_stop_by_id_with_the_budget_reason() -> None:
    """C17: a host may stop with ``StopReason.BUDGET_EXHAUSTED``; pending input is held with it."""
    runtime = LiveRuntime()
    async with runtime.open_generation() as gen:
        assert runtime.submit_steering_nowait(steer("b-1"), gen.id).accepted
        assert runtime.stop(gen.id, StopReason.BUDGET_EXHAUSTED)
    assert runtime.receipt("b-1") == Receipt(
        True, "b-1", gen.id, Disposition.HELD, HoldReason.BUDGET_EXHAUSTED
    )
    assert runtime.recent_events()[-1]["reason"] == "budget-exhausted"


async def test_stop_by_id_of_another_generation_changes_nothing() -> None:
    """A stale or unknown id stops nothing (False): the running generation goes on; bad arguments raise."""
    runtime = LiveRuntime()
    async with runtime.open_generation("first") as first:
        pass
    async with runtime.open_generation() as gen:
        before = runtime.recent_events()
        assert runtime.stop(first.id) is False
        assert runtime.stop("never-ran") is False
        with pytest.raises(TypeError):
            runtime.stop(None)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            runtime.stop(gen.id, HoldReason.GENERATION_STOPPED)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            runtime.stop(gen.id, "generation-stopped")  # type: ignore[arg-type]
        assert gen.accepting
        assert runtime.recent_events() == before
        gen.continue_after_checkpoint()


# -- item 12: threads and event loops (C8) ---------------------------------------------------------------


def _from_plain_thread(runtime: LiveRuntime, gen_id: str) -> Receipt:
    return runtime.submit_steering_nowait(steer("t-1"), gen_id)


def _from_asyncio_loop(runtime: LiveRuntime, gen_id: str) -> Receipt:
    return asyncio.run(runtime.submit_steering(steer("t-1"), gen_id))


def _from_trio_loop(runtime: LiveRuntime, gen_id: str) -> Receipt:
    return trio.run(runtime.submit_steering, steer("t-1"), gen_id)


def _nowait_from_asyncio_loop(runtime: LiveRuntime, gen_id: str) -> Receipt:
    async def submit() -> Receipt:
        return runtime.submit_steering_nowait(steer("t-1"), gen_id)

    return asyncio.run(submit())


@pytest.mark.parametrize(
    "caller",
    [_from_plain_thread, _from_asyncio_loop, _from_trio_loop, _nowait_from_asyncio_loop],
    ids=lambda caller: caller.__name__,
)
async def test_a_submit_from_another_thread_or_loop_raises_before_admission(
    caller: Callable[[LiveRuntime, str], Receipt],
) -> None:
    """C8: from another thread or event loop a submit raises RuntimeError; nothing admitted or published."""
    runtime = LiveRuntime()
    gens: list[Generation] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine, runtime, gens.append)
        await anyio.wait_all_tasks_blocked()
        gen = gens[0]
        events_before = runtime.statistics().events_emitted
        with pytest.raises(RuntimeError, match="another thread or event loop"):
            await anyio.to_thread.run_sync(caller, runtime, gen.id)
        stats = runtime.statistics()
        assert (stats.accepted, stats.refused, stats.events_emitted) == (0, 0, events_before)
        assert runtime.receipt("t-1") is None
        # the runtime is untouched: a submit from its own loop still wakes the engine
        assert (await runtime.submit_steering(steer("t-2"), gen.id)).accepted
        await anyio.wait_all_tasks_blocked()
        assert runtime.receipt("t-2") == Receipt(True, "t-2", gen.id, Disposition.APPLIED)
        gen.stop()


async def test_stop_wait_final_and_aclose_from_another_thread_raise_too() -> None:
    """C8: runtime.stop(), wait_final() and aclose() belong to the runtime's loop as well."""
    runtime = LiveRuntime()
    async with runtime.open_generation() as gen:
        assert runtime.submit_steering_nowait(steer("t-4"), gen.id).accepted
        with pytest.raises(RuntimeError, match="another thread"):
            await anyio.to_thread.run_sync(runtime.stop, gen.id)
        with pytest.raises(RuntimeError, match="another thread"):
            await anyio.to_thread.run_sync(lambda: asyncio.run(runtime.wait_final("t-4")))
        with pytest.raises(RuntimeError, match="another thread"):
            await anyio.to_thread.run_sync(lambda: asyncio.run(runtime.aclose()))
        assert not runtime.closed
        assert gen.accepting
        assert gen.pending == 1
        gen.stop()


async def test_a_thread_submits_through_anyio_from_thread() -> None:
    """C8: the documented path from a worker thread, anyio.from_thread.run, admits and wakes the engine."""
    runtime = LiveRuntime()
    gens: list[Generation] = []

    def host_thread(gen_id: str) -> Receipt:
        receipt = anyio.from_thread.run(runtime.submit_steering, steer("t-3"), gen_id)
        final: Receipt = anyio.from_thread.run(runtime.wait_final, "t-3")
        assert final.disposition is Disposition.APPLIED
        return receipt

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine, runtime, gens.append)
        await anyio.wait_all_tasks_blocked()
        receipt = await anyio.to_thread.run_sync(host_thread, gens[0].id)
        assert receipt == Receipt(True, "t-3", gens[0].id, Disposition.QUEUED)
        assert runtime.receipt("t-3") == Receipt(True, "t-3", gens[0].id, Disposition.APPLIED)
        gens[0].stop()


@pytest.mark.parametrize("first_backend", ["asyncio", "trio"])
async def test_a_runtime_moves_to_a_new_loop_once_its_old_loop_is_gone(first_backend: str) -> None:
    """C8: a runtime whose generation ran in a loop (another thread's) that has finished may be used here."""
    runtime = LiveRuntime()

    async def first_life() -> None:
        async with runtime.open_generation() as gen:
            gen.continue_after_checkpoint()

    await anyio.to_thread.run_sync(lambda: anyio.run(first_life, backend=first_backend))
    refused = await runtime.submit_steering(
        steer("n-0"), "none-running"
    )  # no generation yet: refused, no error
    assert refused.reason == "stale-generation"
    async with runtime.open_generation() as gen:
        assert (await runtime.submit_steering(steer("n-1"), gen.id)).accepted
        gen.stop()


@pytest.mark.parametrize("other_backend", ["asyncio", "trio"])
async def test_a_generation_is_not_entered_from_another_loop_while_the_runtimes_loop_runs(
    other_backend: str,
) -> None:
    """C8: after a generation ended here, this loop still runs and still owns the runtime: another
    loop (another thread's) entering the next generation is refused, nothing published, and this
    loop's host and engine carry on with it."""
    runtime = LiveRuntime()
    async with runtime.open_generation() as gen:
        gen.continue_after_checkpoint()
    events_before = runtime.statistics().events_emitted

    async def take_over() -> None:
        async with runtime.open_generation("theirs"):
            pass  # pragma: no cover - refused on entry

    def other_loop() -> None:
        if other_backend == "trio":
            trio.run(take_over)
        else:
            asyncio.run(take_over())

    with pytest.raises(RuntimeError, match="another thread or event loop"):
        await anyio.to_thread.run_sync(other_loop)
    assert runtime.statistics().events_emitted == events_before
    assert runtime.generation is None
    async with runtime.open_generation("theirs") as gen:  # the id was not used up either
        assert (await runtime.submit_steering(steer("h-1"), gen.id)).accepted
        gen.stop()


async def test_a_read_from_another_thread_publishes_nothing_there() -> None:
    """C8: while an admission's ``steering.accepted`` is owed (its submit yielded to the engine),
    a host thread reads receipt(), generation, pending_follow_ups and recent_events(): plain
    reads. The owed event is published by the runtime's loop, so every listener runs there."""
    import threading

    runtime = LiveRuntime()
    published: list[tuple[str, bool]] = []
    loop_thread = threading.get_ident()
    runtime.add_listener(lambda e: published.append((e["type"], threading.get_ident() == loop_thread)))
    reads: list[object] = []

    def host_reads() -> None:
        reads.append(runtime.receipt("r-1"))
        reads.append(runtime.generation)
        reads.append(runtime.pending_follow_ups)
        reads.append([e["type"] for e in runtime.recent_events()])

    async def engine_reading_from_a_thread() -> None:
        async with runtime.open_generation("g") as gen:
            await gen.wait_for_input()  # woken by the submit, whose acceptance is still owed
            reader = threading.Thread(target=host_reads)
            reader.start()  # the loop's thread blocks here: nothing of the loop runs meanwhile
            reader.join()
            await gen.boundary(write_nothing)

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine_reading_from_a_thread)
        await anyio.wait_all_tasks_blocked()
        assert (await runtime.submit_steering(steer("r-1"), "g")).accepted
    assert reads[0] == Receipt(True, "r-1", "g", Disposition.QUEUED)
    assert isinstance(reads[1], dict)
    assert reads[1]["id"] == "g"
    assert reads[2] == 0
    assert "generation.started" in reads[3]  # type: ignore[operator]
    assert [t for t, at_home in published if not at_home] == []
    assert [t for t, _ in published].count("steering.accepted") == 1


async def test_a_bad_clock_or_receipt_id_is_a_type_error() -> None:
    """C6, C24: a clock that is not callable is refused when the runtime is made (not at its first
    event, which left a runtime that could not even close), and receipt() of a non-string id is a
    TypeError naming the argument, as wait_final's is."""
    for clock in (None, 5, "time.time"):
        with pytest.raises(TypeError, match="clock must be callable"):
            LiveRuntime(clock=clock)  # type: ignore[arg-type]
    runtime = LiveRuntime()
    for bad in (5, ["a"], None):
        with pytest.raises(TypeError, match="input_id must be a str"):
            runtime.receipt(bad)  # type: ignore[arg-type]
    await runtime.aclose()


# -- item 13: no re-entrant submit from an event consumer -------------------------------------------------


async def test_a_submit_from_a_listener_raises_and_never_reorders_the_stream() -> None:
    """C8: a listener's submit raises RuntimeError before admission; subscribers see sequences in order."""
    runtime = LiveRuntime()
    errors: list[BaseException] = []
    heard: list[Event] = []

    async with runtime.open_generation() as gen:

        def resubmit(event: Event) -> None:
            if event["type"] == "steering.accepted":
                for call in (
                    lambda: runtime.submit_steering_nowait(steer("from-listener"), gen.id),
                    lambda: runtime.stop(gen.id),
                ):
                    try:
                        call()
                    except RuntimeError as error:
                        errors.append(error)

        runtime.add_listener(resubmit)
        with runtime.subscribe() as subscription:
            assert (await runtime.submit_steering(steer("l-1"), gen.id)).accepted
            while (event := subscription.receive_nowait()) is not None:
                heard.append(event)
        assert gen.accepting
        gen.stop()
    assert len(errors) == 2
    assert all("event listener" in str(error) for error in errors)
    assert runtime.receipt("from-listener") is None
    assert [e["type"] for e in heard] == ["steering.accepted"]
    sequences = [e["sequence"] for e in runtime.recent_events()]
    assert sequences == sorted(sequences) == list(range(1, len(sequences) + 1))


# -- item 14: a clock that raises never leaves state half-changed ----------------------------------------


class ClockError(Exception):
    """What the test's clock raises."""


class FlakyClock:
    """A clock that raises on its ``fail_at``-th reading (never when 0) and counts its readings."""

    def __init__(self, fail_at: int = 0) -> None:
        self.fail_at = fail_at
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        if self.reads == self.fail_at:
            raise ClockError(f"clock reading {self.reads} failed")
        return 1_000.0 + self.reads


def _replayed(events: list[Event]) -> dict[str, str]:
    """Each input's disposition as the stream tells it."""
    final = {"steering.accepted": "queued", "steering.applied": "applied", "steering.held": "held"}
    told: dict[str, str] = {}
    for event in events:
        kind = event["type"]
        if kind in final:
            told[event["input_id"]] = final[kind]
        elif kind == "steering.unknown":
            told[event["input_id"]] = "unknown"
    return told


async def _step(action: Callable[[], Awaitable[object]]) -> None:
    """Run one step of the scenario; a step the clock's error stopped is skipped."""
    with contextlib.suppress(ClockError):
        await action()


async def _nowait(action: Callable[[], object]) -> None:
    action()
    await anyio.lowlevel.checkpoint()


async def _clock_round(runtime: LiveRuntime, gen: Generation, n: int) -> None:
    def nowait_submit(id_: str) -> Callable[[], Awaitable[None]]:
        return lambda: _nowait(lambda: runtime.submit_steering_nowait(steer(id_), gen.id))

    await _step(lambda: runtime.submit_steering(steer(f"a-{n}"), gen.id))
    await _step(nowait_submit(f"b-{n}"))
    await _step(lambda: runtime.submit_steering(steer(f"a-{n}"), gen.id))  # a repeat
    await _step(lambda: runtime.submit_steering(steer(f"c-{n}"), "stale"))  # a refusal
    await _step(lambda: gen.boundary(write_nothing))
    await _step(nowait_submit(f"d-{n}"))
    await _step(lambda: _nowait(gen.continue_after_checkpoint))
    if gen.accepting:
        await _step(lambda: gen.boundary(write_nothing))
        await _step(nowait_submit(f"e-{n}"))
        await _step(lambda: _nowait(lambda: runtime.stop(gen.id)))


async def _clock_scenario(runtime: LiveRuntime) -> None:
    """Every kind of clock reading: start, admit, repeat, refuse, write, continue, stop, end, close.

    Each step that raises the clock's error is skipped; the rest go on."""
    with warnings.catch_warnings():
        # a step the clock stopped may leave input pending without the checkpoint decision
        warnings.simplefilter("ignore", CheckpointDecisionWarning)
        for n in range(2):
            with contextlib.suppress(ClockError):  # leaving the block read the clock: it ended all the same
                async with runtime.open_generation() as gen:
                    await _clock_round(runtime, gen, n)
    await _step(runtime.aclose)


def _assert_consistent(runtime: LiveRuntime) -> None:
    runtime._check()
    events = runtime.recent_events()
    stats = runtime.statistics()
    counts = {
        t: sum(e["type"] == t for e in events)
        for t in ("steering.accepted", "steering.repeated", "steering.refused")
    }
    assert counts == {
        "steering.accepted": stats.accepted,
        "steering.repeated": stats.repeated,
        "steering.refused": stats.refused,
    }
    told = _replayed(events)
    for input_id, disposition in told.items():
        receipt = runtime.receipt(input_id)
        assert receipt is not None, input_id
        assert receipt.disposition is not None
        assert receipt.disposition.value == disposition, input_id
    assert len(told) == stats.identities
    applied = [e for e in events if e["type"] == "steering.applied"]
    delivered = [e for e in events if e["type"] == "input.delivered"]
    assert [e["input_id"] for e in applied] == [e["input_id"] for e in delivered]


async def test_the_clock_scenario_reads_the_clock_at_every_kind_of_change() -> None:
    """The scenario below is worth running: with a working clock it reads it at every kind of event."""
    clock = FlakyClock()
    runtime = LiveRuntime(clock=clock)
    await _clock_scenario(runtime)
    _assert_consistent(runtime)
    assert {"generation.started", "steering.accepted", "steering.repeated", "steering.refused"} <= set(
        types(runtime)
    )
    assert {"steering.applied", "generation.continued", "steering.held", "generation.stopped"} <= set(
        types(runtime)
    )
    assert clock.reads > 20


async def test_a_clock_raising_at_any_reading_leaves_no_change_without_its_event() -> None:
    """Issue 11: whichever reading raises, nothing is half-changed: state and stream agree."""
    clean = FlakyClock()
    await _clock_scenario(LiveRuntime(clock=clean))
    for fail_at in range(1, clean.reads + 1):
        runtime = LiveRuntime(clock=FlakyClock(fail_at))
        await _clock_scenario(runtime)
        _assert_consistent(runtime)


async def test_a_raising_clock_inside_the_write_confirmation_never_applies_silently() -> None:
    """C14: the clock fails as the write returns: the input is applied with both events, then it raises."""
    clock = FlakyClock()
    runtime = LiveRuntime(clock=clock)
    async with runtime.open_generation() as gen:
        assert (await runtime.submit_steering(steer("x-1"), gen.id)).accepted
        clock.fail_at = clock.reads + 1
        with pytest.raises(ClockError):
            await gen.boundary(write_nothing)
        assert runtime.receipt("x-1") == Receipt(True, "x-1", gen.id, Disposition.APPLIED)
        delivered, applied = runtime.recent_events()[-2:]
        assert (delivered["type"], applied["type"]) == ("input.delivered", "steering.applied")
        assert delivered["time"] == applied["time"] == runtime.recent_events()[-3]["time"]  # the last reading
        gen.continue_after_checkpoint()
    _assert_consistent(runtime)


async def test_a_raising_clock_as_the_block_is_left_still_ends_the_generation() -> None:
    """C17/C19: the clock fails at the end: the generation still ends (held, terminal event), then raises."""
    clock = FlakyClock()
    runtime = LiveRuntime(clock=clock)
    gen = runtime.open_generation()

    async def failing_loop() -> None:
        async with gen:
            assert runtime.submit_steering_nowait(steer("z-1"), gen.id).accepted
            clock.fail_at = clock.reads + 1
            raise KeyError("the loop failed")

    with pytest.raises(ClockError) as raised:
        await failing_loop()
    assert isinstance(raised.value.__context__, KeyError)  # the loop's own error is kept
    assert runtime.generation is None
    assert runtime.receipt("z-1") == Receipt(
        True, "z-1", gen.id, Disposition.HELD, HoldReason.GENERATION_FAILED
    )
    assert types(runtime)[-1] == "generation.failed"
    async with runtime.open_generation() as gen:  # the runtime goes on
        gen.continue_after_checkpoint()
    _assert_consistent(runtime)


async def test_a_raising_clock_at_admission_admits_nothing() -> None:
    """C8/C9: the clock fails as a submit is decided: it raises, nothing is admitted, a retry works."""
    clock = FlakyClock()
    runtime = LiveRuntime(clock=clock)
    async with runtime.open_generation() as gen:
        clock.fail_at = clock.reads + 1
        with pytest.raises(ClockError):
            await runtime.submit_steering(steer("y-1"), gen.id)
        assert runtime.receipt("y-1") is None
        assert runtime.statistics().accepted == 0
        assert (await runtime.submit_steering(steer("y-1"), gen.id)).accepted
        gen.stop()
    _assert_consistent(runtime)


# -- item 15: generation ids in bounded memory ---------------------------------------------------------


async def test_generation_ids_cost_no_memory_per_generation() -> None:
    """Issue 11: thousands of generations with the runtime's own ids leave its memory flat."""
    runtime = LiveRuntime(event_log_size=16)

    async def run(count: int) -> None:
        for _ in range(count):
            async with runtime.open_generation() as gen:
                gen.continue_after_checkpoint()

    await run(100)  # warm up: the event log is full, caches are made
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        await run(3_000)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    # before issue 11: about 212 B per generation (over 600 KB here); now a counter
    assert grown < 16_384, f"{grown} bytes for 3,000 generations"
    assert runtime.statistics().generations_started == 3_100


async def test_old_generation_ids_stay_stale_and_unusable() -> None:
    """C7/C18: an ended generation's id (made by the runtime or chosen) is refused as anchor and as new id."""
    runtime = LiveRuntime()
    async with runtime.open_generation() as made:
        made.continue_after_checkpoint()
    async with runtime.open_generation("chosen") as chosen:
        chosen.continue_after_checkpoint()
    async with runtime.open_generation() as current:
        for old in (made.id, chosen.id):
            receipt = await runtime.submit_steering(steer(f"late-{old}"), old)
            assert (receipt.accepted, receipt.reason) == (False, "stale-generation")
        current.continue_after_checkpoint()
    for old in (made.id, chosen.id, current.id):
        with pytest.raises(ValueError, match=r"already used|reserved"):
            runtime.open_generation(old)
    ids = {made.id, current.id}
    assert len(ids) == 2
    assert all(i.startswith("gen-") and len(i) <= 128 for i in ids)


async def test_two_runtimes_never_make_the_same_generation_id() -> None:
    """C18: an anchor kept from one runtime (before a restart) never names a generation of another."""
    first, second = LiveRuntime(), LiveRuntime()
    async with first.open_generation() as a:
        a.continue_after_checkpoint()
    async with second.open_generation() as b:
        receipt = await second.submit_steering(steer("old-anchor"), a.id)
        assert receipt.reason == "stale-generation"
        b.continue_after_checkpoint()
    assert a.id != b.id


async def test_with_a_journal_a_raising_clock_never_fools_wait_durable(tmp_path: Path) -> None:
    """C23: whichever clock reading raises, a receipt the journal reports durable is the row in its file."""
    clean = FlakyClock()
    await _clock_scenario(LiveRuntime(clock=clean))
    for fail_at in range(1, clean.reads + 1):
        path = tmp_path / f"clock-{fail_at}.db"
        async with ReceiptJournal(path) as journal:
            runtime = LiveRuntime(clock=FlakyClock(fail_at))
            journal.attach(runtime)
            await _clock_scenario(runtime)
            _assert_consistent(runtime)
            ids = [record.input.id for record in internals(runtime).accepted_inputs()]
            for input_id in ids:
                await journal.wait_durable(input_id)
                assert journal.durable_receipt(input_id) == runtime.receipt(input_id), (fail_at, input_id)
        in_file = {entry.input_id: (entry.disposition, entry.reason) for entry in read_receipts(path)}
        in_runtime = {}
        for input_id in ids:
            receipt = runtime.receipt(input_id)
            assert receipt is not None
            assert receipt.disposition is not None
            in_runtime[input_id] = (receipt.disposition, receipt.reason)
        assert in_file == in_runtime, fail_at
