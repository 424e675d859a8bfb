"""Durable receipts: a crash-safe SQLite journal of every disposition change (C22, C23).

Theory of operation
-------------------
A ``ReceiptJournal`` owns one SQLite file (stdlib ``sqlite3``, WAL,
``synchronous=FULL``) and an exclusive lock beside it (``PATH.lock``, released by
the kernel when the process dies). It attaches to ``LiveRuntime``s: a listener
turns each disposition event (``steering.accepted``/``applied``/``held``/``unknown``)
into a numbered *change* appended to an in-memory queue, in event order, and the
runtime's write barrier appends a ``writing`` mark for a batch of inputs and
waits until that mark is durable before the loop's writer sees any of them.

One committer task takes everything queued (up to ``max_batch``) and commits it in
one ``BEGIN IMMEDIATE`` transaction on a worker thread, one thread at a time
(group commit: many changes, one fsync). A commit that has begun is shielded from
cancellation and always runs to its end. Only when it has returned do the changes
count as durable: ``durable_through`` moves, waiters keyed by change number are
woken in order, and durable listeners hear about them. A failed commit (disk full,
I/O error) makes the journal *failed*: waiters raise ``JournalError``, the barrier
refuses every later write, ``journal.failed`` is published on each attached
runtime's event stream, and nothing more is ever reported durable.

Opening a file runs ``PRAGMA integrity_check`` (corruption raises
``JournalCorruptError``, no guessing), then finalises what a dead process left
``queued``: never marked ``writing`` -> ``held``, marked -> ``unknown``, both with
reason ``runtime-lost``. The journal never records an input the runtime refused;
it stores a SHA-256 digest of the content, not the text.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import logging
import os
import sqlite3
import time as _time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Protocol

import anyio
import anyio.abc
import anyio.lowlevel
import attrs
from sortedcontainers import SortedDict

from ._core import InputRecord, InputState
from ._errors import LiveSteeringError
from ._runtime import LiveRuntime
from ._types import Disposition, HoldReason, Input, Receipt

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no cross-process lock
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "ReceiptJournal",
    "JournalChange",
    "ChangeKind",
    "JournalEntry",
    "JournalStatistics",
    "RecoveryReport",
    "JournalConnection",
    "connect",
    "read_receipts",
    "JournalError",
    "JournalCorruptError",
    "JournalBusyError",
]

DEFAULT_MAX_BATCH: Final = 4_096
#: ``PRAGMA application_id`` of a receipt journal ("LSJ1"), so a foreign SQLite file is refused.
APPLICATION_ID: Final = 0x4C534A31
SCHEMA_VERSION: Final = 1

_log = logging.getLogger("live_steering.journal")

_SCHEMA: Final = (
    """
    CREATE TABLE receipts (
        runtime_no INTEGER NOT NULL,   -- which attached runtime (identities are per runtime)
        input_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        generation_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        digest TEXT NOT NULL,          -- sha256 of kind, NUL, text (UTF-8)
        disposition TEXT NOT NULL CHECK (disposition IN ('queued', 'applied', 'held', 'unknown')),
        marked INTEGER NOT NULL DEFAULT 0,  -- 1: the write-ahead mark is durable (maybe written)
        reason TEXT,
        accepted_sequence INTEGER NOT NULL,  -- admission order within the runtime
        sequence INTEGER,              -- event sequence of the last disposition change, if known
        accepted_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (runtime_no, input_id)
    )
    """,
    """
    CREATE TABLE changes (
        id INTEGER PRIMARY KEY,
        runtime_no INTEGER NOT NULL,
        input_id TEXT NOT NULL,
        generation_id TEXT NOT NULL,
        change TEXT NOT NULL,
        disposition TEXT NOT NULL,
        reason TEXT,
        sequence INTEGER,
        time REAL NOT NULL
    )
    """,
    "CREATE INDEX receipts_by_disposition ON receipts (disposition)",
)


# -- errors -------------------------------------------------------------------------------


class JournalError(LiveSteeringError, RuntimeError):
    """The receipt journal cannot do what was asked (a failed commit, a closed journal).

    After a failed commit the journal stays failed: nothing more is reported
    durable. ``sqlite_error`` names the SQLite error (``"SQLITE_FULL"``, ...) when known.
    """

    def __init__(self, message: str, *, sqlite_error: str | None = None) -> None:
        super().__init__(message)
        self.sqlite_error = sqlite_error


class JournalCorruptError(JournalError):
    """The journal file is damaged (``integrity_check`` failed) or is not a receipt journal."""


class JournalBusyError(JournalError):
    """Another open journal (in this or another process) holds the file's lock."""


