"""The PostgreSQL engine of the fleet store, through psycopg 3's synchronous connection.

Each connection runs in autocommit mode with explicit ``BEGIN``/``COMMIT``, always on
an anyio worker thread (psycopg's async connection does not run on trio). The clock is
the server's (``clock_timestamp()``), so leases mean the same on every machine. A dead
owner is detected at once by a session advisory lock its connection holds (the server
frees it when the connection drops); an expired zombie's backend is terminated by the
taker. Wake-ups are ``pg_notify`` inside the transaction: delivered only if it commits.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import time
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.abc
import psycopg

from ._node import Fleet
from ._store import FleetError, StoreConnection

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
    return psycopg.connect(dsn, autocommit=True)


class PostgresConnection(StoreConnection):
    serial = "BIGSERIAL"
    lock_pending = " FOR UPDATE SKIP LOCKED"
    lock_lease = " FOR UPDATE"
    now_sql = "extract(epoch FROM clock_timestamp())::float8"
    # channel(owner_node_id), computed by the server: the same sha256 hex prefix
    notify_owner_sql = (
        "pg_notify('ls_' || left(encode(sha256(convert_to(owner_node_id, 'UTF8')), 'hex'), 40), "
        "'w' || session_id)"
    )

    def __init__(self, dsn: str) -> None:
        super().__init__()
        self._conn = connect(dsn)
        self._locks: set[str] = set()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(_pg(sql), params)

    def pipeline(self) -> contextlib.AbstractContextManager[Any]:
        return self._conn.pipeline()

    def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self._conn.cursor() as cursor:
            cursor.executemany(_pg(sql), rows)

    def begin(self) -> None:
        self._conn.execute("BEGIN")

    def commit(self) -> None:
        self._conn.execute("COMMIT")

    def rollback(self) -> None:
        if self._conn.closed:
            return
        with contextlib.suppress(psycopg.Error):
            self._conn.execute("ROLLBACK")

    def now(self) -> float:
        row = self._conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        assert row is not None
        return float(row[0])

    def table_exists(self, name: str) -> bool:
        row = self._conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
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
            if not self._conn.closed:
                with contextlib.suppress(psycopg.Error):
                    self._lock_sql("pg_advisory_unlock", session_id)

    def holds_session_lock(self, session_id: str) -> bool:
        return session_id in self._locks

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
        self._locks.clear()
        self._conn.close()


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
