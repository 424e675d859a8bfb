"""The ACP session logic without the SDK: parsing, steer ids and every steer outcome, on both backends.

Turns are paced by ``ClientPace`` (a request answers only when the test releases
it) and by gates on the sink, so every race here is a written sequence.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from live_steering import Disposition, Input, Receipt
from live_steering.acp._session import (
    ClientPace,
    ErrorKind,
    SteeringSession,
    SteerOutcome,
    SteerRejected,
    SteerRequest,
    SteerResult,
    TurnBusyError,
    parse_steer_request,
    prompt_text,
    steer_input_id,
)
from live_steering.loop import ToolCall
from live_steering.testing import Gate

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _text(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


# -- parsing ----------------------------------------------------------------------------------

VALID = [
    ({"sessionId": "s", "prompt": _text("go")}, SteerRequest("s", "go", False, None)),
    ({"sessionId": "s", "prompt": _text("go"), "_meta": None}, SteerRequest("s", "go", False, None)),
    (
        {"sessionId": "s", "prompt": _text("go"), "_meta": {"steering": None}},
        SteerRequest("s", "go", False, None),
    ),
    (
        {"sessionId": "s", "prompt": _text("go"), "_meta": {"steering": {"idleBehavior": None}}},
        SteerRequest("s", "go", False, None),
    ),
    (
        {"sessionId": "s", "prompt": _text("go"), "_meta": {"steering": {"idleBehavior": "promptRequired"}}},
        SteerRequest("s", "go", True, None),
    ),
    (
        {"sessionId": "s", "prompt": _text("go"), "_meta": {"steering": {"id": "a1"}, "other": 1}},
        SteerRequest("s", "go", False, "a1"),
    ),
]


@pytest.mark.parametrize(("params", "expected"), VALID)
def test_valid_steer_requests_parse(params: dict[str, Any], expected: SteerRequest) -> None:
    """Well-formed requests parse; _meta and _meta.steering may be absent or null."""
    assert parse_steer_request(params) == expected


INVALID = [
    ("not an object", ErrorKind.INVALID_PARAMS),
    ({"prompt": _text("go")}, ErrorKind.INVALID_PARAMS),
    ({"sessionId": "", "prompt": _text("go")}, ErrorKind.INVALID_PARAMS),
    ({"sessionId": "s", "prompt": []}, ErrorKind.INVALID_PARAMS),
    ({"sessionId": "s", "prompt": "go"}, ErrorKind.INVALID_PARAMS),
    ({"sessionId": "s", "prompt": _text("   ")}, ErrorKind.INVALID_PARAMS),
    ({"sessionId": "s", "prompt": _text("go"), "_meta": "x"}, ErrorKind.INVALID_PARAMS),
    ({"sessionId": "s", "prompt": _text("go"), "_meta": {"steering": 3}}, ErrorKind.INVALID_PARAMS),
    ({"sessionId": "s", "prompt": _text("go"), "_meta": {"steering": {"idleBehavior": "queue"}}}, "bad-idle"),
    ({"sessionId": "s", "prompt": _text("go"), "_meta": {"steering": {"idleBehavior": 1}}}, "bad-idle"),
    ({"sessionId": "s", "prompt": _text("go"), "_meta": {"steering": {"id": ""}}}, ErrorKind.INVALID_PARAMS),
    ({"sessionId": "s", "prompt": _text("go"), "_meta": {"steering": {"id": 5}}}, ErrorKind.INVALID_PARAMS),
    (
        {"sessionId": "s", "prompt": _text("go"), "_meta": {"steering": {"id": "x" * 129}}},
        ErrorKind.INVALID_PARAMS,
    ),
    (
        {"sessionId": "s", "prompt": [{"type": "image", "data": "", "mimeType": "image/png"}]},
        "invalid-request",
    ),
    (
        {"sessionId": "s", "prompt": [{"type": "audio", "data": "", "mimeType": "audio/wav"}]},
        "invalid-request",
    ),
    (
        {"sessionId": "s", "prompt": [{"type": "resource", "resource": {"uri": "f", "blob": "AA=="}}]},
        "invalid-request",
    ),
    ({"sessionId": "s", "prompt": [{"type": "video"}]}, ErrorKind.INVALID_PARAMS),
    ({"sessionId": "s", "prompt": [{"type": "text", "text": 3}]}, ErrorKind.INVALID_PARAMS),
    ({"sessionId": "s", "prompt": ["go"]}, ErrorKind.INVALID_PARAMS),
]


@pytest.mark.parametrize(("params", "expected"), INVALID)
def test_invalid_steer_requests_are_rejected(params: Any, expected: Any) -> None:
    """Bad requests raise SteerRejected: invalidParams, or invalidRequest for media the model lacks."""
    with pytest.raises(SteerRejected) as caught:
        parse_steer_request(params)
    if expected == "bad-idle":
        assert caught.value.kind is ErrorKind.INVALID_PARAMS
        assert "idleBehavior" in caught.value.data
    elif expected == "invalid-request":
        assert caught.value.kind is ErrorKind.INVALID_REQUEST
    else:
        assert caught.value.kind is expected


def test_prompt_text_joins_blocks_in_order() -> None:
    """Text, resource links and embedded text resources become one text, in block order."""
    blocks = [
        {"type": "text", "text": "Fix it"},
        {"type": "resource_link", "uri": "file:///a.py", "name": "a.py"},
        {"type": "resource", "resource": {"uri": "file:///b.py", "text": "print(1)"}},
    ]
    assert prompt_text(blocks) == "Fix it\n\n[a.py](file:///a.py)\n\nprint(1)"


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=128), st.integers())
def test_steer_input_id_is_stable_and_valid(session_id: str, steer_id: str, request_id: int) -> None:
    """The input id depends on the session and the steer id (else the request id) only, and fits C7."""
    by_steer = steer_input_id(session_id, steer_id=steer_id, request_id=request_id)
    assert by_steer == steer_input_id(session_id, steer_id=steer_id, request_id=request_id + 1)
    by_request = steer_input_id(session_id, steer_id=None, request_id=request_id)
    assert by_request == steer_input_id(session_id, steer_id=None, request_id=request_id)
    assert by_request != steer_input_id(session_id, steer_id=None, request_id=request_id + 1)
    assert by_steer != by_request
    assert by_steer is not None
    assert 1 <= len(by_steer) <= 128
    assert steer_input_id(session_id, steer_id=None, request_id=None) is None


def test_steer_input_ids_differ_between_sessions() -> None:
    """The same steer id in two sessions maps to two input ids."""
    assert steer_input_id("a", steer_id="x", request_id=None) != steer_input_id(
        "b", steer_id="x", request_id=None
    )


def test_result_wire_shape() -> None:
    """to_wire() gives the protocol's outcome/reason plus the receipt under _meta.liveSteering."""
    receipt = Receipt(accepted=True, input_id="i", generation_id="g", disposition=Disposition.QUEUED)
    wire = SteerResult(SteerOutcome.INJECTED, "i", receipt=receipt, turn_id="g").to_wire()
    assert wire == {
        "outcome": "injected",
        "_meta": {
            "liveSteering": {"inputId": "i", "repeated": False, "turnId": "g", "receipt": receipt.to_dict()}
        },
    }
    idle = SteerResult(SteerOutcome.PROMPT_REQUIRED, "i", reason="noRunningTurn").to_wire()
    assert (idle["outcome"], idle["reason"]) == ("promptRequired", "noRunningTurn")


