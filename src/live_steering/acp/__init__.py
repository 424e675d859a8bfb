"""An ACP agent with ``_session/steering``, on the Agent Client Protocol Python SDK.

Needs the ``acp`` extra (``pip install 'live-steering[acp]'``), which brings the
maintained SDK (``agent-client-protocol``, imported as ``acp``). The SDK does the
JSON-RPC; this module only maps ACP requests onto ``SteeringSession`` (one
``LiveRuntime`` per ACP session, one generation per turn) and session events onto
``session/update`` notifications. The SDK is asyncio-only, so ``serve_stdio``
runs on asyncio; the session logic underneath is plain anyio.

>>> anyio.run(serve_stdio, AgentConfig(steps=6, step_delay=0.5), backend="asyncio")  # doctest: +SKIP

``live-steering acp`` runs exactly that. See docs/acp.md for the wire mapping.
"""

from __future__ import annotations

import contextvars
import datetime
from typing import Any, Final, cast

import anyio
import anyio.abc
import attrs

from .._extras import install_hint

try:
    import acp
except ImportError as error:  # pragma: no cover - exercised by installs without the extra
    raise ImportError(install_hint("live_steering.acp", "acp", "agent-client-protocol")) from error
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    AgentCapabilities,
    ContentToolCallContent,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    SessionInfoUpdate,
    TextContentBlock,
)

from ..loop import ToolCall
from ._session import (
    ClientPace,
    ErrorKind,
    Pace,
    SessionSink,
    SteeringSession,
    SteerRejected,
    TurnBusyError,
    parse_steer_request,
    prompt_text,
    sleep_pace,
)

__all__ = ["STEER_METHOD", "STEP_METHOD", "AgentConfig", "LiveSteeringAgent", "serve_stdio"]

#: The extension method, as sent on the wire (the SDK strips the leading ``_``).
STEER_METHOD: Final = "_session/steering"

#: The notification that releases model requests of a ``client_paced`` agent.
STEP_METHOD: Final = "_liveSteering/step"

#: The JSON-RPC id of the request whose handler task is running (see ``_remember_request_id``).
_request_id: contextvars.ContextVar[object] = contextvars.ContextVar(
    "live_steering_acp_request_id", default=None
)


def _remember_request_id(event: StreamEvent) -> None:
    """Stream observer: make each incoming request's JSON-RPC id visible to its handler.

    The SDK calls observers synchronously in its receive loop right before it
    creates the request's handler task, and an asyncio task copies the context
    it is created in; so the handler reads its own request's id from the
    context variable. Without it (an SDK that no longer does this) a steer
    without ``_meta.steering.id`` simply gets a fresh input id.
    """
    message = event.message
    if event.direction is StreamDirection.INCOMING and "method" in message and "id" in message:
        _request_id.set(message["id"])


@attrs.frozen
class AgentConfig:
    """How the scripted agent paces its turns."""

    steps: int = 6
    """Model requests per turn; all but the last ask for one tool call."""
    step_delay: float = 0.5
    """Seconds the scripted model 'thinks' before each answer (6 x 0.5 s: a 3-second turn)."""
    client_paced: bool = False
    """Each model request waits for the client's ``_liveSteering/step`` notification instead."""


class _Sink(SessionSink):
    """Sends one session's updates to the client as ``session/update`` notifications."""

    def __init__(self, conn: acp.Client, session_id: str) -> None:
        self._conn = conn
        self._session_id = session_id

    async def request_started(self, request: int) -> None:
        update = acp.update_agent_thought_text(f"Working on model request {request}")
        update.field_meta = {"liveSteering": {"request": request, "state": "in-flight"}}
        await self._conn.session_update(self._session_id, update)

    async def agent_message(self, text: str, meta: dict[str, Any]) -> None:
        update = acp.update_agent_message_text(text)
        update.field_meta = meta
        await self._conn.session_update(self._session_id, update)

    async def tool_started(self, call: ToolCall) -> None:
        update = acp.start_tool_call(
            call.id, f"{call.name} (step {call.arguments.get('step')})", kind="other",
            status="in_progress", raw_input=dict(call.arguments),
        )  # fmt: skip
        await self._conn.session_update(self._session_id, update)

    async def tool_finished(self, call: ToolCall, result: str) -> None:
        content = [ContentToolCallContent(type="content", content=TextContentBlock(type="text", text=result))]
        update = acp.update_tool_call(call.id, status="completed", content=content, raw_output=result)
        await self._conn.session_update(self._session_id, update)

    async def turn_changed(self, turn: dict[str, Any]) -> None:
        now = datetime.datetime.now(datetime.UTC).isoformat()
        update = SessionInfoUpdate(
            session_update="session_info_update", updated_at=now, field_meta={"liveSteering": {"turn": turn}}
        )
        await self._conn.session_update(self._session_id, update)


