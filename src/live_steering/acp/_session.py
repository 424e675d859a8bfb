"""One ACP session's turns and steers, without the ACP SDK (anyio: asyncio and trio).

Theory of operation. A ``SteeringSession`` owns one ``LiveRuntime`` and one
``AgentLoop`` (context, scripted provider, tools); a turn is one generation of
that runtime. ``prompt()`` runs a turn in the caller's task; ``steer()`` decides
what a ``_session/steering`` request does, holding the session's steer lock so
steers are decided one at a time, in arrival order (anyio locks are FIFO):

- a steer whose input id was seen before is a repeat: it answers from the record
  (the runtime's receipt, C10, or the turn it started) and admits nothing;
- a turn is running: the steer is submitted anchored to it -> ``injected``; a
  refusal ``finishing``/``stale-generation`` means the turn closed admission in
  the race, so the steer waits for the turn to wind down and is treated as idle;
- idle: ``promptRequired`` when the client opted in, else a new turn is started
  with the steer as its prompt and the answer is given once it is running.

This module never speaks JSON-RPC: ``live_steering.acp`` maps its results and
``SteerRejected`` errors onto the SDK. It must never hold the steer lock while
waiting for anything but the turn it is deciding about.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Protocol

import anyio
import anyio.abc
import attrs

from .._errors import LiveSteeringError
from .._events import Event
from .._runtime import LiveRuntime
from .._types import Input, Receipt, RefusalReason
from .._validate import MAX_ID_CHARS, id_problem
from ..loop import AgentLoop, Context, ContextEntry, LoopResult, Reply, ToolCall

__all__ = [
    "IDLE_PROMPT_REQUIRED",
    "EchoProvider",
    "ClientPace",
    "ErrorKind",
    "SessionSink",
    "SteerOutcome",
    "SteerRejected",
    "SteerRequest",
    "SteerResult",
    "SteeringSession",
    "TurnBusyError",
    "TurnResult",
    "parse_steer_request",
    "prompt_text",
    "sleep_pace",
    "steer_input_id",
]

_log = logging.getLogger(__name__)

#: The only ``_meta.steering.idleBehavior`` value the protocol defines.
IDLE_PROMPT_REQUIRED: Final = "promptRequired"

#: Most ids a session remembers for steers that started a turn (like C11: never evicted).
STARTED_TURN_IDS_LIMIT: Final = 2_000


class SteerOutcome(enum.StrEnum):
    """The ``outcome`` of a ``_session/steering`` response (CONTRACT.md C25)."""

    INJECTED = "injected"
    STARTED_NEW_TURN = "startedNewTurn"
    PROMPT_REQUIRED = "promptRequired"
    FAILED = "failed"


class ErrorKind(enum.StrEnum):
    """The JSON-RPC errors a steer or prompt can be rejected with."""

    INVALID_PARAMS = "invalidParams"
    INVALID_REQUEST = "invalidRequest"


class SteerRejected(LiveSteeringError, ValueError):
    """A request the protocol says to answer with a JSON-RPC error; nothing was consumed."""

    def __init__(self, kind: ErrorKind, message: str, **data: Any) -> None:
        super().__init__(message)
        self.kind = kind
        self.data: dict[str, Any] = {"details": message, **data}


class TurnBusyError(LiveSteeringError, RuntimeError):
    """``session/prompt`` while a turn of the session is running (ACP: one prompt at a time)."""


@attrs.frozen
class SteerRequest:
    """A validated ``_session/steering`` request."""

    session_id: str
    text: str
    """The prompt's content blocks as one text (blocks joined by a blank line)."""
    prompt_required: bool
    """True when the client opted into ``idleBehavior: "promptRequired"``."""
    steer_id: str | None
    """The client's own ``_meta.steering.id``, if it sent one (see ``steer_input_id``)."""


@attrs.frozen
class SteerResult:
    """What a steer did; ``to_wire()`` is the JSON-RPC result."""

    outcome: SteerOutcome
    input_id: str
    """The runtime input id this steer maps to (stable across retries)."""
    reason: str | None = None
    """``"noRunningTurn"`` for ``promptRequired``; the refusal or error for ``failed``."""
    receipt: Receipt | None = None
    """The runtime receipt of an injected steer (``None`` for the other outcomes)."""
    turn_id: str | None = None
    """The turn the steer joined or started."""
    repeated: bool = False
    """True when this answers a retry of a steer already decided (nothing new happened)."""

    def to_wire(self) -> dict[str, Any]:
        """``{"outcome", "reason"?, "_meta": {"liveSteering": {...}}}``."""
        wire: dict[str, Any] = {"outcome": self.outcome.value}
        if self.reason is not None:
            wire["reason"] = self.reason
        details: dict[str, Any] = {"inputId": self.input_id, "repeated": self.repeated}
        if self.turn_id is not None:
            details["turnId"] = self.turn_id
        if self.receipt is not None:
            details["receipt"] = self.receipt.to_dict()
        wire["_meta"] = {"liveSteering": details}
        return wire