# -- the session ------------------------------------------------------------------------------


class Sink:
    """Records what the session would send; can hold the 'turn running' update at a gate."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []
        self.hold_turn_start: Gate | None = None
        self.changed = anyio.Event()

    def _record(self, kind: str, value: Any) -> None:
        self.log.append((kind, value))
        self.changed.set()
        self.changed = anyio.Event()

    async def request_started(self, request: int) -> None:
        self._record("request", request)

    async def agent_message(self, text: str, meta: dict[str, Any]) -> None:
        self._record("message", meta["liveSteering"])

    async def tool_started(self, call: ToolCall) -> None:
        self._record("tool", call.id)

    async def tool_finished(self, call: ToolCall, result: str) -> None:
        self._record("tool-done", call.id)

    async def turn_changed(self, turn: dict[str, Any]) -> None:
        if turn["state"] == "running" and self.hold_turn_start is not None:
            await self.hold_turn_start.passage()
        self._record("turn", turn)

    async def wait(self, kind: str, value: Any) -> None:
        with anyio.fail_after(10):
            while (kind, value) not in self.log:
                await self.changed.wait()

    def turns(self, state: str) -> list[dict[str, Any]]:
        return [t for kind, t in self.log if kind == "turn" and t["state"] == state]


class Harness:
    def __init__(self, tg: anyio.abc.TaskGroup, steps: int = 3) -> None:
        self.sink = Sink()
        self.pace = ClientPace()
        self.session = SteeringSession("s1", self.sink, tg, steps=steps, pace=self.pace)
        self.tg = tg

    async def steer(
        self, text: str, *, prompt_required: bool = False, steer_id: str | None = None
    ) -> SteerResult:
        return await self.session.steer(SteerRequest("s1", text, prompt_required, steer_id))

    def steers_in(self, request: int) -> list[str]:
        return [e.text for e in self.session.provider.requests[request - 1] if e.role == "steer"]


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    async with anyio.create_task_group() as tg:
        h = Harness(tg)
        yield h
        h.pace.release(100)
    await h.session.aclose()


async def test_steer_in_flight_is_injected_at_the_next_request(harness: Harness) -> None:
    """A steer while request 1 is in flight is injected (queued) and written before request 2 only."""
    harness.tg.start_soon(harness.session.prompt, "Go")
    await harness.sink.wait("request", 1)
    result = await harness.steer("Use src/a.py")
    assert result.outcome is SteerOutcome.INJECTED
    assert result.receipt is not None
    assert result.receipt.disposition is Disposition.QUEUED
    harness.pace.release(100)
    await harness.sink.wait("request", 3)
    assert harness.steers_in(1) == []
    assert harness.steers_in(2) == ["Use src/a.py"]
    assert harness.steers_in(3) == ["Use src/a.py"]  # the context keeps it; it was written once
    assert harness.session.runtime.statistics().applied == 1


async def test_steer_while_a_turn_starts_joins_that_turn(harness: Harness) -> None:
    """A steer that arrives after a turn was claimed but before its generation opened joins it."""
    harness.sink.hold_turn_start = gate = Gate()
    harness.tg.start_soon(harness.session.prompt, "Go")
    await gate.wait_reached()
    results: list[SteerResult] = []

    async def steer() -> None:
        results.append(await harness.steer("Early"))

    harness.tg.start_soon(steer)
    await anyio.wait_all_tasks_blocked()
    assert results == []  # waiting for the turn to open, not starting another
    gate.release()
    await harness.sink.wait("request", 1)
    await anyio.wait_all_tasks_blocked()
    assert results[0].outcome is SteerOutcome.INJECTED
    assert results[0].turn_id == "s1-turn-1"


async def test_idle_steer_starts_a_turn_and_answers_once_it_runs(harness: Harness) -> None:
    """Idle without opt-in: startedNewTurn, the turn is running when the answer comes, and it completes."""
    result = await harness.steer("Tidy up")
    assert (result.outcome, result.turn_id) == (SteerOutcome.STARTED_NEW_TURN, "s1-turn-1")
    assert harness.session.runtime.generation is not None
    assert harness.session.runtime.generation["id"] == "s1-turn-1"
    harness.pace.release(100)
    await harness.sink.wait(
        "turn", {"id": "s1-turn-1", "origin": "steer", "state": "ended", "stopReason": "end_turn"}
    )
    assert [e.text for e in harness.session.provider.requests[0] if e.role == "user"] == ["Tidy up"]


async def test_idle_opt_in_prompt_required_changes_nothing(harness: Harness) -> None:
    """Idle with promptRequired: the answer is promptRequired/noRunningTurn; no turn, no input admitted."""
    result = await harness.steer("Keep", prompt_required=True)
    assert (result.outcome, result.reason) == (SteerOutcome.PROMPT_REQUIRED, "noRunningTurn")
    assert harness.session.running_turn is None
    assert harness.session.runtime.statistics().accepted == 0
    assert harness.sink.log == []


async def test_steers_are_decided_in_arrival_order(harness: Harness) -> None:
    """Steers started back to back are admitted in arrival order, even behind one that starts a turn."""
    results: list[tuple[int, SteerResult]] = []
    all_answered = anyio.Event()

    async def steer(n: int) -> None:
        results.append((n, await harness.steer(f"steer {n}")))
        if len(results) == 4:
            all_answered.set()

    harness.sink.hold_turn_start = gate = Gate()
    for n in range(4):
        # Arrival order is the order the steers reach the session (trio starts tasks in any order).
        harness.tg.start_soon(steer, n)
        await anyio.wait_all_tasks_blocked()
    await gate.wait_reached()
    assert results == []  # steer 0 holds the session's steer lock until its turn runs; 1-3 queue
    gate.release()
    with anyio.fail_after(10):
        await all_answered.wait()
    assert [n for n, _ in results] == [0, 1, 2, 3]
    outcomes = {n: r.outcome for n, r in results}
    assert outcomes == {
        0: SteerOutcome.STARTED_NEW_TURN,
        1: SteerOutcome.INJECTED,
        2: SteerOutcome.INJECTED,
        3: SteerOutcome.INJECTED,
    }
    harness.pace.release(100)
    await harness.sink.wait("request", 2)
    assert harness.steers_in(2) == ["steer 1", "steer 2", "steer 3"]


@pytest.mark.parametrize(
    ("prompt_required", "outcome"), [(False, "startedNewTurn"), (True, "promptRequired")]
)
async def test_turn_ending_in_the_race_is_treated_as_idle(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, prompt_required: bool, outcome: str
) -> None:
    """A 'finishing' refusal (the turn closed admission in the race) makes the steer idle, never 'failed'."""
    harness.tg.start_soon(harness.session.prompt, "Go")
    await harness.sink.wait("request", 1)
    session = harness.session

    async def closes_first(input: Input, generation_id: str) -> Receipt:
        session.loop.stop()  # the turn ends as the steer reaches it
        return Receipt(accepted=False, input_id=input.id, generation_id=generation_id, disposition=None,
                       reason="finishing")  # fmt: skip

    monkeypatch.setattr(session.runtime, "submit_steering", closes_first)
    result = await harness.steer("Late", prompt_required=prompt_required)
    assert result.outcome.value == outcome
    assert [t["id"] for t in harness.sink.turns("ended")] == ["s1-turn-1"]
    assert session.running_turn == ("s1-turn-2" if not prompt_required else None)


async def test_unexpected_failure_is_failed(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """An internal error while steering answers outcome 'failed' instead of raising."""
    harness.tg.start_soon(harness.session.prompt, "Go")
    await harness.sink.wait("request", 1)

    async def broken(input: Input, generation_id: str) -> Receipt:
        raise RuntimeError("boom")

    monkeypatch.setattr(harness.session.runtime, "submit_steering", broken)
    result = await harness.steer("Go left")
    assert (result.outcome, result.reason) == (SteerOutcome.FAILED, "internal-error: RuntimeError")


async def test_other_refusals_map_to_failed(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal that is not the end-of-turn race (here: capacity) answers 'failed' with its reason."""
    harness.tg.start_soon(harness.session.prompt, "Go")
    await harness.sink.wait("request", 1)

    async def full(input: Input, generation_id: str) -> Receipt:
        return Receipt(accepted=False, input_id=input.id, generation_id=generation_id, disposition=None,
                       reason="capacity")  # fmt: skip

    monkeypatch.setattr(harness.session.runtime, "submit_steering", full)
    result = await harness.steer("Go left")
    assert (result.outcome, result.reason) == (SteerOutcome.FAILED, "capacity")


