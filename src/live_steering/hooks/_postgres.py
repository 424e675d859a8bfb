"""The relay's store on PostgreSQL: one queue shared by the hooks of agents on many machines (C26b).

Theory of operation
-------------------
``PostgresHookStore`` keeps every rule of ``SqliteHookStore`` (the same states,
the same audit stream, the same decisions, made by the same code): it runs that
class's statements on a psycopg 3 synchronous connection in autocommit mode, with
explicit ``BEGIN``/``COMMIT`` around each step. Only what SQLite gets from its one
writer lock is done differently here:

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
``ls_hook_meta`` in the connection's current schema (the first one of its
``search_path``), beside the fleet store's ``ls_`` tables if the database has them.
This module is imported only when a DSN is given: the SQLite path never loads psycopg.
"""

from __future__ import annotations

import atexit
import math
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, cast

import psycopg
import psycopg.conninfo
import psycopg.pq

from . import _store
from ._store import DEFAULT_BUSY_TIMEOUT, DEFAULT_IDENTITY_LIMIT, DEFAULT_QUEUE_CAPACITY, StoreError

__all__ = ["PostgresHookStore"]

_SCHEMA_VERSION = "1"
#: The first key of this module's two-key advisory locks (the fleet uses one-key locks,
#: a separate key space): ``_SESSION`` serialises a session's steps, ``_LIVE`` marks a
#: live claimant, ``_DDL`` serialises schema creation.
_SESSION, _LIVE, _DDL = 0x4C53_4801, 0x4C53_4802, 0x4C53_4803
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS ls_hook_sessions (
    session_id TEXT PRIMARY KEY,
    vendor TEXT,
    epoch INTEGER NOT NULL DEFAULT 1,
    ended INTEGER NOT NULL DEFAULT 0 CHECK (ended IN (0, 1)),
    updated_at DOUBLE PRECISION NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS ls_hook_instructions (
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
    UNIQUE (session_id, command_id)
)""",
    "CREATE INDEX IF NOT EXISTS ls_hook_instructions_live "
    "ON ls_hook_instructions (session_id, state, arrival)",
    "CREATE INDEX IF NOT EXISTS ls_hook_instructions_claim ON ls_hook_instructions (claim)",
    """CREATE TABLE IF NOT EXISTS ls_hook_events (
    sequence BIGSERIAL PRIMARY KEY,
    type TEXT NOT NULL,
    session_id TEXT,
    command_id TEXT,
    time DOUBLE PRECISION NOT NULL,
    fields TEXT NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS ls_hook_events_session ON ls_hook_events (session_id, sequence)",
    "CREATE TABLE IF NOT EXISTS ls_hook_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)
#: Connections closed while a claim of theirs was still ``delivering`` (a confirm that found
#: the store locked, retried at this process's next moment): kept open, so their liveness
#: lock says what a pid says on SQLite, that the claimant lives, until this process ends.
_PARKED: list[psycopg.Connection[Any]] = []


@atexit.register
def _close_parked() -> None:
    """The process ends: its parked claims' liveness locks go with it (as a pid does on SQLite)."""
    while _PARKED:
        _PARKED.pop().close()


_TABLES = re.compile(r"(?<![\w.])(sessions|instructions|events)(?!\w)")
_TRANSLATED: dict[str, str] = {}


def _translate(sql: str) -> str:
    """SQLite's statement in PostgreSQL's spelling: ``%s`` placeholders, ``ls_hook_`` tables."""
    found = _TRANSLATED.get(sql)
    if found is None:
        found = _TRANSLATED[sql] = _TABLES.sub(r"ls_hook_\1", sql).replace("?", "%s")
    return found


def _problem(exc: psycopg.Error) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


class _Connection:
    """The slice of ``sqlite3.Connection`` that ``SqliteHookStore`` uses, on psycopg."""

    def __init__(self, conn: psycopg.Connection[Any], where: str) -> None:
        self.raw = conn
        self._where = where

    def execute(self, sql: str, params: Sequence[object] = ()) -> psycopg.Cursor[Any]:
        try:
            return self.raw.execute(_translate(sql), params)
        except psycopg.DataError as exc:  # text the server cannot store (a NUL): bad input, not the store
            raise ValueError(f"PostgreSQL cannot store this value: {_problem(exc)}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"the hook store {self._where} failed: {_problem(exc)}") from exc

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def close(self) -> None:
        self.raw.close()


def _redacted(dsn: str) -> str:
    """The DSN as shown in messages: no password."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "(unparsable DSN)"
    params.pop("password", None)
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items() if v is not None})


class PostgresHookStore(_store.SqliteHookStore):
    """The relay's store on one PostgreSQL database, shared by processes on many machines.

    Same interface, states, audit events and refusals as ``SqliteHookStore``
    (whose decision code it runs); see the module docs for what differs.
    ``dsn`` is a libpq connection string or URI. Needs the ``postgres`` extra.
    """

    def __init__(
        self,
        dsn: str,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        capacity: int = DEFAULT_QUEUE_CAPACITY,
        identity_limit: int = DEFAULT_IDENTITY_LIMIT,
        trace: Callable[[str], None] | None = None,
    ) -> None:
        """Connect to ``dsn`` (creating the tables if needed); ``StoreError`` if it cannot.

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
        self._session: str | None = None
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
            raw = psycopg.connect(
                psycopg.conninfo.make_conninfo(**params, options=options.strip()), autocommit=True
            )
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the hook store {self.path}: {_problem(exc)}") from exc
        self._pg = _Connection(raw, self.path)
        # SqliteHookStore's code calls execute/in_transaction/close only, which _Connection provides
        self._conn = cast(sqlite3.Connection, self._pg)
        try:
            self._prepare()
        except BaseException:
            raw.close()
            raise

    def _prepare(self) -> None:
        conn = self._pg
        row = conn.execute("SELECT to_regclass('ls_hook_meta') IS NOT NULL").fetchone()
        if row is not None and row[0]:
            version = conn.execute("SELECT value FROM ls_hook_meta WHERE key = 'schema_version'").fetchone()
            if version is not None and version[0] == _SCHEMA_VERSION:
                return
        conn.execute("BEGIN")
        try:
            conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_DDL,))
            for statement in _SCHEMA:
                conn.execute(statement)
            version = conn.execute("SELECT value FROM ls_hook_meta WHERE key = 'schema_version'").fetchone()
            if version is None:
                conn.execute("INSERT INTO ls_hook_meta VALUES ('schema_version', %s)", (_SCHEMA_VERSION,))
            elif version[0] != _SCHEMA_VERSION:
                raise StoreError(f"{self.path}: unknown hook store schema version {version[0]}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction and not conn.raw.closed:
                conn.raw.rollback()
            raise

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._pg
        conn.execute("BEGIN")
        try:
            if not self._live:  # once per connection: from now on this connection's claims are live
                conn.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", (_LIVE, self._nonce))
                self._live = True
            if self._session is not None:
                conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_SESSION, self._session))
            yield self._conn
            self._point("before-commit")
            conn.execute("COMMIT")
        except BaseException:
            if not conn.raw.closed and conn.in_transaction:
                with suppress(psycopg.Error):
                    conn.raw.execute("ROLLBACK")
            raise

    @contextmanager
    def _serialised(self, session_id: str | None) -> Iterator[None]:
        """The next transactions take ``session_id``'s lock first."""
        self._session = session_id
        try:
            yield
        finally:
            self._session = None

    def _new_token(self) -> str:
        return f"{self._nonce}.{os.urandom(6).hex()}"

    def _claimant_alive(self, claimant: object) -> bool:
        token = claimant if isinstance(claimant, str) else None
        nonce = (token or "").rpartition(".")[0]
        if not nonce:
            return False
        if nonce == self._nonce:
            return True
        row = self._pg.execute(
            "SELECT pg_try_advisory_xact_lock(%s, hashtext(%s))", (_LIVE, nonce)
        ).fetchone()
        return not (row is not None and row[0])

    # ``_recover`` is the SQLite store's: the claimant is the claim's token (its connection's
    # liveness lock), and the rows to finalise are locked, skipping those another step holds.
    _CLAIMANT_COLUMN = "claim"
    _RECOVER_SUFFIX = " ORDER BY arrival FOR UPDATE SKIP LOCKED"

    def enqueue(
        self, session_id: str, command_id: str, text: str, *, vendor: str | None = None
    ) -> _store.StoredReceipt:
        """As ``SqliteHookStore.enqueue``, serialised with the session's other steps."""
        with self._serialised(session_id if isinstance(session_id, str) else None):
            return super().enqueue(session_id, command_id, text, vendor=vendor)

    def claim(
        self, vendor: str, session_id: str, moment: str, *, reply_would_be_empty: bool = True
    ) -> _store.Claim:
        """As ``SqliteHookStore.claim``, serialised with the session's other steps."""
        with self._serialised(session_id):
            claim = super().claim(vendor, session_id, moment, reply_would_be_empty=reply_would_be_empty)
        if claim.delivered:
            self._unfinished.add(claim.token)
        return claim

    def _finish(self, claim: _store.Claim, state: str, reason: str | None) -> None:
        with self._serialised(claim.session_id):
            super()._finish(claim, state, reason)
        self._unfinished.discard(claim.token)

    def recover(self, *, session_id: str | None = None) -> list[str]:
        """Finalise ``unknown`` every claim whose claimant's connection is gone; their command ids."""
        with self._serialised(session_id), self._transaction() as conn:
            return self._recover(conn, time.time(), session_id)

    def close(self) -> None:
        """Close the connection (which frees its locks). Idempotent.

        A connection with a claim still ``delivering`` stays open (idle) until the
        process ends, so the claim is not taken for a dead claimant's meanwhile.
        """
        if self._unfinished and not self._pg.raw.closed:
            self._unfinished.clear()
            _PARKED.append(self._pg.raw)
            return
        self._pg.close()

    def __enter__(self) -> PostgresHookStore:
        return self
