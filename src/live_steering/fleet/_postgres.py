"""The PostgreSQL engine of the fleet store, through psycopg 3's synchronous connection.

Each connection runs in autocommit mode with explicit ``BEGIN``/``COMMIT``. Most calls run
on an anyio worker thread (psycopg's async connection does not run on trio). The three hot
transactions (a requester's insert, the owner's fence-and-lock and its write-and-commit) are
sent from the event loop instead, without a thread: libpq's pipeline mode on the same
connection's ``pgconn`` (psycopg's documented ``pq`` layer, non-blocking since psycopg
connects so), waiting on its socket with ``anyio.wait_readable``/``wait_writable``, which
work on asyncio and on trio alike. A thread hop costs about as much as a round trip on a
Unix socket, and a remote submit crossed six of them. The clock is
the server's (``clock_timestamp()``), so leases mean the same on every machine. A dead
owner is detected at once by a session advisory lock its connection holds (the server
frees it when the connection drops); an expired zombie's backend is terminated by the
taker. Wake-ups are ``pg_notify`` inside the transaction: delivered only if it commits.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import re
import time
from collections.abc import Sequence
from typing import Any, Final

import anyio
import anyio.abc
import anyio.to_thread
import attrs
import psycopg
from psycopg import pq

from .._types import Receipt
from ..journal import JournalChange
from ._node import Fleet
from ._store import (
    Decision,
    Dialect,
    FleetError,
    Request,
    Statement,
    StoreConnection,
    Submission,
    Taken,
)

_log = logging.getLogger("live_steering.fleet")


def channel(node_id: str) -> str:
    """The LISTEN channel of a node (lower-case hex, well under the 63-byte identifier limit)."""
    return "ls_" + hashlib.sha256(node_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]


_PLACEHOLDERS: dict[str, str] = {}


def _pg(sql: str) -> str:
    found = _PLACEHOLDERS.get(sql)
    if found is None:
        found = _PLACEHOLDERS[sql] = sql.replace("?", "%s")
    return found


def connect(dsn: str) -> psycopg.Connection[Any]:
    # UTF-8 on the wire whatever the database's encoding: the event-loop path encodes its
    # parameters and decodes its rows as UTF-8 itself (``_encode``, ``_result``), and the
    # listener decodes payloads so; on a LATIN1 database a non-ASCII session or node id
    # otherwise missed its row (a fenced owner) or failed to decode.
    return psycopg.connect(dsn, autocommit=True, client_encoding="UTF8")


# -- statements sent from the event loop (libpq's pipeline mode, no thread) ----------------------

_NUMBERED: dict[str, bytes] = {}


def _numbered(sql: str) -> bytes:
    """A statement's ``?`` placeholders as libpq's ``$1, $2, ...`` (no statement has a literal ``?``)."""
    found = _NUMBERED.get(sql)
    if found is None:
        head, *parts = sql.split("?")
        found = _NUMBERED[sql] = (head + "".join(f"${n}{part}" for n, part in enumerate(parts, 1))).encode()
    return found


_BOOL: Final = 16
_INT8: Final = 20
_FLOAT8: Final = 701
_TEXT: Final = 25


def _encode(params: Sequence[Any]) -> tuple[list[bytes | None], list[int]]:
    """Parameters in libpq's text format, typed as psycopg would send them (None: untyped NULL)."""
    values: list[bytes | None] = []
    types: list[int] = []
    for value in params:
        if value is None:
            values.append(None)
            types.append(0)
        elif isinstance(value, bool):
            values.append(b"t" if value else b"f")
            types.append(_BOOL)
        elif isinstance(value, int):
            values.append(str(value).encode())
            types.append(_INT8)
        elif isinstance(value, float):
            values.append(repr(value).encode())
            types.append(_FLOAT8)
        elif isinstance(value, str):
            data = value.encode("utf-8")  # a lone surrogate raises here, as psycopg's own dumper does
            if b"\x00" in data:  # libpq would cut the C string short: refuse as psycopg does
                raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
            values.append(data)
            types.append(_TEXT)
        else:
            raise TypeError(f"no PostgreSQL parameter for {type(value).__name__}")
    return values, types


@attrs.frozen
class Result:
    """One statement's answer: its row count (``UPDATE 1``: 1) and its rows as text."""

    rowcount: int
    rows: list[tuple[str | None, ...]]


