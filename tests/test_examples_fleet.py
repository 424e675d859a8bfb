"""docs/fleet.md's examples that need more than a backend argument: a database, or a second shell.

``examples/fleet_postgres.py`` runs against the suite's throwaway cluster (``postgres_dsn``);
``examples/fleet_worker.py`` runs as a process of its own, steered and stopped by the CLI
commands the docs give, and is stopped by its pid if it outlives the test. Both backends.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
POSTGRES_EXAMPLE = ROOT / "examples" / "fleet_postgres.py"
WORKER_EXAMPLE = ROOT / "examples" / "fleet_worker.py"
BACKENDS = pytest.mark.parametrize("backend", ["asyncio", "trio"])
#: Seconds any one step of a child may take before the test fails (a bound, never a wait).
BOUND = 30.0


def run(*argv: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        timeout=BOUND * 2,
        check=False,
        cwd=cwd,
        env=env,
    )


def without_dsn() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name != "LIVE_STEERING_DSN"}


def expected_receipts(stdout: str) -> None:
    """The example's three receipts: queued, then applied through the owner, then the stale refusal."""
    lines = stdout.splitlines()
    assert len(lines) == 3, stdout
    assert "'disposition': 'queued'" in lines[0]
    assert "'disposition': 'applied'" in lines[1]
    assert "'reason': 'stale-generation'" in lines[2]


@BACKENDS
def test_postgres_example_runs_with_the_dsn_in_argv(postgres_dsn: str, backend: str) -> None:
    """``fleet_postgres.py DSN BACKEND`` exits 0 with nothing on stderr (its own asserts hold)."""
    proc = run(str(POSTGRES_EXAMPLE), postgres_dsn, backend, env=without_dsn())
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    expected_receipts(proc.stdout)


@BACKENDS
def test_postgres_example_takes_the_dsn_from_the_environment(postgres_dsn: str, backend: str) -> None:
    """With ``$LIVE_STEERING_DSN`` set it needs no DSN argument; a second run is a fresh session."""
    proc = run(str(POSTGRES_EXAMPLE), backend, env={**without_dsn(), "LIVE_STEERING_DSN": postgres_dsn})
    assert proc.returncode == 0, proc.stderr
    expected_receipts(proc.stdout)


def test_postgres_example_without_a_dsn_says_how_to_give_one() -> None:
    """Neither an argument nor ``$LIVE_STEERING_DSN``: one usage line on stderr, exit 1, nothing run."""
    proc = run(str(POSTGRES_EXAMPLE), env=without_dsn())
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr == (
        "usage: fleet_postgres.py [DSN] [asyncio|trio]: give a PostgreSQL DSN or set LIVE_STEERING_DSN\n"
    )


class Worker:
    """``examples/fleet_worker.py`` as a child process; its stdout read line by line, bounded."""

    def __init__(self, store: str, backend: str, cwd: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER_EXAMPLE), store, backend],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)  # end of output

    def next_line(self) -> str | None:
        """The worker's next line of output (``None``: it closed stdout), within the bound."""
        return self._lines.get(timeout=BOUND)

    def stop_by_pid(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=BOUND)
        self._reader.join(timeout=BOUND)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def worker_factory(tmp_path: Path) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop_by_pid()


def cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``live-steering ARGV`` as the docs write it, from the shell's current folder ``cwd``."""
    return run("-m", "live_steering._cli", *argv, cwd=cwd)


