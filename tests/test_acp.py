"""End to end: ``live-steering acp`` in a subprocess, driven by the ACP SDK's own client side.

The SDK is asyncio-only (asyncio streams, tasks and futures), so these tests run
on the asyncio backend only; the session logic under the adapter is tested on
both backends in ``test_acp_session.py``. The agent runs with ``--client-paced``:
each model request waits for the test's ``_liveSteering/step`` notification, so
"steer while request N is in flight" is a sequence the test writes, never a
sleep. ``anyio.fail_after`` only bounds a wait that would otherwise hang.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

pytest.importorskip("acp")

import acp
from acp.schema import AgentMessageChunk, AgentThoughtChunk, SessionInfoUpdate

from process_helpers import stopped

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
WAIT = 20  # seconds; a safety net against a hang, never an ordering tool


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """asyncio only: the ACP SDK's connection is built on asyncio streams and tasks."""
    return "asyncio"


class Recorder:
    """The ACP client: records every session update and lets a test wait for one."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []
        self._changed = anyio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, predicate: Callable[[str, Any], bool]) -> Any:
        with anyio.fail_after(WAIT):
            while True:
                for session_id, update in self.updates:
                    if predicate(session_id, update):
                        return update
                await self._changed.wait()

    async def in_flight(self, session_id: str, request: int) -> None:
        """Wait until the scripted model of ``session_id`` is working on ``request`` (held)."""
        await self.wait_for(lambda s, u: s == session_id and _request_of(u, AgentThoughtChunk) == request)

    async def message(self, session_id: str, request: int) -> list[dict[str, Any]]:
        """What the model says it received in ``request`` (waits for its agent message)."""
        update = await self.wait_for(
            lambda s, u: s == session_id and _request_of(u, AgentMessageChunk) == request
        )
        return cast("list[dict[str, Any]]", update.field_meta["liveSteering"]["received"])

    async def turn(self, session_id: str, turn_id: str, state: str) -> dict[str, Any]:
        update = await self.wait_for(
            lambda s, u: s == session_id and (_turn(u) or {}).get("id") == turn_id and _state(u) == state
        )
        return cast("dict[str, Any]", _turn(update))

    def received(self, session_id: str) -> list[dict[str, Any]]:
        """Everything the model of a session said it received, over all requests so far."""
        return [
            entry
            for s, u in self.updates
            if s == session_id and _request_of(u, AgentMessageChunk) is not None
            for entry in u.field_meta["liveSteering"]["received"]
        ]


def _request_of(update: Any, kind: type) -> int | None:
    meta = getattr(update, "field_meta", None) if isinstance(update, kind) else None
    if meta and "liveSteering" in meta:
        return cast("int", meta["liveSteering"]["request"])
    return None


def _state(update: Any) -> object:
    return (_turn(update) or {}).get("state")


def _turn(update: Any) -> dict[str, Any] | None:
    if isinstance(update, SessionInfoUpdate) and update.field_meta and "liveSteering" in update.field_meta:
        return cast("dict[str, Any] | None", update.field_meta["liveSteering"].get("turn"))
    return None


class Agent:
    """A spawned ``live-steering acp --client-paced`` with a connected SDK client."""

    def __init__(self, conn: Any, client: Recorder) -> None:
        self.conn = conn
        self.client = client
        self.init: Any = None

    async def session(self) -> str:
        return cast("str", (await self.conn.new_session(cwd=str(ROOT), mcp_servers=[])).session_id)

    async def step(self, session_id: str, count: int = 1) -> None:
        """Let ``count`` more model requests of the session answer."""
        await self.conn.ext_notification("liveSteering/step", {"sessionId": session_id, "count": count})

    async def steer(self, session_id: str, text: str, meta: Any = None, **extra: Any) -> dict[str, Any]:
        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": text}], **extra}
        if meta is not None:
            params["_meta"] = meta
        return cast("dict[str, Any]", await self.conn.ext_method("session/steering", params))

    async def prompt(self, session_id: str, text: str) -> Any:
        return await self.conn.prompt(session_id=session_id, prompt=[acp.text_block(text)])


@pytest.fixture(scope="module")
async def agent() -> AsyncIterator[Agent]:
    """One agent process for the module (starting one costs a second); each test uses new sessions."""
    client = Recorder()
    command = (sys.executable, "-m", "live_steering._cli", "acp", "--client-paced", "--steps=3")
    async with acp.spawn_agent_process(cast("acp.Client", client), *command) as (conn, process):
        agent = Agent(conn, client)
        agent.init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        yield agent
    assert process.returncode == 0, "the agent did not exit cleanly when its stdin closed"


def _details(result: dict[str, Any]) -> dict[str, Any]:
    return cast("dict[str, Any]", result["_meta"]["liveSteering"])


async def test_initialize_advertises_steering(agent: Agent) -> None:
    """initialize answers with _meta.steering.supported = true and no image input."""
    wire = agent.init.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert wire["_meta"] == {
        "steering": {"supported": True},
        "liveSteering": {"kinds": ["steer", "follow_up"]},
    }
    assert wire["agentCapabilities"]["promptCapabilities"]["image"] is False
    assert wire["agentInfo"]["name"] == "live-steering"


async def test_steer_mid_turn_is_injected_and_in_the_next_request(agent: Agent) -> None:
    """A steer while request 1 is in flight is injected and appears in request 2, not in request 1."""
    async with anyio.create_task_group() as tg:
        sid = await agent.session()
        responses: list[Any] = []

        async def prompt() -> None:
            responses.append(await agent.prompt(sid, "Count the steps"))

        tg.start_soon(prompt)
        await agent.client.in_flight(sid, 1)
        result = await agent.steer(sid, "Use the corrected path")
        assert result["outcome"] == "injected"
        assert _details(result)["receipt"]["disposition"] == "queued"
        await agent.step(sid)
        assert await agent.client.message(sid, 1) == [{"role": "user", "text": "Count the steps"}]
        await agent.client.in_flight(sid, 2)
        await agent.step(sid, 10)
        request_2 = await agent.client.message(sid, 2)
        assert request_2 == [
            {"role": "steer", "text": "Use the corrected path", "inputId": _details(result)["inputId"]}
        ]
    assert responses[0].stop_reason == "end_turn"
    assert responses[0].field_meta["liveSteering"]["appliedInputIds"] == [_details(result)["inputId"]]


async def test_idle_steer_starts_a_new_turn_that_completes(agent: Agent) -> None:
    """Idle (and _meta null): a steer starts a turn with it as the prompt, reported to its end."""
    sid = await agent.session()
    result = await agent.steer(sid, "Tidy the imports", _meta=None)
    assert result["outcome"] == "startedNewTurn"
    turn_id = _details(result)["turnId"]
    # The response came once the turn was running: a steer now joins that very turn.
    again = await agent.steer(sid, "And sort them")
    assert (again["outcome"], _details(again)["turnId"]) == ("injected", turn_id)
    await agent.step(sid, 10)
    ended = await agent.client.turn(sid, turn_id, "ended")
    lists = {"appliedInputIds": [_details(again)["inputId"]], "heldInputIds": [], "unknownInputIds": []}
    assert ended == {"id": turn_id, "origin": "steer", "state": "ended", "stopReason": "end_turn", **lists}
    assert await agent.client.message(sid, 1) == [{"role": "user", "text": "Tidy the imports"}]
    assert [e["text"] for e in await agent.client.message(sid, 2)] == ["And sort them"]


async def test_idle_opt_in_prompt_required_starts_nothing(agent: Agent) -> None:
    """With idleBehavior promptRequired and no turn, the answer is promptRequired and no turn starts."""
    sid = await agent.session()
    result = await agent.steer(sid, "Keep me", {"steering": {"idleBehavior": "promptRequired"}})
    assert (result["outcome"], result["reason"]) == ("promptRequired", "noRunningTurn")
    await agent.step(sid, 10)
    response = await agent.prompt(sid, "The real prompt")
    # The prompt's turn is the session's first: the steer started none, and nothing of it was consumed.
    assert response.field_meta["liveSteering"]["turnId"] == f"{sid}-turn-1"
    assert agent.client.received(sid) == [{"role": "user", "text": "The real prompt"}]


@pytest.mark.parametrize("text", ["nul \x00 inside", "x" * 20_000])
async def test_prompt_required_refuses_what_the_runtime_would_refuse(agent: Agent, text: str) -> None:
    """An idle steer with idleBehavior promptRequired that the runtime would refuse (a NUL, over
    max_text_chars) is invalidParams invalid-input, as mid-turn: never handed back as a prompt."""
    sid = await agent.session()
    with pytest.raises(acp.RequestError) as caught:
        await agent.steer(sid, text, {"steering": {"idleBehavior": "promptRequired"}})
    assert caught.value.code == -32602
    assert isinstance(caught.value.data, dict)
    assert caught.value.data["reason"] == "invalid-input"


async def test_unknown_idle_behavior_is_invalid_params(agent: Agent) -> None:
    """Any idleBehavior other than promptRequired is a JSON-RPC invalidParams error; nothing starts."""
    sid = await agent.session()
    with pytest.raises(acp.RequestError) as caught:
        await agent.steer(sid, "Go", {"steering": {"idleBehavior": "queue"}})
    assert caught.value.code == -32602
    await agent.step(sid, 10)
    response = await agent.prompt(sid, "First")
    assert response.field_meta["liveSteering"]["turnId"] == f"{sid}-turn-1"


async def test_unknown_session_is_invalid_params(agent: Agent) -> None:
    """A steer for a session the agent does not know is invalidParams."""
    with pytest.raises(acp.RequestError) as caught:
        await agent.steer("no-such-session", "Hello")
    assert caught.value.code == -32602


async def test_image_block_is_invalid_request(agent: Agent) -> None:
    """An image block is invalidRequest: the scripted model has no image input."""
    sid = await agent.session()
    image = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
    with pytest.raises(acp.RequestError) as caught:
        await agent.conn.ext_method("session/steering", {"sessionId": sid, "prompt": [image]})
    assert caught.value.code == -32600


async def test_two_sessions_are_steered_concurrently(agent: Agent) -> None:
    """Steers to two sessions are both answered while both turns are held, and each lands in its own."""
    async with anyio.create_task_group() as tg:
        a, b = await agent.session(), await agent.session()
        tg.start_soon(agent.prompt, a, "Task A")
        tg.start_soon(agent.prompt, b, "Task B")
        await agent.client.in_flight(a, 1)
        await agent.client.in_flight(b, 1)
        results: dict[str, dict[str, Any]] = {}

        async def steer(sid: str, text: str) -> None:
            results[sid] = await agent.steer(sid, text)

        async with anyio.create_task_group() as steers:
            steers.start_soon(steer, a, "Only for A")
            steers.start_soon(steer, b, "Only for B")
        assert {sid: r["outcome"] for sid, r in results.items()} == {a: "injected", b: "injected"}
        await agent.step(a, 10)
        await agent.step(b, 10)
        assert [e["text"] for e in await agent.client.message(a, 2)] == ["Only for A"]
        assert [e["text"] for e in await agent.client.message(b, 2)] == ["Only for B"]


async def test_steers_of_one_session_keep_arrival_order(agent: Agent) -> None:
    """Steers sent back to back to one session are admitted and applied in the order they were sent."""
    async with anyio.create_task_group() as tg:
        sid = await agent.session()
        tg.start_soon(agent.prompt, sid, "Go")
        await agent.client.in_flight(sid, 1)
        texts = [f"steer {n}" for n in range(5)]
        async with anyio.create_task_group() as steers:
            for text in texts:
                steers.start_soon(agent.steer, sid, text)
                await anyio.lowlevel.checkpoint()  # let this send go out before the next one starts
        await agent.step(sid, 10)
        assert [e["text"] for e in await agent.client.message(sid, 2)] == texts


async def test_repeated_steer_id_is_applied_once(agent: Agent) -> None:
    """A retry with the same _meta.steering.id is an identical repeat: one input, applied once."""
    meta = {"steering": {"id": "fix-path-1"}}
    async with anyio.create_task_group() as tg:
        sid = await agent.session()
        tg.start_soon(agent.prompt, sid, "Go")
        await agent.client.in_flight(sid, 1)
        first = await agent.steer(sid, "Use src/a.py", meta)
        retry = await agent.steer(sid, "Use src/a.py", meta)
        assert (first["outcome"], retry["outcome"]) == ("injected", "injected")
        assert _details(retry)["inputId"] == _details(first)["inputId"]
        assert (_details(first)["repeated"], _details(retry)["repeated"]) == (False, True)
        await agent.step(sid, 10)
        await agent.client.turn(sid, f"{sid}-turn-1", "ended")
    steers = [e for e in agent.client.received(sid) if e["role"] == "steer"]
    assert steers == [{"role": "steer", "text": "Use src/a.py", "inputId": _details(first)["inputId"]}]


async def test_retry_after_the_turn_ended_starts_nothing(agent: Agent) -> None:
    """A retry of an injected steer after its turn ended reports it applied and starts no turn."""
    meta = {"steering": {"id": "late-retry"}}
    sid = await agent.session()
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.prompt, sid, "Go")
        await agent.client.in_flight(sid, 1)
        first = await agent.steer(sid, "Mind the tests", meta)
        await agent.step(sid, 10)
    retry = await agent.steer(sid, "Mind the tests", meta)
    assert retry["outcome"] == "injected"
    assert _details(retry)["repeated"] is True
    assert _details(retry)["receipt"]["disposition"] == "applied"
    assert _details(retry)["inputId"] == _details(first)["inputId"]
    await agent.step(sid, 10)
    response = await agent.prompt(sid, "Next")
    assert response.field_meta["liveSteering"]["turnId"] == f"{sid}-turn-2"
    assert [e["text"] for e in agent.client.received(sid) if e["role"] == "steer"] == ["Mind the tests"]


async def test_same_steer_id_with_other_text_is_invalid_params(agent: Agent) -> None:
    """Reusing a steer id for other content is refused (identity-conflict) as invalidParams."""
    meta = {"steering": {"id": "one-id"}}
    sid = await agent.session()
    assert (await agent.steer(sid, "First text", meta))["outcome"] == "startedNewTurn"
    with pytest.raises(acp.RequestError) as caught:
        await agent.steer(sid, "Other text", meta)
    assert caught.value.code == -32602
    assert (caught.value.data or {})["reason"] == "identity-conflict"


async def test_cancel_ends_the_turn_and_holds_its_pending_steer(agent: Agent) -> None:
    """session/cancel stops the turn (stopReason cancelled); a steer not yet applied is never applied."""
    sid = await agent.session()
    async with anyio.create_task_group() as tg:
        responses: list[Any] = []

        async def prompt() -> None:
            responses.append(await agent.prompt(sid, "Go"))

        tg.start_soon(prompt)
        await agent.client.in_flight(sid, 1)
        assert (await agent.steer(sid, "Too late"))["outcome"] == "injected"
        await agent.conn.cancel(session_id=sid)
    assert responses[0].stop_reason == "cancelled"
    assert [e for e in agent.client.received(sid) if e["role"] == "steer"] == []


def test_json_rpc_id_repeat_is_one_steer() -> None:
    """Without a steer id, a frame re-sent with the same JSON-RPC id is the same steer (raw stdio)."""
    frames = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}},
    ]
    with (
        subprocess.Popen(
            [sys.executable, "-m", "live_steering._cli", "acp", "--client-paced", "--steps=1"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as proc,
        stopped(proc),
    ):  # by its pid: a hung agent ends the readline below (EOF), not the run
        assert proc.stdin is not None
        assert proc.stdout is not None
        answers: dict[int, Any] = {}

        def answer(request_id: int) -> Any:
            while request_id not in answers:
                message = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
                if "id" in message and "method" not in message:
                    answers[message["id"]] = message
            return answers[request_id]

        try:
            proc.stdin.write("".join(json.dumps(f) + "\n" for f in frames))
            proc.stdin.flush()
            session_id = answer(2)["result"]["sessionId"]
            steer = {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "_session/steering",
                "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "Once"}]},
            }
            other = {**steer, "id": 4}
            proc.stdin.write(json.dumps(steer) + "\n")
            proc.stdin.flush()
            first = answer(3)["result"]
            del answers[3]
            proc.stdin.write(json.dumps(steer) + "\n" + json.dumps(other) + "\n")
            proc.stdin.flush()
            repeat, fresh = answer(3)["result"], answer(4)["result"]
        finally:
            proc.stdin.close()
            proc.wait(timeout=WAIT)
    assert first["outcome"] == "startedNewTurn"
    assert repeat["outcome"] == "startedNewTurn"
    assert repeat["_meta"]["liveSteering"] == {**first["_meta"]["liveSteering"], "repeated": True}
    # A different JSON-RPC id is a different steer: it joins the turn the first one started.
    assert fresh["outcome"] == "injected"
    assert fresh["_meta"]["liveSteering"]["inputId"] != first["_meta"]["liveSteering"]["inputId"]


def test_cli_without_the_sdk_prints_an_install_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the acp extra, `live-steering acp` says how to install it and exits 2."""
    from live_steering._cli import main

    monkeypatch.setitem(sys.modules, "acp", None)
    assert main(["acp"]) == 2
    captured = capsys.readouterr()
    assert "pip install 'live-steering[acp]'" in captured.err
    assert captured.out == ""


