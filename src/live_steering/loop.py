"""A reference agent loop built only on the public engine-side API.

Read this file as the worked example of embedding a ``LiveRuntime``: the request
boundary sits at the top of every iteration (before the first provider call and
after every tool round), the after-checkpoint decision ends the loop, and a stop
or an exhausted call budget ends the generation without resuming work. Follow-ups
(C29) left when a generation finished run as the next generation, with no new
prompt; ``skip_tools_on_steer`` answers the rest of a tool batch without running it
once a steer is pending (C31). It owns no steering state of its own: everything
about inputs is the runtime's.

>>> loop = AgentLoop(runtime, provider, tools)             # doctest: +SKIP
>>> result = await loop.run("Fix the failing test")         # doctest: +SKIP
>>> result.outcome, result.applied_input_ids                 # doctest: +SKIP
('finished', ['fix-1'])
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Protocol

import anyio
import attrs

from ._errors import RuntimeClosedError
from ._rules import (
    FOLLOW_UP,
    SKIPPED_TOOL_RESULT,
    STOPPED_TOOL_RESULT,
    TOOL_CANCELLED_RESULT,
    TOOL_FAILED_RESULT,
)
from ._runtime import Generation, LiveRuntime, _only_cancellation
from ._types import Disposition, HoldReason, Input, StopReason

__all__ = [
    "AgentLoop",
    "Context",
    "ContextEntry",
    "FunctionTools",
    "LoopOutcome",
    "LoopResult",
    "Provider",
    "Reply",
    "SKIPPED_TOOL_RESULT",
    "STOPPED_TOOL_RESULT",
    "TOOL_CANCELLED_RESULT",
    "TOOL_FAILED_RESULT",
    "ToolCall",
    "ToolRunner",
]


@attrs.frozen
class ToolCall:
    """One tool call the model asked for."""

    id: str
    """The provider's id for this call."""
    name: str
    """Which tool."""
    arguments: Mapping[str, Any] = attrs.field(factory=dict)
    """The tool's arguments, as the provider gave them."""


