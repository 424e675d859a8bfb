"""The reference loop (``live_steering.loop``) driven race by race with the testing fixtures.

Every race is a sequence of gates (``live_steering.testing``), never a sleep; every test
runs on asyncio and trio.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from live_steering import Disposition, Input, LiveRuntime, Receipt
from live_steering.loop import (
    SKIPPED_TOOL_RESULT,
    STOPPED_TOOL_RESULT,
    TOOL_CANCELLED_RESULT,
    TOOL_FAILED_RESULT,
    AgentLoop,
    Context,
    FunctionTools,
    LoopOutcome,
    LoopResult,
    Reply,
    ToolCall,
)
from live_steering.testing import EventRecorder, RecordingContext, ScriptedProvider, ScriptedTools

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


TOOLS = {"read": "file contents", "test": "3 passed"}


def tool_reply(text: str, name: str = "read") -> Reply:
    return Reply(text, (ToolCall(f"call-{name}", name, {}),))


def anchor(runtime: LiveRuntime) -> str:
    """What a host does: read the running generation's id."""
    generation = runtime.generation
    assert generation is not None
    return str(generation["id"])


async def steer(runtime: LiveRuntime, text: str, input_id: str) -> Receipt:
    return await runtime.submit_steering(Input("steer", text, id=input_id), anchor(runtime))


async def run_into(
    results: list[LoopResult], loop: AgentLoop, prompt: str, generation_id: str | None = None
) -> None:
    results.append(await loop.run(prompt, generation_id=generation_id))


def disposition(runtime: LiveRuntime, input_id: str) -> tuple[Disposition | None, str | None]:
    receipt = runtime.receipt(input_id)
    assert receipt is not None
    return receipt.disposition, receipt.reason


def texts(entries: Any, role: str) -> list[str]:
    return [e.text for e in entries if e.role == role]


class CheckpointGate:
    """A durable-checkpoint hook the test can hold (the loop is "saving" while it is held)."""

    def __init__(self) -> None:
        self.saving = anyio.Event()
        self.release = anyio.Event()
        self.calls = 0

    async def __call__(self, context: Context) -> None:
        self.calls += 1
        self.saving.set()
        await self.release.wait()


async def test_steers_during_model_call_reach_next_request_once_in_order() -> None:
    """C13/C14: steers sent while model call 0 is in flight are in request 1 once each, in order."""
    runtime = LiveRuntime()
    provider = ScriptedProvider([tool_reply("reading"), "done"])
    loop = AgentLoop(runtime, provider, ScriptedTools(TOOLS))
    in_flight = provider.gate(0)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, results, loop, "fix it")
        await in_flight.wait_reached()
        first = await steer(runtime, "first", "s1")
        second = await steer(runtime, "second", "s2")
        assert (first.disposition, second.disposition) == (Disposition.QUEUED, Disposition.QUEUED)
        in_flight.release()
    assert provider.calls == 2
    assert texts(provider.requests[0], "steer") == []
    assert texts(provider.requests[1], "steer") == ["first", "second"]
    # The boundary sits after the tool round: the steers follow the tool result.
    assert [e.role for e in provider.requests[1]] == ["user", "assistant", "tool", "steer", "steer"]
    assert results[0].applied_input_ids == ("s1", "s2")
    assert disposition(runtime, "s1") == (Disposition.APPLIED, None)
    runtime._check()


