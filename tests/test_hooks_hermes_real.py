"""The Hermes plugin against the real Hermes Agent (0.19.0, scripts/clients.txt) and a loopback fake model.

Hermes runs in its own venv; the plugin is installed the way docs/hooks.md says
(``live-steering hooks install hermes --plugin`` into ``$HERMES_HOME/plugins/live-steering``,
enabled under ``plugins: enabled:`` in ``$HERMES_HOME/config.yaml``), with this checkout's
``live_steering`` importable through ``PYTHONPATH``. The model is ``tests/fake_openai.py``
(chat completions, streaming) as a ``custom`` provider.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
from typing import Any

import pytest

import live_steering
from fake_openai import FakeOpenAI, Turn
from live_steering.hooks import _vendors
from real_clients import VendorUser, pip_bin

pytestmark = pytest.mark.real_clients

BOUND = 240.0
SOURCE = str(pathlib.Path(live_steering.__file__).resolve().parent.parent)


class Hermes(VendorUser):
    bound = BOUND

    def __init__(self, tmp_path: pathlib.Path, fake: FakeOpenAI) -> None:
        hermes_home = tmp_path / "home" / ".hermes-custom"
        super().__init__(
            tmp_path, pip_bin("hermes", "hermes"), {"HERMES_HOME": str(hermes_home), "PYTHONPATH": SOURCE}
        )
        self.hermes_home = hermes_home
        self.hermes_home.mkdir()
        (self.hermes_home / "config.yaml").write_text(
            "model:\n"
            "  provider: custom\n"
            f"  base_url: {fake.base_url}\n"
            f"  default: {fake.model}\n"
            "  api_key: not-a-secret\n"
            "plugins:\n"
            "  enabled: [live-steering]\n",
            encoding="utf-8",
        )

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.vendor(*args, check=check)


def test_a_z_session_is_steered_mid_run_and_its_queue_survives_to_the_resume(tmp_path: pathlib.Path) -> None:
    """Queued during a `hermes -z` turn: not dropped (no finalize); `chat --resume` delivers it once."""
    text = "STEER-hermes: use the corrected path"
    box: dict[str, Any] = {}

    def on_request(index: int, body: dict[str, Any]) -> None:
        if index == 0 and "receipt" not in box:
            hermes = box["hermes"]
            done = hermes.cli(
                "instruct",
                hermes.session(),
                text,
                "--id",
                "mid-1",
                "--vendor",
                "hermes",
                "--store",
                hermes.store,
                "--json",
            )
            box["receipt"] = json.loads(done.stdout)

    with FakeOpenAI([Turn("first answer"), Turn("second answer")], on_request=on_request) as fake:
        hermes = box["hermes"] = Hermes(tmp_path, fake)
        install = hermes.cli("hooks", "install", "hermes", "--plugin", "--store", hermes.store)
        assert str(hermes.hermes_home / "plugins" / "live-steering" / "__init__.py") in install.stdout
        hermes.run("-z", "first turn")
        assert (box["receipt"]["disposition"], box["receipt"]["seen"]) == ("queued", True)
        session = hermes.session()
        assert not any(e["type"] == "x.hermes.session.ended" for e in hermes.events())
        before = len(fake.requests)
        hermes.run("chat", "--resume", session, "-Q", "-q", "second turn")  # `-z --resume` starts anew
    counts = [json.dumps(r, ensure_ascii=False).count(text) for r in fake.requests]
    assert counts[:before] == [0] * before, counts
    assert counts[before] == 1, counts
    events = hermes.events()
    delivered = [e for e in events if e["type"] == "x.hermes.instruction.delivered"]
    assert [(e["command_id"], e["moment"]) for e in delivered] == [("mid-1", "pre_llm_call")]
    assert [e for e in events if str(e["type"]).endswith("hook.failed")] == []
    assert events[-1]["type"] == "x.hermes.session.ended"  # `chat -q` finalizes at its exit
    too_long = hermes.cli(
        "instruct", "another-session", "x" * 12_029, "--vendor", "hermes", "--store", hermes.store, "--json"
    )
    refusal = json.loads(too_long.stdout)
    assert (too_long.returncode, refusal["reason"]) == (1, "invalid-input")
    assert "10,000 characters" in refusal["detail"]


def test_a_mistyped_resume_id_neither_ends_a_session_nor_drops_its_queue(tmp_path: pathlib.Path) -> None:
    """`hermes chat --resume TYPO` says "Session not found" and finalizes TYPO: nothing is dropped."""
    with FakeOpenAI() as fake:
        hermes = Hermes(tmp_path, fake)
        hermes.cli("hooks", "install", "hermes", "--plugin", "--store", hermes.store)
        typo = "20261202_000000_abcdef"
        queued = hermes.instruct(typo, "for later", "t-1")
        assert (queued["disposition"], queued["seen"]) == ("queued", False)
        done = hermes.vendor("chat", "--resume", typo, "-Q", "-q", "hello", check=False)
        assert "Session not found" in done.stdout + done.stderr
    assert fake.requests == []
    assert [e["type"] for e in hermes.events()] == ["control.accepted"]
    again = hermes.instruct(typo, "for later", "t-1")
    assert again["disposition"] == "queued"


def test_a_finalized_session_is_steered_before_the_first_turn_of_its_resume(tmp_path: pathlib.Path) -> None:
    """`hermes chat -q` finalizes at its exit; `instruct --resume` queues for the next run, and
    `hermes chat --resume ID` (no hook fires when it opens) carries it in its first model request."""
    text = "STEER-hermes: start from the notes of the last run"
    with FakeOpenAI([Turn("first answer"), Turn("second answer")]) as fake:
        hermes = Hermes(tmp_path, fake)
        hermes.cli("hooks", "install", "hermes", "--plugin", "--store", hermes.store)
        hermes.run("chat", "-Q", "-q", "first turn")
        session = hermes.session()
        assert hermes.events()[-1]["type"] == "x.hermes.session.ended"
        refused = hermes.cli("instruct", session, text, "--id", "r-1", "--store", hermes.store)
        assert refused.returncode == 1
        assert "refused session-ended" in refused.stdout
        assert "--resume" in refused.stderr
        queued = hermes.cli(
            "instruct", session, text, "--id", "r-2", "--resume", "--store", hermes.store, "--json"
        )
        assert json.loads(queued.stdout)["disposition"] == "queued"
        before = len(fake.requests)
        hermes.run("chat", "--resume", session, "-Q", "-q", "second turn")
    counts = [json.dumps(r, ensure_ascii=False).count(text) for r in fake.requests]
    assert counts[:before] == [0] * before, counts
    assert counts[before] == 1, counts
    assert sum(counts) == 1, counts
    events = hermes.events()
    delivered = [e for e in events if e["type"] == "x.hermes.instruction.delivered"]
    assert [(e["command_id"], e["moment"]) for e in delivered] == [("r-2", "pre_llm_call")]
    assert [e for e in events if str(e["type"]).endswith("hook.failed")] == []


def test_the_relays_hermes_moments_are_the_installed_hermes_valid_hooks(tmp_path: pathlib.Path) -> None:
    """``FACTS['hermes'].known_moments`` is exactly the installed Hermes Agent's own
    ``hermes_cli.plugins.VALID_HOOKS``, read by Hermes's interpreter (its venv): a moment Hermes
    adds or drops in a new release fails here, not as a ``hook.failed`` in a user's store."""
    python = pip_bin("hermes", "python")
    home = tmp_path / "hermes-home"
    read = "import json; from hermes_cli.plugins import VALID_HOOKS; print(json.dumps(sorted(VALID_HOOKS)))"
    done = subprocess.run(
        [str(python), "-c", read],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "HERMES_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(json.loads(done.stdout)) == _vendors.FACTS["hermes"].known_moments


def test_shell_hooks_in_a_four_space_config_run_and_uninstall_gives_the_file_back(
    tmp_path: pathlib.Path,
) -> None:
    """A ``config.yaml`` indented with four spaces (its own ``hooks:`` section too): `hooks install
    hermes --write` keeps it valid YAML for the real Hermes (its model settings still reach the
    fake; a parse failure would fall back to the default provider), our shell hooks run, and
    `hooks uninstall hermes` gives back the file byte for byte; the next run runs none of ours."""
    with FakeOpenAI([Turn("first answer"), Turn("second answer")]) as fake:
        hermes = Hermes(tmp_path, fake)
        hermes.env["HERMES_ACCEPT_HOOKS"] = "1"  # Hermes asks once per shell hook command otherwise
        config = hermes.hermes_home / "config.yaml"
        user = (
            "model:\n"
            "    provider: custom\n"
            f"    base_url: {fake.base_url}\n"
            f"    default: {fake.model}\n"
            "    api_key: not-a-secret\n"
            "hooks:\n"
            "    output_spill:\n"
            "        max_chars: 20000\n"
        )
        config.write_text(user, encoding="utf-8")
        hermes.cli("hooks", "install", "hermes", "--write", "--store", hermes.store)
        hermes.run("-z", "first turn", check=False)
        assert len(fake.requests) == 1  # the file parsed: its custom provider was used
        assert "    pre_llm_call:\n      - command: " in config.read_text(encoding="utf-8")
        seen = [e["type"] for e in hermes.events()]
        assert "x.hermes.session.seen" in seen
        assert [t for t in seen if t.endswith("hook.failed")] == []
        hermes.cli("hooks", "uninstall", "hermes")
        assert config.read_text(encoding="utf-8") == user
        before = hermes.events()
        hermes.run("-z", "second turn")
        assert len(fake.requests) == 2
    assert hermes.events() == before
