"""The Amplifier orchestrator: amplifier-core's own suite and validator, then the seed's scenarios.

amplifier-core is asyncio-only (its coordinator and hook registry are a Rust kernel driven
from asyncio; its test doubles use ``asyncio``), so these tests run on asyncio. The doubles
are amplifier-core's own (``amplifier_core.testing``: ``MockCoordinator``,
``MockContextManager``, ``MockTool``, ``EventRecorder``); the provider is a scripted
implementation of ``amplifier_core.interfaces.Provider``, since amplifier-core ships none.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from amplifier_core import AmplifierSession, ModuleLoader, ToolResult
from amplifier_core.coordinator import ModuleCoordinator
from amplifier_core.message_models import ChatRequest, ChatResponse, TextBlock, ToolCall
from amplifier_core.models import HookResult, ProviderInfo
from amplifier_core.testing import EventRecorder, MockContextManager, MockCoordinator, MockTool
from amplifier_core.validation import OrchestratorValidator
from amplifier_core.validation.behavioral import OrchestratorBehaviorTests

from fleet_helpers import final_receipt, owned_elsewhere, steer_then_stop
from live_steering import GenerationStateError, Input, LiveRuntime
from live_steering.integrations import amplifier as amplifier_module
from live_steering.integrations.amplifier import (
    CAPABILITY,
    MODULE_NAME,
    RUNTIME_CAPABILITY,
    SKIPPED_TOOL_RESULT,
    STOPPED_TOOL_RESULT,
    TOOL_CANCELLED_RESULT,
    TOOL_FAILED_RESULT,
    LiveSteeringOrchestrator,
    mount,
)
from live_steering.testing import Gate, History

STEER = "Only fix the failing test"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def anyio_backend() -> str:
    """amplifier-core runs on asyncio only."""
    return "asyncio"


class TestAmplifierOrchestratorBehavior(OrchestratorBehaviorTests):  # type: ignore[misc]
    """amplifier-core's authoritative orchestrator tests, with its plugin's fixtures, on this module."""

    @pytest.fixture
    def module_path(self) -> Path:
        """Point the plugin's loader at this module's file (as ``--module-path`` would)."""
        return Path(amplifier_module.__file__)


def test_the_docs_recipe_runs_amplifier_cores_behaviour_tests_as_written(tmp_path: Path) -> None:
    """The page's copy-paste recipe: its extra exists with what the tests need, and its test file,
    run with its pytest command in a fresh directory, passes amplifier-core's six behaviour tests."""
    page = (ROOT / "docs" / "integrations" / "amplifier.md").read_text(encoding="utf-8")
    section = page[page.index("## Run amplifier-core's own behaviour tests") :]
    recipe = re.search(r"```bash\n(.*?)```", section, re.S)
    assert recipe is not None
    lines = recipe.group(1)
    extra = re.search(r'pip install -q "\$PWD\[([\w-]+)\]"', lines)
    assert extra is not None
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    needed = {requirement.split(">")[0] for requirement in extras[extra.group(1)]}
    assert needed == {"amplifier-core", "pytest", "pytest-asyncio"}
    test_file = re.search(r"cat > \S+/test_behaviour.py <<'EOF'\n(.*?)\nEOF\n", lines, re.S)
    assert test_file is not None
    (tmp_path / "test_behaviour.py").write_text(test_file.group(1) + "\n", encoding="utf-8")
    command = lines.strip().splitlines()[-1].split("&& ", 1)[1].split()
    assert command[:3] == [".venv/bin/python", "-m", "pytest"]
    proc = subprocess.run(
        [sys.executable, *command[1:], "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("6 passed"), proc.stdout
    assert "warning" not in proc.stdout.lower(), proc.stdout


class Provider:
    """A scripted ``amplifier_core.interfaces.Provider``: one reply per call, each call gateable."""

    name = "scripted"

    def __init__(self, replies: list[ChatResponse | BaseException]) -> None:
        self.replies = replies
        self.requests: list[list[dict[str, Any]]] = []
        self.gates: dict[int, Gate] = {}

    def get_info(self) -> ProviderInfo:
        return ProviderInfo(id="scripted", display_name="Scripted provider")

    async def list_models(self) -> list[Any]:
        return []

    async def complete(self, request: ChatRequest, **kwargs: Any) -> ChatResponse:
        index = len(self.requests)
        self.requests.append([m.model_dump(exclude_none=True) for m in request.messages])
        if index in self.gates:
            await self.gates[index].passage()
        reply = self.replies[index]
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def parse_tool_calls(self, response: ChatResponse) -> list[ToolCall]:
        return list(response.tool_calls or [])


def text(reply: str) -> ChatResponse:
    return ChatResponse(content=[TextBlock(text=reply)])


def tool_call(name: str = "run_tests", *more: str) -> ChatResponse:
    """A reply asking for ``name`` (``call-1``), then each of ``more`` (``call-2``, ...), as one batch."""
    return ChatResponse(
        content=[TextBlock(text="Running the tests.")],
        tool_calls=[ToolCall(id=f"call-{i}", name=n, arguments={}) for i, n in enumerate((name, *more), 1)],
    )


def gated_tool(name: str = "run_tests", output: str = "12 passed, 1 failed") -> tuple[MockTool, Gate]:
    """amplifier-core's ``MockTool``, held at a gate while it runs."""
    tool, gate = MockTool(name, output), Gate()
    run = tool.execute.side_effect

    async def held(arguments: dict[str, Any]) -> Any:
        await gate.passage()
        return await run(arguments)

    tool.execute.side_effect = held
    return tool, gate


class Rig:
    """One mounted orchestrator with amplifier-core's doubles, a recorded history and a task group."""

    def __init__(self, provider: Provider, tools: dict[str, Any] | None = None, **config: Any) -> None:
        self.runtime = LiveRuntime()
        self.history = History.attach(self.runtime)
        self.coordinator = MockCoordinator()
        self.provider = provider
        self.tools = tools or {}
        self.context = MockContextManager()
        self.hooks = EventRecorder()
        self.config = {"runtime": self.runtime, **config}
        self.results: list[str] = []

    async def mount(self) -> LiveSteeringOrchestrator:
        await mount(self.coordinator, self.config)
        orchestrator = self.coordinator.mount_points["orchestrator"]
        assert isinstance(orchestrator, LiveSteeringOrchestrator)
        self.orchestrator = orchestrator
        return orchestrator

    async def execute(self, prompt: str = "Make the suite pass") -> None:
        self.results.append(
            await self.orchestrator.execute(
                prompt,
                self.context,
                {"default": self.provider},
                self.tools,
                self.hooks,
                coordinator=self.coordinator,
            )
        )

    def generation_id(self) -> str:
        generation = self.runtime.generation
        assert generation is not None
        gen_id: str = generation["id"]
        return gen_id

    async def steer(self, input_id: str = "s1", steer: str = STEER, kind: str = "steer") -> Any:
        capability = self.coordinator.get_capability(CAPABILITY)
        op = self.history.invoke(Input(kind, steer, id=input_id), self.generation_id())
        return self.history.complete(op, await capability["submit"](op.input, op.generation_id))

    def steers_in_context(self) -> list[dict[str, Any]]:
        return [m for m in self.context.messages if m.get("metadata", {}).get("input_id")]

    def hook_names(self) -> list[str]:
        return [name for name, _ in self.hooks.events]


@pytest.mark.anyio
async def test_mount_registers_the_capability_in_the_seeds_shape() -> None:
    """mount() puts the orchestrator at its mount point and registers {version, mode, cancellable, submit}."""
    coordinator = MockCoordinator()
    cleanup = await mount(coordinator, {})
    orchestrator = coordinator.mount_points["orchestrator"]
    capability = coordinator.get_capability(CAPABILITY)
    assert set(capability) == {"version", "mode", "cancellable", "submit"}
    assert capability["version"] == 1
    assert (capability["mode"], capability["cancellable"]) == ("request_boundary", False)
    assert capability["submit"] == orchestrator.runtime.submit_steering
    await cleanup()
    assert orchestrator.runtime.closed
    assert coordinator.get_capability(CAPABILITY)["mode"] == "unavailable"


@pytest.mark.anyio
async def test_amplifier_validator_passes() -> None:
    """amplifier-core's OrchestratorValidator accepts the module, by its import name."""
    result = await OrchestratorValidator().validate(amplifier_module.__name__)
    assert result.passed, result.errors


@pytest.mark.anyio
async def test_amplifier_loader_finds_the_module_by_name() -> None:
    """Amplifier's ModuleLoader resolves 'loop-live-steering' through the amplifier.modules entry point."""
    coordinator = MockCoordinator()
    mount_with_config = await ModuleLoader(coordinator=coordinator).load(MODULE_NAME, {"max_iterations": 4})
    cleanup = await mount_with_config(coordinator)
    orchestrator = coordinator.mount_points["orchestrator"]
    assert isinstance(orchestrator, LiveSteeringOrchestrator)
    assert orchestrator.max_iterations == 4
    await cleanup()


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"max_iterations": 0}, ValueError),
        ({"max_iterations": "5"}, TypeError),
        ({"max_iterations": True}, TypeError),
        ({"skip_tools_on_steer": 1}, TypeError),
        ({"runtime": object()}, TypeError),
        ({"default_provider": 3}, TypeError),
        ({"max_iteration": 5}, ValueError),
    ],
)
@pytest.mark.anyio
async def test_bad_config_is_refused_before_mounting(config: dict[str, Any], error: type[Exception]) -> None:
    """A wrong type or an unknown key raises at mount, and nothing is mounted or registered."""
    coordinator = MockCoordinator()
    with pytest.raises(error):
        await mount(coordinator, config)
    assert coordinator.mount_points.get("orchestrator") is None
    assert coordinator.get_capability(CAPABILITY) is None


