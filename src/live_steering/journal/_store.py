"""The receipt journal's storage: the SQLite file, its schema, and every statement run on it.

Everything here is synchronous. ``journal.py`` runs ``prepare``/``recover``/``commit`` on its
worker thread, one call at a time, and owns the waiting, the runtimes and the meaning
of "durable"; ``read_receipts`` is the read-only path for the CLI and for hosts. This
module owns what is on disk and decides nothing about inputs: it writes the changes it
is given, in order, and finalises what a dead process left ``queued`` by C23's rules.
A commit returns only when every update touched its one row and the path still names
the file written (``FileIdentity``); a row no journal writes is ``JournalCorruptError``.
"""

from __future__ import annotations

import contextlib
import enum
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Protocol

import attrs

from .._admission import content_digest
from .._errors import LiveSteeringError
from .._types import Disposition, HoldReason, Input, Receipt
from .._validate import optional_id

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no cross-process lock
    fcntl = None  # type: ignore[assignment]

#: ``PRAGMA application_id`` of a receipt journal ("LSJ1"), so a foreign SQLite file is refused.
APPLICATION_ID: Final = 0x4C534A31
SCHEMA_VERSION: Final = 1

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


DISPOSITION_OF_CHANGE: Final = {
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


def iso(timestamp: float) -> str:
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
        """The C4 wire shape plus ``kind`` and ``updatedAt`` (ISO 8601); ``reason`` is always present
        (``None`` while queued or applied), so every row has the same keys in the same order."""
        return {
            "accepted": True,
            "inputId": self.input_id,
            "generationId": self.generation_id,
            "disposition": self.disposition.value,
            "reason": None if self.reason is None else str(self.reason),
            "kind": self.kind,
            "updatedAt": iso(self.updated_at),
        }


@attrs.frozen
class RecoveryReport:
    """What opening the file finalised (C23)."""

    held: tuple[str, ...]
    """Input ids left ``queued`` and never marked: now ``held`` (``runtime-lost``)."""
    unknown: tuple[str, ...]
    """Input ids left ``queued`` after their write-ahead mark: now ``unknown`` (``runtime-lost``)."""


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


def translate(exc: sqlite3.Error, doing: str, path: str) -> JournalError:
    name = _error_name(exc)
    base = name.split("_", 2)[:2] if name else []
    family = "_".join(base) if base else None
    message = f"receipt journal {path!r}: {doing} failed: {exc}"
    if family in _CORRUPT_ERRORS:
        return JournalCorruptError(message, sqlite_error=name)
    return JournalError(message, sqlite_error=name)


def digest(input: Input) -> str:
    """The content digest an identity is compared by (``_admission.content_digest``)."""
    return content_digest(input.kind, input.text)


_ENTRY_COLUMNS: Final = (
    "runtime_no, session_id, input_id, generation_id, kind, digest, disposition, reason, marked, "
    "accepted_sequence, sequence, accepted_at, updated_at"
)


_DISPOSITIONS: Final = {d.value: d for d in Disposition}
_TEXT: Final = (str,)
_MAYBE_TEXT: Final = (str, type(None))
_INTEGER: Final = (int,)
_MAYBE_INTEGER: Final = (int, type(None))
_REAL: Final = (float, int)
#: What each column of a row must hold (the schema is not STRICT, and a damaged file can hold anything).
_ENTRY_TYPES: Final = (
    ("runtime_no", _INTEGER),
    ("session_id", _TEXT),
    ("input_id", _TEXT),
    ("generation_id", _TEXT),
    ("kind", _TEXT),
    ("digest", _TEXT),
    ("disposition", _TEXT),
    ("reason", _MAYBE_TEXT),
    ("marked", _INTEGER),
    ("accepted_sequence", _INTEGER),
    ("sequence", _MAYBE_INTEGER),
    ("accepted_at", _REAL),
    ("updated_at", _REAL),
)


def _damaged(row: Sequence[Any], path: str) -> JournalCorruptError:
    bad = [
        f"{name}={value!r:.60}"
        for (name, types), value in zip(_ENTRY_TYPES, row, strict=True)
        if type(value) not in types or (name == "disposition" and value not in _DISPOSITIONS)
    ]
    where = f"input {row[2]!r:.80}" if type(row[2]) is str else "a row"
    return JournalCorruptError(f"receipt journal {path!r} is damaged: {where} holds {', '.join(bad)}")


def _entry(row: Sequence[Any], path: str) -> JournalEntry:
    """One row as a ``JournalEntry``; a value no journal writes is ``JournalCorruptError``."""
    runtime_no, session_id, input_id, generation_id, kind, digest, disposition, reason = row[:8]
    marked, accepted_sequence, sequence, accepted_at, updated_at = row[8:]
    if (
        type(runtime_no) is not int
        or type(session_id) is not str
        or type(input_id) is not str
        or type(generation_id) is not str
        or type(kind) is not str
        or type(digest) is not str
        or (found := _DISPOSITIONS.get(disposition)) is None
        or (reason is not None and type(reason) is not str)
        or type(marked) is not int
        or type(accepted_sequence) is not int
        or (sequence is not None and type(sequence) is not int)
        or type(accepted_at) not in _REAL
        or type(updated_at) not in _REAL
    ):
        raise _damaged(row, path)
    return JournalEntry(
        runtime_no=runtime_no,
        session_id=session_id,
        input_id=input_id,
        generation_id=generation_id,
        kind=kind,
        digest=digest,
        disposition=found,
        reason=reason,
        marked=bool(marked),
        accepted_sequence=accepted_sequence,
        sequence=sequence,
        accepted_at=accepted_at,
        updated_at=updated_at,
    )


def check_filters(
    generation_id: object, disposition: Disposition | str | None, input_id: object
) -> tuple[str | None, str | None, str | None]:
    """A read's filters, checked before the file is read: ``TypeError`` for an id filter that is
    not a ``str``, ``ValueError`` for an id nothing can have (C7) or an unknown disposition."""
    return (
        optional_id(generation_id, "generation_id"),
        None if disposition is None else Disposition(disposition).value,
        optional_id(input_id, "input_id"),
    )


def select(
    conn: JournalConnection,
    path: str,
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
    return [_entry(row, path) for row in conn.execute(sql, params).fetchall()]


def read_receipts(
    path: str | os.PathLike[str],
    *,
    generation_id: str | None = None,
    disposition: Disposition | str | None = None,
    check: bool = True,
) -> list[JournalEntry]:
    """Read a journal file without opening it for writing (no lock, no recovery).

    >>> read_receipts("receipts.db", disposition="held")        # doctest: +SKIP
    [JournalEntry(..., disposition=<Disposition.HELD: 'held'>, reason='runtime-lost', ...)]

    Safe while a live ``ReceiptJournal`` writes the file (WAL readers see the last
    commit). Inputs a dead process left ``queued`` stay ``queued`` here until a
    ``ReceiptJournal`` opens the file and recovers it (``live_writer(path)`` says
    whether one still has it open). Raises ``FileNotFoundError`` for a missing
    file and ``JournalCorruptError`` for a damaged file or one that is not a
    journal, as opening it would. ``check`` runs SQLite's integrity check first,
    the same as opening (it reads the whole file); ``check=False`` skips it for
    frequent filtered reads, and still refuses any row holding a value no journal
    writes.
    """
    generation_id, disposition, _ = check_filters(generation_id, disposition, None)
    text = os.fspath(path)
    if not Path(text).is_file():
        raise FileNotFoundError(f"no receipt journal at {text!r}")
    try:
        conn = sqlite3.connect(f"{Path(text).absolute().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise translate(exc, "opening", text) from exc
    try:
        conn.execute("BEGIN")  # one snapshot for the check and the rows, beside a live writer
        if check:
            check_integrity(conn, text)
        application_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if application_id != APPLICATION_ID:
            raise JournalCorruptError(f"{text!r} is not a live_steering receipt journal")
        check_schema(conn, text)  # a few rows of sqlite_schema: also without ``check``
        return select(conn, text, generation_id=generation_id, disposition=disposition)
    except sqlite3.Error as exc:
        raise translate(exc, "reading", text) from exc
    finally:
        conn.close()


def live_writer(path: str | os.PathLike[str]) -> bool | None:
    """Whether a live process has the journal at ``path`` open (holds its ``PATH.lock``).

    ``True``: a ``ReceiptJournal`` in a running process holds it, so inputs shown
    ``queued`` may still change. ``False``: none does, so whatever is ``queued`` was
    left by a process that died and is finalised when the file is next opened.
    ``None``: this cannot be told (no ``flock`` on this platform, or the lock file
    cannot be opened). Never creates the lock file. The probe holds a shared lock
    for an instant; a journal opening in that instant retries briefly rather than fail.
    """
    text = os.fspath(path) + ".lock"
    try:
        fd = os.open(text, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False  # no journal ever held it: a journal creates it before anything else
    except OSError:
        return None
    try:
        if fcntl is None:  # pragma: no cover - not POSIX
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return None
        return False
    finally:
        os.close(fd)  # and with it the shared lock


# -- opening, recovery, commits ------------------------------------------------------------

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


#: How long ``lock`` retries a taken lock before it is busy: long enough to ride out a
#: ``live_writer`` probe (which holds the lock for microseconds), short enough to fail fast.
_LOCK_RETRIES: Final = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032)


def lock(path: str) -> int:
    """Take the exclusive lock beside the journal; the kernel drops it when the process dies.

    The lock is on the file at ``PATH.lock`` when it is taken: a lock file removed while
    this waited for it (``discard_lock`` of an open that failed) is left for the new one.
    """
    where = path + ".lock"
    while True:
        try:
            fd = os.open(where, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise JournalError(
                f"receipt journal {path!r}: cannot open its lock file {where!r}: {exc.strerror or exc}"
            ) from exc
        if fcntl is None:  # pragma: no cover
            return fd
        for delay in (*_LOCK_RETRIES, None):
            if _try_lock(fd):
                break
            if delay is None:
                os.close(fd)
                raise JournalBusyError(f"receipt journal {path!r} is open elsewhere")
            time.sleep(delay)  # on the journal's worker thread, never the event loop
        held = os.fstat(fd)
        try:
            current = os.stat(where)
        except FileNotFoundError:
            current = None
        if current is not None and (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
            return fd
        os.close(fd)  # locked a file that was removed meanwhile: lock the one at the path


def discard_lock(path: str, fd: int) -> None:
    """Release the lock of an open that failed and remove the lock file it created.

    Removed while still held, so that a process waiting for it finds it gone (``lock``)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path + ".lock")
    os.close(fd)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def unlock(fd: int) -> None:
    os.close(fd)  # closing the descriptor releases the flock


def rollback(conn: JournalConnection) -> None:
    # SQLite may have rolled back already (it does after SQLITE_FULL and I/O errors)
    with contextlib.suppress(sqlite3.Error):
        conn.execute("ROLLBACK")


def check_integrity(conn: JournalConnection, path: str) -> None:
    """``PRAGMA integrity_check``: ``JournalCorruptError`` with SQLite's findings unless ``ok``."""
    # at most 10 problems: enough to say what is wrong, bounded for a badly damaged file
    check = [str(row[0]) for row in conn.execute("PRAGMA integrity_check(10)").fetchall()]
    if check != ["ok"]:
        detail = "; ".join(check).replace("\n", "; ")
        raise JournalCorruptError(f"receipt journal {path!r} is damaged: {detail[:400]}")


_expected_schema: frozenset[tuple[str, str, str]] | None = None


def _schema_of(conn: JournalConnection | sqlite3.Connection) -> frozenset[tuple[str, str, str]]:
    rows = conn.execute("SELECT type, name, sql FROM sqlite_schema WHERE sql IS NOT NULL").fetchall()
    return frozenset((str(kind), str(name), str(sql)) for kind, name, sql in rows)


def check_schema(conn: JournalConnection, path: str) -> None:
    """``JournalCorruptError`` unless the file's tables and index are exactly the ones a journal
    creates, as SQLite stores their statements. A constraint edited in the file's schema is
    damage that ``integrity_check`` on a read-only connection does not report (it skips
    CHECK constraints there): the reader would show rows a writer then refuses to open."""
    global _expected_schema
    if _expected_schema is None:
        scratch = sqlite3.connect(":memory:")
        try:
            for statement in _SCHEMA:
                scratch.execute(statement)
            _expected_schema = _schema_of(scratch)
        finally:
            scratch.close()
    found = _schema_of(conn)
    if found != _expected_schema:
        names = sorted({name for _kind, name, _sql in found ^ _expected_schema})
        raise JournalCorruptError(
            f"receipt journal {path!r} is damaged: its schema differs from a journal's ({', '.join(names)})"
        )


def prepare(conn: JournalConnection, path: str) -> None:
    """Check integrity and that it is a journal, switch to WAL + ``synchronous=FULL``, create the schema.

    A SQLite file that is not a journal is refused before anything about it changes.
    """
    check_integrity(conn, path)
    application_id = conn.execute("PRAGMA application_id").fetchone()[0]
    tables = conn.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'table'").fetchone()[0]
    fresh = application_id == 0 and tables == 0
    if not fresh and application_id != APPLICATION_ID:
        raise JournalCorruptError(f"{path!r} is not a live_steering receipt journal")
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise JournalError(f"receipt journal {path!r}: SQLite refused WAL mode ({mode})")
    conn.execute("PRAGMA synchronous=FULL")
    if fresh:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            rollback(conn)
            raise
    else:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise JournalError(f"receipt journal {path!r} has schema {version}, not {SCHEMA_VERSION}")
        check_schema(conn, path)


def next_runtime_no(conn: JournalConnection) -> int:
    last = conn.execute("SELECT max(runtime_no) FROM receipts").fetchone()[0]
    return 1 if last is None else int(last) + 1


def recover(conn: JournalConnection, now: float) -> RecoveryReport:
    """Finalise what a dead process left queued, in one durable transaction (C23)."""
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
            recovered = ChangeKind.RECOVERED.value
            conn.execute(
                _HISTORY, (runtime_no, input_id, generation_id, recovered, disposition.value, lost, None, now)
            )
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise
    return RecoveryReport(tuple(held), tuple(unknown))


@attrs.frozen
class FileIdentity:
    """The device and inode of the open journal file and of its held lock file.

    SQLite keeps writing to the file it opened, even once that file is unlinked,
    renamed or replaced, while the path names another file or none, and the WAL
    beside the path no longer belongs to it. So each commit compares the path
    with the file it opened before reporting anything durable (two ``stat`` calls,
    next to a commit's fsync). The lock file is checked too: with it gone, a second
    journal could lock a new one and recover rows this one is still writing.
    """

    path: str
    device: int
    inode: int
    lock_device: int
    lock_inode: int

    @classmethod
    def of(cls, path: str, lock_fd: int) -> FileIdentity:
        """The identity of ``path`` (just opened) and of the held lock ``lock_fd``."""
        try:
            found = os.stat(path)
        except OSError as exc:
            raise JournalError(f"receipt journal {path!r}: cannot stat it: {exc.strerror or exc}") from exc
        held = os.fstat(lock_fd)
        return cls(path, found.st_dev, found.st_ino, held.st_dev, held.st_ino)

    def check(self) -> None:
        """Raise ``JournalError`` unless the path and ``PATH.lock`` still name the files opened."""
        for name, device, inode in (
            (self.path, self.device, self.inode),
            (self.path + ".lock", self.lock_device, self.lock_inode),
        ):
            try:
                found = os.stat(name)
            except FileNotFoundError:
                raise JournalError(
                    f"receipt journal {self.path!r}: {name!r} was unlinked or renamed while open; "
                    "nothing written since is reported durable"
                ) from None
            except OSError as exc:
                raise JournalError(
                    f"receipt journal {self.path!r}: cannot stat {name!r}: {exc.strerror or exc}"
                ) from exc
            if (found.st_dev, found.st_ino) != (device, inode):
                raise JournalError(
                    f"receipt journal {self.path!r}: {name!r} was replaced by another file while open; "
                    "nothing written since is reported durable"
                )


def _no_row(c: JournalChange, path: str) -> JournalError:
    return JournalError(
        f"receipt journal {path!r}: commit failed: the {c.change.value} change of input {c.input_id!r} "
        f"(runtime {c.runtime_no}) found no row still queued; the file was changed behind the journal"
    )


def commit(conn: JournalConnection, batch: Sequence[JournalChange], file: FileIdentity) -> None:
    """Write ``batch`` in order in one ``BEGIN IMMEDIATE`` transaction: one fsync for all of it.

    Every update must touch exactly the one row it names, still ``queued``, or the
    transaction is rolled back (``JournalError``). After ``COMMIT``, ``file`` is
    checked: a path that no longer names the file written raises ``JournalError``.
    Returns normally only when the batch is in the file the path names.
    """
    path = file.path
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
                if conn.execute(_MARK, (c.runtime_no, c.input_id)).rowcount != 1:
                    raise _no_row(c, path)
            else:
                finalised = conn.execute(
                    _FINALISE,
                    (c.disposition.value, c.reason, c.sequence, c.time, c.runtime_no, c.input_id),
                )
                if finalised.rowcount != 1:
                    raise _no_row(c, path)
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
        rollback(conn)
        raise
    check_file(conn, file)


def check_file(conn: JournalConnection, file: FileIdentity) -> None:
    """``file.check()``; when it fails, first move what the WAL holds into the file written.

    The WAL is named after the path, not the file: left behind, it would be read
    into whatever file the path names next (a replacement, a new journal). SQLite
    does not checkpoint a moved file on close, so it is checkpointed and truncated
    here: the file written (a renamed one, say) gets every commit, the path's WAL
    is left empty.
    """
    try:
        file.check()
    except JournalError:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        raise
