"""End to end: ``live-steering acp --openai-base-url ...`` against a loopback Chat Completions server.

The server is the test's own (anyio TCP on 127.0.0.1, a little HTTP/1.1): each
request the agent makes is answered by the next scripted reply, which may stream
SSE chunks, stop at a gate until the test releases it, call a tool, answer
4xx/5xx, send malformed JSON or never answer. The ACP client is the SDK's own
(``acp.spawn_agent_process``) and serves ``fs/read_text_file`` and
``session/request_permission``; where the client must die, raw lines stand in for it. The
SDK is asyncio-only, so these tests run on asyncio; a gate, not a sleep, decides when a steer
arrives.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.abc
import pytest

pytest.importorskip("acp")
pytest.importorskip("httpx")

import acp
from acp.schema import (
    AgentMessageChunk,
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    ReadTextFileResponse,
    RequestPermissionResponse,
    SessionInfoUpdate,
    ToolCallProgress,
    ToolCallStart,
)

from acp_chat_server import WAIT, ChatServer, Reply, chunk, serving
from live_steering.acp.chat_completions import (
    DEFAULT_SYSTEM_PROMPT,
    TOOL_CANCELLED_RESULT,
    TRUNCATED_STREAM_MESSAGE,
    api_key_from_env,
)
from live_steering.testing import Gate

pytestmark = pytest.mark.anyio

#: The agent's endpoint timeout (``--timeout``) in the one test of that timeout. Every other test
#: shares an agent with the default (120 s): a gated reply is held while the test makes round
#: trips to the agent process, which a loaded machine stretches, and a short timeout raced them.
IMPATIENT = 5
KEY = "sk-test-secret-4f1c"
#: Seconds the agent may take to exit once its client is gone: a bound against a hang on a loaded
#: 2-core machine, never a measurement.
EXIT_WAIT = 30
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """asyncio only: the ACP SDK's connection is built on asyncio streams and tasks."""
    return "asyncio"


# -- the loopback server (tests/acp_chat_server.py) ------------------------------------------


@pytest.fixture(scope="module")
async def chat_server() -> AsyncIterator[ChatServer]:
    """One loopback server for the module (each test resets it through ``server``)."""
    async with serving() as chat:
        yield chat


@pytest.fixture
def server(chat_server: ChatServer) -> ChatServer:
    """The loopback server with no requests recorded and no replies left over."""
    chat_server.reset()
    return chat_server


# -- the ACP client --------------------------------------------------------------------------