@pytest.mark.anyio
async def test_steer_during_a_tool_lands_in_the_next_provider_request() -> None:
    """Normal application: a steer sent while a tool runs is in the next request, once, with its metadata."""
    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call(), text("Fixed it.")]), {"run_tests": tool})
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await tool_gate.wait_reached()
        gen_id = rig.generation_id()
        receipt = await rig.steer()
        assert receipt.to_dict() == {
            "accepted": True,
            "inputId": "s1",
            "generationId": gen_id,
            "disposition": "queued",
        }
        tool_gate.release()
    second = rig.provider.requests[1]
    assert [m["role"] for m in second] == ["user", "assistant", "tool", "user"]
    assert second[-1]["content"] == STEER
    assert second[-1]["metadata"]["target_generation_id"] == gen_id
    assert second[-1]["metadata"]["input_id"] == "s1"
    assert [m["content"] for m in rig.steers_in_context()] == [STEER]
    assert rig.runtime.receipt("s1").disposition == "applied"  # type: ignore[union-attr]
    assert rig.results == ["Fixed it."]
    names = rig.hook_names()
    # Amplifier's lifecycle events, with the steering events beside them, in order.
    assert names.index("steering.applied") < [i for i, n in enumerate(names) if n == "provider:request"][1]
    assert names[-3:] == ["generation.finished", "prompt:complete", "orchestrator:complete"]
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.anyio
async def test_late_steer_during_the_checkpoint_continues_the_same_generation() -> None:
    """Late arrival: a steer sent while the final answer is written continues the generation, no replay."""
    rig = Rig(Provider([text("Done."), text("Done, only the failing test.")]))
    await rig.mount()
    checkpoint = Gate()
    write = rig.context.add_message.side_effect

    async def held_answer(message: dict[str, Any]) -> None:
        await write(message)
        if message["role"] == "assistant" and not checkpoint.released:
            await checkpoint.passage()

    rig.context.add_message.side_effect = held_answer
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await checkpoint.wait_reached()
        gen_id = rig.generation_id()
        await rig.steer()
        checkpoint.release()
    assert rig.results == ["Done, only the failing test."]
    assert [m["role"] for m in rig.provider.requests[1]] == ["user", "assistant", "user"]
    assert [m["content"] for m in rig.context.messages].count("Make the suite pass") == 1
    types = [e["type"] for e in rig.history.events]
    assert types.count("generation.started") == 1
    assert "generation.continued" in types
    assert rig.history.events[-1]["type"] == "generation.finished"
    assert rig.history.events[-1]["input_ids"] == ["s1"]
    assert rig.history.events[-1]["generation_id"] == gen_id
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.anyio
async def test_cancellation_before_injection_holds_the_steer() -> None:
    """Cancellation before injection: the queued steer is held, never written, and not replayed later."""
    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call(), text("unused"), text("Next answer.")]), {"run_tests": tool})
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await tool_gate.wait_reached()
        await rig.steer()
        tg.cancel_scope.cancel()
    held = rig.runtime.receipt("s1")
    assert held is not None
    assert (held.disposition, held.reason) == ("held", "generation-cancelled")
    assert rig.steers_in_context() == []
    assert rig.history.events[-1]["type"] == "generation.cancelled"
    assert rig.history.events[-1]["accepted_input_ids"] == ["s1"]
    tool_gate.release()
    rig.provider.replies = rig.provider.replies[2:]
    rig.provider.requests.clear()
    await rig.execute("Next prompt")  # the next generation starts, and carries no held steer
    assert rig.steers_in_context() == []
    assert rig.history.events[-1]["type"] == "generation.finished"
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.anyio
async def test_interruption_after_a_partial_context_effect_is_unknown() -> None:
    """A context write that took effect and then failed is unknown (write-interrupted), not replayed."""
    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call(), text("unused")]), {"run_tests": tool})
    await rig.mount()
    write = rig.context.add_message.side_effect

    async def partial(message: dict[str, Any]) -> None:
        await write(message)
        if "metadata" in message:
            raise OSError("the context store went away after the write")

    rig.context.add_message.side_effect = partial

    async def drive() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(rig.execute)
            await tool_gate.wait_reached()
            await rig.steer()
            await rig.steer("s2", "And keep the old API")
            tool_gate.release()

    with pytest.raises(ExceptionGroup) as caught:
        await drive()
    assert caught.group_contains(OSError)
    first, second = rig.runtime.receipt("s1"), rig.runtime.receipt("s2")
    assert first is not None
    assert second is not None
    assert (first.disposition, first.reason) == ("unknown", "write-interrupted")
    assert (second.disposition, second.reason) == ("held", "generation-failed")
    assert [m["metadata"]["input_id"] for m in rig.steers_in_context()] == ["s1"]  # written once, never again
    assert len(rig.provider.requests) == 1
    assert rig.history.events[-1]["type"] == "generation.failed"
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.anyio
async def test_identity_reuse_repeats_or_conflicts() -> None:
    """An identical repeat answers the current receipt; the same id with other text is identity-conflict."""
    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call(), text("Fixed it.")]), {"run_tests": tool})
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await tool_gate.wait_reached()
        gen_id = rig.generation_id()
        first = await rig.steer()
        again = await rig.steer()
        conflict = await rig.steer(steer="Something else")
        tool_gate.release()
    assert (first.disposition, again.disposition) == ("queued", "queued")
    assert (conflict.accepted, conflict.reason) == (False, "identity-conflict")
    op = rig.history.invoke(Input("steer", STEER, id="s1"), gen_id)
    after = rig.history.complete(op, await rig.runtime.capability["submit"](op.input, gen_id))
    assert after.disposition == "applied"  # a repeat after the generation ended still answers
    assert len(rig.steers_in_context()) == 1
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.anyio
async def test_unsupported_kind_and_stale_generation_are_refused() -> None:
    """Unsupported kinds and stale anchors are refused before admission and change nothing."""
    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call(), text("Fixed it.")]), {"run_tests": tool})
    await rig.mount()
    submit = rig.coordinator.get_capability(CAPABILITY)["submit"]
    refusals = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await tool_gate.wait_reached()
        gen_id = rig.generation_id()
        wrong = [(Input("prompt", STEER, id="p1"), gen_id), (Input("steer", STEER, id="x1"), "gen-old")]
        for steer, anchor in wrong:
            op = rig.history.invoke(steer, anchor)
            refusals.append(rig.history.complete(op, await submit(steer, anchor)))
        tool_gate.release()
    op = rig.history.invoke(Input("steer", STEER, id="late"), gen_id)
    refusals.append(rig.history.complete(op, await submit(op.input, gen_id)))
    assert [(r.accepted, r.reason) for r in refusals] == [
        (False, "unsupported-kind"),
        (False, "stale-generation"),
        (False, "stale-generation"),
    ]
    assert rig.steers_in_context() == []
    assert rig.runtime.statistics().identities == 0
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.anyio
async def test_provider_failure_fails_the_generation_and_holds_pending_steers() -> None:
    """A provider error fails the generation (generation.failed); a steer still pending is held."""
    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call(), RuntimeError("provider down")]), {"run_tests": tool})
    await rig.mount()
    gate = rig.provider.gates[1] = Gate()

    async def drive() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(rig.execute)
            await tool_gate.wait_reached()
            await rig.steer()
            tool_gate.release()
            await gate.wait_reached()
            await rig.steer("s2", "Also update the changelog")
            gate.release()

    with pytest.raises(ExceptionGroup) as caught:
        await drive()
    assert caught.group_contains(RuntimeError, match="provider down")
    assert rig.runtime.receipt("s1").disposition == "applied"  # type: ignore[union-attr]
    held = rig.runtime.receipt("s2")
    assert held is not None
    assert (held.disposition, held.reason) == ("held", "generation-failed")
    assert rig.history.events[-1]["type"] == "generation.failed"
    assert rig.history.events[-1]["error"] == "RuntimeError"
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.anyio
async def test_call_budget_and_amplifier_cancellation_hold_what_is_pending() -> None:
    """max_iterations spent holds a pending steer (budget-exhausted); Amplifier's cancel holds (stopped)."""
    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call()]), {"run_tests": tool}, max_iterations=1)
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await tool_gate.wait_reached()
        await rig.steer()
        tool_gate.release()
    held = rig.runtime.receipt("s1")
    assert held is not None
    assert (held.disposition, held.reason) == ("held", "budget-exhausted")
    assert rig.hooks.get_events("orchestrator:complete")[-1][1]["status"] == "max_iterations"

    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call()]), {"run_tests": tool})
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await tool_gate.wait_reached()
        await rig.steer()
        rig.coordinator.cancellation.request_graceful()
        tool_gate.release()
    held = rig.runtime.receipt("s1")
    assert held is not None
    assert (held.disposition, held.reason) == ("held", "generation-stopped")
    assert rig.history.events[-1]["type"] == "generation.stopped"
    assert rig.steers_in_context() == []
    rig.history.check(require_final=True).assert_ok()


