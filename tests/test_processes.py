"""``process_alive``: the SQLite stores' answer to "does the process this pid names still run?"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from live_steering._processes import process_alive


def test_a_running_process_is_alive_and_a_killed_one_is_not_even_before_it_is_reaped() -> None:
    """This process and a running child are alive; the child killed is not, as a zombie (its parent
    has not reaped it yet) and once reaped."""
    assert process_alive(os.getpid())
    # a child that waits until killed (the test kills it at once)
    child = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    try:
        assert process_alive(child.pid)
        os.kill(child.pid, signal.SIGKILL)
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # ended, left unreaped: a zombie
        assert not process_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not process_alive(child.pid)
