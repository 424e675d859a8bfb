"""A loopback OpenAI-compatible Chat Completions server for the ACP tests, anyio (asyncio and trio).

Each ``POST /v1/chat/completions`` is answered by the next scripted ``Reply``: SSE chunks, a
gate to stop at until the test releases it, a tool call, 4xx/5xx, malformed JSON, a body cut
short, or no answer. Like OpenAI's API it enforces the conversation rules first
(``conversation_problem``): an assistant message with ``tool_calls`` must be followed by one
``tool`` message for each of its ids, and a ``tool`` message must answer such a call; a
request that breaks them gets HTTP 400 (with OpenAI's error shape) and uses up no reply.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import anyio
import anyio.abc

from live_steering.testing import Gate

WAIT = 20  # seconds: a hang becomes a failure; never an ordering tool
MAX_HEAD = 65_536  # bytes of request head the loopback server reads at most


def conversation_problem(messages: object) -> str | None:
    """What OpenAI would refuse this conversation for (its 400 messages), or ``None``."""
    if not isinstance(messages, list):
        return "'messages' must be a list"
    expected: list[str] = []  # the tool call ids still owed a tool message
    answerable: set[str] = set()
    for message in messages:
        role = message.get("role") if isinstance(message, dict) else None
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in answerable:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a preceding "
                    "message with 'tool_calls'."
                )
            answerable.discard(call_id)
            if call_id in expected:
                expected.remove(call_id)
            continue
        if expected:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages responding "
                f"to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                f"{', '.join(expected)}"
            )
        answerable = set()
        if role == "assistant" and message.get("tool_calls"):
            expected = [call["id"] for call in message["tool_calls"]]
            answerable = set(expected)
    if expected:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages responding "
            f"to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
            f"{', '.join(expected)}"
        )
    return None


def chunk(content: str | None = None, *, finish: str | None = None, calls: Any = None) -> dict[str, Any]:
    """One ``chat.completion.chunk`` as OpenAI-compatible servers stream them."""
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if calls is not None:
        delta["tool_calls"] = calls
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "c1", "object": "chat.completion.chunk", "choices": [choice]}


class Reply:
    """A scripted answer: a status, then SSE events (dicts, raw bytes, or a Gate to stop at)."""

    def __init__(
        self,
        *events: Any,
        status: int = 200,
        body: bytes | None = None,
        hang: bool = False,
        gate: Gate | None = None,
        done: bool = True,
        chunked: bool = False,
        cut: bool = False,
    ) -> None:
        self.gate = gate
        """Held here, before anything is sent, until the test releases it."""
        self.events = events
        self.status = status
        self.body = body
        self.hang = hang
        self.done = done
        """End the stream with ``data: [DONE]``; False: the body just ends (a cut stream)."""
        self.chunked = chunked
        """Send the body with ``Transfer-Encoding: chunked`` (each event a chunk of its own)."""
        self.cut = cut
        """Chunked: close the connection without the last (empty) chunk, as a broken body."""


class ChatServer:
    """Answers each POST /v1/chat/completions with the next ``Reply``; records every request."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.refusals: list[str] = []
        """The conversation rule each refused request broke (HTTP 400), in order."""
        self.changed = anyio.Event()
        self.port = 0

    def reset(self) -> None:
        self.replies.clear()
        self.requests.clear()
        self.headers.clear()
        self.refusals.clear()

    async def serve(self, listener: anyio.abc.Listener[anyio.abc.SocketStream]) -> None:
        await listener.serve(self._handle)

    async def _handle(self, stream: anyio.abc.SocketStream) -> None:
        # The agent may hang up at any point (a cancel, its own timeout): that ends this
        # exchange quietly, never the server.
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
            async with stream:
                await self._exchange(stream)

    async def _exchange(self, stream: anyio.abc.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            if len(data) > MAX_HEAD:
                raise ConnectionError("request head too long")
            data += await stream.receive()
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(body) < length:  # bounded: each receive brings at least one byte
            body += await stream.receive()
        self.headers.append(headers)
        request = json.loads(body)
        self.requests.append(request)
        problem = conversation_problem(request.get("messages"))
        if problem is not None:  # as OpenAI does: refused before any reply is used up
            self.refusals.append(problem)
            self.changed.set()
            self.changed = anyio.Event()
            payload = json.dumps({"error": {"message": problem, "type": "invalid_request_error"}}).encode()
            status_line = (
                f"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
            )
            await stream.send(status_line.encode() + payload)
            return
        reply = self.replies.pop(0)
        self.changed.set()
        self.changed = anyio.Event()
        if reply.gate is not None:
            await reply.gate.passage()
        if reply.hang:
            await stream.receive()  # say nothing until the agent gives up and hangs up
            return
        if reply.status != 200 or reply.body is not None:
            payload = reply.body or b'{"error": {"message": "scripted failure"}}'
            status_line = (
                f"HTTP/1.1 {reply.status} X\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
            )
            await stream.send(status_line.encode() + payload)
            return
        framing = b"Transfer-Encoding: chunked\r\n" if reply.chunked else b""
        await stream.send(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + framing + b"Connection: close\r\n\r\n"
        )

        async def send(data: bytes) -> None:
            await stream.send(b"%x\r\n%s\r\n" % (len(data), data) if reply.chunked else data)

        for event in reply.events:
            if isinstance(event, Gate):
                await event.passage()
            elif isinstance(event, bytes):
                await send(event)
            else:
                await send(b"data: " + json.dumps(event).encode() + b"\n\n")
        if reply.done:
            await send(b"data: [DONE]\n\n")
        if reply.chunked and not reply.cut:
            await stream.send(b"0\r\n\r\n")

    async def request(self, n: int) -> dict[str, Any]:
        """The ``n``-th request (1-based), waiting for it."""
        with anyio.fail_after(WAIT):
            while len(self.requests) < n:
                await self.changed.wait()
        return self.requests[n - 1]


@contextlib.asynccontextmanager
async def serving() -> Any:
    """A ``ChatServer`` on a loopback port of its own, for the length of the block."""
    chat = ChatServer()
    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
        anyio.create_task_group() as tg,
    ):
        chat.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        tg.start_soon(chat.serve, listener)
        yield chat
        tg.cancel_scope.cancel()
