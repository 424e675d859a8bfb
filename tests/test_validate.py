"""``_validate``: one set of rules for ids and texts, used alike by the runtime, hooks and ACP (C7, C24)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from live_steering import Input, LiveRuntime
from live_steering._core import SteeringCore
from live_steering._validate import (
    EVENT_ID_CHARS,
    MAX_ID_CHARS,
    checked_id,
    event_safe,
    id_problem,
    input_problem,
    plain_str,
    utf8_encodable,
)
from live_steering.acp._wire import SteerRejected, parse_steer_request
from live_steering.hooks import HookSession
from strategies import valid_ids

#: Ids every wing must refuse, with the words of the answer.
BAD_IDS = {
    "empty": ("", "must be 1-128 characters"),
    "too long": ("x" * (MAX_ID_CHARS + 1), "must be 1-128 characters"),
    "100,000 characters": ("x" * 100_000, "must be 1-128 characters"),
    "NUL": ("a\x00b", "NUL character"),
    "lone surrogate": ("\ud800", "not encodable as UTF-8"),
}


@pytest.mark.parametrize("name", sorted(BAD_IDS))
def test_id_problem_names_what_is_wrong(name: str) -> None:
    """Each bad id gets its own short reason, naming the id it is about."""
    value, words = BAD_IDS[name]
    problem = id_problem(value, "command id")
    assert problem is not None
    assert words in problem


@given(valid_ids)
def test_every_valid_id_has_no_problem(value: str) -> None:
    """The strategy of ids the core admits is exactly what the rule accepts."""
    assert id_problem(value) is None
    assert checked_id(value, "session_id") == value


@pytest.mark.parametrize(
    ("id_", "text", "expected"),
    [
        ("a", "go", None),
        ("", "", "id must be 1-128 characters"),  # the id first
        ("a" * 200, "\x00", "id must be 1-128 characters"),
        ("a\x00", "x" * 101, "text is over 100 characters"),  # lengths before NUL
        ("a", " \n\t", "text is blank"),
        ("a\x00", "go", "NUL character"),
        ("a", "go \udc80", "not encodable as UTF-8"),
        ("é", "ü", None),  # non-ASCII is fine when it encodes
    ],
)
def test_input_problem_checks_in_the_order_of_c7(id_: str, text: str, expected: str | None) -> None:
    """Lengths, then blank text, then NUL, then UTF-8: the cheapest problem is the one named."""
    assert input_problem(id_, text, 100) == expected


def test_checked_id_raises_type_and_value_errors() -> None:
    """An id a caller chooses: TypeError for a non-string, ValueError for a bad one, a plain str back."""

    class Sub(str):
        pass

    with pytest.raises(TypeError, match="session_id must be a str"):
        checked_id(5, "session_id")
    with pytest.raises(ValueError, match="non-empty str of at most 128"):
        checked_id("", "session_id")
    with pytest.raises(ValueError, match="valid UTF-8 text without NUL"):
        checked_id("\ud800", "session_id")
    assert type(checked_id(Sub("s"), "session_id")) is str
    assert type(plain_str(Sub("s"))) is str


def test_event_safe_bounds_and_cleans_hostile_ids() -> None:
    """Events carry at most 256 characters of a refused id, always valid UTF-8."""
    assert event_safe("fix-1") == "fix-1"
    assert len(event_safe("x" * 100_000)) == EVENT_ID_CHARS
    cleaned = event_safe("a\ud800b")
    assert utf8_encodable(cleaned)
    assert cleaned == "a\\ud800b"


# -- one rule, every wing -----------------------------------------------------------------------------


def _runtime(session_id: str) -> object:
    return LiveRuntime(session_id=session_id)


def _hooks(session_id: str) -> object:
    return HookSession("claude-code", session_id)


def _core(session_id: str) -> object:
    return SteeringCore(session_id=session_id, sink=lambda event: None, clock=lambda: 0.0)


@pytest.mark.parametrize("make", [_runtime, _hooks, _core], ids=["runtime", "hooks", "core"])
@pytest.mark.parametrize("name", sorted(BAD_IDS))
def test_every_wing_refuses_the_same_session_ids(make: Callable[[str], object], name: str) -> None:
    """A session id the runtime refuses (a lone surrogate, 100,000 characters) HookSession refuses too."""
    with pytest.raises(ValueError, match="session_id"):
        make(BAD_IDS[name][0])


@pytest.mark.parametrize("make", [_runtime, _hooks, _core], ids=["runtime", "hooks", "core"])
def test_every_wing_takes_the_same_good_session_ids(make: Callable[[str], object]) -> None:
    """The longest id, and a non-ASCII one, are sessions everywhere."""
    for session_id in ("s" * MAX_ID_CHARS, "sessión-1"):
        make(session_id)


@pytest.mark.parametrize("name", sorted(BAD_IDS))
def test_hook_command_ids_are_refused_by_the_same_rule(name: str) -> None:
    """A command id is an id: refused ``invalid-input`` with the rule's own words, nothing queued."""
    session = HookSession("claude-code", "s1")
    value, words = BAD_IDS[name]
    receipt = session.enqueue(value, "Use the corrected path")
    assert not receipt.accepted
    assert receipt.reason == "invalid-input"
    assert session.pending == 0
    assert words in session.recent_events()[-1]["detail"]


