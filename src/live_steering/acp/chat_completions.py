"""A real-model steerable ACP agent on any OpenAI-compatible Chat Completions endpoint.

``live-steering acp --openai-base-url URL --model NAME [--api-key-env VAR]`` runs
``ChatCompletionsAgent``: each turn streams ``POST {URL}/chat/completions``
(``stream: true``, server-sent events) and forwards the text deltas as
``agent_message_chunk`` updates. The model is offered one read-only tool,
``read_file``, when the client serves ``fs/read_text_file``; a path outside the
session's directory is read only after the user allows it
(``session/request_permission``). A steer sent while the model streams or while
the tool runs is written before the next request of the same turn.

An endpoint error (connection refused, HTTP 4xx/5xx, a timeout, malformed JSON, a
stream that ends without ``[DONE]`` or a ``finish_reason``) ends the turn with a
JSON-RPC error whose ``data.details`` says what happened; the steers it had not
written are held, and a reply cut short is not kept in the conversation. Every
tool call the model asked for gets a tool message whatever ends the turn
(``TOOL_CANCELLED_RESULT``, ``TOOL_FAILED_RESULT``), so the session's next
prompt is a conversation OpenAI-compatible servers accept. The API key is sent only as the
``Authorization`` header and is never logged or shown (it is redacted from
every message the client sees).

It uses only ``live_steering.acp``'s public names: it is one user of that API.
Needs ``httpx`` (in the ``acp`` extra).
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
from collections.abc import AsyncGenerator, Mapping
from typing import Any, Final, cast

import acp
import anyio
import attrs
from acp.schema import ContentToolCallContent, PermissionOption, TextContentBlock

from live_steering import Input, LiveSteeringError
from live_steering.acp import SteeringAgent, Turn, TurnError
from live_steering.loop import TOOL_CANCELLED_RESULT, TOOL_FAILED_RESULT

try:
    import httpx
except ImportError as error:  # pragma: no cover - exercised by installs without the extra
    hint = "live_steering.acp.chat_completions needs httpx: pip install 'live-steering[acp]'"
    raise ImportError(hint) from error

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "READ_FILE_TOOL",
    "REPLY_SEPARATOR",
    "TOOL_CANCELLED_RESULT",
    "TOOL_FAILED_RESULT",
    "TRUNCATED_STREAM_MESSAGE",
    "ChatCompletionsAgent",
    "ChatCompletionsConfig",
    "api_key_from_env",
]

#: The system message that opens every session's conversation (so it is in every request),
#: unless ``ChatCompletionsConfig.system_prompt`` (``--system-prompt``) says otherwise.
DEFAULT_SYSTEM_PROMPT: Final = (
    "You are a coding assistant inside an editor. The user may send corrections while you work; "
    "they arrive as extra user messages. Follow the latest one."
)

#: The one tool the model is offered (OpenAI function-calling schema).
READ_FILE_TOOL: Final = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a text file of the user's project (as the editor has it, unsaved changes too).",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "absolute, or relative to the project"}},
            "required": ["path"],
        },
    },
}

#: Characters of a file given to the model; the rest is cut with a note.
MAX_FILE_CHARS: Final = 100_000
#: Characters of an error body quoted to the client.
MAX_ERROR_BODY: Final = 500

_ALLOW, _REJECT = "allow-once", "reject-once"

#: ``error.data.details`` of the turn whose reply stream ended without ``data: [DONE]`` and
#: without a ``finish_reason``: the reply was cut short, so it is not kept as an answer.
TRUNCATED_STREAM_MESSAGE: Final = (
    "the model endpoint's stream ended before the reply was complete (no finish_reason and no "
    "[DONE]); the partial reply was discarded"
)

#: The ACP stop reason of a turn whose last reply ended with this ``finish_reason`` (others: ``end_turn``).
_STOP_REASONS: Final = {"length": "max_tokens", "content_filter": "refusal"}

#: Seconds the ``failed`` tool call updates may take while a cancelled or failed turn winds down.
_FAREWELL_SECONDS: Final = 1.0


def api_key_from_env(variable: str) -> str:
    """The API key in environment variable ``variable``; ``KeyError`` naming it (never the value).

    The message says which: ``... is not set`` or ``... is set but empty``.
    """
    value = os.environ.get(variable)
    if value is None:
        raise KeyError(f"environment variable {variable} is not set")
    if not value.strip():
        raise KeyError(f"environment variable {variable} is set but empty")
    return value


@attrs.frozen
class ChatCompletionsConfig:
    """Where the model is and how to talk to it."""

    base_url: str
    """The endpoint's base URL, e.g. ``http://127.0.0.1:8080/v1`` (``/chat/completions`` is appended)."""
    model: str
    """The ``model`` field of every request."""
    api_key: str | None = attrs.field(default=None, repr=False)
    """Sent as ``Authorization: Bearer ...``; never in ``repr``, logs or messages."""
    timeout: float = 120.0
    """Seconds to connect, and between two chunks of a reply."""
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT
    """The first message of every conversation, ``role: system``; ``None`` or ``""``: none."""


