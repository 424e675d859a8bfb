"""Whether a process of this machine still runs: what the SQLite stores ask of a pid they recorded
(a fleet lease's holder, a hook claim's claimant). Standard library only, cheap to import."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs. This process does; a zombie (killed, not yet reaped by its
    parent) does not; another user's process (``EPERM``) does. Where ``/proc`` is missing (not
    Linux), the kernel's answer to signal 0 alone."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process holds that pid: alive
        return True
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[0]
    except FileNotFoundError:  # it ended just now, or there is no /proc
        return not os.path.isdir("/proc/self")
    except (OSError, IndexError):
        return True
    return state not in (b"Z", b"X")
