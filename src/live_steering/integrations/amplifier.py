"""An Amplifier orchestrator module with live steering: Amplifier's agent loop on a ``LiveRuntime``.

Needs the ``amplifier`` extra (``pip install 'live-steering[amplifier]'``, amplifier-core 2.x).
Mount it like any orchestrator: by name in a session's mount plan (``loop-live-steering``,
registered in the ``amplifier.modules`` entry-point group, so Amplifier's ``ModuleLoader``
finds it) or by calling ``mount(coordinator, config)``. Mounting registers two coordinator
capabilities, so a host holding only the coordinator (``session.coordinator``) steers and
stops a running ``execute``::

    capability = coordinator.get_capability("live.steering")         # the live capability
    runtime = coordinator.get_capability("live.steering.runtime")     # the LiveRuntime
    gen_id = runtime.generation["id"]                                 # while an execute runs
    receipt = await capability["submit"](Input("steer", "Use the corrected path", id="fix-1"), gen_id)
    runtime.stop(gen_id)                                              # ends it at its next boundary

What it owns: the loop (one generation per ``execute``, one more per round of follow-ups, a
request boundary before every provider call, tools run to completion, the continuation
check after the final answer is in the context). What it never does: interrupt a running
tool, replay a prompt or a tool call, or touch Amplifier's internals (it only uses the
orchestrator, context, provider, tool and hook interfaces of ``amplifier_core.interfaces``).

Written with absolute imports: amplifier-core's validator and test fixtures load a
module from its file, outside its package.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any, Final

import anyio

from live_steering._errors import GenerationStateError, RuntimeClosedError
from live_steering._extras import install_hint
from live_steering._rules import (
    SKIPPED_TOOL_RESULT,
    STOPPED_TOOL_RESULT,
    TOOL_CANCELLED_RESULT,
    TOOL_FAILED_RESULT,
)
from live_steering._runtime import Generation, LiveRuntime
from live_steering._types import HoldReason, Input, StopReason
from live_steering.integrations._bridge import EventBridge

try:
    from amplifier_core.events import (
        ORCHESTRATOR_COMPLETE,
        PROMPT_COMPLETE,
        PROMPT_SUBMIT,
        PROVIDER_ERROR,
        PROVIDER_REQUEST,
        PROVIDER_RESPONSE,
        TOOL_ERROR,
        TOOL_POST,
        TOOL_PRE,
    )
    from amplifier_core.message_models import ChatRequest, Message, ToolSpec
except ImportError as error:  # pragma: no cover - exercised by installs without the extra
    raise ImportError(
        install_hint("live_steering.integrations.amplifier", "amplifier", "amplifier-core")
    ) from error

__all__ = [
    "CAPABILITY",
    "MODULE_NAME",
    "RUNTIME_CAPABILITY",
    "SKIPPED_TOOL_RESULT",
    "STOPPED_TOOL_RESULT",
    "TOOL_CANCELLED_RESULT",
    "TOOL_FAILED_RESULT",
    "LiveSteeringOrchestrator",
    "mount",
]

#: Read by Amplifier's loader: this module mounts at the ``orchestrator`` mount point.
__amplifier_module_type__: Final = "orchestrator"

#: The coordinator capability a host submits through: ``{"version", "mode", "cancellable", "submit"}``.
CAPABILITY: Final = "live.steering"
#: The coordinator capability holding the orchestrator's ``LiveRuntime``: the running
#: generation (``runtime.generation``), ``runtime.stop(id)``, receipts and events.
RUNTIME_CAPABILITY: Final = "live.steering.runtime"
#: The name this module is registered under in the ``amplifier.modules`` entry-point group.
MODULE_NAME: Final = "loop-live-steering"
_CONFIG_KEYS: Final = frozenset({"runtime", "max_iterations", "default_provider", "skip_tools_on_steer"})
#: ``orchestrator:complete``'s ``status`` by how the generation ended (its end reason).
_STATUS: Final[dict[HoldReason | None, str]] = {
    None: "success",
    HoldReason.BUDGET_EXHAUSTED: "max_iterations",
    HoldReason.GENERATION_STOPPED: "cancelled",
    HoldReason.RUNTIME_CLOSED: "cancelled",
}
_KEYS: Final = ("version", "mode", "cancellable", "submit")
#: Seconds the hooks have to take the run's last events when ``execute`` is being cancelled.
FLUSH_GRACE: Final = 1.0


class _Turns:
    """What one ``execute`` did over its generations: provider calls, and the last reply's text."""

    __slots__ = ("calls", "text")

    def __init__(self) -> None:
        self.calls = 0
        self.text = ""


