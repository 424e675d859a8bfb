"""The ACP session logic without the SDK's connection: parsing, steer ids, every outcome, on both backends.

Turns run the scripted model of ``live_steering.acp.scripted`` (or a small
``run_turn`` of the test's own) against a recording ``ClientChannel``. They are
paced by ``ClientPace`` (a request answers only when the test releases it) and by
gates on the channel, so every race here is a written sequence.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from live_steering import Disposition, Input, Receipt
from live_steering.acp import Turn, TurnError
from live_steering.acp._session import SteeringSession, _TurnFailed
from live_steering.acp._turn import RunTurn
from live_steering.acp._wire import (
    ErrorKind,
    SteerOutcome,
    SteerRejected,
    SteerRequest,
    SteerResult,
    TurnBusyError,
    parse_steer_request,
    prompt_text,
    steer_input_id,
)
from live_steering.acp.scripted import ClientPace, ScriptedModel
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
    (
        {"sessionId": "s", "prompt": _text("go"), "_meta": {"liveSteering": {"kind": "follow_up"}}},
        SteerRequest("s", "go", False, None, kind="follow_up"),
    ),
    (
        {"sessionId": "s", "prompt": _text("go"), "_meta": {"liveSteering": {"kind": None}}},
        SteerRequest("s", "go", False, None, kind="steer"),
    ),
    (
        {"sessionId": "s", "prompt": _text("go"), "_meta": {"liveSteering": None, "steering": {"id": "b"}}},
        SteerRequest("s", "go", False, "b"),
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
    ({"sessionId": "s", "prompt": _text("go"), "_meta": {"liveSteering": 1}}, ErrorKind.INVALID_PARAMS),
    ({"sessionId": "s", "prompt": _text("go"), "_meta": {"liveSteering": {"kind": "later"}}}, "bad-kind"),
    ({"sessionId": "s", "prompt": _text("go"), "_meta": {"liveSteering": {"kind": ["x"]}}}, "bad-kind"),
    (
        {
            "sessionId": "s",
            "prompt": _text("go"),
            "_meta": {"steering": {"kind": "follow_up"}, "liveSteering": {"kind": "followUp"}},
        },
        "bad-kind",
    ),
]


@pytest.mark.parametrize(("params", "expected"), INVALID)
def test_invalid_steer_requests_are_rejected(params: Any, expected: Any) -> None:
    """Bad requests raise SteerRejected: invalidParams, or invalidRequest for media the model lacks."""
    with pytest.raises(SteerRejected) as caught:
        parse_steer_request(params)
    if expected == "bad-idle":
        assert caught.value.kind is ErrorKind.INVALID_PARAMS
        assert "idleBehavior" in caught.value.data
    elif expected == "bad-kind":
        assert caught.value.kind is ErrorKind.INVALID_PARAMS
        assert "_meta.liveSteering.kind" in caught.value.data["details"]
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


class Channel:
    """Records what the session would send; can hold the 'turn running' update at a gate."""

    can_read_files = False

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []
        self.hold_turn_start: Gate | None = None
        self.changed = anyio.Event()

    def _record(self, kind: str, value: Any) -> None:
        self.log.append((kind, value))
        self.changed.set()
        self.changed = anyio.Event()

    async def thought(self, text: str, meta: dict[str, Any] | None, message_id: str | None = None) -> None:
        assert meta is not None
        self._record("request", meta["liveSteering"]["request"])

    async def message(self, text: str, meta: dict[str, Any] | None, message_id: str | None = None) -> None:
        self._record("message", text if meta is None else meta["liveSteering"])

    async def update(self, update: Any) -> None:
        self._record("update", update)

    async def turn_changed(self, turn: dict[str, Any]) -> None:
        if turn["state"] == "running" and self.hold_turn_start is not None:
            await self.hold_turn_start.passage()
        self._record("turn", turn)

    async def steer_settled(self, settled: dict[str, Any]) -> None:
        self._record("settled", settled)

    async def read_text_file(self, path: str, line: int | None, limit: int | None) -> str:
        raise AssertionError("not used here")

    async def request_permission(self, tool_call: Any, options: Any) -> str | None:
        raise AssertionError("not used here")

    async def wait(self, kind: str, value: Any) -> None:
        with anyio.fail_after(10):
            while (kind, value) not in self.log:
                await self.changed.wait()

    async def wait_turn(self, turn_id: str, state: str) -> dict[str, Any]:
        with anyio.fail_after(10):
            while True:
                for kind, turn in self.log:
                    if kind == "turn" and turn["id"] == turn_id and turn["state"] == state:
                        return dict(turn)
                await self.changed.wait()

    def turns(self, state: str) -> list[dict[str, Any]]:
        return [t for kind, t in self.log if kind == "turn" and t["state"] == state]

    def settled(self) -> list[dict[str, Any]]:
        return [s for kind, s in self.log if kind == "settled"]


class Harness:
    def __init__(self, tg: anyio.abc.TaskGroup, steps: int = 3, run_turn: RunTurn | None = None) -> None:
        self.channel = Channel()
        self.pace = ClientPace()
        self.model = ScriptedModel(steps, self.pace)
        self.session = SteeringSession(
            "s1", self.channel, tg, run_turn or self.model.run_turn, max_requests=steps + 16
        )
        self.tg = tg

    async def steer(
        self, text: str, *, prompt_required: bool = False, steer_id: str | None = None, kind: str = "steer"
    ) -> SteerResult:
        return await self.session.steer(SteerRequest("s1", text, prompt_required, steer_id, kind=kind))

    def steers_in(self, request: int) -> list[str]:
        return [e.text for e in self.model.requests[request - 1] if e.role == "steer"]

    async def running(self, request: int = 1) -> None:
        """Start a prompt turn and wait until the model works on ``request`` (held by the pace)."""
        self.tg.start_soon(self.session.prompt, "Go")
        await self.channel.wait("request", request)


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    async with anyio.create_task_group() as tg:
        h = Harness(tg)
        yield h
        h.pace.release(100)
    await h.session.aclose()


def _brief(turn: dict[str, Any]) -> dict[str, Any]:
    return {k: turn[k] for k in ("id", "origin", "state", "stopReason") if k in turn}


async def test_steer_in_flight_is_injected_at_the_next_request(harness: Harness) -> None:
    """A steer while request 1 is in flight is injected (queued) and written before request 2 only."""
    await harness.running()
    result = await harness.steer("Use src/a.py")
    assert result.outcome is SteerOutcome.INJECTED
    assert result.receipt is not None
    assert result.receipt.disposition is Disposition.QUEUED
    harness.pace.release(100)
    await harness.channel.wait("request", 3)
    assert harness.steers_in(1) == []
    assert harness.steers_in(2) == ["Use src/a.py"]
    assert harness.steers_in(3) == ["Use src/a.py"]  # the context keeps it; it was written once
    assert harness.session.runtime.statistics().applied == 1


async def test_steer_while_a_turn_starts_joins_that_turn(harness: Harness) -> None:
    """A steer that arrives after a turn was claimed but before its generation opened joins it."""
    harness.channel.hold_turn_start = gate = Gate()
    harness.tg.start_soon(harness.session.prompt, "Go")
    await gate.wait_reached()
    results: list[SteerResult] = []

    async def steer() -> None:
        results.append(await harness.steer("Early"))

    harness.tg.start_soon(steer)
    await anyio.wait_all_tasks_blocked()
    assert results == []  # waiting for the turn to open, not starting another
    gate.release()
    await harness.channel.wait("request", 1)
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
    ended = await harness.channel.wait_turn("s1-turn-1", "ended")
    assert _brief(ended) == {"id": "s1-turn-1", "origin": "steer", "state": "ended", "stopReason": "end_turn"}
    assert [e.text for e in harness.model.requests[0] if e.role == "user"] == ["Tidy up"]


async def test_turn_ids_are_the_runtimes_issued_ids_and_cost_no_memory_per_turn(harness: Harness) -> None:
    """Issue 11: turns run on issued ids (<session>-turn-<n>), so a long session remembers no id per turn."""
    for n in (1, 2, 3):
        result = await harness.steer(f"Tidy up {n}")
        assert result.turn_id == f"s1-turn-{n}"
        harness.pace.release(100)
        await harness.channel.wait_turn(f"s1-turn-{n}", "ended")
    runtime = harness.session.runtime
    assert runtime._core._generation_ids == set()  # before: one remembered id per turn
    with pytest.raises(ValueError, match="reserved"):
        runtime.open_generation("s1-turn-4")  # the runtime issues these itself


async def test_idle_opt_in_prompt_required_changes_nothing(harness: Harness) -> None:
    """Idle with promptRequired: the answer is promptRequired/noRunningTurn; no turn, no input admitted."""
    result = await harness.steer("Keep", prompt_required=True)
    assert (result.outcome, result.reason) == (SteerOutcome.PROMPT_REQUIRED, "noRunningTurn")
    assert harness.session.running_turn is None
    assert harness.session.runtime.statistics().accepted == 0
    assert harness.channel.log == []


async def test_steers_are_decided_in_arrival_order(harness: Harness) -> None:
    """Steers started back to back are admitted in arrival order, even behind one that starts a turn."""
    results: list[tuple[int, SteerResult]] = []
    all_answered = anyio.Event()

    async def steer(n: int) -> None:
        results.append((n, await harness.steer(f"steer {n}")))
        if len(results) == 4:
            all_answered.set()

    harness.channel.hold_turn_start = gate = Gate()
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
    await harness.channel.wait("request", 2)
    assert harness.steers_in(2) == ["steer 1", "steer 2", "steer 3"]


@pytest.mark.parametrize(
    ("prompt_required", "outcome"), [(False, "startedNewTurn"), (True, "promptRequired")]
)
async def test_turn_ending_in_the_race_is_treated_as_idle(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, prompt_required: bool, outcome: str
) -> None:
    """A 'finishing' refusal (the turn closed admission in the race) makes the steer idle, never 'failed'."""
    await harness.running()
    session = harness.session

    def closes_first(input: Input, generation_id: str) -> Receipt:
        session.cancel()  # the turn ends as the steer reaches it
        return Receipt(accepted=False, input_id=input.id, generation_id=generation_id, disposition=None,
                       reason="finishing")  # fmt: skip

    monkeypatch.setattr(session.runtime, "submit_steering_nowait", closes_first)
    result = await harness.steer("Late", prompt_required=prompt_required)
    assert result.outcome.value == outcome
    assert [t["id"] for t in harness.channel.turns("ended")] == ["s1-turn-1"]
    assert session.running_turn == ("s1-turn-2" if not prompt_required else None)


async def test_steer_refused_in_the_race_is_submitted_once(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A steer refused 'finishing' is not submitted again on its way to the idle path
    (a refusal is an event and a count)."""
    await harness.running()
    session = harness.session
    calls: list[str] = []

    def closes_first(input: Input, generation_id: str) -> Receipt:
        calls.append(input.text)
        session.cancel()  # the turn ends as the steer reaches it
        return Receipt(accepted=False, input_id=input.id, generation_id=generation_id, disposition=None,
                       reason="finishing")  # fmt: skip

    monkeypatch.setattr(session.runtime, "submit_steering_nowait", closes_first)
    result = await harness.steer("Late", prompt_required=True)
    assert calls == ["Late"]
    assert result.outcome.value == "promptRequired"