async def test_oversized_steer_is_invalid_params(harness: Harness) -> None:
    """A steer refused invalid-input (over 16,000 characters) is invalidParams; nothing admitted."""
    harness.tg.start_soon(harness.session.prompt, "Go")
    await harness.sink.wait("request", 1)
    with pytest.raises(SteerRejected) as caught:
        await harness.steer("x" * 16_001)
    assert caught.value.kind is ErrorKind.INVALID_PARAMS
    assert caught.value.data["reason"] == "invalid-input"
    assert harness.session.runtime.statistics().accepted == 0


async def test_repeat_by_request_id_and_conflict(harness: Harness) -> None:
    """Same JSON-RPC request id: one input; same id, other text: identity-conflict (invalidParams)."""
    harness.tg.start_soon(harness.session.prompt, "Go")
    await harness.sink.wait("request", 1)
    request = SteerRequest("s1", "Once", False, None)
    first = await harness.session.steer(request, request_id=7)
    again = await harness.session.steer(request, request_id=7)
    other = await harness.session.steer(request, request_id=8)
    assert first.input_id == again.input_id != other.input_id
    assert (first.repeated, again.repeated) == (False, True)
    assert harness.session.runtime.statistics().accepted == 2
    with pytest.raises(SteerRejected) as caught:
        await harness.session.steer(SteerRequest("s1", "Twice", False, None), request_id=7)
    assert caught.value.data["reason"] == "identity-conflict"