async def test_burst_during_tool_call_reaches_next_request_once_in_order() -> None:
    """C13/C14: a burst sent while a tool runs lands in the next request, each once, in admission order."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    provider = ScriptedProvider([tool_reply("testing", "test"), "green"])
    tools = ScriptedTools(TOOLS)
    running = tools.gate("test")
    loop = AgentLoop(runtime, provider, tools)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, [], loop, "make it pass")
        await running.wait_reached()
        for n in range(1, 6):
            await steer(runtime, f"note {n}", f"b{n}")
        running.release()
    assert texts(provider.requests[1], "steer") == [f"note {n}" for n in range(1, 6)]
    applied = [e["input_id"] for e in recorder.of_type("steering.applied")]
    assert applied == [f"b{n}" for n in range(1, 6)]
    for n in range(1, 6):
        assert recorder.dispositions(f"b{n}") == ["queued", "applied"]


async def test_running_tool_is_not_interrupted_by_a_steer() -> None:
    """C14: a steer during a tool call waits for the next boundary; the tool finishes and its result stays."""
    runtime = LiveRuntime()
    provider = ScriptedProvider([tool_reply("testing", "test"), "green"])
    tools = ScriptedTools(TOOLS)
    running = tools.gate("test")
    loop = AgentLoop(runtime, provider, tools)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, [], loop, "make it pass")
        await running.wait_reached()
        await steer(runtime, "check lint too", "s1")
        await anyio.wait_all_tasks_blocked()
        # Still parked in the tool: no new request, nothing written yet.
        assert provider.calls == 1
        assert texts(loop.context.entries, "steer") == []
        assert disposition(runtime, "s1") == (Disposition.QUEUED, None)
        running.release()
    assert len(tools.calls) == 1
    roles = [e.role for e in provider.requests[1]]
    assert roles.index("tool") < roles.index("steer")
    assert texts(provider.requests[1], "tool") == ["3 passed"]


async def test_late_steer_during_final_checkpoint_continues_same_generation() -> None:
    """C16: a steer during the final checkpoint continues the same generation; the prompt is not replayed."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    checkpoint = CheckpointGate()
    provider = ScriptedProvider(["done", "done with changelog"])
    loop = AgentLoop(runtime, provider, ScriptedTools(TOOLS), checkpoint=checkpoint)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, results, loop, "bump the version", "g-late")
        await checkpoint.saving.wait()
        receipt = await steer(runtime, "update the changelog", "late")
        assert receipt.disposition is Disposition.QUEUED
        checkpoint.release.set()
    assert recorder.count("generation.started") == 1
    assert recorder.count("generation.continued") == 1
    recorder.assert_order(
        "generation.started",
        "steering.accepted",
        "generation.continued",
        "input.delivered",
        "steering.applied",
        "generation.finished",
    )
    assert {e["generation_id"] for e in recorder.of_type("generation.continued")} == {"g-late"}
    assert texts(loop.context.entries, "user") == ["bump the version"]
    assert texts(provider.requests[1], "user") == ["bump the version"]
    assert texts(provider.requests[1], "steer") == ["update the changelog"]
    assert results[0].generation_id == "g-late"
    assert results[0].outcome == "finished"
    assert results[0].provider_calls == 2
    assert checkpoint.calls == 2


async def test_stop_during_checkpoint_holds_the_late_steer() -> None:
    """C17: a stop while the checkpoint runs holds the steer that arrived meanwhile; no continuation."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    checkpoint = CheckpointGate()
    provider = ScriptedProvider(["done"])
    loop = AgentLoop(runtime, provider, ScriptedTools(TOOLS), checkpoint=checkpoint)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, results, loop, "bump the version")
        await checkpoint.saving.wait()
        await steer(runtime, "update the changelog", "late")
        loop.stop()
        assert disposition(runtime, "late") == (Disposition.HELD, "generation-stopped")
        checkpoint.release.set()
    assert recorder.count("generation.continued") == 0
    assert results[0].outcome == "stopped"
    assert results[0].held_input_ids == ("late",)
    assert provider.calls == 1
    assert texts(loop.context.entries, "steer") == []
    terminal = recorder.of_type("generation.stopped")
    assert [e["reason"] for e in terminal] == ["generation-stopped"]


async def test_cancellation_before_injection_holds_and_never_writes() -> None:
    """C17/C18: cancelling the loop with a steer pending holds it; its text is never in the context."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    provider = ScriptedProvider([tool_reply("reading"), "done"])
    loop = AgentLoop(runtime, provider, ScriptedTools(TOOLS))
    in_flight = provider.gate(0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, [], loop, "fix it")
        await in_flight.wait_reached()
        await steer(runtime, "SECRET-STEER-TEXT", "s1")
        tg.cancel_scope.cancel()
    assert disposition(runtime, "s1") == (Disposition.HELD, "generation-cancelled")
    assert all("SECRET-STEER-TEXT" not in e.text for e in loop.context.entries)
    assert all("SECRET-STEER-TEXT" not in e.text for request in provider.requests for e in request)
    (terminal,) = recorder.of_type("generation.cancelled")
    assert terminal["input_ids"] == []
    assert terminal["accepted_input_ids"] == ["s1"]
    assert runtime.generation is None
    runtime._check()


