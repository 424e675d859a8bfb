"""docs/http.md's curl commands run as written against `live-steering serve` and a fleet worker,
and print what the page says they print."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from process_helpers import stopped

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "http.md"
TOKEN = "change-me"


def _blocks() -> tuple[list[str], list[str]]:
    text = PAGE.read_text(encoding="utf-8")
    match = re.search(
        r"<!-- tested: curl -->\n```bash\n(.*?)```\n\nThey print.*?```text\n(.*?)```", text, re.S
    )
    assert match is not None, "docs/http.md lost its tested curl block"
    return match.group(1).strip().splitlines(), match.group(2).splitlines()


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_curl_examples_run_as_written(tmp_path: Path) -> None:
    """Each command of the block exits 0 (the stream: curl's timeout, 28) and prints the page's output."""
    commands, printed = _blocks()
    env = {**os.environ, "LIVE_STEERING_TOKEN": TOKEN}
    worker_cmd = [sys.executable, str(ROOT / "examples" / "fleet_worker.py"), "fleet.db"]
    serve_cmd = [
        sys.executable,
        "-m",
        "live_steering._cli",
        "serve",
        "--store",
        "fleet.db",
        "--token-env",
        "LIVE_STEERING_TOKEN",
        "--port",
        "0",
    ]
    with (
        subprocess.Popen(worker_cmd, cwd=tmp_path, stdout=subprocess.PIPE, text=True, env=env) as worker,
        stopped(worker),
    ):
        assert worker.stdout is not None
        assert "owning chat-42" in worker.stdout.readline()
        with (
            subprocess.Popen(serve_cmd, cwd=tmp_path, stdout=subprocess.PIPE, text=True, env=env) as server,
            stopped(server),
        ):
            assert server.stdout is not None
            url = server.stdout.readline().split("listening on ", 1)[1].strip().rstrip("/")
            outputs = []
            for command in commands:
                done = subprocess.run(
                    ["bash", "-c", command],
                    capture_output=True,
                    text=True,
                    timeout=60,
                    env={**env, "URL": url},
                    cwd=tmp_path,
                )
                assert done.returncode in ((28,) if "--max-time" in command else (0,)), (command, done.stderr)
                outputs.append(done.stdout)
            server.terminate()
            assert server.wait(timeout=60) == 0
        assert "wrote msg-1: Use the corrected path" in worker.stdout.readline()
        assert "gen-1 ended: generation-stopped" in worker.stdout.readline()
        assert worker.wait(timeout=60) == 0
    expected = "\n".join(printed)
    plain = [o for c, o in zip(commands, outputs, strict=True) if "--max-time" not in c]
    for output in plain:
        assert output.strip() in expected, output
    stream = outputs[next(i for i, c in enumerate(commands) if "--max-time" in c)]
    shown = [line for line in stream.splitlines() if not line.startswith("data: ")]
    # the stream's records sit between the five answers before it and the three after it
    assert shown == [line for line in printed if not line.startswith("data: ")][5:-3][: len(shown)]
    assert "event: steering.applied" in stream
    without_times = re.sub(r'"time":[0-9.]+', '"time":T', stream)
    for line in printed:
        if line.startswith("data: "):
            assert re.sub(r'"time":[0-9.]+', '"time":T', line) in without_times
