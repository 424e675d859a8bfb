"""A hostile client against ``live-steering acp`` over raw stdio: 0 crashes, 0 hangs, only valid JSON-RPC.

The client side here writes bytes, not SDK calls, so it can send what no SDK
would: lines that are not objects, batches, broken JSON, bad envelopes, deep
nesting, huge prompts, unknown methods and sessions, bursts, and it can
disconnect or SIGTERM the agent mid-turn. Every line the agent writes must be a
valid JSON-RPC 2.0 message, every request with a usable id must get exactly one
answer, and the agent must keep serving and exit 0. The agent runs with
``--client-paced`` so "mid-turn" is a state the test waits for, never a sleep;
``anyio.fail_after`` only turns a hang into a failure. The agent is an asyncio
program (the SDK is asyncio-only), so these tests run on asyncio.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

pytest.importorskip("acp")

from live_steering.acp._transport import check_envelope

pytestmark = pytest.mark.anyio

WAIT = 20  # seconds: a hang becomes a failure; never an ordering tool


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """asyncio only: the agent under test is the SDK's asyncio program, in a subprocess."""
    return "asyncio"


def valid_jsonrpc(message: object) -> bool:
    """A JSON-RPC 2.0 response or notification/request as the spec defines it."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return False
    if "method" in message:
        return isinstance(message["method"], str)
    if "id" not in message or ("result" in message) == ("error" in message):
        return False
    request_id = message["id"]
    if request_id is not None and type(request_id) not in (str, int):
        return False
    if "error" in message:
        error = message["error"]
        return (
            isinstance(error, dict)
            and type(error.get("code")) is int
            and isinstance(error.get("message"), str)
        )
    return True


class RawAgent:
    """``live-steering acp --client-paced`` in a subprocess, spoken to in raw lines."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.messages: list[dict[str, Any]] = []
        self.invalid: list[bytes] = []
        self.changed = anyio.Event()
        self._stderr: list[bytes] = []
        self._stderr_closed = anyio.Event()

    async def read_stderr(self) -> None:
        assert self.process.stderr is not None
        async for chunk in self.process.stderr:
            self._stderr.append(chunk)
        self._stderr_closed.set()

    async def errors(self) -> str:
        """Everything the agent wrote on stderr (waits for the end of it)."""
        with anyio.fail_after(WAIT):
            await self._stderr_closed.wait()
        return b"".join(self._stderr).decode("utf-8", "replace")

    async def read(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        async for chunk in self.process.stdout:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                try:
                    message = json.loads(line)
                except ValueError:
                    self.invalid.append(line)
                    continue
                if valid_jsonrpc(message):
                    self.messages.append(message)
                else:
                    self.invalid.append(line)
            self.changed.set()
            self.changed = anyio.Event()

    async def send(self, *messages: object) -> None:
        await self.send_lines(*(json.dumps(m).encode() for m in messages))

    async def send_lines(self, *lines: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(b"".join(line + b"\n" for line in lines))

    def answers(self, request_id: object) -> list[dict[str, Any]]:
        return [m for m in self.messages if "method" not in m and m.get("id") == request_id
                and type(m.get("id")) is type(request_id)]  # fmt: skip

    async def answer(self, request_id: object) -> dict[str, Any]:
        with anyio.fail_after(WAIT):
            while not (found := self.answers(request_id)):
                await self.changed.wait()
        return found[0]

    async def update(self, predicate: Any) -> dict[str, Any]:
        with anyio.fail_after(WAIT):
            while True:
                for m in self.messages:
                    if m.get("method") == "session/update" and predicate(m["params"]["update"]):
                        return m
                await self.changed.wait()

    async def request(self, request_id: int, method: str, params: Any) -> dict[str, Any]:
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return await self.answer(request_id)

    async def start(self) -> str:
        """initialize + session/new; returns the session id."""
        init = await self.request(1, "initialize", {"protocolVersion": 1})
        assert init["result"]["_meta"] == {
            "steering": {"supported": True},
            "liveSteering": {"kinds": ["steer", "follow_up"]},
        }
        return str(
            (await self.request(2, "session/new", {"cwd": "/", "mcpServers": []}))["result"]["sessionId"]
        )

    async def in_flight(self, request: int) -> None:
        await self.update(lambda u: (u.get("_meta") or {}).get("liveSteering", {}).get("request") == request
                          and u["sessionUpdate"] == "agent_thought_chunk")  # fmt: skip

    async def wait_exit(self) -> int:
        with anyio.fail_after(WAIT):
            return await self.process.wait()


@pytest.fixture
async def raw() -> AsyncIterator[RawAgent]:
    command = [sys.executable, "-m", "live_steering._cli", "acp", "--client-paced", "--steps=2"]
    async with await anyio.open_process(command) as process, anyio.create_task_group() as tg:
        agent = RawAgent(process)
        tg.start_soon(agent.read)
        tg.start_soon(agent.read_stderr)
        try:
            yield agent
        finally:
            if process.returncode is None:
                process.kill()
            tg.cancel_scope.cancel()
    assert agent.invalid == [], "the agent wrote something that is not valid JSON-RPC"


def _steer(session_id: object, text: str, **meta: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
    if meta:
        params["_meta"] = {"steering": meta}
    return params


class Raw(str):
    """JSON text sent as is (too deep for the test's own ``json.dumps``)."""


def _nested(depth: int) -> Raw:
    return Raw('{"k":' * depth + '"leaf"' + "}" * depth)


def _line(request_id: int, method: str, params: Any) -> bytes:
    """One request line; ``Raw`` values anywhere at the top of ``params`` are spliced in as text."""
    if isinstance(params, dict):
        parts = [f"{json.dumps(k)}:{v if isinstance(v, Raw) else json.dumps(v)}" for k, v in params.items()]
        text = "{" + ",".join(parts) + "}"
    else:
        text = params if isinstance(params, Raw) else json.dumps(params)
    return f'{{"jsonrpc":"2.0","id":{request_id},"method":{json.dumps(method)},"params":{text}}}'.encode()


# -- the envelope check, without a process ---------------------------------------------------

ENVELOPES = [
    (5, False, None),
    ("x", False, None),
    (True, False, None),
    (None, False, None),
    ([], False, None),
    ([{"jsonrpc": "2.0", "id": 1, "method": "initialize"}], False, 1),
    ({}, False, None),
    ({"jsonrpc": "2.0", "id": 7, "method": 5}, False, 7),
    ({"jsonrpc": "2.0", "id": [1], "method": "x"}, False, None),
    ({"jsonrpc": "2.0", "id": True, "method": "x"}, False, None),
    ({"jsonrpc": "2.0", "id": 8, "method": "x", "params": 5}, False, 8),
    ({"jsonrpc": "2.0", "method": 5}, False, "no answer"),
    ({"jsonrpc": "2.0", "id": 9, "error": 5}, False, "no answer"),
    ({"jsonrpc": "2.0", "id": {"a": 1}, "result": 1}, False, None),
    ({"jsonrpc": "2.0", "id": 3, "method": "session/new", "params": {}}, True, "no answer"),
    ({"jsonrpc": "2.0", "id": None, "method": "session/new"}, True, "no answer"),
    ({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}}, True, "no answer"),
    ({"jsonrpc": "2.0", "id": 4, "result": {}}, True, "no answer"),
]


@pytest.mark.parametrize(("message", "passed", "answer_id"), ENVELOPES)
def test_envelope_check(message: object, passed: bool, answer_id: object) -> None:
    """Only well-formed envelopes reach the SDK; a bad request is answered -32600 with its id when usable."""
    ok, answers = check_envelope(message)
    assert ok is passed
    if answer_id == "no answer":
        assert answers == []
    else:
        [answer] = answers
        assert valid_jsonrpc(answer)
        assert answer["id"] == answer_id
        assert answer["error"]["code"] == -32600


# -- the corpus, against the real agent ------------------------------------------------------

GARBAGE = [
    b"5", b'"x"', b"true", b"false", b"null", b"[]", b"[1, 2]", b"{}", b"{", b'{"a":', b"not json",
    b"\xff\xfe\x00", b"[" * 100_000, b'{"jsonrpc":"2.0","id":{"a":1},"result":1}',
    b'{"jsonrpc":"2.0","id":5,"error":"boom"}', b'{"jsonrpc":"2.0","id":424242,"result":{}}',
    b'{"jsonrpc":"2.0","method":"nothing/here"}', b'{"jsonrpc":"2.0","method":7}',
]  # fmt: skip


@pytest.mark.parametrize(
    "capabilities", ["nope", [1], {"fs": "yes"}, {"fs": {"readTextFile": "maybe"}}, {"terminal": 3}]
)
async def test_malformed_client_capabilities_leave_sessions_working(
    raw: RawAgent, capabilities: object
) -> None:
    """The SDK salvages a malformed clientCapabilities into a dict of defaults: initialize answers,
    and session/new still opens a session (it broke with an internal error), without file reads."""
    init = await raw.request(1, "initialize", {"protocolVersion": 1, "clientCapabilities": capabilities})
    assert "result" in init
    new = await raw.request(2, "session/new", {"cwd": "/", "mcpServers": []})
    assert new["result"]["sessionId"].startswith("sess-")


async def test_hostile_corpus_never_kills_the_agent(raw: RawAgent) -> None:
    """Every hostile line: no crash, no hang, each request with a usable id answered once, validly."""
    sid = await raw.start()
    await raw.send_lines(*GARBAGE)
    batch = [{"jsonrpc": "2.0", "id": 30, "method": "initialize", "params": {"protocolVersion": 1}}]
    requests: list[tuple[int, str, Any]] = [
        (10, "foo/bar", {}),
        (11, "_unknown/extension", {}),
        (12, "session/prompt", {"sessionId": "no-such-session", "prompt": [{"type": "text", "text": "x"}]}),
        (13, "_session/steering", _steer("no-such-session", "x")),
        (14, "_session/steering", _steer(5, "x")),
        (15, "_session/steering", _steer(None, "x")),
        (16, "_session/steering", {"sessionId": sid, "prompt": _nested(500)}),
        (
            17,
            "_session/steering",
            {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}], "_meta": _nested(990)},
        ),
        (18, "session/prompt", {"sessionId": sid, "prompt": Raw("[" + _nested(990) + "]")}),
        (19, "_session/steering", _steer(sid, "x" * 10_000_000)),
        (20, "_session/steering", _steer(sid, "nul \x00 inside")),
        (21, "_session/steering", _steer(sid, "x", idleBehavior="sometimes")),
        (22, "_session/steering", "not an object"),
        (23, "session/new", 5),
        (24, "session/cancel", {"sessionId": 5}),  # a notification sent as a request
        (25, "_session/steering", _steer(sid, "x", id="y" * 129)),
        (
            26,
            "session/prompt",
            {"sessionId": "no-such-session", "prompt": [{"type": "text", "text": "y" * 10**7}]},
        ),
        (27, "__session/steering", _steer(sid, "x")),  # ext_method("_session/steering") from the SDK
        (28, "session/steering", _steer(sid, "x")),  # the extension method without its underscore
    ]
    await raw.send_lines(*(_line(i, m, p) for i, m, p in requests))
    await raw.send_lines(
        json.dumps(batch).encode(), json.dumps({"id": 31, "method": "x", "params": 5}).encode()
    )
    deep = b'{"k":' * 5_000 + b"1" + b"}" * 5_000  # too deep for json.loads: a parse error, answered
    await raw.send_lines(b'{"jsonrpc":"2.0","id":32,"method":"x","params":' + deep + b"}")
    # A raw byte that is not UTF-8 in an otherwise good request: answered by its id, not id null.
    for request_id, method in ((33, "session/prompt"), (34, "_session/steering")):
        prompt = b'{"sessionId":"%s","prompt":[{"type":"text","text":"fix \xff it"}]}' % sid.encode()
        await raw.send_lines(
            b'{"jsonrpc":"2.0","id":%d,"method":"%s","params":%s}' % (request_id, method.encode(), prompt)
        )
    for request_id in (33, 34):
        not_utf8 = (await raw.answer(request_id))["error"]
        assert (not_utf8["code"], not_utf8["data"]["details"]) == (-32602, "the line is not valid UTF-8")
        assert len(raw.answers(request_id)) == 1
    for request_id, _, _ in requests:
        answer = await raw.answer(request_id)
        assert "error" in answer, (request_id, answer)
        assert len(raw.answers(request_id)) == 1
    # The idle steers that must be refused were refused: no turn was started by any of them.
    for request_id in (16, 19, 20, 21, 25):
        assert (await raw.answer(request_id))["error"]["code"] == -32602, request_id
    # 990 levels is deeper than the JSON decoder goes: still answered, by the request's own id.
    for request_id in (17, 18):
        assert (await raw.answer(request_id))["error"]["data"]["details"] == "nested too deeply"
    assert (await raw.answer(31))["error"]["code"] == -32600
    hint = (await raw.answer(27))["error"]["data"]["hint"]
    assert 'ext_method("session/steering"' in hint
    misspelt = (await raw.answer(28))["error"]
    assert (misspelt["code"], misspelt["data"]["method"]) == (-32601, "session/steering")
    assert misspelt["data"]["hint"].startswith("did you mean _session/steering?")
    assert (await raw.answer(30))["error"]["code"] == -32600  # the batch element, answered by its id
    null_answers = [m for m in raw.messages if "method" not in m and m.get("id") is None]
    assert {a["error"]["code"] for a in null_answers} <= {-32600, -32700}
    assert len(null_answers) >= 14
    # Still serving, and no turn was ever started by the hostile steers.
    alive = await raw.request(
        40, "_session/steering", _steer(sid, "A fine steer", idleBehavior="promptRequired")
    )
    assert alive["result"]["outcome"] == "promptRequired"
    assert not any(m.get("method") == "session/update" for m in raw.messages)
    assert raw.process.stdin is not None
    await raw.process.stdin.aclose()
    assert await raw.wait_exit() == 0
    assert "Traceback" not in await raw.errors()


