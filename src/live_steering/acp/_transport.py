"""The stdio transport under the SDK's connection: it answers what the SDK would crash on.

The SDK's ``Connection`` accepts any message-level ``Transport`` (``send`` /
``receive`` of decoded dicts). Its own newline-JSON transport hands on whatever
``json.loads`` returns, and its receive loop dies on a line that is valid JSON
but not a JSON-RPC object (``5``, ``"x"``, ``[]``, a batch) and takes ``null``
for end of input: one bad line from a client ends every session. This transport
reads the lines itself and passes the SDK only well-formed envelopes; every
other line gets a JSON-RPC error response when it is a request whose id is
known, ``-32600`` / ``-32700`` with ``id: null`` otherwise, and is then dropped.

It also tells a request's handler its JSON-RPC id (``REQUEST_ID``) without a
stream observer: the SDK's observer hook deep-copies every message outside its
own error handling (a deeply nested line raised ``RecursionError`` there and
killed the server). ``receive`` runs in the SDK's receive-loop task, which
creates each request's handler task right after ``receive`` returns, and an
asyncio task starts with a copy of the creating task's context: setting the
context variable here is what the handler reads.

asyncio only, like the SDK. Never writes anything but JSON-RPC messages to the writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import os
import selectors
import sys
import threading
from typing import Any, Final, Protocol

__all__ = ["MAX_LINE_BYTES", "REQUEST_ID", "GuardedTransport", "open_stdio"]

_log = logging.getLogger(__name__)

#: The JSON-RPC id of the request whose handler task is running (``None``: unknown).
REQUEST_ID: contextvars.ContextVar[object] = contextvars.ContextVar(
    "live_steering_acp_request_id", default=None
)

#: Longest line read; a longer one is skipped whole and answered ``-32600`` (the SDK allows 50 MiB).
MAX_LINE_BYTES: Final = 50 * 1024 * 1024

INVALID_REQUEST: Final = -32600
INVALID_PARAMS: Final = -32602
PARSE_ERROR: Final = -32700
INTERNAL_ERROR: Final = -32603


def _valid_id(value: object) -> bool:
    """JSON-RPC ids are strings, integers or null (a bool is not an integer here)."""
    return value is None or type(value) is str or type(value) is int


def top_level_scalars(line: bytes) -> dict[str, object]:
    """The string, number, boolean and null members at the top of a JSON object, read without recursion.

    Nested values are skipped by counting brackets outside strings, so any depth
    costs O(len(line)) and no stack. Used only for a line ``json.loads`` cannot
    take; anything unreadable gives what was read so far.
    """
    found: dict[str, object] = {}
    text = line.decode("utf-8", "replace").strip()
    if not text.startswith("{"):
        return found
    i, depth, n = 1, 1, len(text)
    key: str | None = None
    while i < n and depth >= 1:
        char = text[i]
        if char == '"':
            end = i + 1
            while end < n and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            token = text[i : end + 1]
            i = end + 1
            if depth != 1:
                continue
            try:
                value = json.loads(token)
            except ValueError:
                return found
            rest = text[i:].lstrip()
            if key is None and rest.startswith(":"):
                key = value
                i = n - len(rest) + 1
            elif key is not None:
                found[key], key = value, None
        elif char in "{[":
            depth += 1
            key = None if depth == 2 else key
            i += 1
        elif char in "}]":
            depth -= 1
            i += 1
        elif depth == 1 and key is not None and char not in " \t\r\n,":
            end = i
            while end < n and text[end] not in ",}] \t\r\n":
                end += 1
            try:
                found[key] = json.loads(text[i:end])
            except ValueError:
                return found
            key, i = None, end
        else:
            i += 1
    return found


#: Method names a client may send meaning ``_session/steering`` (extension methods start with ``_``).
MISSPELT_METHODS: Final = frozenset({"session/steering", "session/steer"})

#: The ``hint`` of the error a misspelt steering method gets.
STEER_METHOD_HINT: Final = (
    "did you mean _session/steering? ACP extension methods start with an underscore; from the "
    'Python SDK\'s client: ext_method("session/steering", ...) (it adds the underscore), from '
    'the TypeScript SDK\'s: request("_session/steering", ...)'
)

METHOD_NOT_FOUND: Final = -32601


def misspelt_method_error(request_id: object, method: str) -> dict[str, Any]:
    """The ``-32601`` answer to ``session/steering`` (no ``_``), with a hint naming the method."""
    answer = error_response(request_id, METHOD_NOT_FOUND, "Method not found", STEER_METHOD_HINT)
    answer["error"]["data"] = {"method": method, "hint": STEER_METHOD_HINT}
    return answer


def error_response(request_id: object, code: int, message: str, details: str) -> dict[str, Any]:
    """A JSON-RPC error response."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": code, "message": message, "data": {"details": details}},
    }


