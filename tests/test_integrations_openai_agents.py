"""The OpenAI Agents SDK runner, driven by the SDK's own ``agents.testing.ScriptedModel``.

``ScriptedModel`` is the SDK's deterministic implementation of its ``Model`` interface
(``get_response`` and ``stream_response``); it records every call's input. The SDK is
asyncio-only, so these tests run on asyncio; tracing is off (no network).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from agents import Agent, MaxTurnsExceeded, RunConfig, RunResult, SQLiteSession, function_tool, handoff
from agents.extensions import handoff_filters
from agents.run_config import CallModelData, ModelInputData
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from fleet_helpers import final_receipt, owned_elsewhere, steer_then_stop
from live_steering import GenerationStateError, Input, LiveRuntime, Receipt
from live_steering.integrations.openai_agents import (
    SKIPPED_TOOL_RESULT,
    LiveSteering,
    RunStopped,
    SteeringHistoryError,
)
from live_steering.testing import Gate, History

STEER = "Only fix the failing test"
PROMPT = "Make the suite pass"
CONFIG = RunConfig(tracing_disabled=True)


@pytest.fixture
def anyio_backend() -> str:
    """The OpenAI Agents SDK runs on asyncio only."""
    return "asyncio"


pytestmark = pytest.mark.anyio


def tool_step(call_id: str = "c1") -> list[Any]:
    return [function_call("run_tests", {}, call_id=call_id)]


def answer(text: str, item_id: str = "m1") -> list[Any]:
    return [assistant_message(text, item_id=item_id)]


def gated(gate: Gate, reply: list[Any]) -> ModelStep:
    """A scripted step that waits at ``gate`` before it replies."""

    async def respond(call: ModelCall) -> list[Any]:
        await gate.passage()
        return reply

    return ModelStep.respond(respond)


def user_texts(call: ModelCall) -> list[str]:
    """The user messages of a model call's input after the prompt, in order."""
    texts = [i["content"] for i in call.input if isinstance(i, dict) and i.get("role") == "user"]
    return texts[1:]


class Rig:
    """An agent on a ScriptedModel with a gated ``run_tests`` tool, steered, with a recorded history."""

    def __init__(self, *steps: Any) -> None:
        self.runtime = LiveRuntime()
        self.history = History.attach(self.runtime)
        self.model = ScriptedModel(steps)
        self.tool_gate = Gate()
        tool_gate = self.tool_gate

        @function_tool
        async def run_tests() -> str:
            """Run the test suite."""
            await tool_gate.passage()
            return "12 passed, 1 failed"

        self.agent: Agent[Any] = Agent(name="fixer", model=self.model, tools=[run_tests])
        self.steering = LiveSteering(self.runtime)
        self.outputs: list[Any] = []

    async def run(self, **kwargs: Any) -> None:
        config = kwargs.pop("run_config", CONFIG)
        result = await self.steering.run(self.agent, PROMPT, run_config=config, **kwargs)
        self.outputs.append(result.final_output)
        self.conversation = self.steering.to_input_list(result)

    def gen_id(self) -> str:
        generation = self.runtime.generation
        assert generation is not None
        gen_id: str = generation["id"]
        return gen_id

    async def steer(self, input_id: str = "s1", text: str = STEER) -> Receipt:
        return await self.history.submit(Input("steer", text, id=input_id), self.gen_id())

    def receipt(self, input_id: str) -> tuple[str | None, str | None]:
        receipt = self.runtime.receipt(input_id)
        assert receipt is not None
        return receipt.disposition, receipt.reason


async def test_steer_during_a_tool_stays_in_every_later_model_call_once() -> None:
    """A steer sent during a tool is in the next model call and every later one, once, after the tool."""
    rig = Rig(tool_step("c1"), tool_step("c2"), answer("Fixed it."))
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await rig.tool_gate.wait_reached()
        gen_id = rig.gen_id()
        assert (await rig.steer()).disposition == "queued"
        rig.tool_gate.release()
    calls = rig.model.calls
    assert [user_texts(c) for c in calls] == [[], [STEER], [STEER]]
    second = calls[1].input
    assert second[-2]["type"] == "function_call_output"
    assert second[-1] == {"type": "message", "role": "user", "content": STEER}
    assert rig.outputs == ["Fixed it."]
    assert rig.receipt("s1") == ("applied", None)
    (entry,) = rig.steering.entries
    assert entry.metadata["input_id"] == "s1"
    assert entry.metadata["target_generation_id"] == gen_id
    assert [i.get("content") for i in rig.conversation if i.get("role") == "user"] == [PROMPT, STEER]
    rig.history.check(require_final=True).assert_ok()


async def test_two_steers_land_in_admission_order() -> None:
    """Two steers admitted during one tool land in the next call in admission order."""
    rig = Rig(tool_step(), answer("Done."))
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await rig.tool_gate.wait_reached()
        await rig.steer("s1", "first")
        await rig.steer("s2", "second")
        rig.tool_gate.release()
    assert user_texts(rig.model.calls[1]) == ["first", "second"]
    rig.history.check(require_final=True).assert_ok()


