"""Live steering for LangGraph: ``create_react_agent(model, tools, pre_model_hook=steering.pre_model_hook)``.

Needs the ``langgraph`` extra (``pip install 'live-steering[langgraph]'``: langgraph 1.2 and
langchain-core). It uses only LangGraph's public extension points:

* the request boundary is a graph node before the model node: the prebuilt ReAct agent's
  ``pre_model_hook`` (``langgraph.prebuilt.create_react_agent``: a node run before every
  call of the model, whose ``messages`` update goes into the graph's state), or, in a
  hand-written ``StateGraph``, the same callable added as a node on every path into the
  model node. Each pending steer becomes a ``HumanMessage`` in the state's ``messages``;
* the tools go through ``ToolNode``'s ``awrap_tool_call``: a tool call the model asked for
  after a stop is answered without running (every tool call keeps a result), and with
  ``skip_tools_on_steer`` the rest of a batch is answered ``SKIPPED_TOOL_RESULT`` once a
  steer is pending (C31);
* a run is one generation: ``await steering.ainvoke(graph, input, config)`` runs
  ``graph.ainvoke`` inside ``async with runtime.open_generation()``. When the graph ends
  with a steer pending (the checkpoint, C16), it runs the graph again on its own output:
  the same generation, no replay of the prompt or of a tool call. Follow-ups (C29) left
  when it finished run as the next generation the same way. ``steering.astream`` does the
  same around ``graph.astream``, chunk for chunk.

A stop (``runtime.stop(gid)`` or ``steering.stop()``) ends the run at its next boundary: the
hook raises the stop signal before any further model call, the tool wrapper starts no
further tool, and ``ainvoke`` returns the graph's state as that boundary saw it. LangGraph
runs on asyncio. It never patches LangGraph and never touches its private modules.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar, Token
from typing import Any, Final

import anyio

from .._errors import GenerationStateError, GenerationStopped, LiveSteeringError
from .._extras import install_hint
from .._rules import SKIPPED_TOOL_RESULT, STOPPED_TOOL_RESULT
from .._runtime import Generation, LiveRuntime
from .._types import HoldReason, Input, StopReason
from ..loop import LoopOutcome

try:
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.errors import GraphRecursionError
    from langgraph.prebuilt import ToolNode
    from langgraph.prebuilt.tool_node import AsyncToolCallWrapper, ToolCallRequest
    from langgraph.types import Command
except ImportError as error:  # pragma: no cover - exercised by installs without the extra
    raise ImportError(
        install_hint("live_steering.integrations.langgraph", "langgraph", "langgraph")
    ) from error

__all__ = [
    "METADATA_KEY",
    "SKIPPED_TOOL_RESULT",
    "STOPPED_TOOL_RESULT",
    "LiveSteering",
    "SteeringNotWiredError",
]

#: Where a steer's boundary metadata lives on its ``HumanMessage``: ``additional_kwargs[METADATA_KEY]``
#: (``input_id``, ``target_generation_id``, ``delivery``, ``kind``). langchain-core's conversion to
#: provider messages (``convert_to_openai_messages``) leaves ``additional_kwargs`` out.
METADATA_KEY: Final = "live_steering"

_Execute = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]
"""What ``awrap_tool_call`` is handed: runs the tool call."""

_STREAM_MODES: Final = frozenset({"values", "updates", "checkpoints", "tasks", "debug", "messages", "custom"})
"""LangGraph's ``StreamMode`` values."""

_NOT_RUN_STEPS: Final = 2
"""Supersteps a further model call needs at least: the hook's node and the model's."""

_FRESH_BASE: Final = 0
"""The base of a loop that starts from no checkpoint. LangGraph's loop starts at ``step =
checkpoint["step"] + 1`` (``-2`` with none: ``step = -1``) and stops at ``stop = step +
recursion_limit + 1``, raising ``GraphRecursionError`` at the first superstep past ``stop``:
the base is ``stop - recursion_limit`` (the saved step ``+ 2``), and a node at ``langgraph_step``
``base + k`` uses ``k`` of the ``recursion_limit`` supersteps."""

_NS_SEP: Final = "|"
"""What separates a subgraph's part of ``langgraph_checkpoint_ns`` from its parent's."""