def _result(res: pq.abc.PGresult) -> Result:
    rows = [
        tuple(
            None if (value := res.get_value(row, column)) is None else value.decode("utf-8")
            for column in range(res.nfields)
        )
        for row in range(res.ntuples)
    ]
    return Result(res.command_tuples or 0, rows)


def _error(res: pq.abc.PGresult) -> psycopg.Error:
    message = res.error_message.decode("utf-8", "replace").strip() or "statement aborted"
    sqlstate = res.error_field(pq.DiagnosticField.SQLSTATE)
    try:
        kind = psycopg.errors.lookup(sqlstate.decode()) if sqlstate else psycopg.DatabaseError
    except KeyError:
        kind = psycopg.DatabaseError
    return kind(message)


class Prepared:
    """A connection's prepared statements (statement and parameter types -> name): planned once."""

    def __init__(self) -> None:
        self.names: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        self._numbers = itertools.count(1)

    def new_name(self) -> bytes:
        return f"ls_fleet_{next(self._numbers)}".encode()


ANSWER_BOUND: float = 30.0
"""Seconds an exchange waits for the server's answers before it gives the connection up (closed,
``OperationalError``): a server that stopped answering, with no keepalive to notice it."""


def _within(answered_by: float) -> None:
    if anyio.current_time() >= answered_by:
        raise psycopg.OperationalError(
            f"no answer from the fleet store in {ANSWER_BOUND:g} s: the connection is given up"
        )


async def exchange(
    pgconn: pq.abc.PGconn, prepared: Prepared, statements: Sequence[Statement]
) -> list[Result]:
    """Send ``statements`` in one pipeline from the event loop, wait for every answer, return them.

    A statement with parameters is prepared on its first use on the connection (planned
    once, as psycopg does after a few uses). Raises the first statement's error (those
    after it are aborted by the server); the connection is then idle again, its
    transaction (if one was open) failed. Never leave it half-way: the caller shields
    this from cancellation.
    """
    commands = [(_numbered(sql), *_encode(params)) for sql, params in statements]  # may raise: nothing sent
    fd = pgconn.socket
    results: list[Result] = []
    error: psycopg.Error | None = None
    preparing: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
    answers: list[tuple[tuple[bytes, tuple[int, ...]], bytes] | None] = []  # a prepare's, or a statement's
    pgconn.enter_pipeline_mode()
    synced = False
    try:
        for sql, values, types in commands:
            if not values:
                pgconn.send_query_params(sql, None)
                answers.append(None)
                continue
            key = (sql, tuple(types))
            name = prepared.names.get(key) or preparing.get(key)
            if name is None:
                name = preparing[key] = prepared.new_name()
                pgconn.send_prepare(name, sql, types)
                answers.append((key, name))
            pgconn.send_query_prepared(name, values)
            answers.append(None)
        pgconn.pipeline_sync()
        answered_by = anyio.current_time() + ANSWER_BOUND
        while pgconn.flush():  # the rest did not fit the socket: read what came back meanwhile
            pgconn.consume_input()
            with anyio.move_on_after(0.01):
                await anyio.wait_writable(fd)
            _within(answered_by)
        position = 0
        while True:
            while pgconn.is_busy():
                with anyio.move_on_after(max(answered_by - anyio.current_time(), 0)) as waited:
                    await anyio.wait_readable(fd)
                if waited.cancelled_caught:
                    _within(answered_by)  # raises: the bound passed with no answer
                pgconn.consume_input()
            res = pgconn.get_result()
            if res is None:  # the end of one command's results
                continue
            status = res.status
            if status == pq.ExecStatus.PIPELINE_SYNC:
                synced = True
                break
            prepare = answers[position] if position < len(answers) else None
            position += 1
            if status in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
                if prepare is None:
                    results.append(_result(res))
                else:
                    prepared.names[prepare[0]] = prepare[1]
            elif error is None:
                error = _error(res)
    finally:
        if not synced:
            # Left before the pipeline's end (a native asyncio cancellation, which anyio's
            # shield does not hold back, or an error): answers are still on their way, and
            # the next exchange would read them as its own. The connection is closed instead;
            # its owner reconnects (``PostgresConnection._live``).
            pgconn.finish()
        else:
            with contextlib.suppress(psycopg.Error):
                pgconn.exit_pipeline_mode()
            if pgconn.status != pq.ConnStatus.OK and error is None:
                error = psycopg.OperationalError("the connection to the fleet store was lost")
    if error is not None:
        raise error
    if len(results) != len(statements):
        raise psycopg.InternalError(f"{len(statements)} statements sent, {len(results)} answered")
    return results


