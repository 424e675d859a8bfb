"""The relay's durable store: per-session instruction queues and the audit stream (C26b).

Theory of operation
-------------------
A vendor runs its hook command as a fresh process per hook moment, and a host
sends instructions from yet another process, so the per-session queue lives in
a store every process on the machine opens: one SQLite file (stdlib ``sqlite3``,
WAL, ``synchronous=FULL``). ``HookStore`` is the interface; ``SqliteHookStore`` is
its first implementation (a fleet store on PostgreSQL can sit behind the same
methods).

An instruction moves ``queued -> delivering -> delivered``, or ``queued ->
dropped`` (its session ended, or it is over the cap of the vendor that finally
claims the session: ``reason: "over-cap"``, so it never stalls the queue), or
``delivering -> unknown`` (the hook process that claimed it died before its reply
was written out: it may or may not have reached
the model). Rules the methods keep, each in one ``BEGIN IMMEDIATE`` transaction:

* ``claim`` takes every eligible queued instruction of the session, in arrival
  order, as many as fit the vendor's cap, and marks them ``delivering`` under a
  token naming this process, *before* the reply exists. The reply is written by the
  caller; ``confirm`` then marks them ``delivered``. A claim is never re-queued, so
  nothing is ever delivered twice.
* A ``delivering`` row whose claimant is dead (or older than ``MAX_CLAIM_SECONDS``)
  is finalised ``unknown`` by the next ``claim`` or ``enqueue`` of its session, or by
  ``recover``. It is never delivered again.
* Every move is one row in ``events``, in the same transaction as the move:
  sequence-numbered per store, cause-linked to the command id. Refusals change
  nothing but the audit stream.
* Eligibility, batching and admission are decided by ``_vendors.py``, exactly as
  the in-memory ``HookSession`` decides.

This module is on the hook command's path: it imports the standard library only
(no attrs, no anyio, no ``typing``), and a hook moment that finds nothing to do
reads without writing.
"""

from __future__ import annotations

import abc
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

from . import _vendors

__all__ = [
    "DEFAULT_QUEUE_CAPACITY",
    "HOOK_BUSY_TIMEOUT",
    "MAX_CLAIM_SECONDS",
    "Claim",
    "HookStore",
    "SqliteHookStore",
    "StoreError",
    "StoredReceipt",
    "default_store_path",
]

DEFAULT_QUEUE_CAPACITY = 20
DEFAULT_IDENTITY_LIMIT = 2_000
#: How long a hook process waits for a locked store before it gives up (seconds).
HOOK_BUSY_TIMEOUT = 1.0
#: How long ``instruct`` and the other commands wait for a locked store (seconds).
DEFAULT_BUSY_TIMEOUT = 5.0
#: A claim older than this is finalised ``unknown`` even if its process still runs: no
#: vendor lets a hook run that long (their defaults are 30 to 600 seconds).
MAX_CLAIM_SECONDS = 900.0
STORE_ENV = "LIVE_STEERING_STORE"

QUEUED = "queued"
DELIVERING = "delivering"
DELIVERED = "delivered"
DROPPED = "dropped"
UNKNOWN = "unknown"
STATES = (QUEUED, DELIVERING, DELIVERED, DROPPED, UNKNOWN)
#: What a host reads as the disposition of each state (the receipt's vocabulary, C4).
DISPOSITION_OF = {
    QUEUED: "queued",
    DELIVERING: "queued",
    DELIVERED: "applied",
    DROPPED: "held",
    UNKNOWN: "unknown",
}
REDACTED = "[redacted]"

