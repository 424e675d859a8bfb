"""Claude Code in the hook relay (issue 24): versions, follow-ups, subagents, install, cost.

The real CLI runs in ``tests/test_hooks_claude_real.py``; here the same rules are pinned
without it: the version table, the Stop decision for follow-ups, subagent targeting, the
``hooks install`` options, ``hooks events`` paging, one-line failures and the imports of
the ``hook`` and ``instruct`` paths.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import stat
import subprocess
import sys

import pytest

from live_steering._cli import main
from live_steering.hooks import SqliteHookStore, _install, _vendors, _versions, instruct
from live_steering.hooks._command import run_hook

CLAUDE = _vendors.FACTS["claude-code"]


def hook(store: str, payload: dict[str, object], vendor: str = "claude-code") -> bytes:
    out, err = io.BytesIO(), io.StringIO()
    data = io.BytesIO(json.dumps(payload).encode())
    assert run_hook(vendor, store_path=store, stdin=data, stdout=out, stderr=err) == 0
    assert err.getvalue() == ""
    return out.getvalue()


@pytest.fixture
def store(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "hooks.db")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def delivered(store: str, command_id: str, vendor: str = "claude-code") -> list[dict[str, object]]:
    with SqliteHookStore(store) as s:
        return [
            e
            for e in s.events()
            if e["type"] == f"x.{vendor}.instruction.delivered" and e.get("command_id") == command_id
        ]


# -- 1. the version table -------------------------------------------------------------------


ROWS = _versions.TABLES["claude-code"]


@pytest.mark.parametrize("row", ROWS, ids=repr)
def test_every_moment_a_release_fires_is_known_to_the_relay(row: _versions.Wiring) -> None:
    """No moment of any release in the table is an ``unknown-moment`` failure (MessageDisplay...)."""
    assert row.known is not None
    assert row.known <= CLAUDE.known_moments


@pytest.mark.parametrize("row", ROWS, ids=repr)
def test_the_install_wires_only_moments_the_release_accepts(row: _versions.Wiring) -> None:
    """Each release gets only moments it knows, one per tool round, and each wired moment delivers
    (or ends the session); the verified releases wire PostToolBatch, once per round."""
    wired = _install.moments("claude-code", row.minimum)
    assert row.known is not None
    assert set(wired) <= row.known
    assert set(wired) <= CLAUDE.context_moments | {CLAUDE.session_end_moment}
    if row.verified:
        assert wired == ["SessionStart", "UserPromptSubmit", "PostToolBatch", "Stop", "SessionEnd"]


def test_2_1_197_does_not_know_post_model_switch_and_2_1_332_does() -> None:
    """The fact behind the settings warning of issue 24, as the table holds it; both are the
    versions the real-client tests run."""
    old, new = (_versions.wiring("claude-code", v) for v in ((2, 1, 197), (2, 1, 332)))
    assert old is not None
    assert new is not None
    assert old.known is not None
    assert new.known is not None
    assert "PostModelSwitch" not in old.known
    assert "PostModelSwitch" in new.known
    assert "PostModelSwitch" not in _install.moments("claude-code", (2, 1, 197))
    assert _versions.verified_versions("claude-code") == ((2, 1, 197), (2, 1, 332))


def test_an_older_or_undetected_version_gets_the_safe_wiring_and_a_note() -> None:
    """Older than the table: only moments every version knows (PostToolUse per tool call); none
    detected: the newest verified row's wiring (the same moments 2.1.197 takes). Both say so."""
    assert _install.moments("claude-code", (1, 0, 80)) == [
        "SessionStart",
        "UserPromptSubmit",
        "PostToolUse",
        "Stop",
        "SessionEnd",
    ]
    older = _versions.install_note("claude-code", (1, 0, 80), "claude --version: 1.0.80")
    assert "older than the versions verified (2.1.197, 2.1.332)" in older
    assert _install.moments("claude-code", None) == _install.moments("claude-code", (2, 1, 197))
    unknown = _versions.install_note("claude-code", None, "no claude on PATH")
    assert "--vendor-version" in unknown
    assert _versions.support("claude-code", (2, 1, 250)) == "supported"


def fake_cli(tmp_path: pathlib.Path, answer: str) -> pathlib.Path:
    script = tmp_path / "claude"
    script.write_text(f"#!/bin/sh\necho '{answer}'\n")
    script.chmod(0o755)
    return script


