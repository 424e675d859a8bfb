"""The ``hook_command`` figure: one ``live-steering hook claude-code`` process delivering one instruction.

Value: the median wall time of the console script run as a vendor runs it (a fresh
process, the hook JSON on stdin, the reply read from stdout) while one instruction
is queued for the session, so every run claims, writes the reply and confirms.
Floor: the median wall time of ``python3 -c "import sqlite3, json, sys;
json.load(sys.stdin)"`` on the same stdin, the least a Python hook can do. The two
are interleaved, run by run, in the same process. Target: <= 2.0 (every hook moment
of every tool call pays this).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from live_steering.hooks import SqliteHookStore

from ._timing import Figure, figure

__all__ = ["BACKEND", "measure_hook_command"]

BACKEND = "process"
"""The ``backend`` field of this figure: it runs no event loop, it starts processes."""
TARGET = 2.0
FLOOR_CODE = "import sqlite3, json, sys; json.load(sys.stdin)"
PAYLOAD = {
    "session_id": "bench-session",
    "transcript_path": "/home/dev/.claude/projects/app/bench-session.jsonl",
    "cwd": "/home/dev/app",
    "permission_mode": "default",
    "hook_event_name": "PostToolUse",
    "tool_name": "Bash",
    "tool_input": {"command": "pytest -q"},
    "tool_response": {"stdout": "12 passed", "stderr": "", "interrupted": False},
    "tool_use_id": "toolu_bench",
}


def _script() -> list[str]:
    script = Path(sys.executable).parent / "live-steering"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "live_steering._cli"]


def _environment() -> dict[str, str]:
    """The environment of both sides, as on a user's machine: bytecode caches allowed.

    An installed package imports its modules from ``__pycache__``; with
    ``PYTHONDONTWRITEBYTECODE`` set (as in some CI and sandboxes) every process would
    compile the hook modules again, which no user's hook pays. The warm-up run writes
    the cache.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _timed(argv: list[str], data: bytes, env: dict[str, str]) -> tuple[float, bytes]:
    start = time.perf_counter_ns()
    done = subprocess.run(argv, input=data, capture_output=True, check=True, timeout=60, env=env)
    return float(time.perf_counter_ns() - start), done.stdout


def measure_hook_command(runs: int) -> Figure:
    """Run the figure ``runs`` times each side (interleaved); raises if a run did not deliver."""
    data = json.dumps(PAYLOAD).encode()
    env = _environment()
    floor_argv = [sys.executable, "-c", FLOOR_CODE]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "hooks.db")
        hook_argv = [*_script(), "hook", "claude-code", "--store", path]
        values: list[float] = []
        floors: list[float] = []
        with SqliteHookStore(path) as store:
            for n in range(runs + 1):
                store.enqueue("bench-session", f"cmd-{n}", "Use the corrected path")
                value, out = _timed(hook_argv, data, env)
                if b'"additionalContext":"Use the corrected path"' not in out:
                    raise RuntimeError(f"the hook did not deliver: {out!r}")
                floor, _ = _timed(floor_argv, data, env)
                if n:  # the first pair warms the file cache and the store's schema check
                    values.append(value)
                    floors.append(floor)
            if store.receipt("bench-session", f"cmd-{runs}") is None:
                raise RuntimeError("the last instruction is missing")
    return figure("hook_command", BACKEND, "ns", statistics.median(values), statistics.median(floors), TARGET)
