"""The SQLite engine of the fleet store: several processes on one machine share one file.

WAL and ``synchronous=FULL``: a committed receipt, decision or withdrawal survives
``kill -9`` and power loss (a host's request row is the one exception, see
``SQLiteConnection.submit``: it needs no fsync of its own). Writers serialise on
``BEGIN IMMEDIATE``; the owner's fence-and-lock and a host's insert run in the event loop
when the write lock is free at once (neither waits for a disk), everything else on a
worker thread. A dead owner is detected at once by an ``flock`` on a file beside the
store (the kernel drops it with the process); wake-ups are datagrams on Unix sockets,
one per node, sent after the commit (a lost one costs the poll interval, never an
answer: truth is in the tables).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import socket
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import anyio.abc
import anyio.to_thread

from .._types import Receipt
from ..journal import JournalChange
from ._node import Fleet
from ._store import Decision, FleetError, Request, StoreConnection, Submission

_T = TypeVar("_T")

#: SQLite's default: a commit that leaves this many WAL pages runs a checkpoint.
_AUTOCHECKPOINT: Final = 1_000

#: How long a statement waits for another process's write lock (on a worker thread).
_BUSY_TIMEOUT_MS: Final = 30_000


def _hash(text: str, n: int = 20) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


def socket_dir(path: str) -> str:
    """Where the nodes of the store at ``path`` bind their wake-up sockets (short enough for AF_UNIX)."""
    return os.path.join(tempfile.gettempdir(), f"live-steering-{_hash(str(Path(path).absolute()), 16)}")


def node_socket(path: str, node_id: str) -> str:
    return os.path.join(socket_dir(path), f"{_hash(node_id)}.sock")


class SQLiteConnection(StoreConnection):
    serial = "INTEGER"

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self._conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=_BUSY_TIMEOUT_MS / 1000
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._locks: dict[str, int] = {}
        self._sender: socket.socket | None = None
        self._deferring = False  # wake-ups are sent by _then_wake, in the event loop
        self._addresses: dict[str, str] = {}  # node id -> its socket (a hash of the path and the id)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(sql, params)

    def begin(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def _begin_at_once(self) -> bool:
        """``BEGIN IMMEDIATE`` if no other connection holds the write lock; False (nothing begun)
        if one does: never waits."""
        self._conn.execute("PRAGMA busy_timeout = 0")
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                return False
            raise
        finally:
            self._conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        return True

    async def begin_batch_async(
        self, session_id: str, node_id: str, epoch: int, renew: float | None
    ) -> list[Request]:
        """The owner's fence-and-lock in the event loop when the write lock is free at once.

        Without an fsync it is a few page-cache reads and writes (about 0.05 ms), less than
        the two thread hops it saves; it never waits in the event loop: when another process
        holds the write lock (a host inserting), it goes to a worker thread and waits there.
        """
        if self.holds_session_lock(session_id) and self._begin_at_once():
            return self._fence_and_lock(session_id, node_id, epoch, renew, begun=True)
        return await super().begin_batch_async(session_id, node_id, epoch, renew)

    def commit(self) -> None:
        self._conn.execute("COMMIT")
        if not self._deferring:
            self._send_nudges()

    def _send_nudges(self) -> None:
        nudges, self.nudges = self.nudges, []
        for node_id, payload in nudges:
            self._send(node_id, payload)

    async def _then_wake(self, function: Callable[..., _T], *args: Any) -> _T:
        """Run a transaction on a worker thread, then send the wake-ups it committed from the event
        loop. Sent from the thread, a datagram wakes its node while this thread still runs Python
        (returning its result), and a node in this process waits for the GIL: about 0.05 ms."""
        self._deferring = True
        try:
            result = await anyio.to_thread.run_sync(function, *args)
        finally:
            self._deferring = False
            self._send_nudges()  # a rolled-back transaction left none
        return result

    def submit(
        self, node_id: str, items: Sequence[Submission], *, begun: bool = False
    ) -> list[Receipt | int]:
        """A host's requests, committed without an fsync of their own (``synchronous=NORMAL`` for
        this one transaction).

        They survive ``kill -9`` of any process (the kernel holds the WAL). Only a power loss or
        an OS crash can lose them, and that stops every process of the machine with them,
        their host included, before any owner decided them: the owner's decision commit is
        fsynced, and an fsync of the WAL makes every frame before it durable. Nothing any
        process was told is lost. Withdrawals, decisions, receipts and leases keep
        ``synchronous=FULL``. (On PostgreSQL, with hosts on other machines, every commit
        stays synchronous.)
        """
        if begun:
            return super().submit(node_id, items, begun=True)
        with self._unsynced(checkpoint=True):
            return super().submit(node_id, items)

    @contextlib.contextmanager
    def _unsynced(self, *, checkpoint: bool) -> Iterator[None]:
        """Commits without fsync; ``checkpoint=False``: and without running a checkpoint (whose
        fsyncs are left to the next commit made on a worker thread)."""
        self._conn.execute("PRAGMA synchronous = NORMAL")
        if not checkpoint:
            self._conn.execute("PRAGMA wal_autocheckpoint = 0")
        try:
            yield
        finally:
            self._conn.execute("PRAGMA synchronous = FULL")
            if not checkpoint:
                self._conn.execute(f"PRAGMA wal_autocheckpoint = {_AUTOCHECKPOINT}")

    async def submit_async(self, node_id: str, items: Sequence[Submission]) -> list[Receipt | int]:
        """In the event loop when the write lock is free at once: without an fsync or a checkpoint
        the insert is page-cache work (about 0.05 ms), less than the thread hops it saves. (The
        first commit after a checkpoint starts the WAL over and syncs its header, at any
        ``synchronous``: about once per hundred inserts, a fraction of a millisecond.)"""
        with self._unsynced(checkpoint=False):
            begun = self._begin_at_once()
            if begun:
                try:
                    self._deferring = True
                    return self.submit(node_id, items, begun=True)
                finally:
                    self._deferring = False
                    self._send_nudges()
        return await self._then_wake(self.submit, node_id, items)

    async def finish_batch_async(
        self,
        session_id: str,
        epoch: int,
        changes: Sequence[JournalChange],
        decisions: Sequence[Decision],
        generation_id: tuple[str | None] | None,
    ) -> None:
        await self._then_wake(self.finish_batch, session_id, epoch, changes, decisions, generation_id)

    def rollback(self) -> None:
        self.nudges.clear()
        if self._conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")

    def now(self) -> float:
        return time.time()

    def table_exists(self, name: str) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", (name,)
        ).fetchone()
        return row is not None

    # -- liveness: one flock per session beside the store --------------------------------

    def _lock_path(self, session_id: str) -> str:
        folder = self.path + ".locks"
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, _hash(session_id, 32))

    def try_session_lock(self, session_id: str) -> bool:
        if session_id in self._locks:
            return True
        fd = os.open(self._lock_path(session_id), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._locks[session_id] = fd
        return True

    def release_session_lock(self, session_id: str) -> None:
        fd = self._locks.pop(session_id, None)
        if fd is not None:
            os.close(fd)

    def holds_session_lock(self, session_id: str) -> bool:
        return session_id in self._locks

    def end_holder(self, session_id: str, holder_pid: int | None) -> bool:
        return False  # a stopped process keeps its flock; fencing by epoch still holds

    def my_pid(self) -> int | None:
        return os.getpid()

    # -- wake-ups ------------------------------------------------------------------------

    def notify(self, node_id: str, payload: str) -> None:
        self.nudges.append((node_id, payload))

    def _send(self, node_id: str, payload: str) -> None:
        if self._sender is None:
            self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sender.setblocking(False)
        # a node that is gone or busy misses a wake-up: it polls the tables anyway
        address = self._addresses.get(node_id)
        if address is None:
            address = self._addresses[node_id] = node_socket(self.path, node_id)
        with contextlib.suppress(OSError):
            self._sender.sendto(payload.encode("utf-8", "surrogatepass"), address)

    def close(self) -> None:
        for session_id in list(self._locks):
            self.release_session_lock(session_id)
        if self._sender is not None:
            self._sender.close()
        self._conn.close()


class SQLiteFleet(Fleet):
    """A node of a fleet on one machine: processes share one SQLite file (no server).

    >>> async with SQLiteFleet("fleet.db") as fleet:                 # doctest: +SKIP
    ...     capability = await fleet.capability("chat-42")
    ...     receipt = await capability["submit"](Input("steer", "Use X", id="m-1"), generation_id)
    """

    def __init__(self, path: str | os.PathLike[str], **options: Any) -> None:
        super().__init__(**options)
        self.path: str = os.fspath(path)
        if self.path == ":memory:" or self.path.startswith("file:"):
            raise ValueError("a SQLite fleet needs a file path that every process opens")

    @property
    def location(self) -> str:
        return repr(self.path)

    def _connect(self) -> StoreConnection:
        return SQLiteConnection(self.path)

    def _errors(self) -> tuple[type[Exception], ...]:
        return (sqlite3.Error, OSError)

    def _free_socket_path(self) -> str:
        folder = socket_dir(self.path)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        path = node_socket(self.path, self.node_id)
        if os.path.exists(path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                probe.sendto(b"", path)
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)  # left by a process that died
            else:
                raise FleetError(f"node id {self.node_id!r} is in use by another process on this store")
            finally:
                probe.close()
        return path

    async def _listen(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        path = await anyio.to_thread.run_sync(self._free_socket_path)
        sock = await anyio.create_unix_datagram_socket(local_path=path)
        try:
            task_status.started()
            async with sock:
                while True:
                    data, _ = await sock.receive()
                    if data:
                        self._dispatch(data.decode("utf-8", "surrogatepass"))
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