class EditorClient:
    """The SDK client side: files it serves, a permission answer, every update recorded."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.updates: list[Any] = []
        self.read_gate: Gate | None = None
        self.allow = False
        self.permission_requests: list[Any] = []
        self._changed = anyio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        self._changed.set()
        self._changed = anyio.Event()

    async def read_text_file(self, session_id: str, path: str, **kwargs: Any) -> ReadTextFileResponse:
        if self.read_gate is not None:
            await self.read_gate.passage()
        if path not in self.files:
            raise acp.RequestError.resource_not_found(path)
        return ReadTextFileResponse(content=self.files[path])

    async def request_permission(self, session_id: str, tool_call: Any, options: Any, **kwargs: Any) -> Any:
        self.permission_requests.append(tool_call)
        if self.allow:
            return RequestPermissionResponse(
                outcome=AllowedOutcome(outcome="selected", option_id="allow-once")
            )
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    async def wait_for(self, predicate: Callable[[Any], bool]) -> Any:
        with anyio.fail_after(WAIT):
            while True:
                for update in self.updates:
                    if predicate(update):
                        return update
                await self._changed.wait()

    def text(self) -> str:
        return "".join(u.content.text for u in self.updates if isinstance(u, AgentMessageChunk))

    def message_ids(self) -> list[str | None]:
        """The ``messageId`` of every agent message chunk, in order."""
        return [u.message_id for u in self.updates if isinstance(u, AgentMessageChunk)]


class Agent:
    def __init__(self, conn: Any, client: EditorClient, process: Any) -> None:
        self.conn = conn
        self.client = client
        self.process = process

    async def session(self) -> str:
        return cast("str", (await self.conn.new_session(cwd="/project", mcp_servers=[])).session_id)

    async def steer(self, session_id: str, text: str, *, kind: str | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}]}
        if kind is not None:
            params["_meta"] = {"liveSteering": {"kind": kind}}
        return cast("dict[str, Any]", await self.conn.ext_method("session/steering", params))


def _agent_command(port: int, *extra: str, key_env: str | None = "LIVE_STEERING_TEST_KEY") -> tuple[str, ...]:
    key = (f"--api-key-env={key_env}",) if key_env else ()
    return (sys.executable, "-m", "live_steering._cli", "acp", f"--openai-base-url=http://127.0.0.1:{port}/v1",
            "--model=test-model", *key, *extra)  # fmt: skip


@contextlib.asynccontextmanager
async def _spawned_agent(port: int, *extra: str) -> AsyncIterator[Agent]:
    """The real-model agent in a process of its own, pointed at the loopback server; it exits 0
    and never prints the API key."""
    client = EditorClient({"/project/notes.txt": "Remember: tabs, not spaces."})
    env = {**os.environ, "LIVE_STEERING_TEST_KEY": KEY}
    command = _agent_command(port, *extra)
    async with acp.spawn_agent_process(cast("acp.Client", client), *command, env=env) as (conn, process):
        capabilities = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True))
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=capabilities)
        yield Agent(conn, client, process)
    assert process.returncode == 0
    assert process.stderr is not None
    assert KEY.encode() not in await process.stderr.read()


@pytest.fixture(scope="module")
async def shared_agent(chat_server: ChatServer) -> AsyncIterator[Agent]:
    """The real-model agent (one process for the module), with its default endpoint timeout."""
    async with _spawned_agent(chat_server.port) as agent:
        yield agent


@pytest.fixture
async def impatient_agent(server: ChatServer) -> AsyncIterator[Agent]:
    """An agent of its own that gives the endpoint only ``IMPATIENT`` seconds."""
    async with _spawned_agent(server.port, f"--timeout={IMPATIENT}") as agent:
        yield agent


@pytest.fixture
def agent(shared_agent: Agent, server: ChatServer) -> Agent:
    """The shared agent with a fresh client record (each test uses its own new session)."""
    client = shared_agent.client
    client.updates.clear()
    client.read_gate = None
    client.allow = False
    client.permission_requests.clear()
    return shared_agent


def _settled(update: Any) -> dict[str, Any] | None:
    if isinstance(update, SessionInfoUpdate) and update.field_meta:
        return cast("dict[str, Any] | None", update.field_meta["liveSteering"].get("steer"))
    return None


async def test_streaming_reply_and_a_steer_during_the_stream(server: ChatServer, agent: Agent) -> None:
    """Chunks stream as agent messages; a steer sent mid-stream is in the next request of the same turn."""
    gate = Gate()
    server.replies += [
        Reply(chunk("Hel"), gate, chunk("lo"), chunk(finish="stop")),
        Reply(chunk("Noted"), chunk(finish="stop")),
    ]
    sid = await agent.session()
    results: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def prompt() -> None:
            results.append(await agent.conn.prompt(session_id=sid, prompt=[acp.text_block("Say hello")]))

        tg.start_soon(prompt)
        await gate.wait_reached()
        await agent.client.wait_for(lambda u: isinstance(u, AgentMessageChunk) and u.content.text == "Hel")
        steer = await agent.steer(sid, "Use British spelling")
        assert steer["outcome"] == "injected"
        gate.release()
    response = results[0]
    assert response.stop_reason == "end_turn"
    input_id = steer["_meta"]["liveSteering"]["inputId"]
    assert response.field_meta["liveSteering"]["appliedInputIds"] == [input_id]
    first, second = server.requests
    assert first["stream"] is True
    assert first["model"] == "test-model"
    assert first["messages"][0] == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert second["messages"][-2:] == [
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Use British spelling"},
    ]
    # The two replies of the turn are two messages: their own messageIds, and a blank line between
    # them for clients that show a turn's chunks as one text.
    assert agent.client.text() == "Hello\n\nNoted"
    assert agent.client.message_ids() == [f"{sid}-turn-1-reply-1"] * 2 + [f"{sid}-turn-1-reply-2"] * 2
    assert {"inputId": input_id, "turnId": f"{sid}-turn-1", "disposition": "applied"} in [
        _settled(u) for u in agent.client.updates
    ]
    assert server.headers[0]["authorization"] == f"Bearer {KEY}"
    assert [t["type"] for t in first["tools"]] == ["function"]


async def test_read_file_tool_through_the_client_and_a_steer_during_it(
    server: ChatServer, agent: Agent
) -> None:
    """read_file goes through fs/read_text_file; a steer while it runs lands in the next request."""
    call = [
        {"index": 0, "id": "call-7", "type": "function", "function": {"name": "read_file", "arguments": ""}}
    ]
    more = [{"index": 0, "function": {"arguments": '{"path": "notes.txt"}'}}]
    server.replies += [
        Reply(chunk(calls=call), chunk(calls=more), chunk(finish="tool_calls")),
        Reply(chunk("Tabs it is"), chunk(finish="stop")),
    ]
    agent.client.read_gate = gate = Gate()
    sid = await agent.session()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: agent.conn.prompt(session_id=sid, prompt=[acp.text_block("Read my notes")]))
        await gate.wait_reached()
        steer = await agent.steer(sid, "Then summarise in one line")
        assert steer["outcome"] == "injected"
        gate.release()
    second = await server.request(2)
    assert second["messages"][-3:] == [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call-7", "type": "function", "function": {"name": "read_file",
                                                              "arguments": '{"path": "notes.txt"}'}}]},
        {"role": "tool", "tool_call_id": "call-7", "content": "Remember: tabs, not spaces."},
        {"role": "user", "content": "Then summarise in one line"},
    ]  # fmt: skip
    starts = [u for u in agent.client.updates if isinstance(u, ToolCallStart)]
    assert [(u.tool_call_id, u.kind, (u.locations or [])[0].path) for u in starts] == [
        ("call-7", "read", "/project/notes.txt")
    ]
    final = [u.status for u in agent.client.updates if isinstance(u, ToolCallProgress)][-1]
    assert final == "completed"
    assert agent.client.permission_requests == []  # inside the project: no permission asked


async def test_tool_calls_the_server_sent_without_ids_get_ids_unique_in_the_session(
    server: ChatServer, agent: Agent
) -> None:
    """A server that streams ``tool_calls`` without an ``id``: each call gets an id of its own,
    across replies and turns (ACP's toolCallId is unique in the session; a client keys its tool
    calls by it), and the model sees each tool result answer its own call."""

    def unnamed(path: str) -> Reply:
        call = {
            "index": 0,
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": path})},
        }
        return Reply(chunk(calls=[call]), chunk(finish="tool_calls"))

    server.replies += [
        unnamed("notes.txt"),
        unnamed("notes.txt"),
        Reply(chunk("Read twice"), chunk(finish="stop")),
        unnamed("notes.txt"),
        Reply(chunk("Once more"), chunk(finish="stop")),
    ]
    sid = await agent.session()
    for text in ("Read my notes twice", "And again"):
        answer = await agent.conn.prompt(session_id=sid, prompt=[acp.text_block(text)])
        assert answer.stop_reason == "end_turn"
    starts = [u.tool_call_id for u in agent.client.updates if isinstance(u, ToolCallStart)]
    assert starts == ["ls-call-1", "ls-call-2", "ls-call-3"]
    last = await server.request(5)
    asked = [c["id"] for m in last["messages"] if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in last["messages"] if m["role"] == "tool"]
    assert asked == answered == starts


async def test_read_outside_the_project_asks_permission(server: ChatServer, agent: Agent) -> None:
    """A path outside the session's cwd is read only if the user allows it; a refusal is the tool's result."""
    call = [
        {"index": 0, "id": "c1", "function": {"name": "read_file", "arguments": '{"path": "/etc/passwd"}'}}
    ]
    server.replies += [
        Reply(chunk(calls=call), chunk(finish="tool_calls")),
        Reply(chunk("OK"), chunk(finish="stop")),
    ]
    sid = await agent.session()
    response = await agent.conn.prompt(session_id=sid, prompt=[acp.text_block("Read it")])
    assert response.stop_reason == "end_turn"
    assert len(agent.client.permission_requests) == 1
    assert server.requests[1]["messages"][-1] == {
        "role": "tool", "tool_call_id": "c1", "content": "error: the user did not allow reading this file"
    }  # fmt: skip


def _completion(text: str, finish: str = "stop") -> bytes:
    """A whole (non-streamed) chat completion."""
    message = {"role": "assistant", "content": text}
    return json.dumps({"choices": [{"index": 0, "message": message, "finish_reason": finish}]}).encode()


@pytest.mark.parametrize(
    ("reply", "stop_reason", "text"),
    [
        pytest.param(Reply(body=_completion("Whole reply")), "end_turn", "Whole reply", id="not-streamed"),
        pytest.param(Reply(chunk("Cut"), chunk(finish="length")), "max_tokens", "Cut", id="length"),
        pytest.param(Reply(chunk(finish="content_filter")), "refusal", "", id="content-filter"),
    ],
)
async def test_replies_and_their_stop_reasons(
    server: ChatServer, agent: Agent, reply: Reply, stop_reason: str, text: str
) -> None:
    """A server that ignores 'stream' still works; finish_reason length / content_filter map to ACP's."""
    server.replies.append(reply)
    sid = await agent.session()
    response = await agent.conn.prompt(session_id=sid, prompt=[acp.text_block("Hi")])
    assert response.stop_reason == stop_reason
    assert agent.client.text() == text


