"""The engine-side API without sharp edges for loop authors (issue 11, items 1-7).

Each test here failed before the change it covers. Races are gates and
``anyio.wait_all_tasks_blocked``, never sleeps; every test runs on asyncio and trio.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from live_steering import (
    CheckpointDecisionWarning,
    Disposition,
    Generation,
    GenerationStateError,
    GenerationStopped,
    HoldReason,
    Input,
    InvariantError,
    LiveRuntime,
    LiveSteeringError,
    StopReason,
)
from live_steering._core import AFTER_CHECKPOINT, CheckpointDecision, SteeringCore
from live_steering.loop import AgentLoop, Context, LoopOutcome, LoopResult
from live_steering.testing import EventRecorder, ScriptedProvider, ScriptedTools

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def steer(id_: str) -> Input:
    return Input("steer", "Use the corrected path", id=id_)


class Notes:
    """The loop's context: what the writer wrote."""

    def __init__(self) -> None:
        self.steers: list[str] = []

    def add_steer(self, item: Input, metadata: Mapping[str, Any]) -> None:
        self.steers.append(item.id)


# -- 1. the stop signal ---------------------------------------------------------------------


@pytest.mark.parametrize("reason", list(StopReason))
async def test_the_contract_sketch_loop_ends_cleanly_on_a_host_stop_during_a_tool(reason: StopReason) -> None:
    """C17: the sketch loop, stopped from another task while a tool runs, ends without an exception."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    notes = Notes()
    tool_running, tool_done = anyio.Event(), anyio.Event()
    handle: list[Generation] = []
    ended: list[str] = []

    async def engine() -> None:
        async with runtime.open_generation("g1") as gen:  # the loop of CONTRACT.md, as written
            handle.append(gen)
            while True:
                await gen.boundary(notes.add_steer)
                tool_running.set()
                await tool_done.wait()  # run_tools(): a running tool is never interrupted
                await anyio.lowlevel.checkpoint()  # save_checkpoint()
                if not gen.continue_after_checkpoint():
                    break
        ended.append("left the block")

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await tool_running.wait()
        assert runtime.submit_steering_nowait(steer("a"), "g1").accepted
        handle[0].stop(reason)  # the host's stop, while the tool runs
        tool_done.set()
    assert ended == ["left the block"]
    assert recorder.count("generation.stopped") == 1
    assert recorder.types()[-1] == "generation.stopped"
    assert recorder.of_type("generation.stopped")[0]["reason"] == reason.value
    assert "generation.failed" not in recorder.types()
    receipt = runtime.receipt("a")
    assert receipt is not None
    assert (receipt.disposition, receipt.reason) == (Disposition.HELD, reason.value)
    assert notes.steers == []
    runtime._check()


async def test_the_stop_signal_is_its_own_exception_and_names_the_generation() -> None:
    """GenerationStopped is a LiveSteeringError but not a GenerationStateError (not a misuse)."""
    runtime = LiveRuntime()
    caught: list[GenerationStopped] = []
    async with runtime.open_generation("g1") as gen:
        gen.stop(StopReason.BUDGET_EXHAUSTED)
        try:
            await gen.boundary(Notes().add_steer)
        except GenerationStopped as raised:
            caught.append(raised)
            raise
    (signal,) = caught
    assert isinstance(signal, LiveSteeringError)
    assert not isinstance(signal, GenerationStateError)
    assert (signal.generation_id, signal.reason) == ("g1", "budget-exhausted")
    assert gen.terminal_event is not None
    assert gen.terminal_event["reason"] == "budget-exhausted"
    assert gen.end_reason is HoldReason.BUDGET_EXHAUSTED


async def test_a_stop_signal_raised_in_a_task_group_inside_the_block_is_absorbed() -> None:
    """A loop that runs its boundary in a child task still ends cleanly (a group of only the signal)."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    async with runtime.open_generation("g1") as gen:
        gen.stop()
        async with anyio.create_task_group() as tg:
            tg.start_soon(gen.boundary, Notes().add_steer)
    assert recorder.types()[-1] == "generation.stopped"


