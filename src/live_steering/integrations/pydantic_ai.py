"""Live steering for pydantic-ai: one capability, ``Agent(model, capabilities=[LiveSteering(runtime)])``.

Needs the ``pydantic-ai`` extra (``pip install 'live-steering[pydantic-ai]'``, on
``pydantic-ai-slim``). Everything goes through pydantic-ai's own extension point, the
capability hooks of ``pydantic_ai.capabilities.AbstractCapability``:

* ``wrap_run``: each agent run is one generation (``runtime.open_generation()``), and one
  more per round of follow-ups (C29), so a run's failure or cancellation ends the
  running generation the same way (C17);
* ``before_model_request``: the request boundary. Pending steers are handed to
  ``RunContext.enqueue`` as a ``ModelRequest`` each, carrying the boundary's metadata;
  pydantic-ai puts enqueued content from this hook into the request being prepared and
  into the run's message history (its documented way to add a steering message). Once
  the generation was stopped (a host's ``runtime.stop(id)``), the boundary raises the
  stop signal and the run raises ``RunStopped``: no further model request;
* ``before_tool_execute``: a stopped generation answers each tool call not yet started
  with ``STOPPED_TOOL_RESULT`` (``SkipToolExecution``), so no further tool runs; with
  ``skip_tools_on_steer`` a pending steer answers the rest of a batch with
  ``SKIPPED_TOOL_RESULT`` (C31);
* ``after_node_run``: when the run is about to end with its output (pydantic-ai's
  checkpoint), ``continue_after_checkpoint()``; a steer that arrived meanwhile is enqueued,
  and pydantic-ai redirects the ending run into one more model request, the same run.
  Follow-ups left for after the generation end it (``generation.finished``) and open the
  next one, whose boundary enqueues them the same way: the next turn of the same run.

It never patches pydantic-ai and never touches its private modules.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from .._errors import GenerationStopped
from .._extras import install_hint
from .._rules import SKIPPED_TOOL_RESULT
from .._runtime import Generation, LiveRuntime
from .._types import Input, StopReason
from ._bridge import STOPPED_TOOL_RESULT, RunStopped

try:
    from pydantic_ai import Agent, DeferredToolRequests, RunContext, ToolDefinition
    from pydantic_ai.capabilities import AbstractCapability, NodeResult, ValidatedToolArgs, WrapRunHandler
    from pydantic_ai.exceptions import SkipToolExecution, UsageLimitExceeded
    from pydantic_ai.messages import ModelRequest, ToolCallPart, UserPromptPart
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.run import AgentRunResult
    from pydantic_graph import End
except ImportError as error:  # pragma: no cover - exercised by installs without the extra
    raise ImportError(
        install_hint("live_steering.integrations.pydantic_ai", "pydantic-ai", "pydantic-ai-slim")
    ) from error

__all__ = ["SKIPPED_TOOL_RESULT", "STOPPED_TOOL_RESULT", "LiveSteering", "RunStopped"]


class _Run:
    """One agent run in progress: its current generation (the prompt's, then each follow-up round's)."""

    __slots__ = ("entered", "gen", "history", "signal", "tools_started", "written")

    def __init__(self, gen: Generation) -> None:
        self.gen = gen
        self.entered = False
        """True between the generation's entry and its exit."""
        self.history: list[Any] | None = None
        """The run's messages when a stop ended it at a model request boundary."""
        self.signal: BaseException | None = None
        """The generation's stop signal, once the run raised it (``on_run_error``)."""
        self.tools_started = 0
        """Tool calls started since the last model request (C31: the first of a batch runs)."""
        self.written = False
        """The checkpoint's boundary wrote the next request's input in a one-at-a-time mode:
        that request's own boundary writes nothing more (C30: one input per model request)."""

    async def enter(self, gen: Generation) -> None:
        self.gen = gen
        await gen.__aenter__()
        self.entered = True

    async def leave(self, exc: BaseException | None) -> bool:
        """Leave the current generation as its ``async with`` block would; True: a stop was absorbed."""
        self.entered = False
        if exc is None:
            return await self.gen.__aexit__(None, None, None)
        return await self.gen.__aexit__(type(exc), exc, exc.__traceback__)