async def test_late_steer_during_the_final_output_continues_the_same_generation() -> None:
    """A steer sent while the model writes its final output continues the generation; nothing is re-run."""
    gate = Gate()
    rig = Rig(tool_step(), gated(gate, answer("Done.", "m1")), answer("Done, only the failing test.", "m2"))
    rig.tool_gate.release()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        gen_id = rig.gen_id()
        await rig.steer()
        gate.release()
    assert rig.outputs == ["Done, only the failing test."]
    third = rig.model.calls[2].input
    assert user_texts(rig.model.calls[2]) == [STEER]
    assert [i.get("type") for i in third].count("function_call") == 1  # the tool call is history, not re-run
    assert [i.get("content") for i in third].count(PROMPT) == 1
    types = [e["type"] for e in rig.history.events]
    assert types.count("generation.started") == 1
    assert types.count("generation.continued") == 1
    assert rig.history.events[-1]["type"] == "generation.finished"
    assert rig.history.events[-1]["generation_id"] == gen_id
    rig.history.check(require_final=True).assert_ok()


async def test_cancel_holds_the_pending_steer() -> None:
    """Cancelling the run holds a queued steer (generation-cancelled); it is never sent."""
    rig = Rig(tool_step(), answer("unused"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await rig.tool_gate.wait_reached()
        await rig.steer()
        tg.cancel_scope.cancel()
    assert rig.receipt("s1") == ("held", "generation-cancelled")
    assert all(user_texts(c) == [] for c in rig.model.calls)
    assert rig.history.events[-1]["type"] == "generation.cancelled"
    rig.tool_gate.release()
    rig.model = ScriptedModel([answer("Next.")])
    rig.agent = rig.agent.clone(model=rig.model)
    await rig.run()  # the next generation: the held steer is not replayed into it
    assert user_texts(rig.model.calls[0]) == []
    assert rig.outputs == ["Next."]
    rig.history.check(require_final=True).assert_ok()


async def test_a_model_error_fails_the_generation() -> None:
    """A model error fails the run and the generation (generation.failed); a pending steer is held."""
    gate = Gate()

    async def failing(call: ModelCall) -> Exception:
        await gate.passage()
        return RuntimeError("provider down")

    rig = Rig(tool_step(), ModelStep.respond(failing))

    async def drive() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(rig.run)
            await rig.tool_gate.wait_reached()
            await rig.steer()
            rig.tool_gate.release()
            await gate.wait_reached()
            await rig.steer("s2", "Also update the changelog")
            gate.release()

    with pytest.raises(ExceptionGroup) as caught:
        await drive()
    assert caught.group_contains(RuntimeError, match="provider down")
    assert rig.receipt("s1") == ("applied", None)
    assert rig.receipt("s2") == ("held", "generation-failed")
    assert rig.history.events[-1]["type"] == "generation.failed"
    rig.history.check(require_final=True).assert_ok()


async def test_max_turns_holds_as_budget_exhausted() -> None:
    """max_turns spent with a steer pending holds it budget-exhausted."""
    rig = Rig(tool_step(), answer("unused"))

    async def drive() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: rig.run(max_turns=1))
            await rig.tool_gate.wait_reached()
            await rig.steer()
            rig.tool_gate.release()

    with pytest.raises(ExceptionGroup) as caught:
        await drive()
    assert caught.group_contains(MaxTurnsExceeded)
    assert rig.receipt("s1") == ("held", "budget-exhausted")
    rig.history.check(require_final=True).assert_ok()


SERVER_MANAGED = ["previous_response_id", "conversation_id", "auto_previous_response_id", "session"]


@pytest.mark.parametrize("option", SERVER_MANAGED)
async def test_server_managed_conversations_are_refused(option: str) -> None:
    """Server-managed conversations and sessions raise ValueError before anything runs."""
    values: dict[str, Any] = {
        "previous_response_id": "resp-1",
        "conversation_id": "conv-1",
        "auto_previous_response_id": True,
    }
    session = SQLiteSession("session-1")
    values["session"] = session
    rig = Rig(answer("unused"))
    with pytest.raises(ValueError, match="does not support"):
        await rig.steering.run(rig.agent, PROMPT, run_config=CONFIG, **{option: values[option]})
    session.close()
    assert rig.history.events == []
    assert rig.model.calls == ()


async def test_a_users_filter_runs_after_the_boundary_and_sees_the_steers() -> None:
    """A call_model_input_filter of the user's own still runs, on the input with the steers in it."""
    seen: list[list[Any]] = []

    def own_filter(data: CallModelData[Any]) -> ModelInputData:
        seen.append(list(data.model_data.input))
        return data.model_data

    rig = Rig(tool_step(), answer("Done."))
    async with anyio.create_task_group() as tg:
        config = RunConfig(tracing_disabled=True, call_model_input_filter=own_filter)
        tg.start_soon(lambda: rig.run(run_config=config))
        await rig.tool_gate.wait_reached()
        await rig.steer()
        rig.tool_gate.release()
    assert seen[1][-1]["content"] == STEER
    assert user_texts(rig.model.calls[1]) == [STEER]


async def test_streamed_runs_are_steered_and_continue() -> None:
    """stream(): a steer during a tool lands in the next call, and a late one continues the stream."""
    gate = Gate()
    rig = Rig(tool_step(), gated(gate, answer("Done.", "m1")), answer("Done again.", "m2"))
    events: list[str] = []

    async def consume() -> None:
        async for event in rig.steering.stream(rig.agent, PROMPT, run_config=CONFIG):
            events.append(event.type)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await rig.tool_gate.wait_reached()
        await rig.steer("s1")
        rig.tool_gate.release()
        await gate.wait_reached()
        await rig.steer("s2", "And the changelog")
        gate.release()
    assert [user_texts(c) for c in rig.model.calls] == [[], [STEER], [STEER, "And the changelog"]]
    assert all(c.streamed for c in rig.model.calls)
    assert rig.steering.last_result is not None
    assert rig.steering.last_result.final_output == "Done again."
    assert "raw_response_event" in events
    rig.history.check(require_final=True).assert_ok()


async def test_leaving_a_stream_early_stops_the_generation() -> None:
    """Closing the stream early cancels the SDK run and stops the generation; a pending steer is held."""
    rig = Rig(tool_step(), answer("unused"))
    stream = rig.steering.stream(rig.agent, PROMPT, run_config=CONFIG)
    async with anyio.create_task_group() as tg:

        async def first_events() -> None:
            async for _event in stream:
                if rig.tool_gate.reached:
                    break
            await stream.aclose()

        tg.start_soon(first_events)
        await rig.tool_gate.wait_reached()
        await rig.steer()
        rig.tool_gate.release()
    assert rig.receipt("s1") == ("held", "generation-stopped")
    assert rig.history.events[-1]["type"] == "generation.stopped"
    rig.history.check(require_final=True).assert_ok()


async def test_a_rewritten_history_is_an_error_not_a_guess() -> None:
    """If the SDK's history no longer matches where a steer was written, splicing raises, never guesses."""
    rig = Rig(tool_step(), answer("Done."))
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await rig.tool_gate.wait_reached()
        await rig.steer()
        rig.tool_gate.release()

    class Rewritten:
        """A result whose history a handoff input filter rewrote."""

        def to_input_list(self, *, mode: str = "preserve_all") -> list[Any]:
            return [{"role": "user", "content": "another history"}] * 3

    with pytest.raises(SteeringHistoryError, match="history changed under steer 's1'"):
        rig.steering.to_input_list(cast(Any, Rewritten()))


def test_needs_a_live_runtime() -> None:
    """LiveSteering refuses anything but a LiveRuntime, at construction."""
    with pytest.raises(TypeError, match="LiveRuntime"):
        LiveSteering(object())  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["steer", "follow_up"])
