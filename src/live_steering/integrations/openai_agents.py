"""Live steering for the OpenAI Agents SDK: ``await LiveSteering(runtime).run(agent, prompt)``.

Needs the ``openai-agents`` extra (``pip install 'live-steering[openai-agents]'``). It runs
the SDK's own ``Runner.run`` / ``Runner.run_streamed`` and steers them through the one
hook the SDK offers right before every model call, ``RunConfig.call_model_input_filter``:

* the filter is the request boundary: pending steers are written there as user message
  items, after everything the SDK already had for that call;
* the SDK rebuilds each call's input from its own history (the run's input plus the items
  it generated) and never sees what a filter added, so the filter writes every steer
  applied earlier in the run back at the position it was applied at: each applied steer
  is in every later model call of the run, once, in order. If the SDK's history no longer
  starts with what it had when a steer was applied (a handoff input filter rewrote it),
  the filter raises ``SteeringHistoryError`` rather than guess a position;
* the final output is the checkpoint: a steer that arrived meanwhile continues the same
  generation with one more ``Runner.run`` on the conversation so far (``to_input_list()``
  with the steers in place), neither the prompt nor a tool call is run again, and the
  turns left of ``max_turns`` carry over. Follow-ups (C29) left when the generation
  finishes open the next generation, one more ``Runner.run`` in the same ``run()``;
* a stop of the generation (a host's ``runtime.stop(id)``) ends the run at the next model
  call (the filter raises the stop signal) or the next tool start (``RunHooks.on_tool_start``),
  and ``run()`` raises ``RunStopped``.

Server-managed conversations (``previous_response_id``, ``auto_previous_response_id``,
``conversation_id``), ``session=`` and a ``RunState`` to resume are refused with
``ValueError`` before anything runs: the SDK sends, stores or resumes only the items it
generated itself, so a steer written by the filter would reach one call and then be
missing from the server's, the session's or the state's copy of the conversation. A run
paused for a tool approval ends its generation. The SDK is asyncio-only.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from functools import partial
from typing import Any, Final, Literal

import anyio
import attrs

from .._errors import GenerationStopped, LiveSteeringError
from .._extras import install_hint
from .._rules import SKIPPED_TOOL_RESULT
from .._runtime import Generation, LiveRuntime
from .._types import Input, StopReason
from ._bridge import RunStopped

try:
    from agents import (
        Agent,
        AgentHookContext,
        FunctionTool,
        MaxTurnsExceeded,
        RunConfig,
        RunContextWrapper,
        RunHooks,
        Runner,
        RunResult,
        RunResultStreaming,
        RunState,
        Tool,
        ToolExecutionConfig,
        ToolGuardrailFunctionOutput,
        ToolInputGuardrail,
        ToolInputGuardrailData,
    )
    from agents.exceptions import UserError
    from agents.items import ModelResponse, TResponseInputItem
    from agents.lifecycle import RunHooksBase
    from agents.run_config import CallModelData, CallModelInputFilter, ModelInputData
    from agents.stream_events import StreamEvent
except ImportError as error:  # pragma: no cover - exercised by installs without the extra
    raise ImportError(
        install_hint("live_steering.integrations.openai_agents", "openai-agents", "openai-agents")
    ) from error

__all__ = [
    "DEFAULT_MAX_TURNS",
    "SKIPPED_TOOL_RESULT",
    "LiveSteering",
    "RunStopped",
    "SteerEntry",
    "SteeredRunResult",
    "SteeredRunStreaming",
    "SteeringHistoryError",
]

#: The SDK's default ``max_turns`` for one run.
DEFAULT_MAX_TURNS: Final = 10
_SERVER_MANAGED: Final = ("previous_response_id", "conversation_id", "auto_previous_response_id", "session")


class SteeringHistoryError(LiveSteeringError, RuntimeError):
    """The SDK's history was rewritten under applied steers, so their place is unknown."""


@attrs.frozen
class SteerEntry:
    """One steer as written into the model input of a run."""

    item: dict[str, Any]
    """The input item sent to the model (a user message): ``{"type", "role", "content"}``."""
    metadata: Mapping[str, Any]
    """The boundary's metadata: ``input_id``, ``target_generation_id``, ``delivery``, ``kind``."""
    position: int
    """How many of the SDK's own input items came before it when it was written."""
    before: Any
    """The SDK item right before it (``None`` at position 0), checked on every later call."""


