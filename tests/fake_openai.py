"""A loopback fake of the OpenAI model APIs the real coding-agent CLIs call, with a request log.

The ``real_clients`` tests point Codex (the Responses API, ``POST /v1/responses``), Qwen Code
and Hermes Agent (chat completions, ``POST /v1/chat/completions``) at this server instead of a
real model. It answers from a script, one turn per model request, always streaming (Server-Sent
Events), and records every request body, so a test can assert what reached the model, and how
often. It binds ``127.0.0.1`` on a free port and runs in a thread of the test process; nothing
leaves the machine.

A ``Turn`` is either assistant text or one tool call (name and JSON arguments). When the script
runs out, the server answers ``"done"``. ``on_request(index, body)`` runs before the reply of
each request (index from 0): a test queues an instruction there, i.e. *while the agent runs*.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeOpenAI", "Turn"]


class Turn:
    """One scripted model reply: ``text``, or a tool call ``tool`` with ``arguments``."""

    def __init__(self, text: str | None = None, *, tool: str | None = None, arguments: Any = None) -> None:
        self.text = text
        self.tool = tool
        self.arguments = {} if arguments is None else arguments


class FakeOpenAI:
    """The server; use as a context manager (``with FakeOpenAI(script) as fake: fake.base_url``)."""

    def __init__(
        self,
        script: list[Turn] | None = None,
        *,
        on_request: Callable[[int, dict[str, Any]], None] | None = None,
        model: str = "fake-model",
    ) -> None:
        self.script = list(script or [])
        self.on_request = on_request
        self.model = model
        self.requests: list[dict[str, Any]] = []
        """Every model request body, in arrival order (``/responses`` and ``/chat/completions``)."""
        self.headers: list[dict[str, str]] = []
        """The headers of each model request, in the same order."""
        self.paths: list[str] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def count(self, text: str) -> int:
        """How many model requests carry ``text`` anywhere in their body."""
        return sum(1 for body in self.requests if text in json.dumps(body, ensure_ascii=False))

    def first_with(self, text: str) -> int | None:
        """The index of the first model request that carries ``text``, or ``None``."""
        for index, body in enumerate(self.requests):
            if text in json.dumps(body, ensure_ascii=False):
                return index
        return None

    # -- the HTTP side ----------------------------------------------------------------------

    def _turn(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Turn]:
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            self.headers.append(headers)
            turn = self.script[index] if index < len(self.script) else Turn("done")
        if self.on_request is not None:
            try:
                self.on_request(index, body)
            except Exception as exc:  # the test reads it; the client still gets its reply
                self.errors.append(f"on_request({index}): {exc!r}")
        return index, turn

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _json(self, status: int, payload: object) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                fake.paths.append("GET " + self.path)
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": fake.model, "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                fake.paths.append("POST " + self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                path = self.path.split("?")[0].rstrip("/")
                if path.endswith("/responses"):
                    self._stream(_responses_events(*fake._turn(body, dict(self.headers)), fake.model))
                elif path.endswith("/chat/completions"):
                    _, turn = fake._turn(body, dict(self.headers))
                    if body.get("stream"):
                        self._stream(_chat_chunks(turn, fake.model), done=True)
                    else:
                        self._json(200, _chat_message(turn, fake.model))
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def _stream(self, events: list[tuple[str | None, dict[str, Any]]], done: bool = False) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for name, data in events:
                    head = f"event: {name}\n" if name else ""
                    self.wfile.write(f"{head}data: {json.dumps(data)}\n\n".encode())
                if done:
                    self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        return Handler


def _usage_responses() -> dict[str, Any]:
    return {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }


def _responses_events(index: int, turn: Turn, model: str) -> list[tuple[str | None, dict[str, Any]]]:
    """The Responses API stream of one turn: created, the output item, completed."""
    response_id = f"resp_{index}_{uuid.uuid4().hex[:8]}"
    if turn.tool is not None:
        item: dict[str, Any] = {
            "type": "function_call",
            "id": f"fc_{index}",
            "call_id": f"call_{index}",
            "name": turn.tool,
            "arguments": json.dumps(turn.arguments),
            "status": "completed",
        }
    else:
        item = {
            "type": "message",
            "id": f"msg_{index}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": turn.text or "", "annotations": []}],
        }
    base = {"id": response_id, "object": "response", "model": model, "status": "in_progress", "output": []}
    events: list[tuple[str | None, dict[str, Any]]] = [
        ("response.created", {"type": "response.created", "response": base}),
        (
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": 0, "item": item},
        ),
    ]
    if turn.tool is None:
        events.append(
            (
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "item_id": item["id"],
                    "output_index": 0,
                    "content_index": 0,
                    "delta": turn.text or "",
                },
            )
        )
    events += [
        ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
        (
            "response.completed",
            {
                "type": "response.completed",
                "response": {**base, "status": "completed", "output": [item], "usage": _usage_responses()},
            },
        ),
    ]
    return events


def _chat_chunks(turn: Turn, model: str) -> list[tuple[str | None, dict[str, Any]]]:
    """The chat-completions stream of one turn: a role chunk, the content or tool call, a finish."""
    chat_id = f"chatcmpl-{uuid.uuid4().hex[:12]}"

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": chat_id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if usage:
            body["usage"] = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        return body

    if turn.tool is not None:
        call = {
            "index": 0,
            "id": f"call_{uuid.uuid4().hex[:8]}",
            "type": "function",
            "function": {"name": turn.tool, "arguments": json.dumps(turn.arguments)},
        }
        parts = [
            chunk({"role": "assistant", "content": None, "tool_calls": [call]}),
            chunk({}, "tool_calls", True),
        ]
    else:
        parts = [chunk({"role": "assistant", "content": turn.text or ""}), chunk({}, "stop", True)]
    return [(None, p) for p in parts]


def _chat_message(turn: Turn, model: str) -> dict[str, Any]:
    """A non-streaming chat completion (some clients ask for one, e.g. to name a session)."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or ""}
    finish = "stop"
    if turn.tool is not None:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{uuid.uuid4().hex[:8]}",
                    "type": "function",
                    "function": {"name": turn.tool, "arguments": json.dumps(turn.arguments)},
                }
            ],
        }
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