ERRORS = [
    pytest.param(Reply(status=500, body=b"upstream exploded"), "HTTP 500: upstream exploded", id="5xx"),
    pytest.param(Reply(status=401, body=f'{{"error": "bad key {KEY}"}}'.encode()), "HTTP 401", id="4xx"),
    pytest.param(Reply(chunk("a"), b"data: {not json\n\n"), "malformed reply: not JSON", id="malformed-json"),
    pytest.param(Reply(b"data: [1, 2]\n\n"), "malformed reply: not a JSON object", id="not-an-object"),
]


@pytest.mark.parametrize(("reply", "details"), ERRORS)
async def test_endpoint_errors_end_the_turn_clearly_and_hold(
    server: ChatServer, agent: Agent, reply: Reply, details: str
) -> None:
    """An endpoint error is a JSON-RPC error saying what happened; the steer it never sent is held."""
    await _an_endpoint_error_ends_the_turn_and_holds(server, agent, reply, details)


async def test_an_endpoint_that_never_answers_times_out_and_holds(
    server: ChatServer, impatient_agent: Agent
) -> None:
    """An endpoint that never answers: past ``--timeout`` the same clear error, the steer held."""
    details = f"did not answer within {IMPATIENT} s"
    await _an_endpoint_error_ends_the_turn_and_holds(server, impatient_agent, Reply(hang=True), details)