async def test_a_run_paused_for_approval_ends_the_generation_and_is_not_resumed(kind: str) -> None:
    """A tool needing approval pauses the run: the generation ends, a pending steer or follow-up is
    held (a follow-up is not carried into the caller's next run, C29), and resuming its RunState
    through LiveSteering is refused (the state would not hold the steers)."""
    gate = Gate()
    runtime = LiveRuntime()
    history = History.attach(runtime)

    @function_tool(needs_approval=True)
    async def deploy() -> str:
        """Deploy the fix."""
        return "deployed"

    model = ScriptedModel([gated(gate, [function_call("deploy", {}, call_id="d1")])])
    agent: Agent[Any] = Agent(name="deployer", model=model, tools=[deploy])
    steering = LiveSteering(runtime)
    results: list[Any] = []

    async def run() -> None:
        results.append(await steering.run(agent, PROMPT, run_config=CONFIG))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await gate.wait_reached()
        generation = runtime.generation
        assert generation is not None
        await history.submit(Input(kind, STEER, id="s1"), generation["id"])
        gate.release()
    assert results[0].interruptions
    assert runtime.pending_follow_ups == 0
    held = runtime.receipt("s1")
    assert held is not None
    assert (held.disposition, held.reason) == ("held", "generation-stopped")
    assert history.events[-1]["type"] == "generation.stopped"
    with pytest.raises(ValueError, match="does not resume a RunState"):
        await steering.run(agent, results[0].to_state(), run_config=CONFIG)
    history.check(require_final=True).assert_ok()


async def test_cancelling_a_stream_cancels_the_sdk_run_and_holds() -> None:
    """Cancelling the task that consumes stream() cancels the SDK's run; a pending steer is held."""
    rig = Rig(tool_step(), answer("unused"))

    async def consume() -> None:
        async for _event in rig.steering.stream(rig.agent, PROMPT, run_config=CONFIG):
            pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await rig.tool_gate.wait_reached()
        await rig.steer()
        tg.cancel_scope.cancel()
    assert rig.receipt("s1") == ("held", "generation-cancelled")
    assert rig.steering.last_result is not None
    assert rig.steering.last_result.is_complete
    rig.history.check(require_final=True).assert_ok()


# -- how a run ends: host stop, follow-ups, skipped tool batches, the SDK's shapes -------


async def stopped_run(rig: Rig, during: Callable[[], Awaitable[None]], **kwargs: Any) -> RunStopped:
    """Run the rig's agent while ``during`` stops it; the RunStopped that run() raised."""
    caught: list[RunStopped] = []

    async def run() -> None:
        with pytest.raises(RunStopped) as error:
            await rig.run(**kwargs)
        caught.append(error.value)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await during()
    (stopped,) = caught
    return stopped


