"""The engine handle's calls from where they cannot be served, issued ids run once, bounded
chosen ids, plain-str ids, the warning after a continuation not run, and the write barrier
left by another task (review of issue 11).

Each test failed before its fix. Races are gates and ``anyio.wait_all_tasks_blocked``,
never sleeps; every test runs on asyncio and trio.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
import trio

from live_steering import (
    CheckpointDecisionWarning,
    Disposition,
    Generation,
    GenerationStateError,
    HoldReason,
    Input,
    LiveRuntime,
    Receipt,
)
from live_steering.journal import ReceiptJournal, read_receipts

pytestmark = pytest.mark.anyio

Event = dict[str, Any]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def steer(id_: str) -> Input:
    return Input("steer", "Use the corrected path", id=id_)


def write_nothing(item: Input, metadata: Mapping[str, Any]) -> None:
    """A context writer that keeps nothing (the tests read receipts and events)."""


class Text(str):
    """A str subclass: C6 accepts it as a string (copied to a plain str)."""


# -- 1. the handle's calls belong to the runtime's loop and thread (C8) ----------------------------


def _in_asyncio(call: Callable[[], Any]) -> Callable[[], Any]:
    async def run() -> Any:
        return await call()

    return lambda: asyncio.run(run())


def _in_trio(call: Callable[[], Any]) -> Callable[[], Any]:
    async def run() -> Any:
        return await call()

    return lambda: trio.run(run)


async def test_the_generations_calls_from_another_thread_or_loop_raise_before_anything_changes() -> None:
    """C8: stop/continue_after_checkpoint (a thread), boundary/wait_for_input (another loop) raise and
    change nothing: the pending input is not written."""
    runtime = LiveRuntime()
    async with runtime.open_generation() as gen:
        assert runtime.submit_steering_nowait(steer("t-1"), gen.id).accepted
        before = runtime.recent_events()
        calls: list[Callable[[], Any]] = [
            gen.stop,
            gen.continue_after_checkpoint,
            _in_asyncio(lambda: gen.boundary(write_nothing)),
            _in_trio(lambda: gen.boundary(write_nothing)),
            _in_asyncio(gen.wait_for_input),
            _in_trio(gen.wait_for_input),
        ]
        for call in calls:
            with pytest.raises(RuntimeError, match="another thread or event loop"):
                await anyio.to_thread.run_sync(call)
        assert (gen.accepting, gen.pending) == (True, 1)
        assert runtime.recent_events() == before
        assert runtime.receipt("t-1") == Receipt(True, "t-1", gen.id, Disposition.QUEUED)
        runtime._check()
        gen.stop()


async def test_a_thread_stops_a_parked_engine_through_anyio_from_thread() -> None:
    """C8/C17: a stop through the loop (anyio.from_thread) wakes the parked engine; a direct one raises."""
    runtime = LiveRuntime()
    woke: list[bool] = []
    direct: list[BaseException] = []

    async def engine(gen: Generation) -> None:
        woke.append(await gen.wait_for_input())

    def host_thread(gen: Generation) -> None:
        try:
            gen.stop()
        except RuntimeError as error:
            direct.append(error)
        anyio.from_thread.run_sync(gen.stop)

    # a safety net, not a measurement: before the fix the engine slept through the stop
    with anyio.fail_after(10):
        async with runtime.open_generation() as gen, anyio.create_task_group() as tg:
            tg.start_soon(engine, gen)
            await anyio.wait_all_tasks_blocked()
            await anyio.to_thread.run_sync(host_thread, gen)
    assert woke == [False]
    assert len(direct) == 1
    assert gen.terminal_event is not None
    assert gen.end_reason is HoldReason.GENERATION_STOPPED


# -- 2. not from inside an event consumer (C21) ------------------------------------------------------


async def test_stop_and_the_decision_from_a_listener_raise_and_never_reorder_the_stream() -> None:
    """C21: gen.stop() and continue_after_checkpoint() in a listener raise; the stream stays in order."""
    runtime = LiveRuntime()
    errors: list[BaseException] = []
    with runtime.subscribe() as subscription:
        async with runtime.open_generation() as gen:

            def consumer(event: Event) -> None:
                if event["type"] == "steering.applied" and event["input_id"] == "a":
                    for call in (gen.stop, gen.continue_after_checkpoint):
                        try:
                            call()
                        except RuntimeError as error:
                            errors.append(error)

            runtime.add_listener(consumer)
            await runtime.submit_steering(steer("a"), gen.id)
            await runtime.submit_steering(steer("b"), gen.id)
            await gen.boundary(write_nothing)
            assert gen.accepting
            assert not gen.continue_after_checkpoint()
        heard = []
        while (event := subscription.receive_nowait()) is not None:
            heard.append(event["sequence"])
    assert [str(e).split("(")[0] for e in errors] == ["gen.stop", "gen.continue_after_checkpoint"]
    assert all("event listener" in str(e) for e in errors)
    assert heard == list(range(1, len(heard) + 1))
    assert runtime.receipt("b") == Receipt(True, "b", gen.id, Disposition.APPLIED)


# -- 3. an issued id starts once (C18, C7) -----------------------------------------------------------


async def test_an_issued_id_runs_once_and_its_stale_anchor_stays_refused() -> None:
    """C18: Generation(rt, id, issued=True) of an ended (or skipped) issued id raises; its anchor is stale."""
    runtime = LiveRuntime()
    async with runtime.open_generation() as first:
        first.continue_after_checkpoint()
    skipped = runtime.open_generation()
    later = runtime.open_generation()
    async with later:
        later.continue_after_checkpoint()
    for old in (first.id, skipped.id, later.id):
        with pytest.raises(ValueError, match="runs once"):
            await Generation(runtime, old, issued=True).__aenter__()
    with pytest.raises(ValueError, match="runs once"):
        await skipped.__aenter__()
    async with runtime.open_generation() as current:
        receipt = await runtime.submit_steering(steer("late"), first.id)
        assert (receipt.accepted, receipt.reason) == (False, "stale-generation")
        current.continue_after_checkpoint()
    assert runtime.statistics().generations_started == 3
    runtime._check()


async def test_a_forged_issued_id_is_refused_though_the_latest_issued_id_is_not_parsed() -> None:
    """C18: the id made last is known without parsing it; a forged, padded or subclassed one still raises."""
    runtime = LiveRuntime(generation_prefix="p-")
    for forged_first in ("p-0", "p-1"):  # before any id was made
        with pytest.raises(ValueError, match="was not made"):
            await Generation(runtime, forged_first, issued=True).__aenter__()
    latest = runtime.open_generation()  # p-1, the id the runtime made last
    for forged in ("p-2", "p-01", "p-1x", "p-", "p-1 ", Text("p-1"), 1):
        with pytest.raises(ValueError, match="was not made"):
            await Generation(runtime, forged, issued=True).__aenter__()  # type: ignore[arg-type]
    assert runtime.generation is None
    assert runtime.recent_events() == []
    async with Generation(runtime, "p-" + str(1), issued=True) as gen:  # equal to it, built anew
        assert gen.id == latest.id
        gen.continue_after_checkpoint()
    with pytest.raises(ValueError, match="runs once"):  # still the id made last: started already
        await Generation(runtime, "p-1", issued=True).__aenter__()
    with pytest.raises(ValueError, match="runs once"):
        await latest.__aenter__()
    assert runtime.statistics().generations_started == 1
    runtime._check()


# -- 4. caller-chosen ids are bounded; the ACP session uses issued ids -------------------------------


async def test_caller_chosen_ids_are_remembered_up_to_the_limit_then_refused() -> None:
    """C18: past generation_id_limit a new chosen id raises ValueError; issued ids, stale refusals go on."""
    runtime = LiveRuntime(generation_id_limit=2)
    for chosen in ("turn-1", "turn-2"):
        async with runtime.open_generation(chosen) as gen:
            gen.continue_after_checkpoint()
    with pytest.raises(ValueError, match="generation_id_limit"):
        runtime.open_generation("turn-3")
    with pytest.raises(ValueError, match="already used"):
        runtime.open_generation("turn-1")
    async with runtime.open_generation() as gen:
        receipt = await runtime.submit_steering(steer("late"), "turn-1")
        assert (receipt.accepted, receipt.reason) == (False, "stale-generation")
        gen.continue_after_checkpoint()
    assert len(runtime._core._generation_ids) == 2
    with pytest.raises(ValueError, match="generation_id_limit"):
        LiveRuntime(generation_id_limit=-1)


async def test_a_runtime_with_its_own_prefix_issues_readable_ids_and_reserves_them() -> None:
    """C18: generation_prefix names the issued ids (1, 2, ...); a chosen id may not take that prefix."""
    runtime = LiveRuntime(generation_prefix="s1-turn-")
    for n in (1, 2):
        async with runtime.open_generation() as gen:
            assert gen.id == f"s1-turn-{n}"
            gen.continue_after_checkpoint()
    with pytest.raises(ValueError, match="reserved"):
        runtime.open_generation("s1-turn-3")
    assert runtime._core._generation_ids == set()


# -- 5. ids that are str subclasses (C6) --------------------------------------------------------------


async def test_stop_and_wait_final_take_a_str_subclass_as_submit_does() -> None:
    """C6: only a non-str raises TypeError; runtime.stop() and wait_final() accept a str subclass."""
    runtime = LiveRuntime()
    async with runtime.open_generation() as gen:
        assert (await runtime.submit_steering(steer("a"), Text(gen.id))).accepted
        await gen.boundary(write_nothing)
        assert (await runtime.wait_final(Text("a"))).disposition is Disposition.APPLIED
        assert runtime.stop(Text(gen.id))
        assert not gen.accepting
        with pytest.raises(TypeError):
            runtime.stop(1)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await runtime.wait_final(b"a")  # type: ignore[arg-type]


# -- 6. a continuation decided but not run ------------------------------------------------------------


async def test_leaving_after_a_true_decision_warns_with_its_own_message_and_field() -> None:
    """C16: continue_after_checkpoint() returned True, then the block was left: 'left-after-continue'."""
    runtime = LiveRuntime()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with runtime.open_generation() as gen:
            await runtime.submit_steering(steer("b"), gen.id)
            assert gen.continue_after_checkpoint()
    messages = [str(w.message) for w in caught if w.category is CheckpointDecisionWarning]
    assert len(messages) == 1
    assert "returned True" in messages[0]
    assert "no gen.continue_after_checkpoint() decision" not in messages[0]
    assert gen.terminal_event is not None
    assert gen.terminal_event["warning"] == "left-after-continue"
    assert runtime.receipt("b") == Receipt(True, "b", gen.id, Disposition.HELD, HoldReason.GENERATION_STOPPED)


async def test_a_continuation_run_then_left_without_a_decision_is_still_no_decision() -> None:
    """C16: a continuation that ran a boundary, then left with new input pending: no-checkpoint-decision."""
    runtime = LiveRuntime()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with runtime.open_generation() as gen:
            await runtime.submit_steering(steer("a"), gen.id)
            assert gen.continue_after_checkpoint()
            await gen.boundary(write_nothing)
            await runtime.submit_steering(steer("b"), gen.id)
    assert [w.category for w in caught] == [CheckpointDecisionWarning]
    assert gen.terminal_event is not None
    assert gen.terminal_event["warning"] == "no-checkpoint-decision"


# -- 7. the block left while a boundary is inside the write barrier (C15, C23) ------------------------


async def _leave_during_the_barrier(
    runtime: LiveRuntime, inner: Callable[[str, Sequence[Input]], Any]
) -> list[str]:
    """Stop and leave the block from another task while the boundary awaits the barrier; return the writes."""
    in_barrier, release = anyio.Event(), anyio.Event()
    written: list[str] = []
    raised: list[BaseException] = []

    async def barrier(generation_id: str, inputs: Sequence[Input]) -> None:
        await inner(generation_id, inputs)
        in_barrier.set()
        await release.wait()

    def writer(item: Input, metadata: Mapping[str, Any]) -> None:
        written.append(item.id)

    runtime.set_write_barrier(barrier)
    gen = runtime.open_generation()
    await gen.__aenter__()
    await runtime.submit_steering(steer("a"), gen.id)
    await runtime.submit_steering(steer("b"), gen.id)

    async def engine() -> None:
        try:
            await gen.boundary(writer)
        except GenerationStateError as error:
            raised.append(error)

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await in_barrier.wait()
        gen.stop()
        await gen.__aexit__(None, None, None)
        release.set()
    assert len(raised) == 1
    assert "never handed to the writer" in str(raised[0])
    held = (Disposition.HELD, HoldReason.GENERATION_STOPPED)
    for input_id in ("a", "b"):
        receipt = runtime.receipt(input_id)
        assert receipt is not None
        assert (receipt.disposition, receipt.reason) == held, input_id
    runtime._check()
    return written


async def test_an_input_in_the_write_barrier_when_the_block_is_left_is_held() -> None:
    """C15: the writer never saw it, so it is held (generation-stopped), not unknown; nothing written."""

    async def nothing(generation_id: str, inputs: Sequence[Input]) -> None:
        pass

    assert await _leave_during_the_barrier(LiveRuntime(), nothing) == []


async def test_with_a_journal_the_barriers_input_is_held_in_process_and_in_the_file(tmp_path: Path) -> None:
    """C15/C23: marked writing but never handed over: held in the runtime and, once committed, the file."""
    path = tmp_path / "receipts.db"
    async with ReceiptJournal(path) as journal:
        runtime = LiveRuntime()
        journal.attach(runtime)
        mark = runtime.write_barrier
        assert mark is not None
        assert await _leave_during_the_barrier(runtime, mark) == []
        for input_id in ("a", "b"):
            await journal.wait_durable(input_id)
            assert journal.durable_receipt(input_id) == runtime.receipt(input_id)
    in_file = {entry.input_id: (entry.disposition, entry.reason) for entry in read_receipts(path)}
    held = (Disposition.HELD, HoldReason.GENERATION_STOPPED)
    assert in_file == {"a": held, "b": held}