async def test_another_generations_stop_signal_is_not_absorbed() -> None:
    """Only a generation's own stop signal ends its block cleanly; another runtime's propagates (failed)."""
    outer, inner = LiveRuntime(), LiveRuntime()
    async with inner.open_generation("same-id") as stopped:
        stopped.stop()
        with pytest.raises(GenerationStopped):
            async with outer.open_generation("same-id"):
                await stopped.boundary(Notes().add_steer)
    assert [e["type"] for e in outer.recent_events()][-1] == "generation.failed"
    assert [e["type"] for e in inner.recent_events()][-1] == "generation.stopped"


async def test_a_boundary_after_the_decision_to_finish_is_still_a_misuse() -> None:
    """Only a stop raises the stop signal: a boundary after deciding to finish is a GenerationStateError."""
    runtime = LiveRuntime()
    async with runtime.open_generation("g1") as gen:
        assert not gen.continue_after_checkpoint()
        with pytest.raises(GenerationStateError):
            await gen.boundary(Notes().add_steer)
    assert [e["type"] for e in runtime.recent_events()][-1] == "generation.finished"

    async def misuse() -> None:
        async with runtime.open_generation("g2") as gen:
            assert not gen.continue_after_checkpoint()
            await gen.boundary(Notes().add_steer)

    with pytest.raises(GenerationStateError):  # leaving with it fails the generation
        await misuse()
    assert [e["type"] for e in runtime.recent_events()][-1] == "generation.failed"


# -- 2. the budget before continuation ------------------------------------------------------


