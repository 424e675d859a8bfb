"""Steering Claude Code run in-process through ``claude-agent-sdk``, from the relay's store.

A Python host that drives Claude Code with the Agent SDK registers hook callbacks
instead of hook commands; their return values are the same ``hookSpecificOutput``
replies. ``steering_hooks()`` gives the ``hooks=`` mapping for
``ClaudeAgentOptions``: one ``HookMatcher`` per SDK hook event that accepts
``additionalContext``, each claiming the session's queued instructions from the same
store ``live-steering instruct`` (or ``instruct()``) writes to. The SDK has no
session-end hook event, so the host calls ``end_session(session_id)`` when it is
done with a session (``SessionEnd``: what is still queued is dropped, audited).

The session id the hooks see is the one the host gives ``ClaudeAgentOptions(session_id=...)``
(else the CLI makes one up: read it from the first ``SystemMessage``'s ``data["session_id"]``).
A hook that runs inside a subagent carries its ``agent_id``: it takes only instructions sent
to that subagent (``instruct(..., agent_id=...)``), never the main agent's. At ``Stop`` an
instruction rides ``Stop``'s ``additionalContext``, which keeps the CLI going for one more
model turn; that is also how a follow-up (``instruct(..., kind="follow_up")``) is delivered.

Needs the ``claude-agent-sdk`` extra: ``pip install 'live-steering[claude-agent-sdk]'``.
The callbacks run the store's work in a worker thread (``anyio.to_thread``); the SDK is
asyncio-only, so this adapter is tested on asyncio.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread

from .._extras import install_hint
from . import _vendors
from ._command import deliver_in_process

try:
    from claude_agent_sdk import HookContext, HookInput, HookJSONOutput, HookMatcher
except ImportError as error:  # pragma: no cover - exercised by installs without the extra
    raise ImportError(
        install_hint("live_steering.hooks.claude_sdk", "claude-agent-sdk", "claude-agent-sdk")
    ) from error

__all__ = ["SDK_EVENTS", "end_session", "steering_hooks"]

#: The SDK's hook events (``claude_agent_sdk.types.HookEvent``) whose output accepts
#: ``additionalContext`` and whose context the model reads.
SDK_EVENTS = (
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "SubagentStart",
    "Notification",
    "Stop",
)


def _callback(store_path: str | None, dsn: str | None) -> Any:
    async def steer(input_data: HookInput, tool_use_id: str | None, context: HookContext) -> HookJSONOutput:
        session_id = input_data.get("session_id")
        moment = input_data.get("hook_event_name")
        if not isinstance(session_id, str) or not session_id or not isinstance(moment, str):
            return {}
        agent = input_data.get("agent_id")
        agent_id = agent if isinstance(agent, str) and agent else None
        reply = await anyio.to_thread.run_sync(
            lambda: deliver_in_process(
                "claude-code", session_id, moment, store_path=store_path, dsn=dsn, agent_id=agent_id
            )
        )
        return reply if reply is not None else {}  # type: ignore[return-value]

    return steer


def steering_hooks(
    *, store: str | None = None, dsn: str | None = None, timeout: float | None = None
) -> dict[Any, list[HookMatcher]]:
    """The ``hooks=`` mapping for ``ClaudeAgentOptions``: steering on every SDK event that carries context.

    ``store``: the store path; ``dsn``: a PostgreSQL store instead (default for both:
    ``$LIVE_STEERING_STORE_DSN``, else ``$LIVE_STEERING_STORE`` or the XDG default).
    Merge it with hooks of your own by extending each event's list.

    >>> from claude_agent_sdk import ClaudeAgentOptions                          # doctest: +SKIP
    >>> options = ClaudeAgentOptions(hooks=steering_hooks())                     # doctest: +SKIP
    """
    assert set(SDK_EVENTS) <= _vendors.FACTS["claude-code"].context_moments
    steer = _callback(store, dsn)
    return {event: [HookMatcher(matcher=None, hooks=[steer], timeout=timeout)] for event in SDK_EVENTS}


async def end_session(session_id: str, *, store: str | None = None, dsn: str | None = None) -> None:
    """The host is done with ``session_id``: drop its queued instructions as ``SessionEnd`` would."""
    await anyio.to_thread.run_sync(
        lambda: deliver_in_process("claude-code", session_id, "SessionEnd", store_path=store, dsn=dsn)
    )
