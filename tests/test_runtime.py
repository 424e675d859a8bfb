"""The anyio shell: ``LiveRuntime`` and ``Generation`` on asyncio and trio (C1-C3, C6, C8, C12-C24).

Races are written as sequences: ``anyio.Event`` gates park a task at a known
await, and ``anyio.wait_all_tasks_blocked()`` lets every other task run until it
parks. No test sleeps or looks at the wall clock.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import anyio.lowlevel
import attrs
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from live_steering import (
    Disposition,
    Generation,
    GenerationClosedError,
    GenerationStateError,
    HoldReason,
    Input,
    LiveRuntime,
    Receipt,
    RuntimeClosedError,
    StopReason,
)
from strategies import hostile_ids, hostile_inputs

pytestmark = pytest.mark.anyio

Event = dict[str, Any]


class Context:
    """An in-memory model context: each write appends the input id and its metadata."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, dict[str, Any]]] = []

    def write(self, item: Input, metadata: Mapping[str, Any]) -> None:
        self.entries.append((item.id, dict(metadata)))

    async def awrite(self, item: Input, metadata: Mapping[str, Any]) -> None:
        await anyio.lowlevel.checkpoint()
        self.write(item, metadata)

    @property
    def ids(self) -> list[str]:
        return [input_id for input_id, _ in self.entries]


def steer(id_: str, text: str = "Use the corrected path") -> Input:
    return Input("steer", text, id=id_)


def types(runtime: LiveRuntime) -> list[str]:
    return [e["type"] for e in runtime.recent_events()]


def last(runtime: LiveRuntime, type_: str) -> Event:
    return [e for e in runtime.recent_events() if e["type"] == type_][-1]


def held(id_: str, gen: str, reason: str) -> Receipt:
    return Receipt(True, id_, gen, Disposition.HELD, reason)


# -- C1-C3: the capability ----------------------------------------------------------------------------


async def test_capability_has_the_pinned_shape() -> None:
    """C1: the capability is exactly version/mode/cancellable/submit; submit is the bound submit_steering."""
    runtime = LiveRuntime()
    capability = runtime.capability
    assert set(capability) == {"version", "mode", "cancellable", "submit"}
    assert capability["version"] == 1
    assert capability["mode"] == "request_boundary"
    assert capability["cancellable"] is False
    assert capability["submit"] == runtime.submit_steering
    assert capability["submit"].__self__ is runtime
    assert capability["submit"].__func__ is LiveRuntime.submit_steering


async def test_unavailable_runtime_refuses_every_submit_before_admission() -> None:
    """C1: without boundary delivery the mode is unavailable and every submit is refused, no identity used."""
    runtime = LiveRuntime(boundary_delivery=False)
    assert runtime.capability["mode"] == "unavailable"
    async with runtime.open_generation("g1") as gen:
        receipt = await runtime.capability["submit"](steer("a"), gen.id)
        assert receipt == Receipt(False, "a", "g1", None, "unavailable")
        assert gen.pending == 0
    assert runtime.statistics().identities == 0
    assert runtime.receipt("a") is None


async def test_closed_runtime_is_unavailable_and_refuses_closed() -> None:
    """C1/C7: after aclose the mode is unavailable and submits are refused ``closed``."""
    runtime = LiveRuntime()
    await runtime.aclose()
    assert runtime.closed
    assert runtime.capability["mode"] == "unavailable"
    receipt = await runtime.capability["submit"](steer("a"), "g1")
    assert receipt == Receipt(False, "a", "g1", None, "closed")
    assert runtime.statistics().identities == 0
    with pytest.raises(RuntimeClosedError):
        async with runtime.open_generation():
            pass
    await runtime.aclose()  # idempotent


async def test_generation_is_none_or_a_dict_with_the_running_id() -> None:
    """C2: ``runtime.generation`` is None while idle, else a dict whose id is the running generation."""
    runtime = LiveRuntime()
    assert runtime.generation is None
    async with runtime.open_generation() as gen:
        info = runtime.generation
        assert info is not None
        assert info["id"] == gen.id
        assert isinstance(info["id"], str)
    assert runtime.generation is None


async def test_host_submits_through_the_capability_anchored_to_the_captured_id() -> None:
    """C3: a host captures generation["id"], submits via capability["submit"] and gets a queued receipt."""
    runtime = LiveRuntime()
    async with runtime.open_generation() as gen:
        info = runtime.generation
        assert info is not None
        receipt = await runtime.capability["submit"](steer("fix-1"), info["id"])
        assert receipt == Receipt(True, "fix-1", gen.id, Disposition.QUEUED)
        assert receipt.to_dict() == {
            "accepted": True,
            "inputId": "fix-1",
            "generationId": gen.id,
            "disposition": "queued",
        }
        context = Context()
        await gen.boundary(context.write)
        assert context.ids == ["fix-1"]
    assert runtime.receipt("fix-1") == Receipt(True, "fix-1", gen.id, Disposition.APPLIED)


# -- C6: only type errors raise ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "anchor"),
    [
        pytest.param("Use the corrected path", "g1", id="str-not-input"),
        pytest.param(None, "g1", id="none-input"),
        pytest.param(steer("a"), None, id="none-generation"),
        pytest.param(steer("a"), 3, id="int-generation"),
    ],
)
async def test_submit_raises_type_error_only_for_wrong_argument_types(item: Any, anchor: Any) -> None:
    """C6: a non-Input or a non-str generation id raises TypeError and changes nothing."""
    runtime = LiveRuntime()
    async with runtime.open_generation("g1"):
        before = runtime.statistics()
        with pytest.raises(TypeError):
            await runtime.submit_steering(item, anchor)
        with pytest.raises(TypeError):
            runtime.submit_steering_nowait(item, anchor)
        assert runtime.statistics() == before
        runtime._check()


async def test_refusals_are_receipts_never_exceptions() -> None:
    """C6: invalid content, a stale anchor and an unsupported kind come back as refusal receipts."""
    runtime = LiveRuntime()
    async with runtime.open_generation("g1"):
        cases = [
            (Input("steer", "   ", id="blank"), "g1", "invalid-input"),
            (Input("prompt", "go", id="kind"), "g1", "unsupported-kind"),
            (steer("stale"), "g0", "stale-generation"),
        ]
        for item, anchor, reason in cases:
            receipt = await runtime.submit_steering(item, anchor)
            assert receipt == Receipt(False, item.id, anchor, None, reason)
    stats = runtime.statistics()
    assert (stats.refused, stats.identities) == (3, 0)
    assert types(runtime).count("steering.refused") == 3


