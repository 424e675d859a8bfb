"""The fleet store's schema version and its migrations (``fleet/_store.py``), on SQLite and PostgreSQL.

An older store is built by hand, with the statements of that version as the fleet shipped them
(frozen here, not imported: the library's copy is what is under test), then opened: it is
migrated in one transaction, keeps its rows, and serves a node. A newer store is refused
naming both versions; a failing migration leaves the store as it was.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from fleet_helpers import FleetStore, new_session
from live_steering import Disposition, Input, LiveRuntime
from live_steering.fleet import FleetError
from live_steering.fleet import _store as fleet_store_module
from live_steering.fleet._postgres import PostgresConnection
from live_steering.fleet._sqlite import SQLiteConnection
from live_steering.fleet._store import MIGRATIONS, SCHEMA_VERSION, StoreConnection

#: The version-1 layout (issue 15), as a store of that version holds it.
VERSION_1 = (
    """
    CREATE TABLE ls_leases (
        session_id TEXT PRIMARY KEY, node_id TEXT, epoch BIGINT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL, holder_pid BIGINT, generation_id TEXT
    )
    """,
    """
    CREATE TABLE ls_requests (
        request_no {serial} PRIMARY KEY, session_id TEXT NOT NULL, input_id TEXT NOT NULL,
        anchor TEXT NOT NULL, input TEXT, digest TEXT NOT NULL, node_id TEXT NOT NULL,
        owner_node_id TEXT,
        state TEXT NOT NULL CHECK (state IN ('pending', 'decided', 'withdrawn')),
        accepted BOOLEAN, disposition TEXT, reason TEXT, created_at DOUBLE PRECISION NOT NULL,
        settled_at DOUBLE PRECISION
    )
    """,
    "CREATE INDEX ls_requests_pending ON ls_requests (session_id, request_no) WHERE state = 'pending'",
    """
    CREATE TABLE ls_receipts (
        session_id TEXT NOT NULL, epoch BIGINT NOT NULL, input_id TEXT NOT NULL,
        generation_id TEXT NOT NULL, kind TEXT NOT NULL, digest TEXT NOT NULL,
        disposition TEXT NOT NULL CHECK (disposition IN ('queued', 'applied', 'held', 'unknown')),
        marked BOOLEAN NOT NULL DEFAULT FALSE, reason TEXT, accepted_sequence BIGINT NOT NULL,
        sequence BIGINT, accepted_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (session_id, input_id, epoch)
    )
    """,
    "CREATE INDEX ls_receipts_queued ON ls_receipts (session_id) WHERE disposition = 'queued'",
    """
    CREATE TABLE ls_changes (
        id {serial} PRIMARY KEY, session_id TEXT NOT NULL, epoch BIGINT NOT NULL,
        input_id TEXT NOT NULL, generation_id TEXT NOT NULL, change TEXT NOT NULL,
        disposition TEXT NOT NULL, reason TEXT, sequence BIGINT, time DOUBLE PRECISION NOT NULL
    )
    """,
    "CREATE TABLE ls_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "INSERT INTO ls_meta (key, value) VALUES ('schema_version', '1')",
)

#: What version 2 added (issue 20's index), and its version number, as a store of version 2 holds them.
VERSION_2 = (
    "CREATE INDEX ls_changes_session ON ls_changes (session_id, epoch)",
    "UPDATE ls_meta SET value = '2' WHERE key = 'schema_version'",
)

#: The first key of the schema lock PostgreSQL's migrations take (``_postgres.py``'s ``lock_schema``).
SCHEMA_LOCK_KEY = 0x4C53_4601

#: The lease columns version 3 adds: the owner's delivery modes (C30).
MODE_COLUMNS = {"steering_mode", "follow_up_mode"}

#: What version 3 added, as a store of version 3 holds it.
VERSION_3 = (
    "ALTER TABLE ls_leases ADD COLUMN steering_mode TEXT",
    "ALTER TABLE ls_leases ADD COLUMN follow_up_mode TEXT",
    "UPDATE ls_meta SET value = '3' WHERE key = 'schema_version'",
)


@pytest.fixture
def store(fleet_store: FleetStore, tmp_path: Path) -> FleetStore:
    """An empty store of each engine: a new file, or a new database on the test cluster."""
    if fleet_store.kind == "sqlite":
        return FleetStore("sqlite", str(tmp_path / "schema.db"))
    import psycopg

    name = f"schema_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(fleet_store.location, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    fresh = fleet_store.location.replace("dbname=postgres", f"dbname={name}")
    assert fresh != fleet_store.location
    return FleetStore("postgres", fresh)


def _raw(store: FleetStore) -> StoreConnection:
    """A connection that has not looked at the schema (no ``ensure_schema``)."""
    if store.kind == "sqlite":
        return SQLiteConnection(store.location)
    return PostgresConnection(store.location)


def _build_version_1(store: FleetStore, session: str, *, version: int = 1) -> None:
    """A version-1 store by hand (``version=2`` or ``3``: then the later versions' statements on
    it), holding one session's applied receipt and its changes, and its lease as an expired owner
    left it."""
    conn = _raw(store)
    try:
        conn.begin()
        later = (VERSION_2 if version >= 2 else ()) + (VERSION_3 if version >= 3 else ())
        for statement in VERSION_1 + later:
            conn.execute(statement.format(serial=conn.dialect.serial))
        conn.execute(
            "INSERT INTO ls_leases (session_id, node_id, epoch, expires_at, generation_id) "
            "VALUES (?, 'old-node', 1, 0, 'g0')",
            (session,),
        )
        conn.execute(
            "INSERT INTO ls_receipts (session_id, epoch, input_id, generation_id, kind, digest, disposition, "
            "marked, reason, accepted_sequence, sequence, accepted_at, updated_at) "
            "VALUES (?, 1, 'old-1', 'g0', 'steer', ?, 'applied', TRUE, NULL, 1, 3, 1.0, 2.0)",
            (session, fleet_store_module.input_digest(Input("steer", "old text", id="old-1"))),
        )
        for change, disposition in (("accepted", "queued"), ("writing", "queued"), ("applied", "applied")):
            conn.execute(
                "INSERT INTO ls_changes (session_id, epoch, input_id, generation_id, change, disposition, "
                "reason, sequence, time) VALUES (?, 1, 'old-1', 'g0', ?, ?, NULL, NULL, 1.0)",
                (session, change, disposition),
            )
        conn.commit()
    finally:
        conn.close()


def _version(conn: StoreConnection) -> int | None:
    conn.begin_read()
    try:
        row = conn.execute("SELECT value FROM ls_meta WHERE key = 'schema_version'").fetchone()
    finally:
        conn.commit()
    return None if row is None else int(row[0])


def _has_relation(conn: StoreConnection, name: str) -> bool:
    """A table or an index of that name exists."""
    if isinstance(conn, SQLiteConnection):
        row = conn.execute("SELECT 1 FROM sqlite_schema WHERE name = ?", (name,)).fetchone()
        return row is not None
    row = conn.execute("SELECT to_regclass(?) IS NOT NULL", (name,)).fetchone()
    return bool(row[0])


def _columns(conn: StoreConnection, table: str) -> set[str]:
    """The names of ``table``'s columns."""
    if isinstance(conn, SQLiteConnection):
        return {row[1] for row in conn.execute(f"PRAGMA table_info({table})").fetchall()}
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = ?",
        (table,),
    ).fetchall()
    return {row[0] for row in rows}