async def test_unexpected_failure_is_failed(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """An internal error while steering answers outcome 'failed' instead of raising."""
    await harness.running()

    def broken(input: Input, generation_id: str) -> Receipt:
        raise RuntimeError("boom")

    monkeypatch.setattr(harness.session.runtime, "submit_steering_nowait", broken)
    result = await harness.steer("Go left")
    assert (result.outcome, result.reason) == (SteerOutcome.FAILED, "internal-error: RuntimeError")


async def test_other_refusals_map_to_failed(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal that is not the end-of-turn race (here: capacity) answers 'failed' with its reason."""
    await harness.running()

    def full(input: Input, generation_id: str) -> Receipt:
        return Receipt(accepted=False, input_id=input.id, generation_id=generation_id, disposition=None,
                       reason="capacity")  # fmt: skip

    monkeypatch.setattr(harness.session.runtime, "submit_steering_nowait", full)
    result = await harness.steer("Go left")
    assert (result.outcome, result.reason) == (SteerOutcome.FAILED, "capacity")


BAD_STEERS = [
    pytest.param("x" * 16_001, id="over-16000-chars"),
    pytest.param("x" * 10_000_000, id="10-MB"),
    pytest.param("a\x00b", id="NUL"),
    pytest.param("lone \udc80 surrogate", id="not-UTF-8"),
]


@pytest.mark.parametrize("text", BAD_STEERS)
@pytest.mark.parametrize("when", ["idle", "running"])
async def test_bad_steer_is_invalid_params_idle_or_running(harness: Harness, text: str, when: str) -> None:
    """A steer the runtime refuses invalid-input is invalidParams, turn or no turn; nothing starts."""
    if when == "running":
        await harness.running()
    with pytest.raises(SteerRejected) as caught:
        await harness.steer(text)
    assert caught.value.kind is ErrorKind.INVALID_PARAMS
    assert caught.value.data["reason"] == "invalid-input"
    assert harness.session.runtime.statistics().accepted == 0
    assert harness.session.running_turn == (None if when == "idle" else "s1-turn-1")
    assert harness.model.requests == ([] if when == "idle" else harness.model.requests[:1])


async def test_repeat_by_request_id_and_conflict(harness: Harness) -> None:
    """Same JSON-RPC request id: one input; same id, other text: identity-conflict (invalidParams)."""
    await harness.running()
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


@pytest.mark.parametrize("when", ["running", "idle"])
async def test_an_id_used_by_a_follow_up_conflicts_as_a_steer_in_the_same_words(
    harness: Harness, when: str
) -> None:
    """A new user's slip: a follow-up's id sent again as a steer. Running or idle, the client gets
    identity-conflict with one detail that says why (not "steer refused: identity-conflict")."""
    await harness.running()
    await harness.steer("Then run the suite", steer_id="k1", kind="follow_up")
    if when == "idle":
        harness.pace.release(100)
        await harness.channel.wait_turn("s1-turn-2", "ended")  # the follow-up's own turn
        assert harness.session.running_turn is None
    with pytest.raises(SteerRejected) as caught:
        await harness.steer("Then run the suite", steer_id="k1")
    assert caught.value.kind is ErrorKind.INVALID_PARAMS
    assert caught.value.data["reason"] == "identity-conflict"
    details = "this id was already used for another input (other text, or the other kind)"
    assert caught.value.data["details"] == details


async def test_retry_of_a_steer_that_started_a_turn_starts_nothing(harness: Harness) -> None:
    """Retrying a steer that started a turn answers startedNewTurn (repeated) for the same turn, even idle."""
    first = await harness.steer("Start", steer_id="k1")
    harness.pace.release(100)
    await harness.channel.wait_turn("s1-turn-1", "ended")
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
    await harness.running()
    with pytest.raises(TurnBusyError):
        await harness.session.prompt("Again")


async def test_prompt_that_is_not_utf8_is_invalid_params(harness: Harness) -> None:
    """A prompt with a lone surrogate cannot reach a model: invalidParams, no turn."""
    with pytest.raises(SteerRejected) as caught:
        await harness.session.prompt("bad \ud800")
    assert caught.value.kind is ErrorKind.INVALID_PARAMS
    assert harness.session.running_turn is None


async def test_cancel_holds_the_pending_steer_and_says_so(harness: Harness) -> None:
    """cancel(): stop reason 'cancelled'; the pending steer is held, listed and published as held."""
    results: list[Any] = []

    async def prompt() -> None:
        results.append(await harness.session.prompt("Go"))

    harness.tg.start_soon(prompt)
    await harness.channel.wait("request", 1)
    steer = await harness.steer("Too late")
    harness.session.cancel()
    with anyio.fail_after(10):
        while not results:
            await harness.channel.changed.wait()
    assert results[0].stop_reason == "cancelled"
    assert results[0].held_input_ids == (steer.input_id,)
    assert results[0].to_meta() == {
        "turnId": "s1-turn-1", "appliedInputIds": [], "heldInputIds": [steer.input_id], "unknownInputIds": []
    }  # fmt: skip
    receipt = harness.session.runtime.receipt(steer.input_id)
    assert receipt is not None
    assert receipt.disposition is Disposition.HELD
    assert harness.channel.settled() == [
        {
            "inputId": steer.input_id,
            "turnId": "s1-turn-1",
            "disposition": "held",
            "reason": "generation-stopped",
        }
    ]
    # Published before the turn's end, so a client has it when the prompt answers.
    kinds = [kind for kind, _ in harness.channel.log]
    assert kinds.index("settled") < len(kinds) - 1
    assert harness.channel.log[-1][0] == "turn"


async def test_applied_steer_is_published_at_its_boundary(harness: Harness) -> None:
    """An injected steer's 'applied' is sent when it is written, before the model request that carries it."""
    await harness.running()
    steer = await harness.steer("Use b.py")
    harness.pace.release(1)
    await harness.channel.wait("request", 2)
    settled = {"inputId": steer.input_id, "turnId": "s1-turn-1", "disposition": "applied"}
    assert harness.channel.log.index(("settled", settled)) < harness.channel.log.index(("request", 2))
    harness.pace.release(100)
    ended = await harness.channel.wait_turn("s1-turn-1", "ended")
    assert (ended["appliedInputIds"], ended["heldInputIds"]) == ([steer.input_id], [])
    assert harness.channel.settled() == [settled]  # once, not again at the turn's end


# -- turns of the test's own ------------------------------------------------------------------


@pytest.fixture
async def task_group() -> AsyncIterator[anyio.abc.TaskGroup]:
    async with anyio.create_task_group() as tg:
        yield tg
        tg.cancel_scope.cancel()


async def test_cancel_never_interrupts_a_write(task_group: anyio.abc.TaskGroup) -> None:
    """session/cancel during a boundary's write lets it finish: applied, not unknown; then cancelled."""
    gate = Gate()
    context: list[str] = []
    model_called = anyio.Event()

    async def slow_writer(steer: Input, metadata: Any) -> None:
        await gate.passage()
        context.append(steer.text)

    async def run_turn(turn: Turn) -> None:
        await turn.boundary(slow_writer)
        model_called.set()
        await anyio.sleep_forever()  # the model request; cancel interrupts it

    harness = Harness(task_group, run_turn=run_turn)
    results: list[Any] = []

    async def prompt() -> None:
        results.append(await harness.session.prompt("Go"))

    task_group.start_soon(prompt)
    with anyio.fail_after(10):
        await model_called.wait()
    # A second boundary with a steer pending: park its write at the gate, then cancel.
    model_called = anyio.Event()
    turn = harness.session._turn.turn  # type: ignore[union-attr]
    assert turn is not None
    steer = await harness.steer("Mid-write")
    task_group.start_soon(turn.boundary, slow_writer)
    await gate.wait_reached()
    harness.session.cancel()
    await anyio.wait_all_tasks_blocked()
    assert results == []  # the write is still running: nothing was cut short
    gate.release()
    with anyio.fail_after(10):
        while not results:
            await harness.channel.changed.wait()
    assert results[0].stop_reason == "cancelled"
    assert context == ["Mid-write"]
    assert results[0].applied_input_ids == (steer.input_id,)


async def _failing_turn_with_a_steer(
    task_group: anyio.abc.TaskGroup, make_run_turn: Callable[[anyio.Event, anyio.Event], RunTurn]
) -> tuple[Harness, SteerResult, _TurnFailed]:
    """Run a prompt whose turn fails; steer after ``started`` is set, then set ``release``."""
    started, release = anyio.Event(), anyio.Event()
    harness = Harness(task_group, run_turn=make_run_turn(started, release))
    failures: list[_TurnFailed] = []

    async def prompt() -> None:
        with pytest.raises(_TurnFailed) as caught:
            await harness.session.run_prompt("Go")
        failures.append(caught.value)

    task_group.start_soon(prompt)
    with anyio.fail_after(10):
        await started.wait()
    steer = await harness.steer("Pending")
    release.set()
    with anyio.fail_after(10):
        while not failures:
            await harness.channel.changed.wait()
    return harness, steer, failures[0]


async def test_write_that_raises_is_unknown_and_published(task_group: anyio.abc.TaskGroup) -> None:
    """A writer that raises fails the turn; its steer is unknown (write-interrupted), listed, published."""

    async def broken_writer(steer: Input, metadata: Any) -> None:
        raise OSError("disk full")

    def make(started: anyio.Event, release: anyio.Event) -> RunTurn:
        async def run_turn(turn: Turn) -> None:
            await turn.boundary(broken_writer)
            started.set()
            await release.wait()
            await turn.boundary(broken_writer)

        return run_turn

    harness, steer, failure = await _failing_turn_with_a_steer(task_group, make)
    assert failure.data["details"] == "the turn failed: OSError"
    assert failure.data["liveSteering"]["unknownInputIds"] == [steer.input_id]
    unknown = {"disposition": "unknown", "reason": "write-interrupted"}
    assert harness.channel.settled() == [{"inputId": steer.input_id, "turnId": "s1-turn-1", **unknown}]
    assert [t["state"] for t in harness.channel.turns("failed")] == ["failed"]


async def test_turn_error_is_the_clients_message_and_holds(task_group: anyio.abc.TaskGroup) -> None:
    """TurnError ends the turn with its message and data; pending steers are held generation-failed."""

    def make(started: anyio.Event, release: anyio.Event) -> RunTurn:
        async def run_turn(turn: Turn) -> None:
            started.set()
            await release.wait()
            raise TurnError("the model endpoint answered HTTP 503", status=503)

        return run_turn

    harness, steer, failure = await _failing_turn_with_a_steer(task_group, make)
    assert failure.data["details"] == "the model endpoint answered HTTP 503"
    assert failure.data["status"] == 503
    assert failure.data["liveSteering"]["heldInputIds"] == [steer.input_id]
    receipt = harness.session.runtime.receipt(steer.input_id)
    assert receipt is not None
    assert (receipt.disposition, receipt.reason) == (Disposition.HELD, "generation-failed")


async def test_request_budget_ends_with_max_turn_requests(task_group: anyio.abc.TaskGroup) -> None:
    """After max_requests boundaries the next one ends the turn max_turn_requests; a pending steer is held."""
    steered = anyio.Event()
    harness: Harness

    async def run_turn(turn: Turn) -> None:
        while True:
            await turn.boundary(lambda steer, metadata: None)
            if turn.requests == 2 and not steered.is_set():
                await harness.steer("One more")  # pending when the budget runs out
                steered.set()

    harness = Harness(task_group, run_turn=run_turn)
    harness.session.max_requests = 2
    result = await harness.session.prompt("Go")
    assert result.stop_reason == "max_turn_requests"
    assert len(result.held_input_ids) == 1
    assert harness.channel.settled()[0]["reason"] == "budget-exhausted"


async def test_a_steer_at_the_checkpoint_of_a_spent_budget_is_held_with_no_continuation(
    task_group: anyio.abc.TaskGroup,
) -> None:
    """C17 in a turn: its last allowed request answered with no tool call, and a steer arrived
    meanwhile. The budget decides first: the steer is held budget-exhausted, the turn ends
    max_turn_requests, and the stream never announces a continuation that would not run."""
    harness = Harness(task_group, steps=1)
    harness.session.max_requests = 1
    events: list[dict[str, Any]] = []
    harness.session.runtime.add_listener(events.append)
    results: list[Any] = []

    async def prompt() -> None:
        results.append(await harness.session.prompt("Go"))

    task_group.start_soon(prompt)
    await harness.channel.wait("request", 1)
    steered = await harness.steer("One more")
    assert steered.outcome == "injected"
    assert steered.receipt is not None
    harness.pace.release(1)
    with anyio.fail_after(10):
        while not results:
            await harness.channel.changed.wait()
    assert (results[0].stop_reason, len(harness.model.requests)) == ("max_turn_requests", 1)
    assert [e["type"] for e in events if e["type"].startswith("generation.")] == [
        "generation.started",
        "generation.stopped",
    ]
    assert harness.channel.settled() == [
        {
            "inputId": steered.receipt.input_id,
            "turnId": "s1-turn-1",
            "disposition": "held",
            "reason": "budget-exhausted",
        }
    ]


@pytest.mark.parametrize("returned", ["max_tokens", "refusal", None, "not-a-stop-reason"])
async def test_run_turn_may_name_its_stop_reason(
    task_group: anyio.abc.TaskGroup, returned: str | None
) -> None:
    """A finished turn's stop reason is what run_turn returned (max_tokens, refusal), else end_turn."""

    async def run_turn(turn: Turn) -> str | None:
        await turn.boundary(lambda steer, metadata: None)
        assert not turn.continue_after_checkpoint()
        return returned

    harness = Harness(task_group, run_turn=run_turn)
    result = await harness.session.prompt("Go")
    assert result.stop_reason == (returned if returned in ("max_tokens", "refusal") else "end_turn")


@pytest.mark.parametrize("returned", ["max_tokens", "refusal", None])
async def test_run_turn_returning_early_with_a_steer_pending_keeps_its_stop_reason(
    task_group: anyio.abc.TaskGroup, returned: str | None
) -> None:
    """run_turn returns its stop reason without the checkpoint decision while a steer is pending: the
    steer is held generation-stopped, and the turn still ends with the stop reason run_turn named."""
    harness: Harness

    async def run_turn(turn: Turn) -> str | None:
        await turn.boundary(lambda steer, metadata: None)
        await harness.steer("Too late for this turn")
        return returned

    harness = Harness(task_group, run_turn=run_turn)
    result = await harness.session.prompt("Go")
    assert (result.stop_reason, len(result.held_input_ids)) == (returned or "end_turn", 1)
    assert harness.channel.settled()[0]["reason"] == "generation-stopped"


async def test_cancelled_wait_for_a_new_turn_keeps_one_turn(harness: Harness) -> None:
    """A steer cancelled while its new turn starts: the retry is a repeat, not a second turn."""
    harness.channel.hold_turn_start = gate = Gate()
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
    await harness.channel.wait("request", 1)
    assert harness.channel.turns("running") == [{"id": "s1-turn-1", "origin": "steer", "state": "running"}]


async def _cancel_when_reached(gate: Gate, scope: anyio.CancelScope) -> None:
    await gate.wait_reached()
    scope.cancel()


async def test_too_many_started_turn_ids_fail(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the limit of remembered turn-starting steers, an idle steer fails (capacity), starts nothing."""
    monkeypatch.setattr("live_steering.acp._session.STARTED_TURN_IDS_LIMIT", 1)
    assert (await harness.steer("One")).outcome is SteerOutcome.STARTED_NEW_TURN
    harness.pace.release(100)
    await harness.channel.wait_turn("s1-turn-1", "ended")
    result = await harness.steer("Two")
    assert (result.outcome, result.reason) == (SteerOutcome.FAILED, "capacity")
    assert harness.session.running_turn is None


async def test_thousand_steer_burst_is_one_ordered_batch(harness: Harness) -> None:
    """1,000 steers in a burst during one request: all injected, written in arrival order before the next."""
    await harness.running()
    results = [await harness.steer(f"burst {n}") for n in range(1_000)]
    assert {r.outcome for r in results} == {SteerOutcome.INJECTED}
    harness.pace.release(1)
    await harness.channel.wait("request", 2)
    assert harness.steers_in(2) == [f"burst {n}" for n in range(1_000)]


async def test_boundary_after_the_turn_finished_is_a_failure(task_group: anyio.abc.TaskGroup) -> None:
    """A run_turn that calls boundary after the checkpoint said done has a bug: the turn fails, loudly."""

    async def run_turn(turn: Turn) -> None:
        await turn.boundary(lambda steer, metadata: None)
        assert not turn.continue_after_checkpoint()
        await turn.boundary(lambda steer, metadata: None)

    harness = Harness(task_group, run_turn=run_turn)
    with pytest.raises(_TurnFailed) as caught:
        await harness.session.run_prompt("Go")
    assert caught.value.data["details"] == "the turn failed: GenerationClosedError"
    assert [t["state"] for t in harness.channel.turns("failed")] == ["failed"]


async def test_agent_without_a_task_group_says_so() -> None:
    """A SteeringAgent served without serve_stdio and without bind() refuses session/new clearly."""
    from live_steering.acp import SteeringAgent

    async def run_turn(turn: Turn) -> None:
        raise AssertionError("never runs")

    agent = SteeringAgent(run_turn)
    agent.on_connect(object())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=r"bind\(task_group\) first"):
        await agent.new_session(cwd="/")


def test_public_names_of_live_steering_acp() -> None:
    """live_steering.acp exports exactly its public API, and each name resolves."""
    import live_steering.acp as public

    assert set(public.__all__) == {
        "DISPOSITION_META", "STEER_METHOD", "RunTurn", "SteerOutcome", "SteerResult", "SteeringAgent",
        "SteeringSession", "Turn", "TurnError", "TurnResult", "serve_stdio",
    }  # fmt: skip
    assert all(getattr(public, name) is not None for name in public.__all__)
    assert public.STEER_METHOD == "_session/steering"


# -- follow-ups (C29) -------------------------------------------------------------------------


async def test_follow_ups_chain_turn_after_turn_with_the_scripted_model(harness: Harness) -> None:
    """A follow-up sent during the follow-ups' turn runs after that one: turn 1, then 2, then 3, each
    written as the user's request of its turn (the scripted model's context), never in the turn before."""
    await harness.running()
    first = await harness.steer("Then run the suite", kind="follow_up")
    assert first.outcome is SteerOutcome.INJECTED
    harness.pace.release(3)  # turn 1's three requests
    started = await harness.channel.wait_turn("s1-turn-2", "running")
    assert (started["origin"], started["followUpInputIds"]) == ("follow_up", [first.input_id])
    second = await harness.steer("Then tidy up", kind="follow_up")
    assert second.turn_id == "s1-turn-2"
    harness.pace.release(100)
    third = await harness.channel.wait_turn("s1-turn-3", "ended")
    assert third["appliedInputIds"] == [second.input_id]
    assert [t.turn_id for t in harness.session.turns] == ["s1-turn-1", "s1-turn-2", "s1-turn-3"]
    assert harness.session.turns[0].next_turn_id == "s1-turn-2"
    assert harness.session.turns[1].follow_up_input_ids == (second.input_id,)
    users = [[e.text for e in request if e.role == "user"] for request in harness.model.requests]
    assert users[2] == ["Go"]  # turn 1's last request: no follow-up in it
    assert users[3] == ["Go", "Then run the suite"]
    assert users[-1] == ["Go", "Then run the suite", "Then tidy up"]


async def test_an_idle_follow_up_with_prompt_required_starts_nothing(harness: Harness) -> None:
    """Idle, with idleBehavior promptRequired, a follow-up is promptRequired like a steer."""
    result = await harness.steer("Later", prompt_required=True, kind="follow_up")
    assert (result.outcome, result.reason) == (SteerOutcome.PROMPT_REQUIRED, "noRunningTurn")
    assert harness.session.running_turn is None


async def test_a_turn_out_of_requests_holds_its_follow_up(task_group: anyio.abc.TaskGroup) -> None:
    """max_turn_requests is not a normal finish: the follow-up is held budget-exhausted, no turn follows."""
    harness: Harness
    follow_ups: list[SteerResult] = []

    async def run_turn(turn: Turn) -> None:
        while True:
            await turn.boundary(lambda steer, metadata: None)
            if not follow_ups:
                follow_ups.append(await harness.steer("Afterwards", kind="follow_up"))

    harness = Harness(task_group, run_turn=run_turn)
    harness.session.max_requests = 2
    result = await harness.session.prompt("Go")
    assert result.stop_reason == "max_turn_requests"
    assert result.held_input_ids == (follow_ups[0].input_id,)
    assert result.next_turn_id is None
    assert harness.channel.settled()[-1]["reason"] == "budget-exhausted"
    assert harness.session.running_turn is None
