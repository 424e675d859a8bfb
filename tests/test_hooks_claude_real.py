"""The hook relay against the real Claude Code CLI (CONTRACT.md C26b, C29, C33; issue 24).

Each test runs the pinned ``claude`` (``scripts/clients.txt``: 2.1.197, the oldest version
supported, and 2.1.332, the newest) in ``-p`` mode, or interactively under tmux, against
``tests/fake_anthropic.py`` on 127.0.0.1, with the hooks ``live-steering hooks install
claude-code --client CLAUDE`` writes (the installed version decides the moments). The
fake's request log shows what the model was sent: an instruction queued mid-run reaches
the next model request exactly once, at each moment the relay uses, and the store's
events say ``delivered`` once. Every hook process appends its moment to a log, which
counts the hook processes per tool round.

The CLI runs with a test API key, its own HOME and CLAUDE_CONFIG_DIR, and the documented
switches that turn off telemetry, error reporting, auto-update and nonessential traffic.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from fake_anthropic import (
    Block,
    FakeAnthropic,
    first_user_text,
    last_is_tool_result,
    occurrences,
    text,
    tool_use,
)
from live_steering.hooks import SqliteHookStore, instruct
from real_clients import TOKEN, TOKEN_ENV, npm_bin, running_serve

pytestmark = pytest.mark.real_clients

LIVE_STEERING = pathlib.Path(sys.executable).parent / "live-steering"
#: The two pinned Claude Code CLIs: the oldest version supported and the newest.
VERSIONS = {"2.1.197": "claude-code", "2.1.332": "claude-code-new"}
#: Moments that fire once per session or prompt, not per tool round.
ONCE = {"SessionStart", "UserPromptSubmit", "Stop", "SessionEnd"}
RUN_TIMEOUT = 180  # seconds for one CLI run on a busy machine (a run takes 1-5 s alone)


def claude_bin(client: str) -> pathlib.Path:
    return npm_bin(client, "claude")


def has_tool_result(body: dict[str, Any]) -> bool:
    return any(
        isinstance(m.get("content"), list)
        and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in m["content"])
        for m in body.get("messages", [])
    )


class Claude:
    """One throwaway Claude Code install: HOME, config dir, hook store, workspace, hook log."""

    def __init__(self, tmp: pathlib.Path, client: str, *, drop: tuple[str, ...] = ()) -> None:
        self.tmp = tmp
        self.bin = claude_bin(client)
        # 2.1.332's package asks for node >= 22 (this machine's node is 20): the pinned node22
        # client comes first on its PATH.
        self.node_path = str(npm_bin("node22", "node").parent) if client == "claude-code-new" else None
        self.home = tmp / "home"
        self.config = tmp / "config"
        self.work = tmp / "work"
        for folder in (self.home, self.config, self.work):
            folder.mkdir(parents=True, exist_ok=True)
        self.store = str(tmp / "hooks.db")
        self.log = tmp / "hooks.log"
        self.session = str(uuid.uuid4())
        self.extra_env: dict[str, str] = {}
        """More variables for the CLI's environment (an HTTP hook's token)."""
        done = subprocess.run(
            [
                str(LIVE_STEERING),
                "hooks",
                "install",
                "claude-code",
                "--store",
                self.store,
                "--client",
                str(self.bin),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        self.install_note = done.stderr
        block = json.loads(done.stdout)
        for moment in drop:
            del block["hooks"][moment]
        self.wired = list(block["hooks"])
        for moment, groups in block["hooks"].items():
            for group in groups:
                for hook in group["hooks"]:
                    hook["command"] = f"echo {moment} >> {self.log}; " + hook["command"]
        self.settings = self.config / "settings.json"
        self.settings.write_text(json.dumps({"hooks": block["hooks"]}), encoding="utf-8")

    def env(self, url: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
        env.update(
            HOME=str(self.home),
            CLAUDE_CONFIG_DIR=str(self.config),
            ANTHROPIC_BASE_URL=url,
            ANTHROPIC_API_KEY="sk-ant-test-0000000000000000000000",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_TELEMETRY="1",
            DISABLE_ERROR_REPORTING="1",
            DISABLE_AUTOUPDATER="1",
        )
        env.update(self.extra_env)
        if self.node_path is not None:
            env["PATH"] = self.node_path + os.pathsep + env.get("PATH", "")
        return env

    def run(self, fake: FakeAnthropic, prompt: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [
                str(self.bin),
                "-p",
                prompt,
                "--session-id",
                self.session,
                "--allowedTools",
                "Bash",
                "--output-format",
                "json",
            ],
            cwd=self.work,
            env=self.env(fake.url),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
        return done

    def queue_command(self, marker: str, command_id: str, *extra: str) -> str:
        """A Bash command that queues ``marker`` (read from a file, so the command line the model
        sees does not carry it) for this session."""
        message = self.tmp / f"{command_id}.txt"
        message.write_text(marker, encoding="utf-8")
        args = " ".join(extra)
        where = f"--id {command_id} --store {self.store} {args}"
        return f"{LIVE_STEERING} instruct {self.session} - {where} < {message}"

    def moments(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").split() if self.log.exists() else []

    def events(self) -> list[dict[str, object]]:
        with SqliteHookStore(self.store) as store:
            return store.events()


def delivered(events: list[dict[str, object]], command_id: str) -> list[dict[str, object]]:
    return [
        e
        for e in events
        if e["type"] == "x.claude-code.instruction.delivered" and e.get("command_id") == command_id
    ]


def no_failures(events: list[dict[str, object]]) -> None:
    assert [e for e in events if str(e["type"]).endswith("hook.failed")] == []


def first_with(requests: list[dict[str, Any]], marker: str) -> int:
    return next(i for i, r in enumerate(requests) if occurrences(r, marker))


def assert_once_from(requests: list[dict[str, Any]], marker: str, start: int) -> None:
    """No request before ``start`` carries the marker; every one from it on carries it exactly once."""
    assert [occurrences(r, marker) for r in requests[:start]] == [0] * start
    assert [occurrences(r, marker) for r in requests[start:]] == [1] * (len(requests) - start)


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_a_steer_queued_by_a_tool_reaches_the_next_request_once(tmp_path: pathlib.Path, version: str) -> None:
    """A steer queued during a tool round rides PostToolBatch into the very next request, once;
    the events say delivered once; one hook process per tool round; no hook fails."""
    claude = Claude(tmp_path, VERSIONS[version])
    assert "wiring the moments of claude-code " + version in claude.install_note
    marker = "STEER-7f2a use the corrected path"
    rounds = 3

    def reply(body: dict[str, Any]) -> list[Block]:
        if not body.get("tools"):
            return [text("ok")]
        done = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if done == 0:
            return [
                tool_use("Bash", {"command": claude.queue_command(marker, "fix-1"), "description": "queue"})
            ]
        if done < rounds:
            return [tool_use("Bash", {"command": "echo working", "description": "work"})]
        return [text("all done")]

    with FakeAnthropic(reply) as fake:
        claude.run(fake, "please run the tools")
    requests = fake.agent_requests()
    assert len(requests) == rounds + 1
    assert_once_from(requests, marker, 1)  # the request right after the tool that queued it
    events = claude.events()
    assert [e["moment"] for e in delivered(events, "fix-1")] == ["PostToolBatch"]
    no_failures(events)
    moments = claude.moments()
    per_round = len([m for m in moments if m not in ONCE]) / rounds
    assert per_round <= 2  # hooks_per_tool_round (issue 24, 4a): here 1, PostToolBatch
    assert moments.count("PostToolBatch") == rounds
    assert set(moments) <= set(claude.wired)


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_every_moment_the_release_fires_is_known(tmp_path: pathlib.Path, version: str) -> None:
    """With every hook event of the release's table row wired to the hook command, a run with a
    tool round (and one failing tool) records no ``hook.failed``: no moment the CLI really fires
    is unknown to the relay (MessageDisplay, PostToolUseFailure, ...)."""
    from live_steering.hooks import _install, _versions

    claude = Claude(tmp_path, VERSIONS[version])
    row = _versions.wiring("claude-code", _versions.parse_version(version))
    assert row is not None
    assert row.known is not None
    assert _versions.shown(row.minimum) == version
    command = _install.hook_command("claude-code", claude.store)
    hooks = {
        m: [
            {"hooks": [{"type": "command", "command": f"echo {m} >> {claude.log}; {command}", "timeout": 10}]}
        ]
        for m in sorted(row.known)
    }
    claude.settings.write_text(json.dumps({"hooks": hooks}), encoding="utf-8")

    def reply(body: dict[str, Any]) -> list[Block]:
        if not body.get("tools"):
            return [text("ok")]
        rounds = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if rounds == 0:
            return [tool_use("Bash", {"command": "echo fine", "description": "fine"})]
        if rounds == 1:
            return [tool_use("Bash", {"command": "exit 3", "description": "fails"})]
        return [text("done")]

    with FakeAnthropic(reply) as fake:
        claude.run(fake, "run two tools")
    fired = claude.moments()
    assert {
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "PostToolBatch",
        "MessageDisplay",  # recorded as unknown-moment before issue 24
        "Stop",
        "SessionEnd",
    } <= set(fired)
    no_failures(claude.events())


@pytest.mark.parametrize("moment", ["SessionStart", "UserPromptSubmit"])
def test_a_steer_queued_before_the_start_rides_the_first_request(tmp_path: pathlib.Path, moment: str) -> None:
    """Queued before the run: the first request carries it once, at SessionStart (or, with only
    UserPromptSubmit wired, at the prompt)."""
    claude = Claude(tmp_path, "claude-code", drop=("SessionStart",) if moment == "UserPromptSubmit" else ())
    marker = f"EARLY-{moment} answer in French"
    assert instruct(claude.session, marker, id="early", vendor="claude-code", store=claude.store).accepted

    def reply(body: dict[str, Any]) -> list[Block]:
        return [text("d'accord")]

    with FakeAnthropic(reply) as fake:
        claude.run(fake, "hello")
    requests = fake.agent_requests()
    assert requests
    assert_once_from(requests, marker, 0)
    events = claude.events()
    assert [e["moment"] for e in delivered(events, "early")] == [moment]
    no_failures(events)


@pytest.mark.parametrize("version", sorted(VERSIONS))
@pytest.mark.parametrize("kind", ["follow_up", "steer"])
def test_an_instruction_queued_during_the_final_answer_continues_through_the_stop_decision(
    tmp_path: pathlib.Path, kind: str, version: str
) -> None:
    """``instruct --follow-up`` (and a late steer) queued while the model writes its last answer:
    the Stop hook's reply keeps Claude Code going, it makes one more request with it, once
    (2.1.332 put a block decision's reason in that request twice), and then stops."""
    claude = Claude(tmp_path, VERSIONS[version])
    marker = f"LATER-{kind} now update the changelog"

    def reply(body: dict[str, Any]) -> list[Block]:
        if not body.get("tools"):
            return [text("ok")]
        if not any(occurrences(r, marker) for r in fake.agent_requests()) and len(fake.agent_requests()) == 1:
            receipt = instruct(
                claude.session, marker, id="then-1", vendor="claude-code", store=claude.store, kind=kind
            )
            assert receipt.accepted, receipt
        return [text("finished")]

    with FakeAnthropic(reply) as fake:
        claude.run(fake, "do the work")
    requests = fake.agent_requests()
    assert len(requests) == 2
    assert_once_from(requests, marker, 1)
    events = claude.events()
    (event,) = delivered(events, "then-1")
    assert event["moment"] == "Stop"
    assert event.get("delivery") == ("follow_up" if kind == "follow_up" else None)
    no_failures(events)
    assert claude.moments().count("Stop") == 2  # the one that continued, and the final one


def test_a_subagent_never_takes_the_main_agents_instruction(tmp_path: pathlib.Path) -> None:
    """A subagent's tool round (its hooks carry agent_id) leaves the main agent's instruction
    queued; the main agent's next request gets it, once; no subagent request ever sees it."""
    claude = Claude(tmp_path, "claude-code")
    marker = "MAIN-ONLY-9c1d keep the public API"
    task = "SUBAGENT-TASK-3b queue a note and finish"

    def reply(body: dict[str, Any]) -> list[Block]:
        if not body.get("tools"):
            return [text("ok")]
        if task in first_user_text(body):  # the subagent's conversation
            if has_tool_result(body):
                return [text("subagent finished")]
            return [
                tool_use("Bash", {"command": claude.queue_command(marker, "main-1"), "description": "queue"})
            ]
        if has_tool_result(body):
            return [text("main finished")]
        return [
            tool_use(
                "Agent", {"description": "queue a note", "prompt": task, "subagent_type": "general-purpose"}
            )
        ]

    with FakeAnthropic(reply) as fake:
        claude.run(fake, "delegate the task")
    requests = fake.agent_requests()
    sub = [r for r in requests if task in first_user_text(r)]
    main = [r for r in requests if task not in first_user_text(r)]
    assert (len(sub), len(main)) == (2, 2)
    assert [occurrences(r, marker) for r in sub] == [0, 0]
    assert [occurrences(r, marker) for r in main] == [0, 1]
    events = claude.events()
    (event,) = delivered(events, "main-1")
    assert event["agent_id"] is None  # the main agent took it
    # the subagent's id, as its hooks gave it, is listed for `instruct --agent`
    (seen,) = [e for e in events if e["type"] == "x.claude-code.agent.seen"]
    with SqliteHookStore(claude.store) as store:
        (row,) = store.sessions()
    assert row["agents"] == [seen["agent_id"]]
    no_failures(events)
    # the subagent's PostToolBatch ran (and passed it by) before the main agent's
    assert claude.moments().count("PostToolBatch") == 2


def test_an_instruction_for_an_unknown_session_reaches_no_one(tmp_path: pathlib.Path) -> None:
    """An instruction for a session id that never runs (a typo) stays queued; the real session
    runs as if nothing were queued, and its requests never carry the text."""
    claude = Claude(tmp_path, "claude-code")
    typo = claude.session[:-1] + ("0" if claude.session[-1] != "0" else "1")
    marker = "TYPO-SESSION do something else"
    assert instruct(typo, marker, id="lost-1", vendor="claude-code", store=claude.store).accepted

    def reply(body: dict[str, Any]) -> list[Block]:
        if body.get("tools") and not last_is_tool_result(body) and not has_tool_result(body):
            return [tool_use("Bash", {"command": "echo hi", "description": "hi"})]
        return [text("done")]

    with FakeAnthropic(reply) as fake:
        claude.run(fake, "say hi")
    assert all(occurrences(r, marker) == 0 for r in fake.requests)
    with SqliteHookStore(claude.store) as store:
        receipt = store.receipt(typo, "lost-1")
        assert receipt is not None
        assert receipt.state == "queued"
        sessions = {s["session_id"]: s for s in store.sessions()}
    assert sessions[claude.session]["vendor"] == "claude-code"
    # `hooks sessions` tells the typo from the session the CLI ran
    assert (sessions[claude.session]["seen"], sessions[typo]["seen"]) == (True, False)
    no_failures(claude.events())


def test_http_hooks_to_a_stopped_server_leave_the_agent_working(tmp_path: pathlib.Path) -> None:
    """``hooks install claude-code --http URL`` with nothing listening at URL: the real CLI runs
    its tool round and answers as without hooks."""
    claude = Claude(tmp_path, "claude-code")
    import socket

    with socket.socket() as probe:  # a port nobody listens on: bound, then closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run(
        [
            str(LIVE_STEERING),
            "hooks",
            "install",
            "claude-code",
            "--client",
            str(claude.bin),
            "--http",
            f"http://127.0.0.1:{port}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    block = json.loads(done.stdout)
    (entry,) = block["hooks"]["PostToolBatch"][0]["hooks"]
    assert entry["url"] == f"http://127.0.0.1:{port}/v1/hooks/claude-code"
    claude.settings.write_text(json.dumps(block), encoding="utf-8")

    def reply(body: dict[str, Any]) -> list[Block]:
        if body.get("tools") and not has_tool_result(body):
            return [tool_use("Bash", {"command": "echo still-working", "description": "work"})]
        return [text("finished normally")]

    with FakeAnthropic(reply) as fake:
        result = json.loads(claude.run(fake, "run a tool").stdout)
    assert result["result"] == "finished normally"
    assert not result["is_error"]
    assert any("still-working" in json.dumps(r["messages"]) for r in fake.agent_requests())


def test_uninstall_leaves_the_users_hooks_running_and_none_of_ours(tmp_path: pathlib.Path) -> None:
    """`hooks uninstall claude-code` (default path: $CLAUDE_CONFIG_DIR/settings.json) on settings
    with our hooks and one of the user's in the same PostToolUse group: the real CLI then runs the
    user's hook at each tool round and none of ours (no hook process of ours, no store written),
    and a steer queued before the run reaches no request."""
    claude = Claude(tmp_path, "claude-code")
    config = json.loads(claude.settings.read_text(encoding="utf-8"))
    mine = {"type": "command", "command": f"echo USER-PostToolUse >> {claude.log}"}
    config["hooks"].setdefault("PostToolUse", [{"hooks": []}])[0]["hooks"].append(mine)
    config["cleanupPeriodDays"] = 30
    claude.settings.write_text(json.dumps(config), encoding="utf-8")
    instruct(claude.session, "STEER-uninstalled do not deliver", id="late", store=claude.store)
    events_before = claude.events()

    done = subprocess.run(
        [str(LIVE_STEERING), "hooks", "uninstall", "claude-code"],
        env=claude.env("http://127.0.0.1:9"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"removed the live-steering claude-code hooks from {claude.settings}" in done.stdout
    after = json.loads(claude.settings.read_text(encoding="utf-8"))
    assert after["hooks"] == {"PostToolUse": [{"hooks": [mine]}]}
    assert after["cleanupPeriodDays"] == 30

    def reply(body: dict[str, Any]) -> list[Block]:
        if body.get("tools") and not has_tool_result(body):
            return [tool_use("Bash", {"command": "echo working", "description": "work"})]
        return [text("done without steering")]

    with FakeAnthropic(reply) as fake:
        result = json.loads(claude.run(fake, "run a tool").stdout)
    assert result["result"] == "done without steering"
    assert claude.moments() == ["USER-PostToolUse"]  # the user's hook ran; no moment of ours did
    assert all(occurrences(r, "STEER-uninstalled") == 0 for r in fake.agent_requests())
    assert claude.events() == events_before  # no hook of ours touched the store


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_http_hooks_through_a_running_server_deliver_a_steer_once(
    tmp_path: pathlib.Path, version: str
) -> None:
    """``hooks install claude-code --http URL --token-env VAR`` against a running ``live-steering
    serve --token-env VAR``: the CLI POSTs each hook with the bearer token, a steer queued during
    a tool round reaches the very next request once (PostToolBatch), and the store's events say
    delivered once; no hook fails."""
    claude = Claude(tmp_path, VERSIONS[version])
    claude.extra_env[TOKEN_ENV] = TOKEN
    marker = "STEER-http-4c1d use the corrected path"
    rounds = 3

    def reply(body: dict[str, Any]) -> list[Block]:
        if not body.get("tools"):
            return [text("ok")]
        done = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if done == 0:
            return [
                tool_use("Bash", {"command": claude.queue_command(marker, "http-1"), "description": "queue"})
            ]
        if done < rounds:
            return [tool_use("Bash", {"command": "echo working", "description": "work"})]
        return [text("all done")]

    with running_serve(claude.store, RUN_TIMEOUT + 120) as url:
        done = subprocess.run(
            [
                str(LIVE_STEERING),
                "hooks",
                "install",
                "claude-code",
                "--client",
                str(claude.bin),
                "--http",
                url,
                "--token-env",
                TOKEN_ENV,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert "wiring the moments of claude-code " + version in done.stderr
        block = json.loads(done.stdout)
        (entry,) = block["hooks"]["PostToolBatch"][0]["hooks"]
        assert (entry["type"], entry["url"]) == ("http", f"{url}/v1/hooks/claude-code")
        assert entry["headers"] == {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}
        claude.settings.write_text(json.dumps(block), encoding="utf-8")
        with FakeAnthropic(reply) as fake:
            claude.run(fake, "please run the tools")
    requests = fake.agent_requests()
    assert len(requests) == rounds + 1
    assert_once_from(requests, marker, 1)  # the request right after the tool that queued it
    events = claude.events()
    assert [e["moment"] for e in delivered(events, "http-1")] == ["PostToolBatch"]
    no_failures(events)


# -- an interactive start under tmux ----------------------------------------------------------


def _tmux(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30)


def _interactive_screen(
    claude: Claude, fake: FakeAnthropic, socket: str, until: Callable[[str], bool]
) -> str:
    """Start ``claude`` in a detached tmux session; return the pane once ``until(pane)`` holds
    (bounded: 90 s), then stop the session."""
    env = claude.env(fake.url)
    exports = " ".join(f"{k}={shlex_quote(v)}" for k, v in env.items() if k in _PASSED)
    command = f"cd {shlex_quote(str(claude.work))} && env {exports} {shlex_quote(str(claude.bin))}"
    started = _tmux("-L", socket, "new-session", "-d", "-x", "150", "-y", "45", "-s", "ls", command)
    assert started.returncode == 0, started.stderr
    pane = ""
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            pane = _tmux("-L", socket, "capture-pane", "-p", "-t", "ls").stdout
            if until(pane):
                break
            time.sleep(0.5)
    finally:
        _tmux("-L", socket, "kill-server")
    return pane


_PASSED = (
    "HOME",
    "CLAUDE_CONFIG_DIR",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DISABLE_TELEMETRY",
    "DISABLE_ERROR_REPORTING",
    "DISABLE_AUTOUPDATER",
    "PATH",
    "TERM",
)


def shlex_quote(value: str) -> str:
    import shlex

    return shlex.quote(value)


def _trust(claude: Claude) -> None:
    """Skip the first-run dialogs (theme, API key, folder trust) in the CLI's own config file."""
    key = "sk-ant-test-0000000000000000000000"
    state = {
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "customApiKeyResponses": {"approved": [key[-20:]], "rejected": []},
        "projects": {str(claude.work): {"hasTrustDialogAccepted": True, "allowedTools": []}},
    }
    (claude.config / ".claude.json").write_text(json.dumps(state), encoding="utf-8")


def prompt_ready(pane: str) -> bool:
    """The empty input prompt (a line that is just the prompt mark) is on screen."""
    return any(line.strip() == "\u276f" for line in pane.splitlines())


WARNING_WORDS = (
    "Settings Warning",
    "Unknown hook event",
    "Invalid",
    "Settings Error",
    "settings issue",
    "Fix with Claude",
)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_an_interactive_start_shows_no_settings_warning(tmp_path: pathlib.Path, version: str) -> None:
    """Claude Code (2.1.197, 2.1.332) started interactively with the installed hooks shows its
    prompt and no settings warning; 2.1.197 started with a PostModelSwitch hook (which it does
    not know) shows the warning, so the check can fail."""
    claude = Claude(tmp_path / "ours", VERSIONS[version])
    _trust(claude)
    control = Claude(tmp_path / "control", "claude-code")
    _trust(control)
    settings = json.loads(control.settings.read_text())
    settings["hooks"]["PostModelSwitch"] = [{"hooks": [{"type": "command", "command": "true"}]}]
    control.settings.write_text(json.dumps(settings))
    socket = f"ls-test-{os.getpid()}-{version}"

    def reply(body: dict[str, Any]) -> list[Block]:
        return [text("ok")]

    with FakeAnthropic(reply) as fake:
        warned = _interactive_screen(
            control, fake, socket + "-c", lambda p: any(w in p for w in WARNING_WORDS)
        )
        ours = _interactive_screen(
            claude, fake, socket, lambda p: any(w in p for w in WARNING_WORDS) or prompt_ready(p)
        )
    assert any(w in warned for w in WARNING_WORDS), warned
    assert not any(w in ours for w in WARNING_WORDS), ours
    assert prompt_ready(ours), ours


# -- the claude-agent-sdk adapter driving the real CLI ----------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the Agent SDK is asyncio-only
async def test_the_agent_sdk_adapter_steers_the_real_cli(tmp_path: pathlib.Path, anyio_backend: str) -> None:
    """``steering_hooks()`` on ``ClaudeAgentOptions(session_id=..., cli_path=...)`` (the pinned CLI,
    not the SDK's bundled one): a steer queued by a tool reaches the next request once; a
    follow-up queued during the final answer rides the Stop decision (one more turn)."""
    pytest.importorskip("claude_agent_sdk")
    from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, ResultMessage

    from live_steering.hooks.claude_sdk import end_session, steering_hooks

    claude = Claude(tmp_path, "claude-code")
    claude.settings.write_text("{}")  # the SDK's callbacks, not command hooks, steer here
    steer, later = "SDK-STEER-51 prefer small commits", "SDK-FOLLOW-UP-52 then tag the release"

    def reply(body: dict[str, Any]) -> list[Block]:
        if not body.get("tools"):
            return [text("ok")]
        if not has_tool_result(body):
            return [
                tool_use("Bash", {"command": claude.queue_command(steer, "sdk-1"), "description": "queue"})
            ]
        if not any(occurrences(r, later) for r in fake.agent_requests()):
            assert instruct(
                claude.session, later, id="sdk-2", vendor="claude-code", store=claude.store, kind="follow_up"
            ).accepted
        return [text("finished")]

    with FakeAnthropic(reply) as fake:
        options = ClaudeAgentOptions(
            hooks=steering_hooks(store=claude.store),
            session_id=claude.session,
            cli_path=str(claude.bin),
            cwd=str(claude.work),
            env=claude.env(fake.url),
            allowed_tools=["Bash"],
        )
        results = []
        async with ClaudeSDKClient(options=options) as client:
            await client.query("run the tool")
            async for message in client.receive_response():
                if isinstance(message, ResultMessage):
                    results.append(message)
        await end_session(claude.session, store=claude.store)
    assert results
    assert not results[-1].is_error
    requests = fake.agent_requests()
    assert_once_from(requests, steer, 1)
    assert_once_from(requests, later, first_with(requests, later))
    events = claude.events()
    assert [e["moment"] for e in delivered(events, "sdk-1")] in (["PostToolUse"], ["PreToolUse"])
    assert [(e["moment"], e.get("delivery")) for e in delivered(events, "sdk-2")] == [("Stop", "follow_up")]
    no_failures(events)
