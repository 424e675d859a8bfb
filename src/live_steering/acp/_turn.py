"""The turn an agent author writes against, and the channel it talks to its client through.

``Turn`` wraps the turn's open ``Generation`` (``boundary``,
``continue_after_checkpoint``) and the session's ``ClientChannel`` (``say``,
``think``, ``update``, ``read_text_file``, ``request_permission``); ``TurnResult``
is how a turn ended. ``SteeringSession`` (``_session.py``) makes turns, runs the
author's ``run_turn`` and ends them. No SDK here: tests drive turns on both anyio
backends with a recording channel.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

import anyio
import attrs

from .._errors import LiveSteeringError
from .._runtime import Generation, Writer
from .._types import Disposition, Receipt, StopReason

if TYPE_CHECKING:
    from ._session import SteeringSession

__all__ = ["ClientChannel", "RunTurn", "Turn", "TurnError", "TurnResult"]


class TurnError(LiveSteeringError, RuntimeError):
    """Raise from ``run_turn`` to end the turn with a clear JSON-RPC error for the client.

    The turn's generation fails: every steer not yet written is held
    (``generation-failed``). ``message`` must be fit for the client to read (it is
    sent as ``error.data.details``); ``data`` adds machine-readable fields.

    >>> raise TurnError("the model endpoint answered HTTP 503", status=503)  # doctest: +SKIP
    """

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.data: dict[str, Any] = {"details": message, **data}


# -- what the session sends to the client -----------------------------------------------------


class ClientChannel(Protocol):
    """How a session talks to its client; ``live_steering.acp`` sends each over the SDK.

    Tests of the session logic pass a recorder instead, on either anyio backend.
    """

    @property
    def can_read_files(self) -> bool:
        """True when the client advertised ``fs.readTextFile`` in ``initialize``."""

    async def turn_changed(self, turn: dict[str, Any]) -> None:
        """A turn started, ended or failed (``{id, origin, state, stopReason?, ...}``)."""

    async def steer_settled(self, settled: dict[str, Any]) -> None:
        """A steer reached its final disposition (``{inputId, turnId, disposition, reason?}``)."""

    async def message(self, text: str, meta: dict[str, Any] | None, message_id: str | None = None) -> None:
        """An ``agent_message_chunk`` of the turn (``messageId`` when ``message_id`` is given)."""

    async def thought(self, text: str, meta: dict[str, Any] | None, message_id: str | None = None) -> None:
        """An ``agent_thought_chunk`` of the turn (``messageId`` when ``message_id`` is given)."""

    async def update(self, update: Any) -> None:
        """Any other ``session/update`` (an SDK schema object: a tool call, a plan...)."""

    async def read_text_file(self, path: str, line: int | None, limit: int | None) -> str:
        """The client's ``fs/read_text_file``: the file's text as the client's editor has it."""

    async def request_permission(self, tool_call: Any, options: Any) -> str | None:
        """The client's ``session/request_permission``: the chosen option id, None if cancelled."""


# -- the turn an agent author writes against ---------------------------------------------------