def test_the_schema_version_is_the_number_of_migrations() -> None:
    """Version n is what the first n migrations build, the first one the version-1 tables."""
    assert SCHEMA_VERSION == len(MIGRATIONS) == 4
    assert "CREATE TABLE ls_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)" in MIGRATIONS[0]


def test_a_new_store_is_built_by_every_migration_in_order(store: FleetStore) -> None:
    """An empty store gets every migration in one go: the current version, the latest index."""
    conn = store.connection()  # ensure_schema
    try:
        assert _version(conn) == SCHEMA_VERSION
        assert _has_relation(conn, "ls_changes_session")
        assert _columns(conn, "ls_leases") >= MODE_COLUMNS | {"delivery"}
        conn.ensure_schema()  # an up-to-date store: nothing to do
        assert _version(conn) == SCHEMA_VERSION
    finally:
        conn.close()


@pytest.mark.anyio
async def test_a_version_1_store_is_migrated_and_keeps_serving(store: FleetStore) -> None:
    """A store built by hand at version 1 is migrated by the first node that opens it; its rows
    stay, an earlier owner's input is still answered with its receipt, and a new owner works."""
    session = new_session()
    _build_version_1(store, session)
    async with store.fleet("host") as host:
        conn = _raw(store)
        try:
            assert _version(conn) == SCHEMA_VERSION
            assert _has_relation(conn, "ls_changes_session")
            assert _columns(conn, "ls_leases") >= MODE_COLUMNS
        finally:
            conn.close()
        old = await host.receipt(session, "old-1")
        assert old is not None
        assert (old.disposition, old.generation_id) == (Disposition.APPLIED, "g0")
        async with (
            store.fleet("worker") as worker,
            worker.own(LiveRuntime(session_id=session)) as runtime,
            runtime.open_generation("g1") as gen,
        ):
            await worker.flush(session)
            repeat = await host.submit(session, Input("steer", "old text", id="old-1"), "g0")
            assert (repeat.accepted, repeat.disposition) == (True, Disposition.APPLIED)  # its receipt
            fresh = await host.submit(session, Input("steer", "new text", id="new-1"), "g1")
            assert fresh.disposition is Disposition.QUEUED
            gen.stop()
        entries = await host.entries(session_id=session)
        assert {e.input_id for e in entries} == {"old-1", "new-1"}