@dataclass
class LiveSteering(AbstractCapability[Any]):
    """A pydantic-ai capability that delivers a ``LiveRuntime``'s steers at every model request.

    >>> runtime = LiveRuntime()
    >>> agent = Agent(TestModel(), capabilities=[LiveSteering(runtime)])   # doctest: +SKIP
    >>> result = await agent.run("Make the suite pass")                   # doctest: +SKIP

    While a run is in progress, ``runtime.generation["id"]`` is its generation: a host
    submits ``Input("steer", ...)`` (or ``Input("follow_up", ...)``) anchored to it through
    ``runtime.capability["submit"]``, and stops it with ``runtime.stop(id)`` (the run then
    raises ``RunStopped``). Each steer becomes its own ``ModelRequest`` (one
    ``UserPromptPart``) whose ``metadata`` holds ``input_id``, ``target_generation_id``,
    ``delivery`` and ``kind``. One run at a time per runtime: a second concurrent run
    raises ``GenerationStateError``. pydantic-ai runs on asyncio.
    """

    runtime: LiveRuntime
    """The session's runtime; the host holds its ``capability``."""
    skip_tools_on_steer: bool = False
    """C31: once a tool call of a batch returned with a steer pending, answer the rest with
    ``SKIPPED_TOOL_RESULT`` instead of running them. Runs the tool calls one at a time
    (pydantic-ai's ``'sequential'`` mode), so that there is a rest to skip."""
    run_follow_ups: bool = True
    """C29: follow-ups left when a generation finishes run as the next turn of the same agent
    run. False leaves them queued for the caller's next run (its first request writes them)."""
    _runs: dict[str, _Run] = field(default_factory=dict, init=False, repr=False, compare=False)
    """Each run in progress, by pydantic-ai's ``run_id``."""

    def __post_init__(self) -> None:
        if not isinstance(self.runtime, LiveRuntime):
            raise TypeError("LiveSteering needs a live_steering.LiveRuntime")
        if type(self.skip_tools_on_steer) is not bool:
            raise TypeError(f"skip_tools_on_steer must be a bool, got {self.skip_tools_on_steer!r}")
        if type(self.run_follow_ups) is not bool:
            raise TypeError(f"run_follow_ups must be a bool, got {self.run_follow_ups!r}")

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a live runtime: not constructible from an agent spec

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        # Per-run state keyed by the run's id, so that ``for_run`` can keep the default
        # (this instance) and pydantic-ai does not re-extract the capability every run.
        key = _run_key(ctx)
        run = _Run(self.runtime.open_generation())
        await run.enter(run.gen)
        self._runs[key] = run
        try:
            sequential = self.skip_tools_on_steer
            mode = Agent.parallel_tool_call_execution_mode("sequential") if sequential else nullcontext()
            try:
                with mode:
                    result = await handler()
            except UsageLimitExceeded as exc:
                if run.entered:
                    # the request budget is spent: hold, don't fail them
                    run.gen.stop(StopReason.BUDGET_EXHAUSTED)
                    await run.leave(exc)
                raise
            except RunStopped:  # from on_run_error: leave with the stop signal, which the exit absorbs
                if run.entered:
                    await run.leave(run.signal)
                raise
            except BaseException as exc:
                if run.entered:
                    await run.leave(exc)
                raise
            gen = run.gen
            if gen.accepting and (gen.pending or self.runtime.pending_follow_ups):
                # Ended without the checkpoint (deferred tools: the caller decides): steers and
                # follow-ups pending are held, not continued, nor carried into the caller's next run.
                gen.stop()
            await run.leave(None)
            return result
        finally:
            del self._runs[key]

    async def on_run_error(self, ctx: RunContext[Any], *, error: BaseException) -> AgentRunResult[Any]:
        # pydantic-ai raises the run body's error out of ``agent.run`` whatever ``wrap_run``
        # raises instead, unless this hook raises it: the stop signal becomes ``RunStopped`` here.
        run = self._runs.get(_run_key(ctx))
        if (
            isinstance(error, GenerationStopped)
            and run is not None
            and run.entered
            and error.generation_id == run.gen.id
        ):
            run.signal = error
            history = run.history if run.history is not None else list(ctx.messages)
            raise RunStopped(run.gen.id, error.reason, history) from None
        raise error

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        run = self._run(ctx)
        run.tools_started = 0
        gen = run.gen
        if run.written and gen.accepting:  # this request's boundary was the checkpoint's
            run.written = False
            return request_context
        run.written = False
        # Nothing pending: the boundary would write nothing. Stopped: it raises the stop signal.
        if gen.pending or not gen.accepting:
            if not gen.accepting:  # the history so far includes the request being prepared (tool results)
                run.history = list(request_context.messages)
            await gen.boundary(_enqueuer(ctx))
        return request_context

    async def before_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: ValidatedToolArgs
    ) -> ValidatedToolArgs:
        run = self._run(ctx)
        gen = run.gen
        if not gen.accepting:  # stopped (or the runtime closed): no further tool starts
            raise SkipToolExecution(STOPPED_TOOL_RESULT)
        if self.skip_tools_on_steer:
            # One at a time ('sequential'): a call started before this one in the batch has returned.
            if run.tools_started and gen.steers_pending:
                gen.skip_tools([call.tool_call_id])  # tools.skipped, naming the steers that made it pointless
                raise SkipToolExecution(SKIPPED_TOOL_RESULT)
            run.tools_started += 1
        return args

    async def after_node_run(
        self, ctx: RunContext[Any], *, node: Any, result: NodeResult[Any]
    ) -> NodeResult[Any]:
        if isinstance(result, End) and not isinstance(result.data.output, DeferredToolRequests):
            # The run would end here with its output: the checkpoint. A run paused for
            # deferred tools hands control back to its caller instead, so it never continues.
            run = self._run(ctx)
            gen = run.gen
            if not gen.accepting:  # stopped while the model wrote the output: the stop signal
                run.history = list(ctx.messages)
                await gen.boundary(_enqueuer(ctx))
            follow_ups = self.run_follow_ups and bool(self.runtime.pending_follow_ups)
            if not _may_request(ctx) and (gen.pending or follow_ups):
                # The usage limits allow no further request (pydantic-ai would refuse it before
                # it is sent): decided here, before anything is written or a continuation is
                # announced (C17); what is pending is held budget-exhausted, the output stands.
                gen.stop(StopReason.BUDGET_EXHAUSTED)
                return result
            if gen.continue_after_checkpoint():
                await gen.boundary(_enqueuer(ctx))  # enqueued: pydantic-ai redirects into one more request
                run.written = self._one_at_a_time()
            elif follow_ups:
                # C29: this generation finishes, and the next turn of the same run opens the
                # next one, whose boundary enqueues the follow-ups (pydantic-ai redirects again).
                await run.leave(None)
                await run.enter(self.runtime.open_generation())
                await run.gen.boundary(_enqueuer(ctx))
                run.written = self._one_at_a_time()
        return result

    def _one_at_a_time(self) -> bool:
        """A delivery mode writes one input per boundary (C30): then the request a checkpoint's
        boundary redirects into runs no boundary of its own, or it would carry two. With "all"
        it does, and writes what arrived meanwhile (C13)."""
        running = self.runtime.generation
        return running is not None and "one-at-a-time" in (
            running["steering_mode"],
            running["follow_up_mode"],
        )

    def _run(self, ctx: RunContext[Any]) -> _Run:
        run = self._runs.get(_run_key(ctx))
        if run is None:
            raise RuntimeError("LiveSteering hook outside its wrap_run: is it in the agent's capabilities?")
        return run


def _may_request(ctx: RunContext[Any]) -> bool:
    """Whether the run's usage limits let it send one more model request (pydantic-ai's own check)."""
    limits = ctx.usage_limits
    if limits is None:
        return True
    try:
        limits.check_before_request(ctx.usage)
    except UsageLimitExceeded:
        return False
    return True


def _run_key(ctx: RunContext[Any]) -> str:
    if ctx.run_id is None:  # only synthetic contexts (outside any run) lack one
        raise RuntimeError("LiveSteering needs pydantic-ai's run_id, which this context does not have")
    return ctx.run_id


def _enqueuer(ctx: RunContext[Any]) -> Any:
    """The boundary's writer for one run: each steer as its own request, with the boundary's metadata."""

    def write(steer: Input, metadata: Any) -> None:
        ctx.enqueue(ModelRequest(parts=[UserPromptPart(content=steer.text)], metadata=dict(metadata)))

    return write