def outputs_of(items: list[Any]) -> list[tuple[str, str]]:
    """Every function call output in an input list: (call_id, output), in order."""
    return [(i["call_id"], i["output"]) for i in items if i.get("type") == "function_call_output"]


async def test_host_stop_during_a_tool_ends_the_run_before_the_next_model_call() -> None:
    """runtime.stop(gid) while a tool runs: the tool finishes, no model call follows, run() raises
    RunStopped with the conversation so far, the pending steer is held, the stream ends stopped."""
    rig = Rig(tool_step("c1"), answer("never sent"))

    async def during() -> None:
        await rig.tool_gate.wait_reached()
        await rig.steer()
        assert rig.runtime.stop(rig.gen_id()) is True
        rig.tool_gate.release()

    stopped = await stopped_run(rig, during)
    assert len(rig.model.calls) == 1
    assert stopped.reason == "generation-stopped"
    assert stopped.history is not None
    assert outputs_of(stopped.history) == [("c1", "12 passed, 1 failed")]
    assert rig.receipt("s1") == ("held", "generation-stopped")
    assert rig.history.events[-1]["type"] == "generation.stopped"
    rig.history.check(require_final=True).assert_ok()


async def test_host_stop_with_a_concurrency_limit_lets_the_running_tools_finish() -> None:
    """C14 with ``max_function_tool_concurrency=2`` and three tool calls: a stop while ``a`` and
    ``b`` run; ``a`` returns, which starts ``c``'s slot. ``c`` never runs, ``b`` is not cancelled
    (the SDK cancels the batch's running calls when a tool start raises, so the stop waits for
    ``b``), no model call follows, and run() raises RunStopped."""
    from agents.run_config import ToolExecutionConfig

    runtime = LiveRuntime()
    history = History.attach(runtime)
    log: list[str] = []
    gate_a, gate_b = Gate(), Gate()

    @function_tool
    async def a() -> str:
        await gate_a.passage()
        log.append("a finished")
        return "A"

    @function_tool
    async def b() -> str:
        try:
            await gate_b.passage()
        except BaseException as exc:
            log.append(f"b interrupted: {type(exc).__name__}")
            raise
        log.append("b finished")
        return "B"

    @function_tool
    async def c() -> str:
        log.append("c started")
        return "C"

    calls = [function_call(name, {}, call_id=name) for name in "abc"]
    model = ScriptedModel([calls, answer("never sent")])
    agent: Agent[Any] = Agent(name="fixer", model=model, tools=[a, b, c])
    config = RunConfig(
        tracing_disabled=True, tool_execution=ToolExecutionConfig(max_function_tool_concurrency=2)
    )
    stopped: list[RunStopped] = []

    async def run() -> None:
        try:
            await LiveSteering(runtime).run(agent, PROMPT, run_config=config)
        except RunStopped as exc:
            stopped.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await gate_a.wait_reached()
        await gate_b.wait_reached()
        generation = runtime.generation
        assert generation is not None
        assert runtime.stop(generation["id"]) is True
        gate_a.release()
        await anyio.wait_all_tasks_blocked()  # c's start now waits for b
        assert log == ["a finished"]
        gate_b.release()
    assert log == ["a finished", "b finished"]
    assert len(model.calls) == 1
    assert [s.reason for s in stopped] == ["generation-stopped"]
    assert history.events[-1]["type"] == "generation.stopped"
    history.check(require_final=True).assert_ok()


async def test_host_stop_during_a_model_call_starts_none_of_its_tool_calls() -> None:
    """A stop while the model answers with two tool calls: neither tool starts, no model call follows."""
    gate = Gate()
    rig = Rig(gated(gate, [*tool_step("a"), *tool_step("b")]), answer("never sent"))

    async def during() -> None:
        await gate.wait_reached()
        rig.runtime.stop(rig.gen_id())
        gate.release()

    stopped = await stopped_run(rig, during)
    assert not rig.tool_gate.reached
    assert len(rig.model.calls) == 1
    # Stopped at a tool start: the conversation up to that model call, no tool call left unanswered.
    assert stopped.history == [{"content": PROMPT, "role": "user"}]
    assert rig.history.events[-1]["type"] == "generation.stopped"
    rig.history.check(require_final=True).assert_ok()


async def test_host_stop_during_the_final_output_raises_instead_of_continuing() -> None:
    """A stop while the model writes its final output: run() raises RunStopped (the output is in its
    history), a steer sent before the stop is held, and nothing continues."""
    gate = Gate()
    rig = Rig(gated(gate, answer("Done.")), answer("never sent"))

    async def during() -> None:
        await gate.wait_reached()
        await rig.steer()
        rig.runtime.stop(rig.gen_id())
        gate.release()

    stopped = await stopped_run(rig, during)
    assert len(rig.model.calls) == 1
    assert stopped.history is not None
    assert stopped.history[-1]["role"] == "assistant"
    assert rig.receipt("s1") == ("held", "generation-stopped")
    assert "generation.continued" not in [e["type"] for e in rig.history.events]
    rig.history.check(require_final=True).assert_ok()