class _LiveCapability(Mapping[str, Any]):
    """The runtime's ``live.steering`` capability as a live, read-only mapping.

    Each read asks the runtime, so ``mode`` turns ``"unavailable"`` the moment the runtime
    closes, for a host that looked the capability up long before. It compares equal to
    ``runtime.capability`` (the same four keys and values).
    """

    __slots__ = ("_runtime",)

    def __init__(self, runtime: LiveRuntime) -> None:
        self._runtime = runtime

    def __getitem__(self, key: str) -> Any:
        return self._runtime.capability[key]

    def __iter__(self) -> Iterator[str]:
        return iter(_KEYS)

    def __len__(self) -> int:
        return len(_KEYS)

    def __repr__(self) -> str:
        return f"<live.steering capability {dict(self)!r}>"


async def mount(coordinator: Any, config: Mapping[str, Any] | None = None) -> Any:
    """Mount the orchestrator and register the ``live.steering`` capabilities; return the cleanup.

    ``config`` (all optional): ``runtime``, a ``LiveRuntime`` you own (default: a fresh
    one, closed by the returned cleanup); ``max_iterations``, provider calls per turn
    (default ``-1``, unlimited, as Amplifier's basic loop); ``default_provider``, the name
    of the provider to use (default: the one of lowest priority); ``skip_tools_on_steer``
    (default False), answer the rest of a tool batch without running it once a steer is
    pending. A value of the wrong type raises ``TypeError``, a bad value or an unknown key
    ``ValueError``, before anything is mounted.
    """
    if config is not None and not isinstance(config, Mapping):
        raise TypeError(f"the {MODULE_NAME} config must be a mapping, got {type(config).__name__}")
    orchestrator = LiveSteeringOrchestrator(dict(config or {}))
    runtime = orchestrator.runtime
    await coordinator.mount("orchestrator", orchestrator)
    coordinator.register_capability(CAPABILITY, _LiveCapability(runtime))
    coordinator.register_capability(RUNTIME_CAPABILITY, runtime)

    async def cleanup() -> None:
        orchestrator.close()
        if orchestrator.owns_runtime:
            await runtime.aclose()  # the registered capability now says mode "unavailable"

    return cleanup