def check_envelope(message: object) -> tuple[bool, list[dict[str, Any]]]:
    """``(pass it to the SDK, error responses to send)`` for one decoded line.

    A request (``method`` and ``id``) needs a string method, a valid id and object
    or array params; a notification the same without an id; a response a valid id
    and an object ``error`` if it has one. Anything else is not passed on; a
    request with a usable id is answered with that id, other garbage with ``null``.
    A batch (ACP has none) answers each request in it by its id.
    """
    if isinstance(message, list):
        answers = [
            error_response(item["id"], INVALID_REQUEST, "Invalid Request", "batches are not supported")
            for item in message
            if isinstance(item, dict) and "method" in item and "id" in item and _valid_id(item["id"])
        ]
        return False, answers or [error_response(None, INVALID_REQUEST, "Invalid Request", "a batch")]
    if not isinstance(message, dict):
        kind = f"a JSON {type(message).__name__}"
        return False, [error_response(None, INVALID_REQUEST, "Invalid Request", f"{kind} is not a request")]
    has_id = "id" in message
    request_id = message.get("id")
    if "method" in message:
        problem = None
        if type(message["method"]) is not str:
            problem = "method must be a string"
        elif has_id and not _valid_id(request_id):
            problem = "id must be a string, an integer or null"
        elif message.get("params") is not None and not isinstance(message["params"], dict | list):
            problem = "params must be an object or an array"
        if problem is None:
            return True, []
        if not has_id:
            return False, []  # a notification is never answered
        answer_id = request_id if _valid_id(request_id) else None
        return False, [error_response(answer_id, INVALID_REQUEST, "Invalid Request", problem)]
    if has_id and _valid_id(request_id):
        error = message.get("error")
        if error is None or isinstance(error, dict):
            return True, []  # a response to one of the agent's own requests
        return False, []  # a malformed response: the SDK would crash on it; nobody to answer
    return False, [
        error_response(None, INVALID_REQUEST, "Invalid Request", "neither a request nor a response")
    ]