def test_steer_messages_are_valid_amplifier_messages() -> None:
    """A steer entry as written converts to Amplifier's Message model with its metadata intact."""
    from amplifier_core.message_models import Message

    metadata: Mapping[str, Any] = {
        "input_id": "s1",
        "target_generation_id": "gen-1",
        "delivery": "request_boundary",
    }
    message = Message(**{"role": "user", "content": STEER, "metadata": dict(metadata)})
    assert message.metadata == dict(metadata)


@pytest.mark.anyio
async def test_a_failing_tool_is_an_error_result_and_the_generation_goes_on() -> None:
    """As in Amplifier's basic loop, a tool that raises is a tool:error and an error result, not a failure."""
    tool = MockTool("run_tests")
    tool.execute.side_effect = OSError("disk full")
    rig = Rig(Provider([tool_call(), text("The disk is full.")]), {"run_tests": tool})
    await rig.mount()
    await rig.execute()
    assert rig.results == ["The disk is full."]
    last = rig.provider.requests[1][-1]
    assert (last["role"], last["content"]) == ("tool", "Error executing tool: disk full")
    assert rig.hooks.get_events("tool:error")[0][1]["error"] == {"type": "OSError", "msg": "disk full"}
    assert rig.history.events[-1]["type"] == "generation.finished"
    assert rig.hooks.get_events("orchestrator:complete")[0][1]["status"] == "success"


@pytest.mark.anyio
async def test_the_provider_of_lowest_priority_is_used_and_its_error_is_emitted() -> None:
    """Without default_provider the lowest priority wins (Amplifier's rule); its error is provider:error."""
    preferred, other = Provider([RuntimeError("rate limited")]), Provider([text("unused")])
    preferred.priority, other.priority = 10, 200  # type: ignore[attr-defined]
    rig = Rig(preferred)
    await rig.mount()
    with pytest.raises(RuntimeError, match="rate limited"):
        await rig.orchestrator.execute(
            "Make the suite pass", rig.context, {"other": other, "preferred": preferred}, {}, rig.hooks
        )
    assert (len(preferred.requests), len(other.requests)) == (1, 0)
    assert rig.hooks.get_events("provider:error")[0][1]["provider"] == "preferred"
    assert rig.history.events[-1]["type"] == "generation.failed"


@pytest.mark.anyio
async def test_steers_land_in_admission_order_and_stay_once_in_later_requests() -> None:
    """Two steers land in admission order at one boundary, and each is in every later request once."""
    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call(), tool_call(), text("Done.")]), {"run_tests": tool})
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await tool_gate.wait_reached()
        await rig.steer("s1", "first")
        await rig.steer("s2", "second")
        tool_gate.release()

    def steers(request: list[dict[str, Any]]) -> list[str]:
        return [m["content"] for m in request if "metadata" in m]

    assert [steers(r) for r in rig.provider.requests] == [[], ["first", "second"], ["first", "second"]]
    rig.history.check(require_final=True).assert_ok()


# -- the host holding only the coordinator -------------------------------------------------