async def test_interrupted_write_is_unknown_and_later_inputs_are_not() -> None:
    """C15: cancelling at the second write makes it unknown (never held); the next is held, not unknown."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    context = RecordingContext()
    provider = ScriptedProvider([tool_reply("reading")], then="done")
    loop = AgentLoop(runtime, provider, ScriptedTools(TOOLS), context=context)
    in_flight = provider.gate(0)
    second_write = context.gate_write(1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, [], loop, "migrate")
        await in_flight.wait_reached()
        for n in (1, 2, 3):
            await steer(runtime, f"note {n}", f"w{n}")
        in_flight.release()
        await second_write.wait_reached()
        assert disposition(runtime, "w2") == (Disposition.QUEUED, None)
        tg.cancel_scope.cancel()
    assert disposition(runtime, "w1") == (Disposition.APPLIED, None)
    assert disposition(runtime, "w2") == (Disposition.UNKNOWN, "write-interrupted")
    assert disposition(runtime, "w3") == (Disposition.HELD, "generation-cancelled")
    assert recorder.dispositions("w2") == ["queued", "unknown"]
    assert recorder.dispositions("w3") == ["queued", "held"]
    assert [e["input_id"] for e in recorder.of_type("steering.held")] == ["w3"]
    assert context.steer_ids() == ["w1"]
    assert provider.calls == 1
    runtime._check()


async def test_writer_failure_is_unknown_and_fails_the_generation() -> None:
    """C15/C17: a writer that raises makes its input unknown, holds the rest, publishes generation.failed."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    context = RecordingContext()
    context.fail_write(0, OSError("disk full"))
    provider = ScriptedProvider([tool_reply("reading"), "done"])
    loop = AgentLoop(runtime, provider, ScriptedTools(TOOLS), context=context)
    in_flight = provider.gate(0)
    errors: list[BaseException] = []

    async def run_expecting_failure() -> None:
        try:
            await loop.run("migrate")
        except OSError as error:
            errors.append(error)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_expecting_failure)
        await in_flight.wait_reached()
        await steer(runtime, "note 1", "f1")
        await steer(runtime, "note 2", "f2")
        in_flight.release()
    assert [str(e) for e in errors] == ["disk full"]
    assert disposition(runtime, "f1") == (Disposition.UNKNOWN, "write-interrupted")
    assert disposition(runtime, "f2") == (Disposition.HELD, "generation-failed")
    (failed,) = recorder.of_type("generation.failed")
    assert failed["error"] == "OSError"
    assert failed["input_ids"] == []
    assert failed["accepted_input_ids"] == ["f1", "f2"]
    assert context.steers() == []
    runtime._check()


