"""Where the tests marked ``real_clients`` find the real clients (``scripts/install-clients``).

A client that is not installed skips its tests, unless ``LIVE_STEERING_REQUIRE_CLIENTS=1`` (set by
``.ci/run``), where it fails them: CI must never pass by skipping the real clients.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLIENTS_LIST = ROOT / "scripts" / "clients.txt"


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