class Turn:
    """One turn of a session, handed to the agent author's ``run_turn(turn)``.

    The library opened ``turn.generation`` and closes it when ``run_turn``
    returns; ``run_turn`` calls ``boundary`` before each model request and
    ``continue_after_checkpoint`` when the model is done::

        async def run_turn(turn: Turn) -> None:
            messages.append({"role": "user", "content": turn.prompt})
            while True:
                await turn.boundary(add_steer)          # steers land here, in order
                reply = await my_model(messages)
                await turn.say(reply.text)
                if reply.tool_calls:
                    ...                                 # a running tool is never interrupted
                    continue
                if not turn.continue_after_checkpoint():
                    break

    ``session/cancel`` stops the generation (pending steers are held) and cancels
    ``run_turn`` at its next await, except inside a boundary's write, which
    completes first. After ``max_requests`` boundaries the next one ends the turn
    with ``max_turn_requests``. Returning early without the checkpoint decision
    holds what is pending (``generation-stopped``); an exception fails the turn.
    """

    def __init__(self, session: SteeringSession, turn_id: str, origin: str, prompt: str,
                 blocks: tuple[Mapping[str, Any], ...], generation: Generation) -> None:  # fmt: skip
        self.session: Final = session
        self.id: Final = turn_id
        """The turn's id, also its generation's id (``<session>-turn-<n>``)."""
        self.origin: Final = origin
        """``"prompt"`` (a ``session/prompt``), ``"steer"`` (an idle ``_session/steering``) or
        ``"follow_up"`` (a turn that runs the follow-ups the turn before left, C29)."""
        self.prompt: Final = prompt
        """The prompt's content blocks as one text (see ``prompt_text``); ``""`` in a follow-ups'
        turn, whose follow-ups the first ``boundary`` writes (``metadata["kind"] == "follow_up"``)."""
        self.blocks: Final = blocks
        """The prompt's content blocks as the client sent them (JSON objects)."""
        self.generation: Final = generation
        self.requests = 0
        """Boundaries passed so far: the model requests this turn made or is making."""
        self._scope: anyio.CancelScope | None = None
        self._in_boundary = False
        self._cancel_requested = False
        self._published: set[str] = set()

    @property
    def session_id(self) -> str:
        return self.session.session_id

    @property
    def state(self) -> dict[str, Any]:
        """The session's own dict for the author (a conversation kept across turns)."""
        return self.session.state

    async def boundary(self, writer: Writer) -> list[Receipt]:
        """The request boundary: write pending steers in admission order, then publish them applied.

        ``writer(input, metadata)`` appends one steer to the author's context; see
        ``Generation.boundary``. Raises the stop signal (``GenerationStopped``)
        once the turn was cancelled or ran out of requests; ``run_turn`` need not
        catch it: the library ends the turn with the right stop reason.
        """
        if self.requests >= self.session.max_requests and self.generation.accepting:
            self.generation.stop(StopReason.BUDGET_EXHAUSTED)
        self._in_boundary = True
        try:
            applied = await self.generation.boundary(writer)
        finally:
            self._in_boundary = False
            if self._cancel_requested and self._scope is not None:
                self._scope.cancel()
        self.requests += 1
        for receipt in applied:
            await self._settle(receipt)
        return applied

    def continue_after_checkpoint(self) -> bool:
        """True: steers arrived, run the model again in this turn (C16); False: the turn is done.

        With the turn's ``max_requests`` spent, the budget decides first (C17): steers pending
        are held ``budget-exhausted`` and no ``generation.continued`` is published for a
        request that would not be made."""
        return self.generation.continue_after_checkpoint(may_call=self.requests < self.session.max_requests)

    async def say(
        self, text: str, meta: dict[str, Any] | None = None, *, message_id: str | None = None
    ) -> None:
        """Send ``text`` to the client as an ``agent_message_chunk`` (streamed replies: per chunk).

        ``message_id`` becomes the chunk's ``messageId`` (ACP v1): chunks with one id are one
        message, a new id starts another, e.g. one per model reply (``turn.message_id()``).
        """
        await self.session.channel.message(text, meta, message_id)

    async def think(
        self, text: str, meta: dict[str, Any] | None = None, *, message_id: str | None = None
    ) -> None:
        """Send ``text`` as an ``agent_thought_chunk`` (``message_id``: as for ``say``)."""
        await self.session.channel.thought(text, meta, message_id)

    def message_id(self, kind: str = "reply") -> str:
        """An id for the message of the current model request: ``<turn id>-<kind>-<requests>``.

        Unique across sessions, turns and agent restarts (session ids are ``sess-<uuid>``);
        use a different ``kind`` for a thought and a reply of the same request.
        """
        return f"{self.id}-{kind}-{self.requests}"

    async def update(self, update: Any) -> None:
        """Send any ``session/update`` (an SDK object, e.g. ``acp.start_tool_call(...)``)."""
        await self.session.channel.update(update)

    @property
    def can_read_files(self) -> bool:
        """True when the client serves ``fs/read_text_file`` (it said so in ``initialize``)."""
        return self.session.channel.can_read_files

    async def read_text_file(self, path: str, *, line: int | None = None, limit: int | None = None) -> str:
        """Read a file through the client (``fs/read_text_file``), unsaved editor changes included.

        Raises ``LookupError`` when the client did not advertise the capability.
        """
        if not self.can_read_files:
            raise LookupError("the client does not serve fs/read_text_file")
        return await self.session.channel.read_text_file(path, line, limit)

    async def request_permission(self, tool_call: Any, options: Any) -> str | None:
        """Ask the user (``session/request_permission``): the chosen option id, None if cancelled."""
        return await self.session.channel.request_permission(tool_call, options)

    # -- the library's side ------------------------------------------------------------------

    def _cancel(self) -> None:
        """``session/cancel``: stop the generation now; cancel ``run_turn`` unless a write runs."""
        if self.generation.accepting:
            self.generation.stop()
        self._cancel_requested = True
        if not self._in_boundary and self._scope is not None:
            self._scope.cancel()

    async def _settle(self, receipt: Receipt) -> None:
        """Tell the client a steer's final disposition, once."""
        if receipt.input_id in self._published or receipt.disposition in (None, Disposition.QUEUED):
            return
        self._published.add(receipt.input_id)
        settled: dict[str, Any] = {
            "inputId": receipt.input_id,
            "turnId": self.id,
            "disposition": receipt.disposition.value,
        }
        if receipt.reason is not None:
            settled["reason"] = str(receipt.reason)  # a StrEnum: its pinned string
        await self.session.channel.steer_settled(settled)