async def test_exhausted_call_budget_holds_pending_steers() -> None:
    """C17: with the call budget spent, a steer sent during the last tool round is held budget-exhausted."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    provider = ScriptedProvider([tool_reply("testing", "test")], then=tool_reply("again", "test"))
    tools = ScriptedTools(TOOLS)
    running = tools.gate("test", 1)
    loop = AgentLoop(runtime, provider, tools, call_budget=2)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, results, loop, "loop forever")
        await running.wait_reached()
        await steer(runtime, "too late", "b1")
        running.release()
    assert provider.calls == 2
    assert results[0].outcome == "budget-exhausted"
    assert results[0].held_input_ids == ("b1",)
    assert disposition(runtime, "b1") == (Disposition.HELD, "budget-exhausted")
    assert texts(loop.context.entries, "steer") == []
    (stopped,) = recorder.of_type("generation.stopped")
    assert stopped["reason"] == "budget-exhausted"


async def test_stop_then_new_generation_in_same_runtime() -> None:
    """C17/C18: a stopped generation does not close the runtime; the next one runs and nothing moves to it."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    provider = ScriptedProvider(["working", "done"])
    loop = AgentLoop(runtime, provider, ScriptedTools(TOOLS))
    in_flight = provider.gate(0)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, results, loop, "first task", "g1")
        await in_flight.wait_reached()
        await steer(runtime, "held one", "h1")
        loop.stop()
    assert results[0].outcome == "stopped"
    assert runtime.generation is None
    assert runtime.capability["mode"] == "request_boundary"

    second_call = provider.gate(1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, results, loop, "second task", "g2")
        await second_call.wait_reached()
        stale = await runtime.submit_steering(Input("steer", "for g1", id="x1"), "g1")
        assert (stale.accepted, stale.reason) == (False, "stale-generation")
        await steer(runtime, "applied one", "a2")
        second_call.release()
    assert results[1].outcome == "finished"
    assert results[1].applied_input_ids == ("a2",)
    assert recorder.count("generation.started") == 2
    assert disposition(runtime, "h1") == (Disposition.HELD, "generation-stopped")
    assert texts(loop.context.entries, "steer") == ["applied one"]
    runtime._check()


async def test_aclose_during_run_holds_pending_and_stops() -> None:
    """C17: closing the runtime while a model call is in flight holds the pending steer (runtime-closed)."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    provider = ScriptedProvider(["done"])
    loop = AgentLoop(runtime, provider, ScriptedTools(TOOLS))
    in_flight = provider.gate(0)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, results, loop, "fix it")
        await in_flight.wait_reached()
        generation_id = anchor(runtime)
        await steer(runtime, "never written", "c1")
        await runtime.aclose()
        assert disposition(runtime, "c1") == (Disposition.HELD, "runtime-closed")
        late = await runtime.submit_steering(Input("steer", "after close", id="c2"), generation_id)
        assert (late.accepted, late.reason) == (False, "closed")
        in_flight.release()
    assert results[0].outcome == "stopped"
    (stopped,) = recorder.of_type("generation.stopped")
    assert stopped["reason"] == "runtime-closed"
    assert stopped["accepted_input_ids"] == ["c1"]
    assert runtime.capability["mode"] == "unavailable"
    assert texts(loop.context.entries, "steer") == []


async def test_terminal_event_lists_applied_and_unapplied_inputs() -> None:
    """C19: the terminal event carries input_ids (applied) and accepted_input_ids (accepted, not applied)."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    provider = ScriptedProvider([tool_reply("reading"), "working"])
    loop = AgentLoop(runtime, provider, ScriptedTools(TOOLS))
    first_call, second_call = provider.gate(0), provider.gate(1)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, results, loop, "fix it", "g-term")
        await first_call.wait_reached()
        await steer(runtime, "applied", "t1")
        first_call.release()
        await second_call.wait_reached()
        await steer(runtime, "held", "t2")
        loop.stop()
    (terminal,) = recorder.of_type("generation.stopped")
    assert terminal["generation_id"] == "g-term"
    assert terminal["input_ids"] == ["t1"]
    assert terminal["accepted_input_ids"] == ["t2"]
    assert results[0].applied_input_ids == ("t1",)
    assert results[0].held_input_ids == ("t2",)
    assert recorder.types()[-1] == "generation.stopped"