def test_a_failing_migration_leaves_the_older_store_as_it_was(
    store: FleetStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every migration runs in one transaction: one that fails part-way (here a made-up last
    one) leaves the version-1 store at version 1, without the later migrations' index and columns."""
    session = new_session()
    _build_version_1(store, session)
    failing = (*MIGRATIONS, ("CREATE TABLE ls_probe (x INTEGER)", "SELECT * FROM ls_no_such_table"))
    monkeypatch.setattr(fleet_store_module, "MIGRATIONS", failing)
    monkeypatch.setattr(fleet_store_module, "SCHEMA_VERSION", len(failing))
    conn = _raw(store)
    try:
        with pytest.raises(Exception, match="ls_no_such_table"):
            conn.ensure_schema()
        assert _version(conn) == 1
        conn.begin_read()
        try:
            assert not _has_relation(conn, "ls_probe")
            assert not _has_relation(conn, "ls_changes_session")
            assert not _columns(conn, "ls_leases") & MODE_COLUMNS
            assert conn.execute("SELECT count(*) FROM ls_changes").fetchone()[0] == 3
        finally:
            conn.commit()
    finally:
        conn.close()


@pytest.mark.anyio
async def test_a_version_2_store_gets_the_mode_columns_and_records_the_owners_modes(
    store: FleetStore,
) -> None:
    """A store built by hand at version 2 (the schema before the delivery modes) is migrated in
    place by the first node that opens it: its lease row keeps its epoch and generation and gets
    empty mode columns, and the next owner's take records its runtime's modes (C30)."""
    session = new_session()
    _build_version_1(store, session, version=2)
    conn = _raw(store)
    try:
        assert _version(conn) == 2
        assert not _columns(conn, "ls_leases") & MODE_COLUMNS
    finally:
        conn.close()
    async with store.fleet("host") as host:
        conn = _raw(store)
        try:
            assert _version(conn) == SCHEMA_VERSION
            assert _columns(conn, "ls_leases") >= MODE_COLUMNS
        finally:
            conn.close()
        before = await host.lease(session)
        assert before is not None
        assert (before.node_id, before.epoch, before.generation_id) == ("old-node", 1, "g0")
        assert (before.live, before.steering_mode, before.follow_up_mode) == (False, None, None)
        runtime = LiveRuntime(
            session_id=session, steering_mode="one-at-a-time", follow_up_mode="one-at-a-time"
        )
        async with store.fleet("worker") as worker, worker.own(runtime):
            lease = await host.lease(session)
            assert lease is not None
            assert (lease.node_id, lease.epoch, lease.live) == ("worker", 2, True)
            assert (lease.steering_mode, lease.follow_up_mode) == ("one-at-a-time", "one-at-a-time")
            old = await host.receipt(session, "old-1")
            assert old is not None
            assert old.disposition is Disposition.APPLIED


@pytest.mark.anyio
async def test_a_version_3_store_gets_the_delivery_column_and_records_whether_the_owner_delivers(
    store: FleetStore,
) -> None:
    """A store at version 3 (modes, no ``delivery``) is migrated in place: its lease keeps what it
    held and reads ``delivery`` None; an owner made with ``boundary_delivery=False`` then records
    ``unavailable``, and a host's capability says so (C1), where a delivering owner's says
    ``request_boundary``."""
    session = new_session()
    _build_version_1(store, session, version=3)
    conn = _raw(store)
    try:
        assert _version(conn) == 3
        assert "delivery" not in _columns(conn, "ls_leases")
    finally:
        conn.close()
    async with store.fleet("host") as host:
        before = await host.lease(session)
        assert before is not None
        assert (before.node_id, before.epoch, before.generation_id) == ("old-node", 1, "g0")
        assert before.delivery is None
        async with store.fleet("worker") as worker:
            async with worker.own(LiveRuntime(session_id=session, boundary_delivery=False)):
                lease = await host.lease(session)
                assert lease is not None
                assert (lease.epoch, lease.live, lease.delivery) == (2, True, "unavailable")
                assert (await host.capability(session))["mode"] == "unavailable"
            async with worker.own(LiveRuntime(session_id=session)):
                lease = await host.lease(session)
                assert lease is not None
                assert (lease.epoch, lease.delivery) == (3, "request_boundary")
                assert (await host.capability(session))["mode"] == "request_boundary"


@pytest.mark.anyio
async def test_a_newer_store_is_refused_naming_both_versions(store: FleetStore) -> None:
    """A store a later library migrated is refused with FleetError naming both versions, and
    left alone: never migrated down, never written."""
    conn = store.connection()
    try:
        conn.begin()
        conn.execute("UPDATE ls_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
        conn.commit()
    finally:
        conn.close()
    expected = (
        f"fleet store schema version {SCHEMA_VERSION + 1} is newer than this library's {SCHEMA_VERSION}: "
        "upgrade live-steering"
    )
    with pytest.raises(FleetError) as raised:
        async with store.fleet("node"):
            pass
    assert expected in str(raised.value)
    conn = _raw(store)
    try:
        assert _version(conn) == SCHEMA_VERSION + 1
    finally:
        conn.close()


def test_a_meta_table_without_a_version_is_not_a_fleet_store(store: FleetStore) -> None:
    """Tables named like the fleet's without a schema version this library wrote are refused."""
    conn = _raw(store)
    try:
        conn.begin()
        conn.execute("CREATE TABLE ls_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.commit()
        with pytest.raises(FleetError, match="without a schema version"):
            conn.ensure_schema()
    finally:
        conn.close()


@pytest.mark.parametrize("version", [0, 1], ids=["empty", "version-1"])
def test_two_nodes_opening_a_store_at_once_build_or_migrate_it_once(store: FleetStore, version: int) -> None:
    """Two connections finding the store empty, or at version 1, at the same moment: both succeed
    and the tables are built or migrated once (SQLite: the writing transaction holds the store;
    PostgreSQL: the dialect's schema lock). On PostgreSQL both are held at that lock until each
    has read the old version, so the second one's look after the lock must see what the first one
    built (a cached "no such table" would build it again: ``relation ... already exists``)."""
    if version:
        _build_version_1(store, new_session())
    conns = [_raw(store), _raw(store)]
    start = threading.Barrier(2)
    errors: list[BaseException] = []
    gate: Any = None
    if store.kind == "postgres":
        import psycopg

        gate = psycopg.connect(store.location, autocommit=True)
        gate.execute("SELECT pg_advisory_lock(%s, 0)", (SCHEMA_LOCK_KEY,))

    def open_it(conn: StoreConnection) -> None:
        start.wait(timeout=10)
        try:
            conn.ensure_schema()
        except BaseException as exc:  # handed to the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=open_it, args=(conn,)) for conn in conns]
    for thread in threads:
        thread.start()
    try:
        if gate is not None:
            waiting = (
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = %s"
            )
            deadline = time.monotonic() + 30
            while gate.execute(waiting, (SCHEMA_LOCK_KEY,)).fetchone() != (2,):  # both read, both wait
                assert time.monotonic() < deadline, (
                    "the two connections never both waited for the schema lock"
                )
                time.sleep(0.005)
            gate.execute("SELECT pg_advisory_unlock(%s, 0)", (SCHEMA_LOCK_KEY,))
        for thread in threads:
            thread.join(timeout=30)
        assert errors == []
        assert [_version(conn) for conn in conns] == [SCHEMA_VERSION, SCHEMA_VERSION]
    finally:
        if gate is not None:
            gate.close()
        for conn in conns:
            conn.close()
