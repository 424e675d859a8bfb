"""The wire of ``_session/steering``, without the SDK: parsing, outcomes, errors and steer ids.

Everything here is a pure function of the JSON a client sent: ``parse_steer_request``
validates params (raising ``SteerRejected``, which the adapter answers with a
JSON-RPC error, before anything is consumed), ``prompt_text`` turns content
blocks into the text the model gets, ``steer_input_id`` gives a steer its stable
runtime input id, and ``SteerResult.to_wire()`` is the JSON-RPC result. The
decisions live in ``_session.py``.
"""

from __future__ import annotations

import enum
import hashlib
import json
import json.encoder
from collections.abc import Mapping
from typing import Any, Final, cast

import attrs

from .._errors import LiveSteeringError
from .._types import Receipt
from .._validate import MAX_ID_CHARS, id_problem

_encode_str: Final = json.encoder.encode_basestring_ascii

__all__ = [
    "FOLLOW_UP_KIND",
    "IDLE_PROMPT_REQUIRED",
    "KIND_META",
    "STEER_KIND",
    "ErrorKind",
    "SteerOutcome",
    "SteerRejected",
    "SteerRequest",
    "SteerResult",
    "TurnBusyError",
    "parse_steer_request",
    "prompt_text",
    "steer_input_id",
]

#: The only ``_meta.steering.idleBehavior`` value the protocol defines.
IDLE_PROMPT_REQUIRED: Final = "promptRequired"

#: This library's own ``_meta`` key on a ``_session/steering`` request: ``{"kind": ...}``. Its own
#: namespace (the one its answers already use), not a field of ``_meta.steering``, whose names
#: belong to the steering proposal: ACP lets implementations put custom data in ``_meta`` and
#: never at the root of a protocol type (agentclientprotocol.com/protocol/extensibility).
KIND_META: Final = "liveSteering"
#: ``_meta.liveSteering.kind`` of a steer: written at the running turn's next boundary (the default).
STEER_KIND: Final = "steer"
#: ``_meta.liveSteering.kind`` of a follow-up: run as the next turn once the running one ends (C29).
FOLLOW_UP_KIND: Final = "follow_up"


class SteerOutcome(enum.StrEnum):
    """The ``outcome`` of a ``_session/steering`` response (rule C25, docs/rules.md)."""

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
    blocks: tuple[Mapping[str, Any], ...] = attrs.field(default=(), eq=False)
    """The prompt's content blocks as sent (a steer that starts a turn hands them to it)."""
    kind: str = STEER_KIND
    """``"steer"`` or ``"follow_up"`` (``_meta.liveSteering.kind``): the runtime input's kind."""


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
    """The turn the steer joined or started (a follow-up's: the turn it runs after)."""
    repeated: bool = False
    """True when this answers a retry of a steer already decided (nothing new happened)."""
    kind: str = STEER_KIND
    """The request's kind; ``"follow_up"`` is said in ``_meta.liveSteering.kind``."""

    def to_wire(self) -> dict[str, Any]:
        """``{"outcome", "reason"?, "_meta": {"liveSteering": {...}}}``."""
        wire: dict[str, Any] = {"outcome": self.outcome.value}
        if self.reason is not None:
            wire["reason"] = self.reason
        details: dict[str, Any] = {"inputId": self.input_id, "repeated": self.repeated}
        if self.kind != STEER_KIND:
            details["kind"] = self.kind
        if self.turn_id is not None:
            details["turnId"] = self.turn_id
        if self.receipt is not None:
            details["receipt"] = self.receipt.to_dict()
        wire["_meta"] = {"liveSteering": details}
        return wire


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
    ``_meta.steering.id``, when given, must be an id by the runtime's rules (``_validate``).
    ``_meta.liveSteering.kind`` may be absent, null, ``"steer"`` or ``"follow_up"``.
    """
    if not isinstance(params, Mapping):
        raise SteerRejected(ErrorKind.INVALID_PARAMS, "params must be an object")
    session_id = params.get("sessionId")
    if not isinstance(session_id, str) or not session_id:
        raise SteerRejected(ErrorKind.INVALID_PARAMS, "sessionId must be a non-empty string")
    meta = params.get("_meta")
    if meta is None:  # the usual steer: no _meta to read
        idle = steer_id = None
        kind: Any = STEER_KIND
    elif not isinstance(meta, Mapping):
        raise SteerRejected(ErrorKind.INVALID_PARAMS, "_meta must be an object or null")
    else:
        steering = meta.get("steering")
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
                f"_meta.steering.id must be a string of 1-{MAX_ID_CHARS} characters, without NUL, "
                "valid UTF-8",
            )
        ours = meta.get(KIND_META)
        if ours is not None and not isinstance(ours, Mapping):
            raise SteerRejected(ErrorKind.INVALID_PARAMS, f"_meta.{KIND_META} must be an object or null")
        kind = (ours or {}).get("kind")
        if kind is None:
            kind = STEER_KIND
        elif kind not in (STEER_KIND, FOLLOW_UP_KIND):
            shown = repr(kind[:40]) if isinstance(kind, str) else f"of type {type(kind).__name__}"
            raise SteerRejected(
                ErrorKind.INVALID_PARAMS,
                f"unknown _meta.{KIND_META}.kind {shown}; it is {STEER_KIND!r} or {FOLLOW_UP_KIND!r}",
            )
    prompt = params.get("prompt")
    text = prompt_text(prompt)
    blocks = tuple(cast("list[Mapping[str, Any]]", prompt))  # checked by prompt_text
    return SteerRequest(session_id, text, idle == IDLE_PROMPT_REQUIRED, steer_id, blocks, kind)


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
        source = f"jsonrpc-id\0{session_id}\0{_json_id(request_id)}"
    else:
        return None
    return "acp-" + hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _json_id(request_id: object) -> str:
    """``json.dumps(request_id, sort_keys=True)``, without the encoder for the usual ids.

    An int is its ``repr`` and a str ``encode_basestring_ascii`` of it, exactly as
    ``json.dumps`` writes them (``ensure_ascii``): the digests stay the same.
    """
    if type(request_id) is int:
        return int.__repr__(request_id)
    if type(request_id) is str:
        return _encode_str(request_id)
    return json.dumps(request_id, sort_keys=True)
