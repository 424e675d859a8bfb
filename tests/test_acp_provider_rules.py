"""The real-model ACP agent under OpenAI's conversation rules, in process, on both anyio backends.

``ChatCompletionsAgent``'s turns run in a ``SteeringSession`` (the SDK-free session logic)
with a recording channel, against the loopback server of ``acp_chat_server`` that refuses,
as OpenAI does, a conversation in which a tool call has no tool message. What ends a turn
(a cancel while the client reads a file, a tool that raised, a stream cut short) must leave
a conversation the next prompt of the session can send; follow-ups run as the next turn.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import pytest

pytest.importorskip("acp")
pytest.importorskip("httpx")

from acp_chat_server import WAIT, ChatServer, Reply, chunk, serving
from live_steering import Disposition
from live_steering.acp import SteeringSession, SteerOutcome
from live_steering.acp._session import _TurnFailed
from live_steering.acp._wire import SteerRejected, SteerRequest
from live_steering.acp.chat_completions import (
    TOOL_CANCELLED_RESULT,
    TOOL_FAILED_RESULT,
    TRUNCATED_STREAM_MESSAGE,
    ChatCompletionsAgent,
    ChatCompletionsConfig,
)
from live_steering.testing import Gate

pytestmark = [
    pytest.mark.anyio,
    # httpx (and httpcore under it) iterates a streamed body through nested async generators and
    # leaves them to the garbage collector when a reply is not read to its very end (a [DONE]
    # the agent stops at, a cancel); trio warns about each one (asyncio finalizes them quietly).
    # Not this library's generators: its own it closes (chat_completions.py, aclosing).
    pytest.mark.filterwarnings(r"ignore:Async generator 'http(x|core)\..*:ResourceWarning"),
]


class Channel:
    """A client that serves ``fs/read_text_file`` (gated, or failing) and records every update."""

    can_read_files = True

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []
        self.read_gate: Gate | None = None
        self.read_raises: BaseException | None = None
        self.changed = anyio.Event()

    def _record(self, kind: str, value: Any) -> None:
        self.log.append((kind, value))
        self.changed.set()
        self.changed = anyio.Event()

    async def turn_changed(self, turn: dict[str, Any]) -> None:
        self._record("turn", turn)

    async def steer_settled(self, settled: dict[str, Any]) -> None:
        self._record("settled", settled)

    async def message(self, text: str, meta: dict[str, Any] | None, message_id: str | None = None) -> None:
        self._record("message", text)

    async def thought(self, text: str, meta: dict[str, Any] | None, message_id: str | None = None) -> None:
        self._record("thought", text)

    async def update(self, update: Any) -> None:
        self._record("update", update)

    async def read_text_file(self, path: str, line: int | None, limit: int | None) -> str:
        if self.read_gate is not None:
            await self.read_gate.passage()
        if self.read_raises is not None:
            raise self.read_raises
        return f"contents of {path}"

    async def request_permission(self, tool_call: Any, options: Any) -> str | None:
        return None

    def statuses(self, call_id: str) -> list[str]:
        """The statuses the client was given for one tool call, in order (its start: ``pending``)."""
        return [
            u.status or "pending"
            for kind, u in self.log
            if kind == "update" and getattr(u, "tool_call_id", None) == call_id
        ]

    def settled(self) -> list[dict[str, Any]]:
        return [s for kind, s in self.log if kind == "settled"]

    async def wait_turn(self, turn_id: str, state: str) -> dict[str, Any]:
        with anyio.fail_after(WAIT):
            while True:
                for kind, turn in self.log:
                    if kind == "turn" and turn["id"] == turn_id and turn["state"] == state:
                        return dict(turn)
                await self.changed.wait()


class Bed:
    """A session of the real-model agent against the loopback server."""

    def __init__(self, server: ChatServer, tg: anyio.abc.TaskGroup) -> None:
        self.server = server
        self.channel = Channel()
        config = ChatCompletionsConfig(f"http://127.0.0.1:{server.port}/v1", "test-model", system_prompt=None)
        self.agent = ChatCompletionsAgent(config)
        self.session = SteeringSession("s1", self.channel, tg, self.agent._run_turn, cwd="/project")
        self.tg = tg

    async def send(self, text: str, *, kind: str = "steer") -> Any:
        with anyio.fail_after(WAIT):
            return await self.session.steer(SteerRequest("s1", text, False, None, kind=kind))

    async def prompt(self, text: str) -> Any:
        """A prompt turn, bounded: a hang is a failure."""
        with anyio.fail_after(WAIT):
            return await self.session.prompt(text)

    async def run_prompt(self, text: str) -> Any:
        with anyio.fail_after(WAIT):
            return await self.session.run_prompt(text)

    def start(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> list[Any]:
        """Run ``fn(*args)`` in the session's task group; its result, or what it raised, lands in
        the list returned (raised there, it would cancel the fixture's task group under the test)."""
        out: list[Any] = []

        async def run() -> None:
            try:
                out.append(await fn(*args))
            except Exception as exc:
                out.append(exc)

        self.tg.start_soon(run)
        return out

    async def idle(self) -> None:
        with anyio.fail_after(WAIT):
            await self.session.wait_idle()


@pytest.fixture
async def bed() -> AsyncIterator[Bed]:
    async with serving() as server, anyio.create_task_group() as tg:
        bed = Bed(server, tg)
        yield bed
        await bed.session.aclose()
        await bed.agent.aclose()


def read_call(call_id: str, path: str = "notes.txt") -> dict[str, Any]:
    arguments = json.dumps({"path": path})
    return {"index": 0, "id": call_id, "function": {"name": "read_file", "arguments": arguments}}


def batch(*ids: str) -> Reply:
    """One reply calling ``read_file`` once per id."""
    calls = [{**read_call(call_id), "index": n} for n, call_id in enumerate(ids)]
    return Reply(chunk(calls=calls), chunk(finish="tool_calls"))


def tool_messages(request: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["tool_call_id"], m["content"]) for m in request["messages"] if m["role"] == "tool"]