async def test_context_entries_carry_input_and_generation_metadata() -> None:
    """C13: each steer entry the loop writes carries input_id and target_generation_id."""
    runtime = LiveRuntime()
    provider = ScriptedProvider([tool_reply("reading"), "done"])
    loop = AgentLoop(runtime, provider, ScriptedTools(TOOLS))
    in_flight = provider.gate(0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, [], loop, "fix it", "g-meta")
        await in_flight.wait_reached()
        await steer(runtime, "one", "m1")
        await steer(runtime, "two", "m2")
        in_flight.release()
    steers = [e for e in loop.context.entries if e.role == "steer"]
    assert [dict(e.metadata) for e in steers] == [
        {"input_id": "m1", "target_generation_id": "g-meta", "delivery": "request_boundary", "kind": "steer"},
        {"input_id": "m2", "target_generation_id": "g-meta", "delivery": "request_boundary", "kind": "steer"},
    ]


async def test_refused_open_leaves_context_untouched() -> None:
    """A run whose generation cannot open (reused id) raises and adds nothing to the context."""
    runtime = LiveRuntime()
    loop = AgentLoop(runtime, ScriptedProvider(["done"]), ScriptedTools(TOOLS))
    await loop.run("first", generation_id="g-once")
    with pytest.raises(ValueError, match="already used"):
        await loop.run("second", generation_id="g-once")
    assert texts(loop.context.entries, "user") == ["first"]


async def test_loop_stop_when_idle_is_a_no_op() -> None:
    """AgentLoop.stop() outside a run changes nothing and the next run finishes normally."""
    runtime = LiveRuntime()
    loop = AgentLoop(runtime, ScriptedProvider(["done"]), ScriptedTools(TOOLS))
    loop.stop()
    result = await loop.run("hello")
    assert (result.outcome, result.provider_calls, result.text) == ("finished", 1, "done")


def test_call_budget_must_be_positive() -> None:
    """A call budget below 1 is a clear ValueError at construction."""
    with pytest.raises(ValueError, match="call_budget"):
        AgentLoop(LiveRuntime(), ScriptedProvider([]), ScriptedTools({}), call_budget=0)


@pytest.mark.parametrize("how", ["loop.stop", "aclose"])
async def test_stop_never_cancels_a_write_in_progress(how: str) -> None:
    """C14/C17: AgentLoop.stop() (or the runtime's close) during a write lets it complete
    (applied); the steers behind it are held, and the loop returns stopped with no request."""
    runtime = LiveRuntime()
    context = RecordingContext()
    provider = ScriptedProvider([tool_reply("reading"), "done"])
    loop = AgentLoop(runtime, provider, ScriptedTools(TOOLS), context=context)
    in_flight = provider.gate(0)
    first_write = context.gate_write(0)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, results, loop, "fix it")
        await in_flight.wait_reached()
        await steer(runtime, "one", "s1")
        await steer(runtime, "two", "s2")
        in_flight.release()
        await first_write.wait_reached()
        if how == "loop.stop":
            loop.stop()
        else:
            await runtime.aclose()
        reason = "generation-stopped" if how == "loop.stop" else "runtime-closed"
        assert disposition(runtime, "s2") == (Disposition.HELD, reason)
        first_write.release()
    assert disposition(runtime, "s1") == (Disposition.APPLIED, None)
    assert context.steer_ids() == ["s1"]
    assert results[0].outcome == "stopped"
    assert results[0].applied_input_ids == ("s1",)
    assert provider.calls == 1  # no request after the stop


async def test_function_tools_calls_named_functions() -> None:
    """FunctionTools runs the named function with the call's arguments; an unknown name is an error result."""

    async def add(a: int, b: int) -> str:
        return str(a + b)

    tools = FunctionTools({"add": add})
    assert await tools.run(ToolCall("c1", "add", {"a": 2, "b": 3})) == "5"
    assert await tools.run(ToolCall("c2", "nope")) == "error: no tool named 'nope'"


