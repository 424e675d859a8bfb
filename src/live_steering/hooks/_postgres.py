"""The relay's store on PostgreSQL: one queue shared by the hooks of agents on many machines (C26b).

Theory of operation
-------------------
``PostgresHookStore`` is the queue of ``_store.RelayStore`` (the same states, audit
stream and decisions, made by the same code) on a psycopg 3 synchronous connection
in autocommit mode, with explicit ``BEGIN``/``COMMIT`` around each step. It spells the
dialect's statements itself (``STATEMENTS``: ``%s`` placeholders, ``ls_hook_`` tables,
the claim token as the claimant, open claims locked) and provides what SQLite gets
from its one writer lock:

* Serialisation per session. Every write step of a session (``enqueue``, ``claim``,
  ``confirm``/``abandon``, a session's ``recover``) first takes
  ``pg_advisory_xact_lock`` on the session id, so two steps of one session never
  interleave (FIFO per session, the queue-full count and the claim stay exact) while
  other sessions go on in parallel. The rows a step moves are row-locked by its
  ``UPDATE``; ``recover`` locks the ``delivering`` rows it examines ``FOR UPDATE
  SKIP LOCKED``, so a store-wide recovery passes over rows another step holds.
  The audit stream's ``sequence`` is a ``BIGSERIAL``: durable, unique and
  increasing per store (a rolled-back step leaves a gap).
* Liveness of a claimant. A process id means nothing on another machine, so each
  store connection holds a session-level advisory lock named by a random nonce that
  is part of every claim token it writes. The server frees it when the connection
  ends, however the process died. A ``delivering`` row is finalised ``unknown`` when
  its claimant's lock can be taken (or when it is older than ``MAX_CLAIM_SECONDS``).
* Bounded waits. ``connect_timeout`` (libpq's minimum is 2 s), ``lock_timeout`` and
  ``statement_timeout`` come from ``busy_timeout`` and travel in the connection's
  startup packet (no extra round trip); ``idle_in_transaction_session_timeout``
  ends a stopped process's open step so it cannot hold a session's lock. Every
  failure of the server or the network is a ``StoreError``.

Tables are ``ls_hook_sessions``, ``ls_hook_instructions``, ``ls_hook_events`` and
``ls_hook_meta`` (its ``schema_version``, as on SQLite: see ``_store.py``) in the
connection's current schema (the first one of its ``search_path``), beside the fleet
store's ``ls_`` tables if the database has them. Creating or migrating them is one
transaction under a store-wide advisory lock. This module is imported only when a
DSN is given: the SQLite path never loads psycopg.
"""

from __future__ import annotations

import atexit
import math
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

import psycopg
import psycopg.conninfo
import psycopg.pq

from . import _store
from ._store import (
    DEFAULT_BUSY_TIMEOUT,
    DEFAULT_IDENTITY_LIMIT,
    DEFAULT_QUEUE_CAPACITY,
    RelayStore,
    StoreError,
)

if TYPE_CHECKING:
    from ._store import Rows

__all__ = ["PostgresHookStore"]

#: The first key of this module's two-key advisory locks (the fleet uses one-key locks,
#: a separate key space): ``_SESSION`` serialises a session's steps, ``_LIVE`` marks a
#: live claimant, ``_DDL`` serialises schema creation and migration.
_SESSION, _LIVE, _DDL = 0x4C53_4801, 0x4C53_4802, 0x4C53_4803

#: The subagents whose hooks ran, by session (version 4).
_AGENTS = """CREATE TABLE ls_hook_agents (
    session_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    first_seen DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (session_id, agent_id)
)"""