#: PostgreSQL's fragments of the shared statements: row locks, the server's clock, the owner's
#: wake-up inside a submit's insert (``channel(owner_node_id)``, computed by the server: the same
#: sha256 hex prefix), and a transaction advisory lock around schema changes (two nodes opening an
#: older store at once would otherwise both migrate it; released by the commit). Its two-key form
#: is a key space apart from the one-key session locks, so no session id can collide; its first key
#: 0x4C534601 ("LSF" 1) is none of the hook relay's (``hooks/_postgres.py``, 0x4C5348..).
DIALECT: Final = Dialect(
    serial="BIGSERIAL",
    now="extract(epoch FROM clock_timestamp())::float8",
    lock_pending=" FOR UPDATE SKIP LOCKED",
    lock_lease=" FOR UPDATE",
    lock_fence=" FOR SHARE",
    notify_owner=(
        "pg_notify('ls_' || left(encode(sha256(convert_to(owner_node_id, 'UTF8')), 'hex'), 40), "
        "'w' || session_id)"
    ),
    lock_schema=f"SELECT pg_advisory_xact_lock({0x4C53_4601}, 0)",
)


class PostgresConnection(StoreConnection):
    dialect = DIALECT

    def __init__(self, dsn: str) -> None:
        super().__init__()
        self._dsn = dsn
        self._pg = connect(dsn)
        self._locks: set[str] = set()
        self._prepared = Prepared()
        self._recorded: dict[str, int] = {}
        """Session -> the backend pid its lease row names, as committed from this connection."""
        self._recording: tuple[str, int] | None = None
        """The pid the open owner transaction writes into the lease row (committed: recorded)."""

    _closed_for_good = False
    _in_transaction = False
    """True from a ``BEGIN`` this connection sent until its ``COMMIT`` or ``ROLLBACK``."""

    @property
    def _conn(self) -> psycopg.Connection[Any]:
        """The connection, made anew if the last one was closed under it (an exchange left
        half-way, a terminated backend), but only between transactions: a transaction whose
        connection was lost is lost with it, and its next statement raises instead of running
        on a new connection outside the transaction (and its fence). The session locks and
        prepared statements went with the old connection: an owner takes its lock again
        and records its new backend pid in the lease row (``begin_batch_async``), and statements
        are prepared again. ``close()`` ends it for good.
        """
        conn = self._pg
        if conn.closed and not self._closed_for_good:
            if self._in_transaction:
                raise psycopg.OperationalError(
                    "the connection to the fleet store was lost in the middle of a transaction"
                )
            self._locks.clear()
            self._recorded.clear()
            self._prepared = Prepared()
            conn = self._pg = connect(self._dsn)
        return conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(_pg(sql), params)

    def pipeline(self) -> contextlib.AbstractContextManager[Any]:
        return self._conn.pipeline()

    def begin(self) -> None:
        self._conn.execute("BEGIN")
        self._in_transaction = True

    def begin_read(self) -> None:
        self.begin()

    def commit(self) -> None:
        try:
            self._conn.execute("COMMIT")
        finally:
            self._in_transaction = False

    def rollback(self) -> None:
        self._in_transaction = False
        if self._pg.closed:
            return
        with contextlib.suppress(psycopg.Error):
            self._conn.execute("ROLLBACK")

    def now(self) -> float:
        row = self._conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        assert row is not None
        return float(row[0])

    def table_exists(self, name: str) -> bool:
        # Read from pg_class with this statement's snapshot, not through the name lookup of
        # ``to_regclass``: that one answers from the backend's catalog cache, which keeps "no such
        # table" across a wait for an advisory lock (no invalidation is read there), so a node
        # that waited for another's schema lock on an empty store would build the tables again.
        row = self._conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
            "ON n.oid = c.relnamespace WHERE c.relname = %s AND n.nspname = ANY (current_schemas(false)))",
            (name,),
        ).fetchone()
        return bool(row and row[0])

    def _lock_sql(self, function: str, session_id: str) -> bool:
        row = self._conn.execute(f"SELECT {function}(hashtextextended(%s, 7))", (session_id,)).fetchone()
        return bool(row and row[0])

    def try_session_lock(self, session_id: str) -> bool:
        if session_id in self._locks:
            return True
        if self._lock_sql("pg_try_advisory_lock", session_id):
            self._locks.add(session_id)
            return True
        return False

    def release_session_lock(self, session_id: str) -> None:
        if session_id in self._locks:
            self._locks.discard(session_id)
            if not self._pg.closed:
                with contextlib.suppress(psycopg.Error):
                    self._lock_sql("pg_advisory_unlock", session_id)

    def holds_session_lock(self, session_id: str) -> bool:
        return session_id in self._locks

    def take(
        self,
        session_id: str,
        node_id: str,
        ttl: float,
        modes: tuple[str, str, str] | None = None,
    ) -> Taken | None:
        taken = super().take(session_id, node_id, ttl, modes)
        if taken is not None and not self._pg.closed:
            self._recorded[session_id] = int(self._pg.info.backend_pid)  # the take wrote it
        return taken

    def end_holder(self, session_id: str, holder_pid: int | None) -> bool:
        if holder_pid is None or holder_pid == self.my_pid():
            return False
        # an expired owner whose connection lives on (stopped, partitioned): end its session,
        # which aborts its open transaction and frees its advisory lock
        self._conn.execute("SELECT pg_terminate_backend(%s)", (holder_pid,))
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            if self.try_session_lock(session_id):
                return True
            time.sleep(0.005)
        return False

    def my_pid(self) -> int | None:
        return int(self._conn.info.backend_pid)

    def notify(self, node_id: str, payload: str) -> None:
        self._conn.execute("SELECT pg_notify(%s, %s)", (channel(node_id), payload))

    def close(self) -> None:
        self._closed_for_good = True
        self._locks.clear()
        self._pg.close()

    # -- the hot transactions, from the event loop -----------------------------------------------

    async def _exchange(self, statements: Sequence[Statement]) -> list[Result]:
        conn = self._conn  # reconnects only between transactions
        if statements[0][0] == "BEGIN":
            self._in_transaction = True
        ends = statements[-1][0] in ("COMMIT", "ROLLBACK")
        with anyio.CancelScope(shield=True):  # never abandon a connection mid-pipeline
            results = await exchange(conn.pgconn, self._prepared, statements)
        if ends:
            self._in_transaction = False
        return results

    async def begin_batch_async(
        self, session_id: str, node_id: str, epoch: int, renew: float | None
    ) -> list[Request]:
        self._conn  # noqa: B018 - a lost connection is made anew here, and forgets its liveness lock
        if not self.holds_session_lock(session_id):  # taken from a zombie, or reconnected: take it again
            await anyio.to_thread.run_sync(self.try_session_lock, session_id)
        # A new connection is a new backend: the lease row must name it, or a taker that finds this
        # owner expired (stopped, partitioned) ends the old, dead backend instead of this one, and
        # then waits on the row this one locks, or takes over while this one holds the lock.
        pid = int(self._conn.info.backend_pid)
        record = None if self._recorded.get(session_id) == pid else pid
        statements = self._batch_statements(session_id, node_id, epoch, renew, record)
        try:
            _begin, fenced, read = await self._exchange(statements)
            requests = self._batch_requests(session_id, epoch, len(fenced.rows), read.rows)
        except BaseException:
            await self.rollback_async()
            raise
        self._recording = None if record is None else (session_id, record)
        return requests

    async def finish_batch_async(
        self,
        session_id: str,
        epoch: int,
        changes: Sequence[JournalChange],
        decisions: Sequence[Decision],
        generation_id: tuple[str | None] | None,
    ) -> None:
        writes, replies = self._batch_writes(session_id, epoch, changes, decisions, generation_id)
        wakeups: list[Statement] = [
            ("SELECT pg_notify(?, ?)", (channel(node), payload)) for node, payload in replies
        ]
        recording, self._recording = self._recording, None
        try:
            await self._exchange([*writes, *wakeups, ("COMMIT", ())])
        except BaseException:
            await self.rollback_async()
            raise
        if recording is not None and recording[0] == session_id:
            self._recorded[session_id] = recording[1]

    async def rollback_async(self) -> None:
        self._in_transaction = False
        self._recording = None
        if not self._pg.closed:
            with contextlib.suppress(psycopg.Error):
                await self._exchange([("ROLLBACK", ())])

    async def submit_async(self, node_id: str, items: Sequence[Submission]) -> list[Receipt | int]:
        statements = [("BEGIN", ()), *self._insert_statements(node_id, items), ("COMMIT", ())]
        try:
            inserted = (await self._exchange(statements))[1:-1]
        except BaseException:
            await self.rollback_async()
            raise
        results: list[Receipt | int | None] = []
        lookups: list[tuple[int, Submission]] = []
        for item, result in zip(items, inserted, strict=True):
            if result.rows:  # stored for the live owner (woken by the insert itself)
                results.append(int(result.rows[0][0] or 0))
                continue
            answer = self.answer_without_owner_at_once(item)
            if answer is None:  # rare: answered from the stored receipts, read in one more round trip
                lookups.append((len(results), item))
            results.append(answer)
        if lookups:
            # From the event loop too (a worker thread's read outlived a natively cancelled
            # caller, whose limiter was then released while the thread still used the connection).
            read = await self._exchange([self.stored_receipt_statement(item) for _, item in lookups])
            for (position, item), found in zip(lookups, read, strict=True):
                results[position] = self.answer_from_stored(item, found.rows[0] if found.rows else None)
        answered: list[Receipt | int] = []
        for answer_or_number in results:
            if answer_or_number is None:  # every position was filled above: a defect if not
                raise psycopg.InternalError("a stored request was left without its answer")
            answered.append(answer_or_number)
        return answered


