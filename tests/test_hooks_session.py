"""Hook-context delivery (CONTRACT.md C26): table-driven over every vendor of the adoption map."""

from __future__ import annotations

import doctest
import json
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import live_steering.hooks._session
from live_steering import Disposition, InvariantError, hooks
from live_steering.hooks import (
    PROFILES,
    REDACTED,
    SEPARATOR,
    HookSession,
    InstructionRefusal,
    SkipReason,
    Vendor,
    VendorProfile,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent

# -- the seed's adoption map, transcribed (seeds/000_*: "Adoption map") ----------------------

# Verified against claude-agent-sdk's types.py (docs/hooks.md): every hook-specific output
# that declares additionalContext, less SubagentStop (that context reaches the subagent).
CLAUDE_ELEVEN = frozenset(
    {
        "SessionStart",
        "PostModelSwitch",
        "UserPromptSubmit",
        "UserPromptExpansion",
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "PostToolBatch",
        "SubagentStart",
        "Notification",
        "Stop",
    }
)

#: vendor -> (eligible moments, cap, session-end moment)
ADOPTION_MAP: dict[Vendor, tuple[frozenset[str], int | None, str | None]] = {
    Vendor.CLAUDE_CODE: (CLAUDE_ELEVEN, 10_000, "SessionEnd"),
    # Codex 0.171.0 and Qwen Code 0.24.4, as their real CLIs deliver (tests/test_hooks_*_real.py).
    Vendor.CODEX: (
        frozenset({"SessionStart", "PreToolUse", "PostToolUse", "UserPromptSubmit"}),
        10_000,
        "SessionEnd",
    ),
    Vendor.QWEN_CODE: (
        frozenset({"SessionStart", "UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "PostToolBatch"}),
        None,
        "SessionEnd",
    ),
    Vendor.VSCODE: (
        frozenset({"SessionStart", "UserPromptSubmit", "SubagentStart", "PreToolUse", "PostToolUse"}),
        None,
        None,
    ),
    Vendor.HERMES: (frozenset({"pre_llm_call"}), 10_000, "on_session_finalize"),
}

#: Held loops: (moment, reply_would_be_empty). A held reply carries a decision, so a
#: context-accepting moment that is held (VS Code's gated PreToolUse) is not empty.
HELD_LOOPS: dict[Vendor, list[tuple[str, bool]]] = {
    Vendor.CLAUDE_CODE: [
        ("PermissionRequest", True),
        ("Elicitation", True),
        ("ElicitationResult", True),
        ("PreToolUse", False),
    ],
    Vendor.CODEX: [("PermissionRequest", True), ("PreToolUse", False)],
    Vendor.QWEN_CODE: [("PermissionRequest", True)],
    Vendor.VSCODE: [("PreToolUse", False)],
    Vendor.HERMES: [("pre_tool_call", True), ("pre_tool_call", False)],
}

#: Real moments of each vendor that carry no consumed context: (moment, expected reason).
INELIGIBLE: dict[Vendor, list[tuple[str, SkipReason]]] = {
    Vendor.CLAUDE_CODE: [
        ("SubagentStop", SkipReason.NO_CONTEXT_SURFACE),
        ("PreCompact", SkipReason.NO_CONTEXT_SURFACE),
        ("PostCompact", SkipReason.NO_CONTEXT_SURFACE),
        ("StopFailure", SkipReason.NO_CONTEXT_SURFACE),
        ("PermissionDenied", SkipReason.NO_CONTEXT_SURFACE),
    ],
    Vendor.CODEX: [
        ("Stop", SkipReason.NO_CONTEXT_SURFACE),
        ("SubagentStart", SkipReason.NO_CONTEXT_SURFACE),
        ("PreModelRequest", SkipReason.NO_CONTEXT_SURFACE),
        ("PostModelRequest", SkipReason.NO_CONTEXT_SURFACE),
        ("Interrupt", SkipReason.NO_CONTEXT_SURFACE),
    ],
    Vendor.QWEN_CODE: [
        ("PreToolUse", SkipReason.CONTEXT_NOT_CONSUMED),
        ("Stop", SkipReason.CONTEXT_NOT_CONSUMED),
        ("Notification", SkipReason.CONTEXT_NOT_CONSUMED),
        ("SubagentStop", SkipReason.NO_CONTEXT_SURFACE),
        ("MessageDisplay", SkipReason.NO_CONTEXT_SURFACE),
    ],
    Vendor.VSCODE: [
        ("PreCompact", SkipReason.NO_CONTEXT_SURFACE),
        ("Stop", SkipReason.NO_CONTEXT_SURFACE),
        ("SessionEnd", SkipReason.NO_CONTEXT_SURFACE),
    ],
    Vendor.HERMES: [
        ("on_session_start", SkipReason.CONTEXT_NOT_CONSUMED),
        ("post_tool_call", SkipReason.CONTEXT_NOT_CONSUMED),
        ("post_llm_call", SkipReason.CONTEXT_NOT_CONSUMED),
        ("on_session_end", SkipReason.CONTEXT_NOT_CONSUMED),
        ("transform_llm_output", SkipReason.NO_CONTEXT_SURFACE),
        ("pre_verify", SkipReason.NO_CONTEXT_SURFACE),
        ("api_request_error", SkipReason.NO_CONTEXT_SURFACE),
        ("subagent_start", SkipReason.NO_CONTEXT_SURFACE),
        ("kanban_task_completed", SkipReason.NO_CONTEXT_SURFACE),
    ],
}

ALL_VENDORS = list(Vendor)


def eligible_cases() -> Iterator[tuple[Vendor, str]]:
    for vendor, (moments, _, _) in ADOPTION_MAP.items():
        for moment in sorted(moments):
            yield vendor, moment


class FakeClock:
    """Both clocks of a session, advanced by hand."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make(vendor: Vendor, *, clock: FakeClock | None = None, **kwargs: Any) -> HookSession:
    clock = clock or FakeClock()
    return HookSession(vendor, "sess-1", clock=clock, monotonic=clock, **kwargs)


def any_eligible(vendor: Vendor) -> str:
    return sorted(ADOPTION_MAP[vendor][0])[0]


def snapshot(session: HookSession) -> tuple[Any, ...]:
    stats = session.statistics()
    return (
        session.pending_command_ids(),
        stats.accepted,
        stats.delivered,
        stats.dropped,
        stats.replies,
        stats.ended,
    )


def context_of(vendor: Vendor, reply: dict[str, Any]) -> str:
    if vendor is Vendor.HERMES:
        return str(reply["context"])
    return str(reply["hookSpecificOutput"]["additionalContext"])


# -- the public surface ------------------------------------------------------------------


def test_module_doctests_pass() -> None:
    """The examples in the module's docstrings run and say what they show."""
    result = doctest.testmod(live_steering.hooks._session)
    assert result.attempted > 0
    assert result.failed == 0


def test_public_exports() -> None:
    """``live_steering.hooks.__all__`` lists exactly the public names, and each exists."""
    assert set(hooks.__all__) == {
        "instruct",
        "instruct_async",
        "HookStore",
        "SqliteHookStore",
        "PostgresHookStore",
        "open_store",
        "StoredReceipt",
        "Claim",
        "StoreError",
        "default_store_path",
        "HookSession",
        "HookOutcome",
        "InstructionReceipt",
        "EnqueueResult",
        "HookSessionStatistics",
        "InstructionRefusal",
        "InstructionState",
        "SkipReason",
        "Vendor",
        "VendorProfile",
        "ReplyShape",
        "PROFILES",
        "DEFAULT_QUEUE_CAPACITY",
        "SEPARATOR",
        "REDACTED",
    }
    for name in hooks.__all__:
        assert hasattr(hooks, name), name


# -- vendor data -------------------------------------------------------------------------


def test_profiles_cover_exactly_the_adoption_map() -> None:
    """There is one profile per vendor of the seed's adoption map, and no other."""
    assert set(PROFILES) == set(ADOPTION_MAP)
    with pytest.raises(TypeError):
        PROFILES[Vendor.CODEX] = PROFILES[Vendor.CODEX]  # type: ignore[index]


@pytest.mark.parametrize("vendor", ALL_VENDORS)
def test_profile_matches_adoption_map(vendor: Vendor) -> None:
    """Each profile's eligible moments, cap and session-end moment are the adoption map's."""
    moments, cap, end = ADOPTION_MAP[vendor]
    profile = PROFILES[vendor]
    assert profile.context_moments == moments
    assert profile.cap == cap
    assert profile.session_end_moment == end


def test_claude_code_has_eleven_moments_and_a_10000_cap() -> None:
    """Claude Code: eleven context-accepting moments, 10,000 characters, drop on SessionEnd."""
    profile = PROFILES[Vendor.CLAUDE_CODE]
    assert len(profile.context_moments) == 11
    assert profile.cap == 10_000


def test_profile_refuses_contradictory_data() -> None:
    """A profile whose moment is both eligible and held is a configuration error."""
    with pytest.raises(ValueError, match="both eligible"):
        VendorProfile(
            vendor=Vendor.CODEX,
            title="bad",
            context_moments=frozenset({"X"}),
            held_moments=frozenset({"X"}),
        )
    with pytest.raises(ValueError, match="session-end"):
        VendorProfile(
            vendor=Vendor.CODEX, title="bad", context_moments=frozenset({"X"}), session_end_moment="X"
        )


# -- eligible and ineligible moments -----------------------------------------------------


@pytest.mark.parametrize(("vendor", "moment"), list(eligible_cases()))
def test_eligible_moment_carries_queued_instruction(vendor: Vendor, moment: str) -> None:
    """An eligible moment with an empty reply carries the queued instruction in the vendor's JSON."""
    session = make(vendor)
    session.enqueue("cmd-1", "Use the corrected path")
    outcome = session.on_hook(moment, reply_would_be_empty=True)
    assert outcome.delivered == ("cmd-1",)
    assert outcome.skipped is None
    assert outcome.pending == 0
    if vendor is Vendor.HERMES:
        assert outcome.reply == {"context": "Use the corrected path"}
    else:
        assert outcome.reply == {
            "hookSpecificOutput": {"hookEventName": moment, "additionalContext": "Use the corrected path"}
        }
    receipt = session.receipt("cmd-1")
    assert receipt is not None
    assert receipt.disposition is Disposition.APPLIED
    session._check()


@pytest.mark.parametrize(("vendor", "moment"), list(eligible_cases()))
def test_eligible_moment_whose_reply_is_not_empty_carries_nothing(vendor: Vendor, moment: str) -> None:
    """A context moment whose reply already says something carries nothing and changes nothing."""
    session = make(vendor)
    session.enqueue("cmd-1", "Use the corrected path")
    before = snapshot(session)
    events = len(session.recent_events())
    outcome = session.on_hook(moment, reply_would_be_empty=False)
    assert outcome.reply is None
    assert outcome.delivered == ()
    assert outcome.skipped is SkipReason.REPLY_NOT_EMPTY
    assert outcome.pending == 1
    assert snapshot(session) == before
    assert len(session.recent_events()) == events


@pytest.mark.parametrize(
    ("vendor", "moment", "empty"),
    [(v, m, e) for v, cases in HELD_LOOPS.items() for m, e in cases],
)
def test_held_loop_never_carries_steering(vendor: Vendor, moment: str, empty: bool) -> None:
    """A held loop (permission, elicitation) never carries instructions: its reply is a decision."""
    session = make(vendor)
    session.enqueue("cmd-1", "Use the corrected path")
    before = snapshot(session)
    outcome = session.on_hook(moment, reply_would_be_empty=empty)
    assert outcome.reply is None
    assert outcome.skipped in {SkipReason.HELD_LOOP, SkipReason.REPLY_NOT_EMPTY}
    if empty:
        assert outcome.skipped is SkipReason.HELD_LOOP
    assert snapshot(session) == before


@pytest.mark.parametrize(
    ("vendor", "moment", "reason"),
    [(v, m, r) for v, cases in INELIGIBLE.items() for m, r in cases],
)
def test_moment_without_consumed_context_carries_nothing(
    vendor: Vendor, moment: str, reason: SkipReason
) -> None:
    """A moment with no context surface, or one nothing reads, carries nothing and drops nothing."""
    session = make(vendor)
    session.enqueue("cmd-1", "Use the corrected path")
    before = snapshot(session)
    outcome = session.on_hook(moment, reply_would_be_empty=True)
    assert outcome.reply is None
    assert outcome.skipped is reason
    assert outcome.dropped == ()
    assert snapshot(session) == before
    # still delivered at the next eligible moment
    assert session.on_hook(any_eligible(vendor), reply_would_be_empty=True).delivered == ("cmd-1",)


@pytest.mark.parametrize("vendor", ALL_VENDORS)
def test_unknown_moment_is_ineligible(vendor: Vendor) -> None:
    """A moment name the vendor does not document is never a delivery surface."""
    session = make(vendor)
    session.enqueue("cmd-1", "x")
    assert session.on_hook("NoSuchMoment", reply_would_be_empty=True).skipped is SkipReason.NO_CONTEXT_SURFACE
    assert session.pending == 1


@pytest.mark.parametrize("vendor", ALL_VENDORS)
def test_eligible_moment_with_empty_queue_leaves_reply_alone(vendor: Vendor) -> None:
    """With nothing queued an eligible moment returns no reply and emits no event."""
    session = make(vendor)
    outcome = session.on_hook(any_eligible(vendor), reply_would_be_empty=True)
    assert outcome.reply is None
    assert outcome.skipped is SkipReason.NOTHING_QUEUED
    assert session.recent_events() == []


# -- the cap -----------------------------------------------------------------------------


def test_claude_cap_overflow_stays_queued_in_order() -> None:
    """Joined text never exceeds 10,000 characters; what does not fit waits, in order."""
    session = make(Vendor.CLAUDE_CODE)
    texts = ["a" * 4_000, "b" * 4_000, "c" * 4_000]
    for n, text in enumerate(texts):
        assert session.enqueue(f"cmd-{n}", text).accepted
    first = session.on_hook("PostToolUse", reply_would_be_empty=True)
    assert first.reply is not None
    assert first.delivered == ("cmd-0", "cmd-1")
    assert context_of(Vendor.CLAUDE_CODE, first.reply) == texts[0] + SEPARATOR + texts[1]
    assert first.pending == 1
    assert session.pending_command_ids() == ["cmd-2"]
    second = session.on_hook("PreToolUse", reply_would_be_empty=True)
    assert second.reply is not None
    assert second.delivered == ("cmd-2",)
    assert context_of(Vendor.CLAUDE_CODE, second.reply) == texts[2]
    session._check()


def test_claude_instruction_exactly_at_cap_is_delivered_alone() -> None:
    """An instruction of exactly 10,000 characters is accepted and rides alone."""
    session = make(Vendor.CLAUDE_CODE)
    session.enqueue("big", "x" * 10_000)
    session.enqueue("small", "y")
    outcome = session.on_hook("Stop", reply_would_be_empty=True)
    assert outcome.delivered == ("big",)
    assert outcome.reply is not None
    assert len(context_of(Vendor.CLAUDE_CODE, outcome.reply)) == 10_000
    assert session.pending_command_ids() == ["small"]


def test_claude_instruction_over_cap_is_refused_at_enqueue() -> None:
    """A single instruction over Claude Code's cap is refused invalid-input and changes nothing."""
    session = make(Vendor.CLAUDE_CODE)
    before = snapshot(session)
    receipt = session.enqueue("big", "x" * 10_001)
    assert not receipt.accepted
    assert receipt.reason == InstructionRefusal.INVALID_INPUT
    assert receipt.detail is not None
    assert "10,000" in receipt.detail
    assert snapshot(session) == before
    assert session.receipt("big") is None


@pytest.mark.parametrize("vendor", [v for v in ALL_VENDORS if PROFILES[v].cap is None])
def test_uncapped_vendor_takes_long_text_up_to_the_c7_limit(vendor: Vendor) -> None:
    """Without a documented cap, the C7 text limit (16,000) applies and all pending ride together."""
    session = make(vendor)
    assert session.enqueue("long", "x" * 16_000).accepted
    assert session.enqueue("more", "y" * 5).accepted
    refused = session.enqueue("too-long", "x" * 16_001)
    assert refused.reason == InstructionRefusal.INVALID_INPUT
    outcome = session.on_hook(any_eligible(vendor), reply_would_be_empty=True)
    assert outcome.delivered == ("long", "more")


@given(
    sizes=st.lists(
        st.one_of(
            st.integers(min_value=1, max_value=10_000),
            st.sampled_from([1, 2, 4_998, 4_999, 5_000, 9_998, 9_999, 10_000]),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_claude_batches_are_maximal_ordered_and_never_over_cap(sizes: list[int]) -> None:
    """Each reply takes the longest prefix that fits 10,000 characters; nothing is lost or reordered."""
    session = make(Vendor.CLAUDE_CODE)
    texts = {f"c{n}": chr(ord("a") + n % 26) * size for n, size in enumerate(sizes)}
    for command_id, text in texts.items():
        assert session.enqueue(command_id, text).accepted
    delivered: list[str] = []
    for _ in range(len(sizes)):  # each reply delivers at least one, so this is enough
        if not session.pending:
            break
        queue = session.pending_command_ids()
        outcome = session.on_hook("PostToolBatch", reply_would_be_empty=True)
        assert outcome.reply is not None
        assert outcome.delivered
        context = context_of(Vendor.CLAUDE_CODE, outcome.reply)
        assert len(context) <= 10_000
        assert list(outcome.delivered) == queue[: len(outcome.delivered)]
        assert context == SEPARATOR.join(texts[c] for c in outcome.delivered)
        if session.pending:  # the next one would not have fitted
            nxt = texts[session.pending_command_ids()[0]]
            assert len(context) + len(SEPARATOR) + len(nxt) > 10_000
        delivered.extend(outcome.delivered)
    assert delivered == list(texts)


# -- the queue bound and FIFO ------------------------------------------------------------


@pytest.mark.parametrize("vendor", ALL_VENDORS)
def test_queue_accepts_twenty_and_refuses_the_twenty_first(vendor: Vendor) -> None:
    """Twenty instructions queue; the 21st is refused queue-full and nothing changes."""
    session = make(vendor)
    for n in range(20):
        assert session.enqueue(f"cmd-{n}", f"instruction {n}").disposition is Disposition.QUEUED
    before = snapshot(session)
    refused = session.enqueue("cmd-20", "one too many")
    assert refused.accepted is False
    assert refused.disposition is None
    assert refused.reason == InstructionRefusal.QUEUE_FULL
    assert refused.to_dict() == {
        "accepted": False,
        "commandId": "cmd-20",
        "sessionId": "sess-1",
        "disposition": None,
        "reason": "queue-full",
    }
    assert snapshot(session) == before
    assert session.receipt("cmd-20") is None
    last = session.recent_events()[-1]
    assert last["type"] == "instruction.refused"
    assert last["reason"] == "queue-full"
    assert last["command_id"] == "cmd-20"
    # delivery makes room again
    session.on_hook(any_eligible(vendor), reply_would_be_empty=True)
    assert session.enqueue("cmd-20", "one too many").accepted
    session._check()


@pytest.mark.parametrize("vendor", ALL_VENDORS)
def test_instructions_join_in_arrival_order(vendor: Vendor) -> None:
    """Pending instructions are joined in arrival order, and later ones follow on later moments."""
    session = make(vendor)
    session.enqueue("a", "first")
    session.enqueue("b", "second")
    outcome = session.on_hook(any_eligible(vendor), reply_would_be_empty=True)
    assert outcome.reply is not None
    assert context_of(vendor, outcome.reply) == "first" + SEPARATOR + "second"
    assert outcome.delivered == ("a", "b")
    session.enqueue("c", "third")
    later = session.on_hook(any_eligible(vendor), reply_would_be_empty=True)
    assert later.delivered == ("c",)


# -- refusals ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command_id", "text"),
    [
        ("cmd", ""),
        ("cmd", "   \n\t"),
        ("cmd", "nul\x00inside"),
        ("cmd", "lone \ud800 surrogate"),
        ("", "fine"),
        ("x" * 129, "fine"),
        ("id\x00", "fine"),
    ],
)
def test_invalid_instruction_is_refused_and_changes_nothing(command_id: str, text: str) -> None:
    """Blank, NUL, unencodable text and bad ids are refused invalid-input, with nothing changed."""
    session = make(Vendor.CLAUDE_CODE)
    before = snapshot(session)
    receipt = session.enqueue(command_id, text)
    assert receipt.accepted is False
    assert receipt.reason == "invalid-input"
    assert snapshot(session) == before
    assert session.statistics().refused == 1
    json.dumps(session.recent_events())


def test_wrong_types_raise_type_error() -> None:
    """Only arguments of the wrong type raise ``TypeError``; the session is unchanged."""
    session = make(Vendor.CODEX)
    with pytest.raises(TypeError):
        session.enqueue(1, "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        session.enqueue("cmd", b"text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        session.on_hook(None, reply_would_be_empty=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        session.on_hook("PostToolUse", reply_would_be_empty=1)  # type: ignore[arg-type]
    assert session.statistics().refused == 0
    assert session.recent_events() == []


def test_identical_repeat_is_answered_not_queued_twice() -> None:
    """A retried command (same id, same text) returns its current receipt and is delivered once."""
    session = make(Vendor.CLAUDE_CODE)
    session.enqueue("cmd-1", "go left")
    again = session.enqueue("cmd-1", "go left")
    assert again.accepted
    assert again.repeated
    assert again.disposition is Disposition.QUEUED
    assert session.pending == 1
    session.on_hook("PostToolUse", reply_would_be_empty=True)
    after = session.enqueue("cmd-1", "go left")
    assert after.disposition is Disposition.APPLIED
    assert session.pending == 0
    conflict = session.enqueue("cmd-1", "go right")
    assert conflict.reason == InstructionRefusal.IDENTITY_CONFLICT
    assert session.statistics().delivered == 1


def test_identity_limit_refuses_new_ids_without_eviction() -> None:
    """When the retained command ids are full, new ids are refused capacity and none is evicted."""
    session = make(Vendor.CODEX, identity_limit=2)
    session.enqueue("a", "x")
    session.enqueue("b", "y")
    assert session.enqueue("c", "z").reason == InstructionRefusal.CAPACITY
    assert session.enqueue("a", "x").repeated


# -- events ------------------------------------------------------------------------------


@pytest.mark.parametrize("vendor", ALL_VENDORS)
def test_delivery_event_carries_queued_ms_and_cause(vendor: Vendor) -> None:
    """Each delivered instruction emits instruction.delivered with queued_ms and its command id."""
    clock = FakeClock()
    session = make(vendor, clock=clock)
    session.enqueue("cmd-1", "first")
    clock.advance(0.25)
    session.enqueue("cmd-2", "second")
    clock.advance(1.0)
    moment = any_eligible(vendor)
    session.on_hook(moment, reply_would_be_empty=True)
    delivered = [e for e in session.recent_events() if e["type"] == "instruction.delivered"]
    assert [e["command_id"] for e in delivered] == ["cmd-1", "cmd-2"]
    assert [e["cause"] for e in delivered] == ["cmd-1", "cmd-2"]
    assert [e["queued_ms"] for e in delivered] == [1_250, 1_000]
    for event in delivered:
        assert event["session_id"] == "sess-1"
        assert event["moment"] == moment
        assert event["vendor"] == vendor.value
        assert event["time"] == clock.now
        assert event["text"] in {"first", "second"}


@pytest.mark.parametrize("vendor", [v for v in ALL_VENDORS if PROFILES[v].session_end_moment is not None])
def test_session_end_drops_each_queued_instruction(vendor: Vendor) -> None:
    """At the vendor's session-end moment every queued instruction is dropped, one event each."""
    clock = FakeClock()
    session = make(vendor, clock=clock)
    session.enqueue("cmd-1", "first")
    session.enqueue("cmd-2", "second")
    clock.advance(2.0)
    end = PROFILES[vendor].session_end_moment
    assert end is not None
    outcome = session.on_hook(end, reply_would_be_empty=True)
    assert outcome.reply is None
    assert outcome.dropped == ("cmd-1", "cmd-2")
    dropped = [e for e in session.recent_events() if e["type"] == "instruction.dropped"]
    assert [(e["command_id"], e["cause"], e["reason"]) for e in dropped] == [
        ("cmd-1", "cmd-1", "session-ended"),
        ("cmd-2", "cmd-2", "session-ended"),
    ]
    assert all(e["queued_ms"] == 2_000 for e in dropped)
    receipt = session.receipt("cmd-1")
    assert receipt is not None
    assert receipt.disposition is Disposition.HELD
    assert receipt.reason == "session-ended"
    # the session is over: nothing more queues or rides
    assert session.enqueue("cmd-3", "late").reason == InstructionRefusal.SESSION_ENDED
    assert (
        session.on_hook(any_eligible(vendor), reply_would_be_empty=True).skipped is SkipReason.SESSION_ENDED
    )
    session._check()


@pytest.mark.parametrize("vendor", [v for v in ALL_VENDORS if PROFILES[v].session_end_moment is None])
def test_vendor_without_session_end_keeps_its_queue(vendor: Vendor) -> None:
    """Codex and the VS Code agent have no session-end moment: nothing drops, the queue lives on."""
    session = make(vendor)
    session.enqueue("cmd-1", "first")
    for moment in ["SessionEnd", "Stop", "on_session_finalize"]:
        outcome = session.on_hook(moment, reply_would_be_empty=True)
        assert outcome.dropped == ()
    assert session.pending_command_ids() == ["cmd-1"]
    assert not session.ended
    assert not [e for e in session.recent_events() if e["type"] == "instruction.dropped"]
    assert session.on_hook("UserPromptSubmit", reply_would_be_empty=True).delivered == ("cmd-1",)


def test_hermes_per_turn_session_end_is_not_the_end() -> None:
    """Hermes' on_session_end fires per turn: it drops nothing; on_session_finalize does."""
    session = make(Vendor.HERMES)
    session.enqueue("cmd-1", "first")
    assert session.on_hook("on_session_end", reply_would_be_empty=True).dropped == ()
    assert session.pending == 1
    assert session.on_hook("on_session_finalize", reply_would_be_empty=True).dropped == ("cmd-1",)


@pytest.mark.parametrize("vendor", ALL_VENDORS)
def test_close_drops_with_an_audited_reason(vendor: Vendor) -> None:
    """Closing a session drops what is queued, audited with reason "closed"; it is idempotent."""
    session = make(vendor)
    session.enqueue("cmd-1", "first")
    assert session.close() == ("cmd-1",)
    assert session.close() == ()
    dropped = [e for e in session.recent_events() if e["type"] == "instruction.dropped"]
    assert [(e["cause"], e["reason"]) for e in dropped] == [("cmd-1", "closed")]
    assert session.enqueue("cmd-2", "late").reason == InstructionRefusal.SESSION_ENDED


@pytest.mark.parametrize("vendor", ALL_VENDORS)
def test_redaction_hides_text_on_the_stream_not_in_the_reply(vendor: Vendor) -> None:
    """With redact_text, events carry "[redacted]"; the hook reply carries the real text."""
    session = make(vendor, redact_text=True)
    session.enqueue("cmd-1", "secret plan")
    session.enqueue("cmd-2", "other plan")
    outcome = session.on_hook(any_eligible(vendor), reply_would_be_empty=True)
    assert outcome.reply is not None
    assert context_of(vendor, outcome.reply) == "secret plan" + SEPARATOR + "other plan"
    session.enqueue("cmd-3", "third plan")
    session.close()
    events = session.recent_events()
    texts = [e["text"] for e in events if "text" in e]
    assert len(texts) == 3 + 2 + 1  # accepted x3, delivered x2, dropped x1
    assert set(texts) == {REDACTED}
    assert "secret" not in json.dumps(events)


@pytest.mark.parametrize("vendor", ALL_VENDORS)
def test_events_follow_the_c21_envelope(vendor: Vendor) -> None:
    """Every event is JSON-serialisable with type, strictly increasing sequence, session_id and time."""
    session = make(vendor)
    session.enqueue("cmd-1", "a")
    session.enqueue("", "refused")
    session.enqueue("cmd-1", "a")
    session.on_hook(any_eligible(vendor), reply_would_be_empty=True)
    session.enqueue("cmd-2", "b")
    session.close()
    events = session.recent_events()
    assert json.loads(json.dumps(events)) == events
    sequences = [e["sequence"] for e in events]
    assert sequences == list(range(1, len(events) + 1))
    assert {e["type"] for e in events} == {
        "instruction.accepted",
        "instruction.refused",
        "instruction.repeated",
        "instruction.delivered",
        "instruction.dropped",
    }
    for event in events:
        assert {"type", "sequence", "session_id", "time"} <= event.keys()
        assert event["session_id"] == "sess-1"
    assert session.statistics().events_emitted == len(events)


def test_listener_sees_each_event_in_the_step_that_caused_it() -> None:
    """A listener is called synchronously, so a delivery is audited before on_hook returns."""
    session = make(Vendor.CLAUDE_CODE)
    seen: list[str] = []
    remove = session.add_listener(lambda event: seen.append(event["type"]))
    session.enqueue("cmd-1", "a")
    session.on_hook("Stop", reply_would_be_empty=True)
    assert seen == ["instruction.accepted", "instruction.delivered"]
    remove()
    session.enqueue("cmd-2", "b")
    assert len(seen) == 2


# -- async fan-out, both anyio backends --------------------------------------------------


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.anyio
async def test_subscription_streams_delivery_and_drop(anyio_backend: str) -> None:
    """A subscriber receives accepted, delivered and dropped events in order, then the stream ends."""
    session = make(Vendor.QWEN_CODE)
    received: list[dict[str, Any]] = []
    with session.subscribe() as events:

        async def consume() -> None:
            async for event in events:
                received.append(event)

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await anyio.wait_all_tasks_blocked()
            session.enqueue("cmd-1", "a")
            session.on_hook("PostToolUse", reply_would_be_empty=True)
            session.enqueue("cmd-2", "b")
            await anyio.wait_all_tasks_blocked()
            session.on_hook("SessionEnd", reply_would_be_empty=True)
            session.close()
    assert [(e["type"], e["cause"]) for e in received] == [
        ("instruction.accepted", "cmd-1"),
        ("instruction.delivered", "cmd-1"),
        ("instruction.accepted", "cmd-2"),
        ("instruction.dropped", "cmd-2"),
    ]


# -- the whole life, as a property -------------------------------------------------------


class HookLifecycle(RuleBasedStateMachine):
    """Any mix of enqueue / hook / session-end / close keeps every accepted instruction honest."""

    def __init__(self) -> None:
        super().__init__()
        self.session: HookSession = make(Vendor.CODEX)
        self.vendor = Vendor.CODEX
        self.accepted: list[str] = []
        self.texts: dict[str, str] = {}
        self.delivered: list[str] = []
        self.dropped: list[str] = []
        self.counter = 0
        self.steps = 0

    @initialize(vendor=st.sampled_from(ALL_VENDORS))
    def start(self, vendor: Vendor) -> None:
        self.vendor = vendor
        self.session = make(vendor)

    # sizes near the cap edges: 4_999 + 2 + 5_000 is one character over Claude Code's cap
    @rule(
        size=st.one_of(
            st.integers(min_value=1, max_value=40),
            st.sampled_from([3_333, 4_998, 4_999, 5_000, 9_998, 10_000, 10_001, 16_001]),
            st.integers(min_value=0, max_value=10_500),
        ),
        repeat=st.booleans(),
    )
    def enqueue(self, size: int, repeat: bool) -> None:
        self.steps += 1
        if repeat and self.accepted:
            command_id = self.accepted[-1]
            receipt = self.session.enqueue(command_id, self.texts[command_id])
            assert receipt.accepted
            assert receipt.repeated
            return
        self.counter += 1
        command_id = f"cmd-{self.counter}"
        text = (f"{self.counter}:" + "x" * size)[: max(size, 1)]  # unique, exactly `size` long
        before = self.session.pending_command_ids()
        receipt = self.session.enqueue(command_id, text)
        if receipt.accepted:
            self.accepted.append(command_id)
            self.texts[command_id] = text
            assert self.session.pending_command_ids() == [*before, command_id]
        else:
            assert self.session.pending_command_ids() == before
            cap = PROFILES[self.vendor].cap
            assert (
                self.session.ended
                or len(before) == 20
                or (cap is not None and len(text) > cap)
                or len(text) > 16_000
            )

    @rule(data=st.data(), empty=st.booleans())
    def hook(self, data: st.DataObject, empty: bool) -> None:
        self.steps += 1
        profile = PROFILES[self.vendor]
        candidates = sorted(profile.context_moments | profile.held_moments | profile.unconsumed_moments)
        moment = data.draw(st.sampled_from([*candidates, "Unknown"]))
        before = self.session.pending_command_ids()
        outcome = self.session.on_hook(moment, reply_would_be_empty=empty)
        assert list(outcome.delivered) == before[: len(outcome.delivered)]
        self.delivered.extend(outcome.delivered)
        if outcome.reply is not None:
            context = context_of(self.vendor, outcome.reply)
            assert context == SEPARATOR.join(self.texts[c] for c in outcome.delivered)
            if profile.cap is not None:
                assert len(context) <= profile.cap
            assert outcome.delivered
        else:
            assert outcome.delivered == ()

    # ending early would leave most runs trivial: end only after some traffic
    @precondition(lambda self: self.steps >= 15)
    @rule()
    def session_end(self) -> None:
        end = PROFILES[self.vendor].session_end_moment
        if end is None:
            return
        before = self.session.pending_command_ids()
        outcome = self.session.on_hook(end, reply_would_be_empty=True)
        assert outcome.reply is None
        assert list(outcome.dropped) == before
        assert self.session.ended
        self.dropped.extend(outcome.dropped)

    @precondition(lambda self: self.steps >= 25)
    @rule()
    def close(self) -> None:
        self.dropped.extend(self.session.close())

    @invariant()
    def every_accepted_instruction_is_accounted_for_once(self) -> None:
        self.session._check()
        queued = self.session.pending_command_ids()
        assert len(set(self.delivered)) == len(self.delivered)
        assert len(set(self.dropped)) == len(self.dropped)
        # delivered, then dropped, then still queued: exactly the accepted ones, in order
        assert self.delivered + self.dropped + queued == self.accepted
        for command_id in self.accepted:
            receipt = self.session.receipt(command_id)
            assert receipt is not None
            expected = (
                Disposition.APPLIED
                if command_id in self.delivered
                else Disposition.HELD
                if command_id in self.dropped
                else Disposition.QUEUED
            )
            assert receipt.disposition is expected


HookLifecycle.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_hook_lifecycle = HookLifecycle.TestCase


# -- the documented example runs ---------------------------------------------------------


def test_docs_example_runs() -> None:
    """examples/hooks_example.py (the one docs/hooks.md shows) runs and checks itself."""
    script = ROOT / "examples" / "hooks_example.py"
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert {
        "hookSpecificOutput": {
            "hookEventName": "PostToolUse",
            "additionalContext": "Use the corrected path\n\nRun the tests before committing",
        }
    } in lines
    kinds = [line.get("type") for line in lines]
    assert kinds.count("instruction.delivered") == 2
    assert kinds.count("instruction.dropped") == 1


def test_docs_show_the_example_and_every_vendor_moment() -> None:
    """docs/hooks.md embeds the example verbatim and names every eligible moment of every vendor."""
    doc = (ROOT / "docs" / "hooks.md").read_text(encoding="utf-8")
    example = (ROOT / "examples" / "hooks_example.py").read_text(encoding="utf-8")
    assert f"```python\n{example}```" in doc
    rows = {line.split("|")[1].strip(): line for line in doc.splitlines() if line.startswith("| ")}
    for vendor, profile in PROFILES.items():
        (row,) = [line for title, line in rows.items() if f"(`{vendor.value}`)" in title]
        for moment in profile.context_moments:
            assert f"`{moment}`" in row, (vendor, moment)
        if profile.session_end_moment is None:
            assert "**none**" in row
        else:
            assert f"`{profile.session_end_moment}`" in row


def test_session_configuration_is_checked() -> None:
    """Bad configuration is a clear error at construction, not a later surprise."""
    with pytest.raises(ValueError, match="not a valid Vendor"):
        HookSession("no-such-agent", "s")
    with pytest.raises(ValueError, match="capacity"):
        HookSession(Vendor.CODEX, "s", capacity=0)
    with pytest.raises(ValueError, match="session_id"):
        HookSession(Vendor.CODEX, "")
    with pytest.raises(TypeError, match="redact_text"):
        HookSession(Vendor.CODEX, "s", redact_text=1)  # type: ignore[arg-type]
    assert HookSession("claude-code", "s").profile is PROFILES[Vendor.CLAUDE_CODE]


def test_custom_profile_with_small_cap() -> None:
    """A custom VendorProfile works like a built-in one: its cap bounds both replies and enqueue."""
    profile = VendorProfile(
        vendor=Vendor.CODEX,
        title="Tiny",
        context_moments=frozenset({"Tick"}),
        cap=10,
        session_end_moment="Bye",
    )
    session = HookSession(profile, "s")
    assert session.max_text_chars == 10
    assert session.enqueue("long", "x" * 11).reason == InstructionRefusal.INVALID_INPUT
    for command_id in ("a", "b", "c"):
        session.enqueue(command_id, "1234")
    assert session.on_hook("Tick", reply_would_be_empty=True).delivered == ("a", "b")  # 4 + 2 + 4
    assert session.on_hook("Bye", reply_would_be_empty=True).dropped == ("c",)


def test_check_detects_a_corrupted_queue() -> None:
    """``_check()`` is a real check: a queue put out of arrival order is reported."""
    session = make(Vendor.CODEX)
    session.enqueue("a", "x")
    session.enqueue("b", "y")
    session._check()
    session._queue.reverse()
    with pytest.raises(InvariantError, match="arrival order"):
        session._check()


# -- the probes' findings (issue 12, item 9) -------------------------------------------------


class Failing:
    """A clock that works until ``armed`` is set, then raises."""

    def __init__(self) -> None:
        self.armed = False

    def __call__(self) -> float:
        if self.armed:
            raise RuntimeError("clock broke")
        return 0.0


@pytest.mark.parametrize("which", ["clock", "monotonic"])
@pytest.mark.parametrize("moment", ["PostToolUse", "SessionEnd"])
def test_a_raising_clock_changes_nothing(which: str, moment: str) -> None:
    """A clock or monotonic that raises inside on_hook leaves every instruction queued, none applied."""
    failing = Failing()
    clocks: dict[str, Any] = {"clock": lambda: 0.0, "monotonic": lambda: 0.0, which: failing}
    session = HookSession(Vendor.CLAUDE_CODE, "s", **clocks)
    session.enqueue("cmd-1", "Use the corrected path")
    before = snapshot(session)
    failing.armed = True
    with pytest.raises(RuntimeError, match="clock broke"):
        session.on_hook(moment, reply_would_be_empty=True)
    assert snapshot(session) == before
    receipt = session.receipt("cmd-1")
    assert receipt is not None
    assert receipt.disposition is Disposition.QUEUED
    session._check()
    failing.armed = False
    assert session.on_hook("PostToolUse", reply_would_be_empty=True).delivered == ("cmd-1",)


def test_a_raising_clock_at_enqueue_admits_nothing() -> None:
    """A clock that raises inside enqueue leaves no identity, no slot and no arrival behind."""
    failing = Failing()
    session = HookSession(Vendor.CODEX, "s", clock=failing, monotonic=lambda: 0.0)
    failing.armed = True
    with pytest.raises(RuntimeError, match="clock broke"):
        session.enqueue("cmd-1", "t")
    assert session.receipt("cmd-1") is None
    assert session.statistics().accepted == 0
    session._check()


def test_claude_cap_counts_utf16_code_units_in_the_session() -> None:
    """10,000 emoji are 20,000 UTF-16 code units: over Claude Code's cap; 5,000 fit, and fill a reply."""
    session = make(Vendor.CLAUDE_CODE)
    refused = session.enqueue("big", "\U0001f600" * 10_000)
    assert (refused.accepted, refused.reason) == (False, "invalid-input")
    assert session.enqueue("fits", "\U0001f600" * 5_000).accepted
    assert session.enqueue("next", "x").accepted
    first = session.on_hook("Stop", reply_would_be_empty=True)
    assert first.delivered == ("fits",)
    assert first.pending == 1
    assert PROFILES[Vendor.CLAUDE_CODE].measure("\U0001f600a") == 3