@attrs.frozen
class TurnResult:
    """How a turn ended."""

    turn_id: str
    origin: str
    """``"prompt"`` (a ``session/prompt``) or ``"steer"`` (an idle ``_session/steering``)."""
    stop_reason: str
    """ACP stop reason: ``end_turn``, ``cancelled`` or ``max_turn_requests``."""
    loop: LoopResult


#: ``LoopResult.outcome`` -> ACP ``StopReason``.
_STOP_REASONS: Final = {
    "finished": "end_turn",
    "stopped": "cancelled",
    "budget-exhausted": "max_turn_requests",
}


# -- parsing ----------------------------------------------------------------------------------


def prompt_text(blocks: object, *, image_input: bool = False, audio_input: bool = False) -> str:
    """Join ACP content blocks into the text the model gets; raise ``SteerRejected`` for bad ones.

    Text blocks are taken as they are, a resource link as ``[name](uri)``, an
    embedded text resource as its text. An image (audio) block is
    ``invalidRequest`` when the model has no image (audio) input, as the protocol
    says; this scripted model has neither. Anything else is ``invalidParams``.
    """
    if not isinstance(blocks, list) or not blocks:
        raise SteerRejected(ErrorKind.INVALID_PARAMS, "prompt must be a non-empty list of content blocks")
    parts: list[str] = []
    for block in blocks:
        if not isinstance(block, Mapping):
            raise SteerRejected(ErrorKind.INVALID_PARAMS, "each content block must be an object")
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind in ("image", "audio"):
            if not (image_input if kind == "image" else audio_input):
                raise SteerRejected(ErrorKind.INVALID_REQUEST, f"the model has no {kind} input", block=kind)
            raise SteerRejected(ErrorKind.INVALID_PARAMS, f"{kind} blocks are not supported here")
        elif kind == "resource_link" and isinstance(block.get("uri"), str):
            parts.append(f"[{block.get('name') or block['uri']}]({block['uri']})")
        elif kind == "resource" and isinstance(res := block.get("resource"), Mapping):
            if not isinstance(res.get("text"), str):
                raise SteerRejected(ErrorKind.INVALID_REQUEST, "the model has no binary resource input")
            parts.append(res["text"])
        else:
            raise SteerRejected(ErrorKind.INVALID_PARAMS, f"unsupported or malformed content block {kind!r}")
    text = "\n\n".join(parts)
    if not text.strip():
        raise SteerRejected(ErrorKind.INVALID_PARAMS, "prompt has no text")
    return text


def parse_steer_request(params: object) -> SteerRequest:
    """Validate ``{sessionId, prompt, _meta?}``; raise ``SteerRejected`` (nothing consumed).

    ``_meta`` and ``_meta.steering`` may be absent or null. ``idleBehavior`` may be
    absent, null or ``"promptRequired"``; any other value is ``invalidParams``.
    ``_meta.steering.id``, when given, must be an id by the runtime's rules: a string of
    1-128 characters, without NUL, encodable as UTF-8.
    """
    if not isinstance(params, Mapping):
        raise SteerRejected(ErrorKind.INVALID_PARAMS, "params must be an object")
    session_id = params.get("sessionId")
    if not isinstance(session_id, str) or not session_id:
        raise SteerRejected(ErrorKind.INVALID_PARAMS, "sessionId must be a non-empty string")
    meta = params.get("_meta")
    if meta is not None and not isinstance(meta, Mapping):
        raise SteerRejected(ErrorKind.INVALID_PARAMS, "_meta must be an object or null")
    steering = None if meta is None else meta.get("steering")
    if steering is not None and not isinstance(steering, Mapping):
        raise SteerRejected(ErrorKind.INVALID_PARAMS, "_meta.steering must be an object or null")
    steering = steering or {}
    idle = steering.get("idleBehavior")
    if idle is not None and idle != IDLE_PROMPT_REQUIRED:
        raise SteerRejected(
            ErrorKind.INVALID_PARAMS,
            f"unknown _meta.steering.idleBehavior {idle!r}; the only value is {IDLE_PROMPT_REQUIRED!r}",
            idleBehavior=idle,
        )
    steer_id = steering.get("id")
    if steer_id is not None and (not isinstance(steer_id, str) or id_problem(steer_id) is not None):
        raise SteerRejected(
            ErrorKind.INVALID_PARAMS,
            f"_meta.steering.id must be a string of 1-{MAX_ID_CHARS} characters, without NUL, valid UTF-8",
        )
    text = prompt_text(params.get("prompt"))
    return SteerRequest(session_id, text, idle == IDLE_PROMPT_REQUIRED, steer_id)


