"""Shared helpers for the relay tests: the hook store under test, on SQLite or on PostgreSQL."""

from __future__ import annotations

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
