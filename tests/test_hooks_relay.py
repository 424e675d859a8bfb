"""The hook relay in one process: its store (SQLite, PostgreSQL), the hook command, instruct, install."""

from __future__ import annotations

import io
import json
import os
import pathlib
import sqlite3

import pytest

from hooks_helpers import HookWhere, wait_for_locks_freed
from live_steering import Disposition
from live_steering.hooks import (
    PROFILES,
    InstructionRefusal,
    SqliteHookStore,
    StoreError,
    Vendor,
    _install,
    _vendors,
    _versions,
    instruct,
    instruct_async,
)
from live_steering.hooks._command import MAX_STDIN_BYTES, encode_reply, run_hook
from live_steering.hooks._postgres import PostgresHookStore
from live_steering.hooks._store import default_store_path

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures" / "hooks"
ALL_VENDORS = [v.value for v in Vendor]


def fixture(vendor: str, moment: str) -> dict[str, object]:
    data = json.loads((FIXTURES / vendor / f"{moment}.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def session_of(vendor: str) -> str:
    facts = _vendors.FACTS[vendor]
    payload = fixture(vendor, sorted(facts.context_moments)[0])
    value = next(payload[f] for f in facts.session_id_fields if f in payload)
    assert isinstance(value, str)
    return value


def hook(store: HookWhere | str, vendor: str, payload: dict[str, object] | bytes) -> tuple[bytes, str]:
    """Run the hook command's body in process; returns (stdout bytes, stderr text)."""
    where = store if isinstance(store, HookWhere) else HookWhere("sqlite", path=store)
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    out, err = io.BytesIO(), io.StringIO()
    stdin = io.BytesIO(data)
    assert run_hook(vendor, store_path=where.path, dsn=where.dsn, stdin=stdin, stdout=out, stderr=err) == 0
    return out.getvalue(), err.getvalue()


@pytest.fixture
def store(hook_store: HookWhere) -> HookWhere:
    """The store under test: every test that takes it runs on SQLite and on PostgreSQL."""
    return hook_store


@pytest.fixture
def path(tmp_path: pathlib.Path) -> str:
    """A SQLite store path, for what is SQLite's alone (files, install blocks)."""
    return str(tmp_path / "hooks.db")


def types_of(store: HookWhere, session: str | None = None) -> list[str]:
    with store.open() as s:
        return [str(e["type"]) for e in s.events(session_id=session)]


# -- fixtures: every vendor moment answers as the vendor's profile says ----------------------


def all_fixtures() -> list[tuple[str, str]]:
    return sorted((p.parent.name, p.stem) for p in FIXTURES.glob("*/*.json"))


def test_fixtures_cover_every_eligible_and_end_moment() -> None:
    """There is a stdin fixture for every eligible moment and session-end moment of every vendor."""
    have = set(all_fixtures())
    for vendor, facts in _vendors.FACTS.items():
        wanted = set(facts.context_moments) | ({facts.session_end_moment} - {None})
        assert {(vendor, m) for m in wanted if m} <= have, vendor


@pytest.mark.parametrize(("vendor", "moment"), all_fixtures())
def test_each_fixture_gets_the_reply_its_profile_promises(store: HookWhere, vendor: str, moment: str) -> None:
    """An eligible moment replies with the queued text in the vendor's shape, byte for byte; others: none."""
    session = session_of(vendor)
    facts = _vendors.FACTS[vendor]
    if moment == facts.session_end_moment:  # a session that ran (Hermes finalizes ids it never ran)
        assert hook(store, vendor, fixture(vendor, sorted(facts.context_moments)[0]))[0] == b""
    assert instruct(
        session, "Use the corrected path", id="cmd-1", vendor=vendor, store=store.path, dsn=store.dsn
    ).accepted
    out, err = hook(store, vendor, fixture(vendor, moment))
    assert err == ""
    facts = _vendors.FACTS[vendor]
    payload = fixture(vendor, moment)
    in_subagent = any(payload.get(f) for f in facts.agent_id_fields)
    if moment in facts.eligible_moments(None) and not in_subagent:  # a subagent never takes the main agent's
        if facts.reply_shape == "context":
            expected = b'{"context":"Use the corrected path"}\n'
        elif moment in facts.follow_up_moments and facts.follow_up_reply == "decision":  # "do not stop yet"
            expected = b'{"decision":"block","reason":"Use the corrected path"}\n'
        else:
            expected = (
                b'{"hookSpecificOutput":{"hookEventName":"' + moment.encode() + b'",'
                b'"additionalContext":"Use the corrected path"}}\n'
            )
        assert out == expected
        assert (
            instruct(
                session, "Use the corrected path", id="cmd-1", store=store.path, dsn=store.dsn
            ).disposition
            is Disposition.APPLIED
        )
    else:
        assert out == b""
        receipt = instruct(session, "Use the corrected path", id="cmd-1", store=store.path, dsn=store.dsn)
        expected_disposition = Disposition.HELD if moment == facts.session_end_moment else Disposition.QUEUED
        assert receipt.disposition is expected_disposition


# -- the store: FIFO, caps, admission -------------------------------------------------------


def test_instructions_join_in_arrival_order_and_are_delivered_once(store: HookWhere) -> None:
    """Two queued instructions ride one reply joined in arrival order; the next moment carries nothing."""
    for n, text in enumerate(["First", "Second"]):
        instruct("s", text, id=f"c{n}", store=store.path, dsn=store.dsn)
    out, _ = hook(store, "claude-code", {"session_id": "s", "hook_event_name": "PostToolUse"})
    assert json.loads(out)["hookSpecificOutput"]["additionalContext"] == "First\n\nSecond"
    again, _ = hook(store, "claude-code", {"session_id": "s", "hook_event_name": "PostToolUse"})
    assert again == b""
    assert types_of(store).count("x.claude-code.instruction.delivered") == 2


def test_claude_cap_counts_utf16_code_units(store: HookWhere) -> None:
    """10,000 emoji are 20,000 UTF-16 code units: over Claude Code's cap, refused; 5,000 fit exactly."""
    too_long = instruct(
        "s", "\U0001f600" * 10_000, id="big", vendor="claude-code", store=store.path, dsn=store.dsn
    )
    assert (too_long.accepted, too_long.reason) == (False, InstructionRefusal.INVALID_INPUT.value)
    assert "UTF-16" in (too_long.detail or "")
    assert instruct(
        "s", "\U0001f600" * 5_000, id="fits", vendor="claude-code", store=store.path, dsn=store.dsn
    ).accepted
    assert instruct("s", "x", id="next", store=store.path, dsn=store.dsn).accepted
    out, _ = hook(store, "claude-code", {"session_id": "s", "hook_event_name": "PostToolBatch"})
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert context == "\U0001f600" * 5_000  # the second does not fit with it: it waits, in order
    out, _ = hook(store, "claude-code", {"session_id": "s", "hook_event_name": "PostToolBatch"})
    assert json.loads(out)["hookSpecificOutput"]["additionalContext"] == "x"


def test_unknown_vendor_gets_text_every_vendor_can_carry(store: HookWhere) -> None:
    """With no vendor known for the session, text is bounded by the strictest cap (Claude Code's)."""
    receipt = instruct("s", "y" * 10_001, id="c", store=store.path, dsn=store.dsn)
    assert (receipt.accepted, receipt.reason) == (False, "invalid-input")
    assert instruct("s", "y" * 10_001, id="c", vendor="qwen-code", store=store.path, dsn=store.dsn).accepted


def test_codex_cap_counts_utf8_bytes(store: HookWhere) -> None:
    """Codex cuts additionalContext over 10,000 UTF-8 bytes: 5,001 'é' (10,002 bytes) are refused,
    5,000 fit exactly, and a queued one that does not fit beside them waits for the next moment."""
    too_long = instruct("s", "\u00e9" * 5_001, id="big", vendor="codex", store=store.path, dsn=store.dsn)
    assert (too_long.accepted, too_long.reason) == (False, InstructionRefusal.INVALID_INPUT.value)
    assert "10,000 UTF-8 bytes" in (too_long.detail or "")
    assert instruct(
        "s", "\u00e9" * 5_000, id="fits", vendor="codex", store=store.path, dsn=store.dsn
    ).accepted
    assert instruct("s", "x", id="next", store=store.path, dsn=store.dsn).accepted
    out, _ = hook(store, "codex", {"session_id": "s", "hook_event_name": "PostToolUse"})
    assert json.loads(out)["hookSpecificOutput"]["additionalContext"] == "\u00e9" * 5_000
    out, _ = hook(store, "codex", {"session_id": "s", "hook_event_name": "PostToolUse"})
    assert json.loads(out)["hookSpecificOutput"]["additionalContext"] == "x"


def test_unknown_vendor_text_fits_codex_bytes() -> None:
    """With no vendor named, 5,001 'é' (10,002 UTF-8 bytes, 5,001 UTF-16 units) are refused."""
    assert _vendors.admission_problem("\u00e9" * 5_001, [_vendors.STRICTEST]) is not None
    assert _vendors.admission_problem("\u00e9" * 5_000, [_vendors.STRICTEST]) is None


def test_queue_full_at_twenty_refuses_and_changes_nothing(store: HookWhere) -> None:
    """The 21st undelivered instruction is refused queue-full; the twenty stay queued, in order."""
    for n in range(20):
        assert instruct("s", f"t{n}", id=f"c{n}", store=store.path, dsn=store.dsn).accepted
    refused = instruct("s", "t20", id="c20", store=store.path, dsn=store.dsn)
    assert (refused.accepted, refused.reason, refused.disposition) == (False, "queue-full", None)
    with store.open() as s:
        rows = s.instructions("s")
    assert [r["command_id"] for r in rows] == [f"c{n}" for n in range(20)]
    assert types_of(store).count("control.rejected") == 1


def test_identity_repeat_and_conflict(store: HookWhere) -> None:
    """An identical repeat answers the current state; the same id with other text is identity-conflict."""
    first = instruct("s", "Use the corrected path", id="c1", store=store.path, dsn=store.dsn)
    repeat = instruct("s", "Use the corrected path", id="c1", store=store.path, dsn=store.dsn)
    assert (repeat.accepted, repeat.repeated, repeat.disposition) == (True, True, Disposition.QUEUED)
    conflict = instruct("s", "Other text", id="c1", store=store.path, dsn=store.dsn)
    assert (conflict.accepted, conflict.reason) == (False, "identity-conflict")
    assert first.to_dict() == {"accepted": True, "commandId": "c1", "sessionId": "s", "disposition": "queued"}
    with store.open() as s:
        assert len(s.instructions("s")) == 1


@pytest.mark.parametrize(
    ("text", "command_id"),
    [
        ("", "c"),
        ("   ", "c"),
        ("a\x00b", "c"),
        ("\ud800", "c"),
        ("ok", ""),
        ("ok", "x" * 129),
        ("ok", "\ud800"),
    ],
)
def test_invalid_input_is_refused_and_audited(store: HookWhere, text: str, command_id: str) -> None:
    """Blank, NUL, lone-surrogate text and bad command ids are refused invalid-input; nothing is queued."""
    receipt = instruct("s", text, id=command_id, store=store.path, dsn=store.dsn)
    assert (receipt.accepted, receipt.reason) == (False, "invalid-input")
    with store.open() as s:
        assert s.instructions() == []
        (event,) = s.events()
    assert event["type"] == "control.rejected"


def test_wrong_types_raise_type_error(store: HookWhere) -> None:
    """Only a caller's type error raises; an unknown vendor is a ValueError."""
    with pytest.raises(TypeError):
        instruct("s", 3, store=store.path, dsn=store.dsn)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        instruct(None, "t", store=store.path, dsn=store.dsn)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown vendor"):
        instruct("s", "t", vendor="emacs", store=store.path, dsn=store.dsn)


# -- session end, epochs ------------------------------------------------------------------


@pytest.mark.parametrize("vendor", [v for v in ALL_VENDORS if _vendors.FACTS[v].session_end_moment])
def test_session_end_drops_each_queued_instruction_audited(store: HookWhere, vendor: str) -> None:
    """At the session-end moment every queued instruction is dropped {reason: session-ended}, cause-linked."""
    session = session_of(vendor)
    facts = _vendors.FACTS[vendor]
    end = facts.session_end_moment
    assert end is not None
    hook(store, vendor, fixture(vendor, sorted(facts.context_moments)[0]))  # the session runs
    for n in range(3):
        instruct(session, f"t{n}", id=f"c{n}", vendor=vendor, store=store.path, dsn=store.dsn)
    out, _ = hook(store, vendor, fixture(vendor, end))
    assert out == b""
    with store.open() as s:
        dropped = [e for e in s.events() if e["type"] == f"x.{vendor}.instruction.dropped"]
    assert [(e["cause"], e["reason"]) for e in dropped] == [(f"c{n}", "session-ended") for n in range(3)]
    refused = instruct(session, "late", id="c9", store=store.path, dsn=store.dsn)
    assert (refused.accepted, refused.reason) == (False, "session-ended")
    repeat = instruct(session, "t0", id="c0", store=store.path, dsn=store.dsn)
    assert (repeat.repeated, repeat.disposition, repeat.reason) == (True, Disposition.HELD, "session-ended")


def test_resumed_claude_session_opens_a_new_epoch(store: HookWhere) -> None:
    """claude --resume reuses the id: after SessionEnd, a SessionStart reopens the session (epoch 2)."""
    session = session_of("claude-code")
    hook(store, "claude-code", fixture("claude-code", "SessionEnd"))
    assert instruct(session, "early", id="c0", store=store.path, dsn=store.dsn).reason == "session-ended"
    resumed = dict(fixture("claude-code", "SessionStart"), source="resume")
    assert hook(store, "claude-code", resumed)[0] == b""
    assert instruct(session, "Use the corrected path", id="c1", store=store.path, dsn=store.dsn).accepted
    out, _ = hook(store, "claude-code", fixture("claude-code", "UserPromptSubmit"))
    assert json.loads(out)["hookSpecificOutput"]["additionalContext"] == "Use the corrected path"
    with store.open() as s:
        (row,) = s.instructions(session)
        types = [e["type"] for e in s.events(session_id=session)]
    assert row["epoch"] == 2
    assert "x.claude-code.session.resumed" in types


@pytest.mark.parametrize(
    ("vendor", "other", "reopen"),
    [("hermes", "post_tool_call", "pre_llm_call"), ("claude-code", "PostToolUse", "UserPromptSubmit")],
)
def test_an_ended_session_takes_an_instruction_for_its_next_run_with_resume(
    store: HookWhere, vendor: str, other: str, reopen: str
) -> None:
    """`instruct --resume`: an ended session queues it for the run that reopens it (Hermes fires no
    hook when `--resume` opens a session, so this is how a host steers its first turn)."""
    session = session_of(vendor)
    end = _vendors.FACTS[vendor].session_end_moment
    assert end is not None
    hook(store, vendor, fixture(vendor, reopen))  # the session runs, then ends
    hook(store, vendor, fixture(vendor, end))
    text = "Read the notes from yesterday first"
    plain = instruct(session, text, id="r1", store=store.path, dsn=store.dsn)
    assert (plain.accepted, plain.reason) == (False, "session-ended")
    queued = instruct(session, text, id="r2", store=store.path, dsn=store.dsn, resume=True)
    assert (queued.accepted, queued.disposition) == (True, Disposition.QUEUED)
    again = instruct(session, text, id="r2", store=store.path, dsn=store.dsn, resume=True)
    assert (again.repeated, again.disposition) == (True, Disposition.QUEUED)
    hook(store, vendor, fixture(vendor, end))  # an end moment of a session already ended: kept
    assert hook(store, vendor, fixture(vendor, other))[0] == b""  # not reopening: nothing yet
    assert instruct(session, text, id="r2", store=store.path, dsn=store.dsn).disposition is Disposition.QUEUED
    out, _ = hook(store, vendor, fixture(vendor, reopen))  # the resumed run's first model request
    assert text in out.decode()
    with store.open() as s:
        (row,) = [r for r in s.instructions(session) if r["command_id"] == "r2"]
        events = s.events(session_id=session)
    assert (row["state"], row["epoch"]) == ("delivered", 2)
    (accepted,) = [e for e in events if e["type"] == "control.accepted"]
    assert accepted["resume"] is True
    types = [e["type"] for e in events]
    resumed = types.index(f"x.{vendor}.session.resumed")
    assert types.index(f"x.{vendor}.instruction.delivered") > resumed
    assert instruct(session, "live again", id="r3", store=store.path, dsn=store.dsn).accepted


def test_hermes_shell_hook_finalize_of_a_session_that_never_ran_drops_nothing(store: HookWhere) -> None:
    """`live-steering hook hermes` at on_session_finalize for an id no hook ran for (a mistyped resume)."""
    instruct("typo", "kept", id="c", vendor="hermes", store=store.path, dsn=store.dsn)
    out, _ = hook(store, "hermes", {"session_id": "typo", "hook_event_name": "on_session_finalize"})
    assert out == b""
    assert instruct("typo", "kept", id="c", store=store.path, dsn=store.dsn).disposition is Disposition.QUEUED
    with store.open() as s:
        assert [e["type"] for e in s.events()] == ["control.accepted", "control.repeated"]


def test_codex_session_end_drops_the_queue_and_a_resume_reopens(store: HookWhere) -> None:
    """Codex fires SessionEnd (0.171.0): what is queued is dropped, audited; `codex resume` reopens."""
    session = session_of("codex")
    instruct(session, "t", id="c", vendor="codex", store=store.path, dsn=store.dsn)
    out, _ = hook(store, "codex", fixture("codex", "SessionEnd"))
    assert out == b""
    with store.open() as s:
        dropped = [e for e in s.events(session_id=session) if e["type"] == "x.codex.instruction.dropped"]
    assert [(e["command_id"], e["reason"]) for e in dropped] == [("c", "session-ended")]
    assert instruct(session, "t", id="c", store=store.path, dsn=store.dsn).disposition is Disposition.HELD
    late = instruct(session, "too late", id="c2", vendor="codex", store=store.path, dsn=store.dsn)
    assert (late.accepted, late.reason) == (False, "session-ended")
    hook(store, "codex", {**fixture("codex", "SessionStart"), "source": "resume"})  # `codex resume`
    instruct(session, "after resume", id="c3", vendor="codex", store=store.path, dsn=store.dsn)
    out, _ = hook(store, "codex", fixture("codex", "UserPromptSubmit"))
    assert json.loads(out)["hookSpecificOutput"]["additionalContext"] == "after resume"


@pytest.mark.parametrize("vendor", ["vscode"])
def test_vendor_without_session_end_keeps_its_queue(store: HookWhere, vendor: str) -> None:
    """The VS Code agent has no session-end moment: the queue waits for the next eligible one."""
    session = session_of(vendor)
    instruct(session, "t", id="c", vendor=vendor, store=store.path, dsn=store.dsn)
    for name in ("Stop", "SessionEnd"):  # moments these vendors do not offer, or offer with no surface
        hook(
            store, vendor, {**fixture(vendor, "SessionStart"), "hook_event_name": name, "hookEventName": name}
        )
    out, _ = hook(store, vendor, fixture(vendor, "UserPromptSubmit"))
    assert json.loads(out)["hookSpecificOutput"]["additionalContext"] == "t"


# -- crash recovery in one process ----------------------------------------------------------


def test_dead_claimant_is_finalised_unknown_never_redelivered(store: HookWhere) -> None:
    """A claim whose process is gone becomes unknown at the next command of the session."""
    instruct("s", "t", id="c", store=store.path, dsn=store.dsn)
    with store.open() as s:
        claim = s.claim("claude-code", "s", "PostToolUse")
        assert claim.delivered == ("c",)
        if isinstance(s, PostgresHookStore):  # the claimant's connection dies, as with its process
            backend = s._raw.info.backend_pid
            s._raw.close()
            wait_for_locks_freed(s.dsn, backend)
    if store.path is not None:  # SQLite: a claimant is named by its pid; make it one that is gone
        conn = sqlite3.connect(store.path)
        conn.execute("UPDATE instructions SET claim_pid = ? WHERE command_id = 'c'", (2**22 + 12345,))
        conn.commit()
        conn.close()
    out, _ = hook(store, "claude-code", {"session_id": "s", "hook_event_name": "PostToolUse"})
    assert out == b""
    assert instruct("s", "t", id="c", store=store.path, dsn=store.dsn).disposition is Disposition.UNKNOWN
    assert "x.claude-code.instruction.unknown" in types_of(store)


def test_live_claimant_is_left_alone_and_recover_counts_dead_ones(store: HookWhere) -> None:
    """A claim held by a live process stays delivering; hooks recover finalises only dead claimants."""
    instruct("s", "t", id="c", store=store.path, dsn=store.dsn)
    with store.open() as s:
        s.claim("claude-code", "s", "PostToolUse")
        assert s.recover() == []
        assert s.receipt("s", "c") is not None
        assert s.receipt("s", "c").state == "delivering"  # type: ignore[union-attr]


def test_reply_that_cannot_be_written_is_unknown(store: HookWhere) -> None:
    """A broken stdout is not a delivery: the claimed instructions are unknown, not delivered."""

    class Broken(io.BytesIO):
        def write(self, data: object) -> int:
            raise BrokenPipeError("the vendor went away")

    instruct("s", "t", id="c", store=store.path, dsn=store.dsn)
    err = io.StringIO()
    payload = io.BytesIO(b'{"session_id": "s", "hook_event_name": "PostToolBatch"}')
    assert (
        run_hook(
            "claude-code", store_path=store.path, dsn=store.dsn, stdin=payload, stdout=Broken(), stderr=err
        )
        == 0
    )
    assert instruct("s", "t", id="c", store=store.path, dsn=store.dsn).disposition is Disposition.UNKNOWN
    assert "could not be written" in err.getvalue()


# -- bad input in process (the subprocess variants are in test_hooks_relay_processes.py) ----


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty-input"),
        (b"{not json", "malformed-input"),
        (b"[1, 2]", "malformed-input"),
        (b"[" * 100_000, "malformed-input"),  # nested deeper than the parser recurses
        (b'{"session_id": "s", "hook_event_name": "PostToolUse", "x": "\xff\xfe"}', "malformed-input"),
        (b'{"hook_event_name": "PostToolUse"}', "missing-session-id"),
        (b'{"session_id": "s"}', "missing-moment"),
        (b'{"session_id": "s", "hook_event_name": "NoSuchMoment"}', "unknown-moment"),
        (b'{"session_id": "\\ud800", "hook_event_name": "PostToolUse"}', "invalid-session-id"),
        (b'{"session_id": "s\\u0000", "hook_event_name": "PostToolUse"}', "invalid-session-id"),
        (b'{"session_id": "' + b"x" * 100_000 + b'", "hook_event_name": "Stop"}', "invalid-session-id"),
    ],
)
def test_bad_input_says_nothing_and_is_recorded(store: HookWhere, data: bytes, reason: str) -> None:
    """Bad stdin: no reply, exit 0, a hook.failed event naming the reason; queued instructions stay."""
    instruct("s", "t", id="c", store=store.path, dsn=store.dsn)
    out, _ = hook(store, "claude-code", data)
    assert out == b""
    with store.open() as s:
        failed = [e for e in s.events() if str(e["type"]).endswith("hook.failed")]
        assert s.receipt("s", "c").state == "queued"  # type: ignore[union-attr]
    assert [e["reason"] for e in failed] == [reason]


