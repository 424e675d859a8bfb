"""The hook relay as a new user met it: install, admission, vendor moments, recorded failures."""

from __future__ import annotations

import io
import json
import os
import pathlib
import stat
import sys

import pytest

from live_steering import Disposition
from live_steering._cli import main
from live_steering.hooks import SqliteHookStore, _install, _vendors, instruct
from live_steering.hooks._command import run_hook
from live_steering.hooks.hermes import HermesSteering

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures" / "hooks"
OLD = "/old/venv/bin/live-steering hook claude-code"


@pytest.fixture
def store(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "hooks.db")


def hook(store: str, vendor: str, payload: dict[str, object]) -> bytes:
    out = io.BytesIO()
    data = io.BytesIO(json.dumps(payload).encode())
    assert run_hook(vendor, store_path=store, stdin=data, stdout=out, stderr=io.StringIO()) == 0
    return out.getvalue()


def events(store: str, kind: str | None = None) -> list[dict[str, object]]:
    with SqliteHookStore(store) as s:
        return [e for e in s.events() if kind is None or str(e["type"]).endswith(kind)]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- 1. install removes only our entries ------------------------------------------------------


def test_install_removes_only_our_entries_from_a_shared_matcher_group(tmp_path: pathlib.Path) -> None:
    """A matcher group shared with an old live-steering entry keeps its matcher and the user's hooks."""
    settings = tmp_path / "settings.json"
    shared = {
        "matcher": "Edit|Write",
        "hooks": [{"type": "command", "command": "prettier --write"}, {"type": "command", "command": OLD}],
    }
    only_ours = {"hooks": [{"type": "command", "command": OLD}]}
    settings.write_text(json.dumps({"hooks": {"PostToolBatch": [shared], "Setup": [only_ours]}}))
    _install.merge_into(str(settings), "claude-code", None)
    hooks = json.loads(settings.read_text())["hooks"]
    assert hooks["PostToolBatch"][0] == {
        "matcher": "Edit|Write",
        "hooks": [{"type": "command", "command": "prettier --write"}],
    }
    assert len(hooks["PostToolBatch"]) == 2  # the user's group, then ours
    assert OLD not in settings.read_text()
    assert "Setup" not in hooks  # a moment only our old entry used, and no longer wired


# -- 2. an over-cap instruction never stalls the queue ----------------------------------------


def test_instruct_limit_is_the_strictest_of_the_named_and_the_known_vendor(store: str) -> None:
    """A session known as claude-code refuses a 12,000-character text even with --vendor qwen-code."""
    hook(store, "claude-code", {"session_id": "m1", "hook_event_name": "SessionStart"})
    receipt = instruct("m1", "x" * 12_000, id="big", vendor="qwen-code", store=store)
    assert (receipt.accepted, receipt.reason) == (False, "invalid-input")
    assert "Claude Code's cap of 10,000 UTF-16 code units" in str(receipt.detail)


def test_an_instruction_over_the_claiming_vendors_cap_is_dropped_visibly(store: str) -> None:
    """Accepted for qwen-code, claimed by Claude Code: dropped {reason: over-cap}, and the queue moves on."""
    hook(store, "qwen-code", {"session_id": "m1", "hook_event_name": "SessionStart"})
    assert instruct("m1", "x" * 12_000, id="big", store=store).accepted  # qwen-code has no cap
    assert instruct("m1", "Use the corrected path", id="small", store=store).accepted
    out = hook(store, "claude-code", {"session_id": "m1", "hook_event_name": "PostToolUse"})
    assert json.loads(out)["hookSpecificOutput"]["additionalContext"] == "Use the corrected path"
    big = instruct("m1", "x" * 12_000, id="big", store=store)
    assert (big.disposition, big.reason) == (Disposition.HELD, "over-cap")
    (dropped,) = events(store, "instruction.dropped")
    assert (dropped["type"], dropped["reason"], dropped["cause"]) == (
        "x.claude-code.instruction.dropped",
        "over-cap",
        "big",
    )


def test_a_hook_of_another_vendor_audits_the_vendor_change(store: str) -> None:
    """A session's vendor is never rewritten silently: x.VENDOR.session.vendor-changed {previous}."""
    hook(store, "claude-code", {"session_id": "m1", "hook_event_name": "SessionStart"})
    hook(store, "codex", {"session_id": "m1", "hook_event_name": "SessionStart"})
    (changed,) = events(store, "vendor-changed")
    assert (changed["type"], changed["previous"], changed["moment"]) == (
        "x.codex.session.vendor-changed",
        "claude-code",
        "SessionStart",
    )


