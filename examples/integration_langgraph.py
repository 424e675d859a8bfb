# examples/integration_langgraph.py
"""Steer a LangGraph agent while a tool runs and queue a follow-up (the prebuilt ReAct agent), then
steer a hand-written StateGraph.

LangGraph runs on asyncio. langchain-core's scripted chat model stands in for a real one.
"""

import warnings
from typing import Annotated, Any, TypedDict

import anyio
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import create_react_agent, tools_condition
from langgraph.warnings import LangGraphDeprecatedSinceV10
from pydantic import Field

from live_steering import Input, LiveRuntime
from live_steering.integrations.langgraph import METADATA_KEY, LiveSteering


class ScriptedModel(FakeMessagesListChatModel):
    """langchain-core's scripted chat model; it records what each request carried."""

    requests: list[list[AnyMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self  # the script already holds the tool call

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        self.requests.append(list(input.to_messages() if hasattr(input, "to_messages") else input))
        return await super().ainvoke(input, config, **kwargs)


def script(*answers: str) -> ScriptedModel:
    call = AIMessage("", tool_calls=[{"name": "run_tests", "args": {}, "id": "c1"}])
    return ScriptedModel(responses=[call, *(AIMessage(answer) for answer in answers)])


async def steer_while_a_tool_runs(runtime: LiveRuntime, graph: Any, steering: LiveSteering,
                                  running: anyio.Event, may_finish: anyio.Event,
                                  follow_up: str | None = None) -> Any:
    """Run the graph; the host steers it once its tool is running (and queues ``follow_up``)."""
    results = []

    async def host() -> None:
        await running.wait()
        generation = runtime.generation  # None while no generation runs
        assert generation is not None
        generation_id = generation["id"]
        submit = runtime.capability["submit"]
        receipt = await submit(Input("steer", "Only fix the failing test", id="host-1"), generation_id)
        print("host got:", receipt.to_dict())
        if follow_up is not None:
            # waits for the end of this generation; ainvoke then runs the graph again with it
            await submit(Input("follow_up", follow_up, id="host-2"), generation_id)
        may_finish.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(host)
        results.append(await steering.ainvoke(graph, {"messages": [("user", "Make the suite pass")]}))
    return results[0]


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


async def main() -> None:
    running, may_finish = anyio.Event(), anyio.Event()

    @tool
    async def run_tests() -> str:
        """Run the test suite."""
        running.set()
        await may_finish.wait()
        return "12 passed, 1 failed"

    # 1. The prebuilt ReAct agent: the steering hook runs before every model call.
    runtime = LiveRuntime()
    steering = LiveSteering(runtime)
    model = script("Fixed it: only the failing test.", "Changelog updated.")
    with warnings.catch_warnings():  # deprecated in LangGraph 1.x for langchain.agents, still shipped
        warnings.filterwarnings("ignore", category=LangGraphDeprecatedSinceV10)
        agent = create_react_agent(model, steering.tool_node([run_tests]),
                                   pre_model_hook=steering.pre_model_hook)
    state = await steer_while_a_tool_runs(runtime, agent, steering, running, may_finish,
                                          follow_up="Then update the changelog")
    steer = next(m for m in state["messages"] if METADATA_KEY in m.additional_kwargs)
    print("in the graph's messages:", steer.content, steer.additional_kwargs[METADATA_KEY])
    print("answer:", state["messages"][-1].content, "| generations:", steering.generation_ids)
    assert steer in model.requests[1]  # the second model call carried it
    assert "Then update the changelog" in [m.content for m in model.requests[2]]  # the next run's
    assert state["messages"][-1].content == "Changelog updated."
    assert len(steering.generation_ids) == 2
    for input_id in ("host-1", "host-2"):
        receipt = runtime.receipt(input_id)  # None if it was never accepted
        assert receipt is not None, input_id
        assert receipt.disposition == "applied", receipt

    # 2. A hand-written StateGraph: the steering node on every path into the model node.
    runtime = LiveRuntime()
    steering = LiveSteering(runtime)
    model = script("Fixed it: only the failing test.")
    running, may_finish = anyio.Event(), anyio.Event()

    async def call_model(state: State) -> dict[str, list[AnyMessage]]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("steer", steering.node)
    builder.add_node("model", call_model)
    builder.add_node("tools", steering.tool_node([run_tests]))
    builder.add_edge(START, "steer")
    builder.add_edge("steer", "model")
    builder.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    builder.add_edge("tools", "steer")
    state = await steer_while_a_tool_runs(runtime, builder.compile(), steering, running, may_finish)
    print("answer:", state["messages"][-1].content)
    assert any(METADATA_KEY in m.additional_kwargs for m in model.requests[1])
    receipt = runtime.receipt("host-1")  # None if it was never accepted
    assert receipt is not None
    assert receipt.disposition == "applied"


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