# -- C8: admission is synchronous ---------------------------------------------------------------------


async def test_submit_admits_synchronously_and_wakes_the_parked_engine() -> None:
    """C8: the input is queued when submit returns, before any task ran; the engine wakes; no new task."""
    runtime = LiveRuntime()
    context = Context()
    woke: list[bool] = []
    release = anyio.Event()

    async def engine() -> None:
        async with runtime.open_generation("g1") as gen:
            woke.append(await gen.wait_for_input())
            await release.wait()
            await gen.boundary(context.write)
            assert not gen.continue_after_checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await anyio.wait_all_tasks_blocked()
        assert runtime.generation == {
            "id": "g1",
            "phase": "open",
            "pending": 0,
            "steering_mode": "all",
            "follow_up_mode": "all",
        }
        tasks_while_parked = len(anyio.get_running_tasks())

        receipt = runtime.submit_steering_nowait(steer("a"), "g1")
        # Nothing has run since the call: whatever is visible now was done inside submit.
        assert receipt == Receipt(True, "a", "g1", Disposition.QUEUED)
        assert runtime.statistics().pending == 1
        assert runtime.generation["pending"] == 1
        assert woke == []

        await anyio.wait_all_tasks_blocked()
        assert woke == [True]
        assert len(anyio.get_running_tasks()) == tasks_while_parked
        release.set()
    assert context.ids == ["a"]


async def test_async_submit_wakes_the_engine_without_a_manager_task() -> None:
    """C8: awaiting capability["submit"] admits and wakes the parked engine; the task count never grows."""
    runtime = LiveRuntime()
    woke: list[bool] = []

    async def engine() -> None:
        async with runtime.open_generation("g1") as gen:
            woke.append(await gen.wait_for_input())
            await gen.boundary(Context().write)

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await anyio.wait_all_tasks_blocked()
        tasks = len(anyio.get_running_tasks())
        receipt = await runtime.capability["submit"](steer("a"), "g1")
        assert receipt.disposition is Disposition.QUEUED
        assert len(anyio.get_running_tasks()) <= tasks
        await anyio.wait_all_tasks_blocked()
        assert woke == [True]
    assert runtime.receipt("a") == Receipt(True, "a", "g1", Disposition.APPLIED)


async def test_cancelling_submit_never_unadmits() -> None:
    """C8: admission is decided before submit's only await, so a cancelled submit still gets its receipt."""
    runtime = LiveRuntime()
    async with runtime.open_generation("g1") as gen:
        with anyio.CancelScope() as scope:
            scope.cancel()
            receipt = await runtime.submit_steering(steer("a"), "g1")
        assert receipt.disposition is Disposition.QUEUED
        assert gen.pending == 1
        await gen.boundary(Context().write)
    assert runtime.receipt("a") == Receipt(True, "a", "g1", Disposition.APPLIED)


# -- C12: concurrent submitters -------------------------------------------------------------------------


async def test_concurrent_submitters_of_one_new_id_get_one_admission() -> None:
    """C12: many submitters of the same new id released at once: one admission, identical receipts."""
    runtime = LiveRuntime()
    receipts: list[Receipt] = []
    go = anyio.Event()

    async def submitter() -> None:
        await go.wait()
        receipts.append(await runtime.capability["submit"](steer("same"), "g1"))

    async with runtime.open_generation("g1") as gen:
        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(submitter)
            await anyio.wait_all_tasks_blocked()
            go.set()
        assert len(receipts) == 50
        assert set(receipts) == {Receipt(True, "same", "g1", Disposition.QUEUED)}
        stats = runtime.statistics()
        assert (stats.accepted, stats.repeated, stats.identities, gen.pending) == (1, 49, 1, 1)
        assert types(runtime).count("steering.accepted") == 1
        assert types(runtime).count("steering.repeated") == 49
        runtime._check()
        gen.stop()  # "same" stays unwritten on purpose


async def test_submissions_are_decided_in_arrival_order() -> None:
    """C12/C13: inputs are admitted, then written, in the order their submit calls arrived."""
    runtime = LiveRuntime()
    arrival: list[str] = []
    context = Context()
    go = anyio.Event()

    async def submitter(id_: str) -> None:
        await go.wait()
        # No await between recording arrival and the call: submit decides before its first await.
        arrival.append(id_)
        await runtime.submit_steering(steer(id_), "g1")

    async with runtime.open_generation("g1") as gen:
        async with anyio.create_task_group() as tg:
            for n in range(50):
                tg.start_soon(submitter, f"s{n}")
            await anyio.wait_all_tasks_blocked()
            go.set()  # the backend picks the wake-up order (trio randomises it)
        await gen.boundary(context.write)
    assert sorted(arrival) == sorted(f"s{n}" for n in range(50))
    accepted = [e["input_id"] for e in runtime.recent_events() if e["type"] == "steering.accepted"]
    assert accepted == arrival
    assert context.ids == arrival


# -- C13-C15: boundaries ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_boundary_writes_in_order_with_metadata(kind: str) -> None:
    """C13/C14: sync and async writers get each input in order with its metadata; each is then applied."""
    runtime = LiveRuntime()
    context = Context()
    writer: Callable[[Input, Mapping[str, Any]], Awaitable[None] | None]
    writer = context.write if kind == "sync" else context.awrite
    async with runtime.open_generation("g1") as gen:
        for id_ in ("b", "a", "c"):
            await runtime.submit_steering(steer(id_), gen.id)
        applied = await gen.boundary(writer)
        assert [r.input_id for r in applied] == ["b", "a", "c"]
        assert {r.disposition for r in applied} == {Disposition.APPLIED}
        assert gen.pending == 0
        assert not gen.continue_after_checkpoint()
    assert context.ids == ["b", "a", "c"]
    for input_id, metadata in context.entries:
        assert metadata["input_id"] == input_id
        assert metadata["target_generation_id"] == "g1"
        assert metadata["delivery"] == "request_boundary"
    delivered = [e["type"] for e in runtime.recent_events() if e.get("input_id") == "a"]
    assert delivered == ["steering.accepted", "input.delivered", "steering.applied"]
    assert last(runtime, "generation.finished")["input_ids"] == ["b", "a", "c"]


