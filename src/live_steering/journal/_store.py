"""The receipt journal's storage: the SQLite file, its schema, and every statement run on it.

Everything here is synchronous. ``journal.py`` runs ``prepare``/``recover``/``commit`` on its
worker thread, one call at a time, and owns the waiting, the runtimes and the meaning
of "durable"; ``read_receipts`` is the read-only path for the CLI and for hosts. This
module owns what is on disk and decides nothing about inputs: it writes the changes it
is given, in order, and finalises what a dead process left ``queued`` by C23's rules.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import os
import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Protocol

import attrs

from .._errors import LiveSteeringError
from .._types import Disposition, HoldReason, Input, Receipt

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
        """The C4 wire shape plus ``kind``, ``reason`` (always present) and ``updatedAt`` (ISO 8601)."""
        wire = self.receipt().to_dict()
        wire["kind"] = self.kind
        wire["reason"] = self.reason
        wire["updatedAt"] = iso(self.updated_at)
        return wire


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


def select(
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
        raise translate(exc, "opening", text) from exc
    try:
        application_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if application_id != APPLICATION_ID:
            raise JournalCorruptError(f"{text!r} is not a live_steering receipt journal")
        return select(conn, generation_id=generation_id, disposition=disposition)
    except sqlite3.Error as exc:
        raise translate(exc, "reading", text) from exc
    finally:
        conn.close()


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


def lock(path: str) -> int:
    """Take the exclusive lock beside the journal; the kernel drops it when the process dies."""
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    if fcntl is None:  # pragma: no cover
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise JournalBusyError(f"receipt journal {path!r} is open elsewhere") from None
    return fd


def unlock(fd: int) -> None:
    os.close(fd)  # closing the descriptor releases the flock


def rollback(conn: JournalConnection) -> None:
    # SQLite may have rolled back already (it does after SQLITE_FULL and I/O errors)
    with contextlib.suppress(sqlite3.Error):
        conn.execute("ROLLBACK")


def prepare(conn: JournalConnection, path: str) -> None:
    """Check integrity, switch to WAL + ``synchronous=FULL``, create or check the schema."""
    # at most 10 problems: enough to say what is wrong, bounded for a badly damaged file
    check = [str(row[0]) for row in conn.execute("PRAGMA integrity_check(10)").fetchall()]
    if check != ["ok"]:
        detail = "; ".join(check).replace("\n", "; ")
        raise JournalCorruptError(f"receipt journal {path!r} is damaged: {detail[:400]}")
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise JournalError(f"receipt journal {path!r}: SQLite refused WAL mode ({mode})")
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
            rollback(conn)
            raise
    elif application_id != APPLICATION_ID:
        raise JournalCorruptError(f"{path!r} is not a live_steering receipt journal")
    else:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise JournalError(f"receipt journal {path!r} has schema {version}, not {SCHEMA_VERSION}")


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


def commit(conn: JournalConnection, batch: Sequence[JournalChange]) -> None:
    """Write ``batch`` in order in one ``BEGIN IMMEDIATE`` transaction: one fsync for all of it."""
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
        rollback(conn)
        raise
