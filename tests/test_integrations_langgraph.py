"""The LangGraph integration, driven by langchain-core's fake chat model and LangGraph's own graphs.

LangGraph runs its nodes as asyncio tasks, so these tests run on asyncio. Races are
sequences: the model and the tools wait at ``Gate``s the test releases. The prebuilt
``create_react_agent`` is deprecated in LangGraph 1.x in favour of ``langchain.agents``
(not part of the ``langgraph`` extra); building one warns ``LangGraphDeprecatedSinceV10``,
which ``react_agent`` filters for that one call only.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import anyio
import pytest
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import create_react_agent, tools_condition
from langgraph.types import Command, interrupt
from langgraph.warnings import LangGraphDeprecatedSinceV10
from pydantic import Field

from fleet_helpers import final_receipt, owned_elsewhere, steer_then_stop
from live_steering import GenerationStateError, Input, LiveRuntime, Receipt
from live_steering.integrations.langgraph import (
    METADATA_KEY,
    SKIPPED_TOOL_RESULT,
    STOPPED_TOOL_RESULT,
    LiveSteering,
    SteeringNotWiredError,
)
from live_steering.testing import Gate, History

STEER = "Only fix the failing test"
PROMPT = "Make the suite pass"


@pytest.fixture
def anyio_backend() -> str:
    """LangGraph runs its nodes as asyncio tasks: asyncio only."""
    return "asyncio"


pytestmark = pytest.mark.anyio


class ScriptedModel(FakeMessagesListChatModel):
    """langchain-core's ``FakeMessagesListChatModel``: replies in order; records each request, gateable."""

    requests: list[list[BaseMessage]] = Field(default_factory=list)
    gates: dict[int, Any] = Field(default_factory=dict)
    fail_at: int | None = None

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, AIMessage]:
        return self  # the script already holds the tool calls

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        index = len(self.requests)
        self.requests.append(list(messages))
        gate = self.gates.get(index)
        if gate is not None:
            await gate.passage()
        if index == self.fail_at:
            raise RuntimeError("provider down")
        return ChatResult(generations=[ChatGeneration(message=self.responses[index])])


