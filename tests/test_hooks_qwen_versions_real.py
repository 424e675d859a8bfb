"""The older Qwen Code rows of the version table, run with the real CLIs (scripts/clients.txt).

``tests/test_hooks_qwen_real.py`` runs the newest verified version (0.24.4) in depth. Here each
older row is run at the version it is verified with: 0.21.2 (the oldest release with
``PostToolBatch``; timeouts in milliseconds) and 0.23.4 (the first to read timeouts in seconds).
For each, ``hooks install`` detects the version and writes that row, Qwen Code runs it without
a warning about the hooks, an instruction queued mid-run reaches the next model request once at
``PostToolBatch``, and a follow-up rides the ``Stop`` block decision into one more turn.
"""

from __future__ import annotations

import json
import pathlib
import uuid
from typing import Any

import pytest

from fake_openai import FakeOpenAI, Turn
from real_clients import npm_bin
from test_hooks_qwen_real import Qwen, delivered, failures, reached_once_at, shell

pytestmark = pytest.mark.real_clients

#: (client name in scripts/clients.txt, its version, the timeout install writes).
OLDER = [("qwen-code-0.21", "0.21.2", 10_000), ("qwen-code-0.23", "0.23.4", 10)]


class OlderQwen(Qwen):
    """``Qwen`` on another installed version of the CLI."""

    def __init__(self, tmp_path: pathlib.Path, fake: FakeOpenAI, client: str) -> None:
        super().__init__(tmp_path, fake)
        self.bin = str(npm_bin(client, "qwen"))
        self.env["LIVE_STEERING_QWEN"] = self.bin


@pytest.mark.parametrize(("client", "version", "timeout"), OLDER)
def test_install_wires_the_row_of_the_installed_version(
    tmp_path: pathlib.Path, client: str, version: str, timeout: int
) -> None:
    """install asks the CLI its version and writes its row: the moments, the timeout in its unit."""
    with FakeOpenAI() as fake:
        qwen = OlderQwen(tmp_path, fake, client)
        done = qwen.cli("hooks", "install", "qwen-code", "--write", str(qwen.settings), "--store", qwen.store)
    assert done.returncode == 0, done.stderr
    assert f"--version: {version}: wiring" in done.stdout + done.stderr
    assert "than the versions verified" not in done.stdout + done.stderr
    hooks = json.loads(qwen.settings.read_text(encoding="utf-8"))["hooks"]
    assert list(hooks) == ["UserPromptSubmit", "PostToolBatch", "Stop", "SessionEnd"]
    assert {h["hooks"][0]["timeout"] for h in (v[0] for v in hooks.values())} == {timeout}


@pytest.mark.parametrize(("client", "version", "timeout"), OLDER)
def test_mid_run_instruction_and_follow_up_each_reach_the_model_once(
    tmp_path: pathlib.Path, client: str, version: str, timeout: int
) -> None:
    """A steer queued while the model answers with a tool call reaches request 2 at PostToolBatch;
    a follow-up queued then rides Stop's block decision into request 3; each once, delivered once,
    no hook failure, and Qwen Code prints no warning about a hook's timeout."""
    steer = f"STEER-qwen-{version}: use the corrected path"
    follow = f"FOLLOW-qwen-{version}: then update the changelog"
    session = str(uuid.uuid4())
    box: dict[str, Any] = {}

    def on_request(index: int, body: dict[str, Any]) -> None:
        if index == 0:
            qwen: OlderQwen = box["qwen"]
            box["steer"] = qwen.instruct(session, steer, "s-1")
            done = qwen.cli(
                "instruct", session, follow, "--id", "f-1", "--follow-up", "--vendor", "qwen-code",
                "--store", qwen.store, "--json",
            )  # fmt: skip
            box["follow"] = json.loads(done.stdout)

    turns = [shell("echo hi"), Turn("all done"), Turn("changelog updated"), Turn("never asked for")]
    with FakeOpenAI(turns, on_request=on_request) as fake:
        qwen = box["qwen"] = OlderQwen(tmp_path, fake, client)
        qwen.install()
        done = qwen.run("run echo hi", "--session-id", session)
    assert fake.errors == []
    assert box["steer"]["disposition"] == "queued"
    assert (box["follow"]["accepted"], box["follow"]["disposition"]) == (True, "queued")
    assert len(fake.requests) == 3
    reached_once_at(fake, steer, 1)
    reached_once_at(fake, follow, 2)
    assert "changelog updated" in done.stdout
    assert "timeout" not in done.stderr.lower(), done.stderr[-2000:]
    events = qwen.events()
    (steered,) = delivered(events, "s-1")
    assert steered["moment"] == "PostToolBatch"
    (followed,) = delivered(events, "f-1")
    assert (followed["moment"], followed["delivery"]) == ("Stop", "follow_up")
    assert failures(events) == []