#: Today's layout (version 4), created where no ``ls_hook_meta`` is.
SCHEMA = (
    """CREATE TABLE ls_hook_sessions (
    session_id TEXT PRIMARY KEY,
    vendor TEXT,
    epoch INTEGER NOT NULL DEFAULT 1,
    ended INTEGER NOT NULL DEFAULT 0 CHECK (ended IN (0, 1)),
    updated_at DOUBLE PRECISION NOT NULL
)""",
    """CREATE TABLE ls_hook_instructions (
    arrival BIGSERIAL PRIMARY KEY,
    session_id TEXT NOT NULL,
    command_id TEXT NOT NULL,
    text TEXT NOT NULL,
    vendor TEXT,
    epoch INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('queued', 'delivering', 'delivered', 'dropped', 'unknown')),
    reason TEXT,
    enqueued_at DOUBLE PRECISION NOT NULL,
    claim TEXT,
    claim_pid INTEGER,
    claimed_at DOUBLE PRECISION,
    finished_at DOUBLE PRECISION,
    moment TEXT,
    kind TEXT NOT NULL DEFAULT 'steer',
    agent TEXT,
    UNIQUE (session_id, command_id)
)""",
    "CREATE INDEX ls_hook_instructions_live ON ls_hook_instructions (session_id, state, arrival)",
    "CREATE INDEX ls_hook_instructions_claim ON ls_hook_instructions (claim)",
    "CREATE INDEX ls_hook_instructions_open_claims ON ls_hook_instructions (arrival) "
    "WHERE state = 'delivering'",
    """CREATE TABLE ls_hook_events (
    sequence BIGSERIAL PRIMARY KEY,
    type TEXT NOT NULL,
    session_id TEXT,
    command_id TEXT,
    time DOUBLE PRECISION NOT NULL,
    fields TEXT NOT NULL
)""",
    "CREATE INDEX ls_hook_events_session ON ls_hook_events (session_id, sequence)",
    "CREATE TABLE ls_hook_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    _AGENTS,
)

#: Version -> the statements that make it from the version before, run in one transaction.
MIGRATIONS = {
    2: (
        "CREATE INDEX ls_hook_instructions_open_claims ON ls_hook_instructions (arrival) "
        "WHERE state = 'delivering'",
    ),
    3: (
        "ALTER TABLE ls_hook_instructions ADD COLUMN kind TEXT NOT NULL DEFAULT 'steer'",
        "ALTER TABLE ls_hook_instructions ADD COLUMN agent TEXT",
    ),
    4: (_AGENTS,),
}

_EVENTS = (
    "SELECT e.sequence, e.type, e.session_id, e.time, e.fields, i.text FROM ls_hook_events e "
    "LEFT JOIN ls_hook_instructions i ON i.session_id = e.session_id AND i.command_id = e.command_id "
)
#: The claimant is the claim's token (its connection's liveness lock); the rows to finalise
#: are locked, skipping those another step holds.
_OPEN_CLAIMS = (
    "SELECT arrival, session_id, command_id, vendor, claim, claimed_at "
    "FROM ls_hook_instructions WHERE state = 'delivering'"
)
_INSTRUCTIONS = (
    "SELECT arrival, session_id, command_id, state, reason, epoch, vendor FROM ls_hook_instructions"
)

