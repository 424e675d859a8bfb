"""A loopback fake of the Anthropic Messages API, for running the real Claude Code CLI in tests.

``FakeAnthropic(reply)`` serves ``POST /v1/messages`` (streaming Server-Sent Events, or one
JSON message when the request does not stream) and ``POST /v1/messages/count_tokens`` on
127.0.0.1 at a free port, in a thread. ``reply(body)`` decides each answer from the request
body: a list of content blocks (``text(...)``, ``tool_use(...)``); every request is kept in
``requests`` (the request log), in arrival order. Only the wire shapes of the public API
reference are spoken (message_start, content_block_start/delta/stop, message_delta,
message_stop); nothing here knows Claude Code's internals.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Block = dict[str, Any]
Reply = Callable[[dict[str, Any]], list[Block]]

_ids = itertools.count(1)


def text(value: str) -> Block:
    """A text content block."""
    return {"type": "text", "text": value}


def tool_use(name: str, arguments: dict[str, Any]) -> Block:
    """A tool_use content block with a fresh id."""
    return {"type": "tool_use", "id": f"toolu_fake{next(_ids):04d}", "name": name, "input": arguments}


def _flatten(content: object) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)


def first_user_text(body: dict[str, Any]) -> str:
    """The first user message of a request, as text (which conversation it belongs to)."""
    for message in body.get("messages", []):
        if message.get("role") == "user":
            return _flatten(message.get("content"))
    return ""


def last_is_tool_result(body: dict[str, Any]) -> bool:
    """True when the request's last message carries a tool_result (a tool round just ended)."""
    messages = body.get("messages", [])
    if not messages:
        return False
    content = messages[-1].get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


def tool_names(body: dict[str, Any]) -> list[str]:
    return [str(t.get("name")) for t in body.get("tools", []) or []]


def occurrences(body: dict[str, Any], marker: str) -> int:
    """How many times ``marker`` appears in what the model is sent (system, messages)."""
    sent = _flatten(body.get("system", "")) + _flatten(body.get("messages", []))
    return sent.count(marker)


def _events(model: str, blocks: list[Block]) -> list[tuple[str, dict[str, Any]]]:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    out: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": f"msg_fake{next(_ids):04d}",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
        )
    ]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            out.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            out.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": start},
                )
            )
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        out.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        )
    )
    out.append(("message_stop", {"type": "message_stop"}))
    return out


class FakeAnthropic:
    """The fake server; use as a context manager. ``url`` is its base URL (ANTHROPIC_BASE_URL)."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        """Every ``/v1/messages`` request body, in arrival order (the request log)."""
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def _send_json(self, status: int, payload: object) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": "no"}})

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(size) or b"{}")
                path = self.path.split("?")[0]
                if path.endswith("/count_tokens"):
                    self._send_json(200, {"input_tokens": 10})
                    return
                if not path.endswith("/v1/messages"):
                    self._send_json(
                        404, {"type": "error", "error": {"type": "not_found_error", "message": path}}
                    )
                    return
                with fake.lock:
                    fake.requests.append(body)
                try:
                    blocks = fake.reply(body)
                except Exception as exc:  # a broken script must fail the test, not hang the CLI
                    blocks = [text(f"fake server script failed: {exc!r}")]
                model = str(body.get("model", "claude-fake"))
                if not body.get("stream"):
                    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
                    self._send_json(
                        200,
                        {
                            "id": f"msg_fake{next(_ids):04d}",
                            "type": "message",
                            "role": "assistant",
                            "model": model,
                            "content": blocks,
                            "stop_reason": stop,
                            "stop_sequence": None,
                            "usage": {"input_tokens": 10, "output_tokens": 5},
                        },
                    )
                    return
                chunks = b"".join(
                    f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                    for name, data in _events(model, blocks)
                )
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("content-length", str(len(chunks)))
                self.end_headers()
                self.wfile.write(chunks)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeAnthropic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def agent_requests(self) -> list[dict[str, Any]]:
        """The requests of the agent loops (those offering tools), in order."""
        with self.lock:
            return [r for r in self.requests if r.get("tools")]
