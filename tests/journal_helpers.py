"""Shared helpers for the receipt journal tests: a fault-injecting connection and snapshots."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from live_steering import journal


class FaultyConnection:
    """Wraps a real journal connection (sqlite3 connections cannot be monkeypatched).

    Once ``armed``, the ``nth`` statement starting with ``fail_on`` raises ``error``
    instead of running, and every ``COMMIT`` first waits for ``gate`` (when given),
    after setting ``parked``, so a test can hold a commit in flight.
    """

    def __init__(
        self,
        *,
        fail_on: str | None = None,
        nth: int = 1,
        error: sqlite3.Error | None = None,
        gate: threading.Event | None = None,
    ) -> None:
        self.fail_on = fail_on
        self.nth = nth
        self.error = error
        self.gate = gate
        self.parked = threading.Event()
        self.armed = False
        self.seen = 0
        self.commits = 0
        self._conn: sqlite3.Connection | None = None

    def factory(self, path: str) -> FaultyConnection:
        self._conn = journal.connect(path)
        return self

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> sqlite3.Cursor:
        assert self._conn is not None
        if self.armed:
            if self.fail_on is not None and sql.startswith(self.fail_on):
                self.seen += 1
                if self.seen == self.nth:
                    assert self.error is not None
                    raise self.error
            if sql == "COMMIT":
                self.commits += 1
                if self.gate is not None:
                    self.parked.set()
                    # bounded, so that a broken test fails instead of hanging the suite
                    assert self.gate.wait(timeout=20), "the test never released the commit gate"
        return self._conn.execute(sql, parameters)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


def snapshot(source: Path, target: Path) -> None:
    """Copy the committed state of a live journal, as a process killed right now would leave it."""
    with (
        contextlib.closing(sqlite3.connect(f"{source.absolute().as_uri()}?mode=ro", uri=True)) as src,
        contextlib.closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)


def rows(path: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run one read-only query against a journal file."""
    with contextlib.closing(sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)) as conn:
        return [tuple(row) for row in conn.execute(sql, params).fetchall()]


def damage_dispositions(path: Path) -> None:
    """Flip one byte of every stored ``applied`` value ("appBied"), leaving the schema's text alone."""
    data = bytearray(path.read_bytes())
    at = data.find(b"applied")
    found = 0
    while at != -1:
        if data[at - 1 : at] != b"'":  # the CHECK constraint in the schema quotes it
            data[at + 3 : at + 4] = b"B"
            found += 1
        at = data.find(b"applied", at + 1)
    assert found, "no stored 'applied' value to damage"
    path.write_bytes(bytes(data))


def damage_the_schema(path: Path) -> None:
    """Flip one byte of the schema's own CHECK constraint ('appBied'), leaving the stored rows alone."""
    data = bytearray(path.read_bytes())
    at = data.find(b"'applied'")
    assert at != -1, "no CHECK constraint to damage"
    data[at + 4 : at + 5] = b"B"
    path.write_bytes(bytes(data))


def killed_writer(path: Path, kill: str = "after-mark:2") -> None:
    """Run the crash tests' writer on ``path`` until it SIGKILLs itself at ``kill`` (default: right
    after its second durable mark, leaving one input marked ``writing`` and one not)."""
    writer = subprocess.run(
        [sys.executable, "-m", "live_steering.testing._journal_writer", str(path)],
        env={**os.environ, "LIVE_STEERING_KILL": kill},
        capture_output=True,
        check=False,
    )
    assert writer.returncode == -9, writer.stderr
