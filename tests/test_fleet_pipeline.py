"""The fleet's hot transactions sent from the event loop (PostgreSQL: libpq's pipeline mode, no
worker thread; SQLite: the owner's fence-and-lock), and the fence that renews only when due.

The PostgreSQL cases drive ``PostgresConnection`` directly on the test cluster, on both anyio
backends: errors, refused parameters, cancellation, a lost connection and a pipeline larger than
the socket buffer must all leave the connection in a known state (idle, or closed), never half-way.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.to_thread
import psycopg
import pytest

from fleet_helpers import BOUND, FleetStore, new_session
from live_steering import Disposition, Input, LiveRuntime, Receipt
from live_steering.fleet import PostgresFleet
from live_steering.fleet._postgres import PostgresConnection
from live_steering.fleet._store import FencedError, Request, StoreConnection, Submission

pytestmark = pytest.mark.anyio


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresConnection]:
    """A fleet store connection to the test cluster (schema created), closed after the test."""
    conn = PostgresConnection(postgres_dsn)
    conn.ensure_schema()
    conn.execute("CREATE TABLE IF NOT EXISTS pipeline_probe (id BIGSERIAL PRIMARY KEY, note TEXT)")
    try:
        yield conn
    finally:
        conn.close()


def _idle(conn: PostgresConnection) -> bool:
    return bool(conn._conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE)


async def test_a_pipeline_returns_each_statements_rows_and_counts(pg: PostgresConnection) -> None:
    """Rows come back as text in statement order, with each statement's row count."""
    note = f"n-{time.monotonic_ns()}"
    begin, inserted, read, commit = await pg._exchange(
        [
            ("BEGIN", ()),
            ("INSERT INTO pipeline_probe (note) VALUES (?), (?) RETURNING note", (note, note + "b")),
            (
                "SELECT count(*), ?::bigint + 1, ?::float8, ?::boolean FROM pipeline_probe WHERE note = ?",
                (41, 0.5, True, note),
            ),
            ("COMMIT", ()),
        ]
    )
    assert inserted.rowcount == 2
    assert inserted.rows == [(note,), (note + "b",)]
    assert read.rows == [("1", "42", "0.5", "t")]
    assert (begin.rows, commit.rows) == ([], [])
    assert _idle(pg)


async def test_a_failed_statement_aborts_the_rest_and_leaves_the_connection_usable(
    pg: PostgresConnection,
) -> None:
    """The first error raises with its SQLSTATE class; later statements never run; the next call works."""
    note = f"n-{time.monotonic_ns()}"
    with pytest.raises(psycopg.errors.UndefinedTable):
        await pg._exchange(
            [
                ("BEGIN", ()),
                ("INSERT INTO pipeline_probe (note) VALUES (?)", (note,)),
                ("SELECT * FROM no_such_table WHERE id = ?", (1,)),
                ("COMMIT", ()),
            ]
        )
    await pg.rollback_async()
    assert _idle(pg)
    (_begin, read, _commit) = await pg._exchange(
        [("BEGIN", ()), ("SELECT count(*) FROM pipeline_probe WHERE note = ?", (note,)), ("COMMIT", ())]
    )
    assert read.rows == [("0",)]  # the insert before the error was rolled back with its transaction


async def test_a_statement_is_prepared_once_per_connection(pg: PostgresConnection) -> None:
    """Repeated statements reuse one server-side prepared statement (planned once)."""
    statement = "SELECT ?::bigint * 2"
    for n in range(5):
        (result,) = await pg._exchange([(statement, (n,))])
        assert result.rows == [(str(2 * n),)]
    (names,) = await pg._exchange(
        [("SELECT count(*) FROM pg_prepared_statements WHERE statement = ?", ("SELECT $1::bigint * 2",))]
    )
    assert names.rows == [("1",)]
    assert len(pg._prepared.names) == 2  # the probe and the count: one name each