async def test_the_loops_own_input_path_is_untouched_by_the_capability() -> None:
    """C5: a prompt through the loop's own path keeps its behaviour; the capability only adds to it."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    provider = ScriptedProvider(["first", "second"])
    loop = AgentLoop(runtime, provider, ScriptedTools({}))
    first = await loop.run("an ordinary prompt")
    # the ordinary path: a user entry, no identity used, no steering event, nothing held
    assert provider.texts_of(0) == ["an ordinary prompt"]
    assert runtime.statistics().identities == 0
    assert not [t for t in recorder.types() if t.startswith(("steering.", "input."))]
    assert first.outcome == "finished"
    # a steer through the capability in between leaves the next ordinary prompt as it was
    stale = await runtime.capability["submit"](Input("steer", "not a turn", id="s1"), first.generation_id)
    assert stale.reason == "stale-generation"  # never started as a turn of its own (C18)
    second = await loop.run("another prompt")
    assert [e.text for e in provider.requests[1] if e.role == "user"] == [
        "an ordinary prompt",
        "another prompt",
    ]
    assert not [e for e in provider.requests[1] if e.role == "steer"]
    assert second.applied_input_ids == ()


# -- follow-ups (C29) and skipped tool batches (C31) --------------------------------------------


async def test_a_follow_up_runs_as_the_next_generation_without_a_new_prompt() -> None:
    """C29: a follow-up sent while the model works is not in that generation's requests; when it
    finishes, the loop starts the next generation itself, whose first request ends with the
    follow-up as the user's turn."""
    runtime = LiveRuntime()
    provider = ScriptedProvider([tool_reply("reading"), "done", "tests run"])
    loop = AgentLoop(runtime, provider, ScriptedTools(TOOLS))
    in_flight = provider.gate(0)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, results, loop, "fix it")
        await in_flight.wait_reached()
        first = anchor(runtime)
        queued = await runtime.submit_steering(Input("follow_up", "now run the tests", id="f1"), first)
        assert queued.disposition is Disposition.QUEUED
        in_flight.release()
    assert provider.calls == 3
    assert [texts(r, "user") for r in provider.requests] == [
        ["fix it"],
        ["fix it"],
        ["fix it", "now run the tests"],
    ]
    (result,) = results
    assert result.generation_ids[0] == first
    assert len(result.generation_ids) == 2
    assert result.generation_id == result.generation_ids[1]
    assert (result.outcome, result.text, result.provider_calls) == ("finished", "tests run", 3)
    assert result.applied_input_ids == ("f1",)
    assert result.held_input_ids == ()
    assert runtime.receipt("f1") == Receipt(True, "f1", first, Disposition.APPLIED)
    runtime._check()


async def test_a_stopped_run_discards_its_follow_up() -> None:
    """C29: stopping the generation a follow-up waits for holds it; no next generation runs."""
    runtime = LiveRuntime()
    provider = ScriptedProvider([tool_reply("reading"), "done"])
    loop = AgentLoop(runtime, provider, ScriptedTools(TOOLS))
    in_flight = provider.gate(0)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, results, loop, "fix it")
        await in_flight.wait_reached()
        await runtime.submit_steering(Input("follow_up", "then this", id="f1"), anchor(runtime))
        loop.stop()
        in_flight.release()
    (result,) = results
    assert (result.outcome, len(result.generation_ids), provider.calls) == ("stopped", 1, 1)
    assert result.held_input_ids == ("f1",)
    assert disposition(runtime, "f1") == (Disposition.HELD, "generation-stopped")


#: A reply asking for three tool calls, the first one gated by ``ScriptedTools.gate("read")``.
BATCH_OF_THREE = Reply(
    "working", (ToolCall("c1", "read", {}), ToolCall("c2", "test", {}), ToolCall("c3", "read", {}))
)


