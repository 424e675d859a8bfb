"""Where the tests marked ``real_clients`` find the real clients (``scripts/install-clients``).

A client that is not installed skips its tests, unless ``LIVE_STEERING_REQUIRE_CLIENTS=1`` (set by
``.ci/run``), where it fails them: CI must never pass by skipping the real clients.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from live_steering.hooks import SqliteHookStore
from process_helpers import stopped

ROOT = Path(__file__).resolve().parent.parent
CLIENTS_LIST = ROOT / "scripts" / "clients.txt"
#: Our own CLI, as a vendor's hook config runs it (``python -m live_steering._cli``).
CLI = [sys.executable, "-m", "live_steering._cli"]


def pinned() -> dict[str, str]:
    """Each client's NAME and the spec it is pinned to."""
    specs: dict[str, str] = {}
    for line in CLIENTS_LIST.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if parts and not parts[0].startswith("#"):
            specs[parts[0]] = parts[1]
    return specs


def clients_root() -> Path:
    return Path(os.environ.get("LIVE_STEERING_CLIENTS", "/tmp/live-steering-clients"))


def client_dir(name: str) -> Path:
    """The folder the named client is installed in, at its pinned version; skip (or fail) if not."""
    spec = pinned()[name]
    folder = clients_root() / name
    stamp = folder / ".installed"
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == spec:
        return folder
    message = f"{name} ({spec}) is not installed: run bash scripts/install-clients {name}"
    if os.environ.get("LIVE_STEERING_REQUIRE_CLIENTS") == "1":
        pytest.fail(message)
    pytest.skip(message)


def npm_bin(name: str, command: str) -> Path:
    """An npm client's command, as ``npm install`` linked it."""
    return client_dir(name) / "node_modules" / ".bin" / command


def pip_bin(name: str, command: str) -> Path:
    """A pip client's command, in its own venv."""
    return client_dir(name) / "venv" / "bin" / command


class VendorUser:
    """One isolated user of a vendor's CLI: a home, a work folder, a hook store and the
    environment the CLI runs in (nothing of the machine's own user leaks in), with our CLI and
    the vendor's run bounded and checked. A vendor's class adds its config and its commands."""

    #: Seconds one run of the vendor's CLI may take on a busy machine (a bound, not a measurement).
    bound: ClassVar[float] = 120.0

    def __init__(self, tmp_path: Path, command: Path, env: dict[str, str]) -> None:
        self.bin = str(command)
        self.home = tmp_path / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.work = tmp_path / "work"
        self.work.mkdir()
        self.store = str(tmp_path / "hooks.db")
        self.env = {
            "PATH": os.environ["PATH"],
            "TMPDIR": os.environ["TMPDIR"],  # the test's own (tests/conftest.py)
            "HOME": str(self.home),
            "NO_PROXY": "127.0.0.1",
            **env,
        }

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``live-steering ARGS`` in this user's environment (exit 0 or 1 unless ``check=False``)."""
        done = subprocess.run(
            [*CLI, *args], env={**os.environ, **self.env}, capture_output=True, text=True, timeout=self.bound
        )
        if check:
            assert done.returncode in (0, 1), done.stderr
        return done

    def vendor(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The vendor's CLI with ``args`` in the work folder; it must exit 0 unless ``check=False``."""
        done = subprocess.run(
            [self.bin, *args],
            env=self.env,
            cwd=self.work,
            capture_output=True,
            text=True,
            timeout=self.bound,
            stdin=subprocess.DEVNULL,
        )
        if check:
            assert done.returncode == 0, done.stderr[-3000:]
        return done

    def instruct(self, session: str, text: str, command_id: str, *extra: str) -> dict[str, Any]:
        """``live-steering instruct`` into this user's store; its JSON receipt."""
        args = ["instruct", session, text, "--id", command_id, *extra, "--store", self.store, "--json"]
        done = self.cli(*args)
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer

    def events(self) -> list[dict[str, Any]]:
        with SqliteHookStore(self.store) as store:
            return store.events(show_text=True, limit=10_000)

    def session(self) -> str:
        """The one session the hooks have seen so far."""
        with SqliteHookStore(self.store) as store:
            (row,) = store.sessions()
        return str(row["session_id"])


#: The variable the HTTP-hook tests keep the server's token in (``serve --token-env``, ``hooks
#: install --token-env``) and its value: a test token, never a secret.
TOKEN_ENV = "LIVE_STEERING_TEST_HOOK_TOKEN"
TOKEN = "hook-token-0f3c9a"


@contextlib.contextmanager
def running_serve(hooks_store: str, bound: float) -> Iterator[str]:
    """``live-steering serve --hooks-store STORE --port 0 --token-env TOKEN_ENV`` running for the
    block; yields its base URL (``http://127.0.0.1:PORT``) once it listens. Stopped by its pid,
    at the block's exit or past ``bound`` seconds (``process_helpers.stopped``)."""
    command = [*CLI, "serve", "--hooks-store", hooks_store, "--port", "0", "--token-env", TOKEN_ENV]
    env = {**os.environ, TOKEN_ENV: TOKEN}
    with (
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc,
        stopped(proc, bound),
    ):
        assert proc.stdout is not None
        assert proc.stderr is not None
        line = proc.stdout.readline()  # the line it prints once it listens (EOF if it died)
        assert "listening on http://127.0.0.1:" in line, line + proc.stderr.read()
        yield line.split("listening on ", 1)[1].strip().rstrip("/")