async def test_host_stop_ends_a_streamed_run_the_same_way() -> None:
    """stream(): a host stop during a tool ends the stream with RunStopped; no model call follows."""
    rig = Rig(tool_step(), answer("never sent"))
    caught: list[RunStopped] = []

    async def consume() -> None:
        with pytest.raises(RunStopped) as error:
            async for _event in rig.steering.stream(rig.agent, PROMPT, run_config=CONFIG):
                pass
        caught.append(error.value)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await rig.tool_gate.wait_reached()
        rig.runtime.stop(rig.gen_id())
        rig.tool_gate.release()
    assert len(caught) == 1
    assert len(rig.model.calls) == 1
    assert rig.history.events[-1]["type"] == "generation.stopped"
    rig.history.check(require_final=True).assert_ok()


async def test_a_follow_up_is_the_next_turn_of_the_same_run() -> None:
    """A follow-up sent during a tool is in no call of its generation: when that finishes, run() opens
    the next generation, whose first model call ends with the follow-up (delivery follow_up)."""
    rig = Rig(tool_step(), answer("Fixed.", "m1"), answer("Changelog updated.", "m2"))

    async def during() -> None:
        await rig.tool_gate.wait_reached()
        receipt = await rig.history.submit(
            Input("follow_up", "Then update the changelog", id="f1"), rig.gen_id()
        )
        assert receipt.disposition == "queued"
        rig.tool_gate.release()

    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await during()
    assert [user_texts(c) for c in rig.model.calls] == [[], [], ["Then update the changelog"]]
    assert rig.outputs == ["Changelog updated."]
    assert rig.receipt("f1") == ("applied", None)
    types = [e["type"] for e in rig.history.events if e["type"].startswith("generation.")]
    assert types == ["generation.started", "generation.finished", "generation.started", "generation.finished"]
    applied = next(e for e in rig.history.events if e["type"] == "steering.applied")
    assert applied["delivery"] == "follow_up"
    assert [i.get("content") for i in rig.conversation if i.get("role") == "user"] == [
        PROMPT,
        "Then update the changelog",
    ]
    rig.history.check(require_final=True).assert_ok()


async def test_a_stop_discards_the_follow_up() -> None:
    """A host stop of the anchor generation holds its follow-up (generation-stopped): it never runs."""
    rig = Rig(tool_step(), answer("never sent"))

    async def during() -> None:
        await rig.tool_gate.wait_reached()
        await rig.history.submit(Input("follow_up", "Then update the changelog", id="f1"), rig.gen_id())
        rig.runtime.stop(rig.gen_id())
        rig.tool_gate.release()

    await stopped_run(rig, during)
    assert len(rig.model.calls) == 1
    assert rig.receipt("f1") == ("held", "generation-stopped")
    rig.history.check(require_final=True).assert_ok()


async def test_run_follow_ups_false_leaves_the_follow_up_to_the_next_run() -> None:
    """With run_follow_ups=False, run() returns after its own generation; the next run() writes it."""
    rig = Rig(tool_step(), answer("Fixed.", "m1"), answer("Changelog updated.", "m2"))
    rig.steering = LiveSteering(rig.runtime, run_follow_ups=False)

    async def during() -> None:
        await rig.tool_gate.wait_reached()
        await rig.history.submit(Input("follow_up", "Then update the changelog", id="f1"), rig.gen_id())
        rig.tool_gate.release()

    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await during()
    assert rig.outputs == ["Fixed."]
    assert rig.receipt("f1") == ("queued", None)
    await rig.run()
    assert user_texts(rig.model.calls[2]) == ["Then update the changelog"]
    assert rig.receipt("f1") == ("applied", None)
    rig.history.check(require_final=True).assert_ok()