@pytest.mark.parametrize("text", ["x" * 10_001, "\N{GRINNING FACE}" * 5_001])
def test_the_over_cap_message_names_the_vendors_cap_for_ascii_and_emoji(store: str, text: str) -> None:
    """ASCII or emoji, the refusal names Claude Code's cap in the unit it counts."""
    receipt = instruct("s", text, vendor="claude-code", store=store)
    assert str(receipt.detail).startswith("text is over Claude Code's cap of 10,000 UTF-16 code units")


# -- 3, 7. --write: mode, symlinks, backups ---------------------------------------------------


def test_write_keeps_the_mode_and_writes_through_a_symlink(tmp_path: pathlib.Path) -> None:
    """A 600 settings file stays 600; a symlinked one updates its target and stays a symlink."""
    real = tmp_path / "dotfiles" / "settings.json"
    real.parent.mkdir()
    real.write_text('{"model": "opus"}')
    real.chmod(0o600)
    link = tmp_path / "settings.json"
    link.symlink_to(real)
    merged = _install.merge_into(str(link), "claude-code", None)
    assert link.is_symlink()
    assert merged.path == str(real)
    assert "SessionEnd" in json.loads(real.read_text())["hooks"]
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert sorted(p.name for p in real.parent.iterdir()) == ["settings.json"]  # no temp file left