async def test_input_is_applied_only_after_its_write_returns() -> None:
    """C14: while the writer runs the input is still queued; applied only once the write returned."""
    runtime = LiveRuntime()
    entered, release = anyio.Event(), anyio.Event()

    async def slow_writer(item: Input, metadata: Mapping[str, Any]) -> None:
        entered.set()
        await release.wait()

    async with runtime.open_generation("g1") as gen, anyio.create_task_group() as tg:
        runtime.submit_steering_nowait(steer("a"), "g1")
        tg.start_soon(gen.boundary, slow_writer)
        await entered.wait()
        await anyio.wait_all_tasks_blocked()
        assert runtime.receipt("a") == Receipt(True, "a", "g1", Disposition.QUEUED)
        assert "steering.applied" not in types(runtime)
        release.set()
    assert runtime.receipt("a") == Receipt(True, "a", "g1", Disposition.APPLIED)


async def test_raising_writer_makes_its_input_unknown_and_propagates() -> None:
    """C15/C17: a writer that raises leaves that input unknown, re-raises, and the rest are held failed."""
    runtime = LiveRuntime()

    def broken_writer(item: Input, metadata: Mapping[str, Any]) -> None:
        raise OSError("context store down")

    inside: list[object] = []

    async def engine() -> None:
        async with runtime.open_generation("g1") as gen:
            for id_ in ("a", "b", "c"):
                runtime.submit_steering_nowait(steer(id_), "g1")
            try:
                await gen.boundary(broken_writer)
            finally:
                inside.extend([gen.pending, runtime.receipt("b")])

    with pytest.raises(OSError, match="context store down"):
        await engine()
    # Inside the block, after the failed write: the inputs behind it were still queued, not unknown.
    assert inside == [2, Receipt(True, "b", "g1", Disposition.QUEUED)]
    assert runtime.receipt("a") == Receipt(True, "a", "g1", Disposition.UNKNOWN, "write-interrupted")
    assert runtime.receipt("b") == held("b", "g1", "generation-failed")
    assert runtime.receipt("c") == held("c", "g1", "generation-failed")
    terminal = last(runtime, "generation.failed")
    assert terminal["input_ids"] == []
    assert terminal["accepted_input_ids"] == ["a", "b", "c"]
    assert terminal["reason"] == "generation-failed"
    assert last(runtime, "steering.unknown")["input_id"] == "a"
    runtime._check()


async def test_boundary_can_run_again_after_a_raising_writer() -> None:
    """C15: after a failed write, the inputs behind it stay pending and the next boundary delivers them."""
    runtime = LiveRuntime()
    context = Context()
    calls = 0

    def flaky_writer(item: Input, metadata: Mapping[str, Any]) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("transient")
        context.write(item, metadata)

    async with runtime.open_generation("g1") as gen:
        for id_ in ("a", "b"):
            runtime.submit_steering_nowait(steer(id_), "g1")
        with pytest.raises(RuntimeError, match="transient"):
            await gen.boundary(flaky_writer)
        await gen.boundary(flaky_writer)
        assert not gen.continue_after_checkpoint()
    assert context.ids == ["b"]
    assert runtime.receipt("a") == Receipt(True, "a", "g1", Disposition.UNKNOWN, "write-interrupted")
    assert runtime.receipt("b") == Receipt(True, "b", "g1", Disposition.APPLIED)


async def test_cancelled_write_is_unknown_and_the_rest_are_held_cancelled() -> None:
    """C15/C17: cancelling mid-write makes that input unknown (not held); the others are held cancelled."""
    runtime = LiveRuntime()
    entered = anyio.Event()
    scope = anyio.CancelScope()

    async def stuck_writer(item: Input, metadata: Mapping[str, Any]) -> None:
        entered.set()
        await anyio.Event().wait()

    async def engine() -> None:
        with scope:
            async with runtime.open_generation("g1") as gen:
                await gen.wait_for_input()
                await gen.boundary(stuck_writer)

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await anyio.wait_all_tasks_blocked()
        runtime.submit_steering_nowait(steer("a"), "g1")
        runtime.submit_steering_nowait(steer("b"), "g1")
        await entered.wait()
        await anyio.wait_all_tasks_blocked()
        scope.cancel()
    assert scope.cancelled_caught
    assert runtime.receipt("a") == Receipt(True, "a", "g1", Disposition.UNKNOWN, "write-interrupted")
    assert runtime.receipt("b") == held("b", "g1", "generation-cancelled")
    held_ids = [e["input_id"] for e in runtime.recent_events() if e["type"] == "steering.held"]
    assert held_ids == ["b"]
    terminal = last(runtime, "generation.cancelled")
    assert terminal["accepted_input_ids"] == ["a", "b"]
    runtime._check()


async def test_cancellation_before_injection_holds_pending_and_never_writes() -> None:
    """C15/C17: input pending when the generation is cancelled is held generation-cancelled, never written."""
    runtime = LiveRuntime()
    context = Context()
    scope = anyio.CancelScope()

    async def engine() -> None:
        with scope:
            async with runtime.open_generation("g1") as gen:
                await anyio.Event().wait()  # a tool call that never finishes
                await gen.boundary(context.write)

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await anyio.wait_all_tasks_blocked()
        runtime.submit_steering_nowait(steer("a"), "g1")
        scope.cancel()
    assert context.ids == []
    assert runtime.receipt("a") == held("a", "g1", "generation-cancelled")
    assert runtime.generation is None
    assert "generation.cancelled" in types(runtime)


async def test_cancelled_boundary_before_the_writer_runs_writes_nothing() -> None:
    """C15: a boundary entered with a pending cancellation hands nothing to the writer; input is held."""
    runtime = LiveRuntime()
    context = Context()
    with anyio.CancelScope() as scope:
        async with runtime.open_generation("g1") as gen:
            runtime.submit_steering_nowait(steer("a"), "g1")
            scope.cancel()
            await gen.boundary(context.write)
    assert context.ids == []
    assert runtime.receipt("a") == held("a", "g1", "generation-cancelled")


