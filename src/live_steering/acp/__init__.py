"""``_session/steering`` for your own ACP agent, on the Agent Client Protocol Python SDK.

Needs the ``acp`` extra (``pip install 'live-steering[acp]'``), which brings the
maintained SDK (``agent-client-protocol``, imported as ``acp``). You write what a
turn does; ``SteeringAgent`` owns the rest of the protocol: ``initialize``'s
``_meta.steering``, ``session/new``, the ``session/prompt`` lifecycle,
``session/cancel`` and every outcome and error of ``_session/steering``::

    async def run_turn(turn: Turn) -> None:
        messages.append({"role": "user", "content": turn.prompt})
        while True:
            await turn.boundary(add_steer)        # steers sent meanwhile land here
            reply = await my_model(messages)
            await turn.say(reply)
            if not turn.continue_after_checkpoint():
                break

    anyio.run(serve_stdio, SteeringAgent(run_turn), backend="asyncio")

The SDK is asyncio-only, so ``serve_stdio`` runs on asyncio; the session logic
underneath (``SteeringSession``) is plain anyio. See docs/acp.md.
"""

from __future__ import annotations

import datetime
import logging
import signal
import uuid
from collections.abc import Mapping
from typing import Any, Final, cast

import anyio
import anyio.abc

from .._extras import install_hint

try:
    import acp
except ImportError as error:  # pragma: no cover - exercised by installs without the extra
    raise ImportError(install_hint("live_steering.acp", "acp", "agent-client-protocol")) from error
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    ClientCapabilities,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PromptCapabilities,
    PromptResponse,
    SessionInfoUpdate,
    ToolCallUpdate,
)

from ._session import DEFAULT_MAX_REQUESTS, SteeringSession, _TurnFailed
from ._transport import REQUEST_ID, GuardedTransport, open_stdio
from ._turn import RunTurn, Turn, TurnError, TurnResult
from ._wire import (
    FOLLOW_UP_KIND,
    STEER_KIND,
    ErrorKind,
    SteerOutcome,
    SteerRejected,
    SteerResult,
    TurnBusyError,
    parse_steer_request,
    prompt_text,
)

__all__ = [
    "DISPOSITION_META",
    "STEER_METHOD",
    "RunTurn",
    "SteerOutcome",
    "SteerResult",
    "SteeringAgent",
    "SteeringSession",
    "Turn",
    "TurnError",
    "TurnResult",
    "serve_stdio",
]

_log = logging.getLogger(__name__)

#: The extension method, as it is on the wire. The SDK strips the leading ``_`` before
#: ``ext_method`` sees it, and its client's ``ext_method(name)`` adds one: a Python client
#: calls ``conn.ext_method("session/steering", ...)`` (``"_session/steering"`` would
#: go out as ``__session/steering``).
STEER_METHOD: Final = "_session/steering"

#: Where a steer's final disposition is, in the ``_meta`` of a ``session_info_update``.
DISPOSITION_META: Final = "liveSteering"

#: The kinds ``initialize`` advertises in ``_meta.liveSteering.kinds``.
_KINDS: Final = (STEER_KIND, FOLLOW_UP_KIND)

#: Seconds ``serve_stdio`` gives running turns to answer after SIGTERM/SIGINT.
SHUTDOWN_GRACE: Final = 5.0


def _reads_files(capabilities: object) -> bool:
    """True when the client's ``clientCapabilities`` advertised ``fs.readTextFile``.

    The SDK salvages a malformed ``clientCapabilities`` (or ``fs``) into a plain dict of
    defaults instead of refusing ``initialize``, so both shapes are read here.
    """
    fs = capabilities.get("fs") if isinstance(capabilities, Mapping) else getattr(capabilities, "fs", None)
    read = fs.get("readTextFile") if isinstance(fs, Mapping) else getattr(fs, "read_text_file", None)
    return read is True


class _Channel:
    """One session's ``ClientChannel``: sends over the SDK's agent-side connection."""

    def __init__(self, conn: acp.Client, session_id: str, capabilities: ClientCapabilities | None) -> None:
        self._conn = conn
        self._session_id = session_id
        self._can_read = _reads_files(capabilities)

    @property
    def can_read_files(self) -> bool:
        return self._can_read

    async def _info(self, meta: dict[str, Any]) -> None:
        now = datetime.datetime.now(datetime.UTC).isoformat()
        update = SessionInfoUpdate(
            session_update="session_info_update", updated_at=now, field_meta={DISPOSITION_META: meta}
        )
        await self._conn.session_update(self._session_id, update)

    async def turn_changed(self, turn: dict[str, Any]) -> None:
        await self._info({"turn": turn})

    async def steer_settled(self, settled: dict[str, Any]) -> None:
        await self._info({"steer": settled})

    async def message(self, text: str, meta: dict[str, Any] | None, message_id: str | None = None) -> None:
        update = acp.update_agent_message_text(text)
        update.field_meta, update.message_id = meta, message_id
        await self._conn.session_update(self._session_id, update)

    async def thought(self, text: str, meta: dict[str, Any] | None, message_id: str | None = None) -> None:
        update = acp.update_agent_thought_text(text)
        update.field_meta, update.message_id = meta, message_id
        await self._conn.session_update(self._session_id, update)

    async def update(self, update: Any) -> None:
        await self._conn.session_update(self._session_id, update)

    async def read_text_file(self, path: str, line: int | None, limit: int | None) -> str:
        response = await self._conn.read_text_file(
            path=path, session_id=self._session_id, line=line, limit=limit
        )
        return response.content

    async def request_permission(self, tool_call: Any, options: Any) -> str | None:
        call = (
            tool_call if isinstance(tool_call, ToolCallUpdate) else ToolCallUpdate.model_validate(tool_call)
        )
        choices = [
            o if isinstance(o, PermissionOption) else PermissionOption.model_validate(o) for o in options
        ]
        response = await self._conn.request_permission(
            session_id=self._session_id, tool_call=call, options=choices
        )
        outcome = response.outcome
        if isinstance(outcome, AllowedOutcome):
            return outcome.option_id
        return None  # cancelled: the prompt turn was cancelled while the client asked