#: The dialect, in PostgreSQL's spelling.
STATEMENTS = {
    "read_version": "SELECT value FROM ls_hook_meta WHERE key = 'schema_version'",
    "write_version": "INSERT INTO ls_hook_meta (key, value) VALUES ('schema_version', %s) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    "session": "SELECT vendor, ended, epoch FROM ls_hook_sessions WHERE session_id = %s",
    "insert_session": "INSERT INTO ls_hook_sessions (session_id, vendor, updated_at) VALUES (%s, %s, %s)",
    "name_session_vendor": "UPDATE ls_hook_sessions SET vendor = %s WHERE session_id = %s",
    "change_session_vendor": "UPDATE ls_hook_sessions SET vendor = %s, updated_at = %s WHERE session_id = %s",
    "revendor_queued": "UPDATE ls_hook_instructions SET vendor = %s "
    "WHERE session_id = %s AND state = 'queued'",
    "reopen_session": "UPDATE ls_hook_sessions SET ended = 0, epoch = %s, updated_at = %s "
    "WHERE session_id = %s",
    "end_session": "UPDATE ls_hook_sessions SET ended = 1, updated_at = %s WHERE session_id = %s",
    "hook_seen": "SELECT 1 FROM ls_hook_events WHERE session_id = %s AND type LIKE 'x.%%' LIMIT 1",
    "agent_seen": "SELECT 1 FROM ls_hook_agents WHERE session_id = %s AND agent_id = %s",
    "insert_agent": "INSERT INTO ls_hook_agents (session_id, agent_id, first_seen) VALUES (%s, %s, %s)",
    "agents": "SELECT session_id, agent_id FROM ls_hook_agents ORDER BY first_seen, agent_id",
    "any_live": "SELECT 1 FROM ls_hook_instructions "
    "WHERE session_id = %s AND state IN ('queued', 'delivering') LIMIT 1",
    "open_claims": _OPEN_CLAIMS + " ORDER BY arrival FOR UPDATE SKIP LOCKED",
    "open_claims_of_session": _OPEN_CLAIMS + " AND session_id = %s ORDER BY arrival FOR UPDATE SKIP LOCKED",
    "lose": "UPDATE ls_hook_instructions SET state = 'unknown', reason = 'hook-lost', finished_at = %s "
    "WHERE arrival = %s AND state = 'delivering'",
    "identity": "SELECT text, state, reason, kind, agent FROM ls_hook_instructions "
    "WHERE session_id = %s AND command_id = %s",
    "counts": "SELECT COUNT(*), COUNT(*) FILTER (WHERE state IN ('queued', 'delivering')) "
    "FROM ls_hook_instructions WHERE session_id = %s",
    "insert_instruction": "INSERT INTO ls_hook_instructions "
    "(session_id, command_id, text, vendor, epoch, state, enqueued_at, kind, agent) "
    "VALUES (%s, %s, %s, %s, %s, 'queued', %s, %s, %s)",
    "receipt": "SELECT state, reason FROM ls_hook_instructions WHERE session_id = %s AND command_id = %s",
    "queued_head": "SELECT arrival, command_id, text, enqueued_at, kind, agent FROM ls_hook_instructions "
    "WHERE session_id = %s AND state = 'queued' ORDER BY arrival LIMIT %s",
    "deliver": "UPDATE ls_hook_instructions SET state = 'delivering', claim = %s, claim_pid = %s, "
    "claimed_at = %s, moment = %s, vendor = %s WHERE arrival = %s AND state = 'queued'",
    "drop_over_cap": "UPDATE ls_hook_instructions SET state = 'dropped', reason = 'over-cap', "
    "finished_at = %s, moment = %s WHERE arrival = %s",
    "queued_all": "SELECT arrival, command_id, enqueued_at FROM ls_hook_instructions "
    "WHERE session_id = %s AND state = 'queued' ORDER BY arrival",
    "drop_ended": "UPDATE ls_hook_instructions SET state = 'dropped', reason = 'session-ended', "
    "finished_at = %s, moment = %s WHERE arrival = %s",
    "claimed": "SELECT arrival, command_id, enqueued_at FROM ls_hook_instructions "
    "WHERE claim = %s AND state = 'delivering' ORDER BY arrival",
    "finish": "UPDATE ls_hook_instructions SET state = %s, reason = %s, finished_at = %s WHERE arrival = %s",
    "emit": "INSERT INTO ls_hook_events (type, session_id, command_id, time, fields) "
    "VALUES (%s, %s, %s, %s, %s)",
    "events": _EVENTS + "WHERE e.sequence > %s ORDER BY e.sequence LIMIT %s",
    "events_of_session": _EVENTS + "WHERE e.sequence > %s AND e.session_id = %s ORDER BY e.sequence LIMIT %s",
    "instructions": _INSTRUCTIONS + " ORDER BY arrival",
    "instructions_of_session": _INSTRUCTIONS + " WHERE session_id = %s ORDER BY arrival",
    "sessions": "SELECT s.session_id, s.vendor, s.epoch, s.ended, "
    "(SELECT COUNT(*) FROM ls_hook_instructions i WHERE i.session_id = s.session_id AND i.state = 'queued'), "
    "(SELECT MAX(e.time) FROM ls_hook_events e WHERE e.session_id = s.session_id), "
    "EXISTS (SELECT 1 FROM ls_hook_events e WHERE e.session_id = s.session_id AND e.type LIKE 'x.%%') "
    "FROM ls_hook_sessions s ORDER BY s.updated_at",
}