async def test_budget_is_decided_before_a_continuation_is_announced() -> None:
    """C17: call_budget=1, a steer during the checkpoint: held budget-exhausted, no generation.continued."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    saving, release = anyio.Event(), anyio.Event()

    async def checkpoint(context: Context) -> None:
        saving.set()
        await release.wait()

    provider = ScriptedProvider(["done"])
    loop = AgentLoop(runtime, provider, ScriptedTools({}), call_budget=1, checkpoint=checkpoint)
    results: list[LoopResult] = []

    async def run() -> None:
        results.append(await loop.run("bump the version", generation_id="g1"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await saving.wait()
        assert (await runtime.submit_steering(steer("late"), "g1")).accepted
        release.set()
    assert "generation.continued" not in recorder.types()
    assert recorder.types()[-2:] == ["steering.held", "generation.stopped"]
    assert recorder.of_type("steering.held")[0]["reason"] == "budget-exhausted"
    assert recorder.of_type("generation.stopped")[0]["reason"] == "budget-exhausted"
    assert results[0].outcome is LoopOutcome.BUDGET_EXHAUSTED
    assert results[0].held_input_ids == ("late",)


async def test_continue_after_checkpoint_takes_whether_a_call_may_be_made() -> None:
    """may_call=True with input pending continues; False holds it budget-exhausted and returns False."""
    runtime = LiveRuntime()
    async with runtime.open_generation("g1") as gen:
        runtime.submit_steering_nowait(steer("a"), "g1")
        assert gen.continue_after_checkpoint(may_call=True)
        await gen.boundary(Notes().add_steer)
        runtime.submit_steering_nowait(steer("b"), "g1")
        with pytest.raises(TypeError, match="may_call"):
            gen.continue_after_checkpoint(may_call=0)  # type: ignore[arg-type]
        assert gen.pending == 1  # the refused call changed nothing
        assert not gen.continue_after_checkpoint(may_call=False)
        assert not gen.accepting
    assert gen.end_reason is HoldReason.BUDGET_EXHAUSTED
    receipt = runtime.receipt("b")
    assert receipt is not None
    assert receipt.reason == "budget-exhausted"


def test_after_checkpoint_table_continues_only_with_input_and_a_call_left() -> None:
    """AFTER_CHECKPOINT is total and continues only when input is pending and a model call may be made."""
    assert set(AFTER_CHECKPOINT) == {(p, m) for p in (True, False) for m in (True, False)}
    assert [key for key, d in AFTER_CHECKPOINT.items() if d is CheckpointDecision.CONTINUE] == [(True, True)]
    assert AFTER_CHECKPOINT[True, False] is CheckpointDecision.STOP_BUDGET
    events: list[dict[str, Any]] = []
    core = SteeringCore(session_id="s", sink=events.append, clock=lambda: 0.0)
    gen = core.start_generation("g")
    assert not core.after_checkpoint(gen, may_call=False)  # nothing pending: it finishes
    assert events[-1]["type"] == "generation.started"
    core._check()


# -- 3. the writer is checked before any input is taken -------------------------------------


def _one_argument(item: Input) -> None:
    raise AssertionError("never called")


def _three_arguments(item: Input, metadata: Mapping[str, Any], extra: object) -> None:
    raise AssertionError("never called")


def _keyword_only(item: Input, metadata: Mapping[str, Any], *, extra: object) -> None:
    raise AssertionError("never called")


@pytest.mark.parametrize("writer", [None, "write", _one_argument, _three_arguments, _keyword_only])
async def test_a_writer_that_cannot_be_called_is_refused_before_any_input_is_taken(writer: Any) -> None:
    """C15: TypeError, the input stays queued (not unknown), and the generation goes on."""
    runtime = LiveRuntime()
    notes = Notes()
    async with runtime.open_generation("g1") as gen:
        runtime.submit_steering_nowait(steer("a"), "g1")
        with pytest.raises(TypeError, match=r"writer\(input, metadata\)"):
            await gen.boundary(writer)
        receipt = runtime.receipt("a")
        assert receipt is not None
        assert receipt.disposition is Disposition.QUEUED
        assert gen.pending == 1
        assert not [e for e in runtime.recent_events() if e["type"] == "steering.unknown"]
        applied = await gen.boundary(notes.add_steer)
        assert [r.input_id for r in applied] == ["a"]
        assert gen.continue_after_checkpoint() is False
    assert notes.steers == ["a"]


async def test_writers_of_every_callable_shape_are_accepted() -> None:
    """Bound methods, *args functions, defaults, callable objects and async functions all write."""
    written: list[str] = []

    class Writer:
        def __call__(self, item: Input, metadata: Mapping[str, Any], extra: int = 0) -> None:
            written.append(item.id)

    async def awrite(item: Input, metadata: Mapping[str, Any]) -> None:
        written.append(item.id)

    def star(*args: Any) -> None:
        written.append(args[0].id)

    notes = Notes()
    runtime = LiveRuntime()
    async with runtime.open_generation("g1") as gen:
        writers: list[Any] = [notes.add_steer, notes.add_steer, Writer(), awrite, star]
        for n, writer in enumerate(writers):
            runtime.submit_steering_nowait(steer(f"i{n}"), "g1")
            assert len(await gen.boundary(writer)) == 1
        assert not gen.continue_after_checkpoint()
    assert notes.steers == ["i0", "i1"]
    assert written == ["i2", "i3", "i4"]


async def test_a_closure_made_for_each_boundary_is_checked_once_by_its_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A writer made anew per boundary (pydantic-ai's per-run closure) reads its signature once."""
    import inspect

    reads: list[object] = []
    real_signature = inspect.signature

    def counting_signature(obj: Any, *args: Any, **kwargs: Any) -> inspect.Signature:
        reads.append(obj)
        return real_signature(obj, *args, **kwargs)

    monkeypatch.setattr(inspect, "signature", counting_signature)
    written: list[str] = []

    def writer_for(n: int) -> Any:
        def write(item: Input, metadata: Mapping[str, Any]) -> None:
            written.append(f"{n}:{item.id}")

        return write

    runtime = LiveRuntime()
    async with runtime.open_generation("g1") as gen:
        for n in range(3):
            runtime.submit_steering_nowait(steer(f"i{n}"), "g1")
            assert len(await gen.boundary(writer_for(n))) == 1
        assert not gen.continue_after_checkpoint()
    assert written == ["0:i0", "1:i1", "2:i2"]
    assert len(reads) <= 1  # none if another test already checked this code