async def test_skip_tools_on_steer_answers_the_rest_of_the_batch() -> None:
    """C31: a steer arriving while the first of three tools runs: the other two are not run, each
    gets the pinned skipped result, tools.skipped names them and the steer, and the steer is in
    the next request after every tool result."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    provider = ScriptedProvider([BATCH_OF_THREE, "changed course"])
    tools = ScriptedTools(TOOLS)
    running = tools.gate("read")
    loop = AgentLoop(runtime, provider, tools, skip_tools_on_steer=True)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, results, loop, "fix it")
        await running.wait_reached()
        await steer(runtime, "stop, use the other file", "s1")
        running.release()
    (result,) = results
    assert result.skipped_tool_call_ids == ("c2", "c3")
    assert tools.calls == [ToolCall("c1", "read", {})]
    second = provider.requests[1]
    assert [(e.role, e.text) for e in second[-4:]] == [
        ("tool", "file contents"),
        ("tool", SKIPPED_TOOL_RESULT),
        ("tool", SKIPPED_TOOL_RESULT),
        ("steer", "stop, use the other file"),
    ]
    assert [e.metadata.get("tool_call_id") for e in second if e.role == "tool"] == ["c1", "c2", "c3"]
    (skipped,) = recorder.of_type("tools.skipped")
    assert (skipped["tool_call_ids"], skipped["input_ids"]) == (["c2", "c3"], ["s1"])
    assert disposition(runtime, "s1") == (Disposition.APPLIED, None)


async def test_without_skip_tools_on_steer_the_whole_batch_runs() -> None:
    """C31: the default is off: every tool of the batch runs, and no tools.skipped is published."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    batch = Reply("working", (ToolCall("c1", "read", {}), ToolCall("c2", "test", {})))
    provider = ScriptedProvider([batch, "done"])
    tools = ScriptedTools(TOOLS)
    running = tools.gate("read")
    loop = AgentLoop(runtime, provider, tools)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, [], loop, "fix it")
        await running.wait_reached()
        await steer(runtime, "a note", "s1")
        running.release()
    assert [c.id for c in tools.calls] == ["c1", "c2"]
    assert recorder.of_type("tools.skipped") == []


@pytest.mark.parametrize("skip_tools_on_steer", [False, True])
async def test_a_host_stop_during_a_tool_starts_no_further_tool_of_the_batch(
    skip_tools_on_steer: bool,
) -> None:
    """A host's runtime.stop(gid) while the first of three tools runs (a steer pending too): that
    tool finishes (C14), the other two never start and get STOPPED_TOOL_RESULT, no further model
    request is made, the steer is held. They all ran: the stop also held the steer that would
    have skipped them."""
    runtime = LiveRuntime()
    provider = ScriptedProvider([BATCH_OF_THREE, "never asked"])
    tools = ScriptedTools(TOOLS)
    running = tools.gate("read")
    loop = AgentLoop(runtime, provider, tools, skip_tools_on_steer=skip_tools_on_steer)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, results, loop, "fix it")
        await running.wait_reached()
        await steer(runtime, "rather not", "s1")
        generation = runtime.generation
        assert generation is not None
        assert runtime.stop(generation["id"])
        running.release()
    (result,) = results
    assert tools.calls == [ToolCall("c1", "read", {})]
    assert (result.outcome, result.provider_calls) == (LoopOutcome.STOPPED, 1)
    tool_entries = [e for e in loop.context.entries if e.role == "tool"]
    assert [(e.metadata["tool_call_id"], e.text) for e in tool_entries] == [
        ("c1", "file contents"),
        ("c2", STOPPED_TOOL_RESULT),
        ("c3", STOPPED_TOOL_RESULT),
    ]
    assert disposition(runtime, "s1") == (Disposition.HELD, "generation-stopped")