class _Segment:
    """One ``Runner`` run of a generation: its filter, its applied steers, its model calls."""

    def __init__(self, gen: Generation, user_filter: CallModelInputFilter | None) -> None:
        self.gen = gen
        self.user_filter = user_filter
        self.entries: list[SteerEntry] = []
        self.calls = 0
        self.tools_returned = 0
        """Tool calls that returned since the last model call (C31: the first of a batch runs)."""
        self.history: list[Any] | None = None
        """The conversation when a stop ended this segment (``RunStopped.history``)."""
        self.last_input: list[Any] = []
        """The input of the last model call, steers in place (the history of a stop at a tool start)."""

    def splice(self, items: list[Any]) -> list[Any]:
        """``items`` (the SDK's own) with every steer of this segment at its place. O(items)."""
        spliced: list[Any] = []
        start = 0
        for entry in self.entries:
            if entry.position > len(items) or (entry.position and items[entry.position - 1] != entry.before):
                raise SteeringHistoryError(
                    f"the run's history changed under steer {entry.metadata['input_id']!r} "
                    "(a handoff's input_filter or nest_handoff_history?): its place in the "
                    "conversation is unknown"
                )
            spliced.extend(items[start : entry.position])
            spliced.append(dict(entry.item))
            start = entry.position
        spliced.extend(items[start:])
        return spliced

    async def filter(self, data: CallModelData[Any]) -> ModelInputData:
        """``RunConfig.call_model_input_filter``: the request boundary of every model call."""
        self.calls += 1
        self.tools_returned = 0
        own = list(data.model_data.input)
        gen = self.gen
        # Nothing pending: the boundary would write nothing. Stopped: it raises the stop signal.
        if gen.pending or not gen.accepting:
            if not gen.accepting:
                self.history = self.splice(own)

            def write(steer: Input, metadata: Mapping[str, Any]) -> None:
                item = {"type": "message", "role": "user", "content": steer.text}
                before = own[-1] if own else None
                self.entries.append(SteerEntry(item, dict(metadata), len(own), before))

            await gen.boundary(write)
        model_data = ModelInputData(input=self.splice(own), instructions=data.model_data.instructions)
        self.last_input = model_data.input
        if self.user_filter is None:
            return model_data
        result = self.user_filter(dataclasses.replace(data, model_data=model_data))
        return await result if inspect.isawaitable(result) else result


def _no_write(steer: Input, metadata: Mapping[str, Any]) -> None:  # pragma: no cover - never called
    """The writer of a boundary run only for its stop signal (admission closed: it writes nothing)."""


class _Hooks(RunHooks[Any]):
    """The run's ``RunHooks``: the stop check at each tool start, then the caller's own hooks."""

    def __init__(self, segment: _Segment, inner: RunHooks[Any] | None) -> None:
        self.segment = segment
        self.inner = inner
        self.running = 0
        """Tool calls started and not yet returned (``max_function_tool_concurrency`` > 1 runs several)."""
        self.idle: anyio.Event | None = None

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool) -> None:
        gen = self.segment.gen
        if not gen.accepting:  # stopped (or the runtime closed): no further tool starts
            # C14: a tool call already running is not interrupted. The SDK cancels the calls of
            # the batch still running when a start raises (a concurrency limit starts this one
            # while others run), so the stop signal waits for them to return. (A call that
            # raises instead fails the batch, which cancels this wait.)
            while self.running:
                self.idle = self.idle or anyio.Event()
                await self.idle.wait()
            # The conversation up to the model call whose tool calls do not all run: a prefix
            # with no tool call left without its output (that call's answer is dropped).
            self.segment.history = list(self.segment.last_input)
            await gen.boundary(_no_write)  # raises the stop signal
        self.running += 1
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        self.segment.tools_returned += 1
        self.running -= 1
        if not self.running and self.idle is not None:
            self.idle.set()
            self.idle = None
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)

    async def on_agent_start(self, context: AgentHookContext[Any], agent: Agent[Any]) -> None:
        if self.inner is not None:
            await self.inner.on_agent_start(context, agent)

    async def on_agent_end(self, context: AgentHookContext[Any], agent: Agent[Any], output: Any) -> None:
        if self.inner is not None:
            await self.inner.on_agent_end(context, agent, output)

    async def on_handoff(
        self, context: RunContextWrapper[Any], from_agent: Agent[Any], to_agent: Agent[Any]
    ) -> None:
        if self.inner is not None:
            await self.inner.on_handoff(context, from_agent, to_agent)


