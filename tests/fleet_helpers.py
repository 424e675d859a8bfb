"""Shared helpers for the fleet tests: the store under test, fleet nodes in child processes, and an
owner and a host node in this process (the integrations' fleet-stop tests)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import anyio
import anyio.abc
import attrs
from anyio.streams.buffered import BufferedByteReceiveStream

from live_steering import Generation, Input, LiveRuntime, Receipt
from live_steering.fleet import Fleet, PostgresFleet, SQLiteFleet, StopResult
from live_steering.fleet._postgres import PostgresConnection
from live_steering.fleet._sqlite import SQLiteConnection
from live_steering.fleet._store import StoreConnection
from live_steering.testing._postgres import PostgresCluster

#: Seconds a wait on another process (a child node, the PostgreSQL server noticing a closed
#: connection) may take before the test fails: a bound against a hang, generous for a loaded
#: 2-core CI machine (scripts/loaded-tests); never an ordering tool, never a measurement.
BOUND = 60.0


@attrs.frozen
class FleetStore:
    """One store under test: ``kind`` is ``"sqlite"`` (``location`` a path) or ``"postgres"`` (a DSN)."""

    kind: str
    location: str

    def fleet(self, node_id: str, **options: Any) -> Fleet:
        # A remote submit's deadline no loaded machine reaches (the default is 10 s); the tests
        # of the deadline itself pass their own.
        options.setdefault("timeout", BOUND)
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
        """The next JSON line (of ``type_``, skipping others); fails after ``BOUND`` seconds."""
        with anyio.fail_after(BOUND):
            while True:
                line: dict[str, Any] = json.loads(await self._stdout.receive_until(b"\n", 1 << 20))
                self.lines.append(line)
                if type_ is None or line["type"] == type_:
                    return line

    async def drain(self) -> None:
        """Read what is left of the output (after the child ended)."""
        with anyio.fail_after(BOUND):
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
        with anyio.fail_after(BOUND):
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


# -- the C6-C12, C16, C17 script, with the engine here or in a child -------------------------

Submit = Callable[[Input, str], Awaitable[Receipt]]


class Engine(Protocol):
    """The engine's side of the script: in this process, or a child's (``scripted`` role)."""

    async def open(self, generation_id: str) -> None: ...
    async def boundary(self) -> None: ...
    async def checkpoint(self) -> bool: ...
    async def stop(self) -> None: ...
    async def close(self) -> None: ...


class LocalEngine:
    """The engine steps on a runtime of this process."""

    def __init__(self, runtime: LiveRuntime) -> None:
        self.runtime = runtime
        self.gen: Generation | None = None

    def _gen(self) -> Generation:
        assert self.gen is not None
        return self.gen

    async def open(self, generation_id: str) -> None:
        self.gen = self.runtime.open_generation(generation_id)
        await self.gen.__aenter__()

    async def boundary(self) -> None:
        await self._gen().boundary(lambda input, metadata: None)

    async def checkpoint(self) -> bool:
        return self._gen().continue_after_checkpoint()

    async def stop(self) -> None:
        self._gen().stop()

    async def close(self) -> None:
        await self._gen().__aexit__(None, None, None)
        self.gen = None


async def script(engine: Engine, submit: Submit) -> list[Receipt]:
    """The C6-C12, C16, C17 scenarios, the engine's steps between the submits fixed."""
    out: list[Receipt] = []

    async def send(kind: str, text: str, id_: str, anchor: str) -> None:
        out.append(await submit(Input(kind, text, id=id_), anchor))

    await engine.open("g1")
    await send("steer", "a", "", "g1")  # C7 invalid-input: empty id
    await send("steer", "   ", "blank", "g1")  # blank text
    await send("steer", "nul\x00", "nul", "g1")  # NUL
    await send("note", "a", "kind", "g1")  # unsupported-kind
    await send("steer", "a", "stale", "g0")  # stale-generation
    await send("steer", "first", "a", "g1")  # C9 queued
    await send("steer", "first", "a", "g1")  # C10 repeat: its receipt
    await send("steer", "other", "a", "g1")  # C10 identity-conflict
    await send("steer", "second", "b", "g1")
    await engine.boundary()  # a, b applied
    await send("steer", "first", "a", "g1")  # repeat: applied now
    assert not await engine.checkpoint()  # C16: admission closed
    await send("steer", "late", "c", "g1")  # finishing
    await engine.close()
    await send("steer", "after", "c2", "g1")  # stale-generation: no generation runs
    await engine.open("g2")
    async with anyio.create_task_group() as tg:  # C12: one id from 5 submitters at once
        for _ in range(5):
            tg.start_soon(send, "steer", "same", "z", "g2")
    await send("steer", "d", "d", "g2")
    await engine.stop()  # C17: pending held
    await send("steer", "d", "d", "g2")  # repeat: held
    await engine.close()
    await engine.open("g3")
    await send("steer", "e", "e", "g3")  # identity limit 4 (a, b, z, d): capacity
    await engine.close()
    return out