async def test_a_nul_in_a_parameter_is_refused_before_anything_is_sent(pg: PostgresConnection) -> None:
    """libpq would cut a text parameter at NUL: DataError, as psycopg's own, and nothing stored."""
    note = f"n-{time.monotonic_ns()}"
    with pytest.raises(psycopg.DataError):
        await pg._exchange(
            [("INSERT INTO pipeline_probe (note) VALUES (?)", (note,)), ("SELECT ?", ("a\x00b",))]
        )
    assert _idle(pg)
    assert pg.execute("SELECT count(*) FROM pipeline_probe WHERE note = %s", (note,)).fetchone() == (0,)


async def test_a_pipeline_larger_than_the_socket_buffer_completes(pg: PostgresConnection) -> None:
    """Thousands of statements (megabytes) go out while the answers are read: no deadlock."""
    note = f"n-{time.monotonic_ns()}"
    payload = note + "x" * 2_000
    statements = [("INSERT INTO pipeline_probe (note) VALUES (?)", (payload,))] * 2_000
    results = await pg._exchange([("BEGIN", ()), *statements, ("COMMIT", ())])
    assert [r.rowcount for r in results[1:-1]] == [1] * 2_000
    assert pg.execute("SELECT count(*) FROM pipeline_probe WHERE note = %s", (payload,)).fetchone() == (
        2_000,
    )


async def test_a_cancelled_caller_never_abandons_a_pipeline(pg: PostgresConnection) -> None:
    """Cancelled while sending, the pipeline still completes (shielded): the connection stays idle."""
    note = f"n-{time.monotonic_ns()}"
    with anyio.CancelScope() as scope:
        scope.cancel()
        await pg._exchange(
            [("BEGIN", ()), ("INSERT INTO pipeline_probe (note) VALUES (?)", (note,)), ("COMMIT", ())]
        )
        await anyio.sleep(1)  # never reached: the cancellation lands at the first checkpoint after it
    assert scope.cancelled_caught
    assert _idle(pg)
    assert pg.execute("SELECT count(*) FROM pipeline_probe WHERE note = %s", (note,)).fetchone() == (1,)


async def test_a_terminated_backend_raises_an_operational_error(
    pg: PostgresConnection, postgres_dsn: str
) -> None:
    """The server ends the session: the next pipeline raises OperationalError, it does not hang."""
    with psycopg.connect(postgres_dsn, autocommit=True) as killer:
        killer.execute("SELECT pg_terminate_backend(%s)", (pg.my_pid(),))
    with anyio.fail_after(BOUND), pytest.raises(psycopg.OperationalError):  # the server closes it
        await pg._exchange([("BEGIN", ()), ("SELECT ?::bigint", (1,)), ("COMMIT", ())])
    await pg.rollback_async()  # on a closed connection: nothing to do, no error
    # the next transaction runs on a new connection (its statements prepared again)
    _begin, one, _commit = await pg._exchange([("BEGIN", ()), ("SELECT ?::bigint", (7,)), ("COMMIT", ())])
    assert one.rows == [("7",)]


