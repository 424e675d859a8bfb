"""The pydantic-ai capability, driven by pydantic-ai's own test models (``FunctionModel``, ``TestModel``).

pydantic-ai runs on asyncio, so these tests do too. Races are sequences: the model
function and the tools wait at ``Gate``s the test releases.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic_ai import Agent, DeferredToolRequests, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import UsageLimits

from fleet_helpers import final_receipt, owned_elsewhere, steer_then_stop
from live_steering import GenerationStateError, Input, LiveRuntime, Receipt
from live_steering.integrations.pydantic_ai import (
    SKIPPED_TOOL_RESULT,
    STOPPED_TOOL_RESULT,
    LiveSteering,
    RunStopped,
)
from live_steering.testing import Gate, History

STEER = "Only fix the failing test"
PROMPT = "Make the suite pass"


@pytest.fixture
def anyio_backend() -> str:
    """pydantic-ai runs on asyncio only."""
    return "asyncio"


pytestmark = pytest.mark.anyio


def steer_texts(messages: list[ModelMessage]) -> list[str]:
    """The text of every user prompt part after the first (the prompt), in order."""
    texts = [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    ]
    return texts[1:]


class Script:
    """A ``FunctionModel`` function: replies in order, records what each request carried, gateable."""

    def __init__(self, *replies: ModelResponse | BaseException) -> None:
        self.replies = list(replies)
        self.requests: list[list[ModelMessage]] = []
        self.gates: dict[int, Gate] = {}

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        index = len(self.requests)
        self.requests.append(list(messages))
        if index in self.gates:
            await self.gates[index].passage()
        reply = self.replies[index]
        if isinstance(reply, BaseException):
            raise reply
        return reply


def calls_tool() -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart("run_tests", {})])


def answers(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)])


class Rig:
    """An agent with the capability, a gated ``run_tests`` tool and a recorded history."""

    def __init__(self, script: Script) -> None:
        self.runtime = LiveRuntime()
        self.history = History.attach(self.runtime)
        self.script = script
        self.agent = Agent(FunctionModel(script), capabilities=[LiveSteering(self.runtime)])
        self.tool_gate = Gate()
        self.outputs: list[Any] = []
        self.messages: list[ModelMessage] = []

        @self.agent.tool_plain
        async def run_tests() -> str:
            """Run the test suite."""
            await self.tool_gate.passage()
            return "12 passed, 1 failed"

    async def run(self, **kwargs: Any) -> None:
        result = await self.agent.run(PROMPT, **kwargs)
        self.outputs.append(result.output)
        self.messages = result.all_messages()

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


async def test_steer_during_a_tool_call_lands_in_the_next_model_request() -> None:
    """A steer sent while a tool runs is in the next model request, once, with its metadata in history."""
    rig = Rig(Script(calls_tool(), answers("Fixed it.")))
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await rig.tool_gate.wait_reached()
        gen_id = rig.gen_id()
        assert (await rig.steer()).disposition == "queued"
        rig.tool_gate.release()
    assert steer_texts(rig.script.requests[0]) == []
    assert steer_texts(rig.script.requests[1]) == [STEER]
    assert rig.outputs == ["Fixed it."]
    assert rig.receipt("s1") == ("applied", None)
    entries = [m for m in rig.messages if isinstance(m, ModelRequest) and m.metadata]
    assert len(entries) == 1
    assert entries[0].metadata is not None
    assert entries[0].metadata["input_id"] == "s1"
    assert entries[0].metadata["target_generation_id"] == gen_id
    rig.history.check(require_final=True).assert_ok()


async def test_steers_stay_in_order_and_once_in_every_later_request() -> None:
    """Two steers land in admission order and each is in every later request exactly once."""
    rig = Rig(Script(calls_tool(), calls_tool(), answers("Done.")))
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await rig.tool_gate.wait_reached()
        await rig.steer("s1", "first")
        await rig.steer("s2", "second")
        rig.tool_gate.release()
    assert steer_texts(rig.script.requests[1]) == ["first", "second"]
    assert steer_texts(rig.script.requests[2]) == ["first", "second"]
    assert steer_texts(rig.messages) == ["first", "second"]
    rig.history.check(require_final=True).assert_ok()


async def test_late_steer_during_the_final_answer_continues_the_same_run() -> None:
    """A steer sent while the model writes its final answer continues the same run and generation."""
    script = Script(answers("Done."), answers("Done, only the failing test."))
    rig = Rig(script)
    gate = script.gates[0] = Gate()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        gen_id = rig.gen_id()
        await rig.steer()
        gate.release()
    assert rig.outputs == ["Done, only the failing test."]
    assert len(script.requests) == 2
    assert steer_texts(script.requests[1]) == [STEER]
    assert steer_texts(rig.messages).count(STEER) == 1
    prompts = [p for m in rig.messages if isinstance(m, ModelRequest) for p in m.parts]
    assert [p.content for p in prompts if isinstance(p, UserPromptPart)].count(PROMPT) == 1  # no replay
    types = [e["type"] for e in rig.history.events]
    assert types.count("generation.started") == 1
    assert types.count("generation.continued") == 1
    assert rig.history.events[-1]["type"] == "generation.finished"
    assert rig.history.events[-1]["generation_id"] == gen_id
    rig.history.check(require_final=True).assert_ok()


async def test_cancel_holds_the_pending_steer() -> None:
    """Cancelling the run holds a queued steer (generation-cancelled); the next run does not carry it."""
    rig = Rig(Script(calls_tool(), answers("unused"), answers("Next.")))
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await rig.tool_gate.wait_reached()
        await rig.steer()
        tg.cancel_scope.cancel()
    assert rig.receipt("s1") == ("held", "generation-cancelled")
    assert rig.history.events[-1]["type"] == "generation.cancelled"
    assert rig.history.events[-1]["accepted_input_ids"] == ["s1"]
    rig.script.replies = rig.script.replies[2:]
    rig.script.requests.clear()
    rig.tool_gate.release()
    await rig.run()
    assert steer_texts(rig.script.requests[0]) == []
    assert rig.outputs == ["Next."]
    rig.history.check(require_final=True).assert_ok()


async def test_a_provider_error_fails_the_generation() -> None:
    """A model error fails the run and the generation (generation.failed); a pending steer is held."""
    script = Script(calls_tool(), RuntimeError("provider down"))
    rig = Rig(script)
    gate = script.gates[1] = Gate()

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
    assert rig.history.events[-1]["error"] == "RuntimeError"
    rig.history.check(require_final=True).assert_ok()


async def test_an_exhausted_request_limit_holds_as_budget_exhausted() -> None:
    """pydantic-ai's request limit, spent with a steer pending, holds it budget-exhausted, not failed."""
    rig = Rig(Script(calls_tool(), answers("unused")))

    async def drive() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: rig.run(usage_limits=UsageLimits(request_limit=1)))
            await rig.tool_gate.wait_reached()
            await rig.steer()
            rig.tool_gate.release()

    with pytest.raises(ExceptionGroup):
        await drive()
    assert rig.receipt("s1") == ("held", "budget-exhausted")
    # The run raised UsageLimitExceeded, so the generation failed; the steer was held by the budget first.
    assert rig.history.events[-1]["type"] == "generation.failed"
    assert rig.history.events[-1]["error"] == "UsageLimitExceeded"
    rig.history.check(require_final=True).assert_ok()


