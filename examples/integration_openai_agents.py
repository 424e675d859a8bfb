# examples/integration_openai_agents.py
"""Steer an OpenAI Agents SDK run while a tool runs, queue a follow-up, then stop a run (asyncio only)."""

import anyio
from agents import Agent, RunConfig, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from live_steering import Input, LiveRuntime
from live_steering.integrations.openai_agents import LiveSteering, RunStopped


async def main() -> None:
    runtime = LiveRuntime()
    running, may_finish = anyio.Event(), anyio.Event()

    @function_tool
    async def run_tests() -> str:
        """Run the test suite."""
        running.set()
        await may_finish.wait()
        return "12 passed, 1 failed"

    # The SDK's own scripted model stands in for a real one: one tool call, an answer, and the
    # answer to the follow-up; then, for the run that is stopped, one more tool call.
    model = ScriptedModel([[function_call("run_tests", {}, call_id="c1")], [assistant_message("Fixed it.")],
                           [assistant_message("Changelog updated.", item_id="m2")],
                           [function_call("run_tests", {}, call_id="c2")]])
    agent = Agent(name="fixer", model=model, tools=[run_tests])
    steering = LiveSteering(runtime)
    config = RunConfig(tracing_disabled=True)

    async def host() -> None:
        await running.wait()
        generation = runtime.generation  # None while no generation runs
        assert generation is not None
        generation_id = generation["id"]
        submit = runtime.capability["submit"]
        receipt = await submit(Input("steer", "Only fix the failing test", id="host-1"), generation_id)
        print("host got:", receipt.to_dict())
        # A follow-up waits for the end of this generation, then runs as the next turn of run().
        await submit(Input("follow_up", "Then update the changelog", id="host-2"), generation_id)
        may_finish.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(host)
        result = await steering.run(agent, "Make the suite pass", run_config=config)
    print("output:", result.final_output)
    print("second model call ends with:", model.calls[1].input[-1])
    conversation = [item.get("content") for item in result.to_input_list() if item.get("role") == "user"]
    print("conversation:", conversation)
    assert model.calls[1].input[-1]["content"] == "Only fix the failing test"
    assert result.final_output == "Changelog updated."
    receipt = runtime.receipt("host-1")  # None if it was never accepted
    assert receipt is not None
    assert receipt.disposition == "applied"

    # A host's stop (the same call the fleet and HTTP stop make) ends a run at its next boundary.
    running, may_finish = anyio.Event(), anyio.Event()

    async def stop_it() -> None:
        await running.wait()
        generation = runtime.generation
        assert generation is not None
        runtime.stop(generation["id"])
        may_finish.set()  # the running tool finishes; no model call follows

    async def run_until_stopped() -> None:
        try:
            await steering.run(agent, "Make the suite pass", run_config=config)
        except RunStopped as stopped:
            print("stopped:", stopped.reason, "after", len(stopped.history or []), "items")

    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_it)
        tg.start_soon(run_until_stopped)
    assert len(model.calls) == 4
    assert runtime.recent_events()[-1]["type"] == "generation.stopped"


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
