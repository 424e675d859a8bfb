"""`live-steering hooks uninstall VENDOR`: our entries leave the vendor's config, the user's stay.

What `install --write` merged in (command hooks or ``--http`` hooks, for any store) comes out
again; a matcher group shared with the user's hooks keeps theirs; the previous file is backed up
as `install --write` backs it up; a second run changes nothing; a file that cannot be rewritten
safely (not UTF-8, not JSON, Qwen Code's comments) is refused and left as it was. For Hermes the
YAML section and the plugin `install --plugin` wrote come out the same way.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from live_steering._cli import main
from live_steering.hooks import _install


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


USER_HOOK = {"type": "command", "command": "echo mine >> /tmp/mine.log"}


def ours_in(text: str) -> bool:
    return _install.runs_our_hook(text)


@pytest.mark.parametrize("vendor", ["claude-code", "codex", "qwen-code"])
def test_uninstall_takes_out_only_ours_and_backs_the_file_up(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path, vendor: str
) -> None:
    """The user's hooks (a moment of their own, and their hook in a matcher group we share) and
    their other settings stay exactly; our moments are gone; the file before is in PATH.bak.N."""
    settings = tmp_path / "settings.json"
    first = _install.moments(vendor)[0]
    user = {
        "model": "mine",
        "hooks": {
            "PreCompact": [{"hooks": [USER_HOOK]}],
            first: [{"hooks": [dict(USER_HOOK, command="echo shared")]}],
        },
    }
    settings.write_text(json.dumps(user), encoding="utf-8")
    store = str(tmp_path / "h.db")
    assert cli(capsys, "hooks", "install", vendor, "--write", str(settings), "--store", store)[0] == 0
    installed = settings.read_text(encoding="utf-8")
    assert ours_in(installed)

    code, out, err = cli(capsys, "hooks", "uninstall", vendor, "--config", str(settings))
    assert (code, err) == (0, "")
    after = json.loads(settings.read_text(encoding="utf-8"))
    assert not ours_in(json.dumps(after))
    assert after["model"] == "mine"
    assert after["hooks"]["PreCompact"] == [{"hooks": [USER_HOOK]}]
    assert after["hooks"][first] == [{"hooks": [dict(USER_HOOK, command="echo shared")]}]
    assert set(after["hooks"]) == {"PreCompact", first}
    backup = out.split("the previous file is in ")[1].split("\n")[0]
    assert pathlib.Path(backup).read_text(encoding="utf-8") == installed
    assert f"removed the live-steering {vendor} hooks from {settings}" in out
    assert "the hook store is left as it is" in out

    # a second run finds nothing of ours: no write, no new backup
    backups = sorted(p.name for p in tmp_path.iterdir() if ".bak" in p.name)
    code, out, _ = cli(capsys, "hooks", "uninstall", vendor, "--config", str(settings))
    assert code == 0
    assert out == f"{settings} has no live-steering hooks; nothing was changed\n"
    assert sorted(p.name for p in tmp_path.iterdir() if ".bak" in p.name) == backups


def test_uninstall_of_a_file_with_only_ours_leaves_no_hooks_key(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """Every moment we wired had only our hook: the moments and the emptied ``hooks`` go."""
    settings = tmp_path / "settings.json"
    settings.write_text('{"theme": "dark"}', encoding="utf-8")
    assert cli(capsys, "hooks", "install", "claude-code", "--write", str(settings))[0] == 0
    assert cli(capsys, "hooks", "uninstall", "claude-code", "--config", str(settings))[0] == 0
    assert json.loads(settings.read_text(encoding="utf-8")) == {"theme": "dark"}


def test_uninstall_takes_out_an_http_install_and_a_dsn_install(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """An ``--http`` install (HTTP hooks to ``serve``) and a ``--dsn`` one are ours too."""
    settings = tmp_path / "settings.json"
    argv = ("hooks", "install", "claude-code", "--http", "http://127.0.0.1:8765", "--write", str(settings))
    assert cli(capsys, *argv)[0] == 0
    assert '"type": "http"' in settings.read_text(encoding="utf-8")
    assert cli(capsys, "hooks", "uninstall", "claude-code", "--config", str(settings))[0] == 0
    assert json.loads(settings.read_text(encoding="utf-8")) == {}

    codex = tmp_path / "hooks.json"
    argv = ("hooks", "install", "codex", "--dsn", "postgresql://u@127.0.0.1/db", "--write", str(codex))
    assert cli(capsys, *argv)[0] == 0
    assert cli(capsys, "hooks", "uninstall", "codex", "--config", str(codex))[0] == 0
    assert json.loads(codex.read_text(encoding="utf-8")) == {}


def test_uninstall_vscode_drops_our_flat_entries(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """VS Code's hook lists hold flat command entries: ours go, the user's stay."""
    settings = tmp_path / "hooks.json"
    assert cli(capsys, "hooks", "install", "vscode", "--write", str(settings))[0] == 0
    config = json.loads(settings.read_text(encoding="utf-8"))
    moment = next(iter(config["hooks"]))
    config["hooks"][moment].append(USER_HOOK)
    settings.write_text(json.dumps(config), encoding="utf-8")
    assert cli(capsys, "hooks", "uninstall", "vscode", "--config", str(settings))[0] == 0
    assert json.loads(settings.read_text(encoding="utf-8")) == {"hooks": {moment: [USER_HOOK]}}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (b"\xff\xfe not utf-8", "is not UTF-8 text"),
        (b'{"hooks": {', "is not JSON"),
        (b'{"hooks": []}', "expected a JSON object with a 'hooks' object"),
    ],
)
def test_uninstall_refuses_a_file_it_cannot_rewrite_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path, text: bytes, says: str
) -> None:
    settings = tmp_path / "settings.json"
    settings.write_bytes(text)
    code, out, err = cli(capsys, "hooks", "uninstall", "claude-code", "--config", str(settings))
    assert (code, out) == (1, "")
    assert says in err
    assert "nothing was changed" in err
    assert settings.read_bytes() == text
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]


def test_uninstall_refuses_qwen_comments_and_says_what_to_do(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """Qwen Code reads comments in its settings; rewriting the file would drop them."""
    settings = tmp_path / "settings.json"
    assert cli(capsys, "hooks", "install", "qwen-code", "--write", str(settings))[0] == 0
    text = "// my settings\n" + settings.read_text(encoding="utf-8")
    settings.write_text(text, encoding="utf-8")
    code, _, err = cli(capsys, "hooks", "uninstall", "qwen-code", "--config", str(settings))
    assert code == 1
    assert "has comments" in err
    assert "delete the entries that run live-steering by hand" in err
    assert settings.read_text(encoding="utf-8") == text


def test_uninstall_without_a_file_or_with_an_empty_one_changes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No file: nothing to remove (exit 0, no file made). The default path is the vendor's user
    config, as `install --write` writes it ($CLAUDE_CONFIG_DIR honoured)."""
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    code, out, _ = cli(capsys, "hooks", "uninstall", "claude-code")
    assert code == 0
    assert out == f"there is no {tmp_path / 'claude' / 'settings.json'}; nothing to remove\n"
    assert not (tmp_path / "claude").exists()

    assert cli(capsys, "hooks", "install", "claude-code", "--write")[0] == 0
    assert ours_in((tmp_path / "claude" / "settings.json").read_text(encoding="utf-8"))
    code, out, _ = cli(capsys, "hooks", "uninstall", "claude-code")
    assert code == 0
    assert "removed the live-steering claude-code hooks" in out
    assert json.loads((tmp_path / "claude" / "settings.json").read_text(encoding="utf-8")) == {}