@pytest.mark.parametrize("session_id", ["\ud800", "s\x00", "x" * 100_000, ""])
def test_instruct_refuses_a_session_id_outside_the_id_rules(store: HookWhere, session_id: str) -> None:
    """A session id the runtime would refuse is a ValueError from instruct() (as HookSession raises),
    and the store is left without a row or an event."""
    with pytest.raises(ValueError, match="session"):
        instruct(session_id, "t", id="c", store=store.path, dsn=store.dsn)
    assert types_of(store) == []


def test_oversized_stdin_is_refused_and_drained(store: HookWhere) -> None:
    """Over 8 MiB of stdin is refused stdin-too-large and read to its end (the vendor's write never fails)."""
    stdin = io.BytesIO(b" " * (MAX_STDIN_BYTES + 5_000_000))
    out, err = io.BytesIO(), io.StringIO()
    assert (
        run_hook("claude-code", store_path=store.path, dsn=store.dsn, stdin=stdin, stdout=out, stderr=err)
        == 0
    )
    assert stdin.tell() == len(stdin.getvalue())
    assert out.getvalue() == b""
    assert types_of(store) == ["x.claude-code.hook.failed"]


def test_unusable_store_says_so_on_stderr_only(tmp_path: pathlib.Path) -> None:
    """A store path that cannot be opened: no reply, exit 0, the reason on stderr."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    payload: dict[str, object] = {"session_id": "s", "hook_event_name": "PostToolBatch"}
    out, err = hook(str(blocker / "hooks.db"), "claude-code", payload)
    assert out == b""
    assert "cannot open the hook store" in err


def test_damaged_store_raises_store_error(tmp_path: pathlib.Path) -> None:
    """A file that is not a store is a StoreError for instruct, never a traceback of sqlite3's."""
    path = tmp_path / "hooks.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError):
        instruct("s", "t", store=str(path))