async def test_cancel_while_the_client_reads_answers_every_call_and_the_next_prompt_works(bed: Bed) -> None:
    """session/cancel during the client's file read: each call of the batch gets the pinned cancelled
    result, the call the client was shown is set failed, and the next prompt is not refused (no 400)."""
    bed.server.replies += [batch("c1", "c2"), Reply(chunk("Hello again"), chunk(finish="stop"))]
    bed.channel.read_gate = gate = Gate()
    results = bed.start(bed.prompt, "Read my notes")
    await gate.wait_reached()
    bed.session.cancel()
    await bed.idle()
    assert results[0].stop_reason == "cancelled"
    assert bed.channel.statuses("c1") == ["pending", "in_progress", "failed"]
    assert bed.channel.statuses("c2") == []  # never shown to the client: nothing to update
    bed.channel.read_gate = None
    second = await bed.prompt("Say hello")
    assert second.stop_reason == "end_turn"
    assert bed.server.refusals == []
    request = bed.server.requests[1]
    assert tool_messages(request) == [("c1", TOOL_CANCELLED_RESULT), ("c2", TOOL_CANCELLED_RESULT)]
    assert [m["role"] for m in request["messages"]] == ["user", "assistant", "tool", "tool", "user"]


async def test_a_tool_that_raised_fails_the_turn_with_every_call_answered(bed: Bed) -> None:
    """A tool that raised (the client's read failed unexpectedly) fails the turn, -32603 with the lists;
    its calls get the pinned failed result and the failed status; the next prompt works."""
    bed.server.replies += [batch("c1", "c2"), Reply(chunk("Fine"), chunk(finish="stop"))]
    bed.channel.read_raises = ConnectionResetError("the editor went away mid-read")
    with pytest.raises(_TurnFailed) as failed:
        await bed.run_prompt("Read my notes")
    assert failed.value.data["details"] == "the turn failed: ConnectionResetError"
    assert bed.channel.statuses("c1")[-1] == "failed"
    bed.channel.read_raises = None
    assert (await bed.prompt("Again")).stop_reason == "end_turn"
    assert bed.server.refusals == []
    assert tool_messages(bed.server.requests[1]) == [("c1", TOOL_FAILED_RESULT), ("c2", TOOL_FAILED_RESULT)]


