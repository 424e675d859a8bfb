"""``live-steering acp --openai-base-url`` under the official ACP TypeScript SDK's client (real client).

The client is ``@agentclientprotocol/sdk`` as pinned in scripts/clients.txt (installed by
``bash scripts/install-clients acp-sdk``), driven by tests/fixtures/acp_sdk_client.mjs: its
app API (``client().onRequest(...).connectWith(...)``; 2.x has no ``ClientSideConnection``)
spawns the agent over stdio. The model is the loopback server of ``acp_chat_server``, which
refuses, as OpenAI does, a conversation in which a tool call has no tool message. Each
scenario acts inside the client's ``fs/read_text_file`` handler, so nothing is timed.

Run alone: ``pytest -m real_clients tests/test_acp_sdk_client.py``. asyncio only: the agent is
the SDK-based one (asyncio), and these tests only wait for two processes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("acp")
pytest.importorskip("httpx")

from acp_chat_server import ChatServer, Reply, chunk, serving
from live_steering.acp.chat_completions import TOOL_CANCELLED_RESULT
from real_clients import client_dir

pytestmark = [pytest.mark.anyio, pytest.mark.real_clients]

SCRIPT = Path(__file__).resolve().parent / "fixtures" / "acp_sdk_client.mjs"
#: Seconds a whole scenario (node, the agent process, a few model requests) may take: generous,
#: a bound for a hang on a loaded machine, never an ordering tool.
SCENARIO_SECONDS = 180


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def read_reply(call_id: str) -> Reply:
    function = {"name": "read_file", "arguments": '{"path": "notes.txt"}'}
    call = {"index": 0, "id": call_id, "function": function}
    return Reply(chunk(calls=[call]), chunk(finish="tool_calls"))


async def run_scenario(server: ChatServer, scenario: str) -> dict[str, Any]:
    """Run one scenario of the TypeScript client against a fresh agent process; what it saw."""
    sdk = client_dir("acp-sdk")
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH (the acp-sdk client needs it)")
    agent = [sys.executable, "-m", "live_steering._cli", "acp",
             f"--openai-base-url=http://127.0.0.1:{server.port}/v1", "--model=test-model"]  # fmt: skip
    with anyio.fail_after(SCENARIO_SECONDS):
        done = await anyio.run_process(
            [node, str(SCRIPT), str(sdk), scenario, "--", *agent], check=False, stderr=subprocess.PIPE
        )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert result["agentExit"] == 0
    assert result["steeringSupported"] is True
    assert result["kinds"] == ["steer", "follow_up"]
    return result


async def test_a_steer_from_the_typescript_client_lands_in_the_next_request() -> None:
    """A steer sent while the client serves the model's file read is in the next request of the turn;
    the misspelt ``session/steering`` gets -32601 with the hint."""
    async with serving() as server:
        server.replies += [read_reply("c1"), Reply(chunk("Tabs."), chunk(finish="stop"))]
        result = await run_scenario(server, "steer")
    assert result["steer"]["outcome"] == "injected"
    input_id = result["steer"]["_meta"]["liveSteering"]["inputId"]
    assert result["prompt"]["stopReason"] == "end_turn"
    assert result["prompt"]["_meta"]["liveSteering"]["appliedInputIds"] == [input_id]
    assert server.requests[1]["messages"][-2:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "contents of /project/notes.txt"},
        {"role": "user", "content": "Summarise in one line"},
    ]
    error = result["misspelt"]["error"]
    assert error["code"] == -32601
    assert error["data"]["hint"].startswith("did you mean _session/steering?")


async def test_cancel_mid_tool_then_prompt_again_is_not_refused() -> None:
    """session/cancel while the client reads a file: the prompt ends cancelled, the client's tool call
    ends failed, and the next prompt of the session is answered (no HTTP 400 from the model)."""
    async with serving() as server:
        server.replies += [read_reply("c1"), Reply(chunk("Hello"), chunk(finish="stop"))]
        result = await run_scenario(server, "cancel")
    assert result["cancelled"]["stopReason"] == "cancelled"
    assert result["toolStatuses"][0] == "pending"
    assert result["toolStatuses"][-1] == "failed"
    assert result["again"]["result"]["stopReason"] == "end_turn"
    assert server.refusals == []
    assert server.requests[1]["messages"][-2:] == [
        {"role": "tool", "tool_call_id": "c1", "content": TOOL_CANCELLED_RESULT},
        {"role": "user", "content": "Say hello"},
    ]


async def test_a_follow_up_from_the_typescript_client_runs_as_the_next_turn() -> None:
    """A follow-up (``_meta.liveSteering.kind: "follow_up"``) is injected for after the turn; the prompt
    answers with ``nextTurnId``; that turn is reported started (startedNewTurn) and writes it."""
    async with serving() as server:
        server.replies += [
            read_reply("c1"),
            Reply(chunk("Fixed"), chunk(finish="stop")),
            Reply(chunk("Suite passes"), chunk(finish="stop")),
        ]
        result = await run_scenario(server, "follow_up")
    details = result["followUp"]["_meta"]["liveSteering"]
    assert (result["followUp"]["outcome"], details["kind"]) == ("injected", "follow_up")
    meta = result["prompt"]["_meta"]["liveSteering"]
    assert meta["followUpInputIds"] == [details["inputId"]]
    sid = result["sessionId"]
    assert meta["nextTurnId"] == f"{sid}-turn-2"
    running = result["nextRunning"]
    assert (running["origin"], running["outcome"], running["afterTurnId"]) == (
        "follow_up", "startedNewTurn", f"{sid}-turn-1"
    )  # fmt: skip
    assert result["nextEnded"]["appliedInputIds"] == [details["inputId"]]
    applied = {"inputId": details["inputId"], "turnId": f"{sid}-turn-2", "disposition": "applied"}
    assert applied in result["settled"]
    assert server.requests[2]["messages"][-1] == {"role": "user", "content": "Then run the whole suite"}
    assert all(m["content"] != "Then run the whole suite" for m in server.requests[1]["messages"])