async def test_a_transaction_whose_connection_was_lost_never_goes_on_on_a_new_one(
    pg: PostgresConnection, postgres_dsn: str
) -> None:
    """Lost between the owner's two round trips, the transaction is lost: its second half raises
    instead of running, unfenced, on a new connection; the next transaction reconnects."""
    await pg._exchange([("BEGIN", ()), ("SELECT 1", ())])
    with psycopg.connect(postgres_dsn, autocommit=True) as killer:
        killer.execute("SELECT pg_terminate_backend(%s)", (pg.my_pid(),))
    note = f"n-{time.monotonic_ns()}"
    with anyio.fail_after(BOUND), pytest.raises(psycopg.OperationalError):  # the server closes it
        await pg._exchange([("INSERT INTO pipeline_probe (note) VALUES (?)", (note,)), ("COMMIT", ())])
    with pytest.raises(psycopg.OperationalError, match="in the middle of a transaction"):
        await pg._exchange([("INSERT INTO pipeline_probe (note) VALUES (?)", (note,)), ("COMMIT", ())])
    await pg.rollback_async()
    assert pg.execute("SELECT count(*) FROM pipeline_probe WHERE note = %s", (note,)).fetchone() == (0,)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_natively_cancelled_submit_never_hands_its_answers_to_the_next(
    fleet_store: FleetStore,
) -> None:
    """asyncio's own cancellation (``task.cancel()``, ``asyncio.timeout``) gets past anyio's shield;
    cancelled at each step of its pipeline, a submit leaves no answer for the next submit to read:
    every later submit gets its own receipt (asyncio only: trio has no such cancellation)."""
    import asyncio

    session = new_session()
    async with (
        fleet_store.fleet("owner", timeout=BOUND) as owner,
        fleet_store.fleet("host", timeout=BOUND) as host,
        owner.own(LiveRuntime(session_id=session)) as runtime,
        runtime.open_generation("g1") as gen,
    ):
        cancelled = 0
        for steps in range(12):
            task = asyncio.ensure_future(host.submit(session, Input("steer", "x", id=f"c-{steps}"), "g1"))
            for _ in range(steps):
                await asyncio.sleep(0)
            # Worker threads (the owner's commit) set how many loop steps a submit takes, so a
            # late cancel may find it finished; a submit still running must end cancelled.
            if task.cancel():
                cancelled += 1
                with pytest.raises(asyncio.CancelledError):
                    await task
            else:
                done = await task
                assert (done.input_id, done.disposition) == (f"c-{steps}", Disposition.QUEUED)
            receipt = await host.submit(session, Input("steer", "y", id=f"ok-{steps}"), "g1")
            assert (receipt.input_id, receipt.disposition) == (f"ok-{steps}", Disposition.QUEUED)
        assert cancelled >= 1  # steps == 0 at least: cancelled before it ever ran
        gen.stop()


async def test_the_owner_fence_renews_only_when_asked_and_refuses_a_stale_epoch(
    fleet_store: FleetStore,
) -> None:
    """Without a TTL the fence leaves the lease row as it is; with one it renews it; a stale epoch is
    FencedError with the transaction rolled back, on both stores."""
    conn = fleet_store.connection()
    try:
        session = new_session()
        taken = conn.take(session, "owner-1", 30.0)
        assert taken is not None
        before = conn.read_lease(session)
        assert before is not None
        assert await conn.begin_batch_async(session, "owner-1", taken.epoch, None) == []
        await conn.finish_batch_async(session, taken.epoch, [], [], None)
        unchanged = conn.read_lease(session)
        assert unchanged is not None
        assert unchanged.expires_at == before.expires_at
        assert await conn.begin_batch_async(session, "owner-1", taken.epoch, 60.0) == []
        await conn.finish_batch_async(session, taken.epoch, [], [], None)
        renewed = conn.read_lease(session)
        assert renewed is not None
        assert renewed.expires_at >= before.expires_at + 29
        for renew in (None, 60.0):
            with pytest.raises(FencedError):
                await conn.begin_batch_async(session, "owner-1", taken.epoch - 1, renew)
        stored = conn.submit("host", [Submission(session, Input("steer", "x", id="m-1"), "d", "g1")])
        assert isinstance(stored[0], int)  # the failed fences left no transaction (or store lock) behind
    finally:
        conn.close()