@pytest.mark.parametrize("how", ["loop.stop", "caller-cancel", "tool-raises"])
async def test_every_tool_call_keeps_a_result_when_the_run_ends_mid_tool(how: str) -> None:
    """C31: a run that ends while a tool of a batch runs (stop(), a caller's cancel, a tool that
    raised) still answers every call of the batch: the context outlives the run, and the next
    run's request must carry a result for each tool call, or providers refuse it."""

    def broken(call: ToolCall) -> str:
        raise OSError("disk gone")

    runtime = LiveRuntime()
    provider = ScriptedProvider([BATCH_OF_THREE, "second answer"])
    tools = ScriptedTools({**TOOLS, "read": broken} if how == "tool-raises" else TOOLS)
    loop = AgentLoop(runtime, provider, tools)
    if how == "tool-raises":
        with pytest.raises(OSError, match="disk gone"):
            await loop.run("first")
    else:
        running = tools.gate("read")
        async with anyio.create_task_group() as tg:
            tg.start_soon(loop.run, "first")
            await running.wait_reached()
            if how == "loop.stop":
                loop.stop()
            else:
                tg.cancel_scope.cancel()
    first_result = TOOL_FAILED_RESULT if how == "tool-raises" else TOOL_CANCELLED_RESULT
    second = await loop.run("second")
    assert second.outcome == LoopOutcome.FINISHED
    request = provider.requests[1]
    assert [(e.metadata.get("tool_call_id"), e.text) for e in request if e.role == "tool"] == [
        ("c1", first_result),
        ("c2", STOPPED_TOOL_RESULT),
        ("c3", STOPPED_TOOL_RESULT),
    ]
    assert tools.calls == [ToolCall("c1", "read", {})]


async def test_a_pending_follow_up_skips_no_tool() -> None:
    """C31: only a steer skips a batch; a follow-up waits for the end of the generation."""
    runtime = LiveRuntime()
    batch = Reply("working", (ToolCall("c1", "read", {}), ToolCall("c2", "test", {})))
    provider = ScriptedProvider([batch, "done", "next"])
    tools = ScriptedTools(TOOLS)
    running = tools.gate("read")
    loop = AgentLoop(runtime, provider, tools, skip_tools_on_steer=True)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, results, loop, "fix it")
        await running.wait_reached()
        await runtime.submit_steering(Input("follow_up", "then this", id="f1"), anchor(runtime))
        running.release()
    assert [c.id for c in tools.calls] == ["c1", "c2"]
    assert results[0].skipped_tool_call_ids == ()
    assert results[0].applied_input_ids == ("f1",)


async def test_skip_tools_on_steer_must_be_a_bool() -> None:
    """A misspelt option is a TypeError at construction, not a silent default."""
    with pytest.raises(TypeError, match="skip_tools_on_steer must be a bool"):
        AgentLoop(LiveRuntime(), ScriptedProvider([]), ScriptedTools(TOOLS), skip_tools_on_steer=1)  # type: ignore[arg-type]
    await anyio.lowlevel.checkpoint()


async def test_run_follow_ups_false_leaves_them_to_the_next_run() -> None:
    """``run_follow_ups=False``: a finished run leaves its follow-ups queued; the next ``run`` writes
    them at its first boundary, after its own prompt."""
    runtime = LiveRuntime()
    provider = ScriptedProvider(["done", "next done"])
    loop = AgentLoop(runtime, provider, ScriptedTools(TOOLS), run_follow_ups=False)
    in_flight = provider.gate(0)
    results: list[LoopResult] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_into, results, loop, "first")
        await in_flight.wait_reached()
        await runtime.submit_steering(Input("follow_up", "later", id="f1"), anchor(runtime))
        in_flight.release()
    assert (len(results[0].generation_ids), runtime.pending_follow_ups) == (1, 1)
    await run_into(results, loop, "second")
    assert texts(provider.requests[1], "user") == ["first", "second", "later"]
    assert disposition(runtime, "f1") == (Disposition.APPLIED, None)