@BACKENDS
def test_worker_writes_the_steer_the_cli_sends(
    backend: str, tmp_path: Path, worker_factory: list[Worker]
) -> None:
    """Two processes: the CLI's steer is queued, written by the worker; the CLI's stop ends the worker."""
    worker = Worker("fleet.db", backend, tmp_path)
    worker_factory.append(worker)
    assert worker.next_line() == "owning chat-42, running gen-1: steer it from another shell"

    steer = cli(
        "steer", "--store", "fleet.db", "chat-42", "Use the corrected path", "--id", "msg-1", cwd=tmp_path
    )
    assert (steer.returncode, steer.stdout, steer.stderr) == (0, "msg-1: queued\n", "")
    assert worker.next_line() == "wrote msg-1: Use the corrected path"

    repeat = cli(
        "steer", "--store", "fleet.db", "chat-42", "Use the corrected path", "--id", "msg-1", cwd=tmp_path
    )
    assert (repeat.returncode, repeat.stdout) == (0, "msg-1: applied\n")  # answered, not written again

    # docs/fleet.md: a follow-up is queued, never written in gen-1, and the stop holds it.
    follow_up = ("steer", "--store", "fleet.db", "chat-42", "Then run the whole suite", "--id", "next-1")
    queued = cli(*follow_up, "--follow-up", cwd=tmp_path)
    assert (queued.returncode, queued.stdout, queued.stderr) == (0, "next-1: queued\n", "")
    as_steer = cli(*follow_up, cwd=tmp_path)  # the same id and text as the other kind
    assert (as_steer.returncode, as_steer.stdout) == (1, "next-1: refused (identity-conflict)\n")

    stop = cli("stop", "--store", "fleet.db", "chat-42", cwd=tmp_path)
    assert (stop.returncode, stop.stdout, stop.stderr) == (0, "gen-1: stopped\n", "")
    assert worker.next_line() == "gen-1 ended: generation-stopped"  # the follow-up was not written
    held = cli(*follow_up, "--follow-up", cwd=tmp_path)
    assert (held.returncode, held.stdout) == (0, "next-1: held (generation-stopped)\n")
    assert worker.next_line() is None
    assert worker.process.wait(timeout=BOUND) == 0
    assert worker.process.stderr is not None
    assert worker.process.stderr.read() == ""

    receipts = cli("receipts", "fleet.db", "--session", "chat-42", "--json", cwd=tmp_path)
    assert receipts.returncode == 0, receipts.stderr
    assert '"disposition": "applied"' in receipts.stdout
    assert '"disposition": "held"' in receipts.stdout
    assert receipts.stdout.count("\n") == 2  # two receipts: the repeats admitted nothing


def test_worker_without_a_store_says_how_to_start_it(tmp_path: Path) -> None:
    """No STORE argument: one usage line on stderr, exit 1, no file created."""
    proc = run(str(WORKER_EXAMPLE), cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith("usage: fleet_worker.py STORE")
    assert list(tmp_path.iterdir()) == []


@BACKENDS
def test_worker_whose_session_was_taken_over_exits_non_zero(
    backend: str, tmp_path: Path, worker_factory: list[Worker]
) -> None:
    """Issue 25 (3): another node takes the lease (it expired: a partition); the worker's next
    commit (its renewal) meets the fence, its loop ends with ``OwnerLostError``, and it exits 1
    with one line of its own on stderr (no traceback), never 0 as if it had finished its work."""
    from live_steering.fleet._sqlite import SQLiteConnection

    worker = Worker("fleet.db", backend, tmp_path)
    worker_factory.append(worker)
    assert worker.next_line() == "owning chat-42, running gen-1: steer it from another shell"
    thief = SQLiteConnection(str(tmp_path / "fleet.db"))
    try:
        thief.begin()
        thief.execute("UPDATE ls_leases SET expires_at = 0")
        thief.commit()
        assert thief.take("chat-42", "thief", 60.0) is not None
    finally:
        thief.close()
    assert worker.process.wait(timeout=BOUND) == 1
    assert worker.next_line() is None
    assert worker.process.stderr is not None
    stderr = worker.process.stderr.read()
    # the last line is the worker's own (the line before it: the library's logged warning)
    last = stderr.splitlines()[-1]
    assert last.startswith("fleet_worker: the owner of session 'chat-42' lost the session"), stderr
    assert "Traceback" not in stderr, stderr