# -- values -------------------------------------------------------------------------------


class ChangeKind(enum.StrEnum):
    """What one journaled change records."""

    ACCEPTED = "accepted"
    """Admitted: a new row, ``queued``."""
    WRITING = "writing"
    """The write-ahead mark: about to be handed to the writer, still ``queued``."""
    APPLIED = "applied"
    HELD = "held"
    UNKNOWN = "unknown"
    RECOVERED = "recovered"
    """Finalised by recovery after process loss (``held``/``unknown``, ``runtime-lost``)."""


_EVENT_CHANGES: Final = {
    "steering.accepted": ChangeKind.ACCEPTED,
    "steering.applied": ChangeKind.APPLIED,
    "steering.held": ChangeKind.HELD,
    "steering.unknown": ChangeKind.UNKNOWN,
}
_DISPOSITION_OF_CHANGE: Final = {
    ChangeKind.ACCEPTED: Disposition.QUEUED,
    ChangeKind.WRITING: Disposition.QUEUED,
    ChangeKind.APPLIED: Disposition.APPLIED,
    ChangeKind.HELD: Disposition.HELD,
    ChangeKind.UNKNOWN: Disposition.UNKNOWN,
}


@attrs.frozen
class JournalChange:
    """One disposition change, as queued for commit and as reported once durable."""

    number: int
    """Journal-wide change number, increasing in commit order (what ``wait_durable(int)`` takes)."""
    runtime_no: int
    """Which attached runtime it belongs to (input ids are unique per runtime)."""
    session_id: str
    input_id: str
    generation_id: str
    change: ChangeKind
    disposition: Disposition
    reason: str | None
    kind: str
    """The input's kind (``"steer"``)."""
    digest: str
    """Hex SHA-256 of ``kind``, a NUL and ``text``, UTF-8 encoded."""
    sequence: int | None
    """The runtime event's ``sequence``; ``None`` for a write-ahead mark or a change seen at attach."""
    admission: int
    """The input's admission order within its runtime (1, 2, ...)."""
    time: float
    """The runtime event's ``time`` (seconds since the epoch)."""

    def receipt(self) -> Receipt:
        """The receipt this change makes durable."""
        return Receipt(True, self.input_id, self.generation_id, self.disposition, self.reason)


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@attrs.frozen
class JournalEntry:
    """The durable state of one input, as read back from the file."""

    runtime_no: int
    session_id: str
    input_id: str
    generation_id: str
    kind: str
    digest: str
    disposition: Disposition
    reason: str | None
    marked: bool
    """True when a write-ahead mark is durable: the input may be in a context."""
    accepted_sequence: int
    """Admission order within its runtime."""
    sequence: int | None
    """Event sequence of the last disposition change (``None`` when it predates the attach)."""
    accepted_at: float
    updated_at: float
    """When the disposition last changed (seconds since the epoch)."""

    def receipt(self) -> Receipt:
        return Receipt(True, self.input_id, self.generation_id, self.disposition, self.reason)

    def to_dict(self) -> dict[str, Any]:
        """The C4 wire shape plus ``kind``, ``reason`` (always present) and ``updatedAt`` (ISO 8601)."""
        wire = self.receipt().to_dict()
        wire["kind"] = self.kind
        wire["reason"] = self.reason
        wire["updatedAt"] = _iso(self.updated_at)
        return wire


@attrs.frozen
class RecoveryReport:
    """What opening the file finalised (C23)."""

    held: tuple[str, ...]
    """Input ids left ``queued`` and never marked: now ``held`` (``runtime-lost``)."""
    unknown: tuple[str, ...]
    """Input ids left ``queued`` after their write-ahead mark: now ``unknown`` (``runtime-lost``)."""


