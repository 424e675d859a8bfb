"""Shared helpers for the fleet tests: the store under test, and fleet nodes in child processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import uuid
from typing import Any

import anyio
import anyio.abc
import attrs
from anyio.streams.buffered import BufferedByteReceiveStream

from live_steering.fleet import Fleet, PostgresFleet, SQLiteFleet
from live_steering.fleet._postgres import PostgresConnection
from live_steering.fleet._sqlite import SQLiteConnection
from live_steering.fleet._store import StoreConnection


@attrs.frozen
class FleetStore:
    """One store under test: ``kind`` is ``"sqlite"`` (``location`` a path) or ``"postgres"`` (a DSN)."""

    kind: str
    location: str

    def fleet(self, node_id: str, **options: Any) -> Fleet:
        if self.kind == "sqlite":
            return SQLiteFleet(self.location, node_id=node_id, **options)
        return PostgresFleet(self.location, node_id=node_id, **options)

    def connection(self) -> StoreConnection:
        """A raw store connection, for tests that act as a node would at the SQL level."""
        conn: StoreConnection
        conn = SQLiteConnection(self.location) if self.kind == "sqlite" else PostgresConnection(self.location)
        conn.ensure_schema()
        return conn

    def args(self) -> list[str]:
        return ["--store", self.location] if self.kind == "sqlite" else ["--dsn", self.location]


def new_session() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


class Child:
    """A fleet node in a child process (``live_steering.testing._fleet_node``), read line by line."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        assert process.stdout is not None
        self._stdout = BufferedByteReceiveStream(process.stdout)
        self.lines: list[dict[str, Any]] = []

    @property
    def pid(self) -> int:
        return self.process.pid

    async def next(self, type_: str | None = None) -> dict[str, Any]:
        """The next JSON line (of ``type_``, skipping others); fails after 20 s."""
        with anyio.fail_after(20):
            while True:
                line: dict[str, Any] = json.loads(await self._stdout.receive_until(b"\n", 1 << 20))
                self.lines.append(line)
                if type_ is None or line["type"] == type_:
                    return line

    async def drain(self) -> None:
        """Read what is left of the output (after the child ended)."""
        with anyio.fail_after(20):
            try:
                while True:
                    self.lines.append(json.loads(await self._stdout.receive_until(b"\n", 1 << 20)))
            except (anyio.EndOfStream, anyio.IncompleteRead):
                return

    async def close_stdin(self) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.aclose()

    def signal(self, signum: int) -> None:
        os.kill(self.process.pid, signum)

    async def kill(self) -> None:
        """SIGKILL by pid and reap."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # asyncio may have reaped it already
                self.signal(signal.SIGKILL)
        with anyio.CancelScope(shield=True):
            await self.process.wait()

    async def wait(self) -> int:
        with anyio.fail_after(20):
            return await self.process.wait()


async def spawn(store: FleetStore, role: str, session: str, *args: str, backend: str = "asyncio") -> Child:
    command = [
        sys.executable,
        "-m",
        "live_steering.testing._fleet_node",
        role,
        *store.args(),
        "--session",
        session,
        "--backend",
        backend,
        *args,
    ]
    process = await anyio.open_process(command, stderr=None)
    return Child(process)
