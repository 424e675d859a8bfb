"""The hook relay against the real Qwen Code CLI (0.24.4, scripts/clients.txt) and a loopback fake model.

Each test gives Qwen Code an isolated ``HOME`` in ``tmp_path`` (``~/.qwen/settings.json`` selects
the OpenAI auth type; ``OPENAI_BASE_URL`` points at ``tests/fake_openai.py``, chat completions,
streaming), wires the hooks with ``live-steering hooks install qwen-code --write``, and runs
``qwen -p ... --yolo``. The assertions read the fake server's request log.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import uuid
from typing import Any

import pytest

from fake_openai import FakeOpenAI, Turn
from live_steering.hooks import _vendors
from real_clients import TOKEN, TOKEN_ENV, VendorUser, npm_bin, running_serve

pytestmark = pytest.mark.real_clients

BOUND = 150.0
#: Every moment Qwen Code 0.24.4 has (``HookEventName`` in its bundled core).
ALL_MOMENTS = (
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "Notification",
    "UserPromptSubmit",
    "UserPromptExpansion",
    "SessionStart",
    "Stop",
    "MessageDisplay",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
    "PostCompact",
    "SessionEnd",
    "SessionDelete",
    "PermissionRequest",
    "PermissionDenied",
    "StopFailure",
    "TodoCreated",
    "TodoCompleted",
    "InstructionsLoaded",
)


class Qwen(VendorUser):
    """One isolated Qwen Code user: its home, its store, the fake model it talks to."""

    bound = BOUND

    def __init__(self, tmp_path: pathlib.Path, fake: FakeOpenAI) -> None:
        qwen = npm_bin("qwen-code", "qwen")
        super().__init__(
            tmp_path,
            qwen,
            {
                "OPENAI_API_KEY": "not-a-secret",
                "OPENAI_BASE_URL": fake.base_url,
                "OPENAI_MODEL": fake.model,
                "LIVE_STEERING_QWEN": str(qwen),
                "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
            },
        )
        self.settings = self.home / ".qwen" / "settings.json"
        self.settings.parent.mkdir(parents=True)
        self.settings.write_text(
            json.dumps({"security": {"auth": {"selectedType": "openai"}}, "model": {"name": fake.model}}),
            encoding="utf-8",
        )
        self.fake = fake

    def install(self) -> None:
        done = self.cli("hooks", "install", "qwen-code", "--write", str(self.settings), "--store", self.store)
        assert done.returncode == 0, done.stderr

    def wire_every_moment(self) -> None:
        """Our hook at all 22 moments (what a user who wires everything gets)."""
        config = json.loads(self.settings.read_text(encoding="utf-8"))
        (entry,) = config["hooks"]["PostToolBatch"]
        config["hooks"] = {m: [entry] for m in ALL_MOMENTS}
        self.settings.write_text(json.dumps(config), encoding="utf-8")

    def run(self, prompt: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.vendor("-p", prompt, "--yolo", *extra)

    def instruct(self, session: str, text: str, command_id: str, *extra: str) -> dict[str, Any]:
        return super().instruct(session, text, command_id, "--vendor", "qwen-code", *extra)


def in_request(fake: FakeOpenAI, index: int, text: str) -> int:
    return json.dumps(fake.requests[index], ensure_ascii=False).count(text)


def reached_once_at(fake: FakeOpenAI, text: str, index: int) -> None:
    """``text`` first reaches model request ``index``, once; later requests carry it at most once
    (the conversation so far, resent), never a second copy."""
    counts = [in_request(fake, i, text) for i in range(len(fake.requests))]
    assert counts[:index] == [0] * index, counts
    assert counts[index] == 1, counts
    assert all(n <= 1 for n in counts[index:]), counts


def delivered(events: list[dict[str, Any]], command_id: str) -> list[dict[str, Any]]:
    kind = "x.qwen-code.instruction.delivered"
    return [e for e in events if e["type"] == kind and e["command_id"] == command_id]


def failures(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if str(e["type"]).endswith("hook.failed")]


def shell(command: str) -> Turn:
    return Turn(tool="run_shell_command", arguments={"command": command, "description": "run it"})


def test_install_wires_only_what_0_24_4_needs_in_seconds(tmp_path: pathlib.Path) -> None:
    """install detects 0.24.4 (`qwen --version`): UserPromptSubmit, PostToolBatch, Stop, SessionEnd; 10 s."""
    with FakeOpenAI() as fake:
        qwen = Qwen(tmp_path, fake)
        qwen.install()
    hooks = json.loads(qwen.settings.read_text(encoding="utf-8"))["hooks"]
    assert list(hooks) == ["UserPromptSubmit", "PostToolBatch", "Stop", "SessionEnd"]
    assert {h["hooks"][0]["timeout"] for h in (v[0] for v in hooks.values())} == {10}


def test_instruction_queued_mid_run_reaches_the_next_request_once_at_post_tool_batch(
    tmp_path: pathlib.Path,
) -> None:
    """Queued while the model answers with a tool call: PostToolBatch carries it into request 2, once."""
    text = "STEER-qwen-posttoolbatch: use the corrected path"
    session = str(uuid.uuid4())
    box: dict[str, Any] = {}

    def on_request(index: int, body: dict[str, Any]) -> None:
        if index == 0:
            box["receipt"] = box["qwen"].instruct(session, text, "mid-1")

    with FakeOpenAI([shell("echo hi"), Turn("all done")], on_request=on_request) as fake:
        qwen = box["qwen"] = Qwen(tmp_path, fake)
        qwen.install()
        qwen.run("run echo hi", "--session-id", session)
    assert fake.errors == []
    assert (box["receipt"]["disposition"], box["receipt"]["seen"]) == ("queued", True)
    reached_once_at(fake, text, 1)
    events = qwen.events()
    (event,) = delivered(events, "mid-1")
    assert event["moment"] == "PostToolBatch"
    assert failures(events) == []


def test_settings_with_comments_run_the_hooks_and_doctor_reads_them(tmp_path: pathlib.Path) -> None:
    """Qwen Code reads a settings file with ``//`` and ``/* */`` comments: the hooks written into
    it still run and deliver (so doctor, which reads it the same way, passes it), and a second
    `install --write` refuses it in one line instead of dropping the comments."""
    text = "STEER-qwen-commented: use the corrected path"
    session = str(uuid.uuid4())
    box: dict[str, Any] = {}

    def on_request(index: int, body: dict[str, Any]) -> None:
        if index == 0:
            box["receipt"] = box["qwen"].instruct(session, text, "mid-c")

    with FakeOpenAI([shell("echo hi"), Turn("all done")], on_request=on_request) as fake:
        qwen = box["qwen"] = Qwen(tmp_path, fake)
        qwen.install()
        wired = qwen.settings.read_text(encoding="utf-8")
        qwen.settings.write_text(
            wired.replace("{", "{\n  // wired by live-steering\n  /* keep this */", 1), encoding="utf-8"
        )
        doctor = qwen.cli("hooks", "doctor", "qwen-code")
        assert f"ok    config: {qwen.settings} wires" in doctor.stdout, doctor.stdout
        again = qwen.cli(
            "hooks", "install", "qwen-code", "--write", str(qwen.settings), "--store", qwen.store
        )
        assert again.returncode == 1
        assert "has comments" in again.stderr
        qwen.run("run echo hi", "--session-id", session)
    assert fake.errors == []
    reached_once_at(fake, text, 1)
    events = qwen.events()
    (event,) = delivered(events, "mid-c")
    assert event["moment"] == "PostToolBatch"
    assert failures(events) == []


def test_http_hooks_through_a_running_server_deliver_mid_run_once(tmp_path: pathlib.Path) -> None:
    """``hooks install qwen-code --http URL --token-env VAR`` against a running ``live-steering serve
    --token-env VAR``: Qwen Code POSTs each hook with the bearer token; an instruction queued while
    the model answers with a tool call reaches request 2 once (PostToolBatch), delivered once."""
    text = "STEER-qwen-http: use the corrected path"
    session = str(uuid.uuid4())
    box: dict[str, Any] = {}

    def on_request(index: int, body: dict[str, Any]) -> None:
        if index == 0:
            box["receipt"] = box["qwen"].instruct(session, text, "http-1")

    with FakeOpenAI([shell("echo hi"), Turn("all done")], on_request=on_request) as fake:
        qwen = box["qwen"] = Qwen(tmp_path, fake)
        qwen.env[TOKEN_ENV] = TOKEN
        with running_serve(qwen.store, BOUND + 60) as url:
            done = qwen.cli(
                "hooks",
                "install",
                "qwen-code",
                "--write",
                str(qwen.settings),
                "--http",
                url,
                "--token-env",
                TOKEN_ENV,
            )
            assert done.returncode == 0, done.stderr
            (group,) = json.loads(qwen.settings.read_text(encoding="utf-8"))["hooks"]["PostToolBatch"]
            (entry,) = group["hooks"]
            assert (entry["type"], entry["url"]) == ("http", f"{url}/v1/hooks/qwen-code")
            qwen.run("run echo hi", "--session-id", session)
    assert fake.errors == []
    assert (box["receipt"]["disposition"], box["receipt"]["seen"]) == ("queued", True)
    reached_once_at(fake, text, 1)
    events = qwen.events()
    (event,) = delivered(events, "http-1")
    assert event["moment"] == "PostToolBatch"
    assert failures(events) == []


def test_a_failed_tool_call_still_carries_it(tmp_path: pathlib.Path) -> None:
    """A refused tool call fires neither PostToolUse nor PostToolUseFailure, but PostToolBatch: delivered."""
    text = "STEER-qwen-failed-tool: the file moved"
    session = str(uuid.uuid4())
    box: dict[str, Any] = {}

    def on_request(index: int, body: dict[str, Any]) -> None:
        if index == 0:
            box["qwen"].instruct(session, text, "fail-1")

    script = [Turn(tool="read_file", arguments={"absolute_path": "/nonexistent/nope.txt"}), Turn("ok")]
    with FakeOpenAI(script, on_request=on_request) as fake:
        qwen = box["qwen"] = Qwen(tmp_path, fake)
        qwen.install()
        qwen.run("read the file", "--session-id", session)
    reached_once_at(fake, text, 1)
    (event,) = delivered(qwen.events(), "fail-1")
    assert event["moment"] == "PostToolBatch"


def test_unseen_session_id_is_accepted_and_delivered_at_user_prompt_submit(tmp_path: pathlib.Path) -> None:
    """A host that picks the id (`--session-id`) instructs before the start: seen false, then delivered."""
    text = "STEER-qwen-userpromptsubmit: answer in French"
    session = str(uuid.uuid4())
    with FakeOpenAI([Turn("bonjour")]) as fake:
        qwen = Qwen(tmp_path, fake)
        qwen.install()
        receipt = qwen.instruct(session, text, "early-1")
        assert (receipt["accepted"], receipt["seen"]) == (True, False)
        qwen.run("say hello", "--session-id", session)
    reached_once_at(fake, text, 0)
    (event,) = delivered(qwen.events(), "early-1")
    assert event["moment"] == "UserPromptSubmit"


def test_a_p_run_fires_no_session_end_and_its_queue_waits_for_the_resume(tmp_path: pathlib.Path) -> None:
    """`qwen -p` ends without SessionEnd: what is queued after it waits, then `--resume` delivers it."""
    text = "STEER-qwen-after-exit: pick up where you left off"
    session = str(uuid.uuid4())
    with FakeOpenAI([Turn("first"), Turn("second")]) as fake:
        qwen = Qwen(tmp_path, fake)
        qwen.install()
        qwen.run("first turn", "--session-id", session)
        assert not any(e["type"] == "x.qwen-code.session.ended" for e in qwen.events())
        receipt = qwen.instruct(session, text, "later-1")
        assert (receipt["disposition"], receipt["seen"]) == ("queued", True)
        before = len(fake.requests)
        qwen.run("second turn", "--resume", session)
    reached_once_at(fake, text, before)
    (event,) = delivered(qwen.events(), "later-1")
    assert event["moment"] == "UserPromptSubmit"


def test_every_moment_wired_is_known_and_delivers_once(tmp_path: pathlib.Path) -> None:
    """All 22 moments wired: no hook.failed, PreToolUse (its context dropped) never claims, one delivery."""
    text = "STEER-qwen-every-moment"
    session = str(uuid.uuid4())
    box: dict[str, Any] = {}

    def on_request(index: int, body: dict[str, Any]) -> None:
        if index == 0:
            box["qwen"].instruct(session, text, "all-1")

    with FakeOpenAI([shell("echo hi"), Turn("all done")], on_request=on_request) as fake:
        qwen = box["qwen"] = Qwen(tmp_path, fake)
        qwen.install()
        qwen.wire_every_moment()
        qwen.run("run echo hi", "--session-id", session)
    events = qwen.events()
    assert failures(events) == []
    assert set(ALL_MOMENTS) <= _vendors.FACTS["qwen-code"].known_moments
    (event,) = delivered(events, "all-1")
    assert event["moment"] in ("PostToolUse", "PostToolBatch")
    reached_once_at(fake, text, 1)


def test_interactive_quit_fires_session_end_and_drops_what_is_queued(tmp_path: pathlib.Path) -> None:
    """Interactive `qwen -i` on a pty: `/quit` fires SessionEnd; what is queued is dropped, once
    (Stop not wired, as a config written before Stop carried instructions: wired, it would carry
    this steer into one more turn)."""
    import pty
    import select
    import signal
    import time

    text = "STEER-qwen-interactive-too-late"
    session = str(uuid.uuid4())
    box: dict[str, Any] = {}

    def on_request(index: int, body: dict[str, Any]) -> None:
        if index == 0:
            box["qwen"].instruct(session, text, "quit-1")

    with FakeOpenAI([Turn("hello from the fake")], on_request=on_request) as fake:
        qwen = box["qwen"] = Qwen(tmp_path, fake)
        qwen.install()
        config = json.loads(qwen.settings.read_text(encoding="utf-8"))
        del config["hooks"]["Stop"]
        qwen.settings.write_text(json.dumps(config), encoding="utf-8")
        env = {**qwen.env, "TERM": "xterm-256color"}
        pid, fd = pty.fork()
        if pid == 0:  # the child: Qwen Code's interactive UI on the pty
            os.chdir(qwen.work)
            os.execve(qwen.bin, [qwen.bin, "-i", "say hi", "--yolo", "--session-id", session], env)
        screen = b""
        try:
            deadline = time.monotonic() + BOUND
            typed = quit_sent = False
            seen_at = 0
            while time.monotonic() < deadline:
                if select.select([fd], [], [], 0.2)[0]:
                    try:
                        screen += os.read(fd, 1 << 16)
                    except OSError:
                        break
                if not typed and b"hello from the fake" in screen:
                    os.write(fd, b"/quit")
                    typed, seen_at = True, len(screen)
                if typed and not quit_sent and b"/quit" in screen[seen_at:]:  # echoed: now its Enter
                    os.write(fd, b"\r")
                    quit_sent = True
                if quit_sent and any(e["type"] == "x.qwen-code.session.ended" for e in qwen.events()):
                    break
        finally:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(fd)
    events = qwen.events()
    dropped = [e for e in events if e["type"] == "x.qwen-code.instruction.dropped"]
    assert [(e["command_id"], e["reason"], e["moment"]) for e in dropped] == [
        ("quit-1", "session-ended", "SessionEnd")
    ]
    assert fake.count(text) == 0
    assert failures(events) == []


def test_a_follow_up_rides_the_stop_block_decision_into_one_more_turn_once(tmp_path: pathlib.Path) -> None:
    """``instruct --follow-up`` queued mid-run: the tool round passes it by; Qwen Code's Stop replies
    ``{"decision": "block", "reason"}``, ``qwen -p`` runs one more model turn with it, and the next
    Stop (``stop_hook_active``) ends the run; the events say ``delivered``, ``delivery: "follow_up"``."""
    text = "FOLLOW-qwen-stop: then update the changelog"
    session = str(uuid.uuid4())
    box: dict[str, Any] = {}

    def on_request(index: int, body: dict[str, Any]) -> None:
        if index == 0:
            done = box["qwen"].cli(
                "instruct",
                session,
                text,
                "--id",
                "fu-1",
                "--follow-up",
                "--vendor",
                "qwen-code",
                "--store",
                box["qwen"].store,
                "--json",
            )
            box["receipt"] = json.loads(done.stdout)

    turns = [shell("echo hi"), Turn("all done"), Turn("changelog updated"), Turn("never asked for")]
    with FakeOpenAI(turns, on_request=on_request) as fake:
        qwen = box["qwen"] = Qwen(tmp_path, fake)
        qwen.install()
        done = qwen.run("run echo hi", "--session-id", session)
    assert fake.errors == []
    assert (box["receipt"]["accepted"], box["receipt"]["disposition"]) == (True, "queued")
    assert len(fake.requests) == 3
    reached_once_at(fake, text, 2)
    assert "changelog updated" in done.stdout
    events = qwen.events()
    (event,) = delivered(events, "fu-1")
    assert (event["moment"], event["delivery"]) == ("Stop", "follow_up")
    assert failures(events) == []