def steer_input_id(session_id: str, *, steer_id: str | None, request_id: object) -> str | None:
    """The runtime input id of a steer: the same for a client's retry of the same steer (C10).

    The client's ``_meta.steering.id`` wins; else the JSON-RPC request id (a frame
    re-sent with the same id); both are digested with the session id to a fixed
    length. ``None`` when neither is known: the steer gets a fresh id.

    >>> steer_input_id("s1", steer_id="fix-1", request_id=7) == steer_input_id("s1", steer_id="fix-1",
    ...                                                                         request_id=8)
    True
    """
    if steer_id is not None:
        source = f"steer-id\0{session_id}\0{steer_id}"
    elif request_id is not None:
        source = f"jsonrpc-id\0{session_id}\0{json.dumps(request_id, sort_keys=True)}"
    else:
        return None
    return "acp-" + hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:40]


# -- the scripted model -----------------------------------------------------------------------


class SessionSink(Protocol):
    """Where a session's updates go (the ACP adapter sends them as ``session/update``)."""

    async def request_started(self, request: int) -> None:
        """The scripted model received request ``request`` (1-based) and is working on it."""

    async def agent_message(self, text: str, meta: dict[str, Any]) -> None: ...

    async def tool_started(self, call: ToolCall) -> None: ...

    async def tool_finished(self, call: ToolCall, result: str) -> None: ...

    async def turn_changed(self, turn: dict[str, Any]) -> None: ...


#: Called with the 0-based request index before the scripted model answers; it paces the turn.
Pace = Callable[[int], Awaitable[None]]


class EchoProvider:
    """A deterministic scripted model that says what it received.

    Each reply repeats the user and steer entries that arrived since its previous
    request, so a client sees a steer land. The ``k``-th request after a user
    prompt (1-based) asks for one tool call while ``k < steps``, then answers
    with text only, ending the turn. ``pace`` runs before each answer (the CLI
    sleeps there; tests hold it at a gate).
    """

    def __init__(self, steps: int, sink: SessionSink, pace: Pace) -> None:
        if type(steps) is not int or steps < 1:
            raise ValueError(f"steps must be a positive int, got {steps!r}")
        self.steps = steps
        self._sink = sink
        self._pace = pace
        self._seen = 0
        self._step = 0
        self.requests: list[tuple[ContextEntry, ...]] = []

    async def complete(self, request: Sequence[ContextEntry]) -> Reply:
        index = len(self.requests)
        self.requests.append(tuple(request))
        new = [e for e in request[self._seen :] if e.role in ("user", "steer")]
        self._seen = len(request)
        self._step = 1 if any(e.role == "user" for e in new) else self._step + 1
        await self._sink.request_started(index + 1)
        await self._pace(index)
        heard = "; ".join(f"{e.role} {e.text!r}" for e in new) or "nothing new"
        text = f"Step {self._step}/{self.steps} (request {index + 1}) received: {heard}"
        received = [
            {
                "role": e.role,
                "text": e.text,
                **({"inputId": e.metadata["input_id"]} if e.role == "steer" else {}),
            }
            for e in new
        ]
        await self._sink.agent_message(
            text, {"liveSteering": {"request": index + 1, "step": self._step, "received": received}}
        )
        if self._step < self.steps:
            call = ToolCall(f"call-{index + 1}", "work", {"step": self._step})
            return Reply(text, (call,))
        return Reply(text)


class _StreamingTools:
    """The scripted tool: reports its start and end as tool-call updates."""

    def __init__(self, sink: SessionSink) -> None:
        self._sink = sink

    async def run(self, call: ToolCall) -> str:
        await self._sink.tool_started(call)
        result = f"step {call.arguments.get('step')} done"
        await self._sink.tool_finished(call, result)
        return result