def _request_error(error: SteerRejected) -> acp.RequestError:
    if error.kind is ErrorKind.INVALID_REQUEST:
        return acp.RequestError.invalid_request(error.data)
    return acp.RequestError.invalid_params(error.data)


class LiveSteeringAgent:
    """The ACP agent: sessions, prompts, cancel and the ``_session/steering`` extension.

    Turns started by a steer run in ``task_group``; close the agent with ``aclose()``.
    """

    def __init__(self, config: AgentConfig, task_group: anyio.abc.TaskGroup) -> None:
        self._config = config
        self._tg = task_group
        self._conn: acp.Client | None = None
        self._sessions: dict[str, SteeringSession] = {}
        self._paces: dict[str, ClientPace] = {}

    def on_connect(self, conn: acp.Client) -> None:
        self._conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        from .. import __version__

        return InitializeResponse(
            protocol_version=min(protocol_version, acp.PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(prompt_capabilities=PromptCapabilities(image=False)),
            agent_info=Implementation(
                name="live-steering", title="live_steering scripted agent", version=__version__
            ),
            field_meta={"steering": {"supported": True}},
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        if self._conn is None:
            raise acp.RequestError.internal_error({"details": "not connected"})
        session_id = f"sess-{len(self._sessions) + 1}"
        pace: Pace = sleep_pace(self._config.step_delay)
        if self._config.client_paced:
            pace = self._paces[session_id] = ClientPace()
        self._sessions[session_id] = SteeringSession(
            session_id, _Sink(self._conn, session_id), self._tg, steps=self._config.steps, pace=pace
        )
        return NewSessionResponse(session_id=session_id)

    def _session(self, session_id: object) -> SteeringSession:
        session = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None:
            raise acp.RequestError.invalid_params({"details": f"unknown session {session_id!r}"})
        return session

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        session = self._session(session_id)
        blocks = [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in prompt]
        try:
            text = prompt_text(blocks)
            result = await session.prompt(text)
        except SteerRejected as error:
            raise _request_error(error) from None
        except TurnBusyError as error:
            raise acp.RequestError.invalid_request({"details": str(error)}) from None
        return PromptResponse(
            stop_reason=result.stop_reason,  # type: ignore[arg-type]  # one of the StopReason literals
            field_meta={
                "liveSteering": {"turnId": result.turn_id, "appliedInputIds": result.loop.applied_input_ids}
            },
        )

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.cancel()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if f"_{method}" != STEER_METHOD:
            raise acp.RequestError.method_not_found(f"_{method}")
        try:
            request = parse_steer_request(params)
            session = self._session(request.session_id)
            result = await session.steer(request, request_id=_request_id.get())
        except SteerRejected as error:
            raise _request_error(error) from None
        return result.to_wire()

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        """``_liveSteering/step {sessionId, count?}``: let ``count`` (default 1) more requests answer."""
        if f"_{method}" != STEP_METHOD:
            return
        pace = self._paces.get(params.get("sessionId"))  # type: ignore[arg-type]
        count = params.get("count", 1)
        if pace is not None and type(count) is int and count > 0:
            pace.release(count)

    async def aclose(self) -> None:
        for session in self._sessions.values():
            await session.aclose()


async def serve_stdio(config: AgentConfig | None = None) -> None:
    """Serve one ACP client on this process's stdin/stdout until it disconnects (asyncio only)."""
    config = config or AgentConfig()
    async with anyio.create_task_group() as tg:
        agent = LiveSteeringAgent(config, tg)
        try:
            # The SDK's Agent protocol lists every ACP method; the ones this agent lacks
            # are answered ``methodNotFound`` by the SDK's router.
            await acp.run_agent(cast("acp.Agent", agent), observers=[_remember_request_id])
        finally:
            tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await agent.aclose()
