"""The relay's store on one SQLite file: the queue of ``_store.RelayStore`` on stdlib ``sqlite3`` (C26b).

Theory of operation
-------------------
Every process of one machine opens the same file (WAL, ``synchronous=FULL``). What
this engine provides to the queue, and nothing more:

* its statements (``STATEMENTS``, every name of ``_store.STATEMENT_NAMES``), its
  layout (``SCHEMA``) and its migrations (``MIGRATIONS``);
* atomic steps: each is one ``BEGIN IMMEDIATE`` transaction, so SQLite's one writer
  lock serialises every step of every session (the session id is not needed);
* liveness of a claimant: its pid (``kill(pid, 0)``), so this store is for the
  processes of one machine.

Schema versions: the version is the meta table's ``schema_version``, as on
PostgreSQL (one pattern, so one migration runner in ``_store.py``). Version 1 stores
predate that table and recorded their version in ``PRAGMA user_version`` alone:
``_read_version`` reads that when the table is missing. Every migration also writes
``user_version``, so a version-1 library refuses a newer store ("unknown store schema
version 2") instead of creating tables over it.

On the hook command's path: the standard library only.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence

from .._processes import process_alive
from ._store import (
    DEFAULT_BUSY_TIMEOUT,
    DEFAULT_IDENTITY_LIMIT,
    DEFAULT_QUEUE_CAPACITY,
    SCHEMA_VERSION,
    Claim,
    RelayStore,
    StoreError,
    default_store_path,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from types import TracebackType

    from ._store import Rows

__all__ = ["SqliteHookStore", "store_path_problem"]

#: The subagents whose hooks ran, by session (version 4).
_AGENTS = """CREATE TABLE agents (
    session_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    first_seen REAL NOT NULL,
    PRIMARY KEY (session_id, agent_id)
)"""

#: Today's layout (version 4), created in an empty file.
SCHEMA = (
    """CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    vendor TEXT,
    epoch INTEGER NOT NULL DEFAULT 1,
    ended INTEGER NOT NULL DEFAULT 0 CHECK (ended IN (0, 1)),
    updated_at REAL NOT NULL
)""",
    """CREATE TABLE instructions (
    arrival INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    command_id TEXT NOT NULL,
    text TEXT NOT NULL,
    vendor TEXT,
    epoch INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('queued', 'delivering', 'delivered', 'dropped', 'unknown')),
    reason TEXT,
    enqueued_at REAL NOT NULL,
    claim TEXT,
    claim_pid INTEGER,
    claimed_at REAL,
    finished_at REAL,
    moment TEXT,
    kind TEXT NOT NULL DEFAULT 'steer',
    agent TEXT,
    UNIQUE (session_id, command_id)
)""",
    "CREATE INDEX instructions_live ON instructions (session_id, state, arrival)",
    "CREATE INDEX instructions_claim ON instructions (claim)",
    "CREATE INDEX instructions_open_claims ON instructions (arrival) WHERE state = 'delivering'",
    """CREATE TABLE events (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    type TEXT NOT NULL,
    session_id TEXT,
    command_id TEXT,
    time REAL NOT NULL,
    fields TEXT NOT NULL
)""",
    "CREATE INDEX events_session ON events (session_id, sequence)",
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    _AGENTS,
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)

#: Version -> the statements that make it from the version before, run in one transaction.
MIGRATIONS = {
    2: (
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE INDEX instructions_open_claims ON instructions (arrival) WHERE state = 'delivering'",
        "PRAGMA user_version = 2",
    ),
    3: (
        "ALTER TABLE instructions ADD COLUMN kind TEXT NOT NULL DEFAULT 'steer'",
        "ALTER TABLE instructions ADD COLUMN agent TEXT",
        "PRAGMA user_version = 3",
    ),
    4: (_AGENTS, "PRAGMA user_version = 4"),
}

_EVENTS = (
    "SELECT e.sequence, e.type, e.session_id, e.time, e.fields, i.text FROM events e "
    "LEFT JOIN instructions i ON i.session_id = e.session_id AND i.command_id = e.command_id "
)
_OPEN_CLAIMS = (
    "SELECT arrival, session_id, command_id, vendor, claim_pid, claimed_at "
    "FROM instructions WHERE state = 'delivering'"
)
_INSTRUCTIONS = "SELECT arrival, session_id, command_id, state, reason, epoch, vendor FROM instructions"

#: The dialect, in SQLite's spelling (``?`` placeholders; the claimant is the claim's pid).
STATEMENTS = {
    "read_version": "SELECT value FROM meta WHERE key = 'schema_version'",
    "write_version": "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    "session": "SELECT vendor, ended, epoch FROM sessions WHERE session_id = ?",
    "insert_session": "INSERT INTO sessions (session_id, vendor, updated_at) VALUES (?, ?, ?)",
    "name_session_vendor": "UPDATE sessions SET vendor = ? WHERE session_id = ?",
    "change_session_vendor": "UPDATE sessions SET vendor = ?, updated_at = ? WHERE session_id = ?",
    "revendor_queued": "UPDATE instructions SET vendor = ? WHERE session_id = ? AND state = 'queued'",
    "reopen_session": "UPDATE sessions SET ended = 0, epoch = ?, updated_at = ? WHERE session_id = ?",
    "end_session": "UPDATE sessions SET ended = 1, updated_at = ? WHERE session_id = ?",
    "hook_seen": "SELECT 1 FROM events WHERE session_id = ? AND type LIKE 'x.%' LIMIT 1",
    "agent_seen": "SELECT 1 FROM agents WHERE session_id = ? AND agent_id = ?",
    "insert_agent": "INSERT INTO agents (session_id, agent_id, first_seen) VALUES (?, ?, ?)",
    "agents": "SELECT session_id, agent_id FROM agents ORDER BY first_seen, agent_id",
    "any_live": "SELECT 1 FROM instructions "
    "WHERE session_id = ? AND state IN ('queued', 'delivering') LIMIT 1",
    "open_claims": _OPEN_CLAIMS + " ORDER BY arrival",
    "open_claims_of_session": _OPEN_CLAIMS + " AND session_id = ? ORDER BY arrival",
    "lose": "UPDATE instructions SET state = 'unknown', reason = 'hook-lost', finished_at = ? "
    "WHERE arrival = ? AND state = 'delivering'",
    "identity": "SELECT text, state, reason, kind, agent FROM instructions "
    "WHERE session_id = ? AND command_id = ?",
    "counts": "SELECT COUNT(*), COALESCE(SUM(state IN ('queued', 'delivering')), 0) "
    "FROM instructions WHERE session_id = ?",
    "insert_instruction": "INSERT INTO instructions "
    "(session_id, command_id, text, vendor, epoch, state, enqueued_at, kind, agent) "
    "VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?)",
    "receipt": "SELECT state, reason FROM instructions WHERE session_id = ? AND command_id = ?",
    "queued_head": "SELECT arrival, command_id, text, enqueued_at, kind, agent FROM instructions "
    "WHERE session_id = ? AND state = 'queued' ORDER BY arrival LIMIT ?",
    "deliver": "UPDATE instructions SET state = 'delivering', claim = ?, claim_pid = ?, claimed_at = ?, "
    "moment = ?, vendor = ? WHERE arrival = ? AND state = 'queued'",
    "drop_over_cap": "UPDATE instructions SET state = 'dropped', reason = 'over-cap', finished_at = ?, "
    "moment = ? WHERE arrival = ?",
    "queued_all": "SELECT arrival, command_id, enqueued_at FROM instructions "
    "WHERE session_id = ? AND state = 'queued' ORDER BY arrival",
    "drop_ended": "UPDATE instructions SET state = 'dropped', reason = 'session-ended', finished_at = ?, "
    "moment = ? WHERE arrival = ?",
    "claimed": "SELECT arrival, command_id, enqueued_at FROM instructions "
    "WHERE claim = ? AND state = 'delivering' ORDER BY arrival",
    "finish": "UPDATE instructions SET state = ?, reason = ?, finished_at = ? WHERE arrival = ?",
    "emit": "INSERT INTO events (type, session_id, command_id, time, fields) VALUES (?, ?, ?, ?, ?)",
    "events": _EVENTS + "WHERE e.sequence > ? ORDER BY e.sequence LIMIT ?",
    "events_of_session": _EVENTS + "WHERE e.sequence > ? AND e.session_id = ? ORDER BY e.sequence LIMIT ?",
    "instructions": _INSTRUCTIONS + " ORDER BY arrival",
    "instructions_of_session": _INSTRUCTIONS + " WHERE session_id = ? ORDER BY arrival",
    "sessions": "SELECT s.session_id, s.vendor, s.epoch, s.ended, "
    "(SELECT COUNT(*) FROM instructions i WHERE i.session_id = s.session_id AND i.state = 'queued'), "
    "(SELECT MAX(e.time) FROM events e WHERE e.session_id = s.session_id), "
    "EXISTS (SELECT 1 FROM events e WHERE e.session_id = s.session_id AND e.type LIKE 'x.%') "
    "FROM sessions s ORDER BY s.updated_at",
}


class _Step:
    """One ``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on any exception), as a plain context
    manager: ``contextlib`` would cost every hook process its import."""

    __slots__ = ("store",)

    def __init__(self, store: SqliteHookStore) -> None:
        self.store = store

    def __enter__(self) -> None:
        try:
            self.store._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StoreError(f"the hook store {self.store.path} is locked or unusable: {exc}") from exc

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        conn = self.store._conn
        try:
            if kind is None:
                self.store._point("before-commit")
                conn.execute("COMMIT")
                return
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def store_path_problem(path: str) -> str | None:
    """Why ``path`` cannot hold a hook store, or ``None``. SQLite takes ``""`` and ``":memory:"``
    for a private database of one connection: an instruction queued there is gone when the
    command exits, and no hook process could see it."""
    if path == "":
        return "an empty path names no file (SQLite would keep a private, temporary database)"
    if path == ":memory:":
        return "':memory:' is a private in-memory database: no other process can read it"
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # a byte that is not UTF-8 (the shell's $'\xff'): no config can name it
        return "the path is not valid UTF-8, so no vendor's config could name it"
    return None


class SqliteHookStore(RelayStore):
    """The store on one SQLite file, safe for many processes at once.

    >>> import tempfile, os
    >>> folder = tempfile.TemporaryDirectory()
    >>> store = SqliteHookStore(os.path.join(folder.name, "hooks.db"))
    >>> store.enqueue("s1", "cmd-1", "Use the corrected path").state
    'queued'
    >>> claim = store.claim("claude-code", "s1", "PostToolUse")
    >>> claim.reply
    {'hookSpecificOutput': {'hookEventName': 'PostToolUse', 'additionalContext': 'Use the corrected path'}}
    >>> store.confirm(claim)
    >>> store.receipt("s1", "cmd-1").disposition
    'applied'
    >>> store.close()
    >>> folder.cleanup()
    """

    STATEMENTS = STATEMENTS
    SCHEMA = SCHEMA
    MIGRATIONS = MIGRATIONS

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        capacity: int = DEFAULT_QUEUE_CAPACITY,
        identity_limit: int = DEFAULT_IDENTITY_LIMIT,
        trace: Callable[[str], None] | None = None,
    ) -> None:
        """Open (creating if needed) the store at ``path`` (default ``default_store_path()``).

        ``busy_timeout``: seconds to wait for a lock held by another process before
        ``StoreError``. ``trace``: a callable ``trace(point)`` called at each step of a
        claim, for crash tests (``live_steering.testing``); ``None`` in production.
        """
        self.path = os.fspath(path) if path is not None else default_store_path()
        problem = store_path_problem(self.path)
        if problem is not None:
            raise StoreError(f"cannot open the hook store {self.path!r}: {problem}")
        self.capacity = capacity
        self.identity_limit = identity_limit
        self._trace = trace
        try:
            directory = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(directory):
                os.makedirs(directory, mode=0o700, exist_ok=True)
            self._conn = sqlite3.connect(self.path, timeout=busy_timeout, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the hook store {self.path}: {exc}") from exc
        try:
            conn = self._conn
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            self._prepare()
        except BaseException as exc:
            self._conn.close()
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"cannot use the hook store {self.path}: {exc}") from exc
            raise

    # -- the dialect ------------------------------------------------------------------------

    def _run(self, name: str, params: Sequence[object] = ()) -> Rows:
        try:
            return self._conn.execute(STATEMENTS[name], params)
        except sqlite3.DatabaseError as exc:  # a damaged or foreign file: one line for a person
            raise StoreError(f"cannot use the hook store {self.path}: {exc}") from exc

    def _execute(self, sql: str) -> None:
        self._conn.execute(sql)

    def _transaction(self, session_id: str | None = None) -> AbstractContextManager[None]:
        """One ``BEGIN IMMEDIATE`` step: the file's one writer lock serialises every session."""
        return _Step(self)

    def _schema_transaction(self) -> AbstractContextManager[None]:
        return self._transaction()

    def _read_version(self) -> int:
        try:
            row = self._conn.execute(STATEMENTS["read_version"]).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            # No meta table: an empty file (0), or version 1, which kept it in user_version alone.
            version = int(self._conn.execute("PRAGMA user_version").fetchone()[0])
            if version == SCHEMA_VERSION:
                raise StoreError(f"{self.path}: the hook store's meta table is missing") from None
            return version
        try:
            return int(row[0])
        except (TypeError, ValueError):
            raise StoreError(f"{self.path}: unknown hook store schema version {row!r}") from None

    def _new_token(self) -> str:
        """The claim token: names this process (its pid, for recovery) and this claim."""
        return f"{os.getpid()}-{os.urandom(6).hex()}"

    def _claimant_alive(self, claimant: object) -> bool:
        """Whether the process that claimed is alive: on one machine, its pid answers."""
        return isinstance(claimant, int) and process_alive(claimant)

    def confirm(self, claim: Claim) -> None:
        """As ``RelayStore.confirm``, committed without waiting for the disk (``synchronous=NORMAL``
        for this one step; WAL keeps it atomic, and the next full commit of any process makes it
        durable). The claim before the reply is fully synced, which is what "never twice" needs;
        a power loss that loses this confirm leaves the claim ``delivering`` with a dead claimant,
        which recovery finalises ``unknown`` (``hook-lost``): honest, never a second delivery. It
        saves the hook process one disk flush, the largest part of its cost."""
        conn = self._conn
        conn.execute("PRAGMA synchronous=NORMAL")
        try:
            super().confirm(claim)
        finally:
            conn.execute("PRAGMA synchronous=FULL")

    def close(self) -> None:
        """Close the connection. Idempotent."""
        self._conn.close()

    def __enter__(self) -> SqliteHookStore:
        return self