async def test_a_closure_of_the_wrong_shape_is_refused_at_every_boundary() -> None:
    """Keying the check by code never lets a bad writer through; a default changes the shape."""

    def bad_writer() -> Any:
        def write(item: Input) -> None:
            raise AssertionError("never called")

        return write

    def writer_with_default(default: Any) -> Any:
        def write(item: Input, metadata: Mapping[str, Any] = default) -> None:
            return None

        return write

    runtime = LiveRuntime()
    async with runtime.open_generation("g1") as gen:
        runtime.submit_steering_nowait(steer("a"), "g1")
        for _ in range(2):
            with pytest.raises(TypeError, match=r"writer\(input, metadata\)"):
                await gen.boundary(bad_writer())
        assert gen.pending == 1
        assert len(await gen.boundary(writer_with_default(None))) == 1
        assert not gen.continue_after_checkpoint()


# -- 4. the block left while another task's boundary writes --------------------------------


@pytest.mark.parametrize("writer_raises", [False, True])
async def test_leaving_the_block_under_a_write_is_a_clear_misuse(writer_raises: bool) -> None:
    """The input ends unknown (C15) and the boundary raises GenerationStateError, not InvariantError."""
    runtime = LiveRuntime()
    writing, release = anyio.Event(), anyio.Event()
    opened: list[Generation] = []
    errors: list[BaseException] = []

    async def slow_writer(item: Input, metadata: Mapping[str, Any]) -> None:
        writing.set()
        await release.wait()
        if writer_raises:
            raise OSError("the context store went away")

    async def owner(leave: anyio.Event) -> None:
        async with runtime.open_generation("g1") as gen:
            opened.append(gen)
            await leave.wait()

    async def boundary_task() -> None:
        try:
            await opened[0].boundary(slow_writer)
        except BaseException as exc:
            errors.append(exc)

    leave = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(owner, leave)
        await anyio.wait_all_tasks_blocked()
        runtime.submit_steering_nowait(steer("a"), "g1")
        tg.start_soon(boundary_task)
        await writing.wait()
        leave.set()  # the block is left while "a" is being written
        await anyio.wait_all_tasks_blocked()
        release.set()
    (error,) = errors
    assert isinstance(error, GenerationStateError)
    assert not isinstance(error, InvariantError)
    assert "was left while a boundary was writing" in str(error)
    receipt = runtime.receipt("a")
    assert receipt is not None
    assert (receipt.disposition, receipt.reason) == (Disposition.UNKNOWN, "write-interrupted")
    runtime._check()


# -- 5. the forgotten after-checkpoint decision ---------------------------------------------


async def test_leaving_with_input_pending_and_no_decision_warns_and_says_so_on_the_event() -> None:
    """The pending input is held generation-stopped; a CheckpointDecisionWarning, and the event says so."""
    runtime = LiveRuntime()
    with pytest.warns(CheckpointDecisionWarning, match="continue_after_checkpoint"):
        async with runtime.open_generation("g1") as gen:
            runtime.submit_steering_nowait(steer("a"), "g1")
    terminal = runtime.recent_events()[-1]
    assert terminal["type"] == "generation.stopped"
    assert terminal["reason"] == "generation-stopped"
    assert terminal["warning"] == "no-checkpoint-decision"
    envelope = ("type", "sequence", "session_id", "time")
    assert gen.terminal_event == {k: v for k, v in terminal.items() if k not in envelope}
    receipt = runtime.receipt("a")
    assert receipt is not None
    assert receipt.disposition is Disposition.HELD
    runtime._check()