_OUTCOMES: Final[dict[HoldReason | None, LoopOutcome]] = {
    None: LoopOutcome.FINISHED,
    HoldReason.BUDGET_EXHAUSTED: LoopOutcome.BUDGET_EXHAUSTED,
    HoldReason.GENERATION_STOPPED: LoopOutcome.STOPPED,
    HoldReason.RUNTIME_CLOSED: LoopOutcome.STOPPED,
}


class SteeringNotWiredError(LiveSteeringError, RuntimeError):
    """The graph and the steering are not wired together: the hook ran outside ``steering.ainvoke``,
    or ``steering.ainvoke`` ran a graph whose run never reached the hook with steers pending."""


class _Run:
    """One generation of one ``LiveSteering``: what its hook and tool wrapper share."""

    def __init__(self, steering: LiveSteering, gen: Generation) -> None:
        self.steering = steering
        self.gen = gen
        self.state: Any = None
        """The graph's state as the last boundary saw it (returned when a stop ends the run)."""
        self.base = _FRESH_BASE
        """The base of the invocation's own loop: ``_FRESH_BASE``, or a checkpointed thread's step ``+ 2``."""
        self.first_step: int | None = None
        self.last_step: int | None = None
        """The hook's first and last call in this invocation: its ``langgraph_step`` less the base
        of the loop it ran in, the supersteps of that loop's ``recursion_limit`` used through it."""
        self.step_limit: int | None = None
        """The ``recursion_limit`` of the loop the hook's last call ran in (``None``: LangGraph's default)."""
        self.nested_first: int | None = None
        """In a subgraph, the ``langgraph_step`` of the hook's first call in this invocation."""
        self.token: Token[_Run | None] | None = None
        self.boundaries = 0
        """Calls of the hook (or ``drain``) in this invocation."""
        self.lock = anyio.Lock()
        """With ``skip_tools_on_steer``: the batch's tools run one at a time, in the model's order."""
        self.started: set[str] = set()
        self.returned: set[str] = set()
        """The calls of the current batch (the model's last reply) that started, and returned;
        emptied at each boundary, so a later reply that reuses a call id is a batch of its own."""
        self.batch_skipped: set[str] = set()
        """The calls of the current batch answered ``SKIPPED_TOOL_RESULT``."""
        self.skipped: list[str] = []
        """Every call skipped in this invocation, in order (``skipped_tool_call_ids``)."""

    def new_batch(self) -> None:
        """A boundary: the tool calls after it belong to the next model reply."""
        self.started.clear()
        self.returned.clear()
        self.batch_skipped.clear()

    def new_segment(self, base: int) -> None:
        """A new invocation of the graph starts (its steps and boundaries are counted afresh),
        on a loop whose base is ``base``."""
        self.first_step = self.last_step = self.step_limit = self.nested_first = None
        self.boundaries = 0
        self.base = base

    def model_step_left(self) -> bool:
        """False when the step after this boundary's (the model node's) is past the ``recursion_limit``
        of the loop the hook runs in: LangGraph raises ``GraphRecursionError`` before the model runs."""
        return self.step_limit is None or self.last_step is None or self.last_step + 1 <= self.step_limit

    def steps_used(self) -> int:
        """Supersteps of the loop the hook runs in used through the model call after its last call.
        In a subgraph, that is the subgraph's loop: its parent's steps are not in the hook's view
        (LangGraph counts each loop's steps apart, each against the same ``recursion_limit``)."""
        if self.last_step is None:
            return 0
        return self.last_step + 1

    def steps_to_model(self) -> int:
        """Supersteps the next invocation (from ``START`` again) needs for its first model call:
        as many as this one took to reach it in the hook's loop (nodes before the hook counted)."""
        if self.first_step is None:
            return _NOT_RUN_STEPS
        return max(_NOT_RUN_STEPS, self.first_step + 1)


class _RunEnded(LiveSteeringError):
    """Raised by the hook at a boundary of a generation whose admission closed (stopped, or the
    runtime closed): ``ainvoke`` catches its own and returns; nothing else raises it."""

    def __init__(self, run: _Run) -> None:
        super().__init__(f"generation {run.gen.id!r} was stopped: the graph run ends at this boundary")
        self.run = run


_RUN: ContextVar[_Run | None] = ContextVar("live_steering_langgraph_run", default=None)
"""The running generation of the graph run this task belongs to: LangGraph runs each node in a
task made from the invoking task's context, so the hook finds its own run, also in subgraphs."""