def test_install_asks_the_cli_for_its_version(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], store: str
) -> None:
    """``hooks install claude-code --client PATH`` runs ``PATH --version``, wires that version's moments."""
    cli = fake_cli(tmp_path, "1.0.80 (Claude Code)")
    assert main(["hooks", "install", "claude-code", "--store", store, "--client", str(cli)]) == 0
    out, err = capsys.readouterr()
    assert list(json.loads(out)["hooks"]) == [
        "SessionStart",
        "UserPromptSubmit",
        "PostToolUse",
        "Stop",
        "SessionEnd",
    ]
    assert "1.0.80" in err
    broken = tmp_path / "nothing-here"
    assert main(["hooks", "install", "claude-code", "--client", str(broken)]) == 2
    assert "did not answer a version" in capsys.readouterr().err
    assert main(["hooks", "install", "claude-code", "--client-version", "soon"]) == 2


# -- 2. follow-ups through the Stop decision (C29) --------------------------------------------


def test_a_follow_up_waits_for_stop_and_rides_the_do_not_stop_decision(store: str) -> None:
    """A follow-up passes tool rounds by; at Stop it (after a steer queued before it) rides
    Stop's ``additionalContext``, which keeps Claude Code going (a block decision's reason
    reaches 2.1.332's next request twice); the events say ``delivery: "follow_up"``."""
    session = "s-follow"
    assert instruct(
        session, "Then update the changelog", id="f1", vendor="claude-code", store=store, kind="follow_up"
    ).accepted
    assert hook(store, {"session_id": session, "hook_event_name": "PostToolBatch"}) == b""
    assert instruct(session, "Use the corrected path", id="s1", store=store).accepted
    assert json.loads(hook(store, {"session_id": session, "hook_event_name": "PostToolBatch"})) == {
        "hookSpecificOutput": {
            "hookEventName": "PostToolBatch",
            "additionalContext": "Use the corrected path",
        }
    }
    assert instruct(session, "Also run the linters", id="s2", store=store).accepted
    reply = json.loads(
        hook(store, {"session_id": session, "hook_event_name": "Stop", "stop_hook_active": False})
    )
    assert reply == {
        "hookSpecificOutput": {
            "hookEventName": "Stop",
            "additionalContext": "Then update the changelog\n\nAlso run the linters",
        }
    }
    assert [e.get("delivery") for e in delivered(store, "f1")] == ["follow_up"]
    assert [e.get("delivery") for e in delivered(store, "s2")] == [None]
    assert hook(store, {"session_id": session, "hook_event_name": "Stop", "stop_hook_active": True}) == b""


@pytest.mark.parametrize("vendor", ["codex", "qwen-code"])
def test_codex_and_qwen_carry_a_follow_up_at_their_stop_block_decision(store: str, vendor: str) -> None:
    """Codex 0.171.0's and Qwen Code 0.24.4's Stop take the same ``{"decision": "block", "reason"}``
    reply: a follow-up is accepted, passes a tool round by, rides the first Stop once; the next
    Stop says nothing."""
    session = f"s-{vendor}-follow"
    receipt = instruct(
        session, "Then update the changelog", id="f1", vendor=vendor, store=store, kind="follow_up"
    )
    assert (receipt.accepted, receipt.disposition) == (True, "queued")
    assert (
        hook(
            store,
            {
                "session_id": session,
                "hook_event_name": "PostToolBatch" if vendor == "qwen-code" else "PostToolUse",
            },
            vendor,
        )
        == b""
    )
    stop = {"session_id": session, "hook_event_name": "Stop", "stop_hook_active": False}
    assert json.loads(hook(store, stop, vendor)) == {
        "decision": "block",
        "reason": "Then update the changelog",
    }
    (event,) = delivered(store, "f1", vendor)
    assert (event["moment"], event.get("delivery")) == ("Stop", "follow_up")
    assert hook(store, {**stop, "stop_hook_active": True}, vendor) == b""