class LiveSteeringOrchestrator:
    """Amplifier's agent loop, with a request boundary before every provider call.

    Per ``execute``: one generation (``generation.started``), the prompt as a user
    message, then rounds of boundary, provider call, tools. Pending steers enter the
    context through ``context.add_message({"role": "user", "content": text, "metadata":
    ...})``, the metadata carrying ``input_id`` and ``target_generation_id``. After the
    final answer is in the context (Amplifier's checkpoint), steers that arrived meanwhile
    continue the same generation, and follow-ups start the next one (the next turn, in the
    same ``execute``). Amplifier's lifecycle events go through ``hooks``, and the runtime's
    steering events are re-emitted beside them, in order, at each step.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        if not isinstance(config, Mapping):
            raise TypeError(f"the {MODULE_NAME} config must be a mapping, got {type(config).__name__}")
        unknown = set(config) - _CONFIG_KEYS
        if unknown:
            raise ValueError(f"unknown config keys for {MODULE_NAME}: {sorted(unknown)}")
        runtime = config.get("runtime")
        if runtime is not None and not isinstance(runtime, LiveRuntime):
            raise TypeError("config['runtime'] must be a live_steering.LiveRuntime")
        max_iterations = config.get("max_iterations", -1)
        if type(max_iterations) is not int:
            raise TypeError(f"config['max_iterations'] must be an int, got {max_iterations!r}")
        if max_iterations < 1 and max_iterations != -1:
            raise ValueError(f"config['max_iterations'] must be positive or -1 (unlimited): {max_iterations}")
        default_provider = config.get("default_provider")
        if default_provider is not None and not isinstance(default_provider, str):
            raise TypeError("config['default_provider'] must be a provider name (str)")
        skip_tools_on_steer = config.get("skip_tools_on_steer", False)
        if type(skip_tools_on_steer) is not bool:
            raise TypeError(f"config['skip_tools_on_steer'] must be a bool, got {skip_tools_on_steer!r}")
        self.owns_runtime: Final = runtime is None
        self.runtime: Final[LiveRuntime] = LiveRuntime() if runtime is None else runtime
        self.max_iterations: Final[int] = max_iterations
        self.default_provider: Final[str | None] = default_provider
        self.skip_tools_on_steer: Final[bool] = skip_tools_on_steer
        self._bridge = EventBridge(self.runtime)
        # The runtime's events, buffered as published and handed to the hooks at the loop's
        # steps; an empty deque is falsy, so a step with nothing to hand on costs no call.
        self._events = self._bridge.events

    def close(self) -> None:
        """Stop re-emitting the runtime's events (called by the mount's cleanup)."""
        self._bridge.detach()

    async def execute(
        self,
        prompt: str,
        context: Any,
        providers: dict[str, Any],
        tools: dict[str, Any],
        hooks: Any,
        **kwargs: Any,
    ) -> str:
        """Run one generation for ``prompt``, then one per round of follow-ups; return the
        last reply's text (Amplifier's contract)."""
        coordinator = kwargs.get("coordinator")
        provider_name, provider = self._select_provider(providers)
        events = self._events
        turn = _Turns()
        status = "success"
        first = True
        entered = False  # a second, concurrent execute is refused on entry and hands on no event
        raised = True  # until the loop ends by itself (a return or the last turn)
        try:
            while True:
                running = self.runtime.generation
                if running is not None:
                    raise GenerationStateError(
                        f"generation {running['id']!r} is still running: one execute at a time"
                    )
                async with self._open_generation() as gen:
                    entered = True
                    if events:  # what happened since the last execute, then generation.started
                        await self._flush(hooks)
                    if first:
                        submitted = await _decided(
                            hooks,
                            coordinator,
                            PROMPT_SUBMIT,
                            {"prompt": prompt, "generation_id": gen.id},
                            "orchestrator",
                        )
                        if getattr(submitted, "action", None) == "deny":
                            gen.stop()  # anything already pending is held, never written
                            raised = False
                            return f"Operation denied: {submitted.reason}"
                        await context.add_message({"role": "user", "content": prompt})
                    denied = await self._turn(
                        gen, provider_name, provider, context, tools, hooks, coordinator, turn
                    )
                    if denied is not None:
                        raised = False
                        return denied
                status = _STATUS[gen.end_reason]
                # A follow-up (C29) is the next turn of this run: a generation of its own,
                # no new prompt, its first boundary writes the follow-ups.
                if status != "success" or not self.runtime.pending_follow_ups:
                    break
                first = False
            raised = False
        finally:
            if entered and events:  # the terminal event and what it held
                if not raised:
                    await self._flush(hooks)
                else:
                    # cancelled (or failed): the hooks still get them, for a bounded time (an
                    # event whose emit is cut short stays buffered for the next execute)
                    with anyio.move_on_after(FLUSH_GRACE, shield=True):
                        await self._flush(hooks)
        text = turn.text
        await hooks.emit(PROMPT_COMPLETE, {"response_preview": text[:200], "length": len(text)})
        await hooks.emit(
            ORCHESTRATOR_COMPLETE,
            {"orchestrator": MODULE_NAME, "turn_count": turn.calls, "status": status},
        )
        return text

    async def _turn(
        self,
        gen: Generation,
        provider_name: str,
        provider: Any,
        context: Any,
        tools: Mapping[str, Any],
        hooks: Any,
        coordinator: Any,
        turn: _Turns,
    ) -> str | None:
        """One generation's rounds: boundary, provider call, tools; until the answer, a stop or the
        budget. Returns ``execute``'s answer when a ``provider:request`` hook denied the call."""
        budget = self.max_iterations
        events = self._events
        iterations = 0

        async def write(steer: Input, metadata: Mapping[str, Any]) -> None:
            await context.add_message({"role": "user", "content": steer.text, "metadata": dict(metadata)})

        while True:
            if coordinator is not None and coordinator.cancellation.is_cancelled:
                gen.stop()  # Amplifier's cooperative cancel: pending steers are held
            elif iterations == budget:
                gen.stop(StopReason.BUDGET_EXHAUSTED)
            if not gen.accepting:  # stopped here, by a host, or the runtime was closed
                return None
            if gen.pending:  # nothing pending: the boundary would write nothing
                try:
                    await gen.boundary(write)
                except RuntimeClosedError:
                    if gen.accepting:
                        raise
                    return None  # closed while it wrote: as a close found above, no request
            if events:
                await self._flush(hooks)  # before the request: what the host caused meanwhile
            asked = await self._ask(
                gen, provider_name, provider, context, tools, hooks, coordinator, turn.calls
            )
            if asked is None:  # stopped while the request was prepared: it is not sent
                return None
            if isinstance(asked, str):
                gen.stop()  # denied: anything pending is held, never written
                return asked
            reply, calls = asked
            iterations += 1
            turn.calls += 1
            turn.text = reply
            if calls:
                await self._run_tools(gen, calls, reply, context, tools, hooks, coordinator)
                continue
            await context.add_message({"role": "assistant", "content": reply})
            if coordinator is not None and coordinator.cancellation.is_cancelled:
                gen.stop()  # cancelled during the last call: no continuation, no follow-up turn
                return None
            # Budget before continuation: with no call left, pending steers are held
            # budget-exhausted and no generation.continued is published (C17).
            if not gen.continue_after_checkpoint(may_call=iterations != budget):
                return None
            if events:
                await self._flush(hooks)

    async def _flush(self, hooks: Any) -> None:
        """Hand the buffered runtime events to ``hooks.emit``, in order.

        A registry that lists its handlers (amplifier-core's ``HookRegistry.list_handlers``)
        is not handed an event no handler is registered for: its ``emit`` would do nothing
        with it but a JSON round trip through the kernel (0.1-0.3 ms each, measured).
        """
        list_handlers = getattr(hooks, "list_handlers", None)
        if list_handlers is None:
            # ``self._bridge.flush(hooks.emit)``, written out: straight to the hooks' own emit,
            # in publication order, each its own copy (twice per execute: started and terminal)
            events, emit = self._events, hooks.emit
            while events:
                event = events.popleft()
                try:
                    await emit(event["type"], dict(event))
                except BaseException:
                    events.appendleft(event)  # not handed on: the next flush hands it again
                    raise
            return

        async def emit_if_handled(name: str, data: dict[str, Any]) -> None:
            handlers = list_handlers(name)
            if not isinstance(handlers, Mapping) or any(handlers.values()):  # unsure: emit
                await hooks.emit(name, data)

        await self._bridge.flush(emit_if_handled)

    def _open_generation(self) -> Any:
        return self.runtime.open_generation()

    def _select_provider(self, providers: Mapping[str, Any]) -> tuple[str, Any]:
        """``default_provider`` if set, else the one of lowest ``priority`` (default 100), as Amplifier's."""
        if not providers:
            raise RuntimeError(f"{MODULE_NAME}: no provider is mounted")
        name = self.default_provider
        if name is None:
            name = min(providers, key=lambda n: _priority(providers[n]))  # min is stable: first of equals
        if name not in providers:
            raise RuntimeError(f"{MODULE_NAME}: provider {name!r} is not mounted (have {sorted(providers)})")
        return name, providers[name]

    async def _ask(
        self,
        gen: Generation,
        name: str,
        provider: Any,
        context: Any,
        tools: Mapping[str, Any],
        hooks: Any,
        coordinator: Any,
        iteration: int,
    ) -> tuple[str, list[Any]] | str | None:
        """One provider call on the context as it is now (steers included); returns text and tool
        calls; ``"Operation denied: ..."`` when a ``provider:request`` hook denied it; ``None``
        when the generation was stopped before the request left (it is not sent)."""
        asked = await _decided(
            hooks, coordinator, PROVIDER_REQUEST, {"provider": name, "iteration": iteration}, "orchestrator"
        )
        if getattr(asked, "action", None) == "deny":
            return f"Operation denied: {asked.reason}"
        messages = await context.get_messages_for_request(provider=provider)
        specs = [
            ToolSpec(name=t.name, description=t.description, parameters=t.input_schema)
            for t in tools.values()
        ]
        request = ChatRequest(messages=[Message(**m) for m in messages], tools=specs or None)
        if not gen.accepting:  # a host's stop (or the runtime's close) while the hooks ran: no request
            return None
        try:
            response = await provider.complete(request)
        except Exception as error:
            await hooks.emit(PROVIDER_ERROR, {"provider": name, "error": _error(error)})
            raise
        calls = list(provider.parse_tool_calls(response) if hasattr(provider, "parse_tool_calls") else [])
        if not calls:
            calls = list(response.tool_calls or [])
        await hooks.emit(
            PROVIDER_RESPONSE, {"provider": name, "usage": response.usage, "tool_calls": bool(calls)}
        )
        reply = "".join(getattr(block, "text", "") for block in response.content or [])
        return reply, calls

    async def _run_tools(
        self,
        gen: Generation,
        calls: list[Any],
        reply: str,
        context: Any,
        tools: Mapping[str, Any],
        hooks: Any,
        coordinator: Any,
    ) -> None:
        """Run each tool call to completion, in order: a running tool is never interrupted (C14).

        As in Amplifier's basic loop, a tool that raises becomes an error result for the
        model (``tool:error``), not a failure of the generation. No tool starts once the
        generation was stopped (a host's stop, Amplifier's cancellation, the runtime's
        close): the calls not started get ``STOPPED_TOOL_RESULT``. With
        ``skip_tools_on_steer``, once a steer is pending after a tool returned, the rest of
        the batch gets ``SKIPPED_TOOL_RESULT`` and the runtime publishes ``tools.skipped``
        (C31). A ``tool:pre`` hook that denies the call (or an approval refused, through
        ``coordinator.process_hook_result`` as in Amplifier's basic loop) answers it
        ``"Denied by hook: <reason>"`` without running it. If the batch ends abnormally (the
        task cancelled, a hook that raised), the call in progress gets
        ``TOOL_CANCELLED_RESULT`` or ``TOOL_FAILED_RESULT`` and each call after it
        ``STOPPED_TOOL_RESULT`` before the exception goes on. Either way every tool call has a
        result in the context.
        """
        await context.add_message(
            {
                "role": "assistant",
                "content": reply,
                "tool_calls": [{"id": c.id, "tool": c.name, "arguments": c.arguments} for c in calls],
            }
        )
        last = len(calls) - 1
        # [calls whose result write completed, a result write begun and not completed (0/1)]
        progress = [0, 0]
        try:
            for index, call in enumerate(calls):
                if coordinator is not None and coordinator.cancellation.is_cancelled:
                    gen.stop()  # no further tool starts: Amplifier's graceful cancel lets running ones end
                if not gen.accepting:
                    await self._answer(context, calls[index:], STOPPED_TOOL_RESULT, progress)
                    return
                tool = tools.get(call.name)
                if coordinator is not None:
                    coordinator.cancellation.register_tool_start(call.id, call.name)
                try:
                    output = await self._run_tool(call, tool, hooks, coordinator)
                finally:
                    if coordinator is not None:
                        coordinator.cancellation.register_tool_complete(call.id)
                await self._answer(context, [call], output, progress)
                if self.skip_tools_on_steer and index < last and gen.accepting and gen.steers_pending:
                    rest = calls[index + 1 :]
                    gen.skip_tools([c.id for c in rest])  # tools.skipped, naming the steers pending
                    await self._answer(context, rest, SKIPPED_TOOL_RESULT, progress)
                    return
        except BaseException as error:
            # a result write cut short may have taken effect: never written twice, so the
            # calls after it get theirs, that one is left as the interrupted write left it
            start = progress[0] + progress[1]
            if start < len(calls):
                cancelled = isinstance(error, anyio.get_cancelled_exc_class())
                await self._answer_unfinished(context, calls[start:], cancelled and not progress[1])
            raise

    async def _answer_unfinished(self, context: Any, calls: list[Any], cancelled: bool) -> None:
        """The batch ended abnormally: the call in progress and the ones after it get a result
        (shielded from the cancellation for up to ``FLUSH_GRACE`` in all, each write on its own),
        so the next ``execute`` sends a conversation every provider accepts."""
        first = TOOL_CANCELLED_RESULT if cancelled else TOOL_FAILED_RESULT
        with anyio.move_on_after(FLUSH_GRACE, shield=True):
            for position, call in enumerate(calls):
                message = {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "content": first if position == 0 else STOPPED_TOOL_RESULT,
                }
                with contextlib.suppress(Exception):  # the exception that ended the batch goes on
                    await context.add_message(message)

    @staticmethod
    async def _answer(context: Any, calls: list[Any], result: str, progress: list[int]) -> None:
        """Write ``result`` as the result of each of ``calls``, counting them in ``progress``."""
        for call in calls:
            progress[1] = 1
            await context.add_message({"role": "tool", "tool_call_id": call.id, "content": result})
            progress[0] += 1
            progress[1] = 0

    async def _run_tool(self, call: Any, tool: Any, hooks: Any, coordinator: Any) -> str:
        pre = await _decided(
            hooks, coordinator, TOOL_PRE, {"tool_name": call.name, "tool_input": call.arguments}, call.name
        )
        if getattr(pre, "action", None) == "deny":
            return f"Denied by hook: {pre.reason}"
        if tool is None:
            output = f"Error: Tool '{call.name}' not found"
            await hooks.emit(TOOL_ERROR, {"tool_name": call.name, "error": _error(LookupError(output))})
            return output
        try:
            result = await tool.execute(call.arguments)
        except Exception as error:
            await hooks.emit(TOOL_ERROR, {"tool_name": call.name, "error": _error(error)})
            return f"Error executing tool: {error}"
        data = result.to_dict() if hasattr(result, "to_dict") else result
        await hooks.emit(TOOL_POST, {"tool_name": call.name, "tool_input": call.arguments, "result": data})
        serialized = getattr(result, "get_serialized_output", None)
        return str(serialized() if serialized is not None else result.output)


async def _decided(hooks: Any, coordinator: Any, event: str, data: dict[str, Any], source: str) -> Any:
    """Emit ``event`` and return the hooks' result, through ``coordinator.process_hook_result``
    when there is a coordinator, as Amplifier's basic loop does (it asks the approval system
    for an ``ask_user`` result, so a refused approval comes back as ``deny``)."""
    result = await hooks.emit(event, data)
    process = getattr(coordinator, "process_hook_result", None)
    if process is not None and getattr(result, "action", None) is not None:
        result = await process(result, event, source)
    return result


def _priority(provider: Any) -> Any:
    """Amplifier's provider priority: the ``priority`` attribute, else ``config["priority"]``, else 100."""
    if hasattr(provider, "priority"):
        return provider.priority
    config = getattr(provider, "config", None)
    return config.get("priority", 100) if isinstance(config, dict) else 100


def _error(error: BaseException) -> dict[str, str]:
    return {"type": type(error).__name__, "msg": str(error)}