async def test_a_cut_stream_is_an_error_its_text_is_dropped_and_the_steer_held(bed: Bed) -> None:
    """A stream that ends without [DONE] or a finish_reason fails the turn with the pinned message; the
    partial text is not in the conversation; a steer sent during it is held generation-failed."""
    gate = Gate()
    bed.server.replies += [
        Reply(chunk("Half an ans"), gate, done=False),
        Reply(chunk("Whole"), chunk(finish="stop")),
    ]
    failures = bed.start(bed.run_prompt, "Answer")
    await gate.wait_reached()
    steer = await bed.send("Shorter please")
    assert steer.outcome is SteerOutcome.INJECTED
    gate.release()
    await bed.idle()
    assert isinstance(failures[0], _TurnFailed), failures
    data = failures[0].data
    assert data["details"] == TRUNCATED_STREAM_MESSAGE
    assert data["liveSteering"]["heldInputIds"] == [steer.input_id]
    receipt = bed.session.runtime.receipt(steer.input_id)
    assert receipt is not None
    assert (receipt.disposition, receipt.reason) == (Disposition.HELD, "generation-failed")
    assert {"inputId": steer.input_id, "turnId": "s1-turn-1", "disposition": "held",
            "reason": "generation-failed"} in bed.channel.settled()  # fmt: skip
    await bed.prompt("Try again")
    messages = bed.server.requests[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "user"]  # no half answer kept as the reply
    assert "Half an ans" not in str(messages)


async def test_a_finish_reason_without_done_is_a_whole_reply(bed: Bed) -> None:
    """A stream that sent its finish_reason but no [DONE] (some servers) is a complete reply."""
    bed.server.replies.append(Reply(chunk("Done"), chunk(finish="stop"), done=False))
    assert (await bed.prompt("Hi")).stop_reason == "end_turn"


async def test_a_follow_up_runs_as_the_next_turn_reported_as_started(bed: Bed) -> None:
    """A follow-up sent during a turn is kept for after it (injected, queued, not in its requests); when
    the turn ends the session starts the next turn for it, reported startedNewTurn, where it is written."""
    gate = Gate()
    bed.server.replies += [
        Reply(chunk("Fixed"), gate, chunk(finish="stop")),
        Reply(chunk("Suite passes"), chunk(finish="stop")),
    ]
    results = bed.start(bed.prompt, "Fix the test")
    await gate.wait_reached()
    follow_up = await bed.send("Then run the whole suite", kind="follow_up")
    assert follow_up.outcome is SteerOutcome.INJECTED
    assert follow_up.to_wire()["_meta"]["liveSteering"]["kind"] == "follow_up"
    assert follow_up.receipt is not None
    assert follow_up.receipt.disposition is Disposition.QUEUED
    gate.release()
    started = await bed.channel.wait_turn("s1-turn-2", "running")
    assert started == {"id": "s1-turn-2", "origin": "follow_up", "state": "running",
                       "outcome": "startedNewTurn", "afterTurnId": "s1-turn-1",
                       "followUpInputIds": [follow_up.input_id]}  # fmt: skip
    ended = await bed.channel.wait_turn("s1-turn-2", "ended")
    assert (ended["stopReason"], ended["appliedInputIds"]) == ("end_turn", [follow_up.input_id])
    first = results[0]
    assert first.stop_reason == "end_turn"
    assert first.to_meta()["followUpInputIds"] == [follow_up.input_id]
    assert first.to_meta()["nextTurnId"] == "s1-turn-2"
    one, two = bed.server.requests
    assert [m["content"] for m in one["messages"]] == ["Fix the test"]
    assert two["messages"][-2:] == [
        {"role": "assistant", "content": "Fixed"},
        {"role": "user", "content": "Then run the whole suite"},
    ]
    receipt = bed.session.runtime.receipt(follow_up.input_id)
    assert receipt is not None
    assert (receipt.disposition, receipt.generation_id) == (Disposition.APPLIED, "s1-turn-1")
    assert {"inputId": follow_up.input_id, "turnId": "s1-turn-2", "disposition": "applied"} in (
        bed.channel.settled()
    )