async def _an_endpoint_error_ends_the_turn_and_holds(
    server: ChatServer, agent: Agent, reply: Reply, details: str
) -> None:
    gate = Gate()
    first = Reply(chunk("Working"), gate, chunk(calls=[{"index": 0, "id": "t", "function": {
        "name": "no_such_tool", "arguments": "{}"}}]), chunk(finish="tool_calls"))  # fmt: skip
    second_gate = reply.gate = Gate()
    server.replies += [first, reply]
    sid = await agent.session()
    errors: list[acp.RequestError] = []
    async with anyio.create_task_group() as tg:

        async def prompt() -> None:
            with pytest.raises(acp.RequestError) as caught:
                await agent.conn.prompt(session_id=sid, prompt=[acp.text_block("Go")])
            errors.append(caught.value)

        tg.start_soon(prompt)
        await gate.wait_reached()
        steer = await agent.steer(sid, "Pending steer")
        gate.release()
        await second_gate.wait_reached()
        # The request that fails was sent with the first steer; this one waits for a next request.
        late = await agent.steer(sid, "Never sent")
        assert late["outcome"] == "injected"
        second_gate.release()
    error = errors[0]
    assert error.code == -32603
    assert isinstance(error.data, dict)
    assert details in error.data["details"]
    assert KEY not in json.dumps(error.data)
    meta = error.data["liveSteering"]
    assert meta["appliedInputIds"] == [steer["_meta"]["liveSteering"]["inputId"]]
    assert meta["heldInputIds"] == [late["_meta"]["liveSteering"]["inputId"]]
    held = {"disposition": "held", "reason": "generation-failed"}
    settled = {"inputId": late["_meta"]["liveSteering"]["inputId"], "turnId": f"{sid}-turn-1", **held}
    assert settled in [_settled(u) for u in agent.client.updates]


async def test_cancel_during_the_clients_file_read_leaves_a_conversation_the_next_prompt_can_send(
    server: ChatServer, agent: Agent
) -> None:
    """session/cancel while the client serves fs/read_text_file: the call is answered with the pinned
    cancelled result, the client's tool call ends failed, and the next prompt is not refused (issue 21)."""
    server.replies += [
        Reply(chunk(calls=[{"index": 0, "id": "call-9", "function": {
            "name": "read_file", "arguments": '{"path": "notes.txt"}'}}]), chunk(finish="tool_calls")),
        Reply(chunk("Hello"), chunk(finish="stop")),
    ]  # fmt: skip
    agent.client.read_gate = gate = Gate()
    sid = await agent.session()
    results: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def prompt() -> None:
            results.append(await agent.conn.prompt(session_id=sid, prompt=[acp.text_block("Read")]))

        tg.start_soon(prompt)
        await gate.wait_reached()
        await agent.conn.cancel(session_id=sid)
        await agent.client.wait_for(lambda u: isinstance(u, ToolCallProgress) and u.status == "failed")
        gate.release()
    assert results[0].stop_reason == "cancelled"
    statuses = [u.status for u in agent.client.updates if isinstance(u, ToolCallProgress)]
    assert statuses[-1] == "failed"
    again = await agent.conn.prompt(session_id=sid, prompt=[acp.text_block("Say hello")])
    assert again.stop_reason == "end_turn"
    assert server.refusals == []
    assert server.requests[1]["messages"][-2:] == [
        {"role": "tool", "tool_call_id": "call-9", "content": TOOL_CANCELLED_RESULT},
        {"role": "user", "content": "Say hello"},
    ]