@pytest.mark.anyio
async def test_the_registered_capability_is_live_and_follows_the_runtimes_close() -> None:
    """The capability a host looked up before shows mode "unavailable" once the runtime closes."""
    runtime = LiveRuntime()  # the host's own runtime: no cleanup of ours closes it
    coordinator = MockCoordinator()
    await mount(coordinator, {"runtime": runtime})
    capability = coordinator.get_capability(CAPABILITY)
    assert capability == runtime.capability  # the seed's four keys, the same values
    assert capability["mode"] == "request_boundary"
    await runtime.aclose()
    assert capability["mode"] == "unavailable"  # the same object, read again
    assert coordinator.get_capability(CAPABILITY)["mode"] == "unavailable"
    refused = await capability["submit"](Input("steer", STEER, id="late"), "gen-1")
    assert (refused.accepted, refused.reason) == (False, "closed")


@pytest.mark.anyio
async def test_a_host_with_only_the_coordinator_finds_the_generation_and_stops_it() -> None:
    """live.steering.runtime gives the running generation's id and stop(); no tool starts after it.

    The host stops the run while the first of two tool calls runs: that tool completes, the
    second never starts (its call gets STOPPED_TOOL_RESULT), no further provider call is made,
    the pending steer is held (generation-stopped) and execute returns the last reply's text.
    """
    first, first_gate = gated_tool("run_tests")
    second = MockTool("deploy", "deployed")
    tools = {"run_tests": first, "deploy": second}
    rig = Rig(Provider([tool_call("run_tests", "deploy"), text("unused")]), tools)
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await first_gate.wait_reached()
        runtime = rig.coordinator.get_capability(RUNTIME_CAPABILITY)
        assert runtime is rig.runtime
        generation = runtime.generation  # None between two executes
        assert generation is not None
        gen_id = generation["id"]
        await rig.steer()
        assert runtime.stop(gen_id) is True
        first_gate.release()
    assert runtime.generation is None
    assert len(rig.provider.requests) == 1  # no provider call after the stop
    assert first.execute.await_count == 1
    assert second.execute.await_count == 0  # no tool started after the stop
    results = {m["tool_call_id"]: m["content"] for m in rig.context.messages if m["role"] == "tool"}
    assert results == {"call-1": "12 passed, 1 failed", "call-2": STOPPED_TOOL_RESULT}  # every call answered
    held = rig.runtime.receipt("s1")
    assert held is not None
    assert (held.disposition, held.reason) == ("held", "generation-stopped")
    assert rig.steers_in_context() == []
    assert rig.results == ["Running the tests."]
    assert rig.history.events[-1]["type"] == "generation.stopped"
    assert rig.hooks.get_events("orchestrator:complete")[-1][1]["status"] == "cancelled"
    assert [n for n in rig.hook_names() if n == "tool:pre"] == ["tool:pre"]
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.anyio
async def test_a_fleet_stop_from_another_node_ends_the_run(tmp_path: Path) -> None:
    """A host on another fleet node stops the run by generation id (the path the HTTP stop takes):
    the running tool completes, the next never starts, no further provider call, the steer held."""
    first, first_gate = gated_tool("run_tests")
    second = MockTool("deploy", "deployed")
    async with owned_elsewhere(str(tmp_path / "fleet.db"), "chat-1") as (owner, host, runtime):
        rig = Rig(
            Provider([tool_call("run_tests", "deploy"), text("unused")]),
            {"run_tests": first, "deploy": second},
        )
        rig.runtime, rig.history = runtime, History.attach(runtime)
        rig.config["runtime"] = runtime
        await rig.mount()
        async with anyio.create_task_group() as tg:
            tg.start_soon(rig.execute)
            await first_gate.wait_reached()
            await steer_then_stop(owner, host, "chat-1", rig.generation_id(), Input("steer", STEER, id="s1"))
            first_gate.release()
        assert await final_receipt(host, "chat-1", "s1") == ("held", "generation-stopped")
    assert (len(rig.provider.requests), first.execute.await_count, second.execute.await_count) == (1, 1, 0)
    results = {m["tool_call_id"]: m["content"] for m in rig.context.messages if m["role"] == "tool"}
    assert results == {"call-1": "12 passed, 1 failed", "call-2": STOPPED_TOOL_RESULT}
    assert rig.steers_in_context() == []
    assert rig.results == ["Running the tests."]
    assert rig.hooks.get_events("orchestrator:complete")[-1][1]["status"] == "cancelled"
    assert rig.history.events[-1]["type"] == "generation.stopped"


@pytest.mark.anyio
async def test_a_host_stop_during_the_provider_call_starts_no_tool_it_asked_for() -> None:
    """A stop while the model answers: the tool calls of that answer get results, none runs."""
    tool = MockTool("run_tests", "12 passed")
    rig = Rig(Provider([tool_call(), text("unused")]), {"run_tests": tool})
    await rig.mount()
    gate = rig.provider.gates[0] = Gate()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await gate.wait_reached()
        assert rig.runtime.stop(rig.generation_id()) is True
        gate.release()
    assert (len(rig.provider.requests), tool.execute.await_count) == (1, 0)
    assert [m["content"] for m in rig.context.messages if m["role"] == "tool"] == [STOPPED_TOOL_RESULT]
    assert rig.history.events[-1]["type"] == "generation.stopped"
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.anyio
async def test_amplifier_cancellation_during_a_batch_starts_no_further_tool() -> None:
    """Amplifier's graceful cancel during a tool batch: the running tool ends, the next never starts."""
    first, first_gate = gated_tool("run_tests")
    second = MockTool("deploy", "deployed")
    rig = Rig(Provider([tool_call("run_tests", "deploy")]), {"run_tests": first, "deploy": second})
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await first_gate.wait_reached()
        rig.coordinator.cancellation.request_graceful()
        first_gate.release()
    assert second.execute.await_count == 0
    answered = {"role": "tool", "tool_call_id": "call-2", "content": STOPPED_TOOL_RESULT}
    assert rig.context.messages[-1] == answered
    assert rig.history.events[-1]["type"] == "generation.stopped"
    assert rig.hooks.get_events("orchestrator:complete")[-1][1]["status"] == "cancelled"


@pytest.mark.anyio
async def test_a_spent_budget_decides_before_a_continuation_is_announced() -> None:
    """max_iterations spent at the checkpoint with a steer pending: held, no generation.continued (C17)."""
    rig = Rig(Provider([text("Done."), text("unused")]), max_iterations=1)
    await rig.mount()
    checkpoint = Gate()
    write = rig.context.add_message.side_effect

    async def held_answer(message: dict[str, Any]) -> None:
        await write(message)
        if message["role"] == "assistant":
            await checkpoint.passage()

    rig.context.add_message.side_effect = held_answer
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await checkpoint.wait_reached()
        await rig.steer()
        checkpoint.release()
    types = [e["type"] for e in rig.history.events]
    assert "generation.continued" not in types
    assert types[-1] == "generation.stopped"
    held = rig.runtime.receipt("s1")
    assert held is not None
    assert (held.disposition, held.reason) == ("held", "budget-exhausted")
    assert len(rig.provider.requests) == 1
    assert rig.hooks.get_events("orchestrator:complete")[-1][1]["status"] == "max_iterations"
    rig.history.check(require_final=True).assert_ok()


# -- follow-ups (C29) and tool batches (C31) -----------------------------------------------


