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
import errno
import fcntl
import hashlib
import logging
import os
import re
import socket
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import anyio
import anyio.abc
import anyio.to_thread

from .._processes import process_alive
from .._types import Receipt
from ..journal import JournalChange
from . import _threads
from ._node import Fleet
from ._store import Decision, Dialect, FleetError, Request, StoreConnection, Submission

_T = TypeVar("_T")

_log = logging.getLogger("live_steering.fleet")

#: SQLite's default: a commit that leaves this many WAL pages runs a checkpoint.
_AUTOCHECKPOINT: Final = 1_000

#: Wake-ups read in one step of a node's listener before it yields (a flood never starves the loop).
_DRAIN: Final = 64

#: The receive buffer for one wake-up (replies are cut into chunks of at most ``MAX_PAYLOAD`` bytes).
_MAX_DATAGRAM: Final = 65_536

#: How long a statement waits for another process's write lock (on a worker thread).
_BUSY_TIMEOUT_MS: Final = 30_000


def _hash(text: str, n: int = 20) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


def socket_dir(path: str) -> str:
    """Where the nodes of the store at ``path`` bind their wake-up sockets (short enough for AF_UNIX).

    Named from the store's real path (symlinks and ``..`` resolved), so every name of one file
    reaches the same nodes: named from the path as given, a host that opened the store through
    a symlink sent its wake-ups where no owner listened (each submit then waited for a poll)."""
    return os.path.join(tempfile.gettempdir(), f"live-steering-{_hash(os.path.realpath(path), 16)}")


def node_socket(path: str, node_id: str) -> str:
    return os.path.join(socket_dir(path), f"{_hash(node_id)}.sock")


#: A socket folder's name (``socket_dir``): nothing else in the temp folder is ever swept.
_SOCKET_FOLDER: Final = re.compile(r"live-steering-[0-9a-f]{16}")

#: Socket folders one node's sweep looks into at most (a bound on the work of one open).
_SWEEP_LIMIT: Final = 256


def _alive(path: str) -> bool:
    """True unless ``path`` is a socket no process listens on (left by a node that died: a
    datagram to it is refused). An empty datagram is what a live node ignores."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    probe.setblocking(False)
    try:
        probe.sendto(b"", path)
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError:  # busy (a stopped node's full buffer), not ours to judge: alive
        return True
    finally:
        probe.close()
    return True


def sweep_dead(folder: str, *, keep: str | None = None) -> None:
    """Remove the sockets of dead nodes (``kill -9``, a crash) from a socket folder, and the folder
    once empty (unless it is ``keep``). Never raises: another node may sweep it at the same time."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if name.endswith(".sock") and not _alive(path := os.path.join(folder, name)):
            with contextlib.suppress(OSError):
                os.unlink(path)
    if folder != keep:
        with contextlib.suppress(OSError):  # not empty: a live node listens there
            os.rmdir(folder)


def sweep_temp(keep: str) -> None:
    """Sweep every socket folder of this user in the temp folder (``sweep_dead``): the nodes of
    a store that no process opens again (a test's, a crashed tool's) leave none behind for good.
    ``keep``: the folder this node is about to bind in (left in place, swept of dead sockets)."""
    root = tempfile.gettempdir()
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    swept = 0
    for entry in entries:
        if swept >= _SWEEP_LIMIT:
            break
        if not _SOCKET_FOLDER.fullmatch(entry.name):
            continue
        with contextlib.suppress(OSError):
            if (
                not entry.is_dir(follow_symlinks=False)
                or entry.stat(follow_symlinks=False).st_uid != os.getuid()
            ):
                continue
            swept += 1
            sweep_dead(entry.path, keep=keep)


#: What a transaction runs under: ``synchronous``, ``busy_timeout`` (ms), ``wal_autocheckpoint``.
_Settings = tuple[str, int, int]

#: On a worker thread: wait for another process's write lock, fsync the commit, checkpoint.
_PATIENT: Final[_Settings] = ("FULL", _BUSY_TIMEOUT_MS, _AUTOCHECKPOINT)
#: A host's insert on a worker thread: as patient, without an fsync (see ``submit``).
_PATIENT_UNSYNCED: Final[_Settings] = ("NORMAL", _BUSY_TIMEOUT_MS, _AUTOCHECKPOINT)
#: The owner's fence in the event loop: never wait for the lock; its commit, made on a worker
#: thread, fsyncs and checkpoints (the write lock is held by then: nothing more to wait for).
_AT_ONCE: Final[_Settings] = ("FULL", 0, _AUTOCHECKPOINT)
#: A host's insert in the event loop: no wait, no fsync, no checkpoint (its fsyncs are left to
#: the next commit made on a worker thread).
_AT_ONCE_UNSYNCED: Final[_Settings] = ("NORMAL", 0, 0)