async def test_burst_of_a_thousand_steers_lands_in_order(raw: RawAgent) -> None:
    """1,000 pipelined steers during one request: all injected, all written, in order, before the next one."""
    sid = await raw.start()
    await raw.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                    "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "Go"}]}})  # fmt: skip
    await raw.in_flight(1)
    await raw.send(*({"jsonrpc": "2.0", "id": 100 + n, "method": "_session/steering",
                      "params": _steer(sid, f"burst {n}")} for n in range(1_000)))  # fmt: skip
    outcomes = {(await raw.answer(100 + n))["result"]["outcome"] for n in range(1_000)}
    assert outcomes == {"injected"}
    await raw.send(
        {"jsonrpc": "2.0", "method": "_liveSteering/step", "params": {"sessionId": sid, "count": 5}}
    )
    response = await raw.answer(3)
    assert response["result"]["stopReason"] == "end_turn"
    applied = response["result"]["_meta"]["liveSteering"]["appliedInputIds"]
    assert applied == [
        (await raw.answer(100 + n))["result"]["_meta"]["liveSteering"]["inputId"] for n in range(1_000)
    ]
    landed = await raw.update(lambda u: u["sessionUpdate"] == "agent_message_chunk"
                              and u["_meta"]["liveSteering"]["request"] == 2)  # fmt: skip
    texts = [e["text"] for e in landed["params"]["update"]["_meta"]["liveSteering"]["received"]]
    assert texts == [f"burst {n}" for n in range(1_000)]