async def test_retry_of_a_steer_that_started_a_turn_starts_nothing(harness: Harness) -> None:
    """Retrying a steer that started a turn answers startedNewTurn (repeated) for the same turn, even idle."""
    first = await harness.steer("Start", steer_id="k1")
    harness.pace.release(100)
    await harness.sink.wait(
        "turn", {"id": "s1-turn-1", "origin": "steer", "state": "ended", "stopReason": "end_turn"}
    )
    retry = await harness.steer("Start", steer_id="k1")
    assert (retry.outcome, retry.turn_id, retry.repeated) == (
        SteerOutcome.STARTED_NEW_TURN,
        first.turn_id,
        True,
    )
    assert harness.session.running_turn is None
    with pytest.raises(SteerRejected):
        await harness.steer("Different", steer_id="k1")


async def test_prompt_while_a_turn_runs_is_busy(harness: Harness) -> None:
    """A second prompt while a turn runs is refused; ACP sessions take one prompt at a time."""
    harness.tg.start_soon(harness.session.prompt, "Go")
    await harness.sink.wait("request", 1)
    with pytest.raises(TurnBusyError):
        await harness.session.prompt("Again")


async def test_cancel_holds_the_pending_steer(harness: Harness) -> None:
    """cancel() stops the turn: stop reason 'cancelled', the pending steer held, never applied."""
    results: list[Any] = []

    async def prompt() -> None:
        results.append(await harness.session.prompt("Go"))

    harness.tg.start_soon(prompt)
    await harness.sink.wait("request", 1)
    steer = await harness.steer("Too late")
    harness.session.cancel()
    with anyio.fail_after(10):
        while not results:
            await harness.sink.changed.wait()
    assert results[0].stop_reason == "cancelled"
    receipt = harness.session.runtime.receipt(steer.input_id)
    assert receipt is not None
    assert receipt.disposition is Disposition.HELD