@pytest.mark.anyio
async def test_a_follow_up_is_the_next_turn_of_the_same_execute() -> None:
    """A follow-up sent while a tool runs starts the next generation once the answer is in, no new prompt."""
    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call(), text("Fixed it."), text("Changelog updated.")]), {"run_tests": tool})
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await tool_gate.wait_reached()
        anchor = rig.generation_id()
        queued = await rig.steer("f1", "Then update the changelog", kind="follow_up")
        tool_gate.release()
    assert (queued.accepted, queued.disposition) == (True, "queued")
    assert rig.results == ["Changelog updated."]
    assert len(rig.provider.requests) == 3
    assert "Then update the changelog" not in [m["content"] for m in rig.provider.requests[1]]
    last = rig.provider.requests[2][-1]
    assert (last["role"], last["content"]) == ("user", "Then update the changelog")
    assert last["metadata"]["delivery"] == "follow_up"
    assert last["metadata"]["target_generation_id"] != anchor  # written in the next generation
    applied = rig.runtime.receipt("f1")
    assert applied is not None
    assert (applied.disposition, applied.generation_id) == ("applied", anchor)
    types = [e["type"] for e in rig.history.events]
    assert types.count("generation.started") == 2
    assert types.count("generation.finished") == 2
    assert [m["content"] for m in rig.context.messages].count("Make the suite pass") == 1  # no replay
    complete = rig.hooks.get_events("orchestrator:complete")
    assert [c[1]["turn_count"] for c in complete] == [3]  # one execute, its three provider calls
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.anyio
async def test_a_stopped_run_discards_its_follow_up() -> None:
    """A host's stop holds the pending follow-up (generation-stopped): no next turn runs."""
    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call(), text("unused")]), {"run_tests": tool})
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await tool_gate.wait_reached()
        await rig.steer("f1", "Then update the changelog", kind="follow_up")
        rig.runtime.stop(rig.generation_id())
        tool_gate.release()
    held = rig.runtime.receipt("f1")
    assert held is not None
    assert (held.disposition, held.reason) == ("held", "generation-stopped")
    assert len(rig.provider.requests) == 1
    assert [e["type"] for e in rig.history.events].count("generation.started") == 1
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.anyio
async def test_skip_tools_on_steer_answers_the_rest_of_the_batch_without_running_it() -> None:
    """C31: a steer pending after a tool returned: the rest of the batch gets the pinned result, unrun."""
    first, first_gate = gated_tool("run_tests")
    lint, deploy = MockTool("lint", "clean"), MockTool("deploy", "deployed")
    rig = Rig(
        Provider([tool_call("run_tests", "lint", "deploy"), text("Fixed it.")]),
        {"run_tests": first, "lint": lint, "deploy": deploy},
        skip_tools_on_steer=True,
    )
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await first_gate.wait_reached()
        gen_id = rig.generation_id()
        await rig.steer()
        first_gate.release()
    assert (lint.execute.await_count, deploy.execute.await_count) == (0, 0)
    second = rig.provider.requests[1]
    assert [(m["role"], m.get("tool_call_id"), m["content"]) for m in second[2:]] == [
        ("tool", "call-1", "12 passed, 1 failed"),
        ("tool", "call-2", SKIPPED_TOOL_RESULT),
        ("tool", "call-3", SKIPPED_TOOL_RESULT),
        ("user", None, STEER),  # the steer, at the next boundary
    ]
    (skipped,) = [e for e in rig.history.events if e["type"] == "tools.skipped"]
    assert (skipped["generation_id"], skipped["tool_call_ids"], skipped["input_ids"]) == (
        gen_id,
        ["call-2", "call-3"],
        ["s1"],
    )
    assert rig.hooks.get_events("tools.skipped")[0][1]["tool_call_ids"] == ["call-2", "call-3"]
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.anyio
async def test_without_skip_tools_on_steer_every_tool_of_the_batch_runs() -> None:
    """The default is off: a steer pending mid-batch waits, every tool runs, nothing is skipped."""
    first, first_gate = gated_tool("run_tests")
    lint = MockTool("lint", "clean")
    tools = {"run_tests": first, "lint": lint}
    rig = Rig(Provider([tool_call("run_tests", "lint"), text("Fixed it.")]), tools)
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await first_gate.wait_reached()
        await rig.steer()
        first_gate.release()
    assert lint.execute.await_count == 1
    assert SKIPPED_TOOL_RESULT not in [m["content"] for m in rig.context.messages]
    assert "tools.skipped" not in [e["type"] for e in rig.history.events]
    assert rig.provider.requests[1][-1]["content"] == STEER


@pytest.mark.anyio
async def test_a_pending_follow_up_skips_no_tool() -> None:
    """C31 skips for a steer only: a follow-up pending mid-batch lets every tool run."""
    first, first_gate = gated_tool("run_tests")
    lint = MockTool("lint", "clean")
    rig = Rig(
        Provider([tool_call("run_tests", "lint"), text("Fixed it."), text("Done too.")]),
        {"run_tests": first, "lint": lint},
        skip_tools_on_steer=True,
    )
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await first_gate.wait_reached()
        await rig.steer("f1", "Then this", kind="follow_up")
        first_gate.release()
    assert lint.execute.await_count == 1
    assert "tools.skipped" not in [e["type"] for e in rig.history.events]
    assert rig.results == ["Done too."]
    rig.history.check(require_final=True).assert_ok()


class ListingHooks(EventRecorder):  # type: ignore[misc]
    """A hook registry that lists its handlers, as amplifier-core's HookRegistry does."""

    def __init__(self, handled: set[str]) -> None:
        super().__init__()
        self.handled = handled

    def list_handlers(self, event: str | None = None) -> dict[str, list[str]]:
        assert event is not None
        return {event: ["a-handler"] if event in self.handled else []}


@pytest.mark.anyio
async def test_a_registry_listing_its_handlers_gets_only_the_events_someone_listens_to() -> None:
    """With list_handlers, a runtime event without a handler is not emitted; Amplifier's own are."""
    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call(), text("Fixed it.")]), {"run_tests": tool})
    rig.hooks = ListingHooks({"steering.applied"})
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await tool_gate.wait_reached()
        await rig.steer()
        tool_gate.release()
    names = rig.hook_names()
    assert [n for n in names if "." in n] == ["steering.applied"]  # no generation.started, ...
    assert "provider:request" in names
    assert "orchestrator:complete" in names  # Amplifier's lifecycle events: all of them


class DenyingHooks(EventRecorder):  # type: ignore[misc]
    """A hook registry whose prompt:submit handler denies the prompt."""

    async def emit(self, event: str, data: dict[str, Any]) -> HookResult:
        await super().emit(event, data)
        if event == "prompt:submit":
            return HookResult(action="deny", reason="not today")
        return HookResult(action="continue")


@pytest.mark.anyio
async def test_a_denied_prompt_ends_the_generation_stopped_without_a_provider_call() -> None:
    """A hook denying prompt:submit: "Operation denied: ...", no provider call, the generation stopped."""
    rig = Rig(Provider([text("unused")]))
    rig.hooks = DenyingHooks()
    await rig.mount()
    await rig.execute()
    assert rig.results == ["Operation denied: not today"]
    assert rig.provider.requests == []
    assert rig.context.messages == []  # the prompt was not added
    assert rig.history.events[-1]["type"] == "generation.stopped"
    rig.history.check(require_final=True).assert_ok()


class ActingHooks(EventRecorder):  # type: ignore[misc]
    """A hook registry answering ``actions[event]`` (a ``HookResult``, or an exception to raise)
    at that event; ``gates[event]`` holds its emit there, after recording it."""

    def __init__(self, actions: dict[str, HookResult | BaseException] | None = None) -> None:
        super().__init__()
        self.actions = actions or {}
        self.gates: dict[str, Gate] = {}

    async def emit(self, event: str, data: dict[str, Any]) -> HookResult:
        await super().emit(event, data)
        if event in self.gates:
            await self.gates[event].passage()
        action = self.actions.get(event)
        if isinstance(action, BaseException):
            raise action
        return action or HookResult(action="continue")