class ChatCompletionsAgent(SteeringAgent):
    """``SteeringAgent`` whose turns are Chat Completions requests with a ``read_file`` tool."""

    def __init__(self, config: ChatCompletionsConfig, *, max_requests: int = 16) -> None:
        super().__init__(self._run_turn, name="live-steering-chat", title=f"live_steering: {config.model}",
                         max_requests=max_requests)  # fmt: skip
        self.config = config
        self._http: httpx.AsyncClient | None = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}
            self._http = httpx.AsyncClient(
                base_url=self.config.base_url.rstrip("/") + "/", headers=headers,
                timeout=httpx.Timeout(self.config.timeout),
            )  # fmt: skip
        return self._http

    async def aclose(self) -> None:
        await super().aclose()
        if self._http is not None:
            await self._http.aclose()

    def _redact(self, text: str) -> str:
        key = self.config.api_key
        return text.replace(key, "***") if key else text

    def _fail(self, message: str, **data: Any) -> TurnError:
        return TurnError(self._redact(message), **data)

    # -- one turn ------------------------------------------------------------------------------

    async def _run_turn(self, turn: Turn) -> str | None:
        messages: list[dict[str, Any]] = turn.state.setdefault("messages", [])
        if not messages and self.config.system_prompt:
            messages.append({"role": "system", "content": self.config.system_prompt})
        if turn.prompt:  # a follow-ups' turn has none: its follow-ups arrive through add_steer
            messages.append({"role": "user", "content": turn.prompt})

        async def add_steer(steer: Input, metadata: Mapping[str, Any]) -> None:
            messages.append({"role": "user", "content": steer.text})

        said = False  # has a reply of this turn said anything yet (then the next one is set apart)
        while True:
            await turn.boundary(add_steer)
            reply = await self._complete(turn, messages, _Reply(turn.message_id(), separate=said))
            said = said or bool(reply.text)
            messages.append(reply.message())
            if reply.tool_calls:
                await self._run_tools(turn, reply.tool_calls, messages)
                continue
            # The reply is over (cut at the token limit or filtered too): steers sent while it
            # streamed continue the turn (C16); without any, the reply's own end is the turn's.
            if not turn.continue_after_checkpoint():
                return _STOP_REASONS.get(reply.finish_reason or "")

    async def _complete(self, turn: Turn, messages: list[dict[str, Any]], reply: _Reply) -> _Reply:
        body: dict[str, Any] = {"model": self.config.model, "messages": messages, "stream": True}
        if turn.can_read_files:
            body["tools"] = [READ_FILE_TOOL]
        try:
            async with self._client().stream("POST", "chat/completions", json=body) as response:
                if response.status_code >= 400:
                    text = (await response.aread()).decode("utf-8", "replace")[:MAX_ERROR_BODY]
                    raise self._fail(
                        f"the model endpoint answered HTTP {response.status_code}: {text}",
                        status=response.status_code,
                    )
                if "text/event-stream" in response.headers.get("content-type", ""):
                    await self._read_stream(turn, response, reply)
                else:  # a server that ignores "stream": one JSON completion
                    await reply.add_completion(
                        turn, self._json((await response.aread()).decode("utf-8", "replace"))
                    )
        except httpx.TimeoutException:
            raise self._fail(f"the model endpoint did not answer within {self.config.timeout:g} s") from None
        except httpx.ConnectError as exc:
            raise self._fail(f"cannot connect to the model endpoint {self.config.base_url}: {exc}") from None
        except httpx.HTTPError as exc:
            raise self._fail(f"the model endpoint failed: {type(exc).__name__}: {exc}") from None
        except _Malformed as exc:
            raise self._fail(f"the model endpoint sent a malformed reply: {exc}") from None
        return reply

    async def _read_stream(self, turn: Turn, response: httpx.Response, reply: _Reply) -> None:
        """Add the streamed chunks to ``reply`` until ``[DONE]`` or the body's end.

        A stream that ends, or breaks (a chunked body cut before its last chunk, a reset, a
        silence past the timeout), after the reply's ``finish_reason`` is a whole reply: only
        its end markers were lost. Before it, the reply was cut short: ``TRUNCATED_STREAM_MESSAGE``
        (a silence keeps its own timeout error).
        """
        done = False
        # Closed here, not by the garbage collector: on trio an unfinished async generator
        # left to it is a ResourceWarning (a [DONE], a cancel).
        lines = cast("AsyncGenerator[str, None]", response.aiter_lines())  # it is one
        try:
            async with contextlib.aclosing(lines):
                async for line in lines:
                    if not line.startswith("data:"):
                        continue  # SSE comments, event names, keep-alives
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        break
                    await reply.add_chunk(turn, self._json(data))
        except httpx.TransportError as exc:
            if reply.finish_reason is not None:
                return
            if isinstance(exc, httpx.TimeoutException):
                raise
            raise self._fail(TRUNCATED_STREAM_MESSAGE, truncated=True, cause=type(exc).__name__) from None
        if not done and reply.finish_reason is None:
            # A body without a length ends when the connection closes: a cut stream looks
            # like a short one, and only the end markers tell them apart.
            raise self._fail(TRUNCATED_STREAM_MESSAGE, truncated=True)

    def _json(self, text: str) -> dict[str, Any]:
        try:
            value = json.loads(text)
        except ValueError:
            raise _Malformed("not JSON") from None
        if not isinstance(value, dict):
            raise _Malformed("not a JSON object")
        if "error" in value:
            error = value["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise self._fail(f"the model endpoint reported an error: {str(message)[:MAX_ERROR_BODY]}")
        return value

    # -- the tool ------------------------------------------------------------------------------

    async def _run_tools(self, turn: Turn, calls: list[_ToolCall], messages: list[dict[str, Any]]) -> None:
        """Run a reply's tool calls in order, each result appended as its tool message.

        Whatever ends the turn meanwhile (a cancel, a tool that raised), every call of the
        batch still gets its tool message (``TOOL_CANCELLED_RESULT`` / ``TOOL_FAILED_RESULT``),
        so the conversation stays valid for the session's next prompt, and each call the client
        was shown is set ``failed`` (shielded and bounded: the client may be gone).
        """
        started: set[str] = set()
        done = 0
        try:
            for call in calls:
                result = await self._run_tool(turn, call, started)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
                done += 1
        except BaseException as exc:
            cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
            text = TOOL_CANCELLED_RESULT if cancelled else TOOL_FAILED_RESULT
            rest = calls[done:]
            messages.extend({"role": "tool", "tool_call_id": c.id, "content": text} for c in rest)
            with anyio.CancelScope(shield=True), anyio.move_on_after(_FAREWELL_SECONDS):
                for call in rest:
                    if call.id not in started:
                        continue  # never shown to the client: nothing to update
                    try:
                        await turn.update(acp.update_tool_call(call.id, status="failed", raw_output=text))
                    except Exception:  # the client is gone, or refused: the turn's own error stands
                        break
            raise

    async def _run_tool(self, turn: Turn, call: _ToolCall, started: set[str]) -> str:
        if call.name != "read_file" or not turn.can_read_files:
            return f"error: there is no tool named {call.name!r}"
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError:
            return "error: the arguments are not valid JSON"
        path = arguments.get("path") if isinstance(arguments, dict) else None
        if not isinstance(path, str) or not path:
            return "error: read_file needs a 'path' string"
        cwd = turn.session.cwd
        resolved = posixpath.normpath(posixpath.join(cwd, path))
        started.add(call.id)  # before the await: a cancel during it still updates the call
        await turn.update(acp.start_read_tool_call(call.id, f"Read {resolved}", resolved))
        inside = resolved == cwd or resolved.startswith(cwd.rstrip("/") + "/")
        if not inside:
            # Outside the project: the spec's permission request, before anything is read.
            options = [
                PermissionOption(option_id=_ALLOW, name="Allow once", kind="allow_once"),
                PermissionOption(option_id=_REJECT, name="Reject", kind="reject_once"),
            ]
            tool_call = {
                "toolCallId": call.id,
                "title": f"Read {resolved}",
                "kind": "read",
                "status": "pending",
            }
            try:
                choice = await turn.request_permission(tool_call, options)
            except acp.RequestError:  # a client without the method: nobody allowed it
                choice = None
            if choice != _ALLOW:
                await turn.update(acp.update_tool_call(call.id, status="failed", raw_output="not allowed"))
                return "error: the user did not allow reading this file"
        await turn.update(acp.update_tool_call(call.id, status="in_progress"))
        try:
            text = await turn.read_text_file(resolved)
        except acp.RequestError as exc:
            await turn.update(acp.update_tool_call(call.id, status="failed", raw_output=str(exc)))
            return f"error: the editor could not read {resolved}: {exc}"
        if len(text) > MAX_FILE_CHARS:
            text = text[:MAX_FILE_CHARS] + f"\n[... cut at {MAX_FILE_CHARS} characters]"
        shown = [ContentToolCallContent(type="content", content=TextContentBlock(type="text", text=text))]
        await turn.update(acp.update_tool_call(call.id, status="completed", content=shown))
        return text


class _Malformed(LiveSteeringError):
    """The endpoint's reply is not what the Chat Completions format says."""


@attrs.define
class _ToolCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


#: What sets a reply apart from the previous reply of the same turn, for clients that show
#: every ``agent_message_chunk`` of a turn as one text (each reply also has its own ``messageId``).
REPLY_SEPARATOR: Final = "\n\n"


@attrs.define
class _Reply:
    """One completion, assembled from its streamed chunks; said to the client as one message."""

    message_id: str
    """The ``messageId`` of its ``agent_message_chunk``s: one message per model reply."""
    separate: bool = False
    """Say ``REPLY_SEPARATOR`` before its first text (an earlier reply of the turn said something)."""
    text: list[str] = attrs.field(factory=list)
    calls: dict[int, _ToolCall] = attrs.field(factory=dict)
    finish_reason: str | None = None

    @property
    def tool_calls(self) -> list[_ToolCall]:
        return [self.calls[i] for i in sorted(self.calls)]

    def message(self) -> dict[str, Any]:
        """The assistant message for the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text)}
        if self.calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return message

    async def add_chunk(self, turn: Turn, chunk: dict[str, Any]) -> None:
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise _Malformed("a chunk without a 'choices' list")
        if not choices:
            return  # a usage-only chunk
        choice = choices[0]
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict):
            raise _Malformed("a choice without a 'delta' object")
        await self._add(turn, delta, streamed=True)
        if isinstance(reason := choice.get("finish_reason"), str):
            self.finish_reason = reason

    async def add_completion(self, turn: Turn, completion: dict[str, Any]) -> None:
        choices = completion.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise _Malformed("a completion without choices")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise _Malformed("a choice without a 'message' object")
        await self._add(turn, message, streamed=False)
        if isinstance(reason := choices[0].get("finish_reason"), str):
            self.finish_reason = reason

    async def _add(self, turn: Turn, part: dict[str, Any], *, streamed: bool) -> None:
        content = part.get("content")
        if isinstance(content, str) and content:
            if self.separate and not self.text:
                await turn.say(REPLY_SEPARATOR, message_id=self.message_id)
            self.text.append(content)
            await turn.say(content, message_id=self.message_id)
        calls = part.get("tool_calls")
        if calls is None:
            return
        if not isinstance(calls, list):
            raise _Malformed("'tool_calls' is not a list")
        for position, fragment in enumerate(calls):
            if not isinstance(fragment, dict):
                raise _Malformed("a tool call is not an object")
            index = fragment.get("index", position) if streamed else position
            if type(index) is not int:
                raise _Malformed("a tool call index is not an integer")
            call = self.calls.setdefault(index, _ToolCall())
            if isinstance(fragment.get("id"), str):
                call.id = fragment["id"]
            function = fragment.get("function") or {}
            if not isinstance(function, dict):
                raise _Malformed("a tool call's 'function' is not an object")
            if isinstance(function.get("name"), str) and not call.name:
                call.name = function["name"]  # sent once, in the call's first fragment
            if isinstance(function.get("arguments"), str):
                call.arguments += function["arguments"]
            if not call.id:
                # The server sent none: one of ours, unique in the session, as ACP's toolCallId
                # must be (a client keys its tool calls by it; "call-0" in every reply would make
                # each later call overwrite the first one's status and content).
                number = turn.state["unnamed_calls"] = turn.state.get("unnamed_calls", 0) + 1
                call.id = f"ls-call-{number}"