_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    vendor TEXT,
    epoch INTEGER NOT NULL DEFAULT 1,
    ended INTEGER NOT NULL DEFAULT 0 CHECK (ended IN (0, 1)),
    updated_at REAL NOT NULL
);
CREATE TABLE instructions (
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
    UNIQUE (session_id, command_id)
);
CREATE INDEX instructions_live ON instructions (session_id, state, arrival);
CREATE INDEX instructions_claim ON instructions (claim);
CREATE TABLE events (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    type TEXT NOT NULL,
    session_id TEXT,
    command_id TEXT,
    time REAL NOT NULL,
    fields TEXT NOT NULL
);
CREATE INDEX events_session ON events (session_id, sequence);
"""


class StoreError(Exception):
    """The store cannot be opened or used (locked past the bounded wait, damaged, unwritable)."""


def default_store_path() -> str:
    """``$LIVE_STEERING_STORE``, else ``$XDG_STATE_HOME/live-steering/hooks.db``.

    ``XDG_STATE_HOME`` defaults to ``~/.local/state`` (the XDG base-directory spec).
    """
    explicit = os.environ.get(STORE_ENV)
    if explicit:
        return explicit
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "live-steering", "hooks.db")


class StoredReceipt:
    """The answer to ``enqueue`` or ``receipt``: accepted or refused, and the current state."""

    __slots__ = ("accepted", "command_id", "detail", "reason", "repeated", "session_id", "state")

    def __init__(
        self,
        accepted: bool,
        command_id: str,
        session_id: str,
        state: str | None,
        reason: str | None = None,
        detail: str | None = None,
        repeated: bool = False,
    ) -> None:
        self.accepted = accepted
        self.command_id = command_id
        self.session_id = session_id
        self.state = state
        self.reason = reason
        self.detail = detail
        self.repeated = repeated

    @property
    def disposition(self) -> str | None:
        """``queued``, ``applied``, ``held`` or ``unknown``; ``None`` when refused."""
        return None if self.state is None else DISPOSITION_OF[self.state]

    def __repr__(self) -> str:
        return (
            f"StoredReceipt(accepted={self.accepted!r}, command_id={self.command_id!r}, "
            f"state={self.state!r}, reason={self.reason!r})"
        )


class Claim:
    """What one hook moment took from the store, and the reply that carries it."""

    __slots__ = (
        "delivered",
        "dropped",
        "moment",
        "recovered",
        "reply",
        "session_id",
        "skipped",
        "token",
        "vendor",
    )

    def __init__(
        self,
        token: str,
        vendor: str,
        session_id: str,
        moment: str,
        *,
        reply: dict[str, object] | None = None,
        delivered: tuple[str, ...] = (),
        dropped: tuple[str, ...] = (),
        skipped: str | None = None,
        recovered: tuple[str, ...] = (),
    ) -> None:
        self.token = token
        self.vendor = vendor
        self.session_id = session_id
        self.moment = moment
        self.reply = reply
        """The vendor's JSON reply, or ``None``: reply as if there were nothing to say."""
        self.delivered = delivered
        """Command ids now ``delivering``, in arrival order; ``confirm`` makes them ``delivered``."""
        self.dropped = dropped
        """Command ids dropped at this (session-end) moment."""
        self.skipped = skipped
        """Why nothing was attached (a ``SkipReason`` value), when nothing was."""
        self.recovered = recovered
        """Command ids a dead claimant had left ``delivering``, finalised ``unknown`` now."""

    def __repr__(self) -> str:
        return f"Claim({self.vendor!r}, {self.session_id!r}, {self.moment!r}, delivered={self.delivered!r})"