async def test_running_tool_is_not_interrupted_and_input_waits_for_the_next_boundary() -> None:
    """C14: a steer arriving during a tool call does not interrupt it; it is written at the next boundary."""
    runtime = LiveRuntime()
    context = Context()
    tool_started, tool_release = anyio.Event(), anyio.Event()
    log: list[str] = []

    async def engine() -> None:
        async with runtime.open_generation("g1") as gen:
            await gen.boundary(context.write)
            log.append("tool-start")
            tool_started.set()
            await tool_release.wait()
            log.append("tool-done")
            await gen.boundary(context.write)
            log.append(f"boundary:{','.join(context.ids)}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await tool_started.wait()
        await anyio.wait_all_tasks_blocked()
        receipt = await runtime.capability["submit"](steer("a"), "g1")
        assert receipt.disposition is Disposition.QUEUED
        await anyio.wait_all_tasks_blocked()
        assert log == ["tool-start"]
        assert runtime.receipt("a") == Receipt(True, "a", "g1", Disposition.QUEUED)
        tool_release.set()
    assert log == ["tool-start", "tool-done", "boundary:a"]
    assert runtime.receipt("a") == Receipt(True, "a", "g1", Disposition.APPLIED)


async def test_repeat_through_the_capability_after_the_generation_ended() -> None:
    """C10: resubmitting an applied input after its generation ended answers applied and admits nothing."""
    runtime = LiveRuntime()
    async with runtime.open_generation("g1") as gen:
        await runtime.capability["submit"](steer("fix-1"), "g1")
        await gen.boundary(Context().write)
    async with runtime.open_generation("g2") as second:
        again = await runtime.capability["submit"](steer("fix-1"), "g1")
        assert again == Receipt(True, "fix-1", "g1", Disposition.APPLIED)
        assert second.pending == 0
        moved = await runtime.capability["submit"](steer("fix-1"), "g2")
        assert moved.reason == "identity-conflict"
    assert runtime.statistics().identities == 1
    assert types(runtime).count("steering.repeated") == 1


# -- C16: the once-more check ---------------------------------------------------------------------------


async def test_checkpoint_with_pending_continues_the_same_generation() -> None:
    """C16: input pending after the checkpoint continues the same generation: continued, no new start."""
    runtime = LiveRuntime()
    context = Context()
    async with runtime.open_generation("g1") as gen:
        await gen.boundary(context.write)
        runtime.submit_steering_nowait(steer("late"), "g1")
        assert gen.continue_after_checkpoint() is True
        assert runtime.generation is not None
        assert runtime.generation["id"] == "g1"
        await gen.boundary(context.write)
        assert gen.continue_after_checkpoint() is False
    assert types(runtime).count("generation.started") == 1
    assert types(runtime).count("generation.continued") == 1
    assert context.ids == ["late"]
    assert last(runtime, "generation.finished")["input_ids"] == ["late"]


async def test_submit_after_admission_closed_is_refused_finishing_before_terminal() -> None:
    """C16: once continue_after_checkpoint() is False, a submit racing the block exit is refused finishing."""
    runtime = LiveRuntime()
    closed, release = anyio.Event(), anyio.Event()
    receipts: list[Receipt] = []

    async def engine() -> None:
        async with runtime.open_generation("g1") as gen:
            assert gen.continue_after_checkpoint() is False
            closed.set()
            await release.wait()  # e.g. flushing a transcript before leaving the block

    async def racer() -> None:
        await closed.wait()
        receipts.append(await runtime.capability["submit"](steer("racer"), "g1"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        tg.start_soon(racer)
        await anyio.wait_all_tasks_blocked()
        assert receipts == [Receipt(False, "racer", "g1", None, "finishing")]
        assert runtime.generation is not None
        assert runtime.generation["phase"] == "closing"
        assert "generation.finished" not in types(runtime)
        release.set()
    assert runtime.receipt("racer") is None
    assert last(runtime, "generation.finished")["accepted_input_ids"] == []


async def test_boundary_after_admission_closed_is_generation_closed_error() -> None:
    """C16: a boundary after continue_after_checkpoint() returned False is a GenerationClosedError."""
    runtime = LiveRuntime()
    async with runtime.open_generation("g1") as gen:
        assert not gen.continue_after_checkpoint()
        assert not gen.accepting
        with pytest.raises(GenerationClosedError):
            await gen.boundary(Context().write)
        assert await gen.wait_for_input() is False
    assert "generation.finished" in types(runtime)


# -- C17: stop, budget, close ---------------------------------------------------------------------------


async def test_stop_from_another_task_wakes_the_waiting_engine() -> None:
    """C17: stop() while the engine waits makes the wait return False and holds what is pending."""
    runtime = LiveRuntime()
    waits: list[bool] = []
    gens: list[Generation] = []

    async def engine() -> None:
        async with runtime.open_generation("g1") as gen:
            gens.append(gen)
            waits.append(await gen.wait_for_input())

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await anyio.wait_all_tasks_blocked()
        # Admit and stop in one step: the engine cannot run in between.
        runtime.submit_steering_nowait(steer("a"), "g1")
        gens[0].stop()
        await anyio.wait_all_tasks_blocked()
    assert waits == [False]
    assert runtime.receipt("a") == held("a", "g1", "generation-stopped")
    terminal = last(runtime, "generation.stopped")
    assert terminal["reason"] == "generation-stopped"
    assert terminal["accepted_input_ids"] == ["a"]


async def test_stop_with_budget_exhausted_holds_with_that_reason() -> None:
    """C17: stop(BUDGET_EXHAUSTED) holds pending input budget-exhausted; the block exit says stopped."""
    runtime = LiveRuntime()
    async with runtime.open_generation("g1") as gen:
        runtime.submit_steering_nowait(steer("a"), "g1")
        gen.stop(StopReason.BUDGET_EXHAUSTED)
        assert runtime.receipt("a") == held("a", "g1", "budget-exhausted")
        refused = await runtime.submit_steering(steer("b"), "g1")
        assert refused.reason == "finishing"
    assert last(runtime, "generation.stopped")["reason"] == "budget-exhausted"


@pytest.mark.parametrize(
    "reason",
    [
        HoldReason.GENERATION_FAILED,
        HoldReason.RUNTIME_CLOSED,
        HoldReason.BUDGET_EXHAUSTED,
        "generation-stopped",
        "nope",
    ],
)
async def test_stop_rejects_reasons_it_does_not_own(reason: Any) -> None:
    """C17: stop() takes a StopReason only (a HoldReason or a str is a TypeError), changing nothing."""
    runtime = LiveRuntime()
    async with runtime.open_generation("g1") as gen:
        runtime.submit_steering_nowait(steer("a"), "g1")
        with pytest.raises(TypeError, match="stop reason"):
            gen.stop(reason)
        assert gen.accepting
        assert gen.pending == 1
        await gen.boundary(Context().write)


async def test_stopped_generation_then_a_new_one_in_the_same_runtime() -> None:
    """C17: stopping one generation does not close the runtime; the next generation admits and delivers."""
    runtime = LiveRuntime()
    context = Context()
    async with runtime.open_generation("g1") as first:
        runtime.submit_steering_nowait(steer("a"), "g1")
        first.stop()
    async with runtime.open_generation("g2") as second:
        assert runtime.capability["mode"] == "request_boundary"
        assert (await runtime.submit_steering(steer("b"), "g2")).accepted
        stale = await runtime.submit_steering(steer("c"), "g1")
        assert stale.reason == "stale-generation"
        await second.boundary(context.write)
    assert context.ids == ["b"]
    assert runtime.receipt("a") == held("a", "g1", "generation-stopped")
    assert runtime.statistics().generations_started == 2


async def test_aclose_during_a_generation_holds_pending_and_stops_it() -> None:
    """C17: aclose() holds pending input runtime-closed; leaving the block publishes generation.stopped."""
    runtime = LiveRuntime()
    release = anyio.Event()
    seen: list[object] = []

    async def engine() -> None:
        async with runtime.open_generation("g1") as gen:
            await release.wait()  # a tool call in flight while the host closes
            with pytest.raises(RuntimeClosedError):
                await gen.boundary(Context().write)
            seen.append(await gen.wait_for_input())

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await anyio.wait_all_tasks_blocked()
        runtime.submit_steering_nowait(steer("a"), "g1")
        await runtime.aclose()
        assert runtime.receipt("a") == held("a", "g1", "runtime-closed")
        assert (await runtime.submit_steering(steer("b"), "g1")).reason == "closed"
        assert "generation.stopped" not in types(runtime)
        release.set()
    assert seen == [False]
    terminal = last(runtime, "generation.stopped")
    assert terminal["reason"] == "runtime-closed"
    assert terminal["accepted_input_ids"] == ["a"]
    runtime._check()


async def test_aclose_wakes_an_engine_parked_in_wait_for_input() -> None:
    """C17: an engine waiting for input is woken by aclose() and told there is nothing more (False)."""
    runtime = LiveRuntime()
    waits: list[bool] = []

    async def engine() -> None:
        async with runtime.open_generation("g1") as gen:
            waits.append(await gen.wait_for_input())

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await anyio.wait_all_tasks_blocked()
        await runtime.aclose()
    assert waits == [False]
    assert last(runtime, "generation.stopped")["reason"] == "runtime-closed"


async def test_runtime_as_context_manager_closes_on_exit() -> None:
    """C1/C17: ``async with LiveRuntime()`` closes the runtime when the block is left."""
    async with LiveRuntime() as runtime:
        assert not runtime.closed
    assert runtime.closed
    assert runtime.capability["mode"] == "unavailable"


# -- engine misuse is a clear error ------------------------------------------------------------------------


async def test_second_generation_while_one_runs_is_refused() -> None:
    """Engine API: a second generation while one runs raises GenerationStateError; the first is kept."""
    runtime = LiveRuntime()
    async with runtime.open_generation("g1"):
        with pytest.raises(GenerationStateError, match="still running"):
            async with runtime.open_generation("g2"):
                pass
        assert runtime.generation is not None
        assert runtime.generation["id"] == "g1"
    async with runtime.open_generation("g2"):
        pass


async def test_two_concurrent_boundaries_are_refused() -> None:
    """Engine API: a second boundary while one is writing raises GenerationStateError; the first completes."""
    runtime = LiveRuntime()
    entered, release = anyio.Event(), anyio.Event()

    async def gated_writer(item: Input, metadata: Mapping[str, Any]) -> None:
        entered.set()
        await release.wait()

    async with runtime.open_generation("g1") as gen:
        runtime.submit_steering_nowait(steer("a"), "g1")
        async with anyio.create_task_group() as tg:
            tg.start_soon(gen.boundary, gated_writer)
            await entered.wait()
            with pytest.raises(GenerationStateError, match="already running"):
                await gen.boundary(Context().write)
            release.set()
    assert runtime.receipt("a") == Receipt(True, "a", "g1", Disposition.APPLIED)


async def test_reused_generation_id_is_a_value_error() -> None:
    """Engine API: a generation id used before in this runtime raises ValueError (anchors stay unique)."""
    runtime = LiveRuntime()
    async with runtime.open_generation("g1"):
        pass
    with pytest.raises(ValueError, match="already used"):
        runtime.open_generation("g1")
    with pytest.raises(ValueError, match="non-empty"):
        runtime.open_generation("")


async def test_generation_used_outside_its_block_is_an_error() -> None:
    """Engine API: a generation not entered, or entered twice, raises GenerationStateError."""
    runtime = LiveRuntime()
    gen = runtime.open_generation("g1")
    with pytest.raises(GenerationStateError):
        await gen.boundary(Context().write)
    with pytest.raises(GenerationStateError):
        gen.continue_after_checkpoint()
    async with gen:
        with pytest.raises(GenerationStateError, match="already entered"):
            await gen.__aenter__()
    with pytest.raises(GenerationClosedError):
        await gen.boundary(Context().write)
    assert gen.terminal_event is not None
    assert gen.terminal_event["generation_id"] == "g1"


# -- C21: events out ------------------------------------------------------------------------------------


async def _one_generation(runtime: LiveRuntime) -> None:
    async with runtime.open_generation("g1") as gen:
        runtime.submit_steering_nowait(steer("a"), "g1")
        runtime.submit_steering_nowait(steer("a"), "g1")
        runtime.submit_steering_nowait(steer("b", ""), "g1")
        await gen.boundary(Context().write)
        assert not gen.continue_after_checkpoint()


async def test_subscription_receives_events_in_order_and_ends_after_aclose() -> None:
    """C21: a subscriber iterates every later event in sequence order; iteration ends after aclose."""
    runtime = LiveRuntime()
    received: list[Event] = []

    async def consume() -> None:
        with runtime.subscribe() as events:
            async for event in events:
                received.append(event)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await anyio.wait_all_tasks_blocked()
        await _one_generation(runtime)
        await runtime.aclose()
    assert received == runtime.recent_events()
    assert [e["type"] for e in received] == [
        "generation.started",
        "steering.accepted",
        "steering.repeated",
        "steering.refused",
        "input.delivered",
        "steering.applied",
        "generation.finished",
    ]
    assert [e["sequence"] for e in received] == list(range(1, 8))
    for event in received:
        assert json.loads(json.dumps(event)) == event
        assert event["session_id"] == runtime.session_id


async def test_full_subscription_drops_and_counts() -> None:
    """C21: a subscriber that does not keep up loses the overflow, counted; the runtime never waits."""
    runtime = LiveRuntime()
    subscription = runtime.subscribe(max_buffer=2)
    await _one_generation(runtime)
    assert subscription.dropped == 5
    first, second = subscription.receive_nowait(), subscription.receive_nowait()
    assert first is not None
    assert second is not None
    assert (first["type"], second["type"]) == ("generation.started", "steering.accepted")
    assert subscription.receive_nowait() is None
    await runtime.aclose()
    assert [e async for e in subscription] == []


async def test_buffered_events_are_still_delivered_after_aclose() -> None:
    """C21: after aclose a subscriber drains what was buffered, then iteration stops."""
    runtime = LiveRuntime()
    subscription = runtime.subscribe()
    await _one_generation(runtime)
    await runtime.aclose()
    assert [e["sequence"] for e in [e async for e in subscription]] == list(range(1, 8))
    assert runtime.statistics().subscribers == 0


async def test_closed_subscription_stops_receiving() -> None:
    """C21: a closed subscription is removed from the fan-out and ends its iteration."""
    runtime = LiveRuntime()
    subscription = runtime.subscribe()
    assert runtime.statistics().subscribers == 1
    subscription.close()
    assert runtime.statistics().subscribers == 0
    await _one_generation(runtime)
    assert subscription.receive_nowait() is None
    assert [e async for e in subscription] == []


async def test_raising_listener_is_counted_and_the_runtime_carries_on() -> None:
    """C21: a listener that raises is counted; other listeners still see every event; receipts unaffected."""
    runtime = LiveRuntime()
    seen: list[str] = []

    def broken(event: Event) -> None:
        raise RuntimeError("listener bug")

    runtime.add_listener(broken)
    remove = runtime.add_listener(lambda event: seen.append(event["type"]))
    await _one_generation(runtime)
    assert runtime.receipt("a") == Receipt(True, "a", "g1", Disposition.APPLIED)
    assert runtime.statistics().listener_errors == 7
    assert seen == types(runtime)
    remove()
    remove()  # removing twice is harmless
    async with runtime.open_generation("g2"):
        pass
    assert len(seen) == 7


async def test_recent_events_are_bounded_and_drops_counted() -> None:
    """C21: the recent-event log keeps the newest events up to its size and counts what it dropped."""
    runtime = LiveRuntime(event_log_size=3)
    await _one_generation(runtime)
    recent = runtime.recent_events()
    assert [e["sequence"] for e in recent] == [5, 6, 7]
    stats = runtime.statistics()
    assert (stats.events_logged, stats.events_dropped, stats.events_emitted) == (3, 4, 7)


async def test_event_time_comes_from_the_configured_clock() -> None:
    """C21: ``time`` is the runtime's clock, so tests and replays can pin it."""
    runtime = LiveRuntime(clock=lambda: 1234.5, session_id="s-7")
    await _one_generation(runtime)
    assert {e["time"] for e in runtime.recent_events()} == {1234.5}
    assert {e["session_id"] for e in runtime.recent_events()} == {"s-7"}


async def test_statistics_is_a_frozen_snapshot() -> None:
    """C21: statistics() is an immutable snapshot whose counters match what happened."""
    runtime = LiveRuntime(identity_limit=10)
    subscription = runtime.subscribe()
    await _one_generation(runtime)
    stats = runtime.statistics()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        stats.accepted = 99  # type: ignore[misc]
    assert attrs.asdict(stats) == {
        "identities": 1,
        "identity_limit": 10,
        "pending": 0,
        "generations_started": 1,
        "accepted": 1,
        "repeated": 1,
        "refused": 1,
        "applied": 1,
        "held": 0,
        "unknown": 0,
        "follow_ups": 0,
        "events_emitted": 7,
        "closed": False,
        "events_logged": 7,
        "events_dropped": 0,
        "subscribers": 1,
        "listener_errors": 0,
    }
    subscription.close()


# -- C11, C24: limits and hostile input -------------------------------------------------------------------


async def test_ten_thousand_concurrent_submitters_never_break_the_runtime() -> None:
    """C11/C24: 10,000 submitters at once: 2,000 admitted, the rest refused capacity, state consistent."""
    runtime = LiveRuntime(event_log_size=16)
    go = anyio.Event()
    receipts: list[Receipt] = []

    async def submitter(n: int) -> None:
        await go.wait()
        receipts.append(await runtime.capability["submit"](steer(f"i{n}"), "g1"))

    async with runtime.open_generation("g1") as gen:
        async with anyio.create_task_group() as tg:
            for n in range(10_000):
                tg.start_soon(submitter, n)
            await anyio.wait_all_tasks_blocked()
            go.set()
        runtime._check()
        assert len(receipts) == 10_000
        accepted = [r for r in receipts if r.accepted]
        assert len(accepted) == 2_000
        assert {r.reason for r in receipts if not r.accepted} == {"capacity"}
        assert gen.pending == 2_000
        gen.stop()
    stats = runtime.statistics()
    assert (stats.identities, stats.held, stats.refused) == (2_000, 2_000, 8_000)


async def test_huge_text_is_refused_with_a_small_event() -> None:
    """C7/C24: ten megabytes of text is refused invalid-input; the event log does not store it."""
    runtime = LiveRuntime()
    async with runtime.open_generation("g1"):
        receipt = await runtime.submit_steering(Input("steer", "x" * 10_000_000, id="huge"), "g1")
    assert receipt.reason == "invalid-input"
    assert len(json.dumps(runtime.recent_events())) < 10_000


_anchors = st.one_of(st.just("g1"), hostile_ids, st.none(), st.integers(), st.binary(max_size=4))
_items = st.one_of(hostile_inputs, st.none(), st.text(max_size=5), st.integers())


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(max_examples=60, deadline=None)
@given(batch=st.lists(st.tuples(_items, _anchors), max_size=15))
def test_hostile_batches_get_receipts_or_type_errors(backend: str, batch: list[tuple[Any, Any]]) -> None:
    """C6/C24: any batch of malformed submissions gets receipts or TypeErrors; state stays consistent."""

    async def main() -> None:
        runtime = LiveRuntime(identity_limit=8)
        context = Context()
        async with runtime.open_generation("g1") as gen:
            for item, anchor in batch:
                if not isinstance(item, Input) or not isinstance(anchor, str):
                    with pytest.raises(TypeError):
                        runtime.submit_steering_nowait(item, anchor)
                    continue
                receipt = runtime.submit_steering_nowait(item, anchor)
                assert receipt.input_id == item.id
                assert receipt.generation_id == anchor
                assert receipt.accepted == (receipt.disposition is not None)
                if receipt.accepted:
                    assert anchor == "g1"
                    assert item.kind == "steer"
                    assert 1 <= len(item.id) <= 128
                    assert "\x00" not in item.text
                    assert not item.text.isspace()
                    (item.id + item.text).encode("utf-8")
                json.dumps(receipt.to_dict())
                runtime._check()
            await gen.boundary(context.write)
            assert not gen.continue_after_checkpoint()
        runtime._check()
        stats = runtime.statistics()
        assert stats.applied == stats.identities == len(context.entries)
        for event in runtime.recent_events():
            json.dumps(event)

    anyio.run(main, backend=backend)


# -- cancellation at every await of the admit and write paths ------------------------------------------------


class CancelAt:
    """Counts the awaits of a scripted loop and cancels ``scope`` when the ``target``-th one is reached."""

    def __init__(self, target: int, scope: anyio.CancelScope) -> None:
        self.target = target
        self.scope = scope
        self.count = 0

    async def step(self) -> None:
        self.count += 1
        if self.count == self.target:
            self.scope.cancel()
        await anyio.lowlevel.checkpoint()


_LOOP_AWAITS = 12
"""Awaits the scripted loop below reaches when nothing cancels it (asserted by the test)."""


@pytest.mark.parametrize("target", range(1, _LOOP_AWAITS + 2))
async def test_cancel_at_every_await_leaves_consistent_honest_receipts(target: int) -> None:
    """C15/C17/C20: cancelled at any await, inputs end final; applied ones are written, held ones not."""
    runtime = LiveRuntime()
    scope = anyio.CancelScope()
    steps = CancelAt(target, scope)
    context = Context()
    confirmed: list[str] = []

    async def writer(item: Input, metadata: Mapping[str, Any]) -> None:
        await steps.step()
        context.write(item, metadata)
        await steps.step()
        confirmed.append(item.id)

    with scope:
        async with runtime.open_generation("g1") as gen:
            runtime.submit_steering_nowait(steer("a"), "g1")
            runtime.submit_steering_nowait(steer("b"), "g1")
            await steps.step()  # a tool call
            await gen.boundary(writer)
            await steps.step()  # the provider call
            await runtime.submit_steering(steer("c"), "g1")
            await steps.step()  # the durable checkpoint
            while gen.continue_after_checkpoint():
                await gen.boundary(writer)
                await steps.step()  # the provider call
                await steps.step()  # the checkpoint
            await steps.step()  # flushing before leaving the block
    runtime._check()
    assert runtime.generation is None
    if target > _LOOP_AWAITS:
        assert steps.count == _LOOP_AWAITS
        assert not scope.cancelled_caught
        assert types(runtime)[-1] == "generation.finished"
    else:
        assert scope.cancelled_caught
        assert types(runtime)[-1] == "generation.cancelled"
    for input_id in ("a", "b", "c"):
        receipt = runtime.receipt(input_id)
        if receipt is None:
            assert input_id == "c"
            continue
        assert receipt.disposition is not Disposition.QUEUED
        if receipt.disposition is Disposition.APPLIED:
            assert input_id in confirmed
            assert input_id in context.ids
        elif receipt.disposition is Disposition.HELD:
            # C23's promise starts here: held never means "may be in the context".
            assert input_id not in context.ids
            assert receipt.reason == "generation-cancelled"
        else:
            assert receipt.reason == "write-interrupted"
            assert input_id not in confirmed


# -- regressions ------------------------------------------------------------------------------------------


async def test_generation_id_reuse_is_refused_even_for_handles_made_earlier() -> None:
    """C18: two handles made for one id cannot both run, so an old anchor never reaches a new generation."""
    runtime = LiveRuntime()
    first, second = runtime.open_generation("g1"), runtime.open_generation("g1")
    async with first:
        pass
    with pytest.raises(ValueError, match="already used"):
        async with second:
            pass
    assert runtime.generation is None
    assert runtime.statistics().generations_started == 1
    refused = runtime.submit_steering_nowait(steer("late"), "g1")
    assert refused.reason == "stale-generation"


async def test_subscription_made_after_aclose_ends_at_once() -> None:
    """C21: iteration ends after aclose, also for a subscription made after the runtime closed."""
    runtime = LiveRuntime()
    await runtime.aclose()
    received: list[Event] = []
    ended = anyio.Event()

    async def consume() -> None:
        with runtime.subscribe() as events:
            async for event in events:
                received.append(event)
        ended.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await anyio.wait_all_tasks_blocked()
        assert ended.is_set(), "a subscriber of a closed runtime waits forever"
    assert received == []
    assert runtime.statistics().subscribers == 0


async def test_subscriber_sees_what_a_running_generation_publishes_after_aclose() -> None:
    """C14/C21: a write in flight at aclose and the terminal event reach subscribers; then iteration ends."""
    runtime = LiveRuntime()
    entered, release = anyio.Event(), anyio.Event()
    received: list[str] = []
    subscription = runtime.subscribe()

    async def gated_writer(item: Input, metadata: Mapping[str, Any]) -> None:
        entered.set()
        await release.wait()

    async def consume() -> None:
        with subscription:
            async for event in subscription:
                received.append(event["type"])

    async def engine() -> None:
        async with runtime.open_generation("g1") as gen:
            await gen.wait_for_input()
            await gen.boundary(gated_writer)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        tg.start_soon(engine)
        await anyio.wait_all_tasks_blocked()
        runtime.submit_steering_nowait(steer("a"), "g1")
        await entered.wait()
        await runtime.aclose()
        release.set()
    assert runtime.receipt("a") == Receipt(True, "a", "g1", Disposition.APPLIED)
    assert received == types(runtime)
    assert received[-3:] == ["input.delivered", "steering.applied", "generation.stopped"]


async def _native_tool_group(backend: str) -> None:
    """Two tools that never finish, run in the backend's own task group (not anyio's)."""
    if backend == "trio":
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            nursery.start_soon(trio.sleep_forever)
    else:
        async with asyncio.TaskGroup() as group:
            group.create_task(asyncio.Event().wait())
            group.create_task(asyncio.Event().wait())


async def test_cancellation_grouped_by_a_native_nursery_is_still_cancellation(anyio_backend: str) -> None:
    """C17: cancelled while tools run in a native nursery (trio groups Cancelled): generation.cancelled."""
    runtime = LiveRuntime()
    scope = anyio.CancelScope()

    async def engine() -> None:
        with scope:
            async with runtime.open_generation("g1"):
                runtime.submit_steering_nowait(steer("a"), "g1")
                await _native_tool_group(anyio_backend)

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await anyio.wait_all_tasks_blocked()
        scope.cancel()
    assert scope.cancelled_caught
    assert types(runtime)[-1] == "generation.cancelled"
    assert runtime.receipt("a") == held("a", "g1", "generation-cancelled")


@pytest.mark.parametrize("how", ["stop", "budget", "aclose"])
async def test_boundary_refused_after_a_stop_still_ends_as_stopped(how: str) -> None:
    """C17: a loop that runs into a stop ends generation.stopped, not failed; a stop's signal is absorbed."""
    runtime = LiveRuntime()
    tool = anyio.Event()
    gens: list[Generation] = []
    reason = {"stop": "generation-stopped", "budget": "budget-exhausted", "aclose": "runtime-closed"}[how]

    async def unguarded_loop() -> None:
        async with runtime.open_generation("g1") as gen:
            gens.append(gen)
            while True:
                await gen.boundary(Context().write)
                await tool.wait()

    async def engine() -> None:
        if how == "aclose":
            with pytest.raises(RuntimeClosedError):
                await unguarded_loop()
        else:  # the stop signal ends the loop and the block absorbs it (C17)
            await unguarded_loop()

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await anyio.wait_all_tasks_blocked()
        runtime.submit_steering_nowait(steer("a"), "g1")
        if how == "aclose":
            await runtime.aclose()
        else:
            gens[0].stop(StopReason.BUDGET_EXHAUSTED if how == "budget" else StopReason.GENERATION_STOPPED)
        tool.set()
    terminal = last(runtime, "generation.stopped")
    assert terminal["reason"] == reason
    assert "generation.failed" not in types(runtime)
    assert runtime.receipt("a") == held("a", "g1", reason)


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"session_id": ""}, ValueError),
        ({"session_id": 7}, TypeError),
        ({"max_text_chars": 0}, ValueError),
        ({"identity_limit": 0}, ValueError),
        ({"event_log_size": 0}, ValueError),
        ({"boundary_delivery": "yes"}, TypeError),
    ],
)
async def test_bad_runtime_configuration_is_refused(config: dict[str, Any], error: type[Exception]) -> None:
    """C1/C11: a nonsensical configuration fails at construction instead of misbehaving later."""
    with pytest.raises(error):
        LiveRuntime(**config)