def test_a_second_write_keeps_the_first_backup(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first backup is never overwritten: later ones are PATH.bak.1, ..., and the output says which."""
    settings = tmp_path / "settings.json"
    settings.write_text('{"model": "opus"}')
    code, out, _ = cli(capsys, "hooks", "install", "claude-code", "--write", str(settings))
    assert code == 0
    assert f"the previous file is in {settings}.bak" in out
    store = str(tmp_path / "other.db")  # a different store: the config changes
    code, out, _ = cli(capsys, "hooks", "install", "claude-code", "--write", str(settings), "--store", store)
    assert code == 0
    assert f"the previous file is in {settings}.bak.1" in out
    assert (tmp_path / "settings.json.bak").read_text() == '{"model": "opus"}'


# -- 4, 8. Hermes -----------------------------------------------------------------------------


def test_install_hermes_write_twice_changes_nothing(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The second `hooks install hermes --write` exits 0 and leaves the file and its backup alone."""
    config = tmp_path / "config.yaml"
    config.write_text("model: anthropic/claude-sonnet-4\n")
    assert cli(capsys, "hooks", "install", "hermes", "--write", str(config))[0] == 0
    text = config.read_text()
    code, out, err = cli(capsys, "hooks", "install", "hermes", "--write", str(config))
    assert (code, err) == (0, "")
    assert "nothing was changed" in out
    assert config.read_text() == text
    assert not (tmp_path / "config.yaml.bak.1").exists()


def test_hermes_plugin_with_write_is_a_usage_error(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--plugin with --write is refused in one line (exit 2), and nothing is written."""
    code, out, err = cli(
        capsys, "hooks", "install", "hermes", "--plugin", str(tmp_path / "p"), "--write", str(tmp_path / "x")
    )
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) == 1
    assert "cannot be combined" in err
    assert list(tmp_path.iterdir()) == []


# -- 5. the running installation --------------------------------------------------------------


def test_install_bakes_in_the_running_installation_not_the_first_on_path(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another live-steering earlier on PATH is not what the config runs."""
    other = tmp_path / "bin" / "live-steering"
    other.parent.mkdir()
    other.write_text("#!/bin/sh\nexit 0\n")
    other.chmod(0o755)
    monkeypatch.setenv("PATH", f"{other.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    command = _install.hook_command("claude-code", None)
    assert str(other) not in command
    # this installation's own Python, running the hook entry point (no console-script start-up)
    assert command.startswith(os.path.abspath(sys.executable) + " -c ")
    assert "hook claude-code" in command


# -- 6. every real vendor moment is known -----------------------------------------------------

#: Real moments the first release logged as "has no hook moment" (issue 12's newcomer report).
REPORTED = [
    ("claude-code", "SubagentStop"),
    ("claude-code", "PreCompact"),
    ("vscode", "PreCompact"),
    ("vscode", "Stop"),
    ("vscode", "SubagentStop"),
    ("codex", "Stop"),
    ("codex", "PreCompact"),
]


@pytest.mark.parametrize(
    ("vendor", "moment"), sorted((p.parent.name, p.stem) for p in FIXTURES.glob("*/*.json"))
)
def test_no_fixture_moment_is_a_hook_failure(store: str, vendor: str, moment: str) -> None:
    """Every vendor moment with a fixture is known: eligible or not, never hook.failed."""
    payload = json.loads((FIXTURES / vendor / f"{moment}.json").read_text(encoding="utf-8"))
    hook(store, vendor, payload)
    assert events(store, "hook.failed") == []


def test_the_reported_moments_have_fixtures_and_are_known() -> None:
    """The moments a user saw logged as failures are in the vendor tables, with a realistic fixture."""
    for vendor, moment in REPORTED:
        assert moment in _vendors.FACTS[vendor].known_moments, (vendor, moment)
        payload = json.loads((FIXTURES / vendor / f"{moment}.json").read_text(encoding="utf-8"))
        fields = _vendors.FACTS[vendor].moment_fields
        assert next(payload[f] for f in fields if f in payload) == moment


def test_codex_moments_match_its_hook_event_enum() -> None:
    """Codex knows every HookEventNameWire value (codex-rs/hooks/src/schema.rs)."""
    wire = {
        "PreToolUse",
        "PermissionRequest",
        "PostToolUse",
        "PreCompact",
        "PostCompact",
        "SessionStart",
        "UserPromptSubmit",
        "SubagentStart",
        "Stop",
    }
    assert wire <= _vendors.FACTS["codex"].known_moments


# -- 9. failures recorded ---------------------------------------------------------------------


def test_hermes_plugin_called_without_a_session_id_is_recorded(store: str) -> None:
    """The plugin answers None and records x.hermes.hook.failed {reason: missing-session-id}."""
    steering = HermesSteering(store)
    assert steering.pre_llm_call(user_message="hi", model="m") is None
    (failed,) = events(store, "hook.failed")
    assert (failed["type"], failed["reason"]) == ("x.hermes.hook.failed", "missing-session-id")


# -- newcomer details -------------------------------------------------------------------------


def test_hooks_sessions_on_an_empty_store_says_so(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`hooks sessions` with nothing in the store prints "no sessions yet" (and --json prints nothing)."""
    SqliteHookStore(store).close()
    code, out, _ = cli(capsys, "hooks", "sessions", "--store", store)
    assert code == 0
    assert out.startswith("no sessions yet")
    assert cli(capsys, "hooks", "sessions", "--store", store, "--json")[1] == ""


@pytest.mark.parametrize("command", ["events", "sessions", "recover"])
def test_inspecting_a_store_that_does_not_exist_says_so_and_creates_nothing(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """`hooks events|sessions|recover --store TYPO`: one line naming the missing store, exit 1,
    and no file made (it used to answer an empty listing from a store it had just created)."""
    typo = tmp_path / "hoks.db"
    code, out, err = cli(capsys, "hooks", command, "--store", str(typo))
    assert (code, out) == (1, "")
    assert f"no hook store at {typo}" in err
    assert list(tmp_path.iterdir()) == []
    if command != "sessions":  # the one without --session
        code, _, err = cli(capsys, "hooks", command, "--store", str(typo), "--session", "\udcff")
        assert code == 2  # a usage error, answered before the store is looked for
        assert "--session: not encodable as UTF-8" in err


@pytest.mark.parametrize("command", ["events", "recover"])
@pytest.mark.parametrize("session", ["", "\udcff", "x" * 129])
def test_a_session_no_id_can_match_is_a_usage_error(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], command: str, session: str
) -> None:
    """`hooks events|recover --session S` with S outside the id rules (empty, not UTF-8, too long):
    one line, exit 2, nothing on stdout, as `instruct` and `receipts` answer such an id
    (docs/hooks.md: exit 2 for a usage error), with the store there or not."""
    store = str(tmp_path / "hooks.db")
    SqliteHookStore(store).close()
    for where in (["--store", store], ["--store", str(tmp_path / "typo.db")]):
        code, out, err = cli(capsys, "hooks", command, "--session", session, *where)
        assert (code, out) == (2, "")
        assert err.startswith(f"live-steering hooks {command}: --session: ")
        assert err.count("\n") == 1


def test_follow_waits_for_the_default_store_and_then_follows_it(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hooks events --follow` before any hook or instruct made the default store: it waits (polling
    as the follow loop does) instead of exiting, and prints the first event once an instruct makes
    the store. Each poll is the fake sleep below: the first makes the store, the next interrupts."""
    from live_steering._cli import hooks as hooks_cli

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("LIVE_STEERING_STORE", raising=False)
    monkeypatch.delenv("LIVE_STEERING_STORE_DSN", raising=False)
    polls: list[bool] = []

    class FakeTime:
        @staticmethod
        def sleep(seconds: float) -> None:
            assert seconds == hooks_cli.FOLLOW_INTERVAL
            polls.append((tmp_path / "state" / "live-steering" / "hooks.db").exists())
            if len(polls) == 1:
                assert main(["instruct", "s-1", "hello", "--vendor", "claude-code", "--id", "during"]) == 0
                capsys.readouterr()  # the receipt
            else:
                raise KeyboardInterrupt  # Ctrl-C: --follow exits 0

    monkeypatch.setattr(hooks_cli, "time", FakeTime)
    code, out, err = cli(capsys, "hooks", "events", "--follow", "--json")
    assert (code, err) == (0, "")
    assert polls == [False, True]  # waited for the store, then followed it
    assert [(e["type"], e["cause"]) for e in map(json.loads, out.splitlines())] == [
        ("control.accepted", "during")
    ]
    # interrupted before any store appears: exit 0, nothing printed, no store made
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "other"))
    polls.clear()
    polls.append(True)  # the next poll interrupts
    assert cli(capsys, "hooks", "events", "--follow") == (0, "", "")
    assert not (tmp_path / "other").exists()
    # --limit with --follow is a usage error before anything is waited for
    code, _, err = cli(capsys, "hooks", "events", "--follow", "--limit", "3")
    assert code == 2
    assert "without --follow" in err


def test_instruct_to_a_store_in_a_folder_that_does_not_exist_queues_nothing(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`instruct --store /no/such/folder/x.db`: exit 2 naming the folder; no folder is made."""
    missing = tmp_path / "no" / "such"
    code, out, err = cli(capsys, "instruct", "s", "Use the corrected path", "--store", str(missing / "x.db"))
    assert (code, out) == (2, "")
    assert f"there is no folder {missing}" in err
    assert not (tmp_path / "no").exists()


def test_instruct_from_stdin_strips_one_trailing_newline(
    store: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`echo TEXT | instruct S -` queues TEXT without echo's newline; other newlines stay."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("Use the corrected path\n\n"))
    assert cli(capsys, "instruct", "s", "-", "--store", store, "--id", "c1")[0] == 0
    out = hook(store, "claude-code", {"session_id": "s", "hook_event_name": "PostToolBatch"})
    assert json.loads(out)["hookSpecificOutput"]["additionalContext"] == "Use the corrected path\n"


def test_instruct_prints_an_id_with_control_characters_escaped(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`instruct --id $'\\e[31mred'`: the receipt line shows the escape as ``\\x1b`` (as `steer` and
    `hooks events` do), never the raw byte that would turn the user's terminal red."""
    code, out, _ = cli(
        capsys, "instruct", "s", "Use the corrected path", "--store", store, "--id", "\x1b[31mred"
    )
    assert code == 0
    assert out == "\\x1b[31mred: accepted, queued\n"
    assert "\x1b" not in out


def test_docs_events_table_shows_the_accepted_text_field() -> None:
    """docs/hooks.md lists `text` on control.accepted, as the stream always emits it."""
    doc = (FIXTURES.parent.parent.parent / "docs" / "hooks.md").read_text(encoding="utf-8")
    row = next(line for line in doc.splitlines() if line.startswith("| `control.accepted` |"))
    assert "`text`" in row


def test_docs_say_the_vscode_agent_cannot_run_here_and_where_each_fixture_comes_from() -> None:
    """C33: no real VS Code agent runs here, so docs/hooks.md says so and names, for every
    fixture in tests/fixtures/hooks/vscode/, its fields and the public reference they follow;
    each fixture has the common input fields and the fields its row names."""
    doc = (FIXTURES.parent.parent.parent / "docs" / "hooks.md").read_text(encoding="utf-8")
    assert "**The VS Code agent cannot run here.**" in doc
    assert "code.visualstudio.com/docs/agents/reference/hooks-reference" in doc
    rows = {
        line.split("`")[1]: line
        for line in doc.splitlines()
        if line.startswith("| `") and line.split("`")[1].endswith(".json")
    }
    fixtures = sorted(FIXTURES.glob("vscode/*.json"))
    assert fixtures
    assert {f.name for f in fixtures} == set(rows)
    common = {"timestamp", "cwd", "sessionId", "hookEventName", "transcript_path"}
    for fixture in fixtures:
        payload = json.loads(fixture.read_text(encoding="utf-8"))
        named = {part.split(":")[0] for part in rows[fixture.name].split("|")[2].split("`")[1::2]}
        assert set(payload) == common | named, fixture.name
        assert payload["hookEventName"] == fixture.stem
        assert f'"{fixture.stem} input"' in rows[fixture.name]


def test_a_fresh_machine_inspects_as_an_empty_store_and_makes_none(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No hook has run here yet (the default store does not exist): `hooks sessions` says "no
    sessions yet", `events` prints nothing, `recover` finalises nothing, each exit 0, and the
    store is not made by them."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("LIVE_STEERING_STORE", raising=False)
    monkeypatch.delenv("LIVE_STEERING_STORE_DSN", raising=False)
    assert cli(capsys, "hooks", "sessions")[:2] == (
        0,
        "no sessions yet: a session appears when its vendor first runs `live-steering hook`\n",
    )
    assert cli(capsys, "hooks", "events")[:2] == (0, "")
    assert cli(capsys, "hooks", "recover", "--json")[:2] == (0, '{"unknown": []}\n')
    assert not (tmp_path / "state").exists()
