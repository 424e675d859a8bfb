"""`hooks doctor`, `instruct`'s `seen`, the per-version wiring of `hooks install`, the Hermes home.

No real client here: a vendor CLI is a small script that prints a version (``$LIVE_STEERING_QWEN``,
...), as ``_versions.detect`` reads it. The real CLIs run in tests/test_hooks_*_real.py.
"""

from __future__ import annotations

import json
import os
import pathlib
import stat
import sys

import pytest

from live_steering._cli import main
from live_steering.hooks import SqliteHookStore, _doctor, _install, _versions
from live_steering.hooks._command import run_hook
from live_steering.hooks.hermes import HermesSteering


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def fake_cli(tmp_path: pathlib.Path, name: str, version_line: str) -> str:
    """An executable that answers ``--version`` with ``version_line``."""
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\necho '{version_line}'\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def hook(store: str, vendor: str, payload: dict[str, object]) -> bytes:
    import io

    out = io.BytesIO()
    run_hook(vendor, store_path=store, stdin=io.BytesIO(json.dumps(payload).encode()), stdout=out)
    return out.getvalue()


# -- versions -----------------------------------------------------------------------------------


def test_version_table_picks_the_row_of_the_installed_version() -> None:
    """Qwen Code before 0.23.4 reads milliseconds and gets a row in them; 0.23.4 and later, seconds.
    Before 0.21.2 (no PostToolBatch) it gets PostToolUse; a version between verified ones is
    'unverified'."""
    assert _versions.parse_version("0.24.4") == (0, 24, 4)
    assert _versions.parse_version("no digits here") is None
    old = _install.config_block("qwen-code", "/s.db", version=(0, 20, 1))
    new = _install.config_block("qwen-code", "/s.db", version=(0, 24, 4))
    assert isinstance(old, dict)
    assert isinstance(new, dict)
    assert {e[0]["hooks"][0]["timeout"] for e in old["hooks"].values()} == {10_000}
    assert {e[0]["hooks"][0]["timeout"] for e in new["hooks"].values()} == {10}
    assert list(new["hooks"]) == ["UserPromptSubmit", "PostToolBatch", "Stop", "SessionEnd"]
    assert (_versions.support("qwen-code", (0, 20, 1)), _versions.support("qwen-code", (0, 24, 9))) == (
        "older",
        "supported",
    )
    assert list(old["hooks"]) == ["UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "SessionEnd"]
    middle = _install.config_block("qwen-code", "/s.db", version=(0, 23, 3))
    assert isinstance(middle, dict)
    assert list(middle["hooks"]) == list(new["hooks"])
    assert {e[0]["hooks"][0]["timeout"] for e in middle["hooks"].values()} == {10_000}
    assert _versions.support("qwen-code", (0, 22, 0)) == "unverified"
    assert _versions.support("qwen-code", (0, 23, 3)) == "unverified"
    assert _versions.support("qwen-code", (0, 21, 5)) == "supported"


def test_every_vendor_table_verifies_the_versions_the_real_client_tests_pin() -> None:
    """Each vendor's verified versions (``support`` and doctor's ``version`` line rest on them) are
    exactly the CLIs scripts/clients.txt pins for the real-client tests: Claude Code 2.1.197 and
    2.1.332, Codex 0.171.0, Qwen Code 0.21.2, 0.23.4 and 0.24.4, Hermes 0.19.0."""
    clients = pathlib.Path(__file__).parent.parent / "scripts" / "clients.txt"
    pinned: dict[str, set[_versions.Version]] = {}
    for line in clients.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, spec = line.split()
        vendor = next((v for v in _versions.TABLES if name == v or name.startswith(v + "-")), None)
        version = _versions.parse_version(spec.rpartition("@")[2].rpartition("==")[2])
        if vendor is not None and version is not None:
            pinned.setdefault(vendor, set()).add(version)
    assert {v: set(_versions.verified_versions(v)) for v in _versions.TABLES} == pinned
    assert pinned["claude-code"] == {(2, 1, 197), (2, 1, 332)}


def test_codex_session_end_timeout_is_the_3_seconds_codex_clamps_it_to() -> None:
    """Codex 0.171.0 warns 'clamping SessionEnd hook timeout to 3s': install writes 3, so no warning."""
    block = _install.config_block("codex", "/s.db", version=(0, 171, 0))
    assert isinstance(block, dict)
    timeouts = {m: e[0]["hooks"][0]["timeout"] for m, e in block["hooks"].items()}
    assert timeouts == {"UserPromptSubmit": 10, "PostToolUse": 10, "Stop": 10, "SessionEnd": 3}


def test_install_detects_the_version_and_prints_the_codex_trust_step(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """install asks `codex --version`, says what it wires and how to trust the hooks (on stderr)."""
    monkeypatch.setenv("LIVE_STEERING_CODEX", fake_cli(tmp_path, "codex", "codex-cli 0.171.0"))
    code, out, err = cli(capsys, "hooks", "install", "codex", "--store", str(tmp_path / "h.db"))
    assert code == 0
    assert set(json.loads(out)["hooks"]) == {"UserPromptSubmit", "PostToolUse", "Stop", "SessionEnd"}
    assert "0.171.0" in err
    assert "Trust all and continue" in err
    code, out, err = cli(
        capsys, "hooks", "install", "codex", "--vendor-version", "banana", "--store", str(tmp_path / "h.db")
    )
    assert (code, out) == (2, "")
    assert "is not X.Y.Z" in err


@pytest.mark.parametrize("vendor", ["codex", "qwen-code", "hermes"])
def test_install_refuses_a_client_path_that_answers_no_version(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], vendor: str
) -> None:
    """`--client PATH` names the binary to ask: a path that is missing or prints no version is a
    usage error (exit 2, nothing printed on stdout), as for Claude Code, not a silent guess."""
    store = str(tmp_path / "h.db")
    mute = fake_cli(tmp_path, "mute", "no version here")
    for client in (str(tmp_path / "nothing-here"), mute):
        code, out, err = cli(capsys, "hooks", "install", vendor, "--client", client, "--store", store)
        assert (code, out) == (2, "")
        assert client in err
        assert len(err.strip().splitlines()) == 1, err
    good = fake_cli(
        tmp_path, "good", {"codex": "codex-cli 0.171.0", "qwen-code": "0.24.4", "hermes": "v0.19.0"}[vendor]
    )
    code, out, err = cli(capsys, "hooks", "install", vendor, "--client", good, "--store", store)
    assert code == 0
    assert out


# -- instruct: seen ----------------------------------------------------------------------------


def test_instruct_to_a_session_no_hook_ran_for_says_so_and_require_seen_refuses(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unseen: accepted, "seen": false and a note; --require-seen exits 1, queues nothing; seen: true."""
    store = str(tmp_path / "h.db")
    code, out, err = cli(capsys, "instruct", "typo-session", "hi", "--id", "c1", "--store", store, "--json")
    assert code == 0
    assert (json.loads(out)["disposition"], json.loads(out)["seen"]) == ("queued", False)
    assert "no hook of session 'typo-session'" in err
    code, out, err = cli(capsys, "instruct", "other-typo", "hi", "--store", store, "--require-seen")
    assert (code, out) == (1, "")
    assert "nothing was queued" in err
    with SqliteHookStore(store) as s:
        assert [r["session_id"] for r in s.sessions()] == ["typo-session"]
    assert hook(store, "codex", {"session_id": "real", "hook_event_name": "UserPromptSubmit"}) == b""
    code, out, err = cli(capsys, "instruct", "real", "go", "--store", store, "--json", "--require-seen")
    assert (code, json.loads(out)["seen"], err) == (0, True, "")


def test_hooks_sessions_marks_a_session_no_hook_ran_for(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The typo note sends the user to `hooks sessions`: there the typo's line says no hook ran for
    it (``"seen": false`` with --json), and the real session's line says nothing of the kind."""
    store = str(tmp_path / "h.db")
    assert hook(store, "claude-code", {"session_id": "s-7a13", "hook_event_name": "SessionStart"}) == b""
    code, _, err = cli(capsys, "instruct", "s-7a31", "hi", "--vendor", "claude-code", "--store", store)
    assert code == 0
    assert "see `live-steering hooks sessions`" in err
    code, out, _ = cli(capsys, "hooks", "sessions", "--store", store)
    lines = dict(line.split("  ", 1) for line in out.splitlines())
    assert code == 0
    assert lines["s-7a13"] == "claude-code  epoch 1  live  0 queued"
    assert lines["s-7a31"] == (
        "claude-code  epoch 1  live  1 queued  (no hook has run: named only by instruct, a typo?)"
    )
    code, out, _ = cli(capsys, "hooks", "sessions", "--store", store, "--json")
    assert {row["session_id"]: row["seen"] for row in map(json.loads, out.splitlines())} == {
        "s-7a13": True,
        "s-7a31": False,
    }
    assert (
        hook(
            store,
            "claude-code",
            {"session_id": "s-7a13", "hook_event_name": "PostToolBatch", "agent_id": "a-9"},
        )
        == b""
    )
    code, out, _ = cli(capsys, "hooks", "sessions", "--store", store)
    assert "s-7a13  claude-code  epoch 1  live  0 queued  subagents: a-9\n" in out
    code, out, _ = cli(capsys, "hooks", "sessions", "--store", store, "--json")
    assert [row["agents"] for row in map(json.loads, out.splitlines())] == [["a-9"], []]


def test_instruct_json_to_an_ended_session_still_prints_the_resume_hint(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused session-ended: stdout is the receipt alone (one JSON object), stderr the --resume hint,
    with --json as without it."""
    store = str(tmp_path / "h.db")
    for moment in ("SessionStart", "SessionEnd"):
        assert hook(store, "claude-code", {"session_id": "done", "hook_event_name": moment}) == b""
    for json_flag in ([], ["--json"]):
        code, out, err = cli(capsys, "instruct", "done", "hi", "--id", "c1", "--store", store, *json_flag)
        assert code == 1
        assert err == "hint: --resume queues it for the session's next run\n"
        if json_flag:
            assert json.loads(out)["reason"] == "session-ended"


def test_a_hook_that_skips_still_marks_the_session_seen(tmp_path: pathlib.Path) -> None:
    """Queued first, then a moment that carries nothing (Qwen's PreToolUse): the session is seen."""
    store = str(tmp_path / "h.db")
    main(["instruct", "q1", "hi", "--id", "c1", "--vendor", "qwen-code", "--store", store])
    with SqliteHookStore(store) as s:
        assert not s.seen("q1")
    assert hook(store, "qwen-code", {"session_id": "q1", "hook_event_name": "PreToolUse"}) == b""
    with SqliteHookStore(store) as s:
        assert s.seen("q1")
        assert [e["type"] for e in s.events(session_id="q1")] == [
            "control.accepted",
            "x.qwen-code.session.seen",
        ]


# -- doctor ------------------------------------------------------------------------------------


def test_doctor_checks_the_installed_claude_code_version_and_its_events(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claude Code's rows in _versions.TABLES record every event each version knows: doctor asks
    `claude --version`, and fails a config naming an event that version does not know (the
    'Unknown hook event' dialog of issue 24), e.g. PostModelSwitch under 2.1.197."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_cli(bin_dir, "claude", "2.1.197 (Claude Code)")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    settings = tmp_path / "settings.json"
    store = str(tmp_path / "h.db")
    assert cli(capsys, "hooks", "install", "claude-code", "--write", str(settings), "--store", store)[0] == 0
    code, out, _ = cli(capsys, "hooks", "doctor", "claude-code", "--config", str(settings))
    assert code == 0, out
    assert "ok    version: claude --version: 2.1.197 (Claude Code)" in out
    config = json.loads(settings.read_text(encoding="utf-8"))
    config["hooks"]["PostModelSwitch"] = config["hooks"]["Stop"]
    settings.write_text(json.dumps(config), encoding="utf-8")
    code, out, _ = cli(capsys, "hooks", "doctor", "claude-code", "--config", str(settings))
    assert code == 1, out
    assert "does not have: PostModelSwitch" in out
    fake_cli(bin_dir, "claude", "1.0.80 (Claude Code)")
    code, out, _ = cli(capsys, "hooks", "doctor", "claude-code", "--config", str(settings))
    assert "FAIL  version: claude --version: 1.0.80 (Claude Code): older than" in out
    # Not on PATH: $LIVE_STEERING_CLAUDE names it, for install and doctor alike.
    monkeypatch.setenv("PATH", "/nonexistent")
    other = fake_cli(tmp_path, "claude-new", "2.1.332 (Claude Code)")
    monkeypatch.setenv("LIVE_STEERING_CLAUDE", other)
    code, out, _ = cli(capsys, "hooks", "doctor", "claude-code", "--config", str(settings))
    assert f"ok    version: {other} --version: 2.1.332 (Claude Code)" in out
    code, _, err = cli(capsys, "hooks", "install", "claude-code", "--store", store)
    assert code == 0
    assert "claude-code 2.1.332" in err


def test_doctor_reads_an_http_install_and_checks_its_server(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``--http`` install (Claude Code: no SessionStart, which it runs no HTTP hook at) is a
    config doctor accepts: it checks the server at the URL instead of a command and a store, and
    fails (exit 1) when nothing listens. A listener that gives no HTTP answer to the probe (here a
    bare socket) cannot be judged: a ``--`` line, not a failure (the server's own answers are
    test_doctor_probes_an_http_install_with_its_token's)."""
    import socket

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_cli(bin_dir, "claude", "2.1.332 (Claude Code)")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    settings = tmp_path / "settings.json"
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        code, out, err = cli(
            capsys, "hooks", "install", "claude-code", "--http", url, "--write", str(settings)
        )
        assert code == 0, err
        assert "not SessionStart: claude-code runs no HTTP hook there" in out + err
        wired = json.loads(settings.read_text(encoding="utf-8"))["hooks"]
        assert list(wired) == ["UserPromptSubmit", "PostToolBatch", "Stop", "SessionEnd"]
        code, out, _ = cli(capsys, "hooks", "doctor", "claude-code", "--config", str(settings))
    assert code == 0, out
    assert "ok    config:" in out
    assert (
        f"--    server: 127.0.0.1:{port} accepts connections but does not answer as `live-steering serve`"
        in out
    )
    assert "store:" not in out  # the server's own
    code, out, _ = cli(capsys, "hooks", "doctor", "claude-code", "--config", str(settings))
    assert code == 1, out
    assert f"FAIL  server: nothing answers at 127.0.0.1:{port}" in out
    assert "live-steering serve --hooks-store" in out


def test_doctor_fails_a_config_that_is_not_utf8_with_a_line_of_its_own(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A settings file that is not UTF-8: a FAIL line (exit 1), not a crash, and the other checks run."""
    latin1 = tmp_path / "settings.json"
    latin1.write_bytes(b'{"theme": "caf\xe9"}')
    code, out, err = cli(capsys, "hooks", "doctor", "claude-code", "--config", str(latin1))
    assert code == 1, (out, err)
    assert "FAIL  config: " in out
    assert "is not UTF-8 text" in out
    assert "version:" in out
    assert err == ""


def test_doctor_passes_for_a_fresh_install_and_names_what_is_missing(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Installed from this installation: every check ok (exit 0); no hooks of ours: FAIL (exit 1)."""
    monkeypatch.setenv("LIVE_STEERING_QWEN", fake_cli(tmp_path, "qwen", "0.24.4"))
    settings = tmp_path / "settings.json"
    store = str(tmp_path / "h.db")
    assert cli(capsys, "hooks", "install", "qwen-code", "--write", str(settings), "--store", store)[0] == 0
    code, out, _ = cli(capsys, "hooks", "doctor", "qwen-code", "--config", str(settings))
    assert code == 0, out
    assert "FAIL" not in out
    assert "is this installation" in out
    assert "opens and is writable" in out
    assert "0.24.4" in out
    empty = tmp_path / "empty.json"
    empty.write_text("{}", encoding="utf-8")
    code, out, _ = cli(capsys, "hooks", "doctor", "qwen-code", "--config", str(empty))
    assert code == 1
    assert "runs no live-steering hook" in out
    code, out, _ = cli(capsys, "hooks", "doctor", "qwen-code", "--config", str(tmp_path / "nope.json"))
    assert code == 1
    assert "hooks install qwen-code --write" in out


def test_doctor_fails_a_command_of_another_installation_and_an_older_vendor(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hook command that is not this installation's, a Qwen older than verified: each a FAIL line."""
    monkeypatch.setenv("LIVE_STEERING_QWEN", fake_cli(tmp_path, "qwen", "0.20.0"))
    block = _install.config_block("qwen-code", str(tmp_path / "h.db"), version=(0, 24, 4))
    assert isinstance(block, dict)
    text = json.dumps(block).replace(json.dumps(_install._script()[0])[1:-1], "/opt/old/bin/live-steering")
    settings = tmp_path / "settings.json"
    settings.write_text(text, encoding="utf-8")
    code, out, _ = cli(capsys, "hooks", "doctor", "qwen-code", "--config", str(settings))
    assert code == 1
    assert "FAIL  command: /opt/old/bin/live-steering does not exist" in out
    assert "FAIL  version:" in out
    assert "older" in out


def test_doctor_fails_a_store_that_cannot_be_written(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store the hooks name is a directory: the store line fails and says so."""
    if os.geteuid() == 0:
        target = tmp_path / "a-directory"  # root may write anywhere: a directory is unusable for all
        target.mkdir()
    else:
        target = tmp_path / "ro" / "h.db"
        target.parent.mkdir()
        target.parent.chmod(0o500)
    monkeypatch.setenv("LIVE_STEERING_QWEN", fake_cli(tmp_path, "qwen", "0.24.4"))
    settings = tmp_path / "settings.json"
    _install.merge_into(str(settings), "qwen-code", str(target), version=(0, 24, 4))
    code, out, _ = cli(capsys, "hooks", "doctor", "qwen-code", "--config", str(settings))
    assert code == 1
    assert "FAIL  store:" in out


# -- Hermes: its home, its profiles, its terminal ----------------------------------------------


def test_hermes_plugin_goes_into_hermes_home_and_its_profiles(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$HERMES_HOME, ~/.hermes, --profile NAME and the sticky active_profile pick the plugin directory."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HERMES_HOME", raising=False)
    root = tmp_path / ".hermes"
    assert _install.hermes_plugin_dir() == str(root / "plugins" / "live-steering")
    assert _install.hermes_plugin_dir("coder") == str(
        root / "profiles" / "coder" / "plugins" / "live-steering"
    )
    root.mkdir()
    (root / "active_profile").write_text("writer\n", encoding="utf-8")
    assert _install.hermes_home() == str(root / "profiles" / "writer")
    assert _install.hermes_home("default") == str(root)
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "custom"))
    assert _install.hermes_home() == str(tmp_path / "custom")
    assert _install.hermes_home("coder") == str(tmp_path / "custom" / "profiles" / "coder")
    monkeypatch.setenv("HERMES_HOME", str(root / "profiles" / "writer"))  # a profile's home: its root
    assert _install.hermes_home("coder") == str(root / "profiles" / "coder")
    with pytest.raises(ValueError, match="profile name"):
        _install.hermes_home("../etc")


def test_hermes_install_plugin_honours_hermes_home(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hooks install hermes --plugin` writes under $HERMES_HOME and names that config.yaml."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hh"))
    code, out, _ = cli(capsys, "hooks", "install", "hermes", "--plugin", "--store", str(tmp_path / "h.db"))
    assert code == 0
    assert (tmp_path / "hh" / "plugins" / "live-steering" / "__init__.py").is_file()
    assert f"enable it in {tmp_path / 'hh' / 'config.yaml'}" in out
    assert "on_session_start" in (tmp_path / "hh" / "plugins" / "live-steering" / "plugin.yaml").read_text()
    assert cli(capsys, "hooks", "install", "codex", "--profile", "x")[0] == 2


def test_hermes_install_plugin_dir_names_the_config_only_of_a_hermes_home(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--plugin DIR` under `<home>/plugins/` names that home's config.yaml; a folder anywhere
    else has no Hermes home to name, and the line says where the setting goes instead of
    naming DIR's grandparent."""
    store = str(tmp_path / "h.db")
    inside = tmp_path / "home" / "plugins" / "steer"
    code, out, _ = cli(capsys, "hooks", "install", "hermes", "--plugin", str(inside), "--store", store)
    assert code == 0
    assert f"enable it in {tmp_path / 'home' / 'config.yaml'}:" in out
    elsewhere = tmp_path / "work" / "plug"
    code, out, _ = cli(capsys, "hooks", "install", "hermes", "--plugin", str(elsewhere), "--store", store)
    assert code == 0
    assert (elsewhere / "plugin.yaml").is_file()
    assert "config.yaml of the Hermes home whose plugins/ folder holds it" in out
    assert str(tmp_path / "config.yaml") not in out


def test_hermes_plugin_store_errors_go_to_its_log_not_the_terminal(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unusable store: the plugin answers None, Hermes's terminal stays clean, the log says why."""
    broken = tmp_path / "not-a-store"
    broken.mkdir()
    log = tmp_path / "logs" / "live-steering.log"
    steering = HermesSteering(str(broken), log_path=str(log))
    assert steering.pre_llm_call(session_id="s1") is None
    steering.on_session_start(session_id="s1")
    assert capsys.readouterr() == ("", "")
    assert "live-steering hook:" in log.read_text(encoding="utf-8")


def test_hermes_on_session_start_reopens_a_finalized_session(tmp_path: pathlib.Path) -> None:
    """Finalized, then started again (a resume that fires on_session_start): instruct is accepted again."""
    store = str(tmp_path / "h.db")
    steering = HermesSteering(store, log_path=str(tmp_path / "log"))
    steering.on_session_start(session_id="h1")
    steering.on_session_finalize(session_id="h1")
    code = main(["instruct", "h1", "too late", "--store", store])
    assert code == 1
    steering.on_session_start(session_id="h1")
    assert main(["instruct", "h1", "now", "--id", "c2", "--store", store]) == 0
    assert steering.pre_llm_call(session_id="h1") == {"context": "now"}


def test_doctor_without_vendor_checks_every_config_present(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hooks doctor` alone checks each vendor whose user config exists; none: one line, exit 1."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.delenv("HERMES_HOME", raising=False)
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    code, out, _ = cli(capsys, "hooks", "doctor")
    assert code == 1
    assert out.startswith("no vendor config found")
    assert _doctor.config_path("codex") == str(tmp_path / ".codex" / "hooks.json")


def test_doctor_accepts_the_hermes_plugin_route(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin installed but not enabled: FAIL saying so; enabled: ok, and its baked store is checked."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hh"))
    monkeypatch.setenv("LIVE_STEERING_HERMES", fake_cli(tmp_path, "hermes", "Hermes Agent v0.19.0"))
    store = str(tmp_path / "plugin-store.db")
    assert cli(capsys, "hooks", "install", "hermes", "--plugin", "--store", store)[0] == 0
    config = tmp_path / "hh" / "config.yaml"
    config.write_text("model: x\n", encoding="utf-8")
    code, out, _ = cli(capsys, "hooks", "doctor", "hermes")
    assert code == 1
    assert "installed but not enabled" in out
    config.write_text("model: x\nplugins:\n  enabled: [live-steering]\n", encoding="utf-8")
    code, out, _ = cli(capsys, "hooks", "doctor", "hermes")
    assert code == 0, out
    assert f"{store} opens and is writable" in out


@pytest.mark.parametrize(
    ("vendor", "env", "version_line", "version"),
    [
        ("codex", "LIVE_STEERING_CODEX", "codex-cli 0.171.0", (0, 171, 0)),
        ("qwen-code", "LIVE_STEERING_QWEN", "0.24.4", (0, 24, 4)),
    ],
)
def test_doctor_fails_a_config_written_before_follow_ups(
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    vendor: str,
    env: str,
    version_line: str,
    version: tuple[int, int, int],
) -> None:
    """A config an earlier install wrote, without the Stop hook that carries follow-ups: doctor
    names the missing moment and the command that rewires it (exit 1); the full config passes."""
    monkeypatch.setenv(env, fake_cli(tmp_path, vendor, version_line))
    block = _install.config_block(vendor, str(tmp_path / "h.db"), version=version)
    assert isinstance(block, dict)
    settings = tmp_path / "hooks.json"
    settings.write_text(json.dumps(block), encoding="utf-8")
    code, out, _ = cli(capsys, "hooks", "doctor", vendor, "--config", str(settings))
    assert "ok    config:" in out
    assert "Stop" in out.split("ok    config:")[1].splitlines()[0]
    del block["hooks"]["Stop"]
    settings.write_text(json.dumps(block), encoding="utf-8")
    code, out, _ = cli(capsys, "hooks", "doctor", vendor, "--config", str(settings))
    assert code == 1
    (line,) = [line for line in out.splitlines() if "config:" in line]
    assert line.strip().startswith("FAIL  config:")
    assert "missing Stop" in line
    assert f"hooks install {vendor} --write {settings}" in line


def test_doctor_and_install_name_a_version_between_verified_ones(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Qwen Code 0.22.0 sits between the verified 0.21.2 and 0.23.4: install wires its row and
    says it is not a verified version; doctor fails the version line, naming the verified ones."""
    monkeypatch.setenv("LIVE_STEERING_QWEN", fake_cli(tmp_path, "qwen", "0.22.0"))
    settings = tmp_path / "settings.json"
    store = str(tmp_path / "h.db")
    code, out, err = cli(capsys, "hooks", "install", "qwen-code", "--write", str(settings), "--store", store)
    assert code == 0
    assert "not a version verified (0.21.2, 0.23.4, 0.24.4)" in out + err
    code, out, _ = cli(capsys, "hooks", "doctor", "qwen-code", "--config", str(settings))
    assert code == 1
    (line,) = [line for line in out.splitlines() if "version:" in line]
    assert line.strip().startswith("FAIL  version:")
    assert "not a version verified 0.21.2, 0.23.4, 0.24.4" in line


# -- doctor: what makes the vendor run no hook at all ------------------------------------------


def test_doctor_and_install_follow_claude_config_dir(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claude Code reads ``$CLAUDE_CONFIG_DIR/settings.json`` when the variable is set (its CLI's
    user-settings folder is ``CLAUDE_CONFIG_DIR ?? ~/.claude``): `hooks install claude-code --write`
    writes there, and `hooks doctor` (with or without VENDOR) checks that file, not ~/.claude."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-config"))
    for name in ("CODEX_HOME", "HERMES_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LIVE_STEERING_CLAUDE", fake_cli(tmp_path, "claude", "2.1.332 (Claude Code)"))
    store = str(tmp_path / "h.db")
    code, out, err = cli(capsys, "hooks", "install", "claude-code", "--write", "--store", store)
    assert code == 0, err
    settings = tmp_path / "claude-config" / "settings.json"
    assert f"wrote the claude-code hooks into {settings}" in out
    assert "hook claude-code" in settings.read_text(encoding="utf-8")
    assert not (tmp_path / "home" / ".claude").exists()
    assert _doctor.config_path("claude-code") == str(settings)
    for argv in (["hooks", "doctor", "claude-code"], ["hooks", "doctor"]):
        code, out, _ = cli(capsys, *argv)
        assert code == 0, out
        assert f"ok    config: {settings} wires" in out
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", "")  # empty: unset, as for $CODEX_HOME
    assert _doctor.config_path("claude-code") == str(tmp_path / "home" / ".claude" / "settings.json")


#: The vendors with a ``disableAllHooks`` switch: name, the variable naming its CLI, the CLI's
#: ``--version`` line, the version.
SWITCHED = [
    ("claude-code", "LIVE_STEERING_CLAUDE", "2.1.332 (Claude Code)", (2, 1, 332)),
    ("qwen-code", "LIVE_STEERING_QWEN", "0.24.4", (0, 24, 4)),
]


@pytest.mark.parametrize(("vendor", "env", "version_line", "version"), SWITCHED)
def test_doctor_fails_a_config_that_disables_all_hooks(
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    vendor: str,
    env: str,
    version_line: str,
    version: tuple[int, int, int],
) -> None:
    """``"disableAllHooks": true`` (Claude Code's and Qwen Code's switch for every hook): the
    vendor runs none of ours, so `config` fails and names the setting; false passes."""
    monkeypatch.setenv(env, fake_cli(tmp_path, vendor, version_line))
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"disableAllHooks": True}), encoding="utf-8")
    _install.merge_into(str(settings), vendor, str(tmp_path / "h.db"), version=version)
    code, out, _ = cli(capsys, "hooks", "doctor", vendor, "--config", str(settings))
    assert code == 1, out
    (line,) = [line for line in out.splitlines() if "config:" in line]
    assert line.strip().startswith("FAIL  config:")
    assert '"disableAllHooks": true' in line
    assert "runs no hook" in line
    config = json.loads(settings.read_text(encoding="utf-8"))
    config["disableAllHooks"] = False
    settings.write_text(json.dumps(config), encoding="utf-8")
    code, out, _ = cli(capsys, "hooks", "doctor", vendor, "--config", str(settings))
    assert code == 0, out


@pytest.mark.parametrize(("vendor", "env", "version_line"), [row[:3] for row in SWITCHED])
def test_install_warns_when_the_config_disables_all_hooks(
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    vendor: str,
    env: str,
    version_line: str,
) -> None:
    """`install --write` into a file with ``"disableAllHooks": true`` still writes the hooks (the
    person may turn the switch off later) and exits 0, but says on stderr that none of them runs,
    each time, also when the hooks were already there; without the switch it says nothing."""
    monkeypatch.setenv(env, fake_cli(tmp_path, vendor, version_line))
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"disableAllHooks": True}), encoding="utf-8")
    argv = ("hooks", "install", vendor, "--store", str(tmp_path / "h.db"), "--write", str(settings))
    for _ in range(2):  # written, then already there: warned both times
        code, _, err = cli(capsys, *argv)
        assert code == 0, err
        assert f'warning: {settings} sets "disableAllHooks": true, so none of these hooks runs' in err
    config = json.loads(settings.read_text(encoding="utf-8"))
    assert config["disableAllHooks"] is True  # the person's setting is theirs: never changed
    assert config["hooks"]
    config["disableAllHooks"] = False
    settings.write_text(json.dumps(config), encoding="utf-8")
    code, _, err = cli(capsys, *argv)
    assert code == 0, err
    assert "disableAllHooks" not in err


def test_qwen_code_settings_with_comments_are_read_as_qwen_code_reads_them(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Qwen Code reads its settings with ``//`` and ``/* */`` comments stripped (0.24.4's bundled
    loader): doctor reads such a file too (it used to fail it as not JSON), and `install --write`
    refuses it in one line, unchanged, rather than drop the comments; a string holding ``//`` is
    not a comment. Claude Code reads strict JSON: there a comment is still not JSON."""
    monkeypatch.setenv("LIVE_STEERING_QWEN", fake_cli(tmp_path, "qwen", "0.24.4"))
    settings = tmp_path / "settings.json"
    _install.merge_into(str(settings), "qwen-code", str(tmp_path / "h.db"), version=(0, 24, 4))
    wired = settings.read_text(encoding="utf-8")
    commented = wired.replace("{", '{\n  // my theme, "dark" // as before\n  "theme": "a//b", /* kept */', 1)
    settings.write_text(commented, encoding="utf-8")
    code, out, _ = cli(capsys, "hooks", "doctor", "qwen-code", "--config", str(settings))
    assert code == 0, out
    assert f"ok    config: {settings} wires" in out
    argv = ("hooks", "install", "qwen-code", "--store", str(tmp_path / "h.db"), "--write", str(settings))
    code, out, err = cli(capsys, *argv)
    assert code == 1
    assert err.count("\n") == 1
    assert (
        f"{settings} has comments, which Qwen Code reads but a merge would drop; nothing was changed" in err
    )
    assert settings.read_text(encoding="utf-8") == commented
    assert not list(tmp_path.glob("settings.json.bak*"))
    monkeypatch.setenv("LIVE_STEERING_CLAUDE", fake_cli(tmp_path, "claude", "2.1.332 (Claude Code)"))
    claude = tmp_path / "claude.json"
    claude.write_text('{\n  // a comment\n  "hooks": {}\n}\n', encoding="utf-8")
    code, _, err = cli(capsys, "hooks", "install", "claude-code", "--write", str(claude))
    assert code == 1
    assert f"{claude} is not JSON" in err


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_doctor_fails_a_config_holding_nan_or_infinity(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, constant: str
) -> None:
    """``NaN``/``Infinity`` are not JSON (Claude Code cannot read such a file, and so runs no hook
    from it) though Python's json reads them: `config` fails as not JSON."""
    monkeypatch.setenv("LIVE_STEERING_CLAUDE", fake_cli(tmp_path, "claude", "2.1.332 (Claude Code)"))
    block = _install.config_block("claude-code", str(tmp_path / "h.db"), version=(2, 1, 332))
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps(block)[:-1] + f', "cleanupPeriodDays": {constant}}}', encoding="utf-8")
    code, out, _ = cli(capsys, "hooks", "doctor", "claude-code", "--config", str(settings))
    assert code == 1, out
    assert f"FAIL  config: {settings} is not JSON ({constant} is not a JSON value)" in out


def test_doctor_reads_a_config_saved_with_a_bom(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A settings file with a UTF-8 byte order mark (as Windows editors save it), which Claude Code
    reads: doctor reads past the BOM and passes it."""
    monkeypatch.setenv("LIVE_STEERING_CLAUDE", fake_cli(tmp_path, "claude", "2.1.332 (Claude Code)"))
    block = _install.config_block("claude-code", str(tmp_path / "h.db"), version=(2, 1, 332))
    settings = tmp_path / "settings.json"
    settings.write_bytes(b"\xef\xbb\xbf" + json.dumps(block).encode())
    code, out, _ = cli(capsys, "hooks", "doctor", "claude-code", "--config", str(settings))
    assert code == 0, out
    assert f"ok    config: {settings} wires" in out


async def test_doctor_probes_an_http_install_with_its_token(
    anyio_backend: str,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An ``--http --token-env TK`` install against a running ``serve --token-env``: `server` fails
    when $TK is unset or empty, and when the server answers 401 to the hooks' token; it passes with
    the right token. The probe (the hook route, a body that is not JSON: 415 once the token is
    taken) records nothing. An install without the token the server wants fails (401), and one at
    a URL where the server has no hook route fails (404)."""
    pytest.importorskip("starlette")
    import anyio.to_thread

    from http_helpers import serving
    from live_steering.http import create_app

    monkeypatch.setenv("LIVE_STEERING_CLAUDE", fake_cli(tmp_path, "claude", "2.1.332 (Claude Code)"))
    store = str(tmp_path / "h.db")
    settings = str(tmp_path / "settings.json")

    async def run(*argv: str) -> tuple[int, str, str]:
        return await anyio.to_thread.run_sync(lambda: cli(capsys, *argv))

    async with serving(create_app(hooks_store=store, token="right-token")) as url:
        port = url.rpartition(":")[2]
        install = ["hooks", "install", "claude-code", "--write", settings]
        assert (await run(*install, "--http", url, "--token-env", "TK"))[0] == 0
        doctor = ["hooks", "doctor", "claude-code", "--config", settings]
        for unset in (None, ""):
            if unset is None:
                monkeypatch.delenv("TK", raising=False)
            else:
                monkeypatch.setenv("TK", unset)
            code, out, _ = await run(*doctor)
            assert code == 1, out
            assert "FAIL  server: the hooks send Authorization: Bearer ${TK}, but $TK is not set here" in out
        monkeypatch.setenv("TK", "wrong-token")
        code, out, _ = await run(*doctor)
        assert code == 1, out
        assert f"FAIL  server: {url}/v1/hooks/claude-code refuses the token in $TK (401)" in out
        monkeypatch.setenv("TK", "right-token")
        code, out, _ = await run(*doctor)
        assert code == 0, out
        assert f"ok    server: 127.0.0.1:{port} answers the hook route and takes the token in $TK" in out
        assert (await run(*install, "--http", url))[0] == 0  # no --token-env: the server wants one
        code, out, _ = await run(*doctor)
        assert code == 1, out
        assert f"FAIL  server: {url}/v1/hooks/claude-code refuses a hook without a token (401)" in out
        assert (await run(*install, "--http", url + "/elsewhere", "--token-env", "TK"))[0] == 0
        code, out, _ = await run(*doctor)
        assert code == 1, out
        assert f"FAIL  server: {url}/elsewhere/v1/hooks/claude-code answers 404" in out
    with SqliteHookStore(store) as s:  # the probes changed nothing
        assert (s.events(), s.sessions()) == ([], [])