async def test_a_steer_sent_as_a_notification_is_decided_and_lands(raw: RawAgent) -> None:
    """A ``_session/steering`` notification (no request id, so no answer) mid-turn is decided as a
    request is, in arrival order with the steers after it, and written before the next model
    request; a refused one (unknown session) is dropped without an answer and the agent goes on."""
    sid = await raw.start()
    await raw.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                    "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "Go"}]}})  # fmt: skip
    await raw.in_flight(1)
    await raw.send(
        {"jsonrpc": "2.0", "method": "_session/steering", "params": _steer("sess-nobody", "Lost")},
        {"jsonrpc": "2.0", "method": "_session/steering", "params": _steer(sid, "By notification")},
    )
    after = await raw.request(4, "_session/steering", _steer(sid, "By request"))
    assert after["result"]["outcome"] == "injected"
    await raw.send(
        {"jsonrpc": "2.0", "method": "_liveSteering/step", "params": {"sessionId": sid, "count": 5}}
    )
    response = await raw.answer(3)
    applied = response["result"]["_meta"]["liveSteering"]["appliedInputIds"]
    assert len(applied) == 2
    assert applied[1] == after["result"]["_meta"]["liveSteering"]["inputId"]
    landed = await raw.update(lambda u: u["sessionUpdate"] == "agent_message_chunk"
                              and u["_meta"]["liveSteering"]["request"] == 2)  # fmt: skip
    texts = [e["text"] for e in landed["params"]["update"]["_meta"]["liveSteering"]["received"]]
    assert texts == ["By notification", "By request"]
    assert [m for m in raw.messages if "method" not in m and m.get("id") is None] == []


