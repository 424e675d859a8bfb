"""The process figures of the hook relay: ``hook_command`` and ``instruct_command``.

``hook_command``: one ``live-steering hook claude-code`` delivering one instruction, run
exactly as ``hooks install`` wrote it into the vendor's config (``_install.hook_command``:
this installation's Python running the hook entry point), as a vendor runs it (a fresh
process, the hook JSON on stdin, the reply read from stdout) while one instruction is
queued for the session, so every run claims, writes the reply and confirms. Target:
<= 1.3 (every hook moment of a steered session pays this).

``instruct_command``: one ``live-steering instruct SESSION TEXT`` (the console script a
person or a host script runs), queueing one instruction. Target: <= 1.5.

Floor of both: the median wall time of ``python3 -c "import json, sqlite3, sys;
json.load(sys.stdin)"`` on the same stdin, the least a Python hook can do. Each figure's
runs are interleaved with the floor's, run by run, in the same process.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from live_steering.hooks import SqliteHookStore
from live_steering.hooks._install import hook_command

from ._timing import Figure, figure

__all__ = ["BACKEND", "measure_hook_command", "measure_instruct_command"]

BACKEND = "process"
"""The ``backend`` field of this figure: it runs no event loop, it starts processes."""
TARGET = 1.3
INSTRUCT_TARGET = 1.5
FLOOR_CODE = "import json, sqlite3, sys; json.load(sys.stdin)"
PAYLOAD = {
    "session_id": "bench-session",
    "transcript_path": "/home/dev/.claude/projects/app/bench-session.jsonl",
    "cwd": "/home/dev/app",
    "permission_mode": "default",
    "hook_event_name": "PostToolBatch",
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
        hook_argv = shlex.split(hook_command("claude-code", path))  # as the vendor's config runs it
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


def measure_instruct_command(runs: int) -> Figure:
    """``live-steering instruct`` queueing one instruction, ``runs`` times (interleaved with the
    floor); raises if a run was not accepted."""
    env = _environment()
    floor_argv = [sys.executable, "-c", FLOOR_CODE]
    data = json.dumps(PAYLOAD).encode()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "hooks.db")
        SqliteHookStore(path).close()
        values: list[float] = []
        floors: list[float] = []
        for n in range(runs + 1):
            session = f"bench-{n}"  # a fresh session each run: the queue cap never refuses
            argv = [*_script(), "instruct", session, "Use the corrected path"]
            argv += ["--id", f"cmd-{n}", "--store", path]
            value, out = _timed(argv, b"", env)
            if b"accepted, queued" not in out:
                raise RuntimeError(f"instruct did not queue: {out!r}")
            floor, _ = _timed(floor_argv, data, env)
            if n:
                values.append(value)
                floors.append(floor)
    return figure(
        "instruct_command",
        BACKEND,
        "ns",
        statistics.median(values),
        statistics.median(floors),
        INSTRUCT_TARGET,
    )