async def test_a_long_running_owner_keeps_its_lease_alive_while_busy(fleet_store: FleetStore) -> None:
    """A busy owner (a commit every few ms) still renews every ttl/3: hosts keep seeing a live lease,
    renewed twice while the submits kept the owner busy."""
    session = new_session()
    async with (
        # renewed every 1 s, so the lease outlives a stall of 2 s (a loaded machine's fsync); it
        # was ttl=0.6 for 1.2 s of wall clock, which left a stall 0.4 s
        fleet_store.fleet("owner", ttl=3.0) as owner,
        fleet_store.fleet("host") as host,
        owner.own(LiveRuntime(session_id=session, identity_limit=10_000)) as runtime,
        runtime.open_generation("g1") as gen,
    ):
        lease = await host.lease(session)
        assert lease is not None
        expiries = [lease.expires_at]
        n = 0
        with anyio.fail_after(BOUND):
            while len(expiries) < 3:  # busy until the owner renewed twice, between its batches
                n += 1
                receipt = await host.submit(session, Input("steer", "x", id=f"m-{n}"), "g1")
                assert receipt.disposition is Disposition.QUEUED, receipt
                lease = await host.lease(session)
                assert lease is not None
                assert lease.live
                if lease.expires_at > expiries[-1]:
                    expiries.append(lease.expires_at)
        gen.stop()
    assert n > 10


async def test_sqlite_never_waits_for_the_write_lock_in_the_event_loop(tmp_path: Path) -> None:
    """With another process's write lock held, the insert and the owner's lock go to a worker thread
    (the loop runs on) and finish once it is released; each transaction runs under its own
    settings (a worker thread's waits for the lock, and only a host's insert skips the fsync)."""
    store = FleetStore("sqlite", str(tmp_path / "fleet.db"))
    owner, host = store.connection(), store.connection()
    blocker = sqlite3.connect(store.location, isolation_level=None)
    try:
        session = new_session()
        taken = owner.take(session, "owner-1", 30.0)
        assert taken is not None
        blocker.execute("BEGIN IMMEDIATE")  # another process writing
        stored: list[list[Receipt | int]] = []
        locked: list[list[Request]] = []

        async def insert() -> None:
            steer = Submission(session, Input("steer", "x", id="m-1"), "d", "g1")
            stored.append(await host.submit_async("host", [steer]))

        async def lock() -> None:
            locked.append(await owner.begin_batch_async(session, "owner-1", taken.epoch, None))

        async with anyio.create_task_group() as tg:
            tg.start_soon(insert)
            await anyio.wait_all_tasks_blocked()  # the loop is free: the insert waits on a thread
            assert stored == []
            blocker.execute("ROLLBACK")
        assert isinstance(stored[0][0], int)
        blocker.execute("BEGIN IMMEDIATE")
        async with anyio.create_task_group() as tg:
            tg.start_soon(lock)
            await anyio.wait_all_tasks_blocked()
            assert locked == []
            blocker.execute("ROLLBACK")
        assert [r.input.id for r in locked[0]] == ["m-1"]
        await owner.rollback_async()

        def settings(conn: StoreConnection) -> tuple[int, int, int]:
            return tuple(
                conn.execute(f"PRAGMA {name}").fetchone()[0]
                for name in ("synchronous", "busy_timeout", "wal_autocheckpoint")
            )

        full, normal = 2, 1
        assert settings(owner) == (full, 30_000, 1000)  # the lock taken on a thread
        assert settings(host) == (normal, 30_000, 1000)  # the insert made on a thread: no fsync
        steer = Submission(session, Input("steer", "y", id="m-2"), "d", "g1")
        [request_no] = await host.submit_async("host", [steer])  # the lock is free: in the loop
        assert isinstance(request_no, int)
        assert settings(host) == (normal, 0, 0)  # left so for the next insert
        blocker.execute("BEGIN IMMEDIATE")
        withdrawn: list[Receipt | None] = []

        async def withdraw() -> None:
            withdrawn.append(await anyio.to_thread.run_sync(host.withdraw, request_no))

        async with anyio.create_task_group() as tg:
            tg.start_soon(withdraw)
            await anyio.wait_all_tasks_blocked()
            assert withdrawn == []  # waits for the lock on its thread instead of failing at once
            blocker.execute("ROLLBACK")
        assert withdrawn == [None]
        assert settings(host) == (full, 30_000, 1000)  # the withdrawal was fsynced
    finally:
        blocker.close()
        owner.close()
        host.close()