def sleep_pace(delay: float) -> Pace:
    """A ``Pace`` that sleeps ``delay`` seconds per request (simulated model latency)."""

    async def pace(index: int) -> None:
        await anyio.sleep(delay)

    return pace


class ClientPace:
    """A ``Pace`` driven by the client: request ``n`` waits until ``release`` allowed ``n + 1`` answers.

    This makes a run over a real pipe deterministic: a test sees request ``n`` in
    flight, steers, then releases it (no sleeps, no races).
    """

    def __init__(self) -> None:
        self.allowed = 0
        self._changed = anyio.Event()

    def release(self, count: int = 1) -> None:
        self.allowed += count
        self._changed.set()
        self._changed = anyio.Event()

    async def __call__(self, index: int) -> None:
        while self.allowed <= index:
            await self._changed.wait()


# -- the session ------------------------------------------------------------------------------


@attrs.define(eq=False)
class _Turn:
    id: str
    origin: str
    opened: anyio.Event = attrs.field(factory=anyio.Event)
    """Set once the turn's generation is open (or the turn ended without opening one)."""
    done: anyio.Event = attrs.field(factory=anyio.Event)
    """Set once the turn is over and the session is idle again."""
    failed: bool = False


class SteeringSession:
    """One ACP session: a runtime, a reference loop, its turns and its steers.

    >>> async with anyio.create_task_group() as tg:            # doctest: +SKIP
    ...     session = SteeringSession("s1", sink, tg, steps=3, pace=sleep_pace(0.5))
    ...     tg.start_soon(session.prompt, "Fix the test")
    ...     result = await session.steer(parse_steer_request(params), request_id=4)
    """

    def __init__(
        self,
        session_id: str,
        sink: SessionSink,
        task_group: anyio.abc.TaskGroup,
        *,
        steps: int = 6,
        pace: Pace | None = None,
    ) -> None:
        self.session_id = session_id
        self.runtime = LiveRuntime(session_id=session_id)
        self.provider = EchoProvider(steps, sink, pace or sleep_pace(0.5))
        self.loop = AgentLoop(
            self.runtime, self.provider, _StreamingTools(sink), context=Context(), call_budget=steps + 16
        )
        self._sink = sink
        self._tg = task_group
        self._lock = anyio.Lock()
        self._turn: _Turn | None = None
        self._turns = 0
        self._started: dict[str, tuple[str, SteerResult]] = {}
        self.runtime.add_listener(self._on_event)

    # -- turns ---------------------------------------------------------------------------------

    @property
    def running_turn(self) -> str | None:
        """The id of the turn in progress, or ``None`` when idle."""
        return None if self._turn is None else self._turn.id

    def _on_event(self, event: Event) -> None:
        turn = self._turn
        if event["type"] == "generation.started" and turn is not None and event["generation_id"] == turn.id:
            turn.opened.set()

    def _begin(self, origin: str) -> _Turn:
        """Claim the session for a new turn, synchronously (no await between check and claim)."""
        if self._turn is not None:
            raise TurnBusyError(f"turn {self._turn.id!r} of session {self.session_id!r} is running")
        self._turns += 1
        turn = self._turn = _Turn(f"{self.session_id}-turn-{self._turns}", origin)
        return turn

    async def prompt(self, text: str) -> TurnResult:
        """Run one turn for ``text`` in this task (``session/prompt``). ``TurnBusyError`` if one runs."""
        return await self._run(self._begin("prompt"), text)

    async def _run(self, turn: _Turn, text: str) -> TurnResult:
        info: dict[str, Any] = {"id": turn.id, "origin": turn.origin}
        try:
            await self._sink.turn_changed({**info, "state": "running"})
            result = await self.loop.run(text, generation_id=turn.id)
        except BaseException:
            turn.failed = True
            raise
        finally:
            if self._turn is turn:
                self._turn = None
            turn.opened.set()
            turn.done.set()
            if turn.failed:
                # Best effort, and never in place of the original exception: a
                # cancellation (the client went away) must stay a cancellation.
                with anyio.CancelScope(shield=True), anyio.move_on_after(1), contextlib.suppress(Exception):
                    await self._sink.turn_changed({**info, "state": "failed"})
        stop = _STOP_REASONS[result.outcome]
        await self._sink.turn_changed({**info, "state": "ended", "stopReason": stop})
        return TurnResult(turn.id, turn.origin, stop, result)

    async def _run_detached(self, turn: _Turn, text: str) -> None:
        """A steer-started turn: nobody awaits it, so its failure is reported, not raised."""
        try:
            await self._run(turn, text)
        except Exception:  # _run already sent the "failed" turn update
            _log.exception("turn %s of session %s failed", turn.id, self.session_id)

    def cancel(self) -> None:
        """``session/cancel``: stop the running turn (its pending steers are held, C17)."""
        self.loop.stop()

    async def aclose(self) -> None:
        self.loop.stop()
        await self.runtime.aclose()

    # -- steers --------------------------------------------------------------------------------

    async def steer(self, request: SteerRequest, *, request_id: object = None) -> SteerResult:
        """Decide one ``_session/steering`` request, in arrival order with the session's other steers.

        Raises ``SteerRejected`` for what the protocol answers with an error; an
        unexpected failure is the outcome ``failed``, never an exception.
        """
        input_id = steer_input_id(self.session_id, steer_id=request.steer_id, request_id=request_id)
        async with self._lock:
            if input_id is None:
                input_id = Input("steer", request.text).id  # a fresh random id: no retry identity
            try:
                return await self._decide(request, input_id)
            except SteerRejected:
                raise
            except Exception as error:
                return SteerResult(
                    SteerOutcome.FAILED, input_id, reason=f"internal-error: {type(error).__name__}"
                )

    async def _decide(self, request: SteerRequest, input_id: str) -> SteerResult:
        steer = Input("steer", request.text, id=input_id)
        # A retry of a steer that started a turn: answer from the record.
        if (record := self._started.get(input_id)) is not None:
            text, result = record
            if text != request.text:
                raise _conflict(input_id)
            return attrs.evolve(result, repeated=True)
        # A retry of an injected steer: the runtime answers with its current receipt (C10).
        if (known := self.runtime.receipt(input_id)) is not None:
            receipt = await self.runtime.submit_steering(steer, known.generation_id)
            if not receipt.accepted:
                return _refused(input_id, receipt)  # identity-conflict (other text) raises invalidParams
            return SteerResult(
                SteerOutcome.INJECTED, input_id, receipt=receipt, turn_id=receipt.generation_id, repeated=True
            )
        while (turn := self._turn) is not None:
            await turn.opened.wait()
            generation = self.runtime.generation
            if generation is not None and generation["id"] == turn.id:
                receipt = await self.runtime.submit_steering(steer, turn.id)
                if receipt.accepted:
                    return SteerResult(SteerOutcome.INJECTED, input_id, receipt=receipt, turn_id=turn.id)
                if receipt.reason not in (RefusalReason.FINISHING, RefusalReason.STALE_GENERATION):
                    return _refused(input_id, receipt)
            # The turn closed admission in the race: once it has wound down, this steer is idle.
            await turn.done.wait()
        if request.prompt_required:
            return SteerResult(SteerOutcome.PROMPT_REQUIRED, input_id, reason="noRunningTurn")
        if len(self._started) >= STARTED_TURN_IDS_LIMIT:
            return SteerResult(SteerOutcome.FAILED, input_id, reason=RefusalReason.CAPACITY.value)
        turn = self._begin("steer")
        self._tg.start_soon(self._run_detached, turn, request.text)
        # Recorded before the wait: if this request is cancelled while the turn starts,
        # the client's retry is still a repeat of this steer, not a second turn.
        result = SteerResult(SteerOutcome.STARTED_NEW_TURN, input_id, turn_id=turn.id)
        self._started[input_id] = (request.text, result)
        await turn.opened.wait()
        if turn.failed:
            del self._started[input_id]  # nothing of it ran: a retry may try again
            return SteerResult(SteerOutcome.FAILED, input_id, reason="turn-failed", turn_id=turn.id)
        return result


def _conflict(input_id: str) -> SteerRejected:
    return SteerRejected(
        ErrorKind.INVALID_PARAMS,
        "this steer id was already used with other content",
        reason=RefusalReason.IDENTITY_CONFLICT.value,
        inputId=input_id,
    )


def _refused(input_id: str, receipt: Receipt) -> SteerResult:
    """A refusal for a running turn other than the end-of-turn race."""
    if receipt.reason in (RefusalReason.INVALID_INPUT, RefusalReason.IDENTITY_CONFLICT):
        raise SteerRejected(
            ErrorKind.INVALID_PARAMS,
            f"steer refused: {receipt.reason}",
            reason=receipt.reason,
            inputId=input_id,
        )
    return SteerResult(SteerOutcome.FAILED, input_id, reason=receipt.reason, receipt=receipt)
