"""Shared helpers for the relay tests: the hook store under test, on SQLite or on PostgreSQL."""

from __future__ import annotations

import time

import attrs

from live_steering.hooks import HookStore, open_store


@attrs.frozen
class HookWhere:
    """One relay store under test: a SQLite ``path``, or a PostgreSQL ``dsn`` (a schema of its own)."""

    kind: str
    path: str | None = None
    dsn: str | None = None

    def open(self) -> HookStore:
        return open_store(self.path, dsn=self.dsn)

    def args(self) -> list[str]:
        """The command-line options that select this store."""
        return ["--store", self.path] if self.path is not None else ["--dsn", str(self.dsn)]


def wait_for_locks_freed(dsn: str, backend_pid: int, timeout: float = 10.0) -> None:
    """Wait until the server has freed every lock of a closed connection's backend (bounded).

    Closing a connection returns before the server's backend has seen the socket close
    and released its locks (under load, a moment later); a test that next asks whether
    that claimant lives polls for this first (the server drives it: poll with a deadline).
    """
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        deadline = time.monotonic() + timeout
        while conn.execute("SELECT 1 FROM pg_locks WHERE pid = %s", (backend_pid,)).fetchone():
            if time.monotonic() > deadline:
                raise AssertionError(f"the server still holds the locks of backend {backend_pid}")
            time.sleep(0.01)
