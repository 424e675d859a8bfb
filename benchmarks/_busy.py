"""``--busy``: run the figures beside a CPU hog on every other core, as CI runs beside other work.

A hog is a separate process spinning in pure Python at normal priority, so the measured process
competes for caches, memory bandwidth and (on a machine with fewer free cores than hogs plus one)
the CPU itself, as it does on a shared CI machine. Each figure's floor is measured in the same run,
under the same hogs: a ratio holds busy when the code under test slows no more than its floor.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

__all__ = ["busy_machine", "hog_count"]

_HOG = "while True: pass"


def hog_count() -> int:
    """One hog for each core but the one the benchmark runs on (at least one)."""
    return max(1, (os.cpu_count() or 2) - 1)


@contextlib.contextmanager
def busy_machine(count: int | None = None) -> Iterator[list[int]]:
    """Start ``count`` hogs (default ``hog_count()``); yield their pids; stop them on the way out."""
    hogs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(hog_count() if count is None else count):
            hogs.append(
                subprocess.Popen(
                    [sys.executable, "-c", _HOG],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        yield [hog.pid for hog in hogs]
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait(timeout=30)