#: Connections closed while a claim of theirs was still ``delivering`` (a confirm that found
#: the store locked, retried at this process's next moment): kept open, so their liveness
#: lock says what a pid says on SQLite, that the claimant lives, until this process ends.
_PARKED: list[psycopg.Connection[Any]] = []


@atexit.register
def _close_parked() -> None:
    """The process ends: its parked claims' liveness locks go with it (as a pid does on SQLite)."""
    while _PARKED:
        _PARKED.pop().close()


def _problem(exc: psycopg.Error) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _redacted(dsn: str) -> str:
    """The DSN as shown in messages: no password."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "(unparsable DSN)"
    params.pop("password", None)
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


class PostgresHookStore(RelayStore):
    """The relay's store on one PostgreSQL database, shared by processes on many machines.

    Same interface, states, audit events and refusals as ``SqliteHookStore`` (both
    are ``RelayStore``, the queue written once); see the module docs for what differs.
    ``dsn`` is a libpq connection string or URI. Needs the ``postgres`` extra.
    """

    STATEMENTS = STATEMENTS
    SCHEMA = SCHEMA
    MIGRATIONS = MIGRATIONS

    def __init__(
        self,
        dsn: str,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        capacity: int = DEFAULT_QUEUE_CAPACITY,
        identity_limit: int = DEFAULT_IDENTITY_LIMIT,
        trace: Callable[[str], None] | None = None,
    ) -> None:
        """Connect to ``dsn`` (creating or migrating the tables if needed); ``StoreError`` if it cannot.

        ``busy_timeout``: seconds to wait for the server, a lock or one statement.
        """
        if not isinstance(dsn, str) or not dsn.strip():
            raise ValueError("dsn must be a non-empty libpq connection string or URI")
        self.dsn = dsn
        self.path = _redacted(dsn)
        self.capacity = capacity
        self.identity_limit = identity_limit
        self._trace = trace
        self._nonce = f"{os.getpid()}-{os.urandom(8).hex()}"
        self._live = False
        self._unfinished: set[str] = set()
        wait_ms = max(1, round(busy_timeout * 1000))
        try:
            params: dict[str, Any] = dict(psycopg.conninfo.conninfo_to_dict(dsn))
            options = str(params.pop("options", "") or "")
            options += (
                f" -c lock_timeout={wait_ms} -c statement_timeout={wait_ms * 2}"
                f" -c idle_in_transaction_session_timeout={max(10_000, wait_ms * 4)}"
            )
            params.setdefault("connect_timeout", max(2, math.ceil(busy_timeout)))
            params.setdefault("application_name", "live-steering hooks")
            self._raw: psycopg.Connection[Any] = psycopg.connect(
                psycopg.conninfo.make_conninfo(**params, options=options.strip()), autocommit=True
            )
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the hook store {self.path}: {_problem(exc)}") from exc
        try:
            self._prepare()
        except BaseException:
            self._raw.close()
            raise

    # -- the dialect ------------------------------------------------------------------------

    def _sql(self, sql: str, params: Sequence[object] = ()) -> psycopg.Cursor[Any]:
        try:
            return self._raw.execute(sql, params)
        except psycopg.DataError as exc:  # text the server cannot store (a NUL): bad input, not the store
            raise ValueError(f"PostgreSQL cannot store this value: {_problem(exc)}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"the hook store {self.path} failed: {_problem(exc)}") from exc

    def _run(self, name: str, params: Sequence[object] = ()) -> Rows:
        return self._sql(STATEMENTS[name], params)

    def _execute(self, sql: str) -> None:
        self._sql(sql)

    @contextmanager
    def _transaction(self, session_id: str | None = None) -> Iterator[None]:
        """``BEGIN``, this connection's liveness lock (once), ``session_id``'s lock, the step, ``COMMIT``."""
        self._sql("BEGIN")
        try:
            if not self._live:  # once per connection: from now on this connection's claims are live
                self._sql("SELECT pg_advisory_lock(%s, hashtext(%s))", (_LIVE, self._nonce))
                self._live = True
            if isinstance(session_id, str):
                self._sql("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_SESSION, session_id))
            yield
            self._point("before-commit")
            self._sql("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        if not self._raw.closed and self._raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            with suppress(psycopg.Error):
                self._raw.execute("ROLLBACK")

    @contextmanager
    def _schema_transaction(self) -> Iterator[None]:
        """One transaction under the store-wide DDL lock (two processes never create it twice)."""
        self._sql("BEGIN")
        try:
            self._sql("SELECT pg_advisory_xact_lock(%s, 0)", (_DDL,))
            yield
            self._sql("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def _read_version(self) -> int:
        # pg_class read with this statement's snapshot, not ``to_regclass``, whose answer comes
        # from the backend's catalog cache: after a wait for the DDL lock it may still say "no
        # table" when another process just created it, and the tables would be created again.
        row = self._sql(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
            "ON n.oid = c.relnamespace WHERE c.relname = 'ls_hook_meta' "
            "AND n.nspname = ANY (current_schemas(false)))"
        ).fetchone()
        if row is None or not row[0]:
            return 0
        version = self._run("read_version").fetchone()
        try:
            return 0 if version is None else int(version[0])
        except ValueError:
            raise StoreError(f"{self.path}: unknown hook store schema version {version[0]!r}") from None

    def _new_token(self) -> str:
        return f"{self._nonce}.{os.urandom(6).hex()}"

    def _claimant_alive(self, claimant: object) -> bool:
        """Whether the claim token's connection lives: its liveness lock is still held."""
        token = claimant if isinstance(claimant, str) else None
        nonce = (token or "").rpartition(".")[0]
        if not nonce:
            return False
        if nonce == self._nonce:
            return True
        row = self._sql("SELECT pg_try_advisory_xact_lock(%s, hashtext(%s))", (_LIVE, nonce)).fetchone()
        return not (row is not None and row[0])

    # -- what a claim's connection owes ----------------------------------------------------

    def claim(
        self,
        vendor: str,
        session_id: str,
        moment: str,
        *,
        reply_would_be_empty: bool = True,
        agent_id: str | None = None,
    ) -> _store.Claim:
        """As ``RelayStore.claim``; this connection now owes the claim its ``confirm``/``abandon``."""
        claim = super().claim(
            vendor, session_id, moment, reply_would_be_empty=reply_would_be_empty, agent_id=agent_id
        )
        if claim.delivered:
            self._unfinished.add(claim.token)
        return claim

    def _finish(self, claim: _store.Claim, state: str, reason: str | None) -> None:
        super()._finish(claim, state, reason)
        self._unfinished.discard(claim.token)

    def close(self) -> None:
        """Close the connection (which frees its locks). Idempotent.

        A connection with a claim still ``delivering`` stays open (idle) until the
        process ends, so the claim is not taken for a dead claimant's meanwhile.
        """
        if self._unfinished and not self._raw.closed:
            self._unfinished.clear()
            _PARKED.append(self._raw)
            return
        self._raw.close()

    def __enter__(self) -> PostgresHookStore:
        return self