class Approvals:
    """An app's approval system (amplifier_core.approval.ApprovalSystem) that answers ``answer``."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def request_approval(
        self,
        prompt: str,
        options: list[str],
        timeout: float,  # noqa: ASYNC109 - the protocol's signature: the timeout is the app's to keep
        default: str,
    ) -> str:
        self.asked.append(prompt)
        return self.answer


class ApprovingCoordinator(MockCoordinator):  # type: ignore[misc]
    """amplifier-core's mock coordinator with an approval system of the test's own."""

    def __new__(cls, approvals: Approvals) -> ApprovingCoordinator:
        session = types.SimpleNamespace(
            session_id="test-session",
            parent_id=None,
            config={"session": {"orchestrator": "o", "context": "c"}},
        )
        coordinator: ApprovingCoordinator = ModuleCoordinator.__new__(cls, session, approvals, None)
        return coordinator

    def __init__(self, approvals: Approvals) -> None:
        super().__init__()


def tool_results(rig: Rig) -> list[tuple[str, str]]:
    return [(m["tool_call_id"], m["content"]) for m in rig.context.messages if m["role"] == "tool"]


@pytest.mark.anyio
async def test_a_cancelled_batch_leaves_every_tool_call_a_result() -> None:
    """The execute task cancelled during the first tool of two: that call is answered cancelled, the
    next not run, and the next execute sends a conversation in which every tool call has a result."""
    tool, tool_gate = gated_tool("run_tests")
    deploy = MockTool("deploy", "deployed")
    rig = Rig(
        Provider([tool_call("run_tests", "deploy"), text("Next answer.")]),
        {"run_tests": tool, "deploy": deploy},
    )
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await tool_gate.wait_reached()
        await rig.steer()
        tg.cancel_scope.cancel()
    assert tool_results(rig) == [("call-1", TOOL_CANCELLED_RESULT), ("call-2", STOPPED_TOOL_RESULT)]
    assert deploy.execute.await_count == 0
    held = rig.runtime.receipt("s1")
    assert held is not None
    assert (held.disposition, held.reason) == ("held", "generation-cancelled")
    assert rig.hook_names()[-2:] == ["steering.held", "generation.cancelled"]  # handed on, cancelled or not
    tool_gate.release()
    await rig.execute("Next prompt")
    asked = [m.get("tool_call_id") for m in rig.provider.requests[1] if m["role"] == "tool"]
    assert asked == ["call-1", "call-2"]
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.anyio
async def test_a_result_write_that_failed_after_its_effect_is_not_written_twice() -> None:
    """The context's add_message of a tool result stores it, then raises: that call keeps the one
    result it got (its effect cannot be known, so it is never written again), the next is answered."""
    rig = Rig(
        Provider([tool_call("run_tests", "deploy")]),
        {"run_tests": MockTool("run_tests", "12 passed"), "deploy": MockTool("deploy", "deployed")},
    )
    await rig.mount()
    write = rig.context.add_message.side_effect

    async def store_then_fail(message: dict[str, Any]) -> None:
        await write(message)
        if message.get("tool_call_id") == "call-1":
            raise OSError("the context store went away after the write")

    rig.context.add_message.side_effect = store_then_fail
    with pytest.raises(OSError, match="went away"):
        await rig.execute()
    assert tool_results(rig) == [("call-1", "12 passed"), ("call-2", TOOL_FAILED_RESULT)]


@pytest.mark.anyio
async def test_a_cancelled_execute_does_not_wait_on_a_hanging_context_for_ever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Cancelled during a tool, with a context whose writes never return: the results it owes are
    tried for FLUSH_GRACE at most, then the cancellation goes on (it was unbounded)."""
    monkeypatch.setattr(amplifier_module, "FLUSH_GRACE", 0.01)
    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call(), text("unused")]), {"run_tests": tool})
    await rig.mount()
    write = rig.context.add_message.side_effect
    never = anyio.Event()

    async def hangs_on_tool_results(message: dict[str, Any]) -> None:
        if message["role"] == "tool":
            await never.wait()
        await write(message)

    rig.context.add_message.side_effect = hangs_on_tool_results
    with anyio.fail_after(60):  # a bound for a broken build, not a measurement
        async with anyio.create_task_group() as tg:
            tg.start_soon(rig.execute)
            await tool_gate.wait_reached()
            tg.cancel_scope.cancel()
    assert rig.history.events[-1]["type"] == "generation.cancelled"