class _StdoutPipe:
    """The agent's stdout as a pipe of the test's own (``os.pipe``), read line by line: the client's
    end of it really closes (closing anyio's process stdout only stops reading it)."""

    def __init__(self) -> None:
        self.read_end, self.write_end = os.pipe()
        self._buffer = b""
        self._open = True

    async def message(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The agent's next message that ``predicate`` holds for."""
        while True:
            while b"\n" not in self._buffer:
                await anyio.wait_readable(self.read_end)
                data = os.read(self.read_end, 65_536)
                assert data, "the agent closed its stdout"
                self._buffer += data
            line, _, self._buffer = self._buffer.partition(b"\n")
            message = json.loads(line)
            if predicate(message):
                return cast("dict[str, Any]", message)

    def close(self) -> None:
        if self._open:
            self._open = False
            os.close(self.read_end)


async def _drain(stream: anyio.abc.ByteReceiveStream, into: list[bytes]) -> None:
    async for data in stream:
        into.append(data)


@pytest.mark.parametrize(
    ("path", "method"),
    [
        pytest.param("notes.txt", "fs/read_text_file", id="file-read"),
        pytest.param("/etc/passwd", "session/request_permission", id="permission"),
    ],
)
async def test_an_editor_that_dies_while_the_agent_waits_on_it_ends_the_agent_exit_0(
    server: ChatServer, path: str, method: str
) -> None:
    """The editor closes its ends of stdin and stdout while the agent's request to it is pending
    (the file read; outside the project, the permission asked first): the agent exits 0, no
    traceback. Its last writes fail on the closed stdout, and the SDK's close re-raised that (exit 2,
    an ExceptionGroup). Raw lines: the SDK's client cannot die with a request unanswered."""
    arguments = json.dumps({"path": path})
    call = [{"index": 0, "id": "c1", "function": {"name": "read_file", "arguments": arguments}}]
    server.replies.append(Reply(chunk(calls=call), chunk(finish="tool_calls")))
    env = {**os.environ, "LIVE_STEERING_TEST_KEY": KEY}
    stdout = _StdoutPipe()
    try:
        process = await anyio.open_process(_agent_command(server.port), stdout=stdout.write_end, env=env)
    finally:
        os.close(stdout.write_end)
    errors: list[bytes] = []
    async with process, anyio.create_task_group() as tg:
        assert process.stdin is not None
        assert process.stderr is not None
        tg.start_soon(_drain, process.stderr, errors)
        try:
            stdin = process.stdin

            async def send(request_id: int, name: str, params: dict[str, Any]) -> None:
                line = {"jsonrpc": "2.0", "id": request_id, "method": name, "params": params}
                await stdin.send(json.dumps(line).encode() + b"\n")

            with anyio.fail_after(WAIT):
                capabilities = {"fs": {"readTextFile": True}}
                await send(1, "initialize", {"protocolVersion": 1, "clientCapabilities": capabilities})
                await send(2, "session/new", {"cwd": "/project", "mcpServers": []})
                new = await stdout.message(lambda m: m.get("id") == 2 and "method" not in m)
                sid = new["result"]["sessionId"]
                prompt = [{"type": "text", "text": "Read it"}]
                await send(3, "session/prompt", {"sessionId": sid, "prompt": prompt})
                pending = await stdout.message(lambda m: m.get("method") == method and "id" in m)
            assert pending["params"]["sessionId"] == sid
            # The editor dies with the request unanswered: stdout first, so no later write lands.
            stdout.close()
            await stdin.aclose()
            with anyio.fail_after(EXIT_WAIT):
                returncode = await process.wait()
        finally:
            stdout.close()
            if process.returncode is None:
                process.kill()
    said = b"".join(errors).decode("utf-8", "replace")
    assert returncode == 0, said
    assert "Traceback" not in said, said
    assert "ExceptionGroup" not in said, said
    assert KEY not in said


@pytest.mark.parametrize("chunked", [False, True], ids=["body-ends", "chunked-body-broken"])
async def test_a_stream_cut_short_is_an_internal_error_and_holds_the_steer(
    server: ChatServer, agent: Agent, chunked: bool
) -> None:
    """A body that ends without [DONE] or a finish_reason, or a chunked body broken before its
    last chunk and the finish_reason: -32603 with the pinned message (``data.cause`` naming the
    transport error of a broken one), the steer sent meanwhile held generation-failed, the half
    reply not kept (issue 21)."""
    gate = Gate()
    cut = Reply(chunk("Half"), gate, done=False, chunked=chunked, cut=chunked)
    server.replies += [cut, Reply(chunk("Whole"), chunk(finish="stop"))]
    sid = await agent.session()
    errors: list[acp.RequestError] = []
    async with anyio.create_task_group() as tg:

        async def prompt() -> None:
            with pytest.raises(acp.RequestError) as caught:
                await agent.conn.prompt(session_id=sid, prompt=[acp.text_block("Answer")])
            errors.append(caught.value)

        tg.start_soon(prompt)
        await gate.wait_reached()
        steer = await agent.steer(sid, "Shorter")
        gate.release()
    error = errors[0]
    assert error.code == -32603
    assert isinstance(error.data, dict)
    assert (error.data["details"], error.data["truncated"]) == (TRUNCATED_STREAM_MESSAGE, True)
    assert error.data.get("cause") == ("RemoteProtocolError" if chunked else None)
    input_id = steer["_meta"]["liveSteering"]["inputId"]
    assert error.data["liveSteering"]["heldInputIds"] == [input_id]
    held = {
        "inputId": input_id,
        "turnId": f"{sid}-turn-1",
        "disposition": "held",
        "reason": "generation-failed",
    }
    assert held in [_settled(u) for u in agent.client.updates]
    await agent.conn.prompt(session_id=sid, prompt=[acp.text_block("Again")])
    assert [m["role"] for m in server.requests[1]["messages"]] == ["system", "user", "user"]


async def test_a_chunked_body_broken_after_the_finish_reason_is_a_whole_reply(
    server: ChatServer, agent: Agent
) -> None:
    """A chunked body cut before its last chunk, after the finish_reason (and before [DONE]): the
    reply is whole, kept in the conversation, and the turn ends end_turn (docs/acp.md)."""
    server.replies += [
        Reply(chunk("Complete answer"), chunk(finish="stop"), done=False, chunked=True, cut=True),
        Reply(chunk("Next"), chunk(finish="stop"), chunked=True),
    ]
    sid = await agent.session()
    response = await agent.conn.prompt(session_id=sid, prompt=[acp.text_block("Answer")])
    assert response.stop_reason == "end_turn"
    again = await agent.conn.prompt(session_id=sid, prompt=[acp.text_block("Again")])
    assert again.stop_reason == "end_turn"
    assert server.requests[1]["messages"][-2:] == [
        {"role": "assistant", "content": "Complete answer"},
        {"role": "user", "content": "Again"},
    ]


@pytest.mark.parametrize(("finish", "stop_reason"), [("length", "max_tokens"), ("content_filter", "refusal")])
async def test_a_steer_sent_during_a_reply_cut_at_the_token_limit_continues_the_turn(
    server: ChatServer, agent: Agent, finish: str, stop_reason: str
) -> None:
    """A reply that ends at the token limit (or filtered) while a steer is pending: the turn goes on
    with the steer, which is applied, not held; the turn's stop reason is its last reply's. Without a
    steer such a reply ends the turn max_tokens / refusal (test_replies_and_their_stop_reasons)."""
    gate = Gate()
    server.replies += [
        Reply(chunk("Cut"), gate, chunk(finish=finish)),
        Reply(chunk("Short now"), chunk(finish=finish)),
    ]
    sid = await agent.session()
    results: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def prompt() -> None:
            results.append(await agent.conn.prompt(session_id=sid, prompt=[acp.text_block("Go")]))

        tg.start_soon(prompt)
        await gate.wait_reached()
        steer = await agent.steer(sid, "Shorter please")
        gate.release()
    input_id = steer["_meta"]["liveSteering"]["inputId"]
    meta = results[0].field_meta["liveSteering"]
    assert (results[0].stop_reason, meta["appliedInputIds"], meta["heldInputIds"]) == (
        stop_reason, [input_id], []
    )  # fmt: skip
    assert server.requests[1]["messages"][-2:] == [
        {"role": "assistant", "content": "Cut"},
        {"role": "user", "content": "Shorter please"},
    ]


def _turn(update: Any) -> dict[str, Any] | None:
    if isinstance(update, SessionInfoUpdate) and update.field_meta:
        return cast("dict[str, Any] | None", update.field_meta["liveSteering"].get("turn"))
    return None


async def test_a_follow_up_through_the_sdk_client_runs_as_the_next_turn(
    server: ChatServer, agent: Agent
) -> None:
    """_meta.liveSteering.kind "follow_up": injected for after the turn; the prompt answers with the next
    turn's id, which the client is told started (startedNewTurn) and where the follow-up is written."""
    gate = Gate()
    server.replies += [
        Reply(chunk("Fixed"), gate, chunk(finish="stop")),
        Reply(chunk("All green"), chunk(finish="stop")),
    ]
    sid = await agent.session()
    results: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def prompt() -> None:
            results.append(await agent.conn.prompt(session_id=sid, prompt=[acp.text_block("Fix it")]))

        tg.start_soon(prompt)
        await gate.wait_reached()
        follow_up = await agent.steer(sid, "Then run the suite", kind="follow_up")
        gate.release()
    details = follow_up["_meta"]["liveSteering"]
    assert (follow_up["outcome"], details["kind"], details["receipt"]["disposition"]) == (
        "injected", "follow_up", "queued"
    )  # fmt: skip
    meta = results[0].field_meta["liveSteering"]
    assert (results[0].stop_reason, meta["followUpInputIds"]) == ("end_turn", [details["inputId"]])
    following = meta["nextTurnId"]
    assert following == f"{sid}-turn-2"
    ended = await agent.client.wait_for(lambda u: (_turn(u) or {}).get("state") == "ended"
                                        and (_turn(u) or {}).get("id") == following)  # fmt: skip
    turn = _turn(ended)
    assert turn is not None
    assert (turn["origin"], turn["outcome"], turn["appliedInputIds"]) == (
        "follow_up", "startedNewTurn", [details["inputId"]]
    )  # fmt: skip
    assert server.requests[1]["messages"][-1] == {"role": "user", "content": "Then run the suite"}
    assert [m["role"] for m in server.requests[0]["messages"]] == ["system", "user"]


async def test_connection_refused_is_a_clear_error_and_the_key_never_shows(server: ChatServer) -> None:
    """No server at the URL: the prompt fails 'cannot connect'; the API key is in no output of the agent."""
    with anyio.fail_after(WAIT):
        async with await anyio.create_tcp_listener(local_host="127.0.0.1") as probe:
            closed_port = probe.extra(anyio.abc.SocketAttribute.local_port)
    client = EditorClient({})
    env = {**os.environ, "LIVE_STEERING_TEST_KEY": KEY}
    async with acp.spawn_agent_process(cast("acp.Client", client), *_agent_command(closed_port), env=env) as (
        conn,
        process,
    ):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        sid = (await conn.new_session(cwd="/project", mcp_servers=[])).session_id
        with pytest.raises(acp.RequestError) as caught:
            await conn.prompt(session_id=sid, prompt=[acp.text_block("Hello?")])
    assert isinstance(caught.value.data, dict)
    assert "cannot connect to the model endpoint" in caught.value.data["details"]
    assert process.returncode == 0
    assert process.stderr is not None
    assert KEY.encode() not in await process.stderr.read()


async def test_missing_key_variable_is_an_acp_error_naming_it() -> None:
    """Spawned by the SDK without env= (the key left behind): initialize and session/new say why; exit 2."""
    client = EditorClient({})
    command = _agent_command(9, key_env="LIVE_STEERING_UNSET_KEY")
    async with acp.spawn_agent_process(cast("acp.Client", client), *command) as (conn, process):
        with pytest.raises(acp.RequestError) as init:
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        with pytest.raises(acp.RequestError) as new:
            await conn.new_session(cwd="/project", mcp_servers=[])
    for caught in (init, new):
        assert isinstance(caught.value.data, dict)
        details = caught.value.data["details"]
        assert "environment variable LIVE_STEERING_UNSET_KEY is not set" in details
        assert "env=" in details  # what the spawning client must do about it
    assert process.returncode == 2
    assert process.stderr is not None
    assert b"LIVE_STEERING_UNSET_KEY is not set" in await process.stderr.read()


def test_key_variable_set_but_empty_is_said_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """NOPE_KEY= is not 'not set': the message says the variable is set but empty."""
    monkeypatch.setenv("LIVE_STEERING_EMPTY_KEY", "")
    with pytest.raises(KeyError) as empty:
        api_key_from_env("LIVE_STEERING_EMPTY_KEY")
    assert empty.value.args[0] == "environment variable LIVE_STEERING_EMPTY_KEY is set but empty"
    monkeypatch.delenv("LIVE_STEERING_EMPTY_KEY")
    with pytest.raises(KeyError) as unset:
        api_key_from_env("LIVE_STEERING_EMPTY_KEY")
    assert unset.value.args[0] == "environment variable LIVE_STEERING_EMPTY_KEY is not set"
    monkeypatch.setenv("LIVE_STEERING_EMPTY_KEY", KEY)
    assert api_key_from_env("LIVE_STEERING_EMPTY_KEY") == KEY


@pytest.mark.parametrize(("option", "expected"), [("Answer in French.", "Answer in French."), ("", None)])
async def test_system_prompt_can_be_changed_or_dropped(
    server: ChatServer, option: str, expected: str | None
) -> None:
    """--system-prompt TEXT replaces the system message; --system-prompt '' sends none."""
    server.replies.append(Reply(chunk("Oui"), chunk(finish="stop")))
    client = EditorClient({})
    command = _agent_command(server.port, f"--system-prompt={option}", key_env=None)
    async with acp.spawn_agent_process(cast("acp.Client", client), *command) as (conn, _process):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        sid = (await conn.new_session(cwd="/project", mcp_servers=[])).session_id
        await conn.prompt(session_id=sid, prompt=[acp.text_block("Hello")])
    messages = server.requests[0]["messages"]
    if expected is None:
        assert messages == [{"role": "user", "content": "Hello"}]
    else:
        assert messages == [{"role": "system", "content": expected}, {"role": "user", "content": "Hello"}]


def test_url_and_model_go_together(capsys: pytest.CaptureFixture[str]) -> None:
    """--model without --openai-base-url (or the reverse) is a usage error, exit 2."""
    from live_steering._cli import main

    assert main(["acp", "--model=m"]) == 2
    assert "go together" in capsys.readouterr().err


# -- examples/acp_agent.py: the agent docs/acp.md shows -------------------------------------

EXAMPLE = ROOT / "examples" / "acp_agent.py"


async def test_example_agent_is_steerable(server: ChatServer) -> None:
    """examples/acp_agent.py: a steer during its model request is written before its next one, same turn."""
    gate = Gate()
    server.replies += [Reply(body=_completion("Hi"), gate=gate), Reply(body=_completion("Shorter: hi"))]
    client = EditorClient({})
    env = {**os.environ, "OPENAI_BASE_URL": f"http://127.0.0.1:{server.port}/v1", "MODEL": "test-model"}
    async with acp.spawn_agent_process(cast("acp.Client", client), sys.executable, str(EXAMPLE), env=env) as (
        conn,
        process,
    ):
        init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        assert init.field_meta == {
            "steering": {"supported": True},
            "liveSteering": {"kinds": ["steer", "follow_up"]},
        }
        agent = Agent(conn, client, process)
        sid = await agent.session()
        results: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def prompt() -> None:
                results.append(await conn.prompt(session_id=sid, prompt=[acp.text_block("Greet me")]))

            tg.start_soon(prompt)
            await gate.wait_reached()
            steer = await agent.steer(sid, "Be brief")
            assert steer["outcome"] == "injected"
            gate.release()
    assert results[0].stop_reason == "end_turn"
    assert results[0].field_meta["liveSteering"]["appliedInputIds"] == [
        steer["_meta"]["liveSteering"]["inputId"]
    ]
    assert [m["content"] for m in server.requests[1]["messages"]] == ["Greet me", "Hi", "Be brief"]
    assert client.text() == "HiShorter: hi"
    assert client.message_ids() == [f"{sid}-turn-1-reply-1", f"{sid}-turn-1-reply-2"]
    assert process.returncode == 0


def test_example_agent_is_about_thirty_lines_and_in_the_docs() -> None:
    """The example has at most 30 lines of code (docstring, blank lines aside); docs/acp.md shows it whole."""
    text = EXAMPLE.read_text(encoding="utf-8")
    code = text.split('"""', 2)[2]
    assert len([line for line in code.splitlines() if line.strip()]) <= 30
    assert f"```python\n{text}```" in (ROOT / "docs" / "acp.md").read_text(encoding="utf-8")


def test_public_agents_use_no_private_name() -> None:
    """The scripted agent, the real-model agent and the example import only public live_steering names."""
    import ast

    sources = [ROOT / "src/live_steering/acp/scripted.py", ROOT / "src/live_steering/acp/chat_completions.py",
               EXAMPLE]  # fmt: skip
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("live_steering"):
                assert not any(part.startswith("_") for part in node.module.split(".")), (
                    path.name,
                    node.module,
                )
                assert not any(alias.name.startswith("_") for alias in node.names), (path.name, node.module)
            if isinstance(node, ast.ImportFrom) and node.level:
                raise AssertionError(f"{path.name}: a relative import ({node.module}) is not the public API")