async def test_subscription_buffer_must_be_positive() -> None:
    """C21: a subscription needs room for at least one event."""
    runtime = LiveRuntime()
    with pytest.raises(ValueError, match="max_buffer"):
        runtime.subscribe(max_buffer=0)
    assert runtime.statistics().subscribers == 0


async def test_second_concurrent_wait_for_input_is_refused() -> None:
    """Engine API: only one task may wait for input; a second waiter is a GenerationStateError, not a hang."""
    runtime = LiveRuntime()
    woke: list[bool] = []

    async with runtime.open_generation("g1") as gen:
        async with anyio.create_task_group() as tg:

            async def waiter() -> None:
                woke.append(await gen.wait_for_input())

            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            with pytest.raises(GenerationStateError, match="already waiting"):
                await gen.wait_for_input()
            runtime.submit_steering_nowait(steer("a"), "g1")
        await gen.boundary(Context().write)
    assert woke == [True]


async def test_stop_after_the_checkpoint_closed_admission_keeps_it_finished() -> None:
    """C16/C19: once the after-checkpoint decision closed admission, stop() and aclose() change nothing."""
    runtime = LiveRuntime()
    seen: list[dict[str, Any]] = []
    runtime.add_listener(seen.append)
    async with runtime.open_generation("g1") as gen:
        assert not gen.continue_after_checkpoint()
        gen.stop()
        await runtime.aclose()
    assert seen[-1]["type"] == "generation.finished"
    assert "reason" not in seen[-1]