async def test_skip_tools_on_steer_answers_the_rest_of_the_batch() -> None:
    """skip_tools_on_steer: a steer during the first of three tool calls; the other two get
    SKIPPED_TOOL_RESULT without running, tools.skipped names them, the next call has the steer."""
    rig = Rig([*tool_step("a"), *tool_step("b"), *tool_step("c")], answer("Only the failing test."))
    rig.steering = LiveSteering(rig.runtime, skip_tools_on_steer=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await rig.tool_gate.wait_reached()
        await rig.steer()
        rig.tool_gate.release()
    second = rig.model.calls[1].input
    assert outputs_of(list(second)) == [
        ("a", "12 passed, 1 failed"),
        ("b", SKIPPED_TOOL_RESULT),
        ("c", SKIPPED_TOOL_RESULT),
    ]
    assert user_texts(rig.model.calls[1]) == [STEER]
    skipped = [e for e in rig.history.events if e["type"] == "tools.skipped"]
    assert [i for e in skipped for i in e["tool_call_ids"]] == ["b", "c"]
    assert all(e["input_ids"] == ["s1"] for e in skipped)
    rig.history.check(require_final=True).assert_ok()


async def test_without_skip_tools_on_steer_the_whole_batch_runs() -> None:
    """By default a pending steer skips no tool call: every call of the batch runs."""
    rig = Rig([*tool_step("a"), *tool_step("b")], answer("Done."))
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await rig.tool_gate.wait_reached()
        await rig.steer()
        rig.tool_gate.release()
    assert [out for _, out in outputs_of(list(rig.model.calls[1].input))] == ["12 passed, 1 failed"] * 2
    assert "tools.skipped" not in [e["type"] for e in rig.history.events]


async def test_the_results_own_to_input_list_keeps_the_steers() -> None:
    """result.to_input_list() (the SDK's method, on the returned RunResult) has the steers in place."""
    rig = Rig(tool_step(), answer("Done."))
    results: list[RunResult] = []

    async def run() -> None:
        results.append(await rig.steering.run(rig.agent, PROMPT, run_config=CONFIG))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await rig.tool_gate.wait_reached()
        await rig.steer()
        rig.tool_gate.release()
    (result,) = results
    assert isinstance(result, RunResult)
    items = result.to_input_list()
    assert [i.get("content") for i in items if i.get("role") == "user"] == [PROMPT, STEER]
    assert items.index({"type": "message", "role": "user", "content": STEER}) == 3  # after the tool output
    assert result.to_input_list(mode="normalized") == items


def test_run_sync_runs_a_steered_run_in_its_own_loop() -> None:
    """run_sync() runs the generation in a new asyncio loop; a steer from a tool lands in the next call."""
    runtime = LiveRuntime()
    model = ScriptedModel([tool_step(), answer("Done.")])

    @function_tool
    async def run_tests() -> str:
        """Run the test suite."""
        generation = runtime.generation
        assert generation is not None
        await runtime.capability["submit"](Input("steer", STEER, id="s1"), generation["id"])
        return "12 passed"

    agent: Agent[Any] = Agent(name="fixer", model=model, tools=[run_tests])
    result = LiveSteering(runtime).run_sync(agent, PROMPT, run_config=CONFIG)
    assert result.final_output == "Done."
    assert user_texts(model.calls[1]) == [STEER]
    receipt = runtime.receipt("s1")
    assert receipt is not None
    assert receipt.disposition == "applied"


async def test_run_streamed_has_the_sdks_shape() -> None:
    """run_streamed() returns at once; stream_events() runs it (continuation included), final_output,
    last_agent and to_input_list() (steers kept) are there afterwards, as on the SDK's result."""
    gate = Gate()
    rig = Rig(tool_step(), gated(gate, answer("Done.", "m1")), answer("Done again.", "m2"))
    streamed = rig.steering.run_streamed(rig.agent, PROMPT, run_config=CONFIG)
    assert (streamed.is_complete, streamed.final_output) == (False, None)
    types: list[str] = []

    async def consume() -> None:
        async for event in streamed.stream_events():
            types.append(event.type)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await rig.tool_gate.wait_reached()
        await rig.steer("s1")
        rig.tool_gate.release()
        await gate.wait_reached()
        await rig.steer("s2", "And the changelog")
        gate.release()
    assert streamed.is_complete
    assert streamed.final_output == "Done again."
    assert streamed.last_agent is rig.agent
    assert "raw_response_event" in types
    users = [i.get("content") for i in streamed.to_input_list() if i.get("role") == "user"]
    assert users == [PROMPT, STEER, "And the changelog"]
    rig.history.check(require_final=True).assert_ok()


async def test_run_streamed_cancel_stops_the_generation_quietly() -> None:
    """cancel() on run_streamed()'s result stops the generation (steer held) and ends the stream quietly."""
    rig = Rig(tool_step(), answer("never sent"))
    streamed = rig.steering.run_streamed(rig.agent, PROMPT, run_config=CONFIG)

    async def consume() -> None:
        async for _event in streamed.stream_events():
            pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await rig.tool_gate.wait_reached()
        await rig.steer()
        streamed.cancel()
        rig.tool_gate.release()
    assert streamed.is_complete
    assert rig.receipt("s1") == ("held", "generation-stopped")
    assert len(rig.model.calls) == 1
    rig.history.check(require_final=True).assert_ok()


async def test_run_streamed_cancelled_before_streaming_runs_nothing() -> None:
    """cancel() before stream_events() is iterated: as the SDK's result, nothing runs (no generation,
    no model call, no event) and final_output stays None."""
    rig = Rig(answer("never sent"))
    streamed = rig.steering.run_streamed(rig.agent, PROMPT, run_config=CONFIG)
    streamed.cancel()
    assert [event async for event in streamed.stream_events()] == []
    assert streamed.is_complete
    assert streamed.final_output is None
    assert len(rig.model.calls) == 0
    assert rig.history.events == []


async def test_run_streamed_refuses_a_session_before_anything_runs() -> None:
    """run_streamed() refuses session= (and the other server-managed options) at the call, like run()."""
    rig = Rig(answer("unused"))
    session = SQLiteSession("session-2")
    with pytest.raises(ValueError, match="does not support session="):
        rig.steering.run_streamed(rig.agent, PROMPT, run_config=CONFIG, session=session)
    session.close()
    assert rig.history.events == []


async def test_cancelling_the_follow_up_turn_cancels_its_generation() -> None:
    """Cancelled during the follow-up's turn: the first generation stays finished, the follow-up's own
    generation ends cancelled, and a steer sent to it is held generation-cancelled."""
    first_gate, second_gate = Gate(), Gate()
    rig = Rig(gated(first_gate, answer("Fixed.", "m1")), gated(second_gate, answer("unused", "m2")))
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await first_gate.wait_reached()
        first = rig.gen_id()
        await rig.history.submit(Input("follow_up", "Then update the changelog", id="f1"), first)
        first_gate.release()
        await second_gate.wait_reached()
        assert rig.gen_id() != first
        await rig.steer("s2", "And the docs")
        tg.cancel_scope.cancel()
    assert rig.receipt("f1") == ("applied", None)
    assert rig.receipt("s2") == ("held", "generation-cancelled")
    ends = [
        e["type"]
        for e in rig.history.events
        if e["type"].startswith("generation.") and "started" not in e["type"]
    ]
    assert ends == ["generation.finished", "generation.cancelled"]
    rig.history.check(require_final=True).assert_ok()


async def test_a_fleet_stop_from_another_node_ends_the_run(tmp_path: Path) -> None:
    """A host on another fleet node stops the run by generation id (the same path as the HTTP stop):
    run() raises RunStopped after the running tool, with no further model call, and the steer the
    host sent is held."""
    async with owned_elsewhere(str(tmp_path / "fleet.db"), "chat-1") as (owner, host, runtime):
        rig = Rig(tool_step(), answer("never sent"))
        rig.runtime = runtime
        rig.steering = LiveSteering(runtime)
        caught: list[RunStopped] = []

        async def run() -> None:
            with pytest.raises(RunStopped) as error:
                await rig.run()
            caught.append(error.value)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await rig.tool_gate.wait_reached()
            await steer_then_stop(owner, host, "chat-1", rig.gen_id(), Input("steer", STEER, id="s1"))
            rig.tool_gate.release()
        assert await final_receipt(host, "chat-1", "s1") == ("held", "generation-stopped")
        assert len(caught) == 1
        assert len(rig.model.calls) == 1


async def test_one_at_a_time_writes_one_steer_per_call_and_continues_for_the_rest() -> None:
    """steering_mode="one-at-a-time" (C30): two steers sent during a tool land one per model call;
    the second continues the same generation after the final output instead of being dropped."""
    rig = Rig(tool_step(), answer("First.", "m1"), answer("Second.", "m2"))
    rig.runtime = LiveRuntime(steering_mode="one-at-a-time")
    rig.history = History.attach(rig.runtime)
    rig.steering = LiveSteering(rig.runtime)
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await rig.tool_gate.wait_reached()
        await rig.steer("s1", "first")
        await rig.steer("s2", "second")
        rig.tool_gate.release()
    assert [user_texts(c) for c in rig.model.calls] == [[], ["first"], ["first", "second"]]
    assert rig.outputs == ["Second."]
    assert [e["type"] for e in rig.history.events].count("generation.continued") == 1
    rig.history.check(require_final=True).assert_ok()


async def test_a_follow_up_after_a_rewriting_handoff_runs_on_the_history_the_model_saw() -> None:
    """A handoff whose input_filter rewrites the history, then a steer and a follow-up: the
    follow-up's run starts from the SDK's normalized history (the one the steer was written in),
    not the rewritten-away one, so nothing is stranded (it raised SteeringHistoryError after
    the generation finished and left the follow-up queued for an unrelated next run)."""
    rig = Rig()

    @function_tool
    async def lookup() -> str:
        """Look something up."""
        return "looked up"

    tool_gate = rig.tool_gate

    @function_tool
    async def run_tests() -> str:
        """Run the test suite."""
        await tool_gate.passage()
        return "12 passed, 1 failed"

    model_b = ScriptedModel([tool_step("cb"), answer("B done.", "mb"), answer("Changelog done.", "mf")])
    agent_b: Agent[Any] = Agent(name="b", model=model_b, tools=[run_tests])
    to_b = handoff(agent_b, input_filter=handoff_filters.remove_all_tools)
    model_a = ScriptedModel(
        [[function_call("lookup", {}, call_id="ca")], [function_call(to_b.tool_name, {}, call_id="h1")]]
    )
    agent_a: Agent[Any] = Agent(name="a", model=model_a, tools=[lookup], handoffs=[to_b])
    results: list[RunResult] = []

    async def run() -> None:
        results.append(await rig.steering.run(agent_a, PROMPT, run_config=CONFIG))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await tool_gate.wait_reached()
        await rig.steer()
        await rig.history.submit(Input("follow_up", "Then update the changelog", id="f1"), rig.gen_id())
        tool_gate.release()
    assert results[0].final_output == "Changelog done."
    assert rig.receipt("f1") == ("applied", None)
    assert rig.runtime.pending_follow_ups == 0
    last = [
        i.get("content") for i in model_b.calls[-1].input if isinstance(i, dict) and i.get("role") == "user"
    ]
    assert last.count(STEER) == 1
    assert last[-1] == "Then update the changelog"
    assert (
        rig.steering.to_input_list(results[0]).count({"type": "message", "role": "user", "content": STEER})
        == 1
    )
    rig.history.check(require_final=True).assert_ok()


async def test_cancel_of_a_streamed_result_touches_only_its_own_run() -> None:
    """cancel() of a finished run_streamed() result, while a later run runs, stops nothing of it;
    and a refused second run_streamed() cleaned up with cancel() leaves the first run alone."""
    rig = Rig(answer("A done.", "ma"), tool_step("c1"), answer("B done.", "mb"))
    first = rig.steering.run_streamed(rig.agent, PROMPT, run_config=CONFIG)
    async for _ in first.stream_events():
        pass
    assert first.final_output == "A done."
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await rig.tool_gate.wait_reached()
        await rig.steer()
        first.cancel()  # A ended: nothing to stop
        second = rig.steering.run_streamed(rig.agent, PROMPT, run_config=CONFIG)
        with pytest.raises(GenerationStateError):
            async for _ in second.stream_events():
                pass
        second.cancel()  # refused: it owns no generation
        assert second.current is None
        rig.tool_gate.release()
    assert rig.outputs == ["B done."]
    assert rig.receipt("s1") == ("applied", None)
    assert first.final_output == "A done."  # B's run did not replace A's result
    rig.history.check(require_final=True).assert_ok()


async def test_a_streamed_results_conversation_is_its_own_after_a_later_run() -> None:
    """to_input_list() of a run_streamed() result keeps its own steers after another run of the
    same LiveSteering (it spliced the last run's)."""
    rig = Rig(tool_step("c1"), answer("A done.", "ma"), answer("B done.", "mb"))
    first = rig.steering.run_streamed(rig.agent, PROMPT, run_config=CONFIG)

    async def stream_a() -> None:
        async for _ in first.stream_events():
            pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(stream_a)
        await rig.tool_gate.wait_reached()
        await rig.steer("sa", "steer of run A")
        rig.tool_gate.release()
    before = first.to_input_list()
    await rig.run()  # another run of the same LiveSteering, with no steer of its own
    assert rig.outputs == ["B done."]
    assert first.to_input_list() == before
    users = [i["content"] for i in before if isinstance(i, dict) and i.get("role") == "user"]
    assert users == [PROMPT, "steer of run A"]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"agent": None}, TypeError),
        ({"input": 42}, TypeError),
        ({"max_turns": "3"}, TypeError),
        ({"max_turns": True}, TypeError),
        ({"max_turns": 0}, ValueError),
        ({"hooks": "x"}, TypeError),
        ({"nonsense": 1}, TypeError),
    ],
)
async def test_bad_arguments_are_refused_before_a_generation_opens(
    kwargs: dict[str, Any], error: type[Exception]
) -> None:
    """run(), run_streamed() and stream() refuse what the SDK could not run with a typed error,
    before generation.started (they failed from inside the run, mostly as AttributeError)."""
    rig = Rig(answer("unused"))
    call: dict[str, Any] = {"agent": rig.agent, "input": PROMPT, "run_config": CONFIG, **kwargs}
    agent, prompt = call.pop("agent"), call.pop("input")
    with pytest.raises(error):
        await rig.steering.run(agent, prompt, **call)
    with pytest.raises(error):
        rig.steering.run_streamed(agent, prompt, **call)
    with pytest.raises(error):
        async for _ in rig.steering.stream(agent, prompt, **call):
            pass
    assert rig.history.events == []
    assert rig.model.calls == ()