def calls(*ids: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": "run_tests", "args": {}, "id": i} for i in ids])


def answers(text: str) -> AIMessage:
    return AIMessage(text)


def steers_in(messages: Sequence[BaseMessage]) -> list[str]:
    """The text of every human message carrying steering metadata, in order."""
    return [
        str(m.content)
        for m in messages
        if isinstance(m, HumanMessage) and METADATA_KEY in m.additional_kwargs
    ]


def react_agent(model: Any, tools: Any, steering: LiveSteering, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        # create_react_agent is deprecated in LangGraph 1.x (its successor lives in the
        # `langchain` package, outside the extra); it is what this integration supports.
        warnings.filterwarnings("ignore", category=LangGraphDeprecatedSinceV10, message="create_react_agent")
        return create_react_agent(model, tools, pre_model_hook=steering.pre_model_hook, **kwargs)


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def hand_written_graph(steering: LiveSteering, model: ScriptedModel, tools: list[BaseTool]) -> Any:
    """A ReAct loop as a StateGraph: steering.node on every path into the model node."""

    async def call_model(state: State) -> dict[str, list[BaseMessage]]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("steer", steering.node)
    builder.add_node("model", call_model)
    builder.add_node("tools", steering.tool_node(tools))
    builder.add_edge(START, "steer")
    builder.add_edge("steer", "model")
    builder.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    builder.add_edge("tools", "steer")
    return builder.compile()


def gated_tool(gate: Gate) -> BaseTool:
    """A ``run_tests`` tool that waits at ``gate`` before it answers."""

    @tool
    async def run_tests() -> str:
        """Run the test suite."""
        await gate.passage()
        return "12 passed"

    return run_tests


def quick_tool() -> BaseTool:
    @tool
    async def run_tests() -> str:
        """Run the test suite."""
        return "12 passed"

    return run_tests


class Rig:
    """A prebuilt ReAct agent with the hook, a gated ``run_tests`` tool and a recorded history."""

    def __init__(self, *replies: AIMessage, skip: bool = False, **agent: Any) -> None:
        self.runtime = LiveRuntime()
        self.history = History.attach(self.runtime)
        self.model = ScriptedModel(responses=list(replies))
        self.steering = LiveSteering(self.runtime, skip_tools_on_steer=skip)
        self.tool_gates: dict[int, Gate] = {}
        self.tool_runs: list[str] = []

        @tool
        async def run_tests() -> str:
            """Run the test suite."""
            index = len(self.tool_runs)
            self.tool_runs.append("run")
            gate = self.tool_gates.get(index)
            if gate is not None:
                await gate.passage()
            return "12 passed, 1 failed"

        self.tool: BaseTool = run_tests
        self.agent = react_agent(self.model, self.steering.tool_node([run_tests]), self.steering, **agent)
        self.results: list[Any] = []

    def gate_tool(self, index: int = 0) -> Gate:
        gate = self.tool_gates[index] = Gate()
        return gate

    async def steer_during_the_tool(self, config: Any = None) -> None:
        """Run with ``config``, sending ``s1`` while the first tool call runs (held at a gate)."""
        gate = self.gate_tool()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.run, config)
            await gate.wait_reached()
            await self.steer()
            gate.release()

    def gate_model(self, index: int) -> Gate:
        gate = self.model.gates[index] = Gate()
        return gate

    async def run(self, config: Any = None, prompt: str = PROMPT) -> None:
        self.results.append(await self.steering.ainvoke(self.agent, {"messages": [("user", prompt)]}, config))

    @property
    def messages(self) -> list[BaseMessage]:
        messages: list[BaseMessage] = self.results[-1]["messages"]
        return messages

    def gen_id(self) -> str:
        generation = self.runtime.generation
        assert generation is not None
        gen_id: str = generation["id"]
        return gen_id

    async def steer(self, input_id: str = "s1", text: str = STEER, kind: str = "steer") -> Receipt:
        return await self.history.submit(Input(kind, text, id=input_id), self.gen_id())

    def receipt(self, input_id: str) -> tuple[str | None, str | None]:
        receipt = self.runtime.receipt(input_id)
        assert receipt is not None
        return receipt.disposition, receipt.reason

    def types(self) -> list[str]:
        return [e["type"] for e in self.history.events]


async def test_a_steer_during_a_tool_call_lands_before_the_second_model_call() -> None:
    """A tool-calling loop: a steer sent while the tool runs is in the second model request, applied."""
    rig = Rig(calls("c1"), answers("Fixed it."))
    gate = rig.gate_tool()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        gen_id = rig.gen_id()
        assert (await rig.steer()).disposition == "queued"
        gate.release()
    assert steers_in(rig.model.requests[0]) == []
    assert steers_in(rig.model.requests[1]) == [STEER]
    # after the tool result, before the model: the boundary's place
    assert isinstance(rig.model.requests[1][-2], ToolMessage)
    assert rig.messages[-1].content == "Fixed it."
    assert rig.receipt("s1") == ("applied", None)
    steer = next(m for m in rig.messages if METADATA_KEY in m.additional_kwargs)
    metadata = steer.additional_kwargs[METADATA_KEY]
    assert metadata["input_id"] == "s1"
    assert metadata["target_generation_id"] == gen_id
    assert metadata["delivery"] == "request_boundary"
    assert rig.steering.outcome == "finished"
    assert rig.types()[-1] == "generation.finished"
    rig.history.check(require_final=True).assert_ok()


async def test_steers_stay_in_order_and_once_in_every_later_request() -> None:
    """Two steers land in admission order, and each is in every later model request exactly once."""
    rig = Rig(calls("c1"), calls("c2"), answers("Done."))
    gate = rig.gate_tool()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        await rig.steer("s1", "first")
        await rig.steer("s2", "second")
        gate.release()
    assert steers_in(rig.model.requests[1]) == ["first", "second"]
    assert steers_in(rig.model.requests[2]) == ["first", "second"]
    assert steers_in(rig.messages) == ["first", "second"]
    rig.history.check(require_final=True).assert_ok()


async def test_a_late_steer_during_the_final_answer_continues_the_same_generation() -> None:
    """A steer sent while the model writes its final answer continues the same generation, no replay."""
    rig = Rig(answers("Done."), answers("Done, only the failing test."))
    gate = rig.gate_model(0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        gen_id = rig.gen_id()
        await rig.steer()
        gate.release()
    assert len(rig.model.requests) == 2
    assert steers_in(rig.model.requests[1]) == [STEER]
    assert [m.content for m in rig.model.requests[1]].count(PROMPT) == 1  # the prompt is not replayed
    assert rig.messages[-1].content == "Done, only the failing test."
    assert steers_in(rig.messages) == [STEER]
    types = rig.types()
    assert types.count("generation.started") == 1
    assert types.count("generation.continued") == 1
    assert rig.history.events[-1]["type"] == "generation.finished"
    assert rig.history.events[-1]["generation_id"] == gen_id
    rig.history.check(require_final=True).assert_ok()


async def test_a_continuation_on_a_checkpointed_thread_adds_nothing_twice() -> None:
    """With a checkpointer, the continuation runs on the thread's own state: every message once."""
    rig = Rig(answers("Done."), answers("Done, only the failing test."), checkpointer=InMemorySaver())
    gate = rig.gate_model(0)
    config = {"configurable": {"thread_id": "t1"}}
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run, config)
        await gate.wait_reached()
        await rig.steer()
        gate.release()
    contents = [m.content for m in rig.messages]
    assert contents == [PROMPT, "Done.", STEER, "Done, only the failing test."]
    state = await rig.agent.aget_state(config)
    assert [m.content for m in state.values["messages"]] == contents
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.parametrize("entry", ["ainvoke", "astream"])
async def test_a_run_from_an_earlier_checkpoint_continues_and_follows_up_on_its_own_branch(
    entry: str,
) -> None:
    """LangGraph's time travel: a run from an earlier checkpoint of a thread (``checkpoint_id`` in
    its config, as ``aget_state_history`` gives it) that finishes with a steer and a follow-up
    pending continues the same generation and then runs the follow-up, as any run does (C16,
    C29), on the branch that run wrote: not held as paused (the earlier checkpoint's next nodes
    are not the thread's), and not forked from the earlier checkpoint again."""
    rig = Rig(answers("First."), answers("Forked."), answers("Forked, steered."), answers("Followed."))
    rig.agent = react_agent(
        rig.model, rig.steering.tool_node([rig.tool]), rig.steering, checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t1"}}
    await rig.run(config)
    history = [snapshot async for snapshot in rig.agent.aget_state_history(config)]
    fork = next(s for s in reversed(history) if s.next and len(s.values.get("messages", [])) == 1)
    assert "checkpoint_id" in fork.config["configurable"]
    gate = rig.gate_model(1)

    async def from_the_fork() -> None:
        if entry == "ainvoke":
            await rig.steering.ainvoke(rig.agent, None, fork.config)
        else:
            async for _ in rig.steering.astream(rig.agent, None, fork.config):
                pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(from_the_fork)
        await gate.wait_reached()
        await rig.steer("s1", STEER)
        await rig.steer("f1", "Then update the changelog", kind="follow_up")
        gate.release()
    assert (rig.receipt("s1"), rig.receipt("f1")) == (("applied", None), ("applied", None))
    assert rig.steering.outcome == "finished"
    assert len(rig.model.requests) == 4
    # the continuation is on the fork's branch: its answer, then the steer; the first run's is not there
    assert [m.content for m in rig.model.requests[2]] == [PROMPT, "Forked.", STEER]
    state = await rig.agent.aget_state(config)
    assert [m.content for m in state.values["messages"]] == [
        PROMPT,
        "Forked.",
        STEER,
        "Forked, steered.",
        "Then update the changelog",
        "Followed.",
    ]
    rig.history.check(require_final=True).assert_ok()


async def test_a_host_stop_during_a_tool_call_ends_the_run_before_the_next_model_call() -> None:
    """runtime.stop(gid) while a tool runs: the tool completes, no further model call, the state returned."""
    rig = Rig(calls("c1"), answers("never asked"))
    gate = rig.gate_tool()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        await rig.steer()
        assert rig.runtime.stop(rig.gen_id()) is True
        gate.release()
    assert len(rig.model.requests) == 1
    assert rig.tool_runs == ["run"]  # the running tool was not interrupted
    assert isinstance(rig.messages[-1], ToolMessage)
    assert rig.messages[-1].content == "12 passed, 1 failed"
    assert rig.steering.outcome == "stopped"
    assert rig.receipt("s1") == ("held", "generation-stopped")
    assert rig.history.events[-1]["type"] == "generation.stopped"
    assert rig.history.events[-1]["accepted_input_ids"] == ["s1"]
    rig.history.check(require_final=True).assert_ok()


async def test_a_fleet_stop_from_another_node_ends_the_run(tmp_path: Path) -> None:
    """A host on another fleet node stops the run by generation id (the path the HTTP stop takes):
    the running tool completes, no further model call, ainvoke returns, the steer is held."""
    async with owned_elsewhere(str(tmp_path / "fleet.db"), "chat-1") as (owner, host, runtime):
        rig = Rig(calls("c1"), answers("never asked"))
        rig.runtime, rig.history = runtime, History.attach(runtime)
        rig.steering = LiveSteering(runtime)
        rig.agent = react_agent(rig.model, rig.steering.tool_node([rig.tool]), rig.steering)
        gate = rig.gate_tool()
        async with anyio.create_task_group() as tg:
            tg.start_soon(rig.run)
            await gate.wait_reached()
            await steer_then_stop(owner, host, "chat-1", rig.gen_id(), Input("steer", STEER, id="s1"))
            gate.release()
        assert await final_receipt(host, "chat-1", "s1") == ("held", "generation-stopped")
    assert len(rig.model.requests) == 1
    assert rig.tool_runs == ["run"]
    assert isinstance(rig.messages[-1], ToolMessage)
    assert steers_in(rig.messages) == []
    assert rig.steering.outcome == "stopped"
    assert rig.history.events[-1]["type"] == "generation.stopped"


async def test_a_stop_during_the_model_call_starts_no_tool_and_answers_every_call() -> None:
    """A stop while the model asks for tools: no tool starts, each call gets the stopped result."""
    rig = Rig(calls("c1", "c2"), answers("never asked"))
    gate = rig.gate_model(0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        assert rig.steering.stop() is True
        gate.release()
    assert rig.tool_runs == []
    assert len(rig.model.requests) == 1
    results = [m for m in rig.messages if isinstance(m, ToolMessage)]
    assert [(m.tool_call_id, m.content) for m in results] == [
        ("c1", STOPPED_TOOL_RESULT),
        ("c2", STOPPED_TOOL_RESULT),
    ]
    assert rig.steering.outcome == "stopped"
    assert rig.history.events[-1]["type"] == "generation.stopped"
    rig.history.check(require_final=True).assert_ok()


async def test_cancel_holds_the_pending_steer() -> None:
    """Cancelling the run holds a queued steer (generation-cancelled); the next run does not carry it."""
    rig = Rig(calls("c1"), answers("unused"), answers("Next."))
    gate = rig.gate_tool()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        await rig.steer()
        tg.cancel_scope.cancel()
    assert rig.receipt("s1") == ("held", "generation-cancelled")
    assert rig.history.events[-1]["type"] == "generation.cancelled"
    assert rig.history.events[-1]["accepted_input_ids"] == ["s1"]
    rig.model.responses = rig.model.responses[2:]
    rig.model.requests.clear()
    gate.release()
    await rig.run()
    assert steers_in(rig.model.requests[0]) == []
    assert rig.messages[-1].content == "Next."
    rig.history.check(require_final=True).assert_ok()


async def test_a_model_error_fails_the_generation_and_holds() -> None:
    """A model error propagates as LangGraph raised it; generation.failed; a pending steer is held."""
    rig = Rig(calls("c1"), answers("unused"))
    rig.model.fail_at = 1
    gate = rig.gate_model(1)

    async def drive() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(rig.run)
            await gate.wait_reached()
            await rig.steer("s2", "Also update the changelog")
            gate.release()

    with pytest.raises(ExceptionGroup) as caught:
        await drive()
    assert caught.group_contains(RuntimeError, match="provider down")
    assert rig.receipt("s2") == ("held", "generation-failed")
    assert rig.steering.outcome is None
    assert rig.history.events[-1]["type"] == "generation.failed"
    assert rig.history.events[-1]["error"] == "RuntimeError"
    rig.history.check(require_final=True).assert_ok()


async def test_a_spent_recursion_limit_holds_budget_exhausted() -> None:
    """GraphRecursionError with a steer pending holds it budget-exhausted, and is raised as LangGraph's."""
    rig = Rig(calls("c1"), calls("c2"), calls("c3"), answers("unused"))
    with pytest.raises(ExceptionGroup) as caught:
        await rig.steer_during_the_tool({"recursion_limit": 7})
    assert caught.group_contains(GraphRecursionError)
    assert rig.receipt("s1") == ("applied", None)  # written at the second call, before the limit
    rig.history.check(require_final=True).assert_ok()


async def test_a_steer_at_a_boundary_with_no_step_left_for_the_model_is_held_not_applied() -> None:
    """recursion_limit 4: hook 1, agent 2, tools 3, hook 4, and the model's step 5 is past it. A
    steer sent during the tool is held budget-exhausted at the hook of step 4, not written into
    an update that LangGraph's GraphRecursionError then discards with the run."""
    rig = Rig(calls("c1"), answers("unused"))
    with pytest.raises(ExceptionGroup) as caught:
        await rig.steer_during_the_tool({"recursion_limit": 4})
    assert caught.group_contains(GraphRecursionError)
    assert len(rig.model.requests) == 1
    assert rig.receipt("s1") == ("held", "budget-exhausted")
    last = rig.history.events[-1]
    assert (last["input_ids"], last["accepted_input_ids"]) == ([], ["s1"])
    rig.history.check(require_final=True).assert_ok()


async def test_a_recursion_limit_spent_with_a_steer_pending_holds_it_budget_exhausted() -> None:
    """A hand-written graph (no remaining_steps): the limit hit with a steer pending holds it, not failed."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    steering = LiveSteering(runtime)
    model = ScriptedModel(responses=[calls("c1"), calls("c2"), answers("unused")])
    gate = model.gates[1] = Gate()
    graph = hand_written_graph(steering, model, [quick_tool()])

    async def run() -> None:
        await steering.ainvoke(graph, {"messages": [("user", PROMPT)]}, {"recursion_limit": 5})

    async def drive() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await gate.wait_reached()
            generation = runtime.generation
            assert generation is not None
            await history.submit(Input("steer", STEER, id="s1"), generation["id"])
            gate.release()

    with pytest.raises(ExceptionGroup) as caught:
        await drive()
    assert caught.group_contains(GraphRecursionError)
    last = history.events[-1]
    assert (last["type"], last.get("error")) == ("generation.failed", "GraphRecursionError")
    receipt = runtime.receipt("s1")
    assert receipt is not None
    assert (receipt.disposition, receipt.reason) == ("held", "budget-exhausted")
    history.check(require_final=True).assert_ok()


async def test_the_agents_own_step_budget_holds_a_late_steer_budget_exhausted() -> None:
    """create_react_agent ends with "need more steps" when remaining_steps runs out: no continuation."""
    rig = Rig(calls("c1"), calls("c2"), answers("unused"))
    gate = rig.gate_model(1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run, {"recursion_limit": 6})
        await gate.wait_reached()
        await rig.steer()
        gate.release()
    assert rig.messages[-1].content == "Sorry, need more steps to process this request."
    assert len(rig.model.requests) == 2
    assert rig.receipt("s1") == ("held", "budget-exhausted")
    assert rig.steering.outcome == "budget-exhausted"
    assert "generation.continued" not in rig.types()
    last = rig.history.events[-1]
    assert (last["type"], last["reason"]) == ("generation.stopped", "budget-exhausted")
    rig.history.check(require_final=True).assert_ok()


async def test_a_follow_up_runs_as_the_next_generation() -> None:
    """A follow-up is not written in its run; once it finishes, the next generation writes it first."""
    rig = Rig(calls("c1"), answers("Done."), answers("Changelog updated."))
    gate = rig.gate_tool()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        first = rig.gen_id()
        assert (await rig.steer("f1", "Then update the changelog", kind="follow_up")).disposition == "queued"
        gate.release()
    assert len(rig.model.requests) == 3
    assert steers_in(rig.model.requests[1]) == []  # not at its anchor's boundaries
    assert steers_in(rig.model.requests[2]) == ["Then update the changelog"]
    assert rig.messages[-1].content == "Changelog updated."
    assert len(rig.steering.generation_ids) == 2
    assert rig.steering.generation_ids[0] == first
    delivered = next(e for e in rig.history.events if e["type"] == "input.delivered")
    assert delivered["delivery"] == "follow_up"
    assert delivered["target_generation_id"] == rig.steering.generation_ids[1]
    assert rig.receipt("f1") == ("applied", None)
    rig.history.check(require_final=True).assert_ok()


async def test_run_follow_ups_false_leaves_them_to_the_callers_next_run() -> None:
    """With run_follow_ups=False the follow-up stays queued; the next ainvoke writes it after its input."""
    rig = Rig(calls("c1"), answers("Done."), answers("Changelog updated."))
    rig.steering = LiveSteering(rig.runtime, run_follow_ups=False)
    rig.agent = react_agent(rig.model, rig.steering.tool_node([rig.tool]), rig.steering)
    gate = rig.gate_tool()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        await rig.steer("f1", "Then update the changelog", kind="follow_up")
        gate.release()
    assert len(rig.model.requests) == 2
    assert rig.receipt("f1") == ("queued", None)
    assert rig.runtime.pending_follow_ups == 1
    await rig.run(prompt="Next task")
    request = [m.content for m in rig.model.requests[2]]
    assert request[-2:] == ["Next task", "Then update the changelog"]
    assert rig.receipt("f1") == ("applied", None)
    rig.history.check(require_final=True).assert_ok()


async def test_a_follow_up_is_held_when_its_run_is_stopped() -> None:
    """A stop discards the plan: the follow-up is held generation-stopped and never runs."""
    rig = Rig(calls("c1"), answers("unused"))
    gate = rig.gate_tool()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        await rig.steer("f1", "Then update the changelog", kind="follow_up")
        rig.runtime.stop(rig.gen_id())
        gate.release()
    assert len(rig.model.requests) == 1
    assert len(rig.steering.generation_ids) == 1
    assert rig.receipt("f1") == ("held", "generation-stopped")
    rig.history.check(require_final=True).assert_ok()


async def test_skip_tools_on_steer_answers_the_rest_of_the_batch() -> None:
    """With skip_tools_on_steer, a steer pending after a call returns skips the rest; every call answered."""
    rig = Rig(calls("c1", "c2", "c3"), answers("Done."), skip=True)
    gate = rig.gate_tool()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        await rig.steer()
        gate.release()
    assert rig.tool_runs == ["run"]
    results = {m.tool_call_id: m.content for m in rig.messages if isinstance(m, ToolMessage)}
    assert results == {"c1": "12 passed, 1 failed", "c2": SKIPPED_TOOL_RESULT, "c3": SKIPPED_TOOL_RESULT}
    skipped = [e for e in rig.history.events if e["type"] == "tools.skipped"]
    assert [(e["tool_call_ids"], e["input_ids"]) for e in skipped] == [(["c2", "c3"], ["s1"])]
    assert steers_in(rig.model.requests[1]) == [STEER]
    assert rig.steering.skipped_tool_call_ids == ("c2", "c3")
    rig.history.check(require_final=True).assert_ok()


async def test_a_later_reply_that_reuses_call_ids_is_a_batch_of_its_own() -> None:
    """C31 per model reply: a second reply whose calls reuse the first one's ids (as scripted and
    some real models do) runs its tools, with no steer pending; only the first batch's rest was
    skipped, and every skipped call is named by a tools.skipped event."""
    rig = Rig(calls("a", "b"), calls("a", "b"), answers("Done."), skip=True)
    gate = rig.gate_tool()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        await rig.steer()
        gate.release()
    assert rig.tool_runs == ["run", "run", "run"]  # a; then a and b of the second reply
    results = [(m.tool_call_id, m.content) for m in rig.messages if isinstance(m, ToolMessage)]
    assert results == [
        ("a", "12 passed, 1 failed"),
        ("b", SKIPPED_TOOL_RESULT),
        ("a", "12 passed, 1 failed"),
        ("b", "12 passed, 1 failed"),
    ]
    skipped = [e["tool_call_ids"] for e in rig.history.events if e["type"] == "tools.skipped"]
    assert skipped == [["b"]]
    rig.history.check(require_final=True).assert_ok()


async def test_without_skip_every_tool_of_the_batch_runs() -> None:
    """skip_tools_on_steer is off by default: a pending steer waits, every tool of the batch runs."""
    rig = Rig(calls("c1", "c2"), answers("Done."))
    gate = rig.gate_tool()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        await rig.steer()
        gate.release()
    assert rig.tool_runs == ["run", "run"]
    assert "tools.skipped" not in rig.types()
    assert steers_in(rig.model.requests[1]) == [STEER]


async def test_a_hand_written_state_graph_with_the_steering_node() -> None:
    """A StateGraph with steering.node before its model node: a steer lands before the second call."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    steering = LiveSteering(runtime)
    model = ScriptedModel(responses=[calls("c1"), answers("Fixed it.")])
    gate = Gate()
    run_tests = gated_tool(gate)
    graph = hand_written_graph(steering, model, [run_tests])
    results: list[Any] = []

    async def run() -> None:
        results.append(await steering.ainvoke(graph, {"messages": [("user", PROMPT)]}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await gate.wait_reached()
        generation = runtime.generation
        assert generation is not None
        await history.submit(Input("steer", STEER, id="s1"), generation["id"])
        gate.release()
    assert steers_in(model.requests[1]) == [STEER]
    assert results[0]["messages"][-1].content == "Fixed it."
    history.check(require_final=True).assert_ok()


async def test_drain_inside_a_hook_of_your_own() -> None:
    """steering.drain() inside your own pre_model_hook writes the pending steers into its update."""
    runtime = LiveRuntime()
    steering = LiveSteering(runtime)
    model = ScriptedModel(responses=[calls("c1"), answers("Done.")])
    seen: list[int] = []

    @tool
    async def run_tests() -> str:
        """Run the test suite."""
        generation = runtime.generation
        assert generation is not None
        await runtime.submit_steering(Input("steer", STEER, id="s1"), generation["id"])
        return "12 passed"

    async def my_hook(state: State, config: RunnableConfig) -> dict[str, Any]:
        seen.append(len(state["messages"]))
        return {"messages": await steering.drain(state, config)}

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=LangGraphDeprecatedSinceV10, message="create_react_agent")
        agent = create_react_agent(model, [run_tests], pre_model_hook=my_hook)
    result = await steering.ainvoke(agent, {"messages": [("user", PROMPT)]})
    assert steers_in(model.requests[1]) == [STEER]
    assert steers_in(result["messages"]) == [STEER]
    assert seen == [1, 3]


async def test_the_hook_outside_ainvoke_says_how_to_run_the_graph() -> None:
    """A plain graph.ainvoke has no generation: the hook raises RuntimeError naming steering.ainvoke."""
    rig = Rig(answers("Done."))
    with pytest.raises(SteeringNotWiredError, match=r"steering\.ainvoke"):
        await rig.agent.ainvoke({"messages": [("user", PROMPT)]})
    # LangChain's event stream has no steered counterpart: the same refusal, at the first hook
    with pytest.raises(SteeringNotWiredError, match=r"steering\.ainvoke"):
        async for _event in rig.agent.astream_events({"messages": [("user", PROMPT)]}, version="v2"):
            pass


async def test_one_run_at_a_time_per_runtime() -> None:
    """A second concurrent run on the same runtime raises GenerationStateError; the first is untouched."""
    rig = Rig(answers("First."), answers("unused"))
    gate = rig.gate_model(0)
    second: list[BaseException] = []

    async def run_second() -> None:
        try:
            await rig.steering.ainvoke(rig.agent, {"messages": [("user", "another")]})
        except GenerationStateError as error:
            second.append(error)

    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        await run_second()
        gate.release()
    assert len(second) == 1
    assert rig.messages[-1].content == "First."


async def test_closing_the_runtime_mid_run_ends_it_stopped() -> None:
    """The runtime closed during a tool call: the run ends at its next boundary, the steer held."""
    rig = Rig(calls("c1"), answers("never asked"))
    gate = rig.gate_tool()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        await rig.steer()
        await rig.runtime.aclose()
        gate.release()
    assert len(rig.model.requests) == 1
    assert rig.steering.outcome == "stopped"
    assert rig.receipt("s1") == ("held", "runtime-closed")
    assert rig.history.events[-1]["type"] == "generation.stopped"


def test_refuses_what_it_cannot_use() -> None:
    """LiveSteering needs a LiveRuntime and bools; ainvoke needs a compiled graph and a dict config."""
    with pytest.raises(TypeError, match="LiveRuntime"):
        LiveSteering(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="skip_tools_on_steer"):
        LiveSteering(LiveRuntime(), skip_tools_on_steer="yes")  # type: ignore[arg-type]


async def test_ainvoke_refuses_a_builder_and_a_bad_config() -> None:
    """An uncompiled StateGraph or a config that is not a dict is a TypeError before anything runs."""
    runtime = LiveRuntime()
    steering = LiveSteering(runtime)
    with pytest.raises(TypeError, match="compile"):
        await steering.ainvoke(StateGraph(State), {"messages": []})
    rig = Rig(answers("Done."))
    with pytest.raises(TypeError, match="RunnableConfig"):
        await rig.steering.ainvoke(rig.agent, {"messages": []}, "config")  # type: ignore[arg-type]
    assert rig.runtime.generation is None


async def test_a_run_paused_for_a_human_ends_its_generation_and_holds() -> None:
    """interrupt_before=["tools"] pauses the run: its generation ends, a pending steer is held."""
    rig = Rig(calls("c1"), answers("unused"), checkpointer=InMemorySaver(), interrupt_before=["tools"])
    gate = rig.gate_model(0)
    config = {"configurable": {"thread_id": "t1"}}
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run, config)
        await gate.wait_reached()
        await rig.steer()
        gate.release()
    assert (await rig.agent.aget_state(config)).next  # paused before its tools
    assert rig.tool_runs == []
    assert len(rig.model.requests) == 1
    assert rig.receipt("s1") == ("held", "generation-stopped")
    assert "generation.continued" not in rig.types()
    assert rig.history.events[-1]["type"] == "generation.stopped"
    rig.history.check(require_final=True).assert_ok()


async def test_ainvoke_refuses_another_stream_mode() -> None:
    """ainvoke returns the graph's state, so a stream_mode other than 'values' is a ValueError up front."""
    rig = Rig(answers("Done."))
    with pytest.raises(ValueError, match="stream_mode"):
        await rig.steering.ainvoke(rig.agent, {"messages": []}, stream_mode="updates")
    assert rig.runtime.generation is None


async def test_the_react_agent_as_a_subgraph_is_steered_too() -> None:
    """The ReAct agent as a node of a parent graph run by steering.ainvoke: its hook finds the run."""
    rig = Rig(calls("c1"), answers("Fixed it."))
    parent = StateGraph(State)
    parent.add_node("agent", rig.agent)
    parent.add_edge(START, "agent")
    parent.add_edge("agent", END)
    graph = parent.compile()
    gate = rig.gate_tool()
    results: list[Any] = []

    async def run() -> None:
        results.append(await rig.steering.ainvoke(graph, {"messages": [("user", PROMPT)]}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await gate.wait_reached()
        await rig.steer()
        gate.release()
    assert steers_in(rig.model.requests[1]) == [STEER]
    assert steers_in(results[0]["messages"]) == [STEER]
    rig.history.check(require_final=True).assert_ok()


async def test_a_tool_wrapper_of_your_own_runs_inside() -> None:
    """tool_node(tools, awrap_tool_call=yours): yours wraps each call that runs; a stopped call skips it."""
    runtime = LiveRuntime()
    steering = LiveSteering(runtime)
    model = ScriptedModel(responses=[calls("c1"), answers("Done.")])
    seen: list[str] = []

    async def mine(request: Any, execute: Any) -> Any:
        seen.append(request.tool_call["id"])
        return await execute(request)

    agent = react_agent(model, steering.tool_node([quick_tool()], awrap_tool_call=mine), steering)
    result = await steering.ainvoke(agent, {"messages": [("user", PROMPT)]})
    assert seen == ["c1"]
    assert result["messages"][-1].content == "Done."


async def test_a_graph_without_the_hook_holds_and_says_so() -> None:
    """steering.ainvoke of a graph that never reaches the hook: pending steers held, a typed error."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    steering = LiveSteering(runtime)
    model = ScriptedModel(responses=[answers("Done."), answers("again")])
    gate = model.gates[0] = Gate()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=LangGraphDeprecatedSinceV10, message="create_react_agent")
        agent = create_react_agent(model, [quick_tool()])  # no pre_model_hook

    async def drive() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(steering.ainvoke, agent, {"messages": [("user", PROMPT)]})
            await gate.wait_reached()
            generation = runtime.generation
            assert generation is not None
            await history.submit(Input("steer", STEER, id="s1"), generation["id"])
            gate.release()

    with pytest.raises(ExceptionGroup) as caught:
        await drive()
    assert caught.group_contains(SteeringNotWiredError, match="pre_model_hook")
    assert len(model.requests) == 1  # not run again and again
    receipt = runtime.receipt("s1")
    assert receipt is not None
    assert (receipt.disposition, receipt.reason) == ("held", "generation-stopped")
    history.check(require_final=True).assert_ok()


async def test_a_follow_up_for_a_graph_without_the_hook_is_held_and_said() -> None:
    """A follow-up queued for a graph that never reaches the hook: its generation holds it and
    raises, instead of calling the model again and again (recursion_limit or not)."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    steering = LiveSteering(runtime)
    model = ScriptedModel(responses=[answers("Done."), *[answers("again")] * 5])
    gate = model.gates[0] = Gate()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=LangGraphDeprecatedSinceV10, message="create_react_agent")
        agent = create_react_agent(model, [quick_tool()])  # no pre_model_hook

    async def drive() -> None:
        async with anyio.create_task_group() as tg:
            config: RunnableConfig = {"recursion_limit": 5}
            tg.start_soon(steering.ainvoke, agent, {"messages": [("user", PROMPT)]}, config)
            await gate.wait_reached()
            generation = runtime.generation
            assert generation is not None
            await history.submit(Input("follow_up", "Then update the changelog", id="f1"), generation["id"])
            gate.release()

    with pytest.raises(ExceptionGroup) as caught:
        await drive()
    assert caught.group_contains(SteeringNotWiredError, match="pre_model_hook")
    assert len(model.requests) == 2  # the anchor's call and the follow-up generation's one
    receipt = runtime.receipt("f1")
    assert receipt is not None
    assert (receipt.disposition, receipt.reason) == ("held", "generation-stopped")
    assert "generation.continued" not in [e["type"] for e in history.events]
    history.check(require_final=True).assert_ok()


class History_(TypedDict):
    history: Annotated[list[AnyMessage], add_messages]


def history_graph(steering: LiveSteering, model: ScriptedModel) -> Any:
    """A StateGraph whose conversation channel is ``history``, with the steering node before the model."""

    async def call_model(state: History_) -> dict[str, list[BaseMessage]]:
        return {"history": [await model.ainvoke(state["history"])]}

    builder = StateGraph(History_)
    builder.add_node("steer", steering.node)
    builder.add_node("model", call_model)
    builder.add_edge(START, "steer")
    builder.add_edge("steer", "model")
    builder.add_edge("model", END)
    return builder.compile()


async def test_a_hook_whose_state_has_no_messages_key_refuses_and_messages_key_names_it() -> None:
    """The steers go under messages_key: a hook whose state has no such key raises ValueError at
    its first call, before it writes anything (LangGraph would drop the update silently, and the
    receipt said applied); the steer pending then is held. Naming the key steers it."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    model = ScriptedModel(responses=[answers("First."), answers("Second.")])
    wrong = LiveSteering(runtime)
    graph = history_graph(wrong, model)
    with pytest.raises(ValueError, match=r"no 'messages' key .*\['history'\].*messages_key"):
        await wrong.ainvoke(graph, {"history": [("user", PROMPT)]})
    assert model.requests == []
    assert [e["type"] for e in history.events] == ["generation.started", "generation.failed"]

    steering = LiveSteering(runtime, messages_key="history")
    graph = history_graph(steering, model)
    gate = model.gates[0] = Gate()
    results: list[Any] = []

    async def run() -> None:
        results.append(await steering.ainvoke(graph, {"history": [("user", PROMPT)]}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await gate.wait_reached()
        generation = runtime.generation
        assert generation is not None
        await history.submit(Input("steer", STEER, id="s1"), generation["id"])
        gate.release()
    assert steers_in(model.requests[1]) == [STEER]
    assert runtime.receipt("s1").disposition == "applied"  # type: ignore[union-attr]
    history.check(require_final=True).assert_ok()


async def test_the_hook_in_a_subgraph_keyed_otherwise_is_steered() -> None:
    """The outer state keys the conversation `messages`, a subgraph's `history`, with the hook and
    LiveSteering(messages_key="history") inside it: the run is not refused, the steer lands."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    steering = LiveSteering(runtime, messages_key="history")
    model = ScriptedModel(responses=[answers("one"), answers("two")])
    inner = history_graph(steering, model)
    gate = model.gates[0] = Gate()

    async def delegate(state: State) -> dict[str, list[BaseMessage]]:
        out = await inner.ainvoke({"history": state["messages"]})
        return {"messages": out["history"][len(state["messages"]) :]}

    builder = StateGraph(State)
    builder.add_node("delegate", delegate)
    builder.add_edge(START, "delegate")
    builder.add_edge("delegate", END)
    outer = builder.compile()

    async with anyio.create_task_group() as tg:
        tg.start_soon(steering.ainvoke, outer, {"messages": [("user", PROMPT)]})
        await gate.wait_reached()
        generation = runtime.generation
        assert generation is not None
        await history.submit(Input("steer", STEER, id="s1"), generation["id"])
        gate.release()
    assert steers_in(model.requests[1]) == [STEER]
    history.check(require_final=True).assert_ok()


async def test_output_keys_a_str_or_without_the_messages_still_continue() -> None:
    """ainvoke(output_keys="messages") (a single key: LangGraph returns the value alone) continues
    on a state, not a bare list; astream with output_keys leaving the messages out is refused."""
    rig = Rig(answers("First."), answers("Second."))
    gate = rig.gate_model(0)
    results: list[Any] = []

    async def run() -> None:
        results.append(
            await rig.steering.ainvoke(rig.agent, {"messages": [("user", PROMPT)]}, output_keys="messages")
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await gate.wait_reached()
        await rig.steer()
        gate.release()
    assert isinstance(results[0], list)
    assert [m.content for m in results[0]][-1] == "Second."
    assert steers_in(rig.model.requests[1]) == [STEER]
    for keys in ("messages", ["remaining_steps"]):
        with pytest.raises(ValueError, match="output_keys must be a list that includes 'messages'"):
            async for _ in rig.steering.astream(
                rig.agent, {"messages": [("user", PROMPT)]}, output_keys=keys
            ):
                pass


class Everything(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    answer: str


class JustTheAnswer(TypedDict):
    answer: str


@pytest.mark.parametrize("kind", ["steer", "follow_up"])
async def test_a_narrower_output_schema_still_continues_on_the_whole_conversation(kind: str) -> None:
    """A StateGraph whose output_schema leaves the messages out: a continuation (or a follow-up)
    runs on the conversation so far, and ainvoke returns only the output schema's keys."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    steering = LiveSteering(runtime)
    model = ScriptedModel(responses=[answers("First answer."), answers("Second answer.")])
    gate = model.gates[0] = Gate()

    async def call_model(state: Everything) -> dict[str, Any]:
        reply = await model.ainvoke(state["messages"])
        return {"messages": [reply], "answer": reply.content}

    builder = StateGraph(Everything, input_schema=Everything, output_schema=JustTheAnswer)
    builder.add_node("steer", steering.node)
    builder.add_node("model", call_model)
    builder.add_edge(START, "steer")
    builder.add_edge("steer", "model")
    builder.add_edge("model", END)
    graph = builder.compile()
    results: list[Any] = []

    async def run() -> None:
        results.append(await steering.ainvoke(graph, {"messages": [("user", PROMPT)]}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await gate.wait_reached()
        generation = runtime.generation
        assert generation is not None
        await history.submit(Input(kind, STEER, id="x1"), generation["id"])
        gate.release()
    assert [m.content for m in model.requests[1]] == [PROMPT, "First answer.", STEER]
    assert results == [{"answer": "Second answer."}]
    history.check(require_final=True).assert_ok()


async def test_a_refused_concurrent_run_changes_nothing() -> None:
    """A second ainvoke or astream while one runs: GenerationStateError, and the running call's
    generation_ids and skipped_tool_call_ids are left as they were."""
    rig = Rig(calls("c1", "c2"), answers("Done."), skip=True)
    gate = rig.gate_tool(0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run)
        await gate.wait_reached()
        await rig.steer()
        gate.release()
        model_gate = rig.gate_model(1)
        await model_gate.wait_reached()  # c2 skipped, the second model call waits
        before = (rig.steering.generation_ids, rig.steering.skipped_tool_call_ids)
        with pytest.raises(GenerationStateError, match="still running"):
            await rig.steering.ainvoke(rig.agent, {"messages": [("user", "another")]})
        with pytest.raises(GenerationStateError, match="still running"):
            async for _ in rig.steering.astream(rig.agent, {"messages": [("user", "another")]}):
                pass
        assert (rig.steering.generation_ids, rig.steering.skipped_tool_call_ids) == before
        model_gate.release()
    assert rig.steering.skipped_tool_call_ids == ("c2",)
    assert len(rig.steering.generation_ids) == 1


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"recursion_limit": "5"}, TypeError),
        ({"recursion_limit": True}, TypeError),
        ({"recursion_limit": 0}, ValueError),
    ],
)
async def test_a_bad_recursion_limit_or_stream_mode_is_refused_before_a_generation(
    config: dict[str, Any], error: type[Exception]
) -> None:
    """A recursion_limit that is not a positive int, a stream_mode LangGraph does not know, or a
    tool wrapper that cannot be called: a typed error, and no generation opened."""
    rig = Rig(answers("Done."))
    with pytest.raises(error, match="recursion_limit"):
        await rig.steering.ainvoke(rig.agent, {"messages": [("user", PROMPT)]}, config)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stream_mode"):
        async for _ in rig.steering.astream(rig.agent, {"messages": [("user", PROMPT)]}, stream_mode="bogus"):
            pass
    with pytest.raises(TypeError, match="awrap_tool_call"):
        rig.steering.tool_node([quick_tool()], awrap_tool_call=5)
    assert rig.history.events == []


async def test_after_a_stop_the_next_message_on_the_thread_starts_cleanly() -> None:
    """A stop on a checkpointed thread, then the user's next message: one model call on a valid history."""
    rig = Rig(calls("c1"), answers("never asked"), checkpointer=InMemorySaver())
    rig.model.responses = [calls("c1"), answers("Next answer.")]
    gate = rig.gate_tool()
    config = {"configurable": {"thread_id": "t1"}}
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.run, config)
        await gate.wait_reached()
        rig.runtime.stop(rig.gen_id())
        gate.release()
    assert rig.steering.outcome == "stopped"
    await rig.run(config, prompt="Next task")
    assert len(rig.model.requests) == 2
    sent = rig.model.requests[1]
    assert [type(m).__name__ for m in sent] == ["HumanMessage", "AIMessage", "ToolMessage", "HumanMessage"]
    assert rig.messages[-1].content == "Next answer."
    assert rig.steering.outcome == "finished"
    rig.history.check(require_final=True).assert_ok()


async def test_astream_gives_langgraphs_chunks_with_the_steer_in_them() -> None:
    """astream(stream_mode="updates"): the chunks of graph.astream, the hook's update among them."""
    rig = Rig(calls("c1"), answers("Fixed it."))
    gate = rig.gate_tool()
    chunks: list[Any] = []

    async def consume() -> None:
        prompt = {"messages": [("user", PROMPT)]}
        async for chunk in rig.steering.astream(rig.agent, prompt, stream_mode="updates"):
            chunks.append(chunk)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await gate.wait_reached()
        await rig.steer()
        gate.release()
    nodes = [next(iter(chunk)) for chunk in chunks]
    # the hook's node before each model call; no "values" chunk the caller did not ask for
    assert nodes == ["pre_model_hook", "agent", "tools", "pre_model_hook", "agent"]
    assert chunks[0]["pre_model_hook"] is None  # nothing pending: no update
    assert steers_in(chunks[3]["pre_model_hook"]["messages"]) == [STEER]
    assert steers_in(rig.model.requests[1]) == [STEER]
    assert rig.steering.outcome == "finished"
    rig.history.check(require_final=True).assert_ok()


async def test_astream_streams_the_continuation_and_a_list_of_modes() -> None:
    """A late steer continues the generation: its invocation's chunks follow, in (mode, data) pairs."""
    rig = Rig(answers("Done."), answers("Done, only the failing test."))
    gate = rig.gate_model(0)
    chunks: list[Any] = []

    async def consume() -> None:
        prompt = {"messages": [("user", PROMPT)]}
        async for chunk in rig.steering.astream(rig.agent, prompt, stream_mode=["updates", "values"]):
            chunks.append(chunk)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await gate.wait_reached()
        await rig.steer()
        gate.release()
    assert {mode for mode, _ in chunks} == {"updates", "values"}
    last_values = [data for mode, data in chunks if mode == "values"][-1]
    contents = [m.content for m in last_values["messages"]]
    assert contents == [PROMPT, "Done.", STEER, "Done, only the failing test."]
    assert rig.types().count("generation.continued") == 1
    rig.history.check(require_final=True).assert_ok()


async def test_leaving_astream_early_stops_the_generation_and_holds() -> None:
    """Breaking out of the stream stops the generation: the pending steer is held, no further model call."""
    rig = Rig(calls("c1"), answers("never asked"))
    steered: list[Receipt] = []
    stream = rig.steering.astream(rig.agent, {"messages": [("user", PROMPT)]}, stream_mode="updates")
    async for chunk in stream:
        if "agent" in chunk:  # the model asked for the tool: steer, then leave
            steered.append(await rig.steer())
            break
    await stream.aclose()
    assert steered[0].disposition == "queued"
    assert len(rig.model.requests) == 1
    assert rig.receipt("s1") == ("held", "generation-stopped")
    assert rig.history.events[-1]["type"] == "generation.stopped"
    assert rig.runtime.generation is None
    rig.history.check(require_final=True).assert_ok()


async def test_a_host_stop_ends_astream_at_the_next_boundary() -> None:
    """runtime.stop(gid) during a tool call: the stream ends after the tool's chunk, no model call after."""
    rig = Rig(calls("c1"), answers("never asked"))
    gate = rig.gate_tool()
    chunks: list[Any] = []

    async def consume() -> None:
        prompt = {"messages": [("user", PROMPT)]}
        async for chunk in rig.steering.astream(rig.agent, prompt, stream_mode="updates"):
            chunks.append(chunk)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await gate.wait_reached()
        rig.runtime.stop(rig.gen_id())
        gate.release()
    assert [next(iter(chunk)) for chunk in chunks] == ["pre_model_hook", "agent", "tools"]
    assert len(rig.model.requests) == 1
    assert rig.steering.outcome == "stopped"
    rig.history.check(require_final=True).assert_ok()


async def test_astream_runs_a_follow_up_as_the_next_generation() -> None:
    """A follow-up streams on as the next generation, its first boundary writing it."""
    rig = Rig(calls("c1"), answers("Done."), answers("Changelog updated."))
    gate = rig.gate_tool()
    values: list[Any] = []

    async def consume() -> None:
        prompt = {"messages": [("user", PROMPT)]}
        async for chunk in rig.steering.astream(rig.agent, prompt, stream_mode="values"):
            values.append(chunk)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await gate.wait_reached()
        await rig.steer("f1", "Then update the changelog", kind="follow_up")
        gate.release()
    assert values[-1]["messages"][-1].content == "Changelog updated."
    assert steers_in(rig.model.requests[2]) == ["Then update the changelog"]
    assert len(rig.steering.generation_ids) == 2
    rig.history.check(require_final=True).assert_ok()


async def test_astream_refuses_another_output_version() -> None:
    """astream gives LangGraph's default chunks: version="v2" is a ValueError before anything runs."""
    rig = Rig(answers("Done."))
    with pytest.raises(ValueError, match="version"):
        async for _chunk in rig.steering.astream(rig.agent, {"messages": []}, version="v2"):
            pass
    assert rig.runtime.generation is None


async def test_a_stop_at_drain_in_a_hook_of_your_own_returns_the_state_it_was_given() -> None:
    """A stop ends the run at drain(state, config) too, and ainvoke returns that state."""
    runtime = LiveRuntime()
    steering = LiveSteering(runtime)
    model = ScriptedModel(responses=[calls("c1"), answers("never asked")])

    @tool
    async def run_tests() -> str:
        """Run the test suite."""
        generation = runtime.generation
        assert generation is not None
        runtime.stop(generation["id"])
        return "12 passed"

    async def my_hook(state: State, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": await steering.drain(state, config)}

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=LangGraphDeprecatedSinceV10, message="create_react_agent")
        agent = create_react_agent(model, [run_tests], pre_model_hook=my_hook)
    result = await steering.ainvoke(agent, {"messages": [("user", PROMPT)]})
    assert len(model.requests) == 1
    assert [type(m).__name__ for m in result["messages"]] == ["HumanMessage", "AIMessage", "ToolMessage"]
    assert steering.outcome == "stopped"


async def _prep(state: State) -> None:
    """A node that changes nothing: a step of its own before the steered loop."""
    return None


def prep_then_hook_graph(
    steering: LiveSteering, model: ScriptedModel, tools: list[BaseTool] | None = None
) -> Any:
    """The hand-written ReAct loop with a node before the hook: START -> prep -> steer -> model."""

    async def call_model(state: State) -> dict[str, list[BaseMessage]]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("prep", _prep)
    builder.add_node("steer", steering.node)
    builder.add_node("model", call_model)
    builder.add_node("tools", steering.tool_node(tools or [quick_tool()]))
    builder.add_edge(START, "prep")
    builder.add_edge("prep", "steer")
    builder.add_edge("steer", "model")
    builder.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    builder.add_edge("tools", "steer")
    return builder.compile()


def parent_of(agent: Any) -> Any:
    """A parent graph running ``agent`` after two nodes of its own: START -> prep1 -> prep2 -> agent."""
    builder = StateGraph(State)
    builder.add_node("prep1", _prep)
    builder.add_node("prep2", _prep)
    builder.add_node("agent", agent)
    builder.add_edge(START, "prep1")
    builder.add_edge("prep1", "prep2")
    builder.add_edge("prep2", "agent")
    builder.add_edge("agent", END)
    return builder.compile()


async def steer_during_the_final_answer(
    steering: LiveSteering, history: History, model: ScriptedModel, graph: Any, limit: int
) -> list[Any]:
    """Runs ``graph`` with ``recursion_limit=limit`` and sends ``s1`` while the model writes its
    second reply (the final answer, held at a gate); what ``ainvoke`` returned."""
    gate = model.gates[1] = Gate()
    results: list[Any] = []

    async def run() -> None:
        config: RunnableConfig = {"recursion_limit": limit}
        results.append(await steering.ainvoke(graph, {"messages": [("user", PROMPT)]}, config))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await gate.wait_reached()
        generation = steering.runtime.generation
        assert generation is not None
        await history.submit(Input("steer", STEER, id="s1"), generation["id"])
        gate.release()
    return results


def assert_held_without_continuing(steering: LiveSteering, history: History, model: ScriptedModel) -> None:
    """``s1`` held budget-exhausted before any continuation, in no model request."""
    assert len(model.requests) == 2
    assert not any(steers_in(request) for request in model.requests)
    receipt = steering.runtime.receipt("s1")
    assert receipt is not None
    assert (receipt.disposition, receipt.reason) == ("held", "budget-exhausted")
    types = [e["type"] for e in history.events]
    assert "generation.continued" not in types
    assert (types[-1], history.events[-1]["reason"]) == ("generation.stopped", "budget-exhausted")
    assert steering.outcome == "budget-exhausted"
    history.check(require_final=True).assert_ok()


async def test_a_node_before_the_hook_counts_in_the_steps_a_continuation_needs() -> None:
    """START -> prep -> steer -> model, recursion_limit 7: prep 1, steer 2, model 3, tools 4, steer
    5, the final answer at 6 leaves one step, and a continuation needs three (prep, steer, model).
    A steer sent during the final answer is held budget-exhausted with no continuation, not
    written into a run that LangGraph ends with GraphRecursionError before the model."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    steering = LiveSteering(runtime)
    model = ScriptedModel(responses=[calls("c1"), answers("Done."), answers("unused")])
    graph = prep_then_hook_graph(steering, model)
    results = await steer_during_the_final_answer(steering, history, model, graph, 7)
    assert_held_without_continuing(steering, history, model)
    assert results[0]["messages"][-1].content == "Done."


async def test_a_node_before_the_hook_leaves_a_boundary_no_step_for_the_model() -> None:
    """The same graph at recursion_limit 5: steer 5 is the limit's last step, the model's step 6 past
    it. A steer sent during the tool is held at that boundary, not applied."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    steering = LiveSteering(runtime)
    model = ScriptedModel(responses=[calls("c1"), answers("unused")])
    gate = Gate()
    run_tests = gated_tool(gate)
    graph = prep_then_hook_graph(steering, model, tools=[run_tests])

    async def drive() -> None:
        async with anyio.create_task_group() as tg:
            config: RunnableConfig = {"recursion_limit": 5}
            tg.start_soon(steering.ainvoke, graph, {"messages": [("user", PROMPT)]}, config)
            await gate.wait_reached()
            generation = runtime.generation
            assert generation is not None
            await history.submit(Input("steer", STEER, id="s1"), generation["id"])
            gate.release()

    with pytest.raises(ExceptionGroup) as caught:
        await drive()
    assert caught.group_contains(GraphRecursionError)
    assert len(model.requests) == 1
    receipt = runtime.receipt("s1")
    assert receipt is not None
    assert (receipt.disposition, receipt.reason) == ("held", "budget-exhausted")
    assert [e["type"] for e in history.events if e["type"].startswith("steering.")] == [
        "steering.accepted",
        "steering.held",
    ]
    history.check(require_final=True).assert_ok()


@pytest.mark.parametrize("agent", ["hand-written", "prebuilt"])
async def test_in_a_subgraph_a_continuation_short_of_the_parents_steps_holds_the_steer(agent: str) -> None:
    """The steered loop as the node of a parent graph (START -> prep1 -> prep2 -> agent),
    recursion_limit 7: inside it hook 1, model 2, tools 3, hook 4, the final answer at 5 leaves
    two, enough for the subgraph's own hook and model, so it continues; but the parent needs
    three (prep1, prep2, agent) and LangGraph gives a subgraph's nodes only the subgraph's own
    step count, so the hook cannot see that. The continuation then ends in GraphRecursionError
    before the hook: the steer is held budget-exhausted, in no model request, never applied."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    steering = LiveSteering(runtime)
    model = ScriptedModel(responses=[calls("c1"), answers("Done."), answers("unused")])
    if agent == "prebuilt":
        inner = react_agent(model, steering.tool_node([quick_tool()]), steering)
    else:
        inner = hand_written_graph(steering, model, [quick_tool()])
    with pytest.raises(ExceptionGroup) as caught:
        await steer_during_the_final_answer(steering, history, model, parent_of(inner), 7)
    assert caught.group_contains(GraphRecursionError)
    assert len(model.requests) == 2
    assert not any(steers_in(request) for request in model.requests)
    receipt = runtime.receipt("s1")
    assert receipt is not None
    assert (receipt.disposition, receipt.reason) == ("held", "budget-exhausted")
    types = [e["type"] for e in history.events]
    assert types.index("generation.continued") < types.index("steering.held")
    assert "steering.applied" not in types
    assert (types[-1], history.events[-1]["error"]) == ("generation.failed", "GraphRecursionError")
    history.check(require_final=True).assert_ok()


@pytest.mark.parametrize("agent", ["prebuilt", "prebuilt-in-a-parent"])
async def test_a_continuation_with_the_steps_it_needs_carries_the_steer(agent: str) -> None:
    """With one step more than the continuation needs (prebuilt: hook 1, agent 2, tools 3, hook 4,
    final answer 5 at recursion_limit 8 leaves three; in the parent of two nodes, 9 leaves four
    for prep1, prep2, agent), it continues, the next model request carries the steer, and the
    run finishes."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    steering = LiveSteering(runtime)
    model = ScriptedModel(responses=[calls("c1"), answers("Done."), answers("Done, only that test.")])
    graph = react_agent(model, steering.tool_node([quick_tool()]), steering)
    limit = 8
    if agent == "prebuilt-in-a-parent":
        graph, limit = parent_of(graph), 9
    results = await steer_during_the_final_answer(steering, history, model, graph, limit)
    assert len(model.requests) == 3
    assert steers_in(model.requests[2]) == [STEER]
    receipt = runtime.receipt("s1")
    assert receipt is not None
    assert receipt.disposition == "applied"
    types = [e["type"] for e in history.events]
    assert types.index("generation.continued") < types.index("steering.applied")
    assert types[-1] == "generation.finished"
    assert results[0]["messages"][-1].content == "Done, only that test."
    history.check(require_final=True).assert_ok()


def checkpointed_parent_of(agent: Any) -> Any:
    """A checkpointed parent graph running ``agent`` as its only node: START -> agent -> END."""
    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return builder.compile(checkpointer=InMemorySaver())


async def test_a_persistent_subgraph_past_its_first_turn_still_has_its_steps() -> None:
    """A steered agent compiled with ``checkpointer=True`` (a subgraph that keeps its own state
    across turns) in a checkpointed parent, recursion_limit 6, a steer sent during the tool each
    turn: from the second turn the subgraph's loop starts from its saved step (``langgraph_step``
    past 6), yet it has used only four of its six steps; each steer is applied and carried by the
    next model request (they were held budget-exhausted when the raw step was compared)."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    steering = LiveSteering(runtime)
    gates: list[Gate] = []

    @tool
    async def run_tests() -> str:
        """Run the test suite."""
        await gates[-1].passage()
        return "12 passed"

    model = ScriptedModel(responses=[m for t in range(3) for m in (calls(f"c{t}"), answers(f"done {t}"))])
    graph = checkpointed_parent_of(
        react_agent(model, steering.tool_node([run_tests]), steering, checkpointer=True)
    )
    config: RunnableConfig = {"configurable": {"thread_id": "t"}, "recursion_limit": 6}
    for turn in range(3):
        gate = Gate()
        gates.append(gate)
        results: list[Any] = []

        async def run(turn: int = turn, results: list[Any] = results) -> None:
            results.append(await steering.ainvoke(graph, {"messages": [("user", f"turn {turn}")]}, config))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await gate.wait_reached()
            generation = runtime.generation
            assert generation is not None
            await history.submit(Input("steer", f"steer {turn}", id=f"s{turn}"), generation["id"])
            gate.release()
        receipt = runtime.receipt(f"s{turn}")
        assert receipt is not None
        assert (receipt.disposition, receipt.reason) == ("applied", None)
        assert f"steer {turn}" in steers_in(model.requests[-1])
        assert results[0]["messages"][-1].content == f"done {turn}"
        assert steering.outcome == "finished"
    history.check(require_final=True).assert_ok()


async def test_a_resume_inside_a_subgraph_counts_from_the_resumed_step() -> None:
    """The prebuilt agent as a subgraph of a checkpointed parent, recursion_limit 10; its tool asks
    a human (``interrupt()``) on its third call. The resume continues the subgraph's loop from its
    saved step: a steer sent during the resumed tool is applied and carried by the next request,
    since that loop has used three of its ten steps."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    steering = LiveSteering(runtime)
    gate = Gate()
    ran: list[int] = []

    @tool
    async def run_tests() -> str:
        """Run the test suite."""
        ran.append(1)
        if len(ran) >= 3:
            answer = interrupt("may I run the slow suite?")
            await gate.passage()
            return f"ran ({answer})"
        return "12 passed"

    model = ScriptedModel(responses=[calls("c1"), calls("c2"), calls("c3"), answers("done")])
    graph = checkpointed_parent_of(react_agent(model, steering.tool_node([run_tests]), steering))
    config: RunnableConfig = {"configurable": {"thread_id": "t"}, "recursion_limit": 10}
    await steering.ainvoke(graph, {"messages": [("user", PROMPT)]}, config)
    assert (await graph.aget_state(config)).next == ("agent",)  # paused for the human
    results: list[Any] = []

    async def resume() -> None:
        results.append(await steering.ainvoke(graph, Command(resume="yes"), config))

    async with anyio.create_task_group() as tg:
        tg.start_soon(resume)
        await gate.wait_reached()
        generation = runtime.generation
        assert generation is not None
        await history.submit(Input("steer", STEER, id="s1"), generation["id"])
        gate.release()
    receipt = runtime.receipt("s1")
    assert receipt is not None
    assert (receipt.disposition, receipt.reason) == ("applied", None)
    assert steers_in(model.requests[-1]) == [STEER]
    assert results[0]["messages"][-1].content == "done"
    assert steering.outcome == "finished"
    history.check(require_final=True).assert_ok()
