"""The deterministic fixtures of ``live_steering.testing`` themselves (users build their tests on them)."""

from __future__ import annotations

import anyio
import pytest

from live_steering import Input, LiveRuntime
from live_steering.loop import ContextEntry, Reply, ToolCall
from live_steering.testing import (
    EventRecorder,
    Gate,
    RecordingContext,
    ScriptedProvider,
    ScriptedTools,
    ScriptError,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_gate_holds_until_released() -> None:
    """A fixture parked at a gate does not pass until the test releases it."""
    gate = Gate()
    passed = anyio.Event()

    async def fixture_step() -> None:
        await gate.passage()
        passed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(fixture_step)
        await gate.wait_reached()
        await anyio.wait_all_tasks_blocked()
        assert gate.reached
        assert not gate.released
        assert not passed.is_set()
        gate.release()
    assert passed.is_set()
    assert gate.released


async def test_gate_released_before_arrival_passes_through() -> None:
    """Releasing a gate before the fixture arrives lets it pass straight through."""
    gate = Gate()
    gate.release()
    gate.release()  # idempotent
    with anyio.fail_after(5):
        await gate.passage()
    assert gate.reached


async def test_provider_records_requests_and_holds_the_gated_call() -> None:
    """ScriptedProvider records each request before its gate and answers from the script in order."""
    provider = ScriptedProvider([Reply("one"), "two"])
    gate = provider.gate(1)
    request = [ContextEntry("user", "hi")]
    assert (await provider.complete(request)).text == "one"
    replies: list[Reply] = []

    async def second_call() -> None:
        replies.append(await provider.complete([*request, ContextEntry("steer", "go left")]))

    async with anyio.create_task_group() as tg:
        tg.start_soon(second_call)
        await gate.wait_reached()
        assert provider.calls == 2  # recorded while in flight
        assert replies == []
        gate.release()
    assert [r.text for r in replies] == ["two"]
    assert provider.texts_of(1) == ["hi", "go left"]
    assert provider.texts_of(1, "steer") == ["go left"]
    assert isinstance(provider.requests[0], tuple)


async def test_provider_raises_script_error_when_the_script_runs_out() -> None:
    """A provider called past its script raises ScriptError (a test bug, reported loudly)."""
    provider = ScriptedProvider(["only"])
    await provider.complete([])
    with pytest.raises(ScriptError, match="no reply for call 1"):
        await provider.complete([])


async def test_provider_then_reply_answers_past_the_script() -> None:
    """With ``then``, every call past the script gets that reply."""
    provider = ScriptedProvider([], then="again")
    assert [(await provider.complete([])).text for _ in range(3)] == ["again"] * 3


async def test_tools_gate_holds_only_the_chosen_call() -> None:
    """ScriptedTools.gate(name, n) holds the n-th call of that tool only; results can be functions."""
    tools = ScriptedTools({"echo": lambda call: f"echo {call.arguments['x']}"})
    gate = tools.gate("echo", 1)
    assert await tools.run(ToolCall("c0", "echo", {"x": 0})) == "echo 0"
    results: list[str] = []

    async def second() -> None:
        results.append(await tools.run(ToolCall("c1", "echo", {"x": 1})))

    async with anyio.create_task_group() as tg:
        tg.start_soon(second)
        await gate.wait_reached()
        await anyio.wait_all_tasks_blocked()
        assert results == []
        gate.release()
    assert results == ["echo 1"]
    assert [c.id for c in tools.calls] == ["c0", "c1"]


async def test_tools_raise_script_error_for_an_unknown_tool() -> None:
    """A tool missing from the script raises ScriptError."""
    with pytest.raises(ScriptError, match="no tool named 'nope'"):
        await ScriptedTools({}).run(ToolCall("c0", "nope"))


async def test_recording_context_gates_and_fails_writes() -> None:
    """RecordingContext holds a gated write before it takes effect and raises a scripted failure once."""
    context = RecordingContext()
    context.fail_write(1, OSError("disk full"))
    gate = context.gate_write(0)
    metadata = {"input_id": "a", "target_generation_id": "g"}

    async def first_write() -> None:
        await context.add_steer(Input("steer", "one", id="a"), metadata)

    async with anyio.create_task_group() as tg:
        tg.start_soon(first_write)
        await gate.wait_reached()
        assert context.steers() == []  # held before it takes effect
        gate.release()
    with pytest.raises(OSError, match="disk full"):
        await context.add_steer(Input("steer", "two", id="b"), {"input_id": "b"})
    await context.add_steer(Input("steer", "three", id="c"), {"input_id": "c"})
    assert context.steer_ids() == ["a", "c"]
    assert context.steers()[0].metadata == metadata
    assert context.writes_started == 3


async def test_event_recorder_waits_for_past_and_future_events() -> None:
    """EventRecorder.wait_for returns a past event at once and wakes on a matching future one."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    async with runtime.open_generation("g1") as gen:
        started = await recorder.wait_for("generation.started", generation_id="g1")
        assert started["sequence"] == 1
        found: list[dict[str, object]] = []

        async def waiter() -> None:
            found.append(await recorder.wait_for("steering.accepted", input_id="b"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            await runtime.submit_steering(Input("steer", "first", id="a"), gen.id)
            await anyio.wait_all_tasks_blocked()
            assert found == []  # "a" does not match
            await runtime.submit_steering(Input("steer", "second", id="b"), gen.id)
        assert [e["input_id"] for e in found] == ["b"]
        await gen.boundary(lambda steer, metadata: None)
        gen.continue_after_checkpoint()
    assert recorder.dispositions("a") == ["queued", "applied"]
    assert recorder.count("steering.applied") == 2
    assert [e["type"] for e in recorder.for_input("b")] == [
        "steering.accepted",
        "input.delivered",
        "steering.applied",
    ]


async def test_event_recorder_assert_order() -> None:
    """assert_order accepts a subsequence in order and fails when the order is wrong."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    async with runtime.open_generation("g1") as gen:
        await runtime.submit_steering(Input("steer", "x", id="a"), gen.id)
        gen.stop()
    recorder.assert_order("generation.started", "steering.accepted", "steering.held", "generation.stopped")
    recorder.assert_order("generation.started", "generation.stopped")
    with pytest.raises(AssertionError, match="not in order"):
        recorder.assert_order("steering.held", "steering.accepted")
    with pytest.raises(AssertionError, match="not in order"):
        recorder.assert_order("steering.applied")
    assert recorder.dispositions("a") == ["queued", "held"]


async def test_event_recorder_detach_stops_recording() -> None:
    """After detach() the recorder sees no more events."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)
    async with runtime.open_generation("g1"):
        pass
    recorder.detach()
    async with runtime.open_generation("g2"):
        pass
    assert recorder.types() == ["generation.started", "generation.finished"]


async def test_recording_context_writes_a_follow_up_as_the_users_turn() -> None:
    """As the reference loop's ``Context``: a steer is a ``"steer"`` entry, a follow-up the next
    turn's ``"user"`` entry (C29), so ``steers()`` lists only the steer."""
    context = RecordingContext()
    await context.add_steer(Input("steer", "Use X", id="s1"), {"input_id": "s1", "kind": "steer"})
    await context.add_steer(Input("follow_up", "Then docs", id="f1"), {"input_id": "f1", "kind": "follow_up"})
    assert [(e.role, e.text) for e in context.entries] == [("steer", "Use X"), ("user", "Then docs")]
    assert context.steer_ids() == ["s1"]
    assert context.writes_started == 2


async def test_a_listener_that_is_not_callable_is_refused() -> None:
    """``add_listener`` refuses a non-callable with TypeError, attaching nothing."""
    runtime = LiveRuntime()
    with pytest.raises(TypeError, match="listener must be callable"):
        runtime.add_listener(5)  # type: ignore[arg-type]
    async with runtime, runtime.open_generation("g1") as gen:
        gen.stop()
    assert runtime.statistics().listener_errors == 0