def _request_error(error: SteerRejected) -> acp.RequestError:
    if error.kind is ErrorKind.INVALID_REQUEST:
        return acp.RequestError.invalid_request(error.data)
    return acp.RequestError.invalid_params(error.data)


class SteeringAgent:
    """An ACP agent whose turns are ``run_turn(turn)`` and that answers ``_session/steering``.

    ``run_turn`` is called once per turn (a ``session/prompt``, an idle steer
    that starts one, or the follow-ups a turn finished with: ``turn.origin ==
    "follow_up"``, an empty ``turn.prompt``) with a ``Turn`` whose generation is open. ``max_requests``:
    boundaries per turn before it ends with ``max_turn_requests``.
    ``max_text_chars``: the longest steer admitted (the runtime's C7 default,
    16,000). ``image``/``audio``: what ``promptCapabilities`` advertises (your
    ``run_turn`` then reads those blocks from ``turn.blocks``).

    Serve it with ``serve_stdio(agent)``, or with ``acp.run_agent`` yourself (see
    ``bind``). Subclass it to add ACP methods; ``session(id)`` gives a session's
    ``SteeringSession``.
    """

    def __init__(
        self,
        run_turn: RunTurn,
        *,
        name: str = "live-steering-agent",
        title: str | None = None,
        version: str | None = None,
        max_requests: int = DEFAULT_MAX_REQUESTS,
        max_text_chars: int | None = None,
        image: bool = False,
        audio: bool = False,
    ) -> None:
        if type(max_requests) is not int or max_requests < 1:
            raise ValueError(f"max_requests must be a positive int, got {max_requests!r}")
        self._run_turn = run_turn
        self._info = Implementation(name=name, title=title, version=version or _version())
        self._max_requests = max_requests
        self._max_text_chars = max_text_chars
        self._image = image
        self._audio = audio
        self._conn: acp.Client | None = None
        self._client_capabilities: ClientCapabilities | None = None
        self._sessions: dict[str, SteeringSession] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def on_connect(self, conn: acp.Client) -> None:
        self._conn = conn

    def bind(self, task_group: anyio.abc.TaskGroup) -> None:
        """Run turns started by steers in ``task_group``; ``serve_stdio`` does this for you.

        Serving the agent with ``acp.run_agent`` yourself::

            async with anyio.create_task_group() as tg:
                agent.bind(tg)
                try:
                    await acp.run_agent(agent)
                finally:
                    tg.cancel_scope.cancel()
                    await agent.aclose()
        """
        self._tg = task_group

    def _task_group(self) -> anyio.abc.TaskGroup:
        if self._tg is None:
            raise RuntimeError("SteeringAgent.bind(task_group) first, or serve it with serve_stdio(agent)")
        return self._tg

    def session(self, session_id: object) -> SteeringSession | None:
        """The session with this id, or ``None``."""
        return self._sessions.get(session_id) if isinstance(session_id, str) else None

    def cancel_all(self) -> None:
        """Cancel every running turn (as ``session/cancel`` would): their pending steers are held."""
        for session in self._sessions.values():
            session.cancel()

    async def wait_idle(self) -> None:
        """Wait until no session runs a turn."""
        for session in list(self._sessions.values()):
            await session.wait_idle()

    async def aclose(self) -> None:
        """Cancel running turns and close every session's runtime."""
        for session in self._sessions.values():
            await session.aclose()

    # -- ACP methods -------------------------------------------------------------------------

    async def initialize(
        self, protocol_version: int, client_capabilities: ClientCapabilities | None = None, **kwargs: Any
    ) -> InitializeResponse:
        self._client_capabilities = client_capabilities
        return InitializeResponse(
            protocol_version=min(protocol_version, acp.PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                prompt_capabilities=PromptCapabilities(image=self._image, audio=self._audio)
            ),
            agent_info=self._info,
            # The protocol's steering flag, and this library's own: the kinds a
            # _session/steering request may carry in _meta.liveSteering.kind.
            field_meta={"steering": {"supported": True}, DISPOSITION_META: {"kinds": list(_KINDS)}},
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        if self._conn is None:
            raise acp.RequestError.internal_error({"details": "not connected"})
        # Unique per process, not a counter: steer input ids are digests of the session id, so
        # a host keeping receipts across agent restarts never sees two steers share one.
        session_id = f"sess-{uuid.uuid4()}"
        self._sessions[session_id] = SteeringSession(
            session_id,
            _Channel(self._conn, session_id, self._client_capabilities),
            self._task_group(),
            self._run_turn,
            cwd=cwd,
            max_requests=self._max_requests,
            max_text_chars=self._max_text_chars,
        )
        return NewSessionResponse(session_id=session_id)

    def _session(self, session_id: object) -> SteeringSession:
        session = self.session(session_id)
        if session is None:
            raise acp.RequestError.invalid_params({"details": f"unknown session {session_id!r}"})
        return session

    def _text(self, blocks: list[Mapping[str, Any]]) -> str:
        return prompt_text(blocks, image_input=self._image, audio_input=self._audio)

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        session = self._session(session_id)
        blocks = [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in prompt]
        try:
            result = await session.run_prompt(self._text(blocks), tuple(blocks))
        except SteerRejected as error:
            raise _request_error(error) from None
        except TurnBusyError as error:
            raise acp.RequestError.invalid_request({"details": str(error)}) from None
        except _TurnFailed as failure:
            raise acp.RequestError.internal_error(failure.data) from None
        return PromptResponse(
            stop_reason=result.stop_reason,  # type: ignore[arg-type]  # one of the StopReason literals
            field_meta={DISPOSITION_META: result.to_meta()},
        )

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.session(session_id)
        if session is not None:
            session.cancel()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if f"_{method}" != STEER_METHOD:
            if method == STEER_METHOD:  # "__session/steering" on the wire: the SDK added a second "_"
                hint = '"_session/steering"; from the SDK\'s client: ext_method("session/steering", ...)'
                raise acp.RequestError(-32601, "Method not found", {"method": f"_{method}", "hint": hint})
            raise acp.RequestError.method_not_found(f"_{method}")
        try:
            request = parse_steer_request(params)
            session = self._session(request.session_id)
            result = await session.steer(request, request_id=REQUEST_ID.get())
        except SteerRejected as error:
            raise _request_error(error) from None
        return result.to_wire()

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        """A ``_session/steering`` notification is a steer with no answer: decided as a request
        is, under a fresh random id unless ``_meta.steering.id`` names one (a notification has
        no request id to derive it from). Its outcome is only in the runtime's events; a
        refusal is logged. Other extension notifications are ignored, as the protocol asks."""
        if f"_{method}" != STEER_METHOD:
            return
        try:
            request = parse_steer_request(params)
            session = self._session(request.session_id)
            result = await session.steer(request, request_id=None)
        except (SteerRejected, acp.RequestError) as error:  # an unknown session is a RequestError
            _log.warning("a _session/steering notification was refused (no answer can be sent): %s", error)
            return
        wire = result.to_wire()
        if wire.get("outcome") in ("injected", "startedNewTurn"):
            _log.debug("a _session/steering notification: %s", wire)
        else:  # failed, promptRequired: nothing of it will run, and the client cannot be told
            _log.warning("a _session/steering notification was not taken (no answer can be sent): %s", wire)


def _version() -> str:
    from .. import __version__

    return __version__


def _only_connection_lost(exc: BaseException) -> bool:
    """True for a lost connection (``ConnectionError``, a broken pipe), also grouped."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split((ConnectionError, BrokenPipeError))[1] is None
    return isinstance(exc, (ConnectionError, BrokenPipeError))


async def serve_stdio(agent: SteeringAgent) -> None:
    """Serve one ACP client on this process's stdin/stdout until it disconnects (asyncio only).

    A line that is not a JSON-RPC message is answered with a JSON-RPC error and
    skipped, never fatal. On SIGTERM or SIGINT every running turn is cancelled
    (its pending steers held and reported), the answers are written, and the
    function returns.
    """
    from acp.agent.connection import AgentSideConnection

    reader, writer = await open_stdio()
    transport = GuardedTransport(reader, writer)
    async with anyio.create_task_group() as tg:
        agent.bind(tg)
        conn = AgentSideConnection(cast("acp.Agent", agent), transport, listening=False)

        async def on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    _log.info("signal %s: cancelling running turns", signum)
                    agent.cancel_all()
                    with anyio.move_on_after(SHUTDOWN_GRACE):
                        await agent.wait_idle()
                        await transport.wait_answered()
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(on_signal)
        try:
            # The SDK's Agent protocol lists every ACP method; the ones this agent lacks
            # are answered ``methodNotFound`` by the SDK's router.
            await conn.listen()
        finally:
            tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await agent.aclose()
                try:
                    await conn.close()
                except Exception as exc:
                    # A client that died while the agent waited on it (a file read, a permission)
                    # closed stdout too: the SDK's last write fails, and its close re-raises that.
                    # Nobody is left to tell; any other error is a failure of its own.
                    if not _only_connection_lost(exc):
                        raise
