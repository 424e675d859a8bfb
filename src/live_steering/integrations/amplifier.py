"""An Amplifier orchestrator module with live steering: Amplifier's agent loop on a ``LiveRuntime``.

Needs the ``amplifier`` extra (``pip install 'live-steering[amplifier]'``, amplifier-core 2.x).
Mount it like any orchestrator: by name (``loop-live-steering``, registered in the
``amplifier.modules`` entry-point group, so Amplifier's ``ModuleLoader`` finds it) or by
calling ``mount(coordinator, config)``. Mounting registers the ``live.steering``
capability in the seed's shape, so a host does exactly what the seed shows::

    capability = coordinator.get_capability("live.steering")
    gen_id = orchestrator.runtime.generation["id"]
    receipt = await capability["submit"](Input("steer", "Use the corrected path", id="fix-1"), gen_id)

What it owns: the loop (one generation per ``execute``, a request boundary before every
provider call, tools run to completion, the continuation check after the final answer
is in the context). What it never does: interrupt a running tool, replay a prompt or a
tool call, or touch Amplifier's internals (it only uses the orchestrator, context,
provider, tool and hook interfaces of ``amplifier_core.interfaces``).

Written with absolute imports: amplifier-core's validator and test fixtures load a
module from its file, outside its package.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from live_steering._extras import install_hint
from live_steering._runtime import LiveRuntime
from live_steering._types import Input, StopReason
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

__all__ = ["CAPABILITY", "MODULE_NAME", "LiveSteeringOrchestrator", "mount"]

#: Read by Amplifier's loader: this module mounts at the ``orchestrator`` mount point.
__amplifier_module_type__: Final = "orchestrator"

#: The coordinator capability a host looks up (the seed's name).
CAPABILITY: Final = "live.steering"
#: The name this module is registered under in the ``amplifier.modules`` entry-point group.
MODULE_NAME: Final = "loop-live-steering"
_CONFIG_KEYS: Final = frozenset({"runtime", "max_iterations", "default_provider"})


async def mount(coordinator: Any, config: Mapping[str, Any] | None = None) -> Any:
    """Mount the orchestrator and register the ``live.steering`` capability; return the cleanup.

    ``config`` (all optional): ``runtime``, a ``LiveRuntime`` you own (default: a fresh
    one, closed by the returned cleanup); ``max_iterations``, provider calls per
    ``execute`` (default ``-1``, unlimited, as Amplifier's basic loop); ``default_provider``,
    the name of the provider to use (default: the first one given). A wrong type or an
    unknown key raises before anything is mounted.
    """
    orchestrator = LiveSteeringOrchestrator(dict(config or {}))
    runtime = orchestrator.runtime
    await coordinator.mount("orchestrator", orchestrator)
    coordinator.register_capability(CAPABILITY, runtime.capability)

    async def cleanup() -> None:
        orchestrator.close()
        if orchestrator.owns_runtime:
            await runtime.aclose()
        # The registered dict is a snapshot: register it again so hosts see the current mode.
        coordinator.register_capability(CAPABILITY, runtime.capability)

    return cleanup


class LiveSteeringOrchestrator:
    """Amplifier's agent loop, with a request boundary before every provider call.

    Per ``execute``: one generation (``generation.started``), the prompt as a user
    message, then rounds of boundary, provider call, tools. Pending steers enter the
    context through ``context.add_message({"role": "user", "content": text, "metadata":
    ...})``, the metadata carrying ``input_id`` and ``target_generation_id``. After the
    final answer is in the context (Amplifier's checkpoint), steers that arrived meanwhile
    continue the same generation. Amplifier's lifecycle events go through ``hooks``, and
    the runtime's steering events are re-emitted beside them, in order, at each step.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        unknown = set(config) - _CONFIG_KEYS
        if unknown:
            raise ValueError(f"unknown config keys for {MODULE_NAME}: {sorted(unknown)}")
        runtime = config.get("runtime")
        if runtime is not None and not isinstance(runtime, LiveRuntime):
            raise TypeError("config['runtime'] must be a live_steering.LiveRuntime")
        max_iterations = config.get("max_iterations", -1)
        if type(max_iterations) is not int or (max_iterations < 1 and max_iterations != -1):
            raise ValueError("config['max_iterations'] must be a positive int, or -1 for unlimited")
        default_provider = config.get("default_provider")
        if default_provider is not None and not isinstance(default_provider, str):
            raise TypeError("config['default_provider'] must be a provider name (str)")
        self.owns_runtime: Final = runtime is None
        self.runtime: Final[LiveRuntime] = LiveRuntime() if runtime is None else runtime
        self.max_iterations: Final[int] = max_iterations
        self.default_provider: Final[str | None] = default_provider
        self._bridge = EventBridge(self.runtime)

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
        """Run one generation for ``prompt``; return the final answer's text (Amplifier's contract)."""
        coordinator = kwargs.get("coordinator")
        provider_name, provider = self._select_provider(providers)
        await self._flush(hooks)  # whatever happened between two executes
        iterations = 0
        status = "success"
        text = ""

        async def write_steer(steer: Input, metadata: Mapping[str, Any]) -> None:
            await context.add_message({"role": "user", "content": steer.text, "metadata": dict(metadata)})

        try:
            async with self._open_generation() as gen:
                await self._flush(hooks)
                submitted = await hooks.emit(PROMPT_SUBMIT, {"prompt": prompt, "generation_id": gen.id})
                if getattr(submitted, "action", None) == "deny":
                    return f"Operation denied: {submitted.reason}"
                await context.add_message({"role": "user", "content": prompt})
                while True:
                    if coordinator is not None and coordinator.cancellation.is_cancelled:
                        gen.stop()  # Amplifier's cooperative cancel: pending steers are held
                        status = "cancelled"
                    elif self.max_iterations != -1 and iterations >= self.max_iterations:
                        gen.stop(StopReason.BUDGET_EXHAUSTED)
                        status = "max_iterations"
                    if not gen.accepting:  # stopped here, by a host, or the runtime was closed
                        status = "cancelled" if status == "success" else status
                        break
                    if gen.pending:  # nothing pending: the boundary would write nothing
                        await gen.boundary(write_steer)
                    await self._flush(hooks)  # before the request: what the host caused meanwhile
                    reply, calls = await self._ask(provider_name, provider, context, tools, hooks, iterations)
                    iterations += 1
                    text = reply
                    if calls:
                        await self._run_tools(calls, reply, context, tools, hooks, coordinator)
                        continue
                    await context.add_message({"role": "assistant", "content": reply})
                    if not gen.continue_after_checkpoint():  # False: admission closed, nothing pending
                        break
                    await self._flush(hooks)
        finally:
            await self._flush(hooks)  # the terminal event and what it held
        await hooks.emit(PROMPT_COMPLETE, {"response_preview": text[:200], "length": len(text)})
        await hooks.emit(
            ORCHESTRATOR_COMPLETE,
            {"orchestrator": MODULE_NAME, "turn_count": iterations, "status": status},
        )
        return text

    async def _flush(self, hooks: Any) -> None:
        if self._bridge.buffered:  # most steps have no steering event to hand on
            await self._bridge.flush(hooks.emit)

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
        self, name: str, provider: Any, context: Any, tools: Mapping[str, Any], hooks: Any, iteration: int
    ) -> tuple[str, list[Any]]:
        """One provider call on the context as it is now (steers included); returns text and tool calls."""
        await hooks.emit(PROVIDER_REQUEST, {"provider": name, "iteration": iteration})
        messages = await context.get_messages_for_request(provider=provider)
        specs = [
            ToolSpec(name=t.name, description=t.description, parameters=t.input_schema)
            for t in tools.values()
        ]
        request = ChatRequest(messages=[Message(**m) for m in messages], tools=specs or None)
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
        calls: list[Any],
        reply: str,
        context: Any,
        tools: Mapping[str, Any],
        hooks: Any,
        coordinator: Any,
    ) -> None:
        """Run each tool call to completion, in order: a running tool is never interrupted (C14).

        As in Amplifier's basic loop, a tool that raises becomes an error result for the
        model (``tool:error``), not a failure of the generation.
        """
        await context.add_message(
            {
                "role": "assistant",
                "content": reply,
                "tool_calls": [{"id": c.id, "tool": c.name, "arguments": c.arguments} for c in calls],
            }
        )
        for call in calls:
            tool = tools.get(call.name)
            if coordinator is not None:
                coordinator.cancellation.register_tool_start(call.id, call.name)
            try:
                output = await self._run_tool(call, tool, hooks)
            finally:
                if coordinator is not None:
                    coordinator.cancellation.register_tool_complete(call.id)
            await context.add_message({"role": "tool", "tool_call_id": call.id, "content": output})

    async def _run_tool(self, call: Any, tool: Any, hooks: Any) -> str:
        await hooks.emit(TOOL_PRE, {"tool_name": call.name, "tool_input": call.arguments})
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


def _priority(provider: Any) -> Any:
    """Amplifier's provider priority: the ``priority`` attribute, else ``config["priority"]``, else 100."""
    if hasattr(provider, "priority"):
        return provider.priority
    config = getattr(provider, "config", None)
    return config.get("priority", 100) if isinstance(config, dict) else 100


def _error(error: BaseException) -> dict[str, str]:
    return {"type": type(error).__name__, "msg": str(error)}