EXPECTED_REASONS = {
    "invalid-input",
    "unsupported-kind",
    "stale-generation",
    "identity-conflict",
    "finishing",
    "capacity",
}


# -- a PostgreSQL cluster of a test's own, to restart and to end its backends -----------------


def restart_cluster(cluster: PostgresCluster, *, down: float = 0.0) -> None:
    """Stop the cluster's server by its pid (a fast shutdown: every connection is closed), keep it
    down ``down`` seconds, start it again on the same data and socket, and wait until it accepts
    connections (bounded). On a worker thread: it blocks."""
    import subprocess
    import time

    from live_steering.testing._postgres import find_binaries

    bin_dir = find_binaries()
    assert bin_dir is not None
    process = cluster.process
    process.send_signal(signal.SIGINT)
    process.wait(BOUND)
    time.sleep(down)  # a server that stays down a while: the nodes retry meanwhile
    run_as: dict[str, Any] = {"user": "postgres"} if os.geteuid() == 0 else {}
    cluster.process = subprocess.Popen(
        [
            os.path.join(bin_dir, "postgres"),
            "-D",
            os.path.join(cluster.directory, "data"),
            "-k",
            cluster.directory,
            "-c",
            "listen_addresses=",
            "-c",
            "max_connections=200",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=cluster.directory,
        **run_as,
    )
    ready = [os.path.join(bin_dir, "pg_isready"), "-q", "-h", cluster.directory, "-U", "postgres"]
    deadline = time.monotonic() + BOUND
    while subprocess.run(ready, check=False).returncode != 0:
        assert cluster.process.poll() is None, "PostgreSQL did not start again"
        assert time.monotonic() < deadline, "PostgreSQL did not accept connections again"
        time.sleep(0.01)


def terminate_backends(dsn: str) -> int:
    """``pg_terminate_backend`` of every other client backend of the cluster; how many."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).fetchone()
    return 0 if row is None else int(row[0])


@contextlib.asynccontextmanager
async def owned_elsewhere(path: str, session_id: str) -> AsyncIterator[tuple[Fleet, Fleet, LiveRuntime]]:
    """``(owner, host, runtime)``: an owner node running ``session_id`` and a host node, both on
    the SQLite store at ``path`` (what a host on another machine of the fleet talks to)."""
    async with (
        SQLiteFleet(path, node_id="owner", timeout=BOUND) as owner,
        SQLiteFleet(path, node_id="host", timeout=BOUND) as host,
        owner.own(LiveRuntime(session_id=session_id)) as runtime,
    ):
        yield owner, host, runtime


async def steer_then_stop(
    owner: Fleet, host: Fleet, session_id: str, generation_id: str, steer: Input
) -> None:
    """From the host node: ``steer`` (queued), then a stop of ``generation_id`` (it was running)."""
    queued = await host.submit(session_id, steer, generation_id)
    assert queued.disposition == "queued", queued
    await owner.flush(session_id)
    assert await host.stop(session_id, generation_id) == StopResult(True, session_id, generation_id, None)


async def final_receipt(host: Fleet, session_id: str, input_id: str) -> tuple[str | None, str | None]:
    """The input's final ``(disposition, reason)`` as the host node reads it."""
    with anyio.fail_after(BOUND):
        final = await host.wait_final(session_id, input_id)
    return final.disposition, final.reason
