"""tests/process_helpers.py: a guarded child is stopped by its pid, hung or not."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from process_helpers import stopped

HANG = [sys.executable, "-c", "import time; time.sleep(3600)"]


def test_a_hung_child_is_killed_past_its_bound_and_a_blocked_read_ends() -> None:
    """A child that never writes: past the bound its watchdog kills it, so the read sees EOF."""
    with subprocess.Popen(HANG, stdout=subprocess.PIPE) as proc, stopped(proc, bound=0.05):
        assert proc.stdout is not None
        assert proc.stdout.read() == b""  # would block for an hour without the watchdog
    assert proc.returncode == -signal.SIGKILL


def test_a_child_still_running_at_exit_is_killed_and_reaped() -> None:
    """Leaving the block (here by an exception) kills a running child and reaps it."""
    proc = subprocess.Popen(HANG)
    with pytest.raises(LookupError, match="failed"), stopped(proc):
        raise LookupError("the test failed")
    assert proc.returncode == -signal.SIGKILL


def test_a_child_that_ended_is_only_reaped() -> None:
    """A child that exited on its own keeps its exit status."""
    with subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"]) as proc, stopped(proc):
        proc.wait()
    assert proc.returncode == 3