async def test_aclose_after_a_stop_keeps_the_stop_reason() -> None:
    """C17: a generation stopped for its budget keeps that reason when the runtime closes before it ends."""
    runtime = LiveRuntime()
    async with runtime.open_generation("g1") as gen:
        await runtime.submit_steering(Input("steer", "late", id="a"), "g1")
        gen.stop(StopReason.BUDGET_EXHAUSTED)
        await runtime.aclose()
    receipt = runtime.receipt("a")
    assert receipt is not None
    assert receipt.reason == "budget-exhausted"
    assert gen.terminal_event is not None
    assert gen.terminal_event["reason"] == "budget-exhausted"


@pytest.mark.parametrize(
    "bad",
    ["", "x" * 129, "gen\x00", "gen-\ud800"],
    ids=["empty", "too-long", "nul", "lone-surrogate"],
)
def test_engine_chosen_ids_follow_the_input_id_rules(bad: str) -> None:
    """C21/C24: generation and session ids ride in every event, so they meet C7's id rules or raise."""
    runtime = LiveRuntime()
    with pytest.raises(ValueError, match="generation_id"):
        runtime.open_generation(bad)
    with pytest.raises(ValueError, match="session_id"):
        LiveRuntime(session_id=bad)
    with pytest.raises(TypeError, match="generation_id"):
        runtime.open_generation(b"g1")  # type: ignore[arg-type]
    assert runtime.open_generation("x" * 128).id == "x" * 128  # the limit itself is fine


async def test_consumers_changed_during_a_fan_out_take_effect_from_the_next_event() -> None:
    """A listener that removes another listener and closes a subscription while it is called:
    both still get that event (the fan-out goes on over the consumers it started with), and
    nothing after it."""
    runtime = LiveRuntime()
    second: list[str] = []
    subscription = runtime.subscribe()
    removers: list[Callable[[], None]] = []

    def first(event: Event) -> None:
        if event["type"] == "steering.accepted":
            removers[0]()
            subscription.close()

    runtime.add_listener(first)
    removers.append(runtime.add_listener(lambda event: second.append(event["type"])))
    async with runtime.open_generation("g1") as gen:
        await runtime.submit_steering(steer("a"), "g1")
        gen.stop()
    assert second == ["generation.started", "steering.accepted"]
    received: list[str] = []
    while (event := subscription.receive_nowait()) is not None:
        received.append(event["type"])
    assert received == ["generation.started", "steering.accepted"]