class HookStore(abc.ABC):
    """What the relay needs from a store. Every method is one atomic step; see the module docs."""

    @abc.abstractmethod
    def enqueue(
        self, session_id: str, command_id: str, text: str, *, vendor: str | None = None
    ) -> StoredReceipt:
        """Queue one instruction, or refuse it (a pinned reason; only the audit stream changes)."""

    @abc.abstractmethod
    def claim(self, vendor: str, session_id: str, moment: str, *, reply_would_be_empty: bool = True) -> Claim:
        """Decide one hook moment: claim what it carries, or drop the queue at a session end."""

    @abc.abstractmethod
    def confirm(self, claim: Claim) -> None:
        """The claim's reply was written out and flushed: its instructions are ``delivered``."""

    @abc.abstractmethod
    def abandon(self, claim: Claim, reason: str) -> None:
        """Writing the claim's reply failed part-way: its instructions are ``unknown``."""

    @abc.abstractmethod
    def record_failure(
        self, vendor: str | None, reason: str, detail: str, *, session_id: str | None = None
    ) -> None:
        """Audit a failure of the hook command itself (bad input, an error of its own)."""

    @abc.abstractmethod
    def recover(self, *, session_id: str | None = None) -> list[str]:
        """Finalise ``unknown`` every claim whose claimant is dead; returns their command ids."""

    @abc.abstractmethod
    def receipt(self, session_id: str, command_id: str) -> StoredReceipt | None:
        """The current receipt of an accepted command id, or ``None``."""

    @abc.abstractmethod
    def events(
        self, *, after: int = 0, session_id: str | None = None, limit: int = 1_000, show_text: bool = False
    ) -> list[dict[str, object]]:
        """Audit events with ``sequence > after``, oldest first; text ``[redacted]`` unless ``show_text``."""

    @abc.abstractmethod
    def instructions(self, session_id: str | None = None) -> list[dict[str, object]]:
        """Every instruction row (command id, state, reason, epoch), in arrival order."""

    @abc.abstractmethod
    def sessions(self) -> list[dict[str, object]]:
        """Every session the store knows (id, vendor, epoch, ended, queued count, last event time)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store's resources. Idempotent."""

    def __enter__(self) -> HookStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process holds that pid: alive
        return True
    except OSError:
        return False
    return True


def _queued_ms(now: float, enqueued_at: float) -> int:
    return max(0, round((now - enqueued_at) * 1000))