@pytest.mark.parametrize(
    ("vendor", "detail"),
    [
        (None, "no vendor is known for this session yet"),
        ("vscode", "VS Code agent has no 'do not stop yet' hook reply"),
        ("hermes", "Hermes has no 'do not stop yet' hook reply"),
    ],
)
def test_a_follow_up_without_a_stop_decision_is_refused_unsupported_kind(
    store: str, vendor: str | None, detail: str
) -> None:
    """The refusal is the one order's ``unsupported-kind`` (``_admit.decide``), with the reason."""
    receipt = instruct("s-none", "Then tag it", id="f1", vendor=vendor, store=store, kind="follow_up")
    assert (receipt.accepted, receipt.reason) == (False, "unsupported-kind")
    assert detail in str(receipt.detail)
    with SqliteHookStore(store) as s:
        assert s.instructions() == []


def test_a_follow_up_for_a_subagent_is_refused_rather_than_stranded(store: str) -> None:
    """``instruct --follow-up --agent A``: only the main agent's Stop carries a follow-up, so one
    queued for a subagent would sit ``queued`` until the session ends. Refused
    ``unsupported-kind`` (the one order's reason) with a detail that says why; nothing queued."""
    session = "s-sub"
    hook(store, {"session_id": session, "hook_event_name": "SessionStart"})
    receipt = instruct(
        session, "Then check b.py", id="f1", store=store, kind="follow_up", agent_id="agent-7f3c"
    )
    assert (receipt.accepted, receipt.reason) == (False, "unsupported-kind")
    assert "subagent" in str(receipt.detail)
    with SqliteHookStore(store) as s:
        assert s.instructions() == []
    # a steer for that subagent is still taken, and a follow-up for the main agent too
    assert instruct(session, "Look at b.py", id="s1", store=store, agent_id="agent-7f3c").accepted
    assert instruct(session, "Then check b.py", id="f2", store=store, kind="follow_up").accepted


def test_a_follow_up_for_a_session_its_hooks_named_needs_no_vendor_flag(store: str) -> None:
    """Once Claude Code's hooks ran for the session, the store knows its vendor."""
    hook(store, {"session_id": "s-known", "hook_event_name": "SessionStart"})
    assert instruct("s-known", "Then tag it", id="f1", store=store, kind="follow_up").accepted


def test_an_ended_session_refuses_a_follow_up_session_ended_first(store: str) -> None:
    """The one order: a closed session's answer comes before the kind's."""
    hook(store, {"session_id": "s-end", "hook_event_name": "SessionEnd"})
    receipt = instruct("s-end", "Then tag it", id="f1", vendor="codex", store=store, kind="follow_up")
    assert receipt.reason == "session-ended"