#: SQLite's fragments of the shared statements: no row locks (``BEGIN IMMEDIATE`` holds the whole
#: store, which also serialises schema changes), this machine's clock, wake-ups after the commit.
DIALECT: Final = Dialect(serial="INTEGER", now="((julianday('now') - 2440587.5) * 86400.0)")


class SQLiteConnection(StoreConnection):
    dialect = DIALECT

    def __init__(self, path: str) -> None:
        super().__init__()
        # Everything derived from the store's path (the liveness locks' folder, the wake-up
        # sockets, SQLite's WAL and shared-memory files) comes from its real path: opened through
        # a symlink, a node named the lock folder after the link, so a live owner's flock was
        # not found (it looked dead) and a second owner through the link took its live lease.
        self.path = os.path.realpath(path)
        self._conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=_BUSY_TIMEOUT_MS / 1000
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        found = os.stat(self.path)
        self._file = (found.st_dev, found.st_ino)
        """The file opened: SQLite goes on writing to it once it is unlinked or replaced, while the
        path names another file or none (and the WAL beside the path is no longer its)."""
        self._settings: _Settings = _PATIENT
        self._locks: dict[str, int] = {}
        self._sender: socket.socket | None = None
        self._addresses: dict[str, str] = {}  # node id -> its socket (a hash of the path and the id)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(sql, params)

    def _settle(self, settings: _Settings) -> None:
        """Put the connection under ``settings`` before a transaction begins, changing only what
        differs: a PRAGMA costs about 8 us in the event loop, and a run of the same kind of
        transaction (an owner's fences, a host's inserts) then pays none."""
        synchronous, busy, checkpoint = settings
        now_synchronous, now_busy, now_checkpoint = self._settings
        if synchronous != now_synchronous:
            self._conn.execute(f"PRAGMA synchronous = {synchronous}")
        if busy != now_busy:
            self._conn.execute(f"PRAGMA busy_timeout = {busy}")
        if checkpoint != now_checkpoint:
            self._conn.execute(f"PRAGMA wal_autocheckpoint = {checkpoint}")
        self._settings = settings

    def begin(self) -> None:
        self._settle(_PATIENT)
        self._conn.execute("BEGIN IMMEDIATE")

    def begin_read(self) -> None:
        # a read never waits for a writer in WAL mode, but may for a rebuild of the WAL index
        self._settle((self._settings[0], _BUSY_TIMEOUT_MS, self._settings[2]))
        self._conn.execute("BEGIN")

    def _begin_at_once(self, settings: _Settings) -> bool:
        """``BEGIN IMMEDIATE`` if no other connection holds the write lock; False (nothing begun)
        if one does: never waits."""
        self._settle(settings)
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                return False
            raise
        return True

    async def begin_batch_async(
        self, session_id: str, node_id: str, epoch: int, renew: float | None
    ) -> list[Request]:
        """The owner's fence-and-lock in the event loop when the write lock is free at once.

        Without an fsync it is a few page-cache reads and writes (about 0.05 ms), less than
        the two thread hops it saves; it never waits in the event loop: when another process
        holds the write lock (a host inserting), it goes to a worker thread and waits there.
        """
        if self.holds_session_lock(session_id) and self._begin_at_once(_AT_ONCE):
            return self._fence_and_lock(session_id, node_id, epoch, renew, begun=True)
        return await _threads.run_sync(self.begin_batch, session_id, node_id, epoch, renew)

    def commit(self) -> None:
        self._conn.execute("COMMIT")
        try:
            self._check_file()
        except FleetError:
            self.nudges.clear()
            raise
        self._send_nudges()

    def _check_file(self) -> None:
        """``FleetError`` unless the store's path still names the file this connection writes (one
        ``stat``, after each commit): a store unlinked or replaced under a running node reports
        nothing durable from then on (its owner fails, its hosts' submits raise), as the receipt
        journal does (C23, C27), instead of receipts no node could ever read again."""
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            raise FleetError(
                f"the fleet store {self.path!r} was unlinked or renamed while open; "
                "nothing written since is reported durable"
            ) from None
        except OSError as exc:
            raise FleetError(f"the fleet store {self.path!r}: cannot stat it: {exc.strerror or exc}") from exc
        if (found.st_dev, found.st_ino) != self._file:
            raise FleetError(
                f"the fleet store {self.path!r} was replaced by another file while open; "
                "nothing written since is reported durable"
            )

    def _send_nudges(self) -> None:
        nudges, self.nudges = self.nudges, []
        for node_id, payload in nudges:
            self._send(node_id, payload)

    async def _then_wake(self, function: Callable[..., _T], *args: Any) -> _T:
        """Run a transaction on a pooled worker thread (``_threads``: a cheaper hand-off than
        anyio's). The thread sends the wake-ups it committed as soon as the commit returns:
        a requester in another process is woken while the result is on its way back here."""
        try:
            return await _threads.run_sync(function, *args)
        finally:
            self._send_nudges()  # none left unless the call failed before its commit sent them

    def submit(
        self, node_id: str, items: Sequence[Submission], *, begun: bool = False
    ) -> list[Receipt | int]:
        """A host's requests, committed without an fsync of their own (``synchronous=NORMAL``).

        They survive ``kill -9`` of any process (the kernel holds the WAL). Only a power loss or
        an OS crash can lose them, and that stops every process of the machine with them,
        their host included, before any owner decided them: the owner's decision commit is
        fsynced, and an fsync of the WAL makes every frame before it durable. Nothing any
        process was told is lost. Withdrawals, decisions, receipts and leases keep
        ``synchronous=FULL``. (On PostgreSQL, with hosts on other machines, every commit
        stays synchronous.)
        """
        if not begun:
            self._settle(_PATIENT_UNSYNCED)
            self._conn.execute("BEGIN IMMEDIATE")
        return super().submit(node_id, items, begun=True)

    async def submit_async(self, node_id: str, items: Sequence[Submission]) -> list[Receipt | int]:
        """In the event loop when the write lock is free at once: without an fsync or a checkpoint
        the insert is page-cache work (about 0.05 ms), less than the thread hops it saves. (The
        first commit after a checkpoint starts the WAL over and syncs its header, at any
        ``synchronous``: about once per hundred inserts, a fraction of a millisecond.)"""
        if self._begin_at_once(_AT_ONCE_UNSYNCED):
            return self.submit(node_id, items, begun=True)
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

    async def rollback_async(self) -> None:
        await _threads.run_sync(self.rollback)

    def rollback(self) -> None:
        self.nudges.clear()
        if self._conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")

    def now(self) -> float:
        return time.time()

    def sqlite_error(self, exc: BaseException) -> str | None:
        name = getattr(exc, "sqlite_errorname", None) if isinstance(exc, sqlite3.Error) else None
        return name if isinstance(name, str) else None

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

    def holder_gone(self, holder_pid: int | None, *, expired: bool) -> bool:
        # One machine: the holder's process answers for itself (a store of an older take that
        # recorded none falls back on the lease's expiry). This process's own pid is alive.
        if holder_pid is None:
            return expired
        return holder_pid != os.getpid() and not process_alive(holder_pid)

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
        if self.path in ("", ":memory:") or self.path.startswith("file:"):
            raise ValueError(f"a SQLite fleet needs a file path that every process opens, got {self.path!r}")

    @property
    def location(self) -> str:
        return repr(self.path)

    @property
    def _journal_path(self) -> str:
        return self.path  # as a ReceiptJournal's ``journal.failed`` names its file

    def _connect(self) -> StoreConnection:
        return SQLiteConnection(self.path)

    def _errors(self) -> tuple[type[Exception], ...]:
        return (sqlite3.Error, OSError)

    def _free_socket_path(self) -> str:
        folder = socket_dir(self.path)
        sweep_temp(keep=folder)  # the sockets and folders that nodes which died left behind
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
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        path: str | None = None  # set once this node's socket is bound: its file to remove
        try:
            sock.setblocking(False)
            for attempt in range(5):
                free = await anyio.to_thread.run_sync(self._free_socket_path)
                try:
                    sock.bind(free)
                except FileNotFoundError:  # another node's sweep removed the folder just now
                    if attempt == 4:
                        raise
                except OSError as exc:
                    if exc.errno != errno.EADDRINUSE:
                        raise
                    # bound by another process between the probe and here: never unlinked here
                    raise FleetError(
                        f"node id {self.node_id!r} is in use by another process on this store"
                    ) from exc
                else:
                    path = free
                    break
            task_status.started()
            while True:
                # Each wake-up is handled in the step that read it, and the socket re-armed
                # before the next yield: the task it wakes (an owner about to commit) runs
                # next, with no turn of this task before it (anyio's ``receive`` starts with a
                # checkpoint, about 0.03 ms on asyncio, right on a remote submit's path).
                await anyio.wait_readable(sock)
                for _ in range(_DRAIN):
                    try:
                        data = sock.recv(_MAX_DATAGRAM)
                    except BlockingIOError:
                        break
                    try:
                        payload = data.decode("utf-8", "surrogatepass")
                    except UnicodeDecodeError:  # no node sends this: any local process can
                        _log.warning("fleet node %r: ignored a wake-up that is not UTF-8", self.node_id)
                        continue
                    if payload:
                        self._dispatch(payload)
        finally:
            sock.close()
            if path is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            # the sockets of nodes of the store that died go too, then the folder once empty (also
            # when this node never bound its socket: the folder it made is not left behind)
            sweep_dead(socket_dir(self.path))