def test_uninstall_follows_a_symlinked_config(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """A dotfiles symlink stays a symlink; the file it points to is rewritten."""
    real = tmp_path / "dotfiles" / "settings.json"
    real.parent.mkdir()
    real.write_text("{}", encoding="utf-8")
    link = tmp_path / "settings.json"
    link.symlink_to(real)
    assert cli(capsys, "hooks", "install", "claude-code", "--write", str(link))[0] == 0
    code, out, _ = cli(capsys, "hooks", "uninstall", "claude-code", "--config", str(link))
    assert code == 0
    assert f"(-> {real})" in out
    assert link.is_symlink()
    assert json.loads(real.read_text(encoding="utf-8")) == {}


HERMES_USER = """\
model: mine
hooks:
  post_tool_call:
    - command: "echo mine"
  output_spill: 40
"""


def test_uninstall_hermes_keeps_the_users_hooks_and_settings(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """Our event entries leave the ``hooks:`` section; the user's own event and keys stay. With
    nothing of the user's left under ``hooks:``, the header goes too."""
    config = tmp_path / "config.yaml"
    config.write_text(HERMES_USER, encoding="utf-8")
    assert cli(capsys, "hooks", "install", "hermes", "--write", str(config))[0] == 0
    assert ours_in(config.read_text(encoding="utf-8"))
    assert cli(capsys, "hooks", "uninstall", "hermes", "--config", str(config))[0] == 0
    after = config.read_text(encoding="utf-8")
    assert not ours_in(after)
    assert 'post_tool_call:\n    - command: "echo mine"' in after
    assert "output_spill: 40" in after
    assert after.startswith("model: mine\nhooks:\n")

    alone = tmp_path / "alone.yaml"
    alone.write_text("model: mine\n", encoding="utf-8")
    assert cli(capsys, "hooks", "install", "hermes", "--write", str(alone))[0] == 0
    assert cli(capsys, "hooks", "uninstall", "hermes", "--config", str(alone))[0] == 0
    assert alone.read_text(encoding="utf-8") == "model: mine\n"


def test_uninstall_hermes_plugin_removes_only_our_files(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--plugin` removes the two files `install --plugin` wrote (and their bytecode) and the
    folder once empty; a file of the same name that is not ours is refused with nothing removed."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes"))
    assert cli(capsys, "hooks", "install", "hermes", "--plugin", "--store", str(tmp_path / "h.db"))[0] == 0
    plugin = tmp_path / "hermes" / "plugins" / "live-steering"
    (plugin / "__pycache__").mkdir()
    (plugin / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\0")
    code, out, _ = cli(capsys, "hooks", "uninstall", "hermes", "--plugin")
    assert code == 0
    assert f"removed {plugin / 'plugin.yaml'}\nremoved {plugin / '__init__.py'}\n" in out
    assert "plugins: enabled:" in out
    assert not plugin.exists()
    code, out, _ = cli(capsys, "hooks", "uninstall", "hermes", "--plugin")
    assert (code, out) == (0, f"no live-steering plugin in {plugin}; nothing was changed\n")

    mine = tmp_path / "mine"
    assert cli(capsys, "hooks", "install", "hermes", "--plugin", str(mine))[0] == 0
    (mine / "notes.txt").write_text("keep", encoding="utf-8")
    assert cli(capsys, "hooks", "uninstall", "hermes", "--plugin", str(mine))[0] == 0
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]

    foreign = tmp_path / "foreign"
    assert cli(capsys, "hooks", "install", "hermes", "--plugin", str(foreign))[0] == 0
    (foreign / "plugin.yaml").write_text("name: someone-else\n", encoding="utf-8")
    code, out, err = cli(capsys, "hooks", "uninstall", "hermes", "--plugin", str(foreign))
    assert (code, out) == (1, "")
    assert "is not the live-steering plugin's; nothing was removed" in err
    assert sorted(p.name for p in foreign.iterdir()) == ["__init__.py", "plugin.yaml"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("claude-code", "--plugin"), "--plugin is for hermes only"),
        (("hermes", "--profile", "coder"), "--profile is for hermes --plugin only"),
        (("hermes", "--plugin", "x", "--config", "y"), "cannot be combined"),
        (("cursor",), "invalid choice"),
    ],
)
def test_uninstall_usage_errors_exit_2_and_change_nothing(
    capsys: pytest.CaptureFixture[str],
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: tuple[str, ...],
    says: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    try:
        code, _, err = cli(capsys, "hooks", "uninstall", *argv)
    except SystemExit as exc:  # argparse's own refusals
        code, err = int(exc.code or 0), capsys.readouterr().err
    assert code == 2
    assert says in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("vendor", ["claude-code", "qwen-code"])
def test_a_users_hook_that_only_names_live_steering_is_not_ours(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path, vendor: str
) -> None:
    """A hook of the user's that runs `live-steering hooks recover` (a documented command) or
    merely says "live-steering hook" is theirs: install keeps it beside ours, uninstall keeps it."""
    recover = {"type": "command", "command": "live-steering hooks recover"}
    notify = {"type": "command", "command": "notify-send 'live-steering hook fired'"}
    user = {"hooks": {"SessionStart": [{"hooks": [recover]}], "Notification": [{"hooks": [notify]}]}}
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps(user), encoding="utf-8")
    assert cli(capsys, "hooks", "install", vendor, "--write", str(settings))[0] == 0
    installed = json.loads(settings.read_text(encoding="utf-8"))
    assert installed["hooks"]["Notification"] == [{"hooks": [notify]}]
    start = [h for group in installed["hooks"].get("SessionStart", []) for h in group["hooks"]]
    assert recover in start
    assert cli(capsys, "hooks", "uninstall", vendor, "--config", str(settings))[0] == 0
    assert json.loads(settings.read_text(encoding="utf-8")) == user


def test_hermes_entries_follow_the_files_indentation_and_come_out_again(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """A ``hooks:`` section indented with four spaces gets our entries at four (two would make the
    mapping invalid YAML, which Hermes answers by ignoring the whole file); doctor sees them,
    and uninstall gives back the file as it was."""
    config = tmp_path / "config.yaml"
    before = 'model:\n    default: mine\nhooks:\n    post_tool_call:\n        - command: "echo mine"\n'
    config.write_text(before, encoding="utf-8")
    argv = ("hooks", "install", "hermes", "--write", str(config), "--vendor-version", "0.19.0")
    assert cli(capsys, *argv)[0] == 0
    lines = config.read_text(encoding="utf-8").splitlines()
    keys = [line for line in lines[3:] if line.strip().endswith(":")]
    assert keys == [
        "    post_tool_call:",
        "    pre_llm_call:",
        "    on_session_start:",
        "    on_session_finalize:",
    ]
    assert all(
        line.startswith(("      - command: ", "        timeout: ")) for line in lines[5:] if line not in keys
    )
    _, out, _ = cli(capsys, "hooks", "doctor", "hermes", "--config", str(config))
    assert "ok    config:" in out
    assert "wires pre_llm_call, on_session_start, on_session_finalize" in out
    assert cli(capsys, "hooks", "uninstall", "hermes", "--config", str(config))[0] == 0
    assert config.read_text(encoding="utf-8") == before


def test_hermes_uninstall_finds_our_entry_with_a_comment_and_keeps_the_users_comment(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """A comment the user put after one of our lines does not hide the entry from uninstall; a
    ``hooks:`` section that held only the user's comment keeps it, header and all."""
    config = tmp_path / "config.yaml"
    before = "model: mine\nhooks:\n  # TODO: my linter hook goes here\n"
    config.write_text(before, encoding="utf-8")
    assert cli(capsys, "hooks", "install", "hermes", "--write", str(config))[0] == 0
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("timeout: 10\n", "timeout: 10  # live steering\n", 1), encoding="utf-8")
    code, out, _ = cli(capsys, "hooks", "uninstall", "hermes", "--config", str(config))
    assert code == 0
    assert "removed the live-steering hermes hooks" in out
    assert config.read_text(encoding="utf-8") == before


def test_hermes_plugin_uninstall_removes_the_backups_of_our_files_only(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """A second `install --plugin` (another store) backs our previous ``__init__.py`` up; that
    backup is ours and goes too. A backup of a file that was not ours stays, and keeps the folder."""
    plugin = tmp_path / "plugin"
    assert (
        cli(capsys, "hooks", "install", "hermes", "--plugin", str(plugin), "--store", str(tmp_path / "a.db"))[
            0
        ]
        == 0
    )
    assert (
        cli(capsys, "hooks", "install", "hermes", "--plugin", str(plugin), "--store", str(tmp_path / "b.db"))[
            0
        ]
        == 0
    )
    assert (plugin / "__init__.py.bak").is_file()
    assert cli(capsys, "hooks", "uninstall", "hermes", "--plugin", str(plugin))[0] == 0
    assert not plugin.exists()

    plugin.mkdir()
    (plugin / "plugin.yaml").write_text("name: someone-else\n", encoding="utf-8")
    assert cli(capsys, "hooks", "install", "hermes", "--plugin", str(plugin))[0] == 0
    assert cli(capsys, "hooks", "uninstall", "hermes", "--plugin", str(plugin))[0] == 0
    assert sorted(p.name for p in plugin.iterdir()) == ["plugin.yaml.bak"]
    assert (plugin / "plugin.yaml.bak").read_text(encoding="utf-8") == "name: someone-else\n"