@pytest.mark.parametrize("path", ["", ":memory:"])
def test_a_store_path_no_other_process_could_read_is_refused(
    tmp_path: pathlib.Path,
    path: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SQLite takes "" and ":memory:" for a private database that dies with the command: an
    instruction queued there would be "queued" and lost. The store refuses them (StoreError), so
    `instruct` exits 2 with one line, and `hooks install` bakes no such --store into a config."""
    from live_steering._cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match=r"no other process|names no file"):
        instruct("s", "t", store=path)
    assert main(["instruct", "--store", path, "s1", "Use the corrected path", "--id", "fix-1"]) == 2
    assert main(["hooks", "install", "claude-code", "--store", path]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert err[0].startswith("live-steering instruct: cannot open the hook store")
    assert err[1].startswith(f"live-steering hooks install: --store {path!r}:")
    assert list(tmp_path.iterdir()) == []


def test_a_hook_given_both_a_store_and_a_dsn_records_the_usage_error(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``hook VENDOR --store S --dsn D`` is a usage error like any other: exit 0, the usage on
    stderr, and ``hook.failed usage-error`` recorded in the store file it names."""
    from live_steering._cli import main

    store = str(tmp_path / "hooks.db")
    payload = b'{"session_id": "s", "hook_event_name": "PreToolUse"}'
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(payload)))
    assert main(["hook", "claude-code", "--store", store, "--dsn", "host=nowhere"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "usage: live-steering hook VENDOR [--store PATH | --dsn DSN]\n"
    with SqliteHookStore(store) as s:
        assert [e["reason"] for e in s.events() if e["type"] == "hook.failed"] == ["usage-error"]


def test_encode_reply_is_ascii_json_that_decodes_to_the_text() -> None:
    """The reply bytes are ASCII; an emoji travels as a surrogate pair that decodes to itself."""
    data = encode_reply({"context": "caf\u00e9 \U0001f600"})
    assert data.isascii()
    assert json.loads(data) == {"context": "caf\u00e9 \U0001f600"}


# -- the Python API --------------------------------------------------------------------------


async def test_instruct_async_runs_off_the_event_loop(anyio_backend: str, store: HookWhere) -> None:
    """instruct_async returns the same receipt as instruct, on asyncio and trio."""
    receipt = await instruct_async("s", "Use the corrected path", id="c1", store=store.path, dsn=store.dsn)
    assert receipt.to_dict() == {
        "accepted": True,
        "commandId": "c1",
        "sessionId": "s",
        "disposition": "queued",
    }
    repeat = await instruct_async("s", "Use the corrected path", id="c1", store=store.path, dsn=store.dsn)
    assert repeat.repeated


def test_default_store_path_follows_env_then_xdg(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    """LIVE_STEERING_STORE wins, then $XDG_STATE_HOME/live-steering/hooks.db, then ~/.local/state."""
    monkeypatch.setenv("LIVE_STEERING_STORE", str(tmp_path / "x.db"))
    assert default_store_path() == str(tmp_path / "x.db")
    monkeypatch.delenv("LIVE_STEERING_STORE")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_store_path() == str(tmp_path / "state" / "live-steering" / "hooks.db")
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == str(tmp_path / "home" / ".local" / "state" / "live-steering" / "hooks.db")


def test_events_redact_text_unless_asked(store: HookWhere) -> None:
    """Text reads [redacted] on the stream by default; show_text reveals it; the reply never hides it."""
    instruct("s", "secret plan", id="c", store=store.path, dsn=store.dsn)
    out, _ = hook(store, "claude-code", {"session_id": "s", "hook_event_name": "PostToolBatch"})
    assert b"secret plan" in out
    with store.open() as s:
        redacted = s.events()
        shown = s.events(show_text=True)
    assert {e["text"] for e in redacted if "text" in e} == {"[redacted]"}
    assert {e["text"] for e in shown if "text" in e} == {"secret plan"}
    assert [e["sequence"] for e in redacted] == sorted(e["sequence"] for e in redacted)  # type: ignore[type-var]


def test_profiles_and_facts_are_one_table() -> None:
    """The in-memory machine's PROFILES are built from the relay's vendor facts: they cannot disagree."""
    for vendor, profile in PROFILES.items():
        facts = _vendors.FACTS[vendor.value]
        assert profile.context_moments == facts.context_moments
        assert profile.session_end_moment == facts.session_end_moment
        assert profile.cap == facts.cap
        assert profile.cap_counts_utf16 == facts.cap_counts_utf16


# -- install -----------------------------------------------------------------------------------


@pytest.mark.parametrize("vendor", [v for v in ALL_VENDORS if v != "hermes"])
def test_install_block_wires_every_eligible_moment_and_the_end(vendor: str, path: str) -> None:
    """The printed config runs the hook command with --store at eligible moments plus the session end."""
    block = _install.config_block(vendor, path)
    assert isinstance(block, dict)
    facts = _vendors.FACTS[vendor]
    wired = set(block["hooks"])
    if vendor in _versions.TABLES:  # only what delivery needs, as the installed version accepts
        assert wired == set(_versions.TABLES[vendor][-1].moments)
        assert wired - {facts.session_end_moment} <= facts.eligible_moments(None)
    else:
        assert wired == set(facts.context_moments) | ({facts.session_end_moment} - {None})
    assert wired <= facts.eligible_moments(None) | ({facts.session_end_moment} - {None})
    assert facts.session_end_moment is None or facts.session_end_moment in wired
    text = json.dumps(block)
    assert f"hook {vendor} --store {os.path.abspath(path)}" in text


def test_install_hermes_prints_its_yaml_hooks_section(path: str) -> None:
    """Hermes reads hooks from config.yaml: the block is its YAML hooks: section (pre_llm_call, the end)."""
    block = _install.config_block("hermes", path)
    assert isinstance(block, str)
    assert block.startswith("hooks:\n")
    assert "  pre_llm_call:\n" in block
    assert "  on_session_finalize:\n" in block


def test_install_merge_keeps_the_users_hooks_and_is_idempotent(tmp_path: pathlib.Path, path: str) -> None:
    """--write keeps other settings and hooks, replaces earlier live-steering entries, backs the file up."""
    settings = tmp_path / "settings.json"
    mine = {"matcher": "Bash", "hooks": [{"type": "command", "command": "./my-guard.sh"}]}
    settings.write_text(json.dumps({"model": "opus", "hooks": {"PostToolBatch": [mine]}}))
    backup = _install.merge_into(str(settings), "claude-code", path).backup
    assert backup == str(settings) + ".bak"
    assert json.loads(pathlib.Path(backup).read_text())["hooks"]["PostToolBatch"] == [mine]
    again = _install.merge_into(str(settings), "claude-code", path)  # twice: still one live-steering entry
    assert (again.changed, again.backup) == (False, None)
    merged = json.loads(settings.read_text())
    assert merged["model"] == "opus"
    assert merged["hooks"]["PostToolBatch"][0] == mine
    assert len(merged["hooks"]["PostToolBatch"]) == 2
    assert len(merged["hooks"]["SessionEnd"]) == 1


def test_install_refuses_a_file_it_cannot_merge(tmp_path: pathlib.Path) -> None:
    """A config that is not a JSON object is left as it was, with an InstallError."""
    settings = tmp_path / "settings.json"
    settings.write_text("[1, 2, 3]")
    with pytest.raises(_install.InstallError):
        _install.merge_into(str(settings), "claude-code", None)
    assert settings.read_text() == "[1, 2, 3]"
    assert not (tmp_path / "settings.json.bak").exists()


def test_confirm_that_finds_the_store_locked_is_retried_by_the_same_process(
    store: HookWhere, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply written but not confirmed (lock timeout) is confirmed at this process's next moment.

    (``confirm`` is patched on ``RelayStore``, the queue both engines share: the PostgreSQL
    store no longer subclasses the SQLite one.)"""
    from live_steering.hooks import _command, _store

    instruct("s", "t", id="c", store=store.path, dsn=store.dsn)
    real_confirm = _store.RelayStore.confirm
    calls = []

    def locked_once(self: _store.RelayStore, claim: _store.Claim) -> None:
        calls.append(claim)
        if len(calls) == 1:
            raise StoreError("database is locked")
        real_confirm(self, claim)

    monkeypatch.setattr(_store.RelayStore, "confirm", locked_once)
    out, err = hook(store, "claude-code", {"session_id": "s", "hook_event_name": "PostToolBatch"})
    assert b'"additionalContext":"t"' in out
    assert "locked" in err
    assert (
        instruct("s", "t", id="c", store=store.path, dsn=store.dsn).disposition is Disposition.QUEUED
    )  # still delivering
    assert hook(store, "claude-code", {"session_id": "other", "hook_event_name": "PostToolBatch"})[0] == b""
    assert instruct("s", "t", id="c", store=store.path, dsn=store.dsn).disposition is Disposition.APPLIED
    assert _command._UNCONFIRMED == []


def test_docs_show_the_relay_example_and_the_commands() -> None:
    """docs/hooks.md embeds examples/hooks_relay.py verbatim and documents every relay command."""
    root = FIXTURES.parent.parent.parent
    doc = (root / "docs" / "hooks.md").read_text(encoding="utf-8")
    example = (root / "examples" / "hooks_relay.py").read_text(encoding="utf-8")
    assert f"```python\n{example}```" in doc
    for command in ("hook VENDOR", "instruct SESSION TEXT", "hooks events", "hooks install", "hooks recover"):
        assert f"live-steering {command}" in doc, command
    readme = (root / "README.md").read_text(encoding="utf-8")
    for command in ("live-steering instruct", "live-steering hook ", "live-steering hooks events"):
        assert command in readme, command


def test_session_id_sqlite_cannot_store_is_a_value_error(store: HookWhere) -> None:
    """A session id with a lone surrogate (undecodable argv bytes) is a ValueError, not a traceback."""
    with pytest.raises(ValueError, match="session_id"):
        instruct("s\udcff", "t", store=store.path, dsn=store.dsn)
    with store.open() as s:
        assert s.instructions() == []


def test_install_hermes_yaml_appends_once_and_refuses_a_section_of_the_users(
    tmp_path: pathlib.Path, path: str
) -> None:
    """Hermes' config.yaml gets our hooks once; an event the user wired themselves is left alone."""
    config = tmp_path / "config.yaml"
    config.write_text("model: anthropic/claude-sonnet-4\n")
    _install.merge_into(str(config), "hermes", path)
    text = config.read_text()
    assert text.startswith("model: anthropic/claude-sonnet-4\nhooks:\n")
    assert (tmp_path / "config.yaml.bak").read_text() == "model: anthropic/claude-sonnet-4\n"
    assert not _install.merge_into(str(config), "hermes", path).changed  # ours already: idempotent
    assert config.read_text() == text
    users = tmp_path / "users.yaml"
    own = 'hooks:\n  pre_llm_call:\n    - command: "my-context-script"\n'
    users.write_text(own)
    with pytest.raises(_install.InstallError, match="already wires the Hermes event 'pre_llm_call'"):
        _install.merge_into(str(users), "hermes", path)
    assert users.read_text() == own


def test_install_hermes_yaml_keeps_the_users_cap_setting_and_other_events(
    tmp_path: pathlib.Path, path: str
) -> None:
    """A hooks: section with Hermes's own output_spill cap and a hook of the user's is merged, both kept."""
    config = tmp_path / "config.yaml"
    users = (
        "model: x\nhooks:\n  output_spill:\n    max_chars: 20000\n"
        '  post_tool_call:\n    - command: "notify-send done"\nagent:\n  max_turns: 5\n'
    )
    config.write_text(users)
    assert _install.merge_into(str(config), "hermes", path).changed
    text = config.read_text()
    assert "  output_spill:\n    max_chars: 20000\n" in text
    assert '  post_tool_call:\n    - command: "notify-send done"\n' in text
    assert text.endswith("agent:\n  max_turns: 5\n")
    for moment in _install.moments("hermes"):
        assert f"  {moment}:\n    - command: " in text
    assert text.count("hooks:") == 1
    assert not _install.merge_into(str(config), "hermes", path).changed  # idempotent with the user's keys
    assert (tmp_path / "config.yaml.bak").read_text() == users


def test_open_store_picks_path_then_dsn_then_the_environment(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, postgres_dsn: str
) -> None:
    """--store wins, then --dsn, then $LIVE_STEERING_STORE_DSN, then the SQLite default; both is an error."""
    from live_steering.hooks import HookStore, open_store

    monkeypatch.setenv("LIVE_STEERING_STORE", str(tmp_path / "default.db"))
    monkeypatch.delenv("LIVE_STEERING_STORE_DSN", raising=False)
    with open_store() as s:
        assert isinstance(s, SqliteHookStore)
        assert s.path == str(tmp_path / "default.db")
    monkeypatch.setenv("LIVE_STEERING_STORE_DSN", postgres_dsn)
    with open_store() as s:
        assert isinstance(s, PostgresHookStore)
    with open_store(str(tmp_path / "explicit.db")) as s:
        assert isinstance(s, SqliteHookStore)
        assert not isinstance(s, PostgresHookStore)
    with pytest.raises(ValueError, match="not both"):
        open_store(str(tmp_path / "x.db"), dsn=postgres_dsn)
    with SqliteHookStore(tmp_path / "y.db") as opened:
        store: HookStore = opened
        with pytest.raises(ValueError, match="not both"):
            instruct("s", "t", store=store, dsn=postgres_dsn)
    assert not (tmp_path / "x.db").exists()


def test_a_postgres_claimant_on_another_connection_is_alive_until_it_goes(postgres_dsn: str) -> None:
    """A claim held by another live connection (another machine's hook) stays delivering; once that
    connection is gone (the server has freed its locks: polled, bounded), recover finalises it
    unknown and it is never claimed again."""
    import uuid

    import psycopg

    schema = f"hooks_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    where = HookWhere("postgres", dsn=f"{postgres_dsn} options='-c search_path={schema}'")
    instruct("s", "t", id="c", dsn=where.dsn)
    claimant, watcher = PostgresHookStore(str(where.dsn)), PostgresHookStore(str(where.dsn))
    try:
        assert claimant.claim("claude-code", "s", "PostToolUse").delivered == ("c",)
        assert watcher.recover() == []
        assert watcher.claim("claude-code", "s", "PostToolUse").delivered == ()
        backend = claimant._raw.info.backend_pid
        claimant._raw.close()  # the claimant's process dies: the server ends its session
        wait_for_locks_freed(postgres_dsn, backend)  # which frees its liveness lock a moment later
        assert watcher.recover() == ["c"]
        assert watcher.claim("claude-code", "s", "PostToolUse").delivered == ()
        assert watcher.receipt("s", "c").state == "unknown"  # type: ignore[union-attr]
    finally:
        claimant.close()
        watcher.close()


def test_a_postgres_store_wide_recover_commits_a_sessions_events_in_sequence_order(postgres_dsn: str) -> None:
    """A store-wide `hooks recover` (no --session) and a submit to the same session at once: the
    submit's event may not commit before the recovery's earlier-numbered ``instruction.unknown``,
    or a feed that reads by sequence (serve's event stream, `hooks events --follow`) moves past
    that event and never shows it. Here the recovery is held just before its commit while the
    submit runs in a thread (it waits for the session's lock, or without it commits first); a
    feed read at that moment and once more after both commits sees every event, in order."""
    import threading
    import time
    import uuid

    import psycopg

    schema = f"hooks_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    dsn = f"{postgres_dsn} options='-c search_path={schema}'"
    instruct("s", "first", id="a1", dsn=dsn)
    claimant, submitter, reader = PostgresHookStore(dsn), PostgresHookStore(dsn), PostgresHookStore(dsn)
    feed: list[int] = []

    def read() -> None:
        after = feed[-1] if feed else 0
        feed.extend(int(str(e["sequence"])) for e in reader.events(after=after, session_id="s"))

    def submit_while_recovery_commits(point: str) -> None:
        if point != "before-commit" or "thread" in box:
            return
        box["thread"] = thread = threading.Thread(target=lambda: submitter.enqueue("s", "a2", "second"))
        backend = submitter._raw.info.backend_pid
        thread.start()
        with psycopg.connect(postgres_dsn, autocommit=True) as watch:
            deadline = time.monotonic() + 60  # bounded: another backend decides
            waiting = "SELECT 1 FROM pg_locks WHERE pid = %s AND locktype = 'advisory' AND NOT granted"
            while thread.is_alive() and not watch.execute(waiting, (backend,)).fetchone():
                assert time.monotonic() < deadline, "the submit neither finished nor waited for a lock"
                time.sleep(0.01)
        read()  # the feed polls now: the recovery is not committed yet

    box: dict[str, threading.Thread] = {}
    recoverer = PostgresHookStore(dsn, trace=submit_while_recovery_commits)
    try:
        read()
        assert claimant.claim("claude-code", "s", "PostToolUse").delivered == ("a1",)
        backend = claimant._raw.info.backend_pid
        claimant._raw.close()  # the hook process dies before it confirms
        wait_for_locks_freed(postgres_dsn, backend)
        assert recoverer.recover() == ["a1"]
        box["thread"].join(timeout=60)
        assert not box["thread"].is_alive()
        read()
        everything = [int(str(e["sequence"])) for e in reader.events(session_id="s")]
        assert feed == everything  # nothing skipped, nothing twice
        types = [e["type"] for e in reader.events(session_id="s")]
        assert types[-2:] == ["x.claude-code.instruction.unknown", "control.accepted"]
    finally:
        for store in (claimant, submitter, reader, recoverer):
            store.close()


# -- subagents of Codex and Qwen Code ---------------------------------------------------------


@pytest.mark.parametrize("vendor", ["codex", "qwen-code"])
def test_a_codex_or_qwen_subagent_never_takes_the_main_agents_instruction(
    store: HookWhere, vendor: str
) -> None:
    """Their subagents' hooks carry the parent's session_id and their own agent_id (seen with the
    real Codex 0.171.0 and Qwen Code 0.24.4): the main agent's instruction waits for the main
    agent's hook, and ``--agent`` reaches only that subagent (a subagent took the main agent's)."""
    payload = fixture(vendor, "PostToolUse")
    session = session_of(vendor)
    in_sub = {**payload, "agent_id": "sub-7f", "agent_type": "default"}
    assert instruct(
        session, "For the main agent", id="m1", vendor=vendor, store=store.path, dsn=store.dsn
    ).accepted
    assert instruct(
        session,
        "For the subagent",
        id="a1",
        vendor=vendor,
        store=store.path,
        dsn=store.dsn,
        agent_id="sub-7f",
    ).accepted
    out, _ = hook(store, vendor, in_sub)
    assert b"For the subagent" in out
    assert b"For the main agent" not in out
    out, _ = hook(store, vendor, payload)
    assert b"For the main agent" in out
    assert b"For the subagent" not in out
    with store.open() as s:
        delivered = {
            e["command_id"]: e["agent_id"] for e in s.events() if str(e["type"]).endswith(".delivered")
        }
    assert delivered == {"a1": "sub-7f", "m1": None}


@pytest.mark.parametrize("vendor", [v for v, facts in _vendors.FACTS.items() if not facts.agent_id_fields])
def test_agent_is_refused_for_a_vendor_whose_hooks_name_no_subagent(store: HookWhere, vendor: str) -> None:
    """``--agent`` for a vendor whose hooks never say which subagent runs them would be queued for
    ever (nothing could claim it): refused unsupported-kind, nothing queued."""
    session = session_of(vendor)
    refused = instruct(
        session, "For a subagent", id="a1", vendor=vendor, store=store.path, dsn=store.dsn, agent_id="x"
    )
    assert (refused.accepted, refused.reason) == (False, "unsupported-kind")
    assert "control.accepted" not in types_of(store, session)


def test_sessions_say_whether_a_hook_of_each_ever_ran(store: HookWhere) -> None:
    """A session only ``instruct`` named (perhaps a typo) is listed with ``seen`` False, so the
    listing the typo hint points to tells it from the session whose hooks run."""
    start = {"hook_event_name": "SessionStart"}
    assert hook(store, "claude-code", {**start, "session_id": "real-7a13"})[0] == b""
    assert instruct("real-7a31", "Use X", vendor="claude-code", store=store.path, dsn=store.dsn)
    with store.open() as s:
        listed = {r["session_id"]: (r["seen"], r["ended"], r["queued"]) for r in s.sessions()}
    assert listed == {"real-7a13": (True, False, 0), "real-7a31": (False, False, 1)}
    assert hook(store, "claude-code", {**start, "session_id": "real-7a31"})[0]  # it delivers
    with store.open() as s:
        assert {r["session_id"]: r["seen"] for r in s.sessions()} == {"real-7a13": True, "real-7a31": True}


def test_a_subagents_first_hook_records_its_id_once_for_instruct_agent(store: HookWhere) -> None:
    """The ids ``instruct --agent`` takes are listed by ``sessions()``: a subagent's first hook moment
    records ``x.VENDOR.agent.seen {agent_id, moment}``, its later ones write nothing, and an
    instruction sent to the id it lists reaches that subagent's next moment."""
    base = {"session_id": "s-agents", "hook_event_name": "PostToolBatch"}
    assert hook(store, "claude-code", {**base, "hook_event_name": "SessionStart"})[0] == b""
    counts = []
    for agent in ("agent-b2", "agent-a1", "agent-b2", "agent-b2"):
        assert hook(store, "claude-code", {**base, "agent_id": agent})[0] == b""
        counts.append(len(types_of(store)))
    assert counts[1:] == [counts[0] + 1] * 3  # one event for the second agent, none for repeats
    with store.open() as s:
        seen = [e for e in s.events(session_id="s-agents") if e["type"] == "x.claude-code.agent.seen"]
    assert [(e["agent_id"], e["moment"]) for e in seen] == [
        ("agent-b2", base["hook_event_name"]),
        ("agent-a1", base["hook_event_name"]),
    ]
    with store.open() as s:
        (row,) = s.sessions()
    assert row["agents"] == ["agent-b2", "agent-a1"]
    target = row["agents"][0]
    assert instruct("s-agents", "For the explorer", agent_id=target, store=store.path, dsn=store.dsn).accepted
    assert hook(store, "claude-code", {**base, "agent_id": "agent-a1"})[0] == b""
    assert b"For the explorer" in hook(store, "claude-code", {**base, "agent_id": target})[0]


@pytest.mark.parametrize(
    ("first", "again"),
    [
        ({"kind": "follow_up"}, {"kind": "steer"}),
        ({"kind": "steer"}, {"kind": "follow_up"}),
        ({"agent_id": "agent-7f"}, {}),
        ({}, {"agent_id": "agent-7f"}),
    ],
)
def test_the_same_id_and_text_as_another_kind_or_agent_is_an_identity_conflict(
    store: HookWhere, first: dict[str, str], again: dict[str, str]
) -> None:
    """An id is one input whatever its kind (C10, C29), as on the fleet: the same id and text sent
    as the other kind, or for another agent, is refused ``identity-conflict`` and changes nothing;
    the same again is a repeat."""
    where = {"vendor": "claude-code", "store": store.path, "dsn": store.dsn}
    assert instruct("s-kind", "then Y", id="k2", **first, **where).accepted  # type: ignore[arg-type]
    refused = instruct("s-kind", "then Y", id="k2", **again, **where)  # type: ignore[arg-type]
    assert (refused.accepted, refused.reason) == (False, "identity-conflict")
    repeat = instruct("s-kind", "then Y", id="k2", **first, **where)  # type: ignore[arg-type]
    assert (repeat.accepted, repeat.repeated) == (True, True)
    with store.open() as s:
        assert [r["command_id"] for r in s.instructions("s-kind")] == ["k2"]