@pytest.mark.anyio
async def test_a_hook_that_raises_after_a_tool_fails_the_run_with_every_call_answered() -> None:
    """A tool:post hook that raises: the generation fails, and the call whose result it cut off is
    answered failed, the one after it not run."""
    rig = Rig(
        Provider([tool_call("run_tests", "deploy")]),
        {"run_tests": MockTool("run_tests", "12 passed"), "deploy": MockTool("deploy", "deployed")},
    )
    rig.hooks = ActingHooks({"tool:post": RuntimeError("the audit hook broke")})
    await rig.mount()
    with pytest.raises(RuntimeError, match="the audit hook broke"):
        await rig.execute()
    assert tool_results(rig) == [("call-1", TOOL_FAILED_RESULT), ("call-2", STOPPED_TOOL_RESULT)]
    assert rig.history.events[-1]["type"] == "generation.failed"
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.anyio
async def test_a_host_stop_while_the_request_is_prepared_sends_no_request() -> None:
    """A stop while the provider:request hooks run (after the round's check): no provider call."""
    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call(), text("unused")]), {"run_tests": tool})
    rig.hooks = ActingHooks()
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await tool_gate.wait_reached()
        gate = rig.hooks.gates["provider:request"] = Gate()  # the second round's request
        tool_gate.release()
        await gate.wait_reached()
        assert rig.runtime.stop(rig.generation_id()) is True
        gate.release()
    assert len(rig.provider.requests) == 1
    assert rig.history.events[-1]["type"] == "generation.stopped"
    assert rig.hooks.get_events("orchestrator:complete")[-1][1]["status"] == "cancelled"
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.parametrize("how", ["stop", "aclose"])
@pytest.mark.anyio
async def test_a_stop_or_close_while_a_steer_is_written_sends_no_request(how: str) -> None:
    """A host stop or the runtime's close while the boundary writes a steer: the write completes
    (applied), and the run ends there with no further provider call (C17), status cancelled."""
    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call(), text("unused")]), {"run_tests": tool})
    await rig.mount()
    writing = Gate()
    write = rig.context.add_message.side_effect

    async def gated_steer_write(message: dict[str, Any]) -> None:
        if message["content"] == STEER:
            await writing.passage()
        await write(message)

    rig.context.add_message.side_effect = gated_steer_write
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await tool_gate.wait_reached()
        gen_id = rig.generation_id()
        await rig.steer()
        tool_gate.release()
        await writing.wait_reached()
        if how == "stop":
            assert rig.runtime.stop(gen_id) is True
        else:
            await rig.runtime.aclose()
        writing.release()
    assert len(rig.provider.requests) == 1
    assert [m["content"] for m in rig.steers_in_context()] == [STEER]
    assert rig.runtime.receipt("s1").disposition == "applied"  # type: ignore[union-attr]
    assert rig.history.events[-1]["type"] == "generation.stopped"
    assert rig.hooks.get_events("orchestrator:complete")[-1][1]["status"] == "cancelled"
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.parametrize(
    ("answer", "runs"),
    [(None, False), ("Deny", False), ("Allow", True)],
    ids=["deny", "approval-refused", "approval-given"],
)
@pytest.mark.anyio
async def test_a_tool_pre_hook_that_denies_or_an_approval_refused_runs_no_tool(
    answer: str | None, runs: bool
) -> None:
    """tool:pre answering deny, or ask_user refused by the app's approval system: the tool does not
    run and its call is answered "Denied by hook: ..."; an approval given runs it, as the basic loop."""
    tool = MockTool("rm_rf", "removed")
    rig = Rig(Provider([tool_call("rm_rf"), text("Done.")]), {"rm_rf": tool})
    if answer is None:
        action = HookResult(action="deny", reason="not on this machine")
    else:
        rig.coordinator = ApprovingCoordinator(Approvals(answer))
        action = HookResult(action="ask_user", approval_prompt="Remove everything?")
    rig.hooks = ActingHooks({"tool:pre": action})
    await rig.mount()
    await rig.execute()
    assert tool.execute.await_count == (1 if runs else 0)
    result = tool_results(rig)[0][1]
    if runs:
        assert result == "removed"
    else:
        assert result.startswith("Denied by hook: ")
    assert rig.results == ["Done."]
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.anyio
async def test_a_denied_provider_request_ends_the_run_and_holds_what_is_pending() -> None:
    """provider:request answering deny: no provider call, "Operation denied: ...", and a steer
    sent while that hook ran held, never written."""
    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call(), text("unused")]), {"run_tests": tool})
    rig.hooks = ActingHooks()
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await tool_gate.wait_reached()
        gate = rig.hooks.gates["provider:request"] = Gate()  # the second round's request
        rig.hooks.actions["provider:request"] = HookResult(action="deny", reason="over budget")
        tool_gate.release()
        await gate.wait_reached()
        await rig.steer()
        gate.release()
    assert rig.results == ["Operation denied: over budget"]
    assert len(rig.provider.requests) == 1
    held = rig.runtime.receipt("s1")
    assert held is not None
    assert (held.disposition, held.reason) == ("held", "generation-stopped")
    assert rig.steers_in_context() == []
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.anyio
async def test_amplifier_cancellation_during_the_last_call_starts_no_follow_up_turn() -> None:
    """Amplifier's cancel requested while the model writes its answer: the follow-up is held
    generation-stopped and no generation is opened for it."""
    rig = Rig(Provider([text("Done."), text("unused")]))
    await rig.mount()
    gate = rig.provider.gates[0] = Gate()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await gate.wait_reached()
        await rig.steer("f1", "Then update the changelog", kind="follow_up")
        rig.coordinator.cancellation.request_graceful()
        gate.release()
    held = rig.runtime.receipt("f1")
    assert held is not None
    assert (held.disposition, held.reason) == ("held", "generation-stopped")
    assert [e["type"] for e in rig.history.events].count("generation.started") == 1
    assert "generation.started" not in rig.hook_names()[1:]
    assert len(rig.provider.requests) == 1
    assert rig.hooks.get_events("orchestrator:complete")[-1][1]["status"] == "cancelled"
    rig.history.check(require_final=True).assert_ok()


@pytest.mark.anyio
async def test_a_refused_concurrent_execute_changes_nothing() -> None:
    """A second execute while one runs raises GenerationStateError and hands none of the first
    run's events to its own hooks: they reach the first run's."""
    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call(), text("Fixed it.")]), {"run_tests": tool})
    await rig.mount()
    other = EventRecorder()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await tool_gate.wait_reached()
        await rig.steer()
        with pytest.raises(GenerationStateError, match="still running"):
            await rig.orchestrator.execute("again", rig.context, {"d": rig.provider}, rig.tools, other)
        tool_gate.release()
    assert other.events == []
    assert "steering.accepted" in rig.hook_names()
    assert rig.runtime.receipt("s1").disposition == "applied"  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_events_whose_emit_was_cancelled_still_reach_the_hooks() -> None:
    """The task cancelled while the hooks take a runtime event: that event is not dropped, and the
    terminal events reach the hooks before execute's cancellation goes on."""
    tool, tool_gate = gated_tool()
    rig = Rig(Provider([tool_call(), text("unused")]), {"run_tests": tool})
    rig.hooks = ActingHooks()
    await rig.mount()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.execute)
        await tool_gate.wait_reached()
        await rig.steer()
        tool_gate.release()
        gate = rig.hooks.gates["steering.accepted"] = Gate()
        await gate.wait_reached()  # the next round hands the steer's event on: cancelled there
        del rig.hooks.gates["steering.accepted"]
        tg.cancel_scope.cancel()
    published = [e["type"] for e in rig.history.events]
    assert published[1] == "steering.accepted"
    assert published[-1] == "generation.cancelled"
    runtime_names = [n for n in rig.hook_names() if "." in n]  # the runtime's events, not Amplifier's (x:y)
    assert runtime_names == [published[0], published[1], *published[1:]]  # the cut-short emit, again


@pytest.mark.parametrize("config", [["max_iterations"], "max_iterations=5", 5])
@pytest.mark.anyio
async def test_a_config_that_is_not_a_mapping_is_a_type_error(config: Any) -> None:
    """A config of the wrong type raises TypeError naming the module, and nothing is mounted."""
    coordinator = MockCoordinator()
    with pytest.raises(TypeError, match="config must be a mapping"):
        await mount(coordinator, config)
    assert coordinator.mount_points.get("orchestrator") is None
    with pytest.raises(TypeError, match="config must be a mapping"):
        LiveSteeringOrchestrator(config)


# -- a real AmplifierSession, mounted from a mount plan -------------------------------------


class MemoryContext:
    """A context module's manager (amplifier_core.interfaces.ContextManager), in memory."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def add_message(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    async def get_messages_for_request(self, token_budget: Any = None, provider: Any = None) -> list[Any]:
        return list(self.messages)

    async def get_messages(self) -> list[dict[str, Any]]:
        return list(self.messages)

    async def set_messages(self, messages: list[dict[str, Any]]) -> None:
        self.messages = list(messages)

    async def clear(self) -> None:
        self.messages.clear()


class StandInLoader(ModuleLoader):  # type: ignore[misc]
    """Amplifier's loader, knowing this test's provider, context and tools as modules by name;
    it resolves every other name (``loop-live-steering``) as usual, through its entry point."""

    def __init__(self, coordinator: Any, modules: dict[str, tuple[str, str, Any]]) -> None:
        super().__init__(coordinator=coordinator)
        self.modules = modules

    async def load(
        self, module_id: str, config: Any = None, source_hint: Any = None, coordinator: Any = None
    ) -> Any:
        if module_id not in self.modules:
            return await super().load(module_id, config, source_hint, coordinator)
        mount_point, name, module = self.modules[module_id]

        async def mount_it(coordinator: Any) -> None:
            await coordinator.mount(mount_point, module, **({"name": name} if name else {}))

        return mount_it


def real_session(provider: Provider, tools: dict[str, Any], **config: Any) -> tuple[Any, MemoryContext]:
    """An ``AmplifierSession`` whose mount plan names this package's orchestrator and the stand-ins."""
    context = MemoryContext()
    plan = {
        "session": {"orchestrator": MODULE_NAME, "context": "context-memory"},
        "orchestrator": {"config": config},
        "providers": [{"module": "provider-scripted"}],
        "tools": [{"module": f"tool-{name}"} for name in tools],
    }
    modules: dict[str, tuple[str, str, Any]] = {
        "context-memory": ("context", "", context),
        "provider-scripted": ("providers", "scripted", provider),
    }
    modules.update({f"tool-{name}": ("tools", name, tool) for name, tool in tools.items()})
    session = AmplifierSession(plan)
    session.coordinator.loader = StandInLoader(session.coordinator, modules)  # what initialize() uses
    return session, context