@pytest.mark.parametrize("how", ["nothing-pending", "stopped", "decided", "failed"])
async def test_no_warning_when_the_end_was_decided(how: str) -> None:
    """No warning and no field: nothing pending, a stop, the decision made, or an exception."""
    runtime = LiveRuntime()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointDecisionWarning)
        try:
            async with runtime.open_generation("g1") as gen:
                if how != "nothing-pending":
                    runtime.submit_steering_nowait(steer("a"), "g1")
                if how == "stopped":
                    gen.stop()
                elif how == "decided":
                    assert gen.continue_after_checkpoint()
                    await gen.boundary(Notes().add_steer)
                    assert not gen.continue_after_checkpoint()
                elif how == "failed":
                    raise OSError("boom")
        except OSError:
            assert how == "failed"
    assert "warning" not in runtime.recent_events()[-1]


# -- 6. stops take their own enum -----------------------------------------------------------


async def test_stop_reasons_are_a_stop_reason_enum_and_the_loop_outcome_follows_the_enum() -> None:
    """StopReason's strings are the hold reasons'; AgentLoop's outcome is a LoopOutcome member."""
    assert {r.value for r in StopReason} == {"generation-stopped", "budget-exhausted"}
    assert all(r.hold_reason.value == r.value for r in StopReason)
    runtime = LiveRuntime()
    result = await AgentLoop(runtime, ScriptedProvider(["done"]), ScriptedTools({})).run("hi")
    assert result.outcome is LoopOutcome.FINISHED
    assert str(result.outcome) == "finished"


# -- 7. the boundary's own cancellation check ----------------------------------------------


async def test_a_boundary_in_a_cancelled_scope_takes_no_input() -> None:
    """The boundary's cancellation check (the parker's, without anyio's lookup) still fires first."""
    runtime = LiveRuntime()
    notes = Notes()
    async with runtime.open_generation("g1") as gen:
        runtime.submit_steering_nowait(steer("a"), "g1")
        with anyio.CancelScope() as scope:
            scope.cancel()
            await gen.boundary(notes.add_steer)
        assert scope.cancelled_caught
        assert gen.pending == 1
        gen.stop()
    assert notes.steers == []


async def test_a_boundary_in_a_shielded_scope_inside_a_cancelled_one_writes() -> None:
    """A shield ends the cancellation check's walk, as anyio's own check does: the input is applied."""
    runtime = LiveRuntime()
    notes = Notes()
    async with runtime.open_generation("g1") as gen:
        with anyio.CancelScope() as outer:
            outer.cancel()
            with anyio.CancelScope(shield=True):
                runtime.submit_steering_nowait(steer("a"), "g1")
                assert len(await gen.boundary(notes.add_steer)) == 1
                runtime.submit_steering_nowait(steer("b"), "g1")
            await gen.boundary(notes.add_steer)  # outside the shield: cancelled before taking "b"
        assert outer.cancelled_caught
        assert gen.pending == 1
        gen.stop()
    assert notes.steers == ["a"]


async def test_the_cancellation_check_follows_the_task_that_runs_the_boundary() -> None:
    """A boundary run by another task than the last one checks that task's scopes, not a cached one."""
    runtime = LiveRuntime()
    notes = Notes()
    async with runtime.open_generation("g1") as gen:
        runtime.submit_steering_nowait(steer("a"), "g1")
        await gen.boundary(notes.add_steer)  # this task's scopes are read (and kept)
        runtime.submit_steering_nowait(steer("b"), "g1")

        async def cancelled_boundary() -> None:
            with anyio.CancelScope() as scope:
                scope.cancel()
                await gen.boundary(notes.add_steer)
            assert scope.cancelled_caught

        async with anyio.create_task_group() as tg:
            tg.start_soon(cancelled_boundary)
        assert gen.pending == 1
        await gen.boundary(notes.add_steer)  # and back in the first task: not cancelled
        assert not gen.continue_after_checkpoint()
    assert notes.steers == ["a", "b"]