async def test_steers_after_the_turn(raw: RawAgent) -> None:
    """After a turn: a retry of its steer repeats the final receipt (applied), a new steer starts a turn."""
    sid = await raw.start()
    await raw.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                    "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "Go"}]}})  # fmt: skip
    await raw.in_flight(1)
    first = await raw.request(4, "_session/steering", _steer(sid, "Once", id="s-1"))
    assert first["result"]["outcome"] == "injected"
    await raw.send(
        {"jsonrpc": "2.0", "method": "_liveSteering/step", "params": {"sessionId": sid, "count": 5}}
    )
    await raw.answer(3)
    retry = await raw.request(5, "_session/steering", _steer(sid, "Once", id="s-1"))
    assert retry["result"]["outcome"] == "injected"
    assert retry["result"]["_meta"]["liveSteering"]["repeated"] is True
    assert retry["result"]["_meta"]["liveSteering"]["receipt"]["disposition"] == "applied"
    fresh = await raw.request(6, "_session/steering", _steer(sid, "Next"))
    assert fresh["result"]["outcome"] == "startedNewTurn"


async def _mid_turn_with_a_pending_steer(raw: RawAgent) -> tuple[str, str]:
    sid = await raw.start()
    await raw.send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                    "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "Go"}]}})  # fmt: skip
    await raw.in_flight(1)
    steer = await raw.request(4, "_session/steering", _steer(sid, "Pending"))
    return sid, str(steer["result"]["_meta"]["liveSteering"]["inputId"])


