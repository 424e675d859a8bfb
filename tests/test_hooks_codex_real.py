"""The hook relay against the real Codex CLI (0.171.0, scripts/clients.txt) and a loopback fake model.

Each test gives Codex an isolated ``CODEX_HOME`` in ``tmp_path`` whose ``config.toml`` points a
custom provider (the Responses API, ``wire_api = "responses"``) at ``tests/fake_openai.py``,
wires the hooks with ``live-steering hooks install codex --write``, trusts them the way Codex
persists trust (``[hooks.state."KEY"] trusted_hash``, the hash read from the app-server's
``hooks/list``), and runs ``codex exec``. The assertions read the fake server's request log:
an instruction queued while the agent runs reaches the next model request, once, at the moment
the relay wired, and the audit stream says ``delivered`` once.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from fake_openai import FakeOpenAI, Turn
from live_steering.hooks._codex import hooks_list, toml_string
from real_clients import CLI, VendorUser, npm_bin

pytestmark = pytest.mark.real_clients


class Codex(VendorUser):
    """One isolated Codex installation: its home, its store, the fake model it talks to."""

    def __init__(self, tmp_path: pathlib.Path, fake: FakeOpenAI) -> None:
        codex = npm_bin("codex", "codex")
        super().__init__(
            tmp_path,
            codex,
            {
                "CODEX_HOME": str(tmp_path / "home" / ".codex"),
                "FAKE_OPENAI_KEY": "not-a-secret",
                "LIVE_STEERING_CODEX": str(codex),
            },
        )
        self.codex_home = self.home / ".codex"
        self.codex_home.mkdir()
        self.fake = fake
        (self.codex_home / "config.toml").write_text(
            'model = "fake-model"\n'
            'model_provider = "fake"\n'
            'approval_policy = "never"\n'
            'sandbox_mode = "danger-full-access"\n'
            "[model_providers.fake]\n"
            'name = "fake"\n'
            f'base_url = "{fake.base_url}"\n'
            'wire_api = "responses"\n'
            'env_key = "FAKE_OPENAI_KEY"\n',
            encoding="utf-8",
        )

    def install(self) -> str:
        """``hooks install codex --write`` (the real install path); returns what it printed."""
        done = self.cli(
            "hooks", "install", "codex", "--write", str(self.codex_home / "hooks.json"), "--store", self.store
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def add_user_hook(self, event: str, command: str) -> None:
        """A hook of the user's own beside ours (Codex runs both)."""
        path = self.codex_home / "hooks.json"
        config = json.loads(path.read_text(encoding="utf-8"))
        config["hooks"].setdefault(event, []).append(
            {"hooks": [{"type": "command", "command": command, "timeout": 30}]}
        )
        path.write_text(json.dumps(config, indent=2), encoding="utf-8")

    def trust(self) -> None:
        trust_hooks(self.bin, env=self.env, cwd=str(self.work))

    def exec(self, prompt: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.vendor("exec", "--skip-git-repo-check", "-C", str(self.work), *extra, prompt)


def trust_hooks(codex: str, *, env: dict[str, str], cwd: str) -> None:
    """Trust every hook as Codex persists it (what "Trust all and continue" writes): one
    ``[hooks.state."KEY"] trusted_hash`` table per hook, the hash as ``hooks/list`` reports it."""
    lines = []
    for hook in hooks_list(codex, env=env, cwd=cwd):
        lines += [
            "",
            f"[hooks.state.{toml_string(hook['key'])}]",
            f"trusted_hash = {toml_string(hook['currentHash'])}",
        ]
    config = pathlib.Path(env["CODEX_HOME"]) / "config.toml"
    with config.open("a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def in_request(fake: FakeOpenAI, index: int, text: str) -> int:
    """How many times ``text`` occurs in model request ``index``."""
    return json.dumps(fake.requests[index], ensure_ascii=False).count(text)


def delivered(events: list[dict[str, Any]], command_id: str) -> list[dict[str, Any]]:
    return [
        e for e in events if e["type"] == "x.codex.instruction.delivered" and e["command_id"] == command_id
    ]


def shell(command: str) -> Turn:
    """The model asks Codex 0.171.0's shell tool (``exec_command``) to run ``command``."""
    return Turn(tool="exec_command", arguments={"cmd": command})


def test_install_prints_the_trust_step_and_untrusted_hooks_never_run(tmp_path: pathlib.Path) -> None:
    """Codex skips untrusted hooks silently in `codex exec`: install says how to trust; trusted, they run."""
    with FakeOpenAI([Turn("hello")]) as fake:
        codex = Codex(tmp_path, fake)
        printed = codex.install()
        assert "trust" in printed
        assert "/hooks" in printed
        assert {h["trustStatus"] for h in hooks_list(codex.bin, env=codex.env, cwd=str(codex.work))} == {
            "untrusted"
        }
        codex.exec("say hello")
        assert codex.events() == []  # not one hook process ran
        doctor = codex.cli("hooks", "doctor", "codex", check=False)
        assert doctor.returncode == 1
        assert "untrusted" in doctor.stdout
        codex.trust()
        assert {h["trustStatus"] for h in hooks_list(codex.bin, env=codex.env, cwd=str(codex.work))} == {
            "trusted"
        }
        codex.exec("say hello again")
        types = [e["type"] for e in codex.events()]
        assert "x.codex.session.seen" in types
        assert "x.codex.session.ended" in types
        doctor = codex.cli("hooks", "doctor", "codex", check=False)
        assert doctor.returncode == 0, doctor.stdout


def test_instruction_queued_mid_run_reaches_the_next_request_once_at_post_tool_use(
    tmp_path: pathlib.Path,
) -> None:
    """Queued while the model answers with a tool call: PostToolUse carries it into request 2, once."""
    text = "STEER-codex-posttooluse: use the corrected path"
    box: dict[str, Any] = {}

    def on_request(index: int, body: dict[str, Any]) -> None:
        if index == 0:  # the agent is mid-turn: the model is about to ask for a tool
            box["receipt"] = json.loads(
                box["codex"]
                .cli(
                    "instruct",
                    box["codex"].session(),
                    text,
                    "--id",
                    "mid-1",
                    "--vendor",
                    "codex",
                    "--store",
                    box["codex"].store,
                    "--json",
                )
                .stdout
            )

    with FakeOpenAI([shell("echo hi"), Turn("all done")], on_request=on_request) as fake:
        codex = box["codex"] = Codex(tmp_path, fake)
        codex.install()
        codex.trust()
        codex.exec("run echo hi")
    assert fake.errors == []
    assert (box["receipt"]["disposition"], box["receipt"]["seen"]) == ("queued", True)
    assert len(fake.requests) == 2
    assert (in_request(fake, 0, text), in_request(fake, 1, text)) == (0, 1)
    events = codex.events()
    (event,) = delivered(events, "mid-1")
    assert event["moment"] == "PostToolUse"
    assert [e["type"] for e in events if e.get("command_id") == "mid-1"] == [
        "control.accepted",
        "x.codex.instruction.delivering",
        "x.codex.instruction.delivered",
    ]


def test_instruction_to_an_unseen_session_is_accepted_and_rides_user_prompt_submit(
    tmp_path: pathlib.Path,
) -> None:
    """Queued (seen: false) by a hook of the user's at SessionStart: UserPromptSubmit carries it in."""
    text = "STEER-codex-userpromptsubmit: answer in French"
    queue = tmp_path / "queue.py"
    receipt = tmp_path / "receipt.json"
    queue.write_text(
        "import json, subprocess, sys\n"
        "session = json.load(sys.stdin)['session_id']\n"
        f"done = subprocess.run({CLI!r} + ['instruct', session, {text!r}, '--id', 'ups-1',"
        " '--vendor', 'codex',"
        " '--store', sys.argv[1], '--json'], capture_output=True, text=True)\n"
        f"open({str(receipt)!r}, 'w').write(done.stdout)\n",
        encoding="utf-8",
    )
    with FakeOpenAI([Turn("bonjour")]) as fake:
        codex = Codex(tmp_path, fake)
        codex.install()
        codex.add_user_hook("SessionStart", f"{sys.executable} {queue} {codex.store}")
        codex.trust()
        codex.exec("say hello")
    answer = json.loads(receipt.read_text(encoding="utf-8"))
    assert (answer["accepted"], answer["disposition"], answer["seen"]) == (True, "queued", False)
    counts = [in_request(fake, i, text) for i in range(len(fake.requests))]
    assert counts[0] == 1, counts
    assert all(n <= 1 for n in counts), counts
    (event,) = delivered(codex.events(), "ups-1")
    assert event["moment"] == "UserPromptSubmit"


def test_session_end_drops_what_is_still_queued_and_refuses_later_instructions(
    tmp_path: pathlib.Path,
) -> None:
    """Queued at the last model request with Stop not wired (a config written before Stop carried
    instructions; wired, Stop would carry it into one more turn): SessionEnd drops it (audited);
    instruct then refuses."""
    text = "STEER-codex-too-late"
    box: dict[str, Any] = {}

    def on_request(index: int, body: dict[str, Any]) -> None:
        if index == 0:
            box["codex"].cli(
                "instruct", box["codex"].session(), text, "--id", "late-1", "--store", box["codex"].store
            )

    with FakeOpenAI([Turn("done already")], on_request=on_request) as fake:
        codex = box["codex"] = Codex(tmp_path, fake)
        codex.install()
        path = codex.codex_home / "hooks.json"
        config = json.loads(path.read_text(encoding="utf-8"))
        del config["hooks"]["Stop"]
        path.write_text(json.dumps(config), encoding="utf-8")
        codex.trust()
        codex.exec("say hello")
    assert fake.count(text) == 0
    events = codex.events()
    dropped = [e for e in events if e["type"] == "x.codex.instruction.dropped"]
    assert [(e["command_id"], e["reason"], e["moment"]) for e in dropped] == [
        ("late-1", "session-ended", "SessionEnd")
    ]
    session = codex.session()
    after = codex.cli("instruct", session, "after the end", "--store", codex.store, "--json")
    assert (after.returncode, json.loads(after.stdout)["reason"]) == (1, "session-ended")
    typo = codex.cli("instruct", session[:-1] + "x", "hello?", "--store", codex.store, "--json")
    assert (typo.returncode, json.loads(typo.stdout)["seen"]) == (0, False)
    strict = codex.cli("instruct", session[:-1] + "y", "hello?", "--store", codex.store, "--require-seen")
    assert strict.returncode == 1
    assert all(e["type"] != "hook.failed" and not e["type"].endswith(".hook.failed") for e in events)


#: Every event name Codex 0.171.0 fires (its app-server protocol's ``HookEventName``).
ALL_MOMENTS = (
    "SessionStart",
    "SessionEnd",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PermissionRequest",
    "PreCompact",
    "PostCompact",
    "Stop",
    "SubagentStart",
    "SubagentStop",
    "Interrupt",
    "PreModelRequest",
    "PostModelRequest",
)


def test_every_moment_wired_is_known_and_delivers_once(tmp_path: pathlib.Path) -> None:
    """All 14 event names wired: no hook.failed; queued mid-run, delivered once, at PreToolUse."""
    text = "STEER-codex-every-moment"
    box: dict[str, Any] = {}

    def on_request(index: int, body: dict[str, Any]) -> None:
        if index == 0:
            box["codex"].cli(
                "instruct", box["codex"].session(), text, "--id", "all-1", "--store", box["codex"].store
            )

    with FakeOpenAI([shell("echo hi"), Turn("all done")], on_request=on_request) as fake:
        codex = box["codex"] = Codex(tmp_path, fake)
        codex.install()
        path = codex.codex_home / "hooks.json"
        config = json.loads(path.read_text(encoding="utf-8"))
        (entry,) = config["hooks"]["PostToolUse"]
        config["hooks"] = {m: [entry] for m in ALL_MOMENTS}
        path.write_text(json.dumps(config), encoding="utf-8")
        codex.trust()
        codex.exec("run echo hi")
    events = codex.events()
    assert [e for e in events if str(e["type"]).endswith("hook.failed")] == []
    (event,) = delivered(events, "all-1")
    assert event["moment"] == "PreToolUse"
    assert [in_request(fake, i, text) for i in range(len(fake.requests))] == [0, 1]


def test_a_follow_up_rides_the_stop_block_decision_into_one_more_turn_once(tmp_path: pathlib.Path) -> None:
    """``instruct --follow-up`` queued mid-run: the tool round passes it by; Codex's Stop replies
    ``{"decision": "block", "reason"}``, Codex runs one more model turn with it, and the next
    Stop (``stop_hook_active``) ends the run; the events say ``delivered``, ``delivery: "follow_up"``."""
    text = "FOLLOW-codex-stop: then update the changelog"
    box: dict[str, Any] = {}

    def on_request(index: int, body: dict[str, Any]) -> None:
        if index == 0:  # the agent is mid-turn: the model is about to ask for a tool
            box["receipt"] = json.loads(
                box["codex"]
                .cli(
                    "instruct",
                    box["codex"].session(),
                    text,
                    "--id",
                    "fu-1",
                    "--follow-up",
                    "--vendor",
                    "codex",
                    "--store",
                    box["codex"].store,
                    "--json",
                )
                .stdout
            )

    turns = [shell("echo hi"), Turn("all done"), Turn("changelog updated"), Turn("never asked for")]
    with FakeOpenAI(turns, on_request=on_request) as fake:
        codex = box["codex"] = Codex(tmp_path, fake)
        codex.install()
        wired = json.loads((codex.codex_home / "hooks.json").read_text(encoding="utf-8"))["hooks"]
        assert "Stop" in wired
        codex.trust()
        done = codex.exec("run echo hi")
    assert fake.errors == []
    assert (box["receipt"]["accepted"], box["receipt"]["disposition"]) == (True, "queued")
    # the tool round's request does not carry it; the turn after the first stop does, once
    assert len(fake.requests) == 3
    assert [in_request(fake, i, text) for i in range(3)] == [0, 0, 1]
    assert "changelog updated" in done.stdout
    events = codex.events()
    (event,) = delivered(events, "fu-1")
    assert (event["moment"], event["delivery"]) == ("Stop", "follow_up")
    assert [e["type"] for e in events if e.get("command_id") == "fu-1"] == [
        "control.accepted",
        "x.codex.instruction.delivering",
        "x.codex.instruction.delivered",
    ]
    assert [e for e in events if str(e["type"]).endswith("hook.failed")] == []


def test_a_steer_queued_at_the_last_request_rides_stop_into_one_more_turn(tmp_path: pathlib.Path) -> None:
    """Stop wired: a steer queued while the model gives its final answer is not dropped at
    SessionEnd but carried by Stop's block decision into one more turn, once."""
    text = "STEER-codex-at-stop"
    box: dict[str, Any] = {}

    def on_request(index: int, body: dict[str, Any]) -> None:
        if index == 0:
            box["codex"].cli(
                "instruct", box["codex"].session(), text, "--id", "stop-1", "--store", box["codex"].store
            )

    with FakeOpenAI([Turn("done already"), Turn("done again"), Turn("never")], on_request=on_request) as fake:
        codex = box["codex"] = Codex(tmp_path, fake)
        codex.install()
        codex.trust()
        codex.exec("say hello")
    assert [in_request(fake, i, text) for i in range(len(fake.requests))] == [0, 1]
    events = codex.events()
    (event,) = delivered(events, "stop-1")
    assert event["moment"] == "Stop"
    assert "delivery" not in event
    assert [e for e in events if e["type"] == "x.codex.instruction.dropped"] == []


def test_two_instructions_over_codexs_10000_byte_cap_ride_apart_and_arrive_whole(
    tmp_path: pathlib.Path,
) -> None:
    """Codex 0.171.0 cuts additionalContext over 10,000 UTF-8 bytes ("...N tokens truncated...").
    Two queued 6,000-byte instructions would be cut if joined: the relay sends the first at
    UserPromptSubmit and the second at PostToolUse, and the model gets each whole, once."""
    texts = ["CAP-ONE:" + "\u00e9" * 2_996, "CAP-TWO:" + "\u00e9" * 2_996]
    queue = tmp_path / "queue.py"
    queue.write_text(
        "import json, subprocess, sys\n"
        "session = json.load(sys.stdin)['session_id']\n"
        f"for n, text in enumerate({texts!r}):\n"
        f"    subprocess.run({CLI!r} + ['instruct', session, text, '--id', f'cap-{{n}}',"
        " '--vendor', 'codex', '--store', sys.argv[1]], capture_output=True, check=True)\n",
        encoding="utf-8",
    )
    with FakeOpenAI([shell("true"), Turn("done")]) as fake:
        codex = Codex(tmp_path, fake)
        codex.install()
        codex.add_user_hook("SessionStart", f"{sys.executable} {queue} {codex.store}")
        codex.trust()
        codex.exec("run true")
    requests = [json.dumps(r, ensure_ascii=False) for r in fake.requests]
    assert "tokens truncated" not in requests[-1]
    for text in texts:
        assert len(text.encode()) == 6_000
        assert requests[-1].count(text) == 1, [r.count(text[:8]) for r in requests]
    events = codex.events()
    assert [e["moment"] for e in delivered(events, "cap-0")] == ["UserPromptSubmit"]
    assert [e["moment"] for e in delivered(events, "cap-1")] == ["PostToolUse"]
