"""Child processes a test starts with ``subprocess.Popen``: each one stopped by its pid (issue 20).

``stopped(proc)`` guards a child for the ``with`` block: a watchdog SIGKILLs it by its pid once
it has run ``bound`` seconds, so a read blocked on a hung child ends (EOF) and the test fails
instead of holding the whole run for ever; at the block's exit, failed or not, the child is
killed if it still runs, and reaped. ``Popen``'s own ``with`` only waits, unbounded.

    with subprocess.Popen(command, stdout=subprocess.PIPE) as proc, stopped(proc):
        line = proc.stdout.readline()

The bound is generous for a loaded 2-core machine (scripts/loaded-tests): a bound against a
hang, never a measurement.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["BOUND", "stopped"]

#: Seconds a guarded child may run before its watchdog kills it.
BOUND = 120.0


@contextlib.contextmanager
def stopped(proc: subprocess.Popen[Any], bound: float = BOUND) -> Iterator[subprocess.Popen[Any]]:
    """Yield ``proc``; kill it by its pid past ``bound`` seconds, and at exit if it still runs."""
    # Popen.kill signals only a child not yet reaped (it polls first): never a reused pid.
    watchdog = threading.Timer(bound, proc.kill)
    watchdog.daemon = True
    watchdog.start()
    try:
        yield proc
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