@attrs.frozen
class JournalStatistics:
    """A snapshot of a journal's counters; tests and hosts assert on this."""

    path: str
    open: bool
    attached: int
    """Runtimes attached now."""
    enqueued: int
    """Number of the last change queued (changes are numbered from 1)."""
    durable: int
    """Every change up to this number is durable."""
    commits: int
    largest_batch: int
    waiters: int
    """Change numbers some task is waiting on."""
    failed: str | None
    """The error that failed the journal, or ``None``."""
    unjournaled: int
    """Changes seen after the journal failed or closed, never queued."""
    recovered_held: int
    recovered_unknown: int


# -- the SQLite connection ----------------------------------------------------------------


class JournalConnection(Protocol):
    """The part of ``sqlite3.Connection`` the journal uses; tests wrap it to inject faults."""

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> sqlite3.Cursor: ...

    def close(self) -> None: ...


ConnectionFactory = Callable[[str], JournalConnection]


def connect(path: str) -> sqlite3.Connection:
    """The default connection factory: autocommit mode (explicit ``BEGIN IMMEDIATE``).

    The journal uses its connection from one thread at a time (a capacity limiter of
    one), but not always the same thread, hence ``check_same_thread=False``.
    """
    return sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)


def _error_name(exc: sqlite3.Error) -> str | None:
    name = getattr(exc, "sqlite_errorname", None)
    return name if isinstance(name, str) else None


_CORRUPT_ERRORS: Final = frozenset({"SQLITE_CORRUPT", "SQLITE_NOTADB"})


def _translate(exc: sqlite3.Error, doing: str, path: str) -> JournalError:
    name = _error_name(exc)
    base = name.split("_", 2)[:2] if name else []
    family = "_".join(base) if base else None
    message = f"receipt journal {path!r}: {doing} failed: {exc}"
    if family in _CORRUPT_ERRORS:
        return JournalCorruptError(message, sqlite_error=name)
    return JournalError(message, sqlite_error=name)


def _digest(input: Input) -> str:
    return hashlib.sha256(f"{input.kind}\x00{input.text}".encode()).hexdigest()


_ENTRY_COLUMNS: Final = (
    "runtime_no, session_id, input_id, generation_id, kind, digest, disposition, reason, marked, "
    "accepted_sequence, sequence, accepted_at, updated_at"
)


def _entry(row: Sequence[Any]) -> JournalEntry:
    return JournalEntry(
        runtime_no=row[0],
        session_id=row[1],
        input_id=row[2],
        generation_id=row[3],
        kind=row[4],
        digest=row[5],
        disposition=Disposition(row[6]),
        reason=row[7],
        marked=bool(row[8]),
        accepted_sequence=row[9],
        sequence=row[10],
        accepted_at=row[11],
        updated_at=row[12],
    )


def _select(
    conn: JournalConnection,
    *,
    generation_id: str | None = None,
    disposition: Disposition | str | None = None,
    input_id: str | None = None,
) -> list[JournalEntry]:
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (
        ("generation_id", generation_id),
        ("disposition", None if disposition is None else Disposition(disposition).value),
        ("input_id", input_id),
    ):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    sql = f"SELECT {_ENTRY_COLUMNS} FROM receipts{where} ORDER BY runtime_no, accepted_sequence"
    return [_entry(row) for row in conn.execute(sql, params).fetchall()]