class SqliteHookStore(HookStore):
    """The store on one SQLite file, safe for many processes at once.

    >>> import tempfile, os
    >>> store = SqliteHookStore(os.path.join(tempfile.mkdtemp(), "hooks.db"))
    >>> store.enqueue("s1", "cmd-1", "Use the corrected path").state
    'queued'
    >>> claim = store.claim("claude-code", "s1", "PostToolUse")
    >>> claim.reply
    {'hookSpecificOutput': {'hookEventName': 'PostToolUse', 'additionalContext': 'Use the corrected path'}}
    >>> store.confirm(claim)
    >>> store.receipt("s1", "cmd-1").disposition
    'applied'
    >>> store.close()
    """

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
            self._prepare()
        except sqlite3.Error as exc:
            self._conn.close()
            raise StoreError(f"cannot use the hook store {self.path}: {exc}") from exc

    def _new_token(self) -> str:
        """The claim token: names this process (its pid, for recovery) and this claim."""
        return f"{os.getpid()}-{os.urandom(6).hex()}"

    def _point(self, name: str) -> None:
        if self._trace is not None:
            self._trace(name)

    def _prepare(self) -> None:
        conn = self._conn
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        if conn.execute("PRAGMA user_version").fetchone()[0] == _SCHEMA_VERSION:
            return
        with self._transaction():
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == _SCHEMA_VERSION:
                return
            if version != 0:
                raise StoreError(f"{self.path}: unknown store schema version {version}")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StoreError(f"the hook store {self.path} is locked or unusable: {exc}") from exc
        try:
            yield conn
            self._point("before-commit")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _emit(
        self,
        conn: sqlite3.Connection,
        type_: str,
        session_id: str | None,
        now: float,
        fields: dict[str, object],
        command_id: str | None = None,
    ) -> None:
        if command_id is not None:
            fields = {"command_id": command_id, "cause": command_id, **fields}
        conn.execute(
            "INSERT INTO events (type, session_id, command_id, time, fields) VALUES (?, ?, ?, ?, ?)",
            (type_, session_id, command_id, now, json.dumps(fields, ensure_ascii=False)),
        )

    # -- recovery ---------------------------------------------------------------------------

    #: The column naming a claim's claimant, and what the read of open claims appends (a
    #: server store locks the rows it will finalise); ``_claimant_alive`` reads the column.
    _CLAIMANT_COLUMN = "claim_pid"
    _RECOVER_SUFFIX = ""

    def _claimant_alive(self, claimant: object) -> bool:
        """Whether the process that claimed is alive: on one machine, its pid answers."""
        return isinstance(claimant, int) and _alive(claimant)

    def _recover(self, conn: sqlite3.Connection, now: float, session_id: str | None) -> list[str]:
        """Inside a transaction: finalise ``unknown`` the claims of dead or stale claimants."""
        query = f"SELECT arrival, session_id, command_id, vendor, {self._CLAIMANT_COLUMN}, claimed_at "
        query += "FROM instructions WHERE state = 'delivering'"
        params: tuple[object, ...] = ()
        if session_id is not None:
            query += " AND session_id = ?"
            params = (session_id,)
        recovered = []
        rows = conn.execute(query + self._RECOVER_SUFFIX, params).fetchall()
        for arrival, sid, command_id, vendor, claimant, claimed_at in rows:
            stale = now - (claimed_at or 0.0) > MAX_CLAIM_SECONDS
            if not stale and self._claimant_alive(claimant):
                continue
            self._lose(conn, now, arrival, sid, command_id, vendor)
            recovered.append(command_id)
        return recovered

    def _lose(
        self,
        conn: sqlite3.Connection,
        now: float,
        arrival: int,
        session_id: str,
        command_id: str,
        vendor: str | None,
    ) -> None:
        """A dead claimant's instruction: ``unknown (hook-lost)``, audited (C26b)."""
        conn.execute(
            "UPDATE instructions SET state = 'unknown', reason = 'hook-lost', finished_at = ? "
            "WHERE arrival = ? AND state = 'delivering'",
            (now, arrival),
        )
        prefix = f"x.{vendor}." if vendor else ""
        self._emit(conn, prefix + "instruction.unknown", session_id, now, {"reason": "hook-lost"}, command_id)

    def recover(self, *, session_id: str | None = None) -> list[str]:
        """Finalise ``unknown`` every claim whose claimant is dead; returns their command ids."""
        with self._transaction() as conn:
            return self._recover(conn, time.time(), session_id)

    # -- admission --------------------------------------------------------------------------

    def enqueue(
        self, session_id: str, command_id: str, text: str, *, vendor: str | None = None
    ) -> StoredReceipt:
        """Queue one instruction for the next eligible hook moment of ``session_id``.

        A session id outside the runtime's id rules is a ``ValueError`` (as for
        ``HookSession``). Refusals (pinned reasons, as ``HookSession.enqueue``): ``invalid-input``,
        ``identity-conflict``, ``session-ended``, ``queue-full`` (20 undelivered),
        ``capacity`` (2,000 command ids in the session). An identical repeat
        returns the current state and admits nothing.
        """
        facts = _vendors.FACTS.get(vendor) if vendor is not None else None
        if vendor is not None and facts is None:
            raise ValueError(f"unknown vendor {vendor!r}; expected one of {sorted(_vendors.FACTS)}")
        if (problem := _vendors.session_id_problem(session_id)) is not None:
            # not a refusal receipt: the audit stream could not even name such a session
            raise ValueError(f"session_id refused: {problem}")
        now = time.time()
        with self._transaction() as conn:
            self._point("enqueue")
            self._recover(conn, now, session_id)
            row = conn.execute(
                "SELECT vendor, ended FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
            # The strictest of every vendor this session may meet: the one named here and the
            # one its hooks ran as; neither known: text every vendor can carry.
            limits = [f for f in (facts, _vendors.FACTS.get(row[0]) if row else None) if f is not None]
            problem = _vendors.command_id_problem(command_id)
            if problem is not None:
                return self._refuse(conn, now, session_id, command_id, "invalid-input", problem)
            known = conn.execute(
                "SELECT text, state, reason FROM instructions WHERE session_id = ? AND command_id = ?",
                (session_id, command_id),
            ).fetchone()
            if known is not None:
                if known[0] != text:
                    return self._refuse(
                        conn,
                        now,
                        session_id,
                        command_id,
                        "identity-conflict",
                        "this command id was accepted with other text",
                    )
                self._emit(conn, "control.repeated", session_id, now, {"state": known[1]}, command_id)
                return StoredReceipt(True, command_id, session_id, known[1], known[2], repeated=True)
            # After the repeat check: a repeat answers its state even if the session met a stricter vendor.
            problem = _vendors.admission_problem(text, limits or [_vendors.STRICTEST])
            if problem is not None:
                return self._refuse(conn, now, session_id, command_id, "invalid-input", problem)
            if row is not None and row[1]:
                return self._refuse(
                    conn, now, session_id, command_id, "session-ended", "the session has ended"
                )
            pending = conn.execute(
                "SELECT COUNT(*) FROM instructions "
                "WHERE session_id = ? AND state IN ('queued', 'delivering')",
                (session_id,),
            ).fetchone()[0]
            if pending >= self.capacity:
                return self._refuse(
                    conn,
                    now,
                    session_id,
                    command_id,
                    "queue-full",
                    f"{self.capacity} instructions are already queued for this session",
                )
            held = conn.execute(
                "SELECT COUNT(*) FROM instructions WHERE session_id = ?", (session_id,)
            ).fetchone()[0]
            if held >= self.identity_limit:
                return self._refuse(
                    conn, now, session_id, command_id, "capacity", "the command-id limit is reached"
                )
            if row is None:
                conn.execute(
                    "INSERT INTO sessions (session_id, vendor, updated_at) VALUES (?, ?, ?)",
                    (session_id, vendor, now),
                )
                epoch = 1
            else:
                if vendor is not None and row[0] is None:
                    conn.execute("UPDATE sessions SET vendor = ? WHERE session_id = ?", (vendor, session_id))
                epoch = conn.execute(
                    "SELECT epoch FROM sessions WHERE session_id = ?", (session_id,)
                ).fetchone()[0]
            conn.execute(
                "INSERT INTO instructions (session_id, command_id, text, vendor, epoch, state, enqueued_at) "
                "VALUES (?, ?, ?, ?, ?, 'queued', ?)",
                (session_id, command_id, text, vendor, epoch, now),
            )
            fields: dict[str, object] = {"pending": pending + 1}
            if vendor is not None:
                fields["vendor"] = vendor
            self._emit(conn, "control.accepted", session_id, now, fields, command_id)
            return StoredReceipt(True, command_id, session_id, QUEUED)

    def _refuse(
        self, conn: sqlite3.Connection, now: float, session_id: str, command_id: str, reason: str, detail: str
    ) -> StoredReceipt:
        safe_id = command_id if _vendors.command_id_problem(command_id) is None else None
        fields: dict[str, object] = {"reason": reason, "detail": detail}
        if safe_id is None:
            fields["command_id"] = None
        self._emit(conn, "control.rejected", session_id, now, fields, safe_id)
        return StoredReceipt(False, command_id, session_id, None, reason, detail)

    def receipt(self, session_id: str, command_id: str) -> StoredReceipt | None:
        """The current receipt of an accepted command id, or ``None``. Read-only."""
        row = self._conn.execute(
            "SELECT state, reason FROM instructions WHERE session_id = ? AND command_id = ?",
            (session_id, command_id),
        ).fetchone()
        return None if row is None else StoredReceipt(True, command_id, session_id, row[0], row[1])

    # -- hook moments -----------------------------------------------------------------------

    def _nothing_to_do(self, facts: _vendors.VendorFacts, session_id: str, moment: str) -> bool:
        """True when a read alone proves this moment changes nothing (the common case)."""
        if moment == facts.session_end_moment:
            return False
        row = self._conn.execute(
            "SELECT vendor, ended FROM sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        if row is None or row[0] != facts.name or (row[1] and moment in facts.reopen_moments):
            return False
        live = self._conn.execute(
            "SELECT 1 FROM instructions WHERE session_id = ? AND state IN ('queued', 'delivering') LIMIT 1",
            (session_id,),
        ).fetchone()
        return live is None

    def claim(self, vendor: str, session_id: str, moment: str, *, reply_would_be_empty: bool = True) -> Claim:
        """Decide one hook moment of ``vendor`` for ``session_id``; see the module docs. O(claimed)."""
        facts = _vendors.FACTS[vendor]
        token = self._new_token()
        if self._nothing_to_do(facts, session_id, moment):
            eligible = _vendors.ineligibility(
                facts.context_moments,
                facts.held_moments,
                facts.unconsumed_moments,
                moment,
                reply_would_be_empty,
            )
            return Claim(token, vendor, session_id, moment, skipped=eligible or _vendors.NOTHING_QUEUED)
        now = time.time()
        prefix = f"x.{vendor}."
        with self._transaction() as conn:
            self._point("claim")
            row = conn.execute(
                "SELECT vendor, ended, epoch FROM sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO sessions (session_id, vendor, updated_at) VALUES (?, ?, ?)",
                    (session_id, vendor, now),
                )
                ended, epoch = 0, 1
            else:
                ended, epoch = row[1], row[2]
                if row[0] != vendor:
                    conn.execute(
                        "UPDATE sessions SET vendor = ?, updated_at = ? WHERE session_id = ?",
                        (vendor, now, session_id),
                    )
                    conn.execute(
                        "UPDATE instructions SET vendor = ? WHERE session_id = ? AND state = 'queued'",
                        (vendor, session_id),
                    )
                    if row[0] is not None:  # a hook of another vendor for a known session: say so
                        self._emit(
                            conn,
                            prefix + "session.vendor-changed",
                            session_id,
                            now,
                            {"previous": row[0], "moment": moment},
                        )
            if ended and moment in facts.reopen_moments:
                epoch += 1
                ended = 0
                conn.execute(
                    "UPDATE sessions SET ended = 0, epoch = ?, updated_at = ? WHERE session_id = ?",
                    (epoch, now, session_id),
                )
                self._emit(
                    conn, prefix + "session.resumed", session_id, now, {"epoch": epoch, "moment": moment}
                )
            recovered = tuple(self._recover(conn, now, session_id))
            if ended:
                return Claim(
                    token, vendor, session_id, moment, skipped=_vendors.SESSION_ENDED, recovered=recovered
                )
            if moment == facts.session_end_moment:
                dropped = self._drop_queued(conn, now, vendor, session_id, moment)
                conn.execute(
                    "UPDATE sessions SET ended = 1, updated_at = ? WHERE session_id = ?", (now, session_id)
                )
                self._emit(
                    conn, prefix + "session.ended", session_id, now, {"epoch": epoch, "moment": moment}
                )
                return Claim(
                    token,
                    vendor,
                    session_id,
                    moment,
                    dropped=dropped,
                    skipped=_vendors.SESSION_ENDED,
                    recovered=recovered,
                )
            skip = _vendors.ineligibility(
                facts.context_moments,
                facts.held_moments,
                facts.unconsumed_moments,
                moment,
                reply_would_be_empty,
            )
            if skip is not None:
                return Claim(token, vendor, session_id, moment, skipped=skip, recovered=recovered)
            queued = conn.execute(
                "SELECT arrival, command_id, text, enqueued_at FROM instructions "
                "WHERE session_id = ? AND state = 'queued' "
                "ORDER BY arrival LIMIT ?",
                (session_id, self.capacity),
            ).fetchall()
            if facts.cap is not None and any(_vendors.over_cap(r[2], facts) for r in queued):
                queued = self._drop_over_cap(conn, now, facts, session_id, moment, queued)
            count = _vendors.fit_count(
                (_vendors.measure(r[2], facts.cap_counts_utf16) for r in queued), facts.cap
            )
            if count == 0:
                return Claim(
                    token, vendor, session_id, moment, skipped=_vendors.NOTHING_QUEUED, recovered=recovered
                )
            batch = queued[:count]
            for arrival, command_id, _, _ in batch:
                conn.execute(
                    "UPDATE instructions SET state = 'delivering', claim = ?, claim_pid = ?, claimed_at = ?, "
                    "moment = ?, vendor = ? WHERE arrival = ? AND state = 'queued'",
                    (token, os.getpid(), now, moment, vendor, arrival),
                )
                self._emit(
                    conn, prefix + "instruction.delivering", session_id, now, {"moment": moment}, command_id
                )
            context = _vendors.SEPARATOR.join(r[2] for r in batch)
            reply = _vendors.build_reply(facts.reply_shape, moment, context)
        self._point("claimed")
        return Claim(
            token,
            vendor,
            session_id,
            moment,
            reply=reply,
            delivered=tuple(r[1] for r in batch),
            recovered=recovered,
        )

    def _drop_over_cap(
        self,
        conn: sqlite3.Connection,
        now: float,
        facts: _vendors.VendorFacts,
        session_id: str,
        moment: str,
        queued: list[tuple[int, str, str, float]],
    ) -> list[tuple[int, str, str, float]]:
        """Inside a claim: drop (audited) each queued text this vendor's reply can never carry.

        Admission checks every vendor known for the session, but a session can meet a
        stricter vendor later (its first hook, or a hook of another vendor). Such a text
        would block the FIFO queue forever; it is finalised ``dropped {reason: "over-cap"}``
        instead, and the rest of the queue moves on.
        """
        kept = []
        unit = "UTF-16 code units" if facts.cap_counts_utf16 else "characters"
        for arrival, command_id, text, enqueued_at in queued:
            if not _vendors.over_cap(text, facts):
                kept.append((arrival, command_id, text, enqueued_at))
                continue
            conn.execute(
                "UPDATE instructions SET state = 'dropped', reason = 'over-cap', finished_at = ?, moment = ? "
                "WHERE arrival = ?",
                (now, moment, arrival),
            )
            size = _vendors.measure(text, facts.cap_counts_utf16)
            self._emit(
                conn,
                f"x.{facts.name}.instruction.dropped",
                session_id,
                now,
                {
                    "reason": "over-cap",
                    "detail": f"{size:,} {unit}, over {facts.title}'s cap of {facts.cap:,}",
                    "moment": moment,
                    "queued_ms": _queued_ms(now, enqueued_at),
                },
                command_id,
            )
        return kept

    def _drop_queued(
        self, conn: sqlite3.Connection, now: float, vendor: str, session_id: str, moment: str
    ) -> tuple[str, ...]:
        rows = conn.execute(
            "SELECT arrival, command_id, enqueued_at FROM instructions "
            "WHERE session_id = ? AND state = 'queued' "
            "ORDER BY arrival",
            (session_id,),
        ).fetchall()
        for arrival, command_id, enqueued_at in rows:
            conn.execute(
                "UPDATE instructions SET state = 'dropped', reason = 'session-ended', "
                "finished_at = ?, moment = ? "
                "WHERE arrival = ?",
                (now, moment, arrival),
            )
            self._emit(
                conn,
                f"x.{vendor}.instruction.dropped",
                session_id,
                now,
                {"reason": "session-ended", "moment": moment, "queued_ms": _queued_ms(now, enqueued_at)},
                command_id,
            )
        return tuple(r[1] for r in rows)

    def _finish(self, claim: Claim, state: str, reason: str | None) -> None:
        if not claim.delivered:
            return
        now = time.time()
        with self._transaction() as conn:
            self._point("finish")
            rows = conn.execute(
                "SELECT arrival, command_id, enqueued_at FROM instructions "
                "WHERE claim = ? AND state = 'delivering' "
                "ORDER BY arrival",
                (claim.token,),
            ).fetchall()
            for arrival, command_id, enqueued_at in rows:
                conn.execute(
                    "UPDATE instructions SET state = ?, reason = ?, finished_at = ? WHERE arrival = ?",
                    (state, reason, now, arrival),
                )
                fields: dict[str, object] = {
                    "moment": claim.moment,
                    "queued_ms": _queued_ms(now, enqueued_at),
                }
                if reason is not None:
                    fields["reason"] = reason
                self._emit(
                    conn, f"x.{claim.vendor}.instruction.{state}", claim.session_id, now, fields, command_id
                )

    def confirm(self, claim: Claim) -> None:
        """The reply was written and flushed: ``delivering -> delivered`` (``{queued_ms}`` audited)."""
        self._finish(claim, DELIVERED, None)

    def abandon(self, claim: Claim, reason: str) -> None:
        """The reply could not be written out whole: ``delivering -> unknown``."""
        self._finish(claim, UNKNOWN, reason)

    def record_failure(
        self, vendor: str | None, reason: str, detail: str, *, session_id: str | None = None
    ) -> None:
        """Audit a failure of the hook command (``hook.failed {reason, detail}``)."""
        prefix = f"x.{vendor}." if vendor in _vendors.FACTS else ""
        fields: dict[str, object] = {"reason": reason, "detail": detail[:500]}
        if vendor is not None and not prefix:
            fields["vendor"] = vendor[:100]
        with self._transaction() as conn:
            self._emit(conn, prefix + "hook.failed", session_id, time.time(), fields)

    # -- reading ----------------------------------------------------------------------------

    def events(
        self, *, after: int = 0, session_id: str | None = None, limit: int = 1_000, show_text: bool = False
    ) -> list[dict[str, object]]:
        """Audit events with ``sequence > after``, oldest first, in the C21 envelope.

        Each is ``{"type", "sequence", "session_id", "time", ...fields}``. Events about
        an instruction carry ``"text": "[redacted]"`` unless ``show_text``. Read-only.
        """
        query = "SELECT e.sequence, e.type, e.session_id, e.time, e.fields, i.text FROM events e "
        query += "LEFT JOIN instructions i ON i.session_id = e.session_id AND i.command_id = e.command_id "
        query += "WHERE e.sequence > ?"
        params: list[object] = [after]
        if session_id is not None:
            query += " AND e.session_id = ?"
            params.append(session_id)
        query += " ORDER BY e.sequence LIMIT ?"
        params.append(limit)
        out: list[dict[str, object]] = []
        for sequence, type_, sid, at, fields, text in self._conn.execute(query, params):
            event: dict[str, object] = {"type": type_, "sequence": sequence, "session_id": sid, "time": at}
            event.update(json.loads(fields))
            if text is not None and not type_.endswith("rejected"):
                event["text"] = text if show_text else REDACTED
            out.append(event)
        return out

    def instructions(self, session_id: str | None = None) -> list[dict[str, object]]:
        """Every instruction row, in arrival order (for inspection and tests). Read-only."""
        query = "SELECT arrival, session_id, command_id, state, reason, epoch, vendor FROM instructions"
        params: Sequence[object] = ()
        if session_id is not None:
            query += " WHERE session_id = ?"
            params = (session_id,)
        rows: Iterable[tuple[object, ...]] = self._conn.execute(query + " ORDER BY arrival", params)
        keys = ("arrival", "session_id", "command_id", "state", "reason", "epoch", "vendor")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def sessions(self) -> list[dict[str, object]]:
        """Every session the store knows: id, vendor, epoch, ended, queued count, last event time."""
        rows = self._conn.execute(
            "SELECT s.session_id, s.vendor, s.epoch, s.ended, "
            "(SELECT COUNT(*) FROM instructions i WHERE i.session_id = s.session_id AND i.state = 'queued'), "
            "(SELECT MAX(e.time) FROM events e WHERE e.session_id = s.session_id) "
            "FROM sessions s ORDER BY s.updated_at"
        ).fetchall()
        keys = ("session_id", "vendor", "epoch", "ended", "queued", "last_event")
        return [dict(zip(keys, (r[0], r[1], r[2], bool(r[3]), r[4], r[5]), strict=True)) for r in rows]

    def close(self) -> None:
        """Close the connection. Idempotent."""
        self._conn.close()

    def __enter__(self) -> SqliteHookStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