async def test_cancel_holds_the_follow_up_and_starts_no_turn(bed: Bed) -> None:
    """session/cancel of the turn a follow-up waits for holds it: no next turn, nothing sent for it."""
    gate = Gate()
    bed.server.replies.append(Reply(chunk("Working"), gate, chunk(finish="stop")))
    results = bed.start(bed.run_prompt, "Fix the test")
    await gate.wait_reached()
    follow_up = await bed.send("Then run the whole suite", kind="follow_up")
    bed.session.cancel()
    gate.release()
    await bed.idle()
    receipt = bed.session.runtime.receipt(follow_up.input_id)
    assert receipt is not None
    assert receipt.disposition is Disposition.HELD
    assert [t["id"] for kind, t in bed.channel.log if kind == "turn"] == ["s1-turn-1", "s1-turn-1"]
    assert results[0].stop_reason == "cancelled"
    assert bed.session.turns[-1].held_input_ids == (follow_up.input_id,)
    assert len(bed.server.requests) == 1


async def test_an_idle_follow_up_starts_a_turn_as_a_steer_does(bed: Bed) -> None:
    """Idle, a follow-up has nothing to come after: it starts a turn at once (startedNewTurn)."""
    bed.server.replies.append(Reply(chunk("On it"), chunk(finish="stop")))
    result = await bed.send("Run the suite", kind="follow_up")
    assert (result.outcome, result.turn_id) == (SteerOutcome.STARTED_NEW_TURN, "s1-turn-1")
    assert result.to_wire()["_meta"]["liveSteering"]["kind"] == "follow_up"
    await bed.channel.wait_turn("s1-turn-1", "ended")
    assert bed.server.requests[0]["messages"] == [{"role": "user", "content": "Run the suite"}]


async def test_the_same_id_as_another_kind_is_an_identity_conflict(bed: Bed) -> None:
    """A retry with the same _meta.steering.id but the other kind is not a repeat: invalidParams."""
    bed.server.replies.append(Reply(chunk("On it"), chunk(finish="stop")))
    first = await bed.session.steer(SteerRequest("s1", "Run the suite", False, "x-1", kind="follow_up"))
    assert first.outcome is SteerOutcome.STARTED_NEW_TURN
    repeat = await bed.session.steer(SteerRequest("s1", "Run the suite", False, "x-1", kind="follow_up"))
    assert repeat.repeated
    with pytest.raises(SteerRejected, match="the other kind"):
        await bed.session.steer(SteerRequest("s1", "Run the suite", False, "x-1", kind="steer"))
    await bed.idle()


async def test_a_turn_cut_at_max_tokens_still_runs_its_follow_up(bed: Bed) -> None:
    """finish_reason "length" ends the turn max_tokens, a stop reason like end_turn: the follow-up runs
    as the next turn (only a cancel, a failure or an exhausted budget holds it)."""
    gate = Gate()
    bed.server.replies += [
        Reply(chunk("Long"), gate, chunk(finish="length")),
        Reply(chunk("Next"), chunk(finish="stop")),
    ]
    results = bed.start(bed.prompt, "Explain")
    await gate.wait_reached()
    follow_up = await bed.send("Then shorter", kind="follow_up")
    gate.release()
    ended = await bed.channel.wait_turn("s1-turn-2", "ended")
    assert ended["appliedInputIds"] == [follow_up.input_id]
    assert results[0].stop_reason == "max_tokens"
    assert bed.server.requests[1]["messages"][-1] == {"role": "user", "content": "Then shorter"}
