"""``integration_overhead_<name>``: one agent run of 5 model requests, with the integration over without.

Each framework runs its own test model (amplifier-core's doubles with a scripted
provider, pydantic-ai's ``FunctionModel``, the Agents SDK's ``ScriptedModel``): four
tool rounds then a final answer, so five model requests per run. The same run is
timed with the integration (one generation, a boundary before each request, the
continuation check) and without it (the framework's plain run; for Amplifier, the
same orchestrator's provider and tool steps without the generation), interleaved in
a shuffled order each round; the figure is the ratio of the medians. The frameworks
are asyncio-only, so these figures are measured on asyncio alone.
"""

from __future__ import annotations

import gc
import random
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from ._timing import Figure, Samples, figure, no_gc, perf_counter_ns

__all__ = ["INTEGRATIONS", "TARGET", "run_integrations"]

TARGET = 1.10
TOOL_ROUNDS = 4
"""Tool rounds per run: with the final answer, five model requests."""
PROMPT = "Make the suite pass"

Run = Callable[[], Awaitable[None]]


def _amplifier() -> tuple[Run, Run]:
    from amplifier_core.events import PROMPT_SUBMIT
    from amplifier_core.message_models import ChatResponse, TextBlock, ToolCall
    from amplifier_core.testing import EventRecorder, MockContextManager, MockTool

    from live_steering import LiveRuntime
    from live_steering.integrations.amplifier import LiveSteeringOrchestrator

    class Provider:
        name = "scripted"

        def __init__(self) -> None:
            self.calls = 0

        async def complete(self, request: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls <= TOOL_ROUNDS:
                call = ToolCall(id=f"call-{self.calls}", name="run_tests", arguments={})
                return ChatResponse(content=[TextBlock(text="Running.")], tool_calls=[call])
            return ChatResponse(content=[TextBlock(text="Done.")])

        def parse_tool_calls(self, response: Any) -> list[Any]:
            return list(response.tool_calls or [])

    orchestrator = LiveSteeringOrchestrator({"runtime": LiveRuntime()})
    tools = {"run_tests": MockTool("run_tests", "12 passed")}

    async def steered() -> None:
        await orchestrator.execute(PROMPT, MockContextManager(), {"p": Provider()}, tools, EventRecorder())

    async def plain() -> None:
        # The orchestrator's own provider and tool steps, without the generation around them.
        context, hooks, provider = MockContextManager(), EventRecorder(), Provider()
        await hooks.emit(PROMPT_SUBMIT, {"prompt": PROMPT})
        await context.add_message({"role": "user", "content": PROMPT})
        for iteration in range(TOOL_ROUNDS + 1):
            reply, calls = await orchestrator._ask("p", provider, context, tools, hooks, iteration)
            if calls:
                await orchestrator._run_tools(calls, reply, context, tools, hooks)
            else:
                await context.add_message({"role": "assistant", "content": reply})

    return steered, plain


def _pydantic_ai() -> tuple[Run, Run]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from live_steering import LiveRuntime
    from live_steering.integrations.pydantic_ai import LiveSteering

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) < 2 * TOOL_ROUNDS + 1:
            return ModelResponse(parts=[ToolCallPart("run_tests", {})])
        return ModelResponse(parts=[TextPart("Done.")])

    def run_tests() -> str:
        """Run the test suite."""
        return "12 passed"

    steered_agent = Agent(FunctionModel(model), tools=[run_tests], capabilities=[LiveSteering(LiveRuntime())])
    plain_agent = Agent(FunctionModel(model), tools=[run_tests])

    async def steered() -> None:
        await steered_agent.run(PROMPT)

    async def plain() -> None:
        await plain_agent.run(PROMPT)

    return steered, plain


def _openai_agents() -> tuple[Run, Run]:
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from live_steering import LiveRuntime
    from live_steering.integrations.openai_agents import LiveSteering

    @function_tool
    def run_tests() -> str:
        """Run the test suite."""
        return "12 passed"

    def agent() -> Agent[Any]:
        steps: list[Any] = [[function_call("run_tests", {}, call_id=f"c{i}")] for i in range(TOOL_ROUNDS)]
        steps.append([assistant_message("Done.", item_id="m1")])
        return Agent(name="fixer", model=ScriptedModel(steps), tools=[run_tests])

    config = RunConfig(tracing_disabled=True)
    steering = LiveSteering(LiveRuntime())

    async def steered() -> None:
        await steering.run(agent(), PROMPT, run_config=config)

    async def plain() -> None:
        await Runner.run(agent(), PROMPT, run_config=config)

    return steered, plain


INTEGRATIONS: dict[str, Callable[[], tuple[Run, Run]]] = {
    "amplifier": _amplifier,
    "pydantic_ai": _pydantic_ai,
    "openai_agents": _openai_agents,
}


def _sides(pair: tuple[Run, Run]) -> list[tuple[str, Run]]:
    return [("with", pair[0]), ("without", pair[1])]


async def _time(run: Run) -> float:
    with no_gc():
        start = perf_counter_ns()
        await run()
        stop = perf_counter_ns()
    return float(stop - start)


async def _measure(rounds: int) -> list[Figure]:
    pairs: dict[str, tuple[Run, Run]] = {}
    for name, make in INTEGRATIONS.items():
        try:
            pairs[name] = make()
        except ImportError as error:  # its extra is not installed: say so, measure the others
            print(f"benchmarks: integration_overhead_{name} skipped: {error}", file=sys.stderr)
    samples = Samples()
    order = random.Random(14)
    for steered, plain in pairs.values():  # warm both paths (imports, caches) before timing
        await steered()
        await plain()
    for _ in range(rounds):
        probes = [(f"{name}_{side}", run) for name, pair in pairs.items() for side, run in _sides(pair)]
        order.shuffle(probes)
        for probe, run in probes:
            samples.add(probe, await _time(run))
        gc.collect()
    median = samples.median
    return [
        figure(f"integration_overhead_{name}", "asyncio", "ns", median(f"{name}_with"),
               median(f"{name}_without"), TARGET)
        for name in pairs
    ]


def run_integrations(rounds: int) -> list[Figure]:
    """Measure every installed integration's overhead on asyncio; one figure each."""
    figures: list[Figure] = anyio.run(_measure, rounds, backend="asyncio")
    return figures