async def test_with_test_model_and_no_deprecation_warning() -> None:
    """pydantic-ai's TestModel runs the agent with the capability, and nothing warns (no deprecation)."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    agent = Agent(TestModel(), capabilities=[LiveSteering(runtime)])
    receipts: list[Receipt] = []

    @agent.tool_plain
    async def run_tests() -> str:
        """Run the test suite."""
        generation = runtime.generation
        assert generation is not None
        receipts.append(await history.submit(Input("steer", STEER, id="t1"), generation["id"]))
        return "12 passed"

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = await agent.run(PROMPT)
    assert [str(w.message) for w in caught] == []
    assert receipts[0].disposition == "queued"
    assert steer_texts(result.all_messages()) == [STEER]
    assert runtime.receipt("t1").disposition == "applied"  # type: ignore[union-attr]
    history.check(require_final=True).assert_ok()


async def test_one_run_at_a_time_per_runtime() -> None:
    """A second concurrent run on the same runtime raises GenerationStateError; the first is untouched."""
    script = Script(answers("First."))
    rig = Rig(script)
    gate = script.gates[0] = Gate()
    second: list[BaseException] = []

    async def run_second() -> None:
        try:
            await rig.agent.run("another prompt")
        except GenerationStateError as error:
            second.append(error)

    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        await run_second()
        gate.release()
    assert len(second) == 1
    assert rig.outputs == ["First."]


def test_needs_a_live_runtime() -> None:
    """LiveSteering refuses anything but a LiveRuntime, at construction."""
    wrong: Callable[..., Any] = LiveSteering
    with pytest.raises(TypeError, match="LiveRuntime"):
        wrong(object())


async def test_run_stream_cancels_a_continuation_when_its_block_is_left() -> None:
    """run_stream() ends at the first output: a late steer continues, then leaving the block cancels it."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    agent = Agent(TestModel(custom_output_text="First."), capabilities=[LiveSteering(runtime)])
    async with agent.run_stream(PROMPT) as stream:
        generation = runtime.generation
        assert generation is not None
        late = await history.submit(Input("steer", STEER, id="late"), generation["id"])
        output = await stream.get_output()
    assert (late.disposition, output) == ("queued", "First.")
    types = [e["type"] for e in history.events]
    assert types[-4:] == [
        "generation.continued",
        "input.delivered",
        "steering.applied",
        "generation.cancelled",
    ]
    history.check(require_final=True).assert_ok()