def _tool_calls(calls: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(calls)


@attrs.frozen
class Reply:
    """One model reply: text, and the tool calls to run before the next request."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_tool_calls)


@attrs.frozen
class ContextEntry:
    """One entry of the loop's context, with metadata (steers carry their input ids, C13)."""

    role: str
    """``"user"`` (the prompt, and a follow-up: the next turn's request, C29), ``"assistant"``,
    ``"tool"`` or ``"steer"``."""
    text: str
    metadata: Mapping[str, Any] = attrs.field(factory=dict)


class Context:
    """The loop's context store: an ordered list of entries. Subclass it to persist or observe."""

    def __init__(self) -> None:
        self.entries: list[ContextEntry] = []

    def add(self, role: str, text: str, metadata: Mapping[str, Any] | None = None) -> None:
        """Append an entry."""
        self.entries.append(ContextEntry(role, text, dict(metadata or {})))

    async def add_steer(self, input: Input, metadata: Mapping[str, Any]) -> None:
        """The boundary's writer: append a steer (a follow-up as a ``"user"`` entry: it is the
        next turn's request, C29) with its metadata (C13). O(1)."""
        self.add("user" if metadata.get("kind") == FOLLOW_UP else "steer", input.text, metadata)

    def snapshot(self) -> tuple[ContextEntry, ...]:
        """The request as it is sent to the provider: an immutable copy."""
        return tuple(self.entries)


class Provider(Protocol):
    """A model provider: one request in, one reply out."""

    async def complete(self, request: Sequence[ContextEntry]) -> Reply: ...


class ToolRunner(Protocol):
    """Runs one tool call and returns its textual result."""

    async def run(self, call: ToolCall) -> str: ...


class FunctionTools:
    """A ``ToolRunner`` over a mapping of tool name to ``async def tool(**arguments) -> str``."""

    def __init__(self, tools: Mapping[str, Callable[..., Awaitable[str]]]) -> None:
        self._tools = dict(tools)

    async def run(self, call: ToolCall) -> str:
        tool = self._tools.get(call.name)
        if tool is None:
            return f"error: no tool named {call.name!r}"
        return await tool(**call.arguments)


class LoopOutcome(enum.StrEnum):
    """How one ``AgentLoop.run`` ended (failure and cancellation raise instead)."""

    FINISHED = "finished"
    """The model stopped calling tools and nothing was pending after the checkpoint."""
    STOPPED = "stopped"
    """``stop()`` (or a host's stop), or the runtime closed: pending steers are held."""
    BUDGET_EXHAUSTED = "budget-exhausted"
    """The call budget was spent: pending steers are held ``budget-exhausted``."""


#: The generation's end reason (``Generation.end_reason``; ``None``: finished) -> the outcome.
_OUTCOMES: Final[dict[HoldReason | None, LoopOutcome]] = {
    None: LoopOutcome.FINISHED,
    HoldReason.BUDGET_EXHAUSTED: LoopOutcome.BUDGET_EXHAUSTED,
    HoldReason.GENERATION_STOPPED: LoopOutcome.STOPPED,
    HoldReason.RUNTIME_CLOSED: LoopOutcome.STOPPED,
}


@attrs.frozen
class LoopResult:
    """What one ``AgentLoop.run`` did: its generation, and the follow-up generations after it."""

    generation_id: str
    """The last generation it ran (the prompt's, or the last follow-up's)."""
    outcome: LoopOutcome
    """How the last generation ended: ``finished``, ``stopped`` or ``budget-exhausted`` (a
    ``StrEnum``: compares equal to those strings)."""
    text: str
    """The last assistant text."""
    provider_calls: int
    """Over every generation of the run."""
    applied_input_ids: tuple[str, ...]
    """Steers and follow-ups written into the context in this run, in order."""
    held_input_ids: tuple[str, ...]
    """Steers and follow-ups accepted in this run and never applied (held, or unknown)."""
    generation_ids: tuple[str, ...] = ()
    """Every generation the run ran, in order: the prompt's, then one per round of follow-ups (C29)."""
    skipped_tool_call_ids: tuple[str, ...] = ()
    """Tool calls answered without running (``skip_tools_on_steer``, C31), in order."""


Checkpoint = Callable[[Context], Awaitable[None]]


async def _no_checkpoint(context: Context) -> None:
    await anyio.lowlevel.checkpoint()


class AgentLoop:
    """The reference loop: provider calls, tool rounds, a call budget and a durable checkpoint.

    One generation per ``run``, and then one more for each round of follow-ups (C29): when
    a generation finishes with follow-ups accepted for after it, the loop starts the next
    generation itself, with no new prompt; its first boundary writes them. ``stop()`` (from
    any task) ends the running generation: the provider or tool call in flight is cancelled,
    pending steers and follow-ups are held, and ``run`` returns with outcome ``"stopped"``.
    A context write in progress is never cancelled by ``stop()``. A run that ends inside a
    tool call (``stop()``, a cancel, a tool that raised) still answers every call of the
    batch (``TOOL_CANCELLED_RESULT`` / ``TOOL_FAILED_RESULT``, then ``STOPPED_TOOL_RESULT``):
    the context outlives the run, and providers refuse a tool call without a result.

    ``skip_tools_on_steer=True`` (C31): after a tool call returns, if a steer is pending,
    the rest of the model's tool batch is not run; each skipped call gets the result
    ``SKIPPED_TOOL_RESULT`` (every tool call keeps a result, as providers require) and the
    runtime publishes ``tools.skipped``. The steer is written at the next boundary.

    ``run_follow_ups=False`` leaves the follow-ups of a finished generation to the caller: they
    stay queued (``runtime.pending_follow_ups``) and the next generation anyone opens (the next
    ``run``, after its prompt) writes them at its first boundary.
    """

    def __init__(
        self,
        runtime: LiveRuntime,
        provider: Provider,
        tools: ToolRunner,
        *,
        context: Context | None = None,
        call_budget: int = 16,
        checkpoint: Checkpoint = _no_checkpoint,
        skip_tools_on_steer: bool = False,
        run_follow_ups: bool = True,
    ) -> None:
        if type(call_budget) is not int or call_budget < 1:
            raise ValueError(f"call_budget must be a positive int, got {call_budget!r}")
        if type(skip_tools_on_steer) is not bool:
            raise TypeError(f"skip_tools_on_steer must be a bool, got {skip_tools_on_steer!r}")
        self.skip_tools_on_steer = skip_tools_on_steer
        if type(run_follow_ups) is not bool:
            raise TypeError(f"run_follow_ups must be a bool, got {run_follow_ups!r}")
        self.run_follow_ups = run_follow_ups
        self.runtime = runtime
        self.provider = provider
        self.tools = tools
        self.context = context if context is not None else Context()
        self.call_budget = call_budget
        self.checkpoint = checkpoint
        self._stop: Callable[[], None] | None = None

    def stop(self) -> None:
        """Stop the running generation (holds its pending steers). No-op when idle.

        A provider or tool call in flight is cancelled; a context write is not.
        """
        if self._stop is not None:
            self._stop()

    async def run(self, prompt: str, *, generation_id: str | None = None) -> LoopResult:
        """Run one generation for ``prompt`` until the model stops calling tools, then one more
        for each round of follow-ups it leaves (C29), each with a runtime-issued id.

        Leave ``generation_id`` out for a runtime-issued id (no memory per run); an id of
        your choosing is remembered by the runtime, up to its ``generation_id_limit``.
        """
        runs = [await self._generation(prompt, generation_id)]
        while (
            self.run_follow_ups
            and runs[-1].outcome is LoopOutcome.FINISHED
            and self.runtime.pending_follow_ups
        ):
            runs.append(await self._generation(None, None))
        applied = tuple(i for run in runs for i in run.applied_input_ids)
        accepted = [i for run in runs for i in run.held_input_ids]  # accepted in it, not applied there
        held = []
        for input_id in dict.fromkeys(accepted):
            receipt = self.runtime.receipt(input_id)
            if receipt is not None and receipt.disposition in (Disposition.HELD, Disposition.UNKNOWN):
                held.append(input_id)
        last = runs[-1]
        return attrs.evolve(
            last,
            provider_calls=sum(run.provider_calls for run in runs),
            applied_input_ids=applied,
            held_input_ids=tuple(held),
            generation_ids=tuple(run.generation_id for run in runs),
            skipped_tool_call_ids=tuple(i for run in runs for i in run.skipped_tool_call_ids),
        )

    async def _generation(self, prompt: str | None, generation_id: str | None) -> LoopResult:
        """One generation: the prompt (none for a follow-ups' generation), then the loop."""
        calls = 0
        text = ""
        skipped: list[str] = []
        async with self.runtime.open_generation(generation_id) as gen:
            # Added once the generation is open, so a refused open leaves the context untouched.
            if prompt is not None:
                self.context.add("user", prompt)
            work: anyio.CancelScope | None = None

            def stop() -> None:
                if gen.accepting:
                    gen.stop()
                if work is not None:
                    work.cancel()

            self._stop = stop
            try:
                # gen.accepting turns False on stop() or when the runtime closes.
                while gen.accepting:
                    # Budget first: a steer that no request will ever carry is held
                    # (budget-exhausted), not written into a context nobody sends.
                    if calls == self.call_budget:
                        gen.stop(StopReason.BUDGET_EXHAUSTED)
                        break
                    # The request boundary: before every provider request. A close that landed
                    # while it wrote ends this loop as a close during a tool does: stopped.
                    try:
                        await gen.boundary(self.context.add_steer)
                    except RuntimeClosedError:
                        if gen.accepting:
                            raise
                        break
                    if not gen.accepting:
                        break
                    calls += 1
                    with anyio.CancelScope() as work:
                        reply = await self.provider.complete(self.context.snapshot())
                        text = reply.text
                        self.context.add("assistant", reply.text, {"tool_calls": len(reply.tool_calls)})
                        await self._run_tools(gen, reply.tool_calls, skipped)
                    if work.cancelled_caught:
                        break
                    work = None
                    if reply.tool_calls:
                        continue
                    await self.checkpoint(self.context)
                    # Budget before continuation: with no call left, pending steers are
                    # held budget-exhausted and no generation.continued is published (C17).
                    if not gen.continue_after_checkpoint(may_call=calls < self.call_budget):
                        break
            finally:
                self._stop = None
        terminal = gen.terminal_event or {}
        return LoopResult(
            generation_id=gen.id,
            outcome=_OUTCOMES[gen.end_reason],
            text=text,
            provider_calls=calls,
            applied_input_ids=tuple(terminal.get("input_ids", ())),
            held_input_ids=tuple(terminal.get("accepted_input_ids", ())),
            skipped_tool_call_ids=tuple(skipped),
        )

    async def _run_tools(self, gen: Generation, calls: Sequence[ToolCall], skipped: list[str]) -> None:
        """Run a reply's tool calls in order; with ``skip_tools_on_steer``, once a steer is pending
        after a call returned, answer the rest with ``SKIPPED_TOOL_RESULT`` instead (C31). Once
        the generation was stopped (a host's ``runtime.stop``, the runtime's close), no further
        call starts: each one left gets ``STOPPED_TOOL_RESULT``, and the loop ends."""
        for index, call in enumerate(calls):
            if not gen.accepting:
                for c in calls[index:]:
                    self.context.add("tool", STOPPED_TOOL_RESULT, {"tool_call_id": c.id})
                return
            try:
                result = await self.tools.run(call)
            except BaseException as exc:
                # Whatever ends the run here (stop(), a caller's cancel, a tool that raised), every
                # call of the batch keeps a result: the context outlives the run, and providers
                # refuse a later request carrying a tool call without one (C31).
                ended = TOOL_CANCELLED_RESULT if _only_cancellation(exc) else TOOL_FAILED_RESULT
                self.context.add("tool", ended, {"tool_call_id": call.id})
                for c in calls[index + 1 :]:
                    self.context.add("tool", STOPPED_TOOL_RESULT, {"tool_call_id": c.id})
                raise
            self.context.add("tool", result, {"tool_call_id": call.id})
            rest = calls[index + 1 :]
            if self.skip_tools_on_steer and rest and gen.steers_pending:
                ids = [c.id for c in rest]
                gen.skip_tools(ids)  # tools.skipped, naming the steers that made the rest pointless
                for c in rest:
                    self.context.add("tool", SKIPPED_TOOL_RESULT, {"tool_call_id": c.id, "skipped": True})
                skipped.extend(ids)
                return