@pytest.mark.anyio
async def test_a_real_session_mounts_the_plan_and_a_host_steers_through_its_coordinator() -> None:
    """AmplifierSession from a mount plan: the host, holding only the coordinator, steers mid-tool."""
    tool, tool_gate = gated_tool()
    provider = Provider([tool_call(), text("Fixed it.")])
    session, context = real_session(provider, {"run_tests": tool}, max_iterations=8)
    seen: list[tuple[str, dict[str, Any]]] = []
    answers: list[str] = []

    async def record(event: str, data: dict[str, Any]) -> HookResult:
        seen.append((event, data))
        return HookResult(action="continue")

    async with session:
        coordinator = session.coordinator
        orchestrator = coordinator.get("orchestrator")
        assert isinstance(orchestrator, LiveSteeringOrchestrator)
        assert orchestrator.max_iterations == 8  # the plan's orchestrator config
        coordinator.hooks.register("steering.applied", record, name="test-steering-applied")
        runtime = coordinator.get_capability(RUNTIME_CAPABILITY)
        history = History.attach(runtime)

        async def agent() -> None:
            answers.append(await session.execute("Make the suite pass"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(agent)
            await tool_gate.wait_reached()
            gen_id = runtime.generation["id"]
            capability = coordinator.get_capability(CAPABILITY)
            op = history.invoke(Input("steer", STEER, id="s1"), gen_id)
            receipt = history.complete(op, await capability["submit"](op.input, gen_id))
            assert receipt.disposition == "queued"
            tool_gate.release()
        assert answers == ["Fixed it."]
        assert provider.requests[1][-1]["content"] == STEER
        assert provider.requests[1][-1]["metadata"]["input_id"] == "s1"
        assert [m["content"] for m in context.messages if "metadata" in m] == [STEER]
        assert [e for e, _ in seen] == ["steering.applied"]  # through Amplifier's own hook registry
        assert seen[0][1]["input_id"] == "s1"
        history.check(require_final=True).assert_ok()
        capability = coordinator.get_capability(CAPABILITY)
        assert capability["mode"] == "request_boundary"
    assert capability["mode"] == "unavailable"  # the session's cleanup closed the runtime it made
    assert runtime.closed


@pytest.mark.anyio
async def test_a_real_session_is_stopped_by_a_host_holding_only_the_coordinator() -> None:
    """runtime.stop(id) from the coordinator's capability ends session.execute at its next boundary."""
    first, first_gate = gated_tool("run_tests")
    second = MockTool("deploy", "deployed")
    provider = Provider([tool_call("run_tests", "deploy"), text("unused")])
    session, context = real_session(provider, {"run_tests": first, "deploy": second})
    answers: list[str] = []
    async with session:
        runtime = session.coordinator.get_capability(RUNTIME_CAPABILITY)

        async def agent() -> None:
            answers.append(await session.execute("Make the suite pass"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(agent)
            await first_gate.wait_reached()
            assert runtime.stop(runtime.generation["id"]) is True
            first_gate.release()
        assert answers == ["Running the tests."]
        assert (len(provider.requests), second.execute.await_count) == (1, 0)
        assert context.messages[-1]["content"] == STOPPED_TOOL_RESULT
        assert runtime.recent_events()[-1]["type"] == "generation.stopped"
        assert runtime.generation is None


@pytest.mark.anyio
async def test_a_real_session_runs_a_follow_up_as_the_next_turn() -> None:
    """In a real session a follow-up runs in the same session.execute, after the answer, no new prompt."""
    tool, tool_gate = gated_tool()
    provider = Provider([tool_call(), text("Fixed it."), text("Changelog updated.")])
    session, _ = real_session(provider, {"run_tests": tool})
    answers: list[str] = []
    async with session:
        runtime = session.coordinator.get_capability(RUNTIME_CAPABILITY)
        submit = session.coordinator.get_capability(CAPABILITY)["submit"]

        async def agent() -> None:
            answers.append(await session.execute("Make the suite pass"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(agent)
            await tool_gate.wait_reached()
            await submit(Input("follow_up", "Then update the changelog", id="f1"), runtime.generation["id"])
            tool_gate.release()
        assert answers == ["Changelog updated."]
        assert provider.requests[2][-1]["content"] == "Then update the changelog"
        assert runtime.receipt("f1").disposition == "applied"


@pytest.mark.anyio
async def test_a_real_session_reports_a_bad_orchestrator_config_with_its_message() -> None:
    """In a mount plan, max_iterations: "5" fails the session's initialize(); Amplifier wraps the
    TypeError mount() raises in its RuntimeError, whose message keeps ours."""
    session, _ = real_session(Provider([]), {}, max_iterations="5")
    try:
        with pytest.raises(RuntimeError, match=r"config\['max_iterations'\] must be an int, got '5'"):
            await session.initialize()
    finally:
        await session.cleanup()  # the kernel's own state, released before the interpreter exits


# -- the module's own code is anyio; Amplifier's kernel is asyncio-only ---------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.anyio
async def test_the_orchestrator_itself_runs_on_both_anyio_backends(anyio_backend: str) -> None:
    """Constructed directly (no coordinator) with Python doubles, execute runs on trio as on asyncio.

    Amplifier's coordinator (even amplifier-core's MockCoordinator) and session are a Rust kernel
    that needs a running asyncio loop, so mounting is asyncio-only; the loop itself uses only anyio.
    """
    runtime = LiveRuntime()
    orchestrator = LiveSteeringOrchestrator({"runtime": runtime})
    provider = Provider([tool_call(), text("Fixed it.")])
    context, hooks = MemoryContext(), EventRecorder()
    running, may_finish = anyio.Event(), anyio.Event()

    class Tool:
        name, description, input_schema = "run_tests", "Run the tests", {"type": "object"}

        async def execute(self, arguments: dict[str, Any]) -> Any:
            running.set()
            await may_finish.wait()
            return ToolResult(success=True, output="12 passed, 1 failed")

    answers: list[str] = []

    async def agent() -> None:
        tools = {"run_tests": Tool()}
        answer = await orchestrator.execute("Make the suite pass", context, {"p": provider}, tools, hooks)
        answers.append(answer)

    async with anyio.create_task_group() as tg:
        tg.start_soon(agent)
        await running.wait()
        generation = runtime.generation
        assert generation is not None
        receipt = await runtime.capability["submit"](Input("steer", STEER, id="s1"), generation["id"])
        assert receipt.disposition == "queued"
        may_finish.set()
    assert answers == ["Fixed it."]
    assert provider.requests[1][-1]["content"] == STEER
    assert runtime.receipt("s1").disposition == "applied"  # type: ignore[union-attr]
    await runtime.aclose()