# -- how a run ends: host stop, follow-ups, skipped tool batches --------------------------


def tool_returns(messages: list[ModelMessage]) -> list[tuple[str, Any]]:
    """Every tool return in a history: (tool_call_id, content), in order."""
    return [
        (part.tool_call_id, part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


async def stopped_run(rig: Rig, during: Callable[[], Any], **kwargs: Any) -> RunStopped:
    """Run the rig's agent while ``during`` (a coroutine function) stops it; the RunStopped it raised."""
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


async def test_host_stop_during_a_tool_ends_the_run_before_the_next_model_request() -> None:
    """runtime.stop(gid) while a tool runs: the tool finishes, no model request follows, the run
    raises RunStopped with its history, the pending steer is held and the stream ends stopped."""
    rig = Rig(Script(calls_tool(), answers("never sent")))

    async def during() -> None:
        await rig.tool_gate.wait_reached()
        gen_id = rig.gen_id()
        await rig.steer()
        assert rig.runtime.stop(gen_id) is True
        rig.tool_gate.release()

    stopped = await stopped_run(rig, during)
    assert len(rig.script.requests) == 1
    assert stopped.reason == "generation-stopped"
    assert stopped.history is not None
    call = rig.script.replies[0]
    assert isinstance(call, ModelResponse)
    assert isinstance(call.parts[0], ToolCallPart)
    assert tool_returns(stopped.history) == [(call.parts[0].tool_call_id, "12 passed, 1 failed")]
    assert rig.receipt("s1") == ("held", "generation-stopped")
    assert rig.history.events[-1]["type"] == "generation.stopped"
    assert rig.history.events[-1]["generation_id"] == stopped.generation_id
    rig.history.check(require_final=True).assert_ok()


async def test_host_stop_during_a_model_request_starts_none_of_its_tool_calls() -> None:
    """A stop while the model answers with two tool calls: neither tool runs, each call gets
    STOPPED_TOOL_RESULT (a valid transcript), and no further model request is made."""
    two_calls = ModelResponse(parts=[ToolCallPart("run_tests", {}, tool_call_id=i) for i in ("a", "b")])
    script = Script(two_calls, answers("never sent"))
    rig = Rig(script)
    gate = script.gates[0] = Gate()

    async def during() -> None:
        await gate.wait_reached()
        rig.runtime.stop(rig.gen_id())
        gate.release()

    stopped = await stopped_run(rig, during)
    assert not rig.tool_gate.reached
    assert len(script.requests) == 1
    assert stopped.history is not None
    assert tool_returns(stopped.history) == [("a", STOPPED_TOOL_RESULT), ("b", STOPPED_TOOL_RESULT)]
    assert rig.history.events[-1]["type"] == "generation.stopped"
    rig.history.check(require_final=True).assert_ok()


async def test_host_stop_during_the_final_answer_raises_instead_of_continuing() -> None:
    """A stop while the model writes its final answer: the run raises RunStopped (the answer is in
    its history), a steer sent before the stop is held, nothing continues."""
    script = Script(answers("Done."), answers("never sent"))
    rig = Rig(script)
    gate = script.gates[0] = Gate()

    async def during() -> None:
        await gate.wait_reached()
        await rig.steer()
        rig.runtime.stop(rig.gen_id())
        gate.release()

    stopped = await stopped_run(rig, during)
    assert len(script.requests) == 1
    assert stopped.history is not None
    assert isinstance(stopped.history[-1], ModelResponse)
    assert rig.receipt("s1") == ("held", "generation-stopped")
    assert "generation.continued" not in [e["type"] for e in rig.history.events]
    rig.history.check(require_final=True).assert_ok()


async def test_a_follow_up_is_the_next_turn_of_the_same_run() -> None:
    """A follow-up sent during a tool is not in that generation's requests: when it finishes, the same
    agent run opens the next generation, whose first request carries the follow-up (delivery follow_up)."""
    rig = Rig(Script(calls_tool(), answers("Fixed."), answers("Changelog updated.")))

    async def during() -> None:
        await rig.tool_gate.wait_reached()
        first = rig.gen_id()
        receipt = await rig.history.submit(Input("follow_up", "Then update the changelog", id="f1"), first)
        assert receipt.disposition == "queued"
        rig.tool_gate.release()

    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await during()
    assert [steer_texts(r) for r in rig.script.requests] == [[], [], ["Then update the changelog"]]
    assert rig.outputs == ["Changelog updated."]
    assert rig.receipt("f1") == ("applied", None)
    events = rig.history.events
    starts = [e["generation_id"] for e in events if e["type"] == "generation.started"]
    assert len(starts) == 2
    assert [e["type"] for e in events if e["type"].startswith("generation.")] == [
        "generation.started",
        "generation.finished",
        "generation.started",
        "generation.finished",
    ]
    applied = next(e for e in events if e["type"] == "steering.applied")
    assert (applied["delivery"], applied["target_generation_id"]) == ("follow_up", starts[1])
    follow = next(m for m in rig.messages if isinstance(m, ModelRequest) and m.metadata)
    assert follow.metadata is not None
    assert follow.metadata["kind"] == "follow_up"
    rig.history.check(require_final=True).assert_ok()


async def test_a_stop_discards_the_follow_up() -> None:
    """A host stop of the anchor generation holds its follow-up (generation-stopped): it never runs."""
    rig = Rig(Script(calls_tool(), answers("never sent")))

    async def during() -> None:
        await rig.tool_gate.wait_reached()
        await rig.history.submit(Input("follow_up", "Then update the changelog", id="f1"), rig.gen_id())
        rig.runtime.stop(rig.gen_id())
        rig.tool_gate.release()

    await stopped_run(rig, during)
    assert len(rig.script.requests) == 1
    assert rig.receipt("f1") == ("held", "generation-stopped")
    rig.history.check(require_final=True).assert_ok()


async def test_run_follow_ups_false_leaves_the_follow_up_to_the_next_run() -> None:
    """With run_follow_ups=False the run returns after its own generation; the caller's next run writes it."""
    script = Script(calls_tool(), answers("Fixed."), answers("Changelog updated."))
    rig = Rig(script)
    rig.agent = Agent(FunctionModel(script), capabilities=[LiveSteering(rig.runtime, run_follow_ups=False)])

    @rig.agent.tool_plain
    def run_tests() -> str:
        """Run the test suite."""
        return "12 passed"

    script.gates[0] = gate = Gate()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        await rig.history.submit(Input("follow_up", "Then update the changelog", id="f1"), rig.gen_id())
        gate.release()
    assert rig.outputs == ["Fixed."]
    assert rig.receipt("f1") == ("queued", None)
    assert rig.runtime.pending_follow_ups == 1
    await rig.run()
    assert steer_texts(script.requests[2]) == ["Then update the changelog"]
    assert rig.receipt("f1") == ("applied", None)
    rig.history.check(require_final=True).assert_ok()


async def test_skip_tools_on_steer_answers_the_rest_of_the_batch() -> None:
    """skip_tools_on_steer: a steer during the first of three tool calls; the other two are answered
    with SKIPPED_TOOL_RESULT without running, tools.skipped names them, the next request has the steer."""
    three = ModelResponse(parts=[ToolCallPart("run_tests", {}, tool_call_id=i) for i in ("a", "b", "c")])
    script = Script(three, answers("Only the failing test."))
    runtime = LiveRuntime()
    history = History.attach(runtime)
    agent = Agent(FunctionModel(script), capabilities=[LiveSteering(runtime, skip_tools_on_steer=True)])
    gate = Gate()
    ran: list[str] = []

    @agent.tool
    async def run_tests(ctx: RunContext[None]) -> str:
        """Run the test suite."""
        ran.append(str(ctx.tool_call_id))
        await gate.passage()
        return "12 passed, 1 failed"

    results: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            results.append(await agent.run(PROMPT))

        tg.start_soon(run)
        await gate.wait_reached()
        generation = runtime.generation
        assert generation is not None
        await history.submit(Input("steer", STEER, id="s1"), generation["id"])
        gate.release()
    assert ran == ["a"]
    returns = tool_returns(results[0].all_messages())
    assert returns == [("a", "12 passed, 1 failed"), ("b", SKIPPED_TOOL_RESULT), ("c", SKIPPED_TOOL_RESULT)]
    skipped = [e for e in history.events if e["type"] == "tools.skipped"]
    assert [i for e in skipped for i in e["tool_call_ids"]] == ["b", "c"]
    assert all(e["input_ids"] == ["s1"] for e in skipped)
    assert steer_texts(script.requests[1]) == [STEER]
    history.check(require_final=True).assert_ok()


async def test_without_skip_tools_on_steer_the_whole_batch_runs() -> None:
    """By default (skip_tools_on_steer off) a pending steer does not skip any tool call."""
    three = ModelResponse(parts=[ToolCallPart("run_tests", {}, tool_call_id=i) for i in ("a", "b", "c")])
    rig = Rig(Script(three, answers("Done.")))
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await rig.tool_gate.wait_reached()
        await rig.steer()
        rig.tool_gate.release()
    assert [content for _, content in tool_returns(rig.messages)] == ["12 passed, 1 failed"] * 3
    assert "tools.skipped" not in [e["type"] for e in rig.history.events]
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.parametrize("kind", ["steer", "follow_up"])
async def test_a_run_paused_for_deferred_tools_ends_the_generation(kind: str) -> None:
    """A tool needing approval pauses the run (DeferredToolRequests output): the generation ends, a steer
    or a follow-up sent meanwhile is held generation-stopped (a follow-up is not carried into the
    caller's next run, C29), and the run returns without a continuation."""
    script = Script(ModelResponse(parts=[ToolCallPart("deploy", {}, tool_call_id="d1")]), answers("unused"))
    runtime = LiveRuntime()
    history = History.attach(runtime)
    agent = Agent(
        FunctionModel(script), output_type=[str, DeferredToolRequests], capabilities=[LiveSteering(runtime)]
    )

    @agent.tool_plain(requires_approval=True)
    def deploy() -> str:
        """Deploy the fix."""
        return "deployed"

    gate = script.gates[0] = Gate()
    results: list[Any] = []

    async def run() -> None:
        results.append(await agent.run(PROMPT))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await gate.wait_reached()
        generation = runtime.generation
        assert generation is not None
        await history.submit(Input(kind, STEER, id="s1"), generation["id"])
        gate.release()
    assert isinstance(results[0].output, DeferredToolRequests)
    assert runtime.pending_follow_ups == 0
    assert len(script.requests) == 1
    held = runtime.receipt("s1")
    assert held is not None
    assert (held.disposition, held.reason) == ("held", "generation-stopped")
    assert history.events[-1]["type"] == "generation.stopped"
    history.check(require_final=True).assert_ok()


async def test_cancelling_the_follow_up_turn_cancels_its_generation() -> None:
    """Cancelled during the follow-up's turn: the first generation stays finished, the follow-up's own
    generation ends cancelled, and a steer sent to it is held generation-cancelled."""
    script = Script(answers("Fixed."), answers("unused"))
    rig = Rig(script)
    first_gate, second_gate = script.gates[0], script.gates[1] = Gate(), Gate()
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
    the pydantic-ai run raises RunStopped after its running tool, with no further model request,
    and the steer the host sent is held."""
    script = Script(calls_tool(), answers("never sent"))
    async with owned_elsewhere(str(tmp_path / "fleet.db"), "chat-1") as (owner, host, runtime):
        agent = Agent(FunctionModel(script), capabilities=[LiveSteering(runtime)])
        gate = Gate()
        caught: list[RunStopped] = []

        @agent.tool_plain
        async def run_tests() -> str:
            """Run the test suite."""
            await gate.passage()
            return "12 passed"

        async def run() -> None:
            with pytest.raises(RunStopped) as error:
                await agent.run(PROMPT)
            caught.append(error.value)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await gate.wait_reached()
            generation = runtime.generation
            assert generation is not None
            await steer_then_stop(owner, host, "chat-1", generation["id"], Input("steer", STEER, id="s1"))
            gate.release()
        assert await final_receipt(host, "chat-1", "s1") == ("held", "generation-stopped")
        assert len(caught) == 1
        assert len(script.requests) == 1


async def test_host_stop_ends_an_iter_run_the_same_way() -> None:
    """agent.iter(): a host stop during a tool ends the iteration with RunStopped, no request follows."""
    script = Script(calls_tool(), answers("never sent"))
    rig = Rig(script)
    caught: list[RunStopped] = []

    async def iterate() -> None:
        async with rig.agent.iter(PROMPT) as agent_run:
            async for _node in agent_run:
                pass

    async def run() -> None:
        with pytest.raises(RunStopped) as error:
            await iterate()
        caught.append(error.value)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await rig.tool_gate.wait_reached()
        rig.runtime.stop(rig.gen_id())
        rig.tool_gate.release()
    assert len(caught) == 1
    assert len(script.requests) == 1
    assert rig.history.events[-1]["type"] == "generation.stopped"
    rig.history.check(require_final=True).assert_ok()


async def test_one_at_a_time_writes_one_steer_per_request_and_continues_for_the_rest() -> None:
    """steering_mode="one-at-a-time" (C30): two steers sent during a tool land one per model request;
    the second continues the same generation after the final answer instead of being dropped."""
    script = Script(calls_tool(), answers("First."), answers("Second."))
    runtime = LiveRuntime(steering_mode="one-at-a-time")
    history = History.attach(runtime)
    agent = Agent(FunctionModel(script), capabilities=[LiveSteering(runtime)])
    gate = Gate()

    @agent.tool_plain
    async def run_tests() -> str:
        """Run the test suite."""
        await gate.passage()
        return "12 passed"

    results: list[Any] = []

    async def run() -> None:
        results.append(await agent.run(PROMPT))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await gate.wait_reached()
        generation = runtime.generation
        assert generation is not None
        await history.submit(Input("steer", "first", id="s1"), generation["id"])
        await history.submit(Input("steer", "second", id="s2"), generation["id"])
        gate.release()
    assert [steer_texts(r) for r in script.requests] == [[], ["first"], ["first", "second"]]
    assert results[0].output == "Second."
    assert [e["type"] for e in history.events].count("generation.continued") == 1
    history.check(require_final=True).assert_ok()


async def test_one_at_a_time_writes_one_steer_per_request_also_for_three() -> None:
    """Three steers during a tool, steering_mode="one-at-a-time": one per model request (the
    checkpoint's boundary and the redirected request's own wrote two into one request)."""
    script = Script(calls_tool(), answers("1."), answers("2."), answers("3."))
    runtime = LiveRuntime(steering_mode="one-at-a-time")
    history = History.attach(runtime)
    agent = Agent(FunctionModel(script), capabilities=[LiveSteering(runtime)])
    gate = Gate()

    @agent.tool_plain
    async def run_tests() -> str:
        """Run the test suite."""
        await gate.passage()
        return "12 passed"

    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.run, PROMPT)
        await gate.wait_reached()
        generation = runtime.generation
        assert generation is not None
        for n in range(3):
            await history.submit(Input("steer", f"S{n}", id=f"s{n}"), generation["id"])
        gate.release()
    assert [steer_texts(r) for r in script.requests] == [[], ["S0"], ["S0", "S1"], ["S0", "S1", "S2"]]
    history.check(require_final=True).assert_ok()


@pytest.mark.parametrize("kind", ["steer", "follow_up"])
async def test_a_request_limit_spent_at_the_checkpoint_holds_instead_of_applying(kind: str) -> None:
    """UsageLimits(request_limit=1) and a steer (or a follow-up) sent during the final answer: no
    request can carry it, so it is held budget-exhausted before anything is written or a
    continuation announced (C17); the run returns its output. It was 'applied' and then lost."""
    script = Script(answers("Done."), answers("unused"))
    rig = Rig(script)
    gate = script.gates[0] = Gate()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: rig.run(usage_limits=UsageLimits(request_limit=1)))
        await gate.wait_reached()
        await rig.history.submit(Input(kind, STEER, id="x1"), rig.gen_id())
        gate.release()
    assert rig.outputs == ["Done."]
    assert len(script.requests) == 1
    assert rig.receipt("x1") == ("held", "budget-exhausted")
    types = [e["type"] for e in rig.history.events]
    assert "generation.continued" not in types
    assert types[-1] == "generation.stopped"
    rig.history.check(require_final=True).assert_ok()


def test_run_stopped_refuses_arguments_of_the_wrong_type() -> None:
    """RunStopped(generation_id, reason, history): str, str, a list or None (a TypeError otherwise)."""
    assert RunStopped("g", "generation-stopped", []).history == []
    for args in ((1, "generation-stopped"), ("g", 2), ("g", "generation-stopped", "not a list")):
        with pytest.raises(TypeError):
            RunStopped(*args)


async def test_a_steer_sent_while_a_continuation_request_is_prepared_rides_it_in_all_mode() -> None:
    """steering_mode="all": a steer that arrives while the request a continuation redirects into
    is being prepared (a tool's prepare, as an MCP toolset lists its tools) is written into that
    request too, by its own boundary (C13), not one request later."""
    script = Script(answers("Done."), answers("Second."), answers("unused"))
    runtime = LiveRuntime()
    history = History.attach(runtime)
    agent = Agent(FunctionModel(script), capabilities=[LiveSteering(runtime)])
    preparing = Gate()
    prepared: list[int] = []

    async def prepare(ctx: RunContext[Any], tool_def: Any) -> Any:
        prepared.append(1)
        if len(prepared) == 2:  # the redirected request's preparation
            await preparing.passage()
        return tool_def

    @agent.tool_plain(prepare=prepare)
    async def lookup() -> str:
        """Look something up."""
        return "x"

    answering = script.gates[0] = Gate()
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.run, PROMPT)
        await answering.wait_reached()
        generation = runtime.generation
        assert generation is not None
        await history.submit(Input("steer", "S1", id="s1"), generation["id"])
        answering.release()
        await preparing.wait_reached()
        await history.submit(Input("steer", "S2", id="s2"), generation["id"])
        preparing.release()
    assert [steer_texts(r) for r in script.requests] == [[], ["S1", "S2"]]
    history.check(require_final=True).assert_ok()
