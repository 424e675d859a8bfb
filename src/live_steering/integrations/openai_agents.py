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
  turns left of ``max_turns`` carry over.

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
from collections.abc import AsyncGenerator, Mapping
from typing import Any, Final

import attrs

from .._errors import GenerationClosedError, LiveSteeringError
from .._extras import install_hint
from .._runtime import Generation, LiveRuntime
from .._types import Input, StopReason

try:
    from agents import Agent, MaxTurnsExceeded, RunConfig, Runner, RunResult, RunResultStreaming, RunState
    from agents.run_config import CallModelData, CallModelInputFilter, ModelInputData
    from agents.stream_events import StreamEvent
except ImportError as error:  # pragma: no cover - exercised by installs without the extra
    raise ImportError(
        install_hint("live_steering.integrations.openai_agents", "openai-agents", "openai-agents")
    ) from error

__all__ = ["DEFAULT_MAX_TURNS", "LiveSteering", "SteerEntry", "SteeringHistoryError"]

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

    def splice(self, items: list[Any]) -> list[Any]:
        """``items`` (the SDK's own) with every steer of this segment at its place. O(items)."""
        spliced: list[Any] = []
        start = 0
        for entry in self.entries:
            if entry.position > len(items) or (entry.position and items[entry.position - 1] != entry.before):
                raise SteeringHistoryError(
                    f"the run's history changed under steer {entry.metadata['input_id']!r} "
                    "(a handoff input filter?): its place in the conversation is unknown"
                )
            spliced.extend(items[start : entry.position])
            spliced.append(dict(entry.item))
            start = entry.position
        spliced.extend(items[start:])
        return spliced

    async def filter(self, data: CallModelData[Any]) -> ModelInputData:
        """``RunConfig.call_model_input_filter``: the request boundary of every model call."""
        self.calls += 1
        own = list(data.model_data.input)
        if self.gen.accepting and self.gen.pending:  # nothing pending: the boundary would write nothing

            def write(steer: Input, metadata: Mapping[str, Any]) -> None:
                item = {"type": "message", "role": "user", "content": steer.text}
                before = own[-1] if own else None
                self.entries.append(SteerEntry(item, dict(metadata), len(own), before))

            await self.gen.boundary(write)
        model_data = ModelInputData(input=self.splice(own), instructions=data.model_data.instructions)
        if self.user_filter is None:
            return model_data
        result = self.user_filter(dataclasses.replace(data, model_data=model_data))
        return await result if inspect.isawaitable(result) else result


class LiveSteering:
    """Runs OpenAI Agents SDK agents with a ``LiveRuntime``'s steers delivered at every model call.

    >>> steering = LiveSteering(runtime)
    >>> result = await steering.run(agent, "Make the suite pass")          # doctest: +SKIP
    >>> steering.to_input_list(result)     # the conversation, steers included  # doctest: +SKIP

    While a run is in progress, ``runtime.generation["id"]`` is its generation; a host
    submits through ``runtime.capability["submit"]``. One run at a time per runtime.
    """

    def __init__(self, runtime: LiveRuntime) -> None:
        if not isinstance(runtime, LiveRuntime):
            raise TypeError("LiveSteering needs a live_steering.LiveRuntime")
        self.runtime: Final = runtime
        self._segment: _Segment | None = None
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
        **kwargs: Any,
    ) -> RunResult:  # a run paused for a tool approval (``result.interruptions``) ends the generation
        """``Runner.run(agent, input, ...)`` as one generation; returns the last segment's result.

        ``kwargs`` go to ``Runner.run`` (``context``, ``hooks``, ...), except the
        server-managed conversation options, which raise ``ValueError`` (see the module).
        """
        config = _checked(run_config, kwargs, input)
        async with self.runtime.open_generation() as gen:
            turns_left = max_turns
            while True:
                segment = self._start(gen, config)
                try:
                    result = await Runner.run(
                        agent, input, max_turns=turns_left, run_config=self._config(config, segment), **kwargs
                    )
                except MaxTurnsExceeded:
                    gen.stop(StopReason.BUDGET_EXHAUSTED)
                    raise
                turns_left -= segment.calls
                if not self._continues(gen, turns_left, result):
                    return result
                input, agent = self.to_input_list(result), result.last_agent
        # Reached only if the block absorbed this generation's stop signal, which no
        # boundary here raises: each runs only while the generation accepts.
        raise GenerationClosedError(f"generation {gen.id!r} was stopped before the run returned")

    async def stream(
        self,
        agent: Agent[Any],
        input: str | list[Any],
        *,
        max_turns: int = DEFAULT_MAX_TURNS,
        run_config: RunConfig | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[StreamEvent, None]:
        """``Runner.run_streamed`` as one generation: every segment's stream events, in order.

        ``async for event in steering.stream(agent, prompt): ...``; afterwards
        ``steering.last_result`` is the last segment's ``RunResultStreaming``. Leaving the
        loop early cancels the SDK's run and stops the generation (pending steers held).
        """
        config = _checked(run_config, kwargs, input)
        self.last_result = None
        async with self.runtime.open_generation() as gen:
            turns_left = max_turns
            while True:
                segment = self._start(gen, config)
                result = Runner.run_streamed(
                    agent, input, max_turns=turns_left, run_config=self._config(config, segment), **kwargs
                )
                self.last_result = result
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
                except BaseException:  # cancelled, or the run failed: leave no SDK task running
                    result.cancel()
                    raise
                turns_left -= segment.calls
                if not self._continues(gen, turns_left, result):
                    return
                input, agent = self.to_input_list(result), result.last_agent

    def to_input_list(self, result: RunResult | RunResultStreaming) -> list[Any]:
        """``result.to_input_list()`` with this run's steers at their places: the conversation so far."""
        segment = self._segment
        items = result.to_input_list()
        return items if segment is None else segment.splice(items)

    def _start(self, gen: Generation, config: RunConfig) -> _Segment:
        segment = _Segment(gen, config.call_model_input_filter)
        self._segment, self.entries = segment, segment.entries
        return segment

    @staticmethod
    def _config(config: RunConfig, segment: _Segment) -> RunConfig:
        return dataclasses.replace(config, call_model_input_filter=segment.filter)

    @staticmethod
    def _continues(gen: Generation, turns_left: int, result: RunResult | RunResultStreaming) -> bool:
        """The checkpoint after a final output: True to run again, same generation (C16, C17)."""
        if result.interruptions:
            # Paused for a tool approval: the caller decides, so the generation ends here
            # and a steer still pending is held (generation-stopped).
            if gen.pending:
                gen.stop()
            return False
        if turns_left <= 0 and gen.pending:
            gen.stop(StopReason.BUDGET_EXHAUSTED)  # decided before any generation.continued
            return False
        return gen.continue_after_checkpoint()


def _checked(run_config: RunConfig | None, kwargs: Mapping[str, Any], input: object) -> RunConfig:
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