def test_example_client_runs() -> None:
    """examples/acp_client.py (the one in docs/acp.md) runs and sees its steer land."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "acp_client.py"), "--step-delay", "0.25"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "steer -> injected" in done.stdout
    assert "the steer landed in model request" in done.stdout


def test_docs_show_the_example_verbatim() -> None:
    """docs/acp.md embeds examples/acp_client.py exactly, so the documented client is the tested one."""
    example = (ROOT / "examples" / "acp_client.py").read_text()
    assert f"```python\n{example}```" in (ROOT / "docs" / "acp.md").read_text()


async def test_session_ids_differ_across_agents_so_input_ids_do_too() -> None:
    """Each agent (each process) names sessions sess-<uuid>: one request id never repeats an input id."""
    import uuid

    from live_steering.acp import SteeringAgent
    from live_steering.acp._wire import steer_input_id

    async def run_turn(turn: Any) -> None:
        """Never called: no turn runs here."""

    ids: list[str] = []
    async with anyio.create_task_group() as tg:
        for _ in range(2):  # two agent processes, as two restarts of one would be
            restarted = SteeringAgent(run_turn)
            restarted.on_connect(cast("acp.Client", object()))
            restarted.bind(tg)
            ids.append((await restarted.new_session(cwd="/")).session_id)
            await restarted.aclose()
    assert all(sid.startswith("sess-") and uuid.UUID(sid.removeprefix("sess-")) for sid in ids)
    assert ids[0] != ids[1]
    digests = {steer_input_id(sid, steer_id=None, request_id=3) for sid in ids}
    assert len(digests) == 2  # retries within a session: test_json_rpc_id_repeat_is_one_steer