async def test_cancelled_wait_for_a_new_turn_keeps_one_turn(harness: Harness) -> None:
    """A steer cancelled while its new turn starts: the retry is a repeat, not a second turn."""
    harness.sink.hold_turn_start = gate = Gate()
    with anyio.CancelScope() as scope:
        harness.tg.start_soon(_cancel_when_reached, gate, scope)
        await harness.steer("Start once", steer_id="r1")
    assert scope.cancelled_caught
    gate.release()
    retry = await harness.steer("Start once", steer_id="r1")
    assert (retry.outcome, retry.turn_id, retry.repeated) == (
        SteerOutcome.STARTED_NEW_TURN,
        "s1-turn-1",
        True,
    )
    await harness.sink.wait("request", 1)
    assert harness.sink.turns("running") == [{"id": "s1-turn-1", "origin": "steer", "state": "running"}]


async def _cancel_when_reached(gate: Gate, scope: anyio.CancelScope) -> None:
    await gate.wait_reached()
    scope.cancel()


async def test_too_many_started_turn_ids_fail(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the limit of remembered turn-starting steers, an idle steer fails (capacity), starts nothing."""
    monkeypatch.setattr("live_steering.acp._session.STARTED_TURN_IDS_LIMIT", 1)
    assert (await harness.steer("One")).outcome is SteerOutcome.STARTED_NEW_TURN
    harness.pace.release(100)
    await harness.sink.wait(
        "turn", {"id": "s1-turn-1", "origin": "steer", "state": "ended", "stopReason": "end_turn"}
    )
    result = await harness.steer("Two")
    assert (result.outcome, result.reason) == (SteerOutcome.FAILED, "capacity")
    assert harness.session.running_turn is None