def read_receipts(
    path: str | os.PathLike[str],
    *,
    generation_id: str | None = None,
    disposition: Disposition | str | None = None,
) -> list[JournalEntry]:
    """Read a journal file without opening it for writing (no lock, no recovery).

    >>> read_receipts("receipts.db", disposition="held")        # doctest: +SKIP
    [JournalEntry(..., disposition=<Disposition.HELD: 'held'>, reason='runtime-lost', ...)]

    Safe while a live ``ReceiptJournal`` writes the file (WAL readers see the last
    commit). Inputs a dead process left ``queued`` stay ``queued`` here until a
    ``ReceiptJournal`` opens the file and recovers it. Raises ``FileNotFoundError``
    for a missing file and ``JournalCorruptError`` for one that is not a journal.
    """
    text = os.fspath(path)
    if not Path(text).is_file():
        raise FileNotFoundError(f"no receipt journal at {text!r}")
    try:
        conn = sqlite3.connect(f"{Path(text).absolute().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise _translate(exc, "opening", text) from exc
    try:
        application_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if application_id != APPLICATION_ID:
            raise JournalCorruptError(f"{text!r} is not a live_steering receipt journal")
        return _select(conn, generation_id=generation_id, disposition=disposition)
    except sqlite3.Error as exc:
        raise _translate(exc, "reading", text) from exc
    finally:
        conn.close()


# -- the journal --------------------------------------------------------------------------


@attrs.define(eq=False)
class _Attachment:
    runtime_no: int
    runtime: LiveRuntime
    session_id: str
    latest: dict[str, int] = attrs.Factory(dict)
    """input id -> number of the last change queued for it."""
    durable: dict[str, Receipt] = attrs.Factory(dict)
    """input id -> the last receipt made durable."""
    detach: Callable[[], None] | None = None


_UPSERT_ACCEPTED: Final = (
    "INSERT INTO receipts (runtime_no, input_id, session_id, generation_id, kind, digest, disposition, "
    "marked, reason, accepted_sequence, sequence, accepted_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_MARK: Final = (
    "UPDATE receipts SET marked = 1 WHERE runtime_no = ? AND input_id = ? AND disposition = 'queued'"
)
_FINALISE: Final = (
    "UPDATE receipts SET disposition = ?, reason = ?, sequence = ?, updated_at = ? "
    "WHERE runtime_no = ? AND input_id = ? AND disposition = 'queued'"
)
_HISTORY: Final = (
    "INSERT INTO changes (runtime_no, input_id, generation_id, change, disposition, reason, sequence, time) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


class ReceiptJournal:
    """A crash-safe journal of every receipt of the runtimes attached to it (C22, C23).

    >>> async with ReceiptJournal("receipts.db") as journal:     # doctest: +SKIP
    ...     journal.attach(runtime)
    ...     receipt = await runtime.submit_steering(Input("steer", "Use X", id="fix-1"), gen_id)
    ...     await journal.wait_durable("fix-1")     # the queued receipt survives kill -9 now

    ``max_batch`` bounds how many changes one commit carries (``1`` gives one commit
    per change, for comparison). ``connect`` makes the SQLite connection; wrap
    ``live_steering.journal.connect`` to inject faults. ``clock`` dates recovery.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
        connect: ConnectionFactory = connect,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if type(max_batch) is not int or max_batch < 1:
            raise ValueError(f"max_batch must be a positive int, got {max_batch!r}")
        self.path: Final = os.fspath(path)
        if self.path == ":memory:" or self.path.startswith("file:"):
            raise ValueError("the receipt journal needs a file path")
        self._max_batch = max_batch
        self._connect = connect
        self._clock = clock
        self._conn: JournalConnection | None = None
        self._lock_fd: int | None = None
        self._limiter: anyio.CapacityLimiter | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._committer_done: anyio.Event | None = None
        self._wakeup: anyio.Event | None = None
        self._queue: list[JournalChange] = []
        self._number = 0
        self._durable_through = 0
        self._waiters: SortedDict[int, anyio.Event] = SortedDict()
        self._attachments: list[_Attachment] = []
        self._by_no: dict[int, _Attachment] = {}
        self._next_runtime_no = 1
        self._durable_listeners: list[Callable[[Sequence[JournalChange]], None]] = []
        self._failure: JournalError | None = None
        self._open = False
        self._closing = False
        self._commits = 0
        self._largest_batch = 0
        self._unjournaled = 0
        self.recovery: RecoveryReport = RecoveryReport((), ())
        """What opening the file finalised (filled in by ``__aenter__``)."""

    # -- opening, recovery and closing ---------------------------------------------------

    async def __aenter__(self) -> ReceiptJournal:
        if self._open or self._closing:
            raise JournalError("a ReceiptJournal is opened once")
        self._limiter = anyio.CapacityLimiter(1)
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._open_sync, limiter=self._limiter)
        self._open = True
        self._committer_done = anyio.Event()
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._task_group.start_soon(self._committer)
        return self

    def _lock(self) -> None:
        if fcntl is None:  # pragma: no cover
            return
        fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise JournalBusyError(f"receipt journal {self.path!r} is open elsewhere") from None
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def _open_sync(self) -> None:
        self._lock()
        try:
            conn = self._connect(self.path)
        except sqlite3.Error as exc:
            self._unlock()
            raise _translate(exc, "opening", self.path) from exc
        try:
            self._prepare(conn)
        except BaseException as exc:
            conn.close()
            self._unlock()
            if isinstance(exc, sqlite3.Error):
                raise _translate(exc, "opening", self.path) from exc
            raise
        self._conn = conn

    def _prepare(self, conn: JournalConnection) -> None:
        # at most 10 problems: enough to say what is wrong, bounded for a badly damaged file
        check = [str(row[0]) for row in conn.execute("PRAGMA integrity_check(10)").fetchall()]
        if check != ["ok"]:
            detail = "; ".join(check).replace("\n", "; ")
            raise JournalCorruptError(f"receipt journal {self.path!r} is damaged: {detail[:400]}")
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise JournalError(f"receipt journal {self.path!r}: SQLite refused WAL mode ({mode})")
        conn.execute("PRAGMA synchronous=FULL")
        application_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'table'").fetchone()[0]
        if application_id == 0 and tables == 0:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                self._rollback(conn)
                raise
        elif application_id != APPLICATION_ID:
            raise JournalCorruptError(f"{self.path!r} is not a live_steering receipt journal")
        else:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version != SCHEMA_VERSION:
                raise JournalError(
                    f"receipt journal {self.path!r} has schema {version}, not {SCHEMA_VERSION}"
                )
        self._recover(conn)
        last = conn.execute("SELECT max(runtime_no) FROM receipts").fetchone()[0]
        self._next_runtime_no = 1 if last is None else int(last) + 1

    def _recover(self, conn: JournalConnection) -> None:
        """Finalise what a dead process left queued, in one durable transaction (C23)."""
        now = self._now()
        conn.execute("BEGIN IMMEDIATE")
        try:
            rows = conn.execute(
                "SELECT runtime_no, input_id, generation_id, marked FROM receipts "
                "WHERE disposition = 'queued' ORDER BY runtime_no, accepted_sequence"
            ).fetchall()
            held: list[str] = []
            unknown: list[str] = []
            lost = HoldReason.RUNTIME_LOST.value
            for runtime_no, input_id, generation_id, marked in rows:
                # marked: the writer may have been handed it, so never claim it was not (C23)
                disposition = Disposition.UNKNOWN if marked else Disposition.HELD
                (unknown if marked else held).append(input_id)
                conn.execute(
                    "UPDATE receipts SET disposition = ?, reason = ?, updated_at = ? "
                    "WHERE runtime_no = ? AND input_id = ?",
                    (disposition.value, lost, now, runtime_no, input_id),
                )
                conn.execute(
                    _HISTORY,
                    (
                        runtime_no,
                        input_id,
                        generation_id,
                        ChangeKind.RECOVERED.value,
                        disposition.value,
                        lost,
                        None,
                        now,
                    ),
                )
            conn.execute("COMMIT")
        except BaseException:
            self._rollback(conn)
            raise
        self.recovery = RecoveryReport(tuple(held), tuple(unknown))

    def _now(self) -> float:
        return _time.time() if self._clock is None else self._clock()

    @staticmethod
    def _rollback(conn: JournalConnection) -> None:
        # SQLite may have rolled back already (it does after SQLITE_FULL and I/O errors)
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.aclose()
        finally:
            # The committer has ended, so the task group is empty. The body's own exception
            # is not handed to it (it would come back wrapped in an ExceptionGroup).
            assert self._task_group is not None
            await self._task_group.__aexit__(None, None, None)

    async def aclose(self) -> None:
        """Commit what is queued, detach every runtime and close the file. Idempotent.

        A runtime still attached keeps a barrier that refuses to write (``JournalError``):
        no input can reach a context unjournaled. Close the runtime first.
        """
        if not self._open or self._closing:
            return
        with anyio.CancelScope(shield=True):
            self._closing = True
            for attachment in self._attachments:
                self._detach(attachment)
            self._wake()
            assert self._committer_done is not None
            await self._committer_done.wait()
            while self._queue and self._failure is None:  # the committer was cancelled early
                await self._commit_next()
            self._open = False
            self._fail_waiters()
            await anyio.to_thread.run_sync(self._close_sync, limiter=self._limiter)

    def _close_sync(self) -> None:
        try:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        finally:
            self._unlock()

    # -- attaching runtimes ----------------------------------------------------------------

    def attach(self, runtime: LiveRuntime) -> Callable[[], None]:
        """Journal every disposition change of ``runtime`` from now on; returns a detacher.

        Inputs the runtime already holds are journaled first, as they stand. Installs
        the runtime's write barrier (``LiveRuntime.set_write_barrier``), so a runtime
        takes one journal. Detaching leaves a barrier that refuses to write, so no
        input the journal saw queued can reach a context unjournaled; call
        ``runtime.set_write_barrier(None)`` to drop it deliberately.
        """
        if not self._open or self._closing:
            raise JournalError("attach needs an open journal ('async with ReceiptJournal(path)')")
        if not isinstance(runtime, LiveRuntime):
            raise TypeError(f"attach takes a LiveRuntime, got {type(runtime).__name__}")
        if runtime.write_barrier is not None:
            raise ValueError("this runtime already has a write barrier (attached to a journal?)")
        attachment = _Attachment(self._next_runtime_no, runtime, runtime.session_id)
        self._next_runtime_no += 1
        self._attachments.append(attachment)
        self._by_no[attachment.runtime_no] = attachment
        for record in list(_records(runtime).values()):
            self._enqueue(attachment, ChangeKind.ACCEPTED, record, None)
            state = record.state
            if state is InputState.WRITING:
                self._enqueue(attachment, ChangeKind.WRITING, record, None)
            elif state.final:
                reason = None if record.reason is None else record.reason.value
                self._enqueue(attachment, ChangeKind(state.value), record, None, reason)
        remove_listener = runtime.add_listener(lambda event: self._on_event(attachment, event))

        async def barrier(generation_id: str, inputs: Sequence[Input]) -> None:
            await self._mark_writing(attachment, inputs)

        runtime.set_write_barrier(barrier)

        def detach() -> None:
            remove_listener()
            if runtime.write_barrier is barrier:
                runtime.set_write_barrier(self._refusing_barrier)

        attachment.detach = detach
        return lambda: self._detach(attachment)

    def _detach(self, attachment: _Attachment) -> None:
        if attachment.detach is not None:
            attachment.detach()
            attachment.detach = None

    async def _refusing_barrier(self, generation_id: str, inputs: Sequence[Input]) -> None:
        raise JournalError(
            f"receipt journal {self.path!r} was detached or closed; refusing to write unjournaled input"
        )

    def _on_event(self, attachment: _Attachment, event: dict[str, Any]) -> None:
        change = _EVENT_CHANGES.get(event["type"])
        if change is None:
            return
        input_id = event["input_id"]
        record = _records(attachment.runtime).get(input_id)
        if record is None:  # cannot happen for these event types: the core emits them for records
            raise JournalError(f"event {event['type']} for an input the runtime does not hold")
        self._enqueue(attachment, change, record, event["sequence"], event.get("reason"), time=event["time"])

    def _enqueue(
        self,
        attachment: _Attachment,
        change: ChangeKind,
        record: InputRecord,
        sequence: int | None,
        reason: str | None = None,
        *,
        time: float | None = None,
    ) -> int:
        """Queue one change for the next commit; its number. O(1) (the digest is O(text))."""
        if self._failure is not None or self._closing:
            self._unjournaled += 1
            return 0
        self._number += 1
        if time is None:
            time = self._now()
        input = record.input
        self._queue.append(
            JournalChange(
                number=self._number,
                runtime_no=attachment.runtime_no,
                session_id=attachment.session_id,
                input_id=input.id,
                generation_id=record.generation_id,
                change=change,
                disposition=_DISPOSITION_OF_CHANGE[change],
                reason=reason,
                kind=input.kind,
                digest=_digest(input),
                sequence=sequence,
                admission=record.sequence,
                time=time,
            )
        )
        attachment.latest[input.id] = self._number
        self._wake()
        return self._number

    async def _mark_writing(self, attachment: _Attachment, inputs: Sequence[Input]) -> None:
        """The write barrier: one durable commit covers the whole batch's marks."""
        self._raise_if_unusable()
        records = _records(attachment.runtime)
        number = 0
        for input in inputs:
            number = self._enqueue(attachment, ChangeKind.WRITING, records[input.id], None)
        await self._wait_number(number)

    # -- durability ------------------------------------------------------------------------

    def add_durable_listener(self, listener: Callable[[Sequence[JournalChange]], None]) -> Callable[[], None]:
        """Call ``listener(changes)`` after each commit returned, with the changes it made durable.

        Called in the event loop, in change order; keep it quick. Returns a remover.
        """
        self._durable_listeners.append(listener)

        def remove() -> None:
            if listener in self._durable_listeners:
                self._durable_listeners.remove(listener)

        return remove

    async def wait_durable(self, target: str | int, *, session_id: str | None = None) -> None:
        """Return once a change is durable: it survives ``kill -9`` from then on.

        ``target`` is an input id (everything journaled for it so far, for example its
        ``queued`` receipt right after the submit) or a change number (``JournalChange.number``,
        ``statistics().enqueued``). ``session_id`` picks the runtime when several attached
        runtimes accepted the same id. Raises ``KeyError`` for an input the journal never
        saw (a refused one), ``JournalError`` if the journal failed or closed first.
        """
        if isinstance(target, str):
            number = self._attachment_of(target, session_id).latest[target]
        elif type(target) is int:
            if target > self._number:
                raise ValueError(f"change {target} was never queued (last is {self._number})")
            number = target
        else:
            raise TypeError("wait_durable takes an input id (str) or a change number (int)")
        await self._wait_number(number)

    def durable_receipt(self, input_id: str, *, session_id: str | None = None) -> Receipt | None:
        """The last receipt of ``input_id`` known durable, or ``None`` if none is yet. O(1)."""
        return self._attachment_of(input_id, session_id).durable.get(input_id)

    async def flush(self) -> None:
        """Wait until every change queued so far is durable."""
        await self._wait_number(self._number)

    def _attachment_of(self, input_id: str, session_id: str | None) -> _Attachment:
        found = [
            a
            for a in self._attachments
            if input_id in a.latest and (session_id is None or a.session_id == session_id)
        ]
        if not found:
            raise KeyError(input_id)
        if len(found) > 1:
            if session_id is None:
                raise ValueError(f"input id {input_id!r} is journaled for several runtimes; pass session_id")
            found = found[-1:]  # the same session attached twice: the latest runtime
        return found[0]

    def _failed(self) -> JournalError:
        """A fresh error for each caller (re-raising one instance would pile up tracebacks)."""
        assert self._failure is not None
        error = JournalError(str(self._failure), sqlite_error=self._failure.sqlite_error)
        error.__cause__ = self._failure
        return error

    def _raise_if_unusable(self) -> None:
        if self._failure is not None:
            raise self._failed()
        if not self._open or self._closing:
            raise JournalError(f"receipt journal {self.path!r} is closed")

    async def _wait_number(self, number: int) -> None:
        # A failed journal reports nothing durable any more, not even what was before.
        if self._failure is not None:
            raise self._failed()
        if number <= self._durable_through:
            await anyio.lowlevel.checkpoint()
            return
        if not self._open or self._closing:
            raise JournalError(f"receipt journal {self.path!r} is closed")
        waiter = self._waiters.get(number)
        if waiter is None:
            waiter = self._waiters[number] = anyio.Event()
        await waiter.wait()
        if self._failure is not None:
            raise self._failed()
        if number > self._durable_through:
            raise JournalError(f"receipt journal {self.path!r} closed before change {number} was durable")

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    # -- the committer ---------------------------------------------------------------------

    async def _committer(self) -> None:
        assert self._committer_done is not None
        try:
            while self._failure is None:
                if not self._queue:
                    if self._closing:
                        return
                    self._wakeup = anyio.Event()
                    try:
                        await self._wakeup.wait()
                    finally:
                        self._wakeup = None
                    continue
                await self._commit_next()
        finally:
            self._committer_done.set()

    async def _commit_next(self) -> None:
        """Commit the next group of queued changes; never abandoned once begun."""
        batch = self._queue[: self._max_batch]
        del self._queue[: len(batch)]
        with anyio.CancelScope(shield=True):
            try:
                await anyio.to_thread.run_sync(self._commit_sync, batch, limiter=self._limiter)
            except sqlite3.Error as exc:
                self._fail(_translate(exc, "commit", self.path), lost=len(batch) + len(self._queue))
                return
        self._commits += 1
        self._largest_batch = max(self._largest_batch, len(batch))
        self._durable_through = batch[-1].number
        for change in batch:
            self._by_no[change.runtime_no].durable[change.input_id] = change.receipt()
        waiters = self._waiters
        while waiters and waiters.peekitem(0)[0] <= self._durable_through:
            waiters.popitem(0)[1].set()
        for listener in list(self._durable_listeners):
            try:
                listener(batch)
            except Exception:
                _log.exception("receipt journal durable listener %r raised", listener)

    def _commit_sync(self, batch: Sequence[JournalChange]) -> None:
        conn = self._conn
        assert conn is not None
        conn.execute("BEGIN IMMEDIATE")
        try:
            for c in batch:
                if c.change is ChangeKind.ACCEPTED:
                    conn.execute(
                        _UPSERT_ACCEPTED,
                        (
                            c.runtime_no,
                            c.input_id,
                            c.session_id,
                            c.generation_id,
                            c.kind,
                            c.digest,
                            c.disposition.value,
                            0,
                            None,
                            c.admission,
                            c.sequence,
                            c.time,
                            c.time,
                        ),
                    )
                elif c.change is ChangeKind.WRITING:
                    conn.execute(_MARK, (c.runtime_no, c.input_id))
                else:
                    conn.execute(
                        _FINALISE,
                        (c.disposition.value, c.reason, c.sequence, c.time, c.runtime_no, c.input_id),
                    )
                conn.execute(
                    _HISTORY,
                    (
                        c.runtime_no,
                        c.input_id,
                        c.generation_id,
                        c.change.value,
                        c.disposition.value,
                        c.reason,
                        c.sequence,
                        c.time,
                    ),
                )
            conn.execute("COMMIT")
        except BaseException:
            self._rollback(conn)
            raise

    def _fail(self, error: JournalError, *, lost: int) -> None:
        """A commit failed: nothing more is durable; tell waiters and event streams."""
        self._failure = error
        self._unjournaled += lost
        self._queue.clear()
        self._fail_waiters()
        _log.error("%s", error)
        for attachment in self._attachments:
            _publish(
                attachment.runtime,
                "journal.failed",
                {
                    "path": self.path,
                    "error": str(error),
                    "sqlite_error": error.sqlite_error,
                    "durable_through": self._durable_through,
                },
            )

    def _fail_waiters(self) -> None:
        waiters = self._waiters
        while waiters:
            waiters.popitem(0)[1].set()

    # -- reading ---------------------------------------------------------------------------

    async def entries(
        self,
        *,
        generation_id: str | None = None,
        disposition: Disposition | str | None = None,
        input_id: str | None = None,
    ) -> list[JournalEntry]:
        """The durable state of the journaled inputs (all runtimes), read on the journal's thread.

        Works on a failed journal too (it shows what is durable), not on a closed one.
        """
        if not self._open or self._closing:
            raise JournalError(f"receipt journal {self.path!r} is closed")
        conn = self._conn
        assert conn is not None

        def read() -> list[JournalEntry]:
            return _select(conn, generation_id=generation_id, disposition=disposition, input_id=input_id)

        try:
            return await anyio.to_thread.run_sync(read, limiter=self._limiter)
        except sqlite3.Error as exc:
            raise _translate(exc, "reading", self.path) from exc

    def statistics(self) -> JournalStatistics:
        return JournalStatistics(
            path=self.path,
            open=self._open,
            attached=sum(1 for a in self._attachments if a.detach is not None),
            enqueued=self._number,
            durable=self._durable_through,
            commits=self._commits,
            largest_batch=self._largest_batch,
            waiters=len(self._waiters),
            failed=None if self._failure is None else str(self._failure),
            unjournaled=self._unjournaled,
            recovered_held=len(self.recovery.held),
            recovered_unknown=len(self.recovery.unknown),
        )


# -- the two places this module reaches into the runtime ----------------------------------
# The journal needs each accepted input's kind and text (events carry only ids) and a
# way to put ``journal.failed`` on the runtime's own event stream with a proper sequence.


def _records(runtime: LiveRuntime) -> dict[str, InputRecord]:
    return runtime._core.identities


def _publish(runtime: LiveRuntime, type_: str, fields: dict[str, Any]) -> None:
    runtime._core._emit(type_, fields)