class LiveSteering:
    """Runs LangGraph graphs with a ``LiveRuntime``'s steers put in their messages before every model call.

    >>> steering = LiveSteering(runtime)
    >>> agent = create_react_agent(model, tools, pre_model_hook=steering.pre_model_hook)  # doctest: +SKIP
    >>> state = await steering.ainvoke(agent, {"messages": [("user", "Fix it")]})  # doctest: +SKIP

    While a run is in progress, ``runtime.generation["id"]`` is its generation: a host submits
    ``Input("steer", ...)`` anchored to it through ``runtime.capability["submit"]``, and stops it
    with ``runtime.stop(gid)``. One run at a time per runtime (a second raises
    ``GenerationStateError``). ``skip_tools_on_steer`` (C31, default off) needs the tools in
    ``steering.tool_node(tools)``; ``run_follow_ups=False`` leaves follow-ups queued for the
    caller's next run.
    """

    def __init__(
        self,
        runtime: LiveRuntime,
        *,
        skip_tools_on_steer: bool = False,
        run_follow_ups: bool = True,
        messages_key: str = "messages",
    ) -> None:
        if not isinstance(runtime, LiveRuntime):
            raise TypeError("LiveSteering needs a live_steering.LiveRuntime")
        if type(skip_tools_on_steer) is not bool:
            raise TypeError(f"skip_tools_on_steer must be a bool, got {skip_tools_on_steer!r}")
        if type(run_follow_ups) is not bool:
            raise TypeError(f"run_follow_ups must be a bool, got {run_follow_ups!r}")
        if not isinstance(messages_key, str) or not messages_key:
            raise TypeError(f"messages_key must be a non-empty str, got {messages_key!r}")
        self.runtime: Final = runtime
        self.skip_tools_on_steer: Final = skip_tools_on_steer
        self.run_follow_ups: Final = run_follow_ups
        self.messages_key: Final = messages_key
        self.outcome: LoopOutcome | None = None
        """How the last generation of the last ``ainvoke`` ended (``None`` before any)."""
        self.generation_ids: tuple[str, ...] = ()
        """The generations the last ``ainvoke`` ran: its own, then one per round of follow-ups."""
        self.skipped_tool_call_ids: tuple[str, ...] = ()
        """Tool calls the last ``ainvoke`` answered without running (``skip_tools_on_steer``)."""
        self._running: _Run | None = None

    # -- inside the graph -------------------------------------------------------------------

    async def pre_model_hook(self, state: Any, config: RunnableConfig) -> dict[str, list[BaseMessage]] | None:
        """The request boundary, a graph node: ``{messages_key: [the steers written here]}``.

        Pass it as ``create_react_agent(..., pre_model_hook=steering.pre_model_hook)``, or add it
        to a ``StateGraph`` as a node on every path into the model node. It returns an update
        that appends each pending steer, in admission order, as a ``HumanMessage`` (metadata in
        ``additional_kwargs[METADATA_KEY]``); with nothing pending, no update (``None``). Each steer is
        ``applied`` once the update is returned to LangGraph, which writes it into the state at
        the end of the step. After a stop it ends the graph run instead (``ainvoke`` returns).
        """
        run = self._run()
        if isinstance(state, Mapping) and self.messages_key not in state:
            # LangGraph would drop an update for a key its state does not have, steers and all:
            # refused here, before anything is written (the run fails, what is pending held)
            keys = sorted(k for k in state if isinstance(k, str))
            raise ValueError(
                f"the hook's state has no {self.messages_key!r} key to put steers in (its keys: {keys}):"
                " pass LiveSteering(runtime, messages_key=...) naming the key that holds the conversation"
            )
        _record(run, state, config)
        written = await self._drain(run)
        # No update when nothing was written: an empty list would still run the reducer over the messages.
        return {self.messages_key: written} if written else None

    #: The same node, for a hand-written ``StateGraph``: ``builder.add_node("steer", steering.node)``.
    node = pre_model_hook

    async def drain(self, state: Any = None, config: RunnableConfig | None = None) -> list[BaseMessage]:
        """The boundary for a hook of your own: the steers pending now, as messages to put in the state.

        ``return {"messages": [*await steering.drain(state, config), ...]}`` inside your own
        ``pre_model_hook(state, config)`` (for instance one that also trims). They are ``applied``
        when this returns: put every one of them in the node's update. After a stop it ends the
        graph run, as ``pre_model_hook`` does. Pass your hook's ``state`` (what ``ainvoke`` returns
        after a stop) and ``config`` (its step count, for ``recursion_limit``).
        """
        run = self._run()
        if state is not None or config is not None:
            _record(run, state, config)
        return await self._drain(run)

    async def _drain(self, run: _Run) -> list[BaseMessage]:
        run.boundaries += 1
        run.new_batch()  # every boundary is before a model call: the tools after it are its reply's
        gen = run.gen
        if not gen.accepting:
            raise _RunEnded(run)  # stopped (host or engine) or the runtime closed: no further model call
        if not gen.pending:  # nothing pending: the boundary would write nothing
            return []
        if not run.model_step_left():
            # The model's step is past the limit: LangGraph raises GraphRecursionError before
            # any model call could carry what is pending, so it is held, never written (C17).
            gen.stop(StopReason.BUDGET_EXHAUSTED)
            return []
        written: list[BaseMessage] = []

        def write(steer: Input, metadata: Mapping[str, Any]) -> None:
            written.append(HumanMessage(content=steer.text, additional_kwargs={METADATA_KEY: dict(metadata)}))

        try:
            await gen.boundary(write)
        except GenerationStopped as signal:  # a stop landed as the boundary began: end the run here
            raise _RunEnded(run) from signal
        return written

    def tool_node(self, tools: Sequence[Any], **kwargs: Any) -> ToolNode:
        """A ``ToolNode`` over ``tools`` whose calls go through ``awrap_tool_call`` (stop, skip).

        ``kwargs`` go to ``ToolNode``; an ``awrap_tool_call`` of yours runs inside this one.
        Pass it as the agent's tools: ``create_react_agent(model, steering.tool_node(tools), ...)``.
        """
        inner: AsyncToolCallWrapper | None = kwargs.pop("awrap_tool_call", None)
        if inner is not None and not callable(inner):
            raise TypeError(f"awrap_tool_call must be an async callable (request, execute), got {inner!r}")
        if inner is None:
            return ToolNode(tools, awrap_tool_call=self.awrap_tool_call, **kwargs)

        async def wrapped(request: ToolCallRequest, execute: _Execute) -> ToolMessage | Command[Any]:
            async def then(req: ToolCallRequest) -> ToolMessage | Command[Any]:
                return await inner(req, execute)

            return await self.awrap_tool_call(request, then)

        return ToolNode(tools, awrap_tool_call=wrapped, **kwargs)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        execute: _Execute,
    ) -> ToolMessage | Command[Any]:
        """``ToolNode(tools, awrap_tool_call=steering.awrap_tool_call)``: runs the call, or answers it.

        After a stop, a call not yet started is answered ``STOPPED_TOOL_RESULT`` and not run. With
        ``skip_tools_on_steer``, the calls of one model reply run one at a time, in its order, and
        once one returned with a steer pending, the rest are answered ``SKIPPED_TOOL_RESULT``
        (``tools.skipped`` names them, C31). A running tool is never interrupted.
        """
        run = self._run()
        call = request.tool_call
        call_id = str(call.get("id") or "")
        if not self.skip_tools_on_steer:
            if not run.gen.accepting:
                return _answer(call, STOPPED_TOOL_RESULT, "stopped")
            return await execute(request)
        async with run.lock:
            if not run.gen.accepting:
                return _answer(call, STOPPED_TOOL_RESULT, "stopped")
            if call_id in run.batch_skipped:
                return _answer(call, SKIPPED_TOOL_RESULT, "skipped")
            batch = _batch_of(request.state, call_id, self.messages_key)
            if call_id and any(i in run.returned for i in batch) and run.gen.steers_pending:
                rest = [i for i in batch if i not in run.started]
                run.gen.skip_tools(rest)  # tools.skipped, naming the steers that made the rest pointless
                run.skipped.extend(rest)
                run.batch_skipped.update(rest)
                return _answer(call, SKIPPED_TOOL_RESULT, "skipped")
            run.started.add(call_id)
            try:
                return await execute(request)
            finally:
                run.returned.add(call_id)

    # -- around the graph -------------------------------------------------------------------

    def stop(self) -> bool:
        """Stop the running generation (its pending steers are held); False when none runs.

        The same as the host's ``runtime.stop(gid)``: the graph runs no further model call and
        starts no further tool; ``ainvoke`` returns the state at the next boundary.
        """
        run = self._running
        return run is not None and run.gen.stop()

    async def ainvoke(
        self, graph: Any, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any:
        """``graph.ainvoke(input, config, **kwargs)`` as one generation (and one per round of follow-ups).

        Returns what ``graph.ainvoke`` returns (the state's output keys), of the last
        invocation; after a stop, the state as the boundary that ended the run saw it.
        ``self.outcome`` says how it ended (``None`` when it raised). A failure or a cancellation
        propagates as LangGraph raised it (pending steers held); ``GraphRecursionError`` holds
        them ``budget-exhausted``.
        ``config["recursion_limit"]`` bounds the whole generation, its continuations included.
        """
        self._check_graph(graph)
        if kwargs.get("stream_mode", "values") != "values":
            raise ValueError(
                "LiveSteering.ainvoke returns the graph's state: stream_mode must be 'values' (the default)"
            )
        config = _config(config)
        self._check_idle()
        # The conversation is read back from each invocation's output, to run the graph again
        # on it (a continuation, a follow-up): asked for, and left out of what is returned,
        # when the graph's output (its output_schema, or the caller's output_keys) leaves it out.
        kwargs = dict(kwargs)
        wanted = kwargs.get("output_keys", getattr(graph, "output_channels", None))
        channels = getattr(graph, "channels", None)
        # a graph whose own state has no such key (the hook is in a subgraph keyed otherwise)
        # is asked for nothing more: its output is the state it runs on again
        ask = self.messages_key if isinstance(channels, Mapping) and self.messages_key in channels else None
        shown = _Shown(wanted, ask)
        if shown.added:
            kwargs["output_keys"] = shown.asked
        self.generation_ids = ()
        self.skipped_tool_call_ids = ()
        full = await self._generation(graph, input, config, kwargs, shown)
        config = _from_head(config)
        while self._follow_ups_next():
            full = await self._generation(graph, self._next_input(graph, config, full), config, kwargs, shown)
        return shown.returned(full)

    async def _generation(
        self, graph: Any, input: Any, config: RunnableConfig, kwargs: Mapping[str, Any], shown: _Shown
    ) -> Any:
        self.outcome = None
        left = _limit(config)
        result: Any = None
        async with self.runtime.open_generation() as gen:
            run = self._enter(gen)
            try:
                while True:
                    run.new_segment(await self._base(graph, config))
                    try:
                        result = await graph.ainvoke(input, _segment(config, left), **kwargs)
                    except _RunEnded as ended:
                        if ended.run is not run:
                            raise
                        result = _output(shown.asked, run.state)
                        break
                    except GraphRecursionError:
                        gen.stop(StopReason.BUDGET_EXHAUSTED)  # hold, do not fail them: the budget is spent
                        raise
                    config = _from_head(config)
                    again, left = await self._checkpoint(run, graph, config, result, left)
                    if not again:
                        break
                    input = self._next_input(graph, config, result)
            finally:
                self._leave(run)
        self.outcome = _OUTCOMES.get(gen.end_reason, LoopOutcome.STOPPED)
        return result

    def _follow_ups_next(self) -> bool:
        """True when the generation that just ended leaves follow-ups for this call to run (C29)."""
        finished = self.outcome is LoopOutcome.FINISHED
        return self.run_follow_ups and finished and bool(self.runtime.pending_follow_ups)

    def _enter(self, gen: Generation) -> _Run:
        run = _Run(self, gen)
        self._running = run
        run.token = _RUN.set(run)
        return run

    def _leave(self, run: _Run) -> None:
        if run.token is not None:
            with contextlib.suppress(ValueError):  # a stream closed from another context (its finaliser)
                _RUN.reset(run.token)
        self._running = None
        self.skipped_tool_call_ids += tuple(run.skipped)
        self.generation_ids += (run.gen.id,)

    async def _checkpoint(
        self, run: _Run, graph: Any, config: RunnableConfig, result: Any, left: int | None
    ) -> tuple[bool, int | None]:
        """After an invocation ended by itself: True to run the graph again, same generation (C16)."""
        gen = run.gen
        if left is not None:
            left -= run.steps_used()
        if not run.boundaries and gen.pending:
            # No boundary ran: running it again would never deliver them (and call the model
            # again each time): steers, or the follow-ups this generation was opened for. Hold
            # them and say what is missing.
            gen.stop()
            raise SteeringNotWiredError(
                "the graph never reached LiveSteering's hook: pass "
                "pre_model_hook=steering.pre_model_hook (or add steering.node before the "
                "model node); the pending steers are held"
            )
        if await self._paused(graph, config, result):
            # Paused for a human (LangGraph's interrupt): the caller resumes it, so the
            # generation ends here; what is pending is held (generation-stopped).
            if gen.pending or self.runtime.pending_follow_ups:
                gen.stop()
            return False, left
        # The checkpoint: a steer pending now continues the same generation (C16), unless the
        # steps left cannot carry the next run to its first model call (C17): through as many
        # nodes before the hook as this run had, the hook's, and the model's.
        may_call = left is None or left >= run.steps_to_model()
        return gen.continue_after_checkpoint(may_call=may_call), left

    async def astream(
        self, graph: Any, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncGenerator[Any, None]:
        """``graph.astream(input, config, **kwargs)`` as one generation: every invocation's chunks, in order.

        ``async for chunk in steering.astream(agent, input, stream_mode="updates"): ...``. The
        chunks have the shape ``graph.astream`` gives them (``stream_mode`` a string or a list,
        ``subgraphs``), with LangGraph's default output format (``version="v1"``; another is a
        ``ValueError``). Continuations and follow-ups stream on, as further invocations of the
        graph; a stop ends the stream at the next boundary. Leaving the loop early stops the
        generation (pending steers held) and closes LangGraph's stream.
        """
        self._check_graph(graph)
        output_keys = kwargs.get("output_keys")
        if output_keys is not None and (isinstance(output_keys, str) or self.messages_key not in output_keys):
            raise ValueError(
                "LiveSteering.astream continues a generation on the streamed values: output_keys must "
                f"be a list that includes {self.messages_key!r}"
            )
        if kwargs.get("version", "v1") != "v1":
            raise ValueError("LiveSteering.astream gives LangGraph's default chunks: version must be 'v1'")
        config = _config(config)
        modes = kwargs.pop("stream_mode", None)
        if modes is None:
            modes = getattr(graph, "stream_mode", "values")
        single = isinstance(modes, str)
        wanted = [modes] if single else list(modes) if isinstance(modes, (list, tuple)) else None
        if not wanted or any(mode not in _STREAM_MODES for mode in wanted):
            raise ValueError(
                f"stream_mode must be one of {sorted(_STREAM_MODES)} or a list of them, got {modes!r}"
            )
        self._check_idle()
        # "values" is how the next invocation finds the conversation so far: asked for, and
        # dropped from the chunks, when the caller did not ask for it.
        kwargs["stream_mode"] = wanted if "values" in wanted else [*wanted, "values"]
        show_values = "values" in wanted
        subgraphs = bool(kwargs.get("subgraphs", False))
        self.generation_ids = ()
        self.skipped_tool_call_ids = ()
        while True:
            self.outcome = None
            left = _limit(config)
            values: Any = None
            async with self.runtime.open_generation() as gen:
                run = self._enter(gen)
                try:
                    while True:
                        run.new_segment(await self._base(graph, config))
                        stream = graph.astream(input, _segment(config, left), **kwargs)
                        try:
                            async for chunk in stream:
                                namespace, mode, data = _parts(chunk, subgraphs)
                                if mode == "values":
                                    if not namespace:
                                        values = data
                                    if not show_values:
                                        continue
                                yield _shaped(namespace, mode, data, single, subgraphs)
                        except _RunEnded as ended:
                            if ended.run is not run:
                                raise
                            values = _output(getattr(graph, "output_channels", None), run.state)
                            break
                        except GraphRecursionError:
                            gen.stop(StopReason.BUDGET_EXHAUSTED)
                            raise
                        except GeneratorExit:  # the consumer left the loop: end the run, not the process
                            gen.stop()
                            return
                        finally:
                            await stream.aclose()  # leave no LangGraph task running
                        config = _from_head(config)
                        again, left = await self._checkpoint(run, graph, config, values, left)
                        if not again:
                            break
                        input = self._next_input(graph, config, values)
                finally:
                    self._leave(run)
            self.outcome = _OUTCOMES.get(gen.end_reason, LoopOutcome.STOPPED)
            if not self._follow_ups_next():
                return
            input = self._next_input(graph, config, values)

    def _next_input(self, graph: Any, config: RunnableConfig, result: Any) -> Any:
        """What the next invocation of the same conversation starts from: nothing new for a thread
        LangGraph keeps in a checkpointer, else the last invocation's output."""
        return {self.messages_key: []} if _checkpointed(graph, config) else result

    @staticmethod
    async def _base(graph: Any, config: RunnableConfig) -> int:
        """The base of the next invocation's loop: a checkpointed thread's loop starts from its
        latest checkpoint's step, any other from none (``_FRESH_BASE``)."""
        if not _checkpointed(graph, config):
            return _FRESH_BASE
        snapshot = await graph.aget_state(config)
        step = (snapshot.metadata or {}).get("step")
        return _FRESH_BASE if not isinstance(step, int) else step + 2

    @staticmethod
    async def _paused(graph: Any, config: RunnableConfig, result: Any) -> bool:
        """True if the run is paused for a human: ``interrupt()`` (``__interrupt__`` in the output),
        or a static ``interrupt_before/after`` (the thread's next nodes, read from its checkpoint)."""
        if isinstance(result, Mapping) and "__interrupt__" in result:
            return True
        if not _checkpointed(graph, config):
            return False  # LangGraph pauses only a run with a checkpointer
        snapshot = await graph.aget_state(config)
        return bool(snapshot.next)

    def _check_idle(self) -> None:
        """``GenerationStateError`` while a generation runs, before this call changes anything."""
        running = self.runtime.generation
        if running is not None:
            raise GenerationStateError(f"generation {running['id']!r} is still running: one run at a time")

    def _check_graph(self, graph: Any) -> None:
        """A compiled graph (the hook checks, at each call, that its state has ``messages_key``:
        the graph it runs in may be a subgraph keyed otherwise)."""
        if not callable(getattr(graph, "ainvoke", None)) or not callable(getattr(graph, "astream", None)):
            raise TypeError("LiveSteering runs a compiled graph (builder.compile(), create_react_agent(...))")

    def _run(self) -> _Run:
        run = _RUN.get()
        if run is None or run.steering is not self:
            raise SteeringNotWiredError(
                "LiveSteering's hook ran outside its run: run the graph with "
                "`await steering.ainvoke(graph, input, config)` (a plain graph.ainvoke has no generation)"
            )
        return run


def _record(run: _Run, state: Any, config: RunnableConfig | None) -> None:
    """What a boundary learns of the graph: its state now, and where it is in its loop's steps.

    LangGraph puts the superstep in ``config["metadata"]["langgraph_step"]`` and the loop's
    limit in ``config["recursion_limit"]``; a subgraph (``langgraph_checkpoint_ns`` with a
    parent part) runs a loop of its own, counted here from the hook's first call in it."""
    if isinstance(config, Mapping):
        metadata = config.get("metadata") or {}
        step = metadata.get("langgraph_step")
        if isinstance(step, int):
            namespace = metadata.get("langgraph_checkpoint_ns")
            if isinstance(namespace, str) and _NS_SEP in namespace:
                # A subgraph's loop may start past step 1 (a persistent subgraph, a resume inside
                # it) from a checkpoint of its own: counted from the hook's first call in it, as
                # that loop's first step, the hook's steps are never overstated.
                if run.nested_first is None:
                    run.nested_first = step
                step -= run.nested_first - 1
            else:
                step -= run.base
            if run.first_step is None:
                run.first_step = step
            run.last_step = step
            limit = config.get("recursion_limit")
            run.step_limit = limit if isinstance(limit, int) else None
    if state is not None:
        run.state = state


class _Shown:
    """The output keys ``ainvoke`` asks each invocation for (``asked``: the caller's, with the
    messages key when they leave it out), and how to give the caller only theirs."""

    def __init__(self, wanted: Any, messages_key: str | None) -> None:
        self.wanted = wanted
        keys = [wanted] if isinstance(wanted, str) else list(wanted) if wanted is not None else None
        if messages_key is None:
            keys = None  # nothing to add: ask as the caller did
        self.added = keys is not None and (messages_key not in keys or isinstance(wanted, str))
        """Asked otherwise than the caller's output: with the messages key, or as a list for a
        single key (whose output would be the value alone, no state to run the graph on)."""
        if keys is not None and messages_key not in keys:
            keys.append(messages_key)
        self.asked: Any = keys if self.added else wanted

    def returned(self, full: Any) -> Any:
        """The caller's output, from an invocation's output asked with ``asked``."""
        if not self.added or not isinstance(full, Mapping):
            return full
        if isinstance(self.wanted, str):
            return full.get(self.wanted)
        return {key: full[key] for key in self.wanted if key in full}


def _limit(config: RunnableConfig) -> int | None:
    """``config["recursion_limit"]`` when the caller set one: the steps of the whole generation."""
    limit = config.get("recursion_limit")
    return limit if isinstance(limit, int) else None


def _from_head(config: RunnableConfig) -> RunnableConfig:
    """``config`` without a ``checkpoint_id``: once a run from an earlier checkpoint (LangGraph's
    replay or fork) has run, its thread goes on from the checkpoints it wrote, so what it left
    (paused or not) is read there, and a continuation or follow-up starts there, not from that
    earlier checkpoint again (which would drop the run's own answer from its branch)."""
    configurable = config.get("configurable")
    if not isinstance(configurable, Mapping) or "checkpoint_id" not in configurable:
        return config
    rest = {key: value for key, value in configurable.items() if key != "checkpoint_id"}
    return {**config, "configurable": rest}


def _segment(config: RunnableConfig, left: int | None) -> RunnableConfig:
    """The config of one invocation: the caller's, with the steps the generation has left."""
    return config if left is None else {**config, "recursion_limit": left}


def _parts(chunk: Any, subgraphs: bool) -> tuple[tuple[str, ...], str, Any]:
    """A chunk of ``graph.astream(stream_mode=[...])`` as (namespace, mode, data)."""
    if subgraphs:
        namespace, mode, data = chunk
        return tuple(namespace), mode, data
    mode, data = chunk
    return (), mode, data


def _shaped(namespace: tuple[str, ...], mode: str, data: Any, single: bool, subgraphs: bool) -> Any:
    """A chunk in the shape ``graph.astream`` gives for the caller's own ``stream_mode``."""
    if single:
        return (namespace, data) if subgraphs else data
    return (namespace, mode, data) if subgraphs else (mode, data)


def _config(config: RunnableConfig | None) -> RunnableConfig:
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise TypeError("config must be a LangGraph RunnableConfig (a dict)")
    if "recursion_limit" in config:
        limit = config["recursion_limit"]
        if type(limit) is not int:
            raise TypeError(f"config['recursion_limit'] must be an int, got {limit!r}")
        if limit < 1:
            raise ValueError(f"config['recursion_limit'] must be at least 1, got {limit}")
    return dict(config)  # type: ignore[return-value]


def _output(channels: Any, state: Any) -> Any:
    """The state as ``graph.ainvoke`` would return it with these output channels."""
    if not isinstance(state, Mapping):
        return state
    if isinstance(channels, str):
        return state.get(channels)
    if channels is None:
        return dict(state)
    return {key: state[key] for key in channels if key in state}


def _checkpointed(graph: Any, config: RunnableConfig) -> bool:
    """True when LangGraph keeps this run's thread in a checkpointer (its state outlives the run)."""
    checkpointer = getattr(graph, "checkpointer", None)
    thread = config.get("configurable", {}).get("thread_id")
    return checkpointer not in (None, False, True) and thread is not None


def _batch_of(state: Any, call_id: str, messages_key: str) -> list[str]:
    """The ids of the tool calls of the model reply that asked for ``call_id``, in its order."""
    messages = state.get(messages_key) if isinstance(state, Mapping) else getattr(state, messages_key, None)
    for message in reversed(messages or ()):
        if isinstance(message, AIMessage):
            ids = [str(c.get("id") or "") for c in message.tool_calls]
            if call_id in ids:
                return ids
    return [call_id]


def _answer(call: Mapping[str, Any], text: str, why: str) -> ToolMessage:
    """A tool call answered without running it."""
    return ToolMessage(
        content=text,
        tool_call_id=str(call.get("id") or ""),
        name=call.get("name"),
        additional_kwargs={METADATA_KEY: {why: True}},
    )