#: What an agent author supplies: one turn's work. May return an ACP stop reason for a
#: turn that finished (``"max_tokens"``, ``"refusal"``); ``None`` means ``end_turn``.
RunTurn = Callable[[Turn], Awaitable[str | None]]


@attrs.frozen
class TurnResult:
    """How a turn ended."""

    turn_id: str
    origin: str
    """``"prompt"`` (a ``session/prompt``), ``"steer"`` (an idle ``_session/steering``) or
    ``"follow_up"`` (the follow-ups of the turn before)."""
    stop_reason: str
    """ACP stop reason: ``end_turn``, ``cancelled``, ``max_turn_requests`` (or what ``run_turn`` said)."""
    applied_input_ids: tuple[str, ...]
    """Steers written into the context in this turn, in order."""
    held_input_ids: tuple[str, ...]
    """Steers admitted into this turn but never written (held, C17)."""
    unknown_input_ids: tuple[str, ...]
    """Steers whose write was interrupted (unknown, C15)."""
    follow_up_input_ids: tuple[str, ...] = ()
    """Follow-ups this turn finished with, kept for the next turn (C29), in order."""
    next_turn_id: str | None = None
    """The turn started to run ``follow_up_input_ids`` (None when there are none)."""

    def to_meta(self) -> dict[str, Any]:
        """``{"turnId", "appliedInputIds", "heldInputIds", "unknownInputIds"}``, and
        ``"followUpInputIds"`` / ``"nextTurnId"`` when the turn left follow-ups."""
        meta: dict[str, Any] = {
            "turnId": self.turn_id,
            "appliedInputIds": list(self.applied_input_ids),
            "heldInputIds": list(self.held_input_ids),
            "unknownInputIds": list(self.unknown_input_ids),
        }
        if self.follow_up_input_ids:
            meta["followUpInputIds"] = list(self.follow_up_input_ids)
        if self.next_turn_id is not None:
            meta["nextTurnId"] = self.next_turn_id
        return meta