async def test_client_disconnect_mid_turn_exits_cleanly(raw: RawAgent) -> None:
    """The client closes stdin while a turn runs: the agent cancels it and exits 0, no traceback."""
    await _mid_turn_with_a_pending_steer(raw)
    assert raw.process.stdin is not None
    await raw.process.stdin.aclose()
    assert await raw.wait_exit() == 0
    assert "Traceback" not in await raw.errors()


async def test_sigterm_mid_turn_answers_cancelled_and_holds(raw: RawAgent) -> None:
    """SIGTERM mid-turn: the prompt is answered cancelled, the pending steer held and said so, exit 0."""
    sid, input_id = await _mid_turn_with_a_pending_steer(raw)
    raw.process.send_signal(signal.SIGTERM)
    response = await raw.answer(3)
    assert response["result"]["stopReason"] == "cancelled"
    assert response["result"]["_meta"]["liveSteering"]["heldInputIds"] == [input_id]
    settled = await raw.update(lambda u: "steer" in (u.get("_meta") or {}).get("liveSteering", {}))
    assert settled["params"]["update"]["_meta"]["liveSteering"]["steer"] == {
        "inputId": input_id, "turnId": f"{sid}-turn-1", "disposition": "held", "reason": "generation-stopped"
    }  # fmt: skip
    assert await raw.wait_exit() == 0
    assert "Traceback" not in await raw.errors()


def test_stdin_and_stdout_that_are_files(tmp_path: Path) -> None:
    """Stdin from a file (the event loop cannot watch one) and stdout to a file: served, then exit 0."""
    import subprocess

    requests = tmp_path / "in.jsonl"
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}, 5]
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines))
    answers = tmp_path / "out.jsonl"
    with requests.open("rb") as stdin, answers.open("wb") as stdout:
        done = subprocess.run([sys.executable, "-m", "live_steering._cli", "acp"], stdin=stdin, stdout=stdout,
                              stderr=subprocess.PIPE, timeout=WAIT, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    messages = [json.loads(line) for line in answers.read_text().splitlines()]
    assert all(valid_jsonrpc(m) for m in messages)
    assert sorted(str(m["id"]) for m in messages) == ["1", "None"]


class _Captured:
    """A writer for the transport that keeps what it was given."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


async def test_an_over_long_line_is_skipped_and_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    """A line over MAX_LINE_BYTES is read to its end in chunks, answered -32600, and the next one served."""
    import asyncio

    from live_steering.acp import _transport

    monkeypatch.setattr(_transport, "MAX_LINE_BYTES", 1_000)
    reader = asyncio.StreamReader(limit=100)  # smaller than the line: the chunked path
    good = {"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {"protocolVersion": 1}}
    reader.feed_data(b'{"a": "' + b"x" * 5_000 + b'"}\n' + json.dumps(good).encode() + b"\n")
    reader.feed_eof()
    writer = _Captured()
    transport = _transport.GuardedTransport(reader, writer)
    assert await transport.receive() == good
    assert await transport.receive() is None
    [answer] = [json.loads(line) for line in writer.data.splitlines()]
    assert (answer["id"], answer["error"]["code"], answer["error"]["data"]["details"]) == (
        None, -32600, "the line is too long"
    )  # fmt: skip
    assert transport.outstanding == 1  # the initialize, handed on, not answered yet
