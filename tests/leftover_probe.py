"""Run only by tests/test_run_temp.py, in a child pytest: a test that leaves a folder behind."""

from __future__ import annotations

import tempfile
from pathlib import Path


def test_leaves_a_socket_folder_behind() -> None:
    Path(tempfile.gettempdir(), "live-steering-0123456789abcdef").mkdir()