class SteeredRunResult(RunResult):
    """The SDK's ``RunResult`` of a steered run: ``to_input_list()`` keeps the steers in place.

    The same object ``Runner.run`` returned for the run's last ``Runner.run``, with one
    method changed, so ``isinstance(result, RunResult)`` holds and every field is the SDK's.
    """

    _live_steering: _Segment

    def to_input_list(self, *, mode: Any = "normalized") -> list[TResponseInputItem]:
        """The SDK's ``to_input_list(mode=...)`` with this run's steers at their places.

        ``mode`` defaults to the SDK's ``"normalized"`` (identical to its ``"preserve_all"``
        for an ordinary run): after a handoff whose input filter rewrote the history, it is the
        history the model was sent, where the steers were written. ``"preserve_all"`` then has
        no place for them and raises ``SteeringHistoryError``."""
        return self._live_steering.splice(super().to_input_list(mode=mode))


def _steered(result: RunResult, segment: _Segment) -> SteeredRunResult:
    result.__class__ = SteeredRunResult  # one method added; the SDK's fields and identity kept
    steered: SteeredRunResult = result  # type: ignore[assignment]
    steered._live_steering = segment
    return steered


class LiveSteering:
    """Runs OpenAI Agents SDK agents with a ``LiveRuntime``'s steers delivered at every model call.

    >>> steering = LiveSteering(runtime)
    >>> result = await steering.run(agent, "Make the suite pass")          # doctest: +SKIP
    >>> result.to_input_list()             # the conversation, steers included  # doctest: +SKIP

    While a run is in progress, ``runtime.generation["id"]`` is its generation; a host
    submits through ``runtime.capability["submit"]`` and stops it with ``runtime.stop(id)``
    (``run()`` then raises ``RunStopped``). One run at a time per runtime.

    ``skip_tools_on_steer=True`` (C31): once a function tool call of a model response
    returned with a steer pending, the rest of that response's function tool calls are
    answered with ``SKIPPED_TOOL_RESULT`` without running (through a tool input guardrail
    added to the agent's function tools; the run uses a copy of the agent, and runs its
    function tools one at a time). ``run_follow_ups=False`` leaves the follow-ups of a
    finished generation queued for the caller's next run.
    """

    def __init__(
        self, runtime: LiveRuntime, *, skip_tools_on_steer: bool = False, run_follow_ups: bool = True
    ) -> None:
        if not isinstance(runtime, LiveRuntime):
            raise TypeError("LiveSteering needs a live_steering.LiveRuntime")
        if type(skip_tools_on_steer) is not bool:
            raise TypeError(f"skip_tools_on_steer must be a bool, got {skip_tools_on_steer!r}")
        if type(run_follow_ups) is not bool:
            raise TypeError(f"run_follow_ups must be a bool, got {run_follow_ups!r}")
        self.runtime: Final = runtime
        self.skip_tools_on_steer: Final = skip_tools_on_steer
        self.run_follow_ups: Final = run_follow_ups
        self._segment: _Segment | None = None
        self._guard: Final[ToolInputGuardrail[Any]] = ToolInputGuardrail(
            guardrail_function=self._skip_check, name="live_steering_skip"
        )
        self.entries: list[SteerEntry] = []
        """The steers written in the current (or last) segment of a run, in order."""
        self.last_result: RunResultStreaming | None = None
        """The last segment's result of ``stream()``."""

    async def run(
        self,
        agent: Agent[Any],
        input: str | list[Any],
        *,
        max_turns: int = DEFAULT_MAX_TURNS,
        run_config: RunConfig | None = None,
        hooks: RunHooks[Any] | None = None,
        **kwargs: Any,
    ) -> SteeredRunResult:  # a run paused for a tool approval (``result.interruptions``) ends the generation
        """``Runner.run(agent, input, ...)`` as one generation, and one more per round of follow-ups.

        Returns the last ``Runner.run``'s result, whose ``to_input_list()`` keeps the steers.
        ``kwargs`` go to ``Runner.run`` (``context``, ``error_handlers``, ...), except the
        server-managed conversation options, which raise ``ValueError`` (see the module).
        ``max_turns`` counts per generation: a follow-up's generation gets its own.
        Raises ``RunStopped`` when the generation was stopped.
        """
        config = self._prepared(_checked(run_config, kwargs, input, agent, max_turns, hooks))
        agent = self._with_skip(agent)
        while True:
            finished = False
            async with self.runtime.open_generation() as gen:
                turns_left = max_turns
                while True:
                    segment = self._start(gen, config)
                    try:
                        raw = await Runner.run(
                            agent,
                            input,
                            max_turns=turns_left,
                            run_config=self._config(config, segment),
                            hooks=_Hooks(segment, hooks),
                            **kwargs,
                        )
                    except MaxTurnsExceeded:
                        gen.stop(StopReason.BUDGET_EXHAUSTED)
                        raise
                    except UserError as error:
                        _raise_stop_signal(gen, error)
                        raise
                    result = _steered(raw, segment)
                    turns_left -= segment.calls
                    await self._stop_signal(gen, segment, result)
                    # the conversation a next Runner.run would start from, read while the
                    # generation runs: if it cannot be, the generation fails (what is pending
                    # held), before a continuation is announced or a follow-up's turn opens
                    following = self._next_input(gen, result)
                    if not self._continues(gen, turns_left, result):
                        finished = True
                        break
                    assert following is not None  # it continues: a steer was pending
                    input, agent = following, result.last_agent
            if not finished:  # the block absorbed the stop signal: there is no result to return
                raise self._stopped(gen)
            if not self._follows(gen, result):
                return result
            assert following is not None  # follow-ups were pending when it finished
            input, agent = following, result.last_agent

    def run_sync(
        self,
        agent: Agent[Any],
        input: str | list[Any],
        **kwargs: Any,
    ) -> SteeredRunResult:
        """``Runner.run_sync``: ``run()`` in a new asyncio event loop of this thread (anyio).

        Like the SDK's, it cannot be called from inside a running event loop. The runtime
        belongs to that loop while it runs: steers come from its tasks (a tool, a hook), or
        from a host in another thread that runs ``run()`` itself in a portal instead
        (docs/hosts.md, "Threads and event loops").
        """
        return anyio.run(partial(self.run, agent, input, **kwargs), backend="asyncio")

    def run_streamed(
        self,
        agent: Agent[Any],
        input: str | list[Any],
        *,
        max_turns: int = DEFAULT_MAX_TURNS,
        run_config: RunConfig | None = None,
        **kwargs: Any,
    ) -> SteeredRunStreaming:
        """``Runner.run_streamed``'s shape: returns at once; ``async for e in r.stream_events()``.

        The run starts when ``stream_events()`` is iterated (the SDK's starts at once), and
        runs every ``Runner.run_streamed`` of the generation and of its follow-ups; the
        result's fields are the last one's, ``to_input_list()`` keeps the steers.
        """
        # refused here, before anything runs
        config = _checked(run_config, kwargs, input, agent, max_turns, kwargs.get("hooks"))
        return SteeredRunStreaming(self, agent, input, max_turns=max_turns, run_config=config, kwargs=kwargs)

    async def stream(
        self,
        agent: Agent[Any],
        input: str | list[Any],
        *,
        max_turns: int = DEFAULT_MAX_TURNS,
        run_config: RunConfig | None = None,
        hooks: RunHooks[Any] | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[StreamEvent, None]:
        """``Runner.run_streamed`` as one generation (and one per round of follow-ups): every
        segment's stream events, in order.

        ``async for event in steering.stream(agent, prompt): ...``; afterwards
        ``steering.last_result`` is the last segment's ``RunResultStreaming``. Leaving the
        loop early cancels the SDK's run and stops the generation (pending steers held).
        Raises ``RunStopped`` when the generation was stopped.
        """
        config = self._prepared(_checked(run_config, kwargs, input, agent, max_turns, hooks))
        async for event in self._stream(agent, input, max_turns, config, hooks, kwargs, None):
            yield event

    async def _stream(
        self,
        agent: Agent[Any],
        input: str | list[Any],
        max_turns: int,
        config: RunConfig,
        hooks: RunHooks[Any] | None,
        kwargs: Mapping[str, Any],
        owner: SteeredRunStreaming | None,
    ) -> AsyncGenerator[StreamEvent, None]:
        """``stream()``'s work; ``owner``: the ``SteeredRunStreaming`` it runs for, told each
        segment's generation, segment and result (its own, whatever runs after it)."""
        agent = self._with_skip(agent)
        while True:
            finished = False
            async with self.runtime.open_generation() as gen:
                turns_left = max_turns
                while True:
                    segment = self._start(gen, config)
                    result = Runner.run_streamed(
                        agent,
                        input,
                        max_turns=turns_left,
                        run_config=self._config(config, segment),
                        hooks=_Hooks(segment, hooks),
                        **kwargs,
                    )
                    self.last_result = result
                    if owner is not None:
                        owner._segment_started(gen, segment, result)
                    try:
                        async for event in result.stream_events():
                            yield event
                    except GeneratorExit:  # the consumer left the loop: end the run, not the process
                        gen.stop()
                        result.cancel()
                        return
                    except MaxTurnsExceeded:
                        gen.stop(StopReason.BUDGET_EXHAUSTED)
                        raise
                    except BaseException as error:  # cancelled, stopped, or failed: leave no SDK task running
                        result.cancel()
                        _raise_stop_signal(gen, error)
                        raise
                    turns_left -= segment.calls
                    await self._stop_signal(gen, segment, result)
                    following = self._next_input(gen, result, segment)
                    if not self._continues(gen, turns_left, result):
                        finished = True
                        break
                    assert following is not None  # it continues: a steer was pending
                    input, agent = following, result.last_agent
            if not finished:  # the block absorbed the stop signal
                raise self._stopped(gen)
            if not self._follows(gen, result):
                return
            assert following is not None  # follow-ups were pending when it finished
            input, agent = following, result.last_agent

    def to_input_list(self, result: RunResult | RunResultStreaming) -> list[Any]:
        """``result.to_input_list()`` with this run's steers at their places: the conversation so far
        (the SDK's ``"normalized"`` view, as ``SteeredRunResult.to_input_list``)."""
        if isinstance(result, SteeredRunResult):
            return result.to_input_list()
        return _spliced(result, self._segment)

    def _next_input(
        self, gen: Generation, result: RunResult | RunResultStreaming, segment: _Segment | None = None
    ) -> list[Any] | None:
        """The input of the Runner run a continuation or a follow-up would make (``None`` when
        neither can follow: paused, stopped). Raises ``SteeringHistoryError`` inside the block."""
        if result.interruptions or not gen.accepting:
            return None
        if not (gen.pending or (self.run_follow_ups and self.runtime.pending_follow_ups)):
            return None  # nothing would run after it (a steer arriving now cannot continue it either)
        if isinstance(result, SteeredRunResult):
            return result.to_input_list()
        return _spliced(result, segment if segment is not None else self._segment)

    # -- the pieces -----------------------------------------------------------------------

    def _start(self, gen: Generation, config: RunConfig) -> _Segment:
        segment = _Segment(gen, config.call_model_input_filter)
        self._segment, self.entries = segment, segment.entries
        return segment

    @staticmethod
    def _config(config: RunConfig, segment: _Segment) -> RunConfig:
        return dataclasses.replace(config, call_model_input_filter=segment.filter)

    def _prepared(self, config: RunConfig) -> RunConfig:
        """With ``skip_tools_on_steer``, function tools run one at a time, so a batch has a rest."""
        if not self.skip_tools_on_steer:
            return config
        execution = config.tool_execution or ToolExecutionConfig()
        return dataclasses.replace(
            config, tool_execution=dataclasses.replace(execution, max_function_tool_concurrency=1)
        )

    def _with_skip(self, agent: Agent[Any]) -> Agent[Any]:
        """A copy of ``agent`` whose function tools carry the skip check (``skip_tools_on_steer``)."""
        if not self.skip_tools_on_steer:
            return agent
        tools: list[Tool] = []
        for tool in agent.tools:
            if isinstance(tool, FunctionTool) and self._guard not in (tool.tool_input_guardrails or []):
                tool = dataclasses.replace(
                    tool, tool_input_guardrails=[*(tool.tool_input_guardrails or []), self._guard]
                )
            tools.append(tool)
        return agent.clone(tools=tools)

    def _skip_check(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        """The tool input guardrail of ``skip_tools_on_steer`` (C31): answer, or let the call run."""
        segment = self._segment
        if (
            segment is not None
            and segment.tools_returned
            and segment.gen.accepting
            and segment.gen.steers_pending
        ):
            segment.gen.skip_tools([data.context.tool_call_id])  # tools.skipped, naming the steers
            return ToolGuardrailFunctionOutput.reject_content(SKIPPED_TOOL_RESULT)
        return ToolGuardrailFunctionOutput.allow()

    async def _stop_signal(
        self, gen: Generation, segment: _Segment, result: RunResult | RunResultStreaming
    ) -> None:
        """Stopped while the last model call ran: raise the stop signal (absorbed by the block)."""
        if not gen.accepting and not result.interruptions:
            segment.history = self.to_input_list(result)
            await gen.boundary(_no_write)

    def _stopped(self, gen: Generation) -> RunStopped:
        terminal = gen.terminal_event or {}
        segment = self._segment
        history = segment.history if segment is not None else None
        return RunStopped(gen.id, str(terminal.get("reason", StopReason.GENERATION_STOPPED.value)), history)

    def _follows(self, gen: Generation, result: RunResult | RunResultStreaming) -> bool:
        """C29: the generation finished and follow-ups wait for the next one."""
        return (
            self.run_follow_ups
            and gen.end_reason is None
            and not result.interruptions
            and bool(self.runtime.pending_follow_ups)
        )

    def _continues(self, gen: Generation, turns_left: int, result: RunResult | RunResultStreaming) -> bool:
        """The checkpoint after a final output: True to run again, same generation (C16, C17)."""
        if result.interruptions:
            # Paused for a tool approval: the caller decides, so the generation ends here and
            # steers and follow-ups still pending are held (generation-stopped), not carried
            # into the caller's next run.
            if gen.pending or self.runtime.pending_follow_ups:
                gen.stop()
            return False
        if turns_left <= 0 and gen.pending:
            gen.stop(StopReason.BUDGET_EXHAUSTED)  # decided before any generation.continued
            return False
        return gen.continue_after_checkpoint()


class SteeredRunStreaming:
    """What ``LiveSteering.run_streamed`` returns: ``Runner.run_streamed``'s ``RunResultStreaming`` shape.

    ``stream_events()`` yields every stream event of the generation's ``Runner.run_streamed``
    runs (and of its follow-ups'), in order; it raises what the run raises (``RunStopped``
    after a stop, ``MaxTurnsExceeded``, a model error). Every other attribute
    (``final_output``, ``new_items``, ``last_agent``, ``current_turn``, ``interruptions``,
    ...) is the current ``RunResultStreaming``'s; ``to_input_list()`` keeps the steers.
    ``cancel()`` ends the run: the SDK's run is cancelled and the generation stopped
    (pending steers held ``generation-stopped``), and ``stream_events()`` ends quietly.
    """

    def __init__(
        self,
        steering: LiveSteering,
        agent: Agent[Any],
        input: str | list[Any],
        *,
        max_turns: int,
        run_config: RunConfig,
        kwargs: dict[str, Any],
    ) -> None:
        self._steering = steering
        self._args = (agent, input)
        self._options: dict[str, Any] = {"max_turns": max_turns, "run_config": run_config, **kwargs}
        self._started = False
        self._done = False
        self._cancelled = False
        self._gen: Generation | None = None
        self._segment: _Segment | None = None
        self._current: RunResultStreaming | None = None

    def _segment_started(self, gen: Generation, segment: _Segment, result: RunResultStreaming) -> None:
        """Called by ``LiveSteering._stream`` as each of this run's ``Runner.run_streamed`` starts."""
        self._gen, self._segment, self._current = gen, segment, result
        if self._cancelled:  # cancel() came while the generation opened: it ends here too
            gen.stop()
            result.cancel()

    @property
    def current(self) -> RunResultStreaming | None:
        """The SDK's result of this run's ``Runner.run_streamed`` running now (or last); None
        before the start. Another run of the same ``LiveSteering`` never replaces it."""
        return self._current

    @property
    def is_complete(self) -> bool:
        """Whether the whole run (every segment, every follow-up) has ended."""
        return self._done

    @property
    def final_output(self) -> Any:
        """The last segment's final output; None until it has one."""
        current = self.current
        return None if current is None else current.final_output

    def __getattr__(self, name: str) -> Any:
        current = self.current
        if current is None or name.startswith("_"):
            raise AttributeError(
                f"{type(self).__name__!s} has no attribute {name!r} before stream_events() runs"
            )
        return getattr(current, name)

    async def stream_events(self) -> AsyncIterator[StreamEvent]:
        """Run and stream: ``async for event in result.stream_events(): ...`` (once per result)."""
        if self._started:
            raise RuntimeError("stream_events() runs the run: iterate it once per run_streamed() result")
        self._started = True
        if self._cancelled:  # cancelled before the run started: as the SDK's, nothing runs
            self._done = True
            return
        options = dict(self._options)
        max_turns, run_config = options.pop("max_turns"), options.pop("run_config")
        hooks = options.pop("hooks", None)
        steering = self._steering
        config = steering._prepared(run_config)
        events = steering._stream(*self._args, max_turns, config, hooks, options, self)
        try:
            async for event in events:
                yield event
        except RunStopped:
            if not self._cancelled:
                raise
        finally:
            self._done = True
            await events.aclose()

    def cancel(self, mode: Literal["immediate", "after_turn"] = "immediate") -> None:
        """Stop this run's generation (pending steers held) and cancel its SDK run (``mode`` as
        the SDK's). Another run of the same ``LiveSteering`` (one started after this one ended,
        or the one that refused this one) is not touched."""
        self._cancelled = True
        if self._done:
            return
        if self._gen is not None:
            self._gen.stop()  # False, and nothing changes, once it ended
        if self._current is not None:
            self._current.cancel(mode)

    def to_input_list(self) -> list[Any]:
        """This run's conversation so far, steers in place (as ``LiveSteering.to_input_list``)."""
        current = self._current
        if current is None:
            raise RuntimeError("to_input_list() before stream_events() ran")
        return _spliced(current, self._segment)


def _spliced(result: RunResult | RunResultStreaming, segment: _Segment | None) -> list[Any]:
    """``result``'s conversation (the SDK's ``"normalized"`` view) with ``segment``'s steers in place."""
    items = result.to_input_list(mode="normalized")
    return items if segment is None else segment.splice(items)


def _raise_stop_signal(gen: Generation, error: BaseException) -> None:
    """Raise the generation's stop signal if the SDK wrapped it (``UserError("Error running tool")``
    around the one ``on_tool_start`` raised), so that the block absorbs it; else return."""
    cause = error.__cause__
    if (
        isinstance(error, UserError)
        and isinstance(cause, GenerationStopped)
        and cause.generation_id == gen.id
    ):
        raise cause from None


#: The keyword arguments ``Runner.run`` takes besides those ``LiveSteering.run`` names itself.
_RUNNER_KWARGS: Final = frozenset({"context", "error_handlers", "hooks", *_SERVER_MANAGED})


def _checked(
    run_config: RunConfig | None,
    kwargs: Mapping[str, Any],
    input: object,
    agent: object = None,
    max_turns: object = DEFAULT_MAX_TURNS,
    hooks: object = None,
) -> RunConfig:
    """The run's ``RunConfig``, once its arguments are ones the SDK can run: a typed error
    (``TypeError``, ``ValueError``) before any generation opens, else the SDK's own error
    would come from inside the run, after ``generation.started``."""
    if not isinstance(agent, Agent):
        raise TypeError(f"agent must be an agents.Agent, got {type(agent).__name__}")
    if not isinstance(input, (str, list, RunState)):
        raise TypeError(f"input must be a str or a list of input items, got {type(input).__name__}")
    if type(max_turns) is not int:
        raise TypeError(f"max_turns must be an int, got {max_turns!r}")
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns}")
    if hooks is not None and not isinstance(hooks, RunHooksBase):
        raise TypeError(f"hooks must be agents.RunHooks, got {type(hooks).__name__}")
    unknown = sorted(set(kwargs) - _RUNNER_KWARGS)
    if unknown:
        raise TypeError(f"Runner.run takes no keyword argument {', '.join(map(repr, unknown))}")
    if isinstance(input, RunState):
        raise ValueError(
            "live_steering.integrations.openai_agents does not resume a RunState: the SDK's state holds "
            "only its own items, so the steers written before the pause would be missing from the resumed run"
        )
    for name in _SERVER_MANAGED:
        if kwargs.get(name) not in (None, False):  # False: auto_previous_response_id's default
            raise ValueError(
                f"live_steering.integrations.openai_agents does not support {name}=: the SDK would send or "
                "store only its own items, so a steer would reach one model call and then be missing from "
                "the conversation. Pass the history as input (LiveSteering.to_input_list(result)) instead."
            )
    if run_config is None:
        return RunConfig()
    if not isinstance(run_config, RunConfig):
        raise TypeError("run_config must be an agents.RunConfig")
    return run_config