async def test_a_fleet_on_a_latin1_database_carries_non_ascii_ids(postgres_dsn: str) -> None:
    """On a database that is not UTF-8, a session and node id outside ASCII work as on any other:
    the fleet's connections speak UTF-8 whatever the database's encoding (the event-loop path
    encodes and decodes UTF-8 itself)."""
    name = f"latin1_{time.monotonic_ns()}"
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(
            f"CREATE DATABASE {name} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
        )
    dsn = postgres_dsn.replace("dbname=postgres", f"dbname={name}")
    assert dsn != postgres_dsn
    session = "sessión-é"
    async with (
        PostgresFleet(dsn, node_id="propriétaire", timeout=BOUND) as owner,
        PostgresFleet(dsn, node_id="hôte", timeout=BOUND) as host,
        owner.own(LiveRuntime(session_id=session)) as runtime,
        runtime.open_generation("génération-1") as gen,
    ):
        receipt = await host.submit(session, Input("steer", "Ça va", id="étape-1"), "génération-1")
        assert (receipt.input_id, receipt.disposition) == ("étape-1", Disposition.QUEUED)
        assert runtime.receipt("étape-1") == receipt
        gen.stop()
        with anyio.fail_after(BOUND):
            final = await host.wait_final(session, "étape-1")
        assert (final.input_id, final.disposition) == ("étape-1", Disposition.HELD)


async def test_postgres_answers_without_an_owner_from_the_event_loop(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submit no live owner will decide is answered from the stored receipts in the event loop,
    not on a worker thread (a thread's read outlived a natively cancelled caller, and its
    connection was then shared): repeats, conflicts and new ids all get their receipts."""
    session = new_session()
    async with (
        PostgresFleet(postgres_dsn, node_id="owner") as owner,
        PostgresFleet(postgres_dsn, node_id="host") as host,
    ):
        async with (
            owner.own(LiveRuntime(session_id=session)) as runtime,
            runtime.open_generation("g1") as gen,
        ):
            await host.submit(session, Input("steer", "x", id="a"), "g1")
            gen.stop()
        await anyio.wait_all_tasks_blocked()

        def no_thread(*args: object, **kwargs: object) -> None:
            raise AssertionError("a worker thread on the submit path")

        monkeypatch.setattr(anyio.to_thread, "run_sync", no_thread)
        repeat = await host.submit(session, Input("steer", "x", id="a"), "g1")
        conflict = await host.submit(session, Input("steer", "y", id="a"), "g1")
        fresh = await host.submit(session, Input("steer", "y", id="b"), "g1")
        monkeypatch.undo()
    assert (repeat.accepted, repeat.disposition) == (True, Disposition.HELD)
    assert repeat.reason == "generation-stopped"
    assert (conflict.reason, fresh.reason) == ("identity-conflict", "stale-generation")


async def test_a_server_that_stops_answering_gives_the_connection_up(
    pg: PostgresConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend that stops answering (SIGSTOP) does not hold an exchange for ever: past the bound
    the connection is closed with OperationalError, and the next transaction reconnects."""
    import os
    import signal

    from live_steering.fleet import _postgres

    monkeypatch.setattr(_postgres, "ANSWER_BOUND", 0.3)
    backend = pg.my_pid()
    assert backend is not None
    os.kill(backend, signal.SIGSTOP)
    try:
        given_up = pytest.raises(psycopg.OperationalError, match="no answer from the fleet store")
        with anyio.fail_after(10), given_up:
            await pg._exchange([("BEGIN", ()), ("SELECT ?::bigint", (1,)), ("COMMIT", ())])
    finally:
        os.kill(backend, signal.SIGCONT)
    await pg.rollback_async()
    _begin, one, _commit = await pg._exchange([("BEGIN", ()), ("SELECT ?::bigint", (5,)), ("COMMIT", ())])
    assert one.rows == [("5",)]
    assert pg.my_pid() != backend