def test_a_hook_text_over_the_vendors_cap_names_the_cap() -> None:
    """The shared text rule, with the vendor's own cap named when a text is over it (C26)."""
    session = HookSession("claude-code", "s1")
    receipt = session.enqueue("c1", "x" * 10_001)
    assert not receipt.accepted
    assert receipt.reason == "invalid-input"
    assert (
        "text is over Claude Code's cap of 10,000 UTF-16 code units" in session.recent_events()[-1]["detail"]
    )
    emoji = session.enqueue("c2", "\N{GRINNING FACE}" * 5_001)  # 5,001 characters, 10,002 UTF-16 units
    assert emoji.reason == "invalid-input"
    assert (
        "text is over Claude Code's cap of 10,000 UTF-16 code units" in session.recent_events()[-1]["detail"]
    )


@pytest.mark.parametrize("name", sorted(BAD_IDS))
def test_acp_steer_ids_are_refused_by_the_same_rule(name: str) -> None:
    """``_meta.steering.id`` is an id: a bad one is ``invalidParams`` before anything is consumed."""
    params = {
        "sessionId": "sess-1",
        "prompt": [{"type": "text", "text": "go"}],
        "_meta": {"steering": {"id": BAD_IDS[name][0]}},
    }
    with pytest.raises(SteerRejected, match=r"_meta\.steering\.id"):
        parse_steer_request(params)


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(BAD_IDS))
async def test_runtime_input_ids_are_refused_by_the_same_rule(name: str) -> None:
    """An input id is refused ``invalid-input`` with the same words (C7)."""
    runtime = LiveRuntime()
    value, words = BAD_IDS[name]
    async with runtime.open_generation("g1"):
        receipt = await runtime.submit_steering(Input("steer", "go", id=value), "g1")
    assert receipt.reason == "invalid-input"
    refused = [e for e in runtime.recent_events() if e["type"] == "steering.refused"]
    assert words in refused[-1]["detail"]


@given(st.text(max_size=300))
def test_the_rule_and_the_cores_fast_path_agree(text: str) -> None:
    """The core's ASCII shortcut never admits what the rule refuses, nor refuses what it admits."""
    events: list[dict[str, object]] = []
    core = SteeringCore(session_id="s", sink=events.append, clock=lambda: 0.0, max_text_chars=200)
    core.start_generation("g")
    receipt = core.submit(Input("steer", text, id="a"), "g")
    assert receipt.accepted == (input_problem("a", text, 200) is None)