class GuardedTransport:
    """The SDK ``Transport`` over asyncio stdio streams (see the module docstring).

    ``outstanding`` counts requests received and not yet answered, so a shutdown
    can wait until every answer is written (``wait_answered``).
    """

    def __init__(self, reader: asyncio.StreamReader, writer: Writer) -> None:
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()
        self._pending: set[object] = set()
        self._answered = asyncio.Event()
        self._closed = False

    @property
    def outstanding(self) -> int:
        return len(self._pending)

    async def send(self, message: dict[str, Any]) -> None:
        try:
            data = json.dumps(message, separators=(",", ":"))
        except (ValueError, TypeError, RecursionError):
            if "id" not in message or "method" in message:
                raise
            # An answer that cannot be encoded (its error data echoes a too-deep input)
            # is still an answer: the same code, without the data.
            error = message.get("error")
            code = error.get("code", INTERNAL_ERROR) if isinstance(error, dict) else INTERNAL_ERROR
            data = json.dumps(error_response(message["id"], code, "Error", "the answer could not be encoded"))
        async with self._lock:
            if self._closed:
                raise ConnectionError("the transport is closed")
            self._writer.write(data.encode("utf-8", "backslashreplace") + b"\n")
            await self._writer.drain()
        if "method" not in message and "id" in message:
            self._pending.discard(_key(message["id"]))
            self._answered.set()

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self._read_line()
            if line is None:
                return None
            line = line.strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except RecursionError:
                # Valid JSON perhaps, but nested deeper than the decoder goes: answer the
                # request by its id, read without recursion, so its client does not wait forever.
                scalars = top_level_scalars(line)
                request_id = scalars.get("id") if "method" in scalars else None
                if "method" in scalars and "id" not in scalars:
                    continue  # a notification is never answered
                answer_id = request_id if _valid_id(request_id) else None
                await self._answer(
                    error_response(answer_id, INVALID_REQUEST, "Invalid Request", "nested too deeply")
                )
                continue
            except UnicodeDecodeError:
                # JSON perhaps, with a byte that is not UTF-8 in it: a request is answered by its
                # id (read past the bad byte) as invalid params, so its client does not wait
                # forever; anything else is a parse error, as JSON-RPC says.
                scalars = top_level_scalars(line)
                request_id = scalars.get("id")
                if "method" in scalars and "id" in scalars and _valid_id(request_id):
                    await self._answer(
                        error_response(
                            request_id, INVALID_PARAMS, "Invalid params", "the line is not valid UTF-8"
                        )
                    )
                elif "method" not in scalars:
                    await self._answer(
                        error_response(None, PARSE_ERROR, "Parse error", "the line is not valid UTF-8")
                    )
                continue  # a notification is never answered
            except ValueError:
                await self._answer(error_response(None, PARSE_ERROR, "Parse error", "the line is not JSON"))
                continue
            passed, answers = check_envelope(message)
            for answer in answers:
                await self._answer(answer)
            if not passed:
                continue
            is_request = "method" in message and "id" in message
            if is_request and message["method"] in MISSPELT_METHODS:
                # The SDK would answer a bare "Method not found": say which name was meant.
                await self._answer(misspelt_method_error(message["id"], message["method"]))
                continue
            if is_request:
                self._pending.add(_key(message["id"]))
            REQUEST_ID.set(message["id"] if is_request else None)
            return message  # type: ignore[no-any-return]

    async def _answer(self, response: dict[str, Any]) -> None:
        try:
            await self.send(response)
        except (ConnectionError, OSError):
            _log.debug("could not answer a malformed line: the client is gone")

    async def _read_line(self) -> bytes | None:
        """One line (without a size limit beyond ``MAX_LINE_BYTES``), or ``None`` at end of input."""
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                chunk = await self._reader.readuntil(b"\n")
            except asyncio.LimitOverrunError as exc:
                chunk = await self._reader.readexactly(exc.consumed)
                size += len(chunk)
                if size <= MAX_LINE_BYTES:
                    chunks.append(chunk)
                continue
            except asyncio.IncompleteReadError as exc:
                if not exc.partial and not chunks:
                    return None
                chunk = exc.partial
            size += len(chunk)
            if size > MAX_LINE_BYTES:
                await self._answer(
                    error_response(None, INVALID_REQUEST, "Invalid Request", "the line is too long")
                )
                return b""
            chunks.append(chunk)
            return b"".join(chunks)

    async def wait_answered(self) -> None:
        """Wait until every request received so far has been answered."""
        while self._pending:
            self._answered.clear()
            await self._answered.wait()

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
        self._answered.set()
        with contextlib.suppress(OSError, RuntimeError):  # the pipe may be gone already
            self._writer.close()


class Writer(Protocol):
    """What the transport writes to: an ``asyncio.StreamWriter`` or ``_FileWriter``."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...


def _pollable(fd: int) -> bool:
    """True when the event loop can watch ``fd`` (a pipe, a socket, a terminal; not /dev/null or a file)."""
    selector = selectors.DefaultSelector()
    try:
        selector.register(fd, selectors.EVENT_READ)
    except (OSError, ValueError):
        return False
    finally:
        selector.close()
    return True


class _FileWriter:
    """Stdout that is a file (or /dev/null): plain blocking writes, which never wait on a reader."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    async def drain(self) -> None:
        await asyncio.sleep(0)

    def close(self) -> None:
        pass


def _feed_from_thread(loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader, fd: int) -> None:
    """Stdin the loop cannot watch (a file, /dev/null): read it in a daemon thread."""

    def pump() -> None:
        try:
            while data := os.read(fd, 1 << 16):
                loop.call_soon_threadsafe(reader.feed_data, data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is reading
                loop.call_soon_threadsafe(reader.feed_eof)

    threading.Thread(target=pump, name="live-steering-stdin", daemon=True).start()


async def open_stdio(limit: int = 1 << 20) -> tuple[asyncio.StreamReader, Writer]:
    """This process's stdin and stdout as an asyncio reader and a writer, whatever they are.

    Pipes, sockets and terminals are watched by the event loop (as the SDK's own
    ``stdio_streams`` does); a stdin or stdout the loop cannot watch (a file,
    ``/dev/null``: epoll refuses them) is served by a thread or by blocking
    writes, instead of hanging forever.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    if _pollable(stdin):
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    else:
        _feed_from_thread(loop, reader, stdin)
    if _pollable(stdout):
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout)
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)
    return reader, _FileWriter(stdout)


def _key(request_id: object) -> object:
    """Ids ``1`` and ``"1"`` are different requests."""
    return (type(request_id).__name__, request_id)