def test_instruct_follow_up_on_the_command_line(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``instruct --follow-up``: exit 0 accepted for Claude Code, exit 1 refused for Hermes."""
    assert (
        main(
            [
                "instruct",
                "s-cli",
                "Then tag it",
                "--follow-up",
                "--vendor",
                "claude-code",
                "--store",
                store,
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["disposition"] == "queued"
    assert (
        main(
            [
                "instruct",
                "s-cli2",
                "Then tag it",
                "--follow-up",
                "--vendor",
                "hermes",
                "--store",
                store,
                "--json",
            ]
        )
        == 1
    )
    refused = json.loads(capsys.readouterr().out)
    assert (refused["reason"], refused["accepted"]) == ("unsupported-kind", False)


# -- 3. main agent and subagents --------------------------------------------------------------


def test_a_subagent_hook_never_claims_the_main_agents_instruction(store: str) -> None:
    """A hook carrying agent_id passes the main agent's instruction by; the main agent's takes it
    and the event says which agent took it (``agent_id: null``)."""
    assert instruct("s-sub", "For the main agent", id="m1", store=store).accepted
    in_sub: dict[str, object] = {
        "session_id": "s-sub",
        "hook_event_name": "PostToolBatch",
        "agent_id": "agent-7f",
        "agent_type": "Explore",
    }
    assert hook(store, in_sub) == b""
    assert (
        hook(store, {"session_id": "s-sub", "hook_event_name": "SubagentStart", "agent_id": "agent-7f"})
        == b""
    )
    assert b"For the main agent" in hook(store, {"session_id": "s-sub", "hook_event_name": "PostToolBatch"})
    assert [e["agent_id"] for e in delivered(store, "m1")] == [None]


def test_instruct_agent_targets_one_subagent(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``instruct --agent ID``: only that subagent's hooks take it; the event names the agent."""
    assert (
        main(["instruct", "s-sub", "For the explorer", "--id", "a1", "--agent", "agent-7f", "--store", store])
        == 0
    )
    capsys.readouterr()
    assert hook(store, {"session_id": "s-sub", "hook_event_name": "PostToolBatch"}) == b""
    assert (
        hook(store, {"session_id": "s-sub", "hook_event_name": "PostToolBatch", "agent_id": "agent-other"})
        == b""
    )
    out = hook(store, {"session_id": "s-sub", "hook_event_name": "PostToolBatch", "agent_id": "agent-7f"})
    assert json.loads(out)["hookSpecificOutput"]["additionalContext"] == "For the explorer"
    assert [e["agent_id"] for e in delivered(store, "a1")] == ["agent-7f"]
    with SqliteHookStore(store) as s:
        (accepted,) = [e for e in s.events() if e["type"] == "control.accepted"]
    assert accepted["agent_id"] == "agent-7f"


def test_a_bad_agent_id_is_a_usage_error(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["instruct", "s", "x", "--agent", "a" * 200, "--store", store]) == 2
    assert "agent id" in capsys.readouterr().err


# -- 4. install: HTTP hooks, the default path, owner and mode, non-UTF-8 ----------------------


def test_install_http_writes_the_serve_route(capsys: pytest.CaptureFixture[str]) -> None:
    """``--http URL``: Claude Code ``{"type": "http", "url": URL/v1/hooks/claude-code}``; Qwen Code
    ``http`` with its name and millisecond timeout; a vendor without HTTP hooks: exit 2."""
    assert (
        main(
            [
                "hooks",
                "install",
                "claude-code",
                "--client-version",
                "2.1.197",
                "--http",
                "http://127.0.0.1:8765/",
            ]
        )
        == 0
    )
    block = json.loads(capsys.readouterr().out)
    entries = [h for groups in block["hooks"].values() for g in groups for h in g["hooks"]]
    assert entries
    assert all(
        h == {"type": "http", "url": "http://127.0.0.1:8765/v1/hooks/claude-code", "timeout": 10}
        for h in entries
    )
    assert main(["hooks", "install", "qwen-code", "--http", "http://127.0.0.1:8765"]) == 0
    qwen = json.loads(capsys.readouterr().out)
    (entry,) = next(iter(qwen["hooks"].values()))[0]["hooks"]
    assert (entry["type"], entry["url"]) == ("http", "http://127.0.0.1:8765/v1/hooks/qwen-code")
    assert main(["hooks", "install", "codex", "--http", "http://127.0.0.1:8765"]) == 2
    assert "no HTTP hooks" in capsys.readouterr().err
    assert main(["hooks", "install", "claude-code", "--http", "127.0.0.1:8765"]) == 2


def test_install_http_then_command_replaces_the_http_entries(tmp_path: pathlib.Path) -> None:
    """Switching between HTTP and command hooks leaves one live-steering entry per moment."""
    settings = tmp_path / "settings.json"
    _install.merge_into(str(settings), "claude-code", None, version=(2, 1, 197), http="http://127.0.0.1:1")
    _install.merge_into(str(settings), "claude-code", None, version=(2, 1, 197))
    hooks = json.loads(settings.read_text())["hooks"]
    assert all(len(groups) == 1 and groups[0]["hooks"][0]["type"] == "command" for groups in hooks.values())


def test_write_without_a_path_uses_the_vendors_user_config(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    assert main(["hooks", "install", "claude-code", "--client-version", "2.1.197", "--write"]) == 0
    written = tmp_path / ".claude" / "settings.json"
    assert "SessionEnd" in json.loads(written.read_text())["hooks"]
    assert str(written) in capsys.readouterr().out


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_write_as_root_keeps_the_files_owner_group_and_mode(tmp_path: pathlib.Path) -> None:
    """Root editing another user's settings: the file stays theirs, with its mode."""
    settings = tmp_path / "settings.json"
    settings.write_text('{"model": "opus"}')
    os.chown(settings, 4321, 4322)
    settings.chmod(0o640)
    _install.merge_into(str(settings), "claude-code", None, version=(2, 1, 197))
    status = settings.stat()
    assert (status.st_uid, status.st_gid, stat.S_IMODE(status.st_mode)) == (4321, 4322, 0o640)
    assert json.loads(settings.read_text())["model"] == "opus"


def test_write_refuses_a_file_that_is_not_utf8_in_one_line(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "settings.json"
    settings.write_bytes(b'{"model": "\xff"}')
    assert (
        main(["hooks", "install", "claude-code", "--client-version", "2.1.197", "--write", str(settings)])
        == 1
    )
    err = capsys.readouterr().err
    assert "is not UTF-8" in err
    assert "Traceback" not in err
    assert settings.read_bytes() == b'{"model": "\xff"}'


INSTALL_197 = ["hooks", "install", "claude-code", "--client-version", "2.1.197", "--write"]


def test_write_merges_a_file_holding_a_lone_surrogate_escape(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``"\\ud83d"`` alone is valid JSON (Claude Code's JSON.parse reads it) that UTF-8 cannot
    encode: the merge writes it back as the same escape, keeps the user's other text as it was
    (non-ASCII unescaped), and backs up the original."""
    settings = tmp_path / "settings.json"
    original = b'{"statusLine": {"type": "command", "command": "echo \\ud83d caf\xc3\xa9"}}'
    settings.write_bytes(original)
    code, out, err = cli(capsys, *INSTALL_197, str(settings))
    assert (code, err) == (0, "")
    assert f"the previous file is in {settings}.bak" in out
    text = settings.read_text(encoding="utf-8")
    assert '"echo \\ud83d café"' in text
    config = json.loads(text)
    assert config["statusLine"]["command"] == "echo \ud83d caf\u00e9"
    assert "SessionEnd" in config["hooks"]
    assert (tmp_path / "settings.json.bak").read_bytes() == original
    assert (
        "already has these claude-code hooks; nothing was changed"
        in cli(capsys, *INSTALL_197, str(settings))[1]
    )


def test_a_write_that_fails_leaves_the_file_and_makes_no_backup(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new file cannot be written (the disk is full): one line, exit 1, the file unchanged and
    no ``.bak`` beside it (the copy is made only once the new file is written)."""
    settings = tmp_path / "settings.json"
    settings.write_text('{"model": "opus"}', encoding="utf-8")

    def full(*args: object, **kwargs: object) -> object:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    code, out, err = cli(capsys, *INSTALL_197, str(settings))
    assert (code, out) == (1, "")
    assert err == "live-steering hooks install: [Errno 28] No space left on device\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.json"]
    assert settings.read_text(encoding="utf-8") == '{"model": "opus"}'


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_write_refuses_a_file_holding_nan_or_infinity(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], constant: str
) -> None:
    """``NaN``/``Infinity`` are not JSON (Claude Code cannot read the file) though Python's json
    reads them: refused as not JSON, exit 1, nothing changed, no backup."""
    settings = tmp_path / "settings.json"
    original = f'{{"cleanupPeriodDays": {constant}}}'
    settings.write_text(original, encoding="utf-8")
    code, out, err = cli(capsys, *INSTALL_197, str(settings))
    assert (code, out) == (1, "")
    assert err == (
        f"live-steering hooks install: {settings} is not JSON ({constant} is not a JSON value); "
        "nothing was changed\n"
    )
    assert settings.read_text(encoding="utf-8") == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.json"]


def test_write_merges_a_file_saved_with_a_bom_and_writes_it_without(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A UTF-8 byte order mark (Windows editors save one; Claude Code reads past it) is read past:
    the merge keeps the user's settings and writes plain UTF-8, without a BOM (RFC 8259 §8.1), the
    original, BOM included, in the backup."""
    settings = tmp_path / "settings.json"
    original = b'\xef\xbb\xbf{"model": "opus"}'
    settings.write_bytes(original)
    code, _, err = cli(capsys, *INSTALL_197, str(settings))
    assert (code, err) == (0, "")
    data = settings.read_bytes()
    assert data.startswith(b"{")
    config = json.loads(data)
    assert config["model"] == "opus"
    assert "SessionEnd" in config["hooks"]
    assert (tmp_path / "settings.json.bak").read_bytes() == original


# -- 5. hooks events pages; every command fails in one line -----------------------------------


def test_hooks_events_pages_through_everything_and_limit_says_what_it_left_out(
    store: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from live_steering._cli import hooks as hooks_cli

    monkeypatch.setattr(hooks_cli, "PAGE", 2)  # pages of 2: 7 events are 4 pages
    for n in range(7):
        assert instruct("s-page", f"text {n}", id=f"c{n}", store=store).accepted
    assert main(["hooks", "events", "--store", store, "--json"]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line)["sequence"] for line in out.splitlines()] == list(range(1, 8))
    assert err == ""
    assert main(["hooks", "events", "--store", store, "--json", "--limit", "3"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 3
    assert "4 more event(s) left out" in err
    assert "--after 3" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["instruct", "s", "hello"],
        ["hooks", "events"],
        ["hooks", "sessions"],
        ["hooks", "recover"],
    ],
)
@pytest.mark.parametrize("damage", ["random bytes", "missing tables"])
def test_a_damaged_store_fails_each_command_in_one_line(
    tmp_path: pathlib.Path, argv: list[str], damage: str
) -> None:
    """Exit 2, one line on stderr, never a traceback, whatever the damage."""
    path = tmp_path / "hooks.db"
    if damage == "random bytes":
        path.write_bytes(os.urandom(4096))
    else:
        import sqlite3

        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '3')")
        conn.commit()
        conn.close()
    done = subprocess.run(
        [sys.executable, "-m", "live_steering._cli", *argv, "--store", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr


# -- 6. what the hook and instruct paths import (issue 24, 4b) --------------------------------

_HEAVY = (
    "asyncio",
    "anyio",
    "attrs",
    "trio",
    "live_steering._cli.demo",
    "live_steering._cli.acp",
    "live_steering.acp",
    "live_steering.fleet",
    "live_steering._runtime",
    "live_steering.hooks._session",
    "argparse",
    # the standard library's heavier modules neither command needs (issue 24: instruct_command)
    "typing",
    "shutil",
    "uuid",
    "contextlib",
    "importlib.metadata",
    "urllib",  # with ipaddress, 2 ms of a hook's start (round 39); only the HTTP options read URLs
    "ipaddress",
)


@pytest.mark.parametrize("command", ["hook", "instruct"])
def test_the_hook_and_instruct_commands_import_no_demo_acp_fleet_or_asyncio(
    tmp_path: pathlib.Path, command: str
) -> None:
    """Run in a fresh interpreter, each path imports only the store and its own module."""
    store = str(tmp_path / "hooks.db")
    if command == "hook":
        argv = ["hook", "claude-code", "--store", store]
        stdin = json.dumps({"session_id": "s", "hook_event_name": "PostToolBatch"})
    else:
        argv = ["instruct", "s", "hello", "--store", store]
        stdin = ""
    program = (
        "import sys\n"
        "from live_steering._cli import main\n"
        f"code = main({argv!r})\n"
        "sys.stdout.flush()\n"
        "print('MODULES', *sorted(sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], input=stdin, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    modules = set(done.stderr.split("MODULES", 1)[1].split())
    heavy = {m for m in modules if any(m == h or m.startswith(h + ".") for h in _HEAVY)}
    if command == "instruct":
        heavy.discard("argparse")  # instruct parses its arguments; the hook command does not
    assert heavy == set()


def test_install_http_token_env_sends_the_servers_token(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--http URL --token-env VAR``: each HTTP hook carries ``Authorization: Bearer ${VAR}`` with
    VAR in ``allowedEnvVars`` (the two vendors interpolate only listed variables), so a ``serve
    --token-env VAR`` server takes it; without it every hook would be a 401. Without ``--http``
    the option is a usage error."""
    pytest.importorskip("starlette")
    import re

    from starlette.testclient import TestClient

    from live_steering.http import create_app

    url = "http://127.0.0.1:8765"
    for vendor in ("claude-code", "qwen-code"):
        argv = [
            "hooks",
            "install",
            vendor,
            "--client-version",
            "2.1.197" if vendor == "claude-code" else "0.24.4",
        ]
        assert main([*argv, "--http", url, "--token-env", "LIVE_STEERING_TOKEN"]) == 0
        block = json.loads(capsys.readouterr().out)
        entries = [h for groups in block["hooks"].values() for g in groups for h in g["hooks"]]
        assert entries
        for entry in entries:
            assert entry["headers"] == {"Authorization": "Bearer ${LIVE_STEERING_TOKEN}"}
            assert entry["allowedEnvVars"] == ["LIVE_STEERING_TOKEN"]
    # What the vendor sends once it has interpolated the variable: the server accepts it.
    header = re.sub(r"\$\{LIVE_STEERING_TOKEN\}", "tok-123", entries[0]["headers"]["Authorization"])
    app = create_app(hooks_store=str(tmp_path / "h.db"), token="tok-123")
    with TestClient(app, base_url=url) as client:
        payload = {"session_id": "s-1", "hook_event_name": "UserPromptSubmit", "prompt": "hi"}
        assert client.post("/v1/hooks/qwen-code", json=payload).status_code == 401
        assert (
            client.post("/v1/hooks/qwen-code", json=payload, headers={"Authorization": header}).status_code
            == 200
        )
    assert main(["hooks", "install", "claude-code", "--token-env", "LIVE_STEERING_TOKEN"]) == 2
    assert "--token-env is for --http" in capsys.readouterr().err


def test_install_write_says_what_it_wired_on_stdout(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/hooks.md: what install found and wired is on stderr, with ``--write`` on stdout (as
    for the other vendors); Claude Code's line went to stderr in both modes."""
    target = tmp_path / "settings.json"
    assert (
        main(["hooks", "install", "claude-code", "--client-version", "2.1.197", "--write", str(target)]) == 0
    )
    out, err = capsys.readouterr()
    assert "wiring the moments of claude-code 2.1.197" in out
    assert err == ""
    assert main(["hooks", "install", "claude-code", "--client-version", "2.1.197"]) == 0
    out, err = capsys.readouterr()
    assert "wiring the moments" in err
    assert "wiring the moments" not in out


@pytest.mark.parametrize(
    ("vendor", "version", "where", "home_var"),
    [
        ("claude-code", "2.1.332", ".claude/settings.json", "CLAUDE_CONFIG_DIR"),
        ("codex", "0.171.0", ".codex/hooks.json", "CODEX_HOME"),
        ("qwen-code", "0.24.4", ".qwen/settings.json", None),
        ("hermes", "0.19.0", ".hermes/config.yaml", "HERMES_HOME"),
    ],
)
def test_write_without_a_path_uses_each_vendors_documented_user_config(
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    vendor: str,
    version: str,
    where: str,
    home_var: str | None,
) -> None:
    """``--write`` alone: ``~/.claude/settings.json``, ``~/.codex/hooks.json``, ``~/.qwen/settings.json``,
    ``~/.hermes/config.yaml`` (docs/hooks.md); with ``$CLAUDE_CONFIG_DIR`` / ``$CODEX_HOME`` /
    ``$HERMES_HOME`` set, the file in that folder, the one the vendor reads (and ``hooks doctor``
    checks)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "HERMES_HOME"):
        monkeypatch.delenv(name, raising=False)
    command = ["hooks", "install", vendor, "--vendor-version", version, "--write"]
    assert main(command) == 0
    written = tmp_path / "home" / where
    assert f"hook {vendor}" in written.read_text(encoding="utf-8")
    assert str(written) in capsys.readouterr().out
    if home_var is not None:
        monkeypatch.setenv(home_var, str(tmp_path / "own-home"))
        assert main(command) == 0
        moved = tmp_path / "own-home" / pathlib.Path(where).name
        assert f"hook {vendor}" in moved.read_text(encoding="utf-8")
        assert str(moved) in capsys.readouterr().out


@pytest.mark.parametrize("vendor", sorted(_versions.TABLES))
def test_an_undetected_version_is_named_as_the_newest_verified(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], vendor: str
) -> None:
    """No CLI on PATH: the note names the newest version the real-client tests run (qwen-code
    0.24.4, not its row's first version 0.23.4), and wires that version's moments."""
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no vendor CLI
    monkeypatch.delenv(_versions.env_override(vendor), raising=False)
    assert main(["hooks", "install", vendor, "--store", str(tmp_path / "h.db")]) == 0
    newest = _versions.shown(_versions.verified_versions(vendor)[-1])
    err = capsys.readouterr().err
    assert f"wiring for {vendor} {newest}, the newest version verified" in err
    assert _install.moments(vendor, None) == _install.moments(vendor, _versions.verified_versions(vendor)[-1])