def redact(dsn: str) -> str:
    """A DSN fit for messages: its password replaced."""
    dsn = re.sub(r"(password\s*=\s*)(\S+)", r"\1***", dsn)
    return re.sub(r"(://[^:/@]*:)([^@]*)@", r"\1***@", dsn)


class PostgresFleet(Fleet):
    """A node of a fleet on PostgreSQL (``pip install 'live-steering[postgres]'``).

    >>> async with PostgresFleet("postgresql:///steering", node_id="api-3") as fleet:   # doctest: +SKIP
    ...     capability = await fleet.capability("chat-42")

    Give it a direct connection (or a session-pooling one): ``LISTEN`` and the owner's
    advisory lock need a session of their own, which transaction pooling does not keep.
    """

    def __init__(self, dsn: str, **options: Any) -> None:
        super().__init__(**options)
        if not isinstance(dsn, str):
            raise TypeError(f"dsn must be a str, got {type(dsn).__name__}")
        self.dsn = dsn

    @property
    def location(self) -> str:
        return redact(self.dsn)

    def _connect(self) -> StoreConnection:
        return PostgresConnection(self.dsn)

    def _errors(self) -> tuple[type[Exception], ...]:
        return (psycopg.Error,)

    def _listener(self) -> psycopg.Connection[Any]:
        conn = connect(self.dsn)
        try:
            conn.execute(f'LISTEN "{channel(self.node_id)}"')
        except BaseException:
            conn.close()
            raise
        return conn

    async def _listen(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        started = False
        delay = 0.01
        while True:
            try:
                conn = await anyio.to_thread.run_sync(self._listener)
            except psycopg.Error as exc:
                if not started:
                    raise FleetError(f"fleet store {self.location}: cannot LISTEN: {exc}") from exc
                _log.warning("fleet node %r: listener reconnect failed: %s", self.node_id, exc)
                await anyio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            delay = 0.01
            if started:
                self._sweep()  # wake-ups sent while it was gone are lost: re-read the tables
            else:
                task_status.started()
                started = True
            try:
                pgconn = conn.pgconn
                while True:
                    await anyio.wait_readable(conn.fileno())
                    pgconn.consume_input()
                    if pgconn.status != psycopg.pq.ConnStatus.OK:
                        raise psycopg.OperationalError("listener connection lost")
                    while (notify := pgconn.notifies()) is not None:
                        self._dispatch(notify.extra.decode("utf-8", "surrogatepass"))
            except (psycopg.Error, OSError) as exc:
                _log.warning("fleet node %r: listener connection lost (%s); reconnecting", self.node_id, exc)
            finally:
                conn.close()