@pytest.mark.parametrize("when", ["before", "at"])
async def test_nest_handoff_history_is_a_rewrite(when: str) -> None:
    """The SDK's ``nest_handoff_history`` folds the history into a summary at a handoff, built from
    its own items: a steer written before the handoff has no place in it, so the run fails with
    ``SteeringHistoryError`` rather than send the receiving agent a history without it; a steer
    pending at the handoff is written into the receiving agent's history, once per call."""
    rig = Rig()

    @function_tool
    async def lookup() -> str:
        """Look something up."""
        if when == "before":
            await rig.steer()
        return "looked up"

    model_b = ScriptedModel([answer("B checked.", "mc")])
    agent_b: Agent[Any] = Agent(name="b", model=model_b)
    to_b = handoff(agent_b)

    async def hand_off(_call: ModelCall) -> list[Any]:
        if when == "at":
            await rig.steer()
        return [function_call(to_b.tool_name, {}, call_id="h1")]

    model_a = ScriptedModel([[function_call("lookup", {}, call_id="ca")], ModelStep.respond(hand_off)])
    agent_a: Agent[Any] = Agent(name="a", model=model_a, tools=[lookup], handoffs=[to_b])
    config = RunConfig(tracing_disabled=True, nest_handoff_history=True)

    def users(call: ModelCall) -> list[Any]:
        return [i.get("content") for i in call.input if isinstance(i, dict) and i.get("role") == "user"]

    if when == "before":
        with pytest.raises(SteeringHistoryError, match="nest_handoff_history"):
            await rig.steering.run(agent_a, PROMPT, run_config=config)
        assert users(model_a.calls[-1]).count(STEER) == 1  # the first agent's model read it
        assert rig.receipt("s1") == ("applied", None)
        assert not model_b.calls  # no call went out with a history that lost it
        assert rig.history.events[-1]["type"] == "generation.failed"
    else:
        result = await rig.steering.run(agent_a, PROMPT, run_config=config)
        assert result.final_output == "B checked."
        assert result.last_agent is agent_b
        assert [users(call).count(STEER) for call in model_b.calls] == [1]
        assert rig.receipt("s1") == ("applied", None)
    rig.history.check(require_final=True).assert_ok()
