"""Live steering for pydantic-ai: one capability, ``Agent(model, capabilities=[LiveSteering(runtime)])``.

Needs the ``pydantic-ai`` extra (``pip install 'live-steering[pydantic-ai]'``, on
``pydantic-ai-slim``). Everything goes through pydantic-ai's own extension point, the
capability hooks of ``pydantic_ai.capabilities.AbstractCapability``:

* ``wrap_run``: each agent run is one generation (``async with runtime.open_generation()``),
  so a run's failure or cancellation ends the generation the same way (C17);
* ``before_model_request``: the request boundary. Pending steers are handed to
  ``RunContext.enqueue`` as a ``ModelRequest`` each, carrying the boundary's metadata;
  pydantic-ai puts enqueued content from this hook into the request being prepared and
  into the run's message history (its documented way to add a steering message);
* ``after_node_run``: when the run is about to end with its output (pydantic-ai's
  checkpoint), ``continue_after_checkpoint()``; a steer that arrived meanwhile is enqueued,
  and pydantic-ai redirects the ending run into one more model request, the same run.

It never patches pydantic-ai and never touches its private modules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._errors import GenerationClosedError
from .._extras import install_hint
from .._runtime import Generation, LiveRuntime
from .._types import Input, StopReason

try:
    from pydantic_ai import DeferredToolRequests, RunContext
    from pydantic_ai.capabilities import AbstractCapability, NodeResult, WrapRunHandler
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.messages import ModelRequest, UserPromptPart
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.run import AgentRunResult
    from pydantic_graph import End
except ImportError as error:  # pragma: no cover - exercised by installs without the extra
    raise ImportError(
        install_hint("live_steering.integrations.pydantic_ai", "pydantic-ai", "pydantic-ai-slim")
    ) from error

__all__ = ["LiveSteering"]


@dataclass
class LiveSteering(AbstractCapability[Any]):
    """A pydantic-ai capability that delivers a ``LiveRuntime``'s steers at every model request.

    >>> runtime = LiveRuntime()
    >>> agent = Agent(TestModel(), capabilities=[LiveSteering(runtime)])   # doctest: +SKIP
    >>> result = await agent.run("Make the suite pass")                   # doctest: +SKIP

    While a run is in progress, ``runtime.generation["id"]`` is its generation: a host
    submits ``Input("steer", ...)`` anchored to it through ``runtime.capability["submit"]``.
    Each steer becomes its own ``ModelRequest`` (one ``UserPromptPart``) whose ``metadata``
    holds ``input_id``, ``target_generation_id``, ``delivery`` and ``kind``. One run at a
    time per runtime: a second concurrent run raises ``GenerationStateError``. pydantic-ai
    runs on asyncio.
    """

    runtime: LiveRuntime
    """The session's runtime; the host holds its ``capability``."""
    _generations: dict[str, Generation] = field(default_factory=dict, init=False, repr=False, compare=False)
    """The running generation of each run in progress, by pydantic-ai's ``run_id``."""

    def __post_init__(self) -> None:
        if not isinstance(self.runtime, LiveRuntime):
            raise TypeError("LiveSteering needs a live_steering.LiveRuntime")

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a live runtime: not constructible from an agent spec

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        async with self.runtime.open_generation() as gen:
            # Per-run state keyed by the run's id, so that ``for_run`` can keep the default
            # (this instance) and pydantic-ai does not re-extract the capability every run.
            key = _run_key(ctx)
            self._generations[key] = gen
            try:
                result = await handler()
                if gen.pending:  # ended without the checkpoint (deferred tools): held, not continued
                    gen.stop()
                return result
            except UsageLimitExceeded:
                gen.stop(StopReason.BUDGET_EXHAUSTED)  # the request budget is spent: hold, don't fail them
                raise
            finally:
                del self._generations[key]
        # Reached only if the block absorbed this generation's stop signal, which no
        # boundary here raises: each runs only while the generation accepts.
        raise GenerationClosedError(f"generation {gen.id!r} was stopped before the run returned")

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        gen = self._running(ctx)
        if gen.accepting and gen.pending:  # nothing pending: the boundary would write nothing
            await gen.boundary(_enqueuer(ctx))
        return request_context

    async def after_node_run(
        self, ctx: RunContext[Any], *, node: Any, result: NodeResult[Any]
    ) -> NodeResult[Any]:
        if isinstance(result, End) and not isinstance(result.data.output, DeferredToolRequests):
            # The run would end here with its output: the checkpoint. A run paused for
            # deferred tools hands control back to its caller instead, so it never continues.
            gen = self._running(ctx)
            if gen.continue_after_checkpoint():
                await gen.boundary(_enqueuer(ctx))  # enqueued: pydantic-ai redirects into one more request
        return result

    def _running(self, ctx: RunContext[Any]) -> Generation:
        gen = self._generations.get(_run_key(ctx))
        if gen is None:
            raise RuntimeError("LiveSteering hook outside its wrap_run: is it in the agent's capabilities?")
        return gen


def _run_key(ctx: RunContext[Any]) -> str:
    if ctx.run_id is None:  # only synthetic contexts (outside any run) lack one
        raise RuntimeError("LiveSteering needs pydantic-ai's run_id, which this context does not have")
    return ctx.run_id


def _enqueuer(ctx: RunContext[Any]) -> Any:
    """The boundary's writer for one run: each steer as its own request, with the boundary's metadata."""

    def write(steer: Input, metadata: Any) -> None:
        ctx.enqueue(ModelRequest(parts=[UserPromptPart(content=steer.text)], metadata=dict(metadata)))

    return write
