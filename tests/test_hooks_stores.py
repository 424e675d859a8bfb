"""The hook relay's two engines: one dialect, schema versions and migrations (C26b).

The queue is written once (``_store.RelayStore``); each engine spells every named
statement of the dialect and nothing else. Both record their schema version in a meta
table: a version-1 store (built here by hand, with the DDL that version shipped) is
migrated to today's in one transaction, a newer one is refused, naming both versions.
"""

from __future__ import annotations

import ast
import doctest
import pathlib
import sqlite3
import threading
import time
import uuid

import pytest

from live_steering import LiveSteeringError
from live_steering.hooks import SqliteHookStore, StoreError, _sqlite, _store
from live_steering.hooks._store import SCHEMA_VERSION, STATEMENT_NAMES

HOOKS = pathlib.Path(_store.__file__).parent
NEWER = f"hook store schema version {SCHEMA_VERSION + 1} is newer than this library's {SCHEMA_VERSION}"

#: Version 1 as it shipped (SQLite: the version in ``user_version`` alone, no meta table).
SQLITE_V1 = """
CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY, vendor TEXT, epoch INTEGER NOT NULL DEFAULT 1,
    ended INTEGER NOT NULL DEFAULT 0 CHECK (ended IN (0, 1)), updated_at REAL NOT NULL
);
CREATE TABLE instructions (
    arrival INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, command_id TEXT NOT NULL,
    text TEXT NOT NULL, vendor TEXT, epoch INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('queued', 'delivering', 'delivered', 'dropped', 'unknown')),
    reason TEXT, enqueued_at REAL NOT NULL, claim TEXT, claim_pid INTEGER, claimed_at REAL,
    finished_at REAL, moment TEXT, UNIQUE (session_id, command_id)
);
CREATE INDEX instructions_live ON instructions (session_id, state, arrival);
CREATE INDEX instructions_claim ON instructions (claim);
CREATE TABLE events (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT, type TEXT NOT NULL, session_id TEXT,
    command_id TEXT, time REAL NOT NULL, fields TEXT NOT NULL
);
CREATE INDEX events_session ON events (session_id, sequence);
INSERT INTO sessions (session_id, vendor, updated_at) VALUES ('s', 'claude-code', 1.0);
INSERT INTO instructions (session_id, command_id, text, vendor, epoch, state, enqueued_at)
    VALUES ('s', 'old', 'Use the corrected path', 'claude-code', 1, 'queued', 1.0);
INSERT INTO events (type, session_id, command_id, time, fields)
    VALUES ('control.accepted', 's', 'old', 1.0, '{"command_id": "old", "cause": "old", "pending": 1}');
PRAGMA user_version = 1;
"""

#: Version 1 as it shipped on PostgreSQL (its meta table already held the version).
POSTGRES_V1 = """
CREATE TABLE ls_hook_sessions (
    session_id TEXT PRIMARY KEY, vendor TEXT, epoch INTEGER NOT NULL DEFAULT 1,
    ended INTEGER NOT NULL DEFAULT 0 CHECK (ended IN (0, 1)), updated_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE ls_hook_instructions (
    arrival BIGSERIAL PRIMARY KEY, session_id TEXT NOT NULL, command_id TEXT NOT NULL,
    text TEXT NOT NULL, vendor TEXT, epoch INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('queued', 'delivering', 'delivered', 'dropped', 'unknown')),
    reason TEXT, enqueued_at DOUBLE PRECISION NOT NULL, claim TEXT, claim_pid INTEGER,
    claimed_at DOUBLE PRECISION, finished_at DOUBLE PRECISION, moment TEXT,
    UNIQUE (session_id, command_id)
);
CREATE INDEX ls_hook_instructions_live ON ls_hook_instructions (session_id, state, arrival);
CREATE INDEX ls_hook_instructions_claim ON ls_hook_instructions (claim);
CREATE TABLE ls_hook_events (
    sequence BIGSERIAL PRIMARY KEY, type TEXT NOT NULL, session_id TEXT, command_id TEXT,
    time DOUBLE PRECISION NOT NULL, fields TEXT NOT NULL
);
CREATE INDEX ls_hook_events_session ON ls_hook_events (session_id, sequence);
CREATE TABLE ls_hook_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO ls_hook_meta VALUES ('schema_version', '1');
INSERT INTO ls_hook_sessions (session_id, vendor, updated_at) VALUES ('s', 'claude-code', 1.0);
INSERT INTO ls_hook_instructions (session_id, command_id, text, vendor, epoch, state, enqueued_at)
    VALUES ('s', 'old', 'Use the corrected path', 'claude-code', 1, 'queued', 1.0);
INSERT INTO ls_hook_events (type, session_id, command_id, time, fields)
    VALUES ('control.accepted', 's', 'old', 1.0, '{"command_id": "old", "cause": "old", "pending": 1}');
"""


# -- one dialect ------------------------------------------------------------------------------


def test_each_engine_spells_exactly_the_dialect() -> None:
    """SQLite and PostgreSQL each provide every named statement of ``STATEMENT_NAMES``, and no other."""
    from live_steering.hooks import _postgres

    assert set(_sqlite.STATEMENTS) == STATEMENT_NAMES
    assert set(_postgres.STATEMENTS) == STATEMENT_NAMES
    assert "?" not in "".join(_postgres.STATEMENTS.values())  # its own spelling, not SQLite's
    assert all("ls_hook_" in sql for sql in _postgres.STATEMENTS.values())


def test_no_engine_builds_on_another() -> None:
    """Each engine subclasses the queue (``RelayStore``) alone; neither imports the other or ``re``."""
    from live_steering.hooks._postgres import PostgresHookStore

    assert PostgresHookStore.__mro__[1] is _store.RelayStore
    assert SqliteHookStore.__mro__[1] is _store.RelayStore
    for engine, other in (("_sqlite", "_postgres"), ("_postgres", "_sqlite")):
        tree = ast.parse((HOOKS / f"{engine}.py").read_text(encoding="utf-8"))
        imported = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        } | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        assert other not in imported, engine
        assert "re" not in imported, engine


def test_store_error_is_a_library_error() -> None:
    """``StoreError`` is a ``LiveSteeringError`` (the library's one root)."""
    assert issubclass(StoreError, LiveSteeringError)
    assert issubclass(StoreError, Exception)


def test_sqlite_doctests_pass() -> None:
    """The example in ``SqliteHookStore``'s docstring runs and says what it shows."""
    result = doctest.testmod(_sqlite)
    assert result.attempted > 0
    assert result.failed == 0


# -- SQLite ----------------------------------------------------------------------------------


def test_a_sqlite_claim_is_committed_fully_synced_and_only_its_confirm_is_not(tmp_path: pathlib.Path) -> None:
    """What "never delivered twice" rests on (C26b, docs/hooks.md "What it costs"): the claim
    (``queued -> delivering``) commits with ``synchronous=FULL``, so no power loss can roll it
    back to ``queued`` after its reply left; only the confirm after the reply commits with
    ``NORMAL`` (a lost confirm is recovered ``unknown``, never a second delivery), and the
    connection is FULL again after it (the HTTP route keeps its store open for the next claim)."""
    seen: list[tuple[str, int]] = []
    opened: list[SqliteHookStore] = []

    def trace(point: str) -> None:
        if point == "before-commit" and opened:
            seen.append((steps[-1], opened[0]._conn.execute("PRAGMA synchronous").fetchone()[0]))
        elif point != "before-commit":
            steps.append(point)

    steps: list[str] = []
    store = SqliteHookStore(tmp_path / "hooks.db", trace=trace)
    opened.append(store)
    try:
        store.enqueue("s", "c1", "Use the corrected path")
        claim = store.claim("claude-code", "s", "PostToolBatch")
        assert claim.delivered == ("c1",)
        store.confirm(claim)
        store.enqueue("s", "c2", "and the next one")
        store.confirm(store.claim("claude-code", "s", "PostToolBatch"))
        full, normal = 2, 1
        assert seen == [
            ("enqueue", full),
            ("claim", full),
            ("finish", normal),
            ("enqueue", full),
            ("claim", full),
            ("finish", normal),
        ]
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == full
        assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        store.close()


def sqlite_v1(path: pathlib.Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(SQLITE_V1)
    conn.close()


def sqlite_meta(path: pathlib.Path) -> tuple[int, list[tuple[str, str]], list[str]]:
    """(user_version, meta rows, index names) of the file."""
    conn = sqlite3.connect(path)
    try:
        user_version = conn.execute("PRAGMA user_version").fetchone()[0]
        try:
            meta = conn.execute("SELECT key, value FROM meta").fetchall()
        except sqlite3.OperationalError:
            meta = []
        indexes = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")]
    finally:
        conn.close()
    return user_version, meta, indexes


def test_a_new_sqlite_store_records_its_version(tmp_path: pathlib.Path) -> None:
    """A new file gets today's layout: the meta table names the version, user_version mirrors it."""
    SqliteHookStore(tmp_path / "hooks.db").close()
    user_version, meta, indexes = sqlite_meta(tmp_path / "hooks.db")
    assert (user_version, meta) == (SCHEMA_VERSION, [("schema_version", str(SCHEMA_VERSION))])
    assert "instructions_open_claims" in indexes


def test_a_sqlite_version_1_store_is_migrated_with_its_rows(tmp_path: pathlib.Path) -> None:
    """A version-1 file (built by hand) opens migrated to today's version, its queue intact."""
    path = tmp_path / "hooks.db"
    sqlite_v1(path)
    with SqliteHookStore(path) as store:
        assert store.receipt("s", "old").state == "queued"  # type: ignore[union-attr]
        claim = store.claim("claude-code", "s", "PostToolUse")
        assert claim.delivered == ("old",)
        store.confirm(claim)
        assert next(e["type"] for e in store.events()) == "control.accepted"
        store.claim("claude-code", "s", "PostToolUse", agent_id="agent-1")  # version 4's table
        assert [r["agents"] for r in store.sessions()] == [["agent-1"]]
    user_version, meta, indexes = sqlite_meta(path)
    assert (user_version, meta) == (SCHEMA_VERSION, [("schema_version", str(SCHEMA_VERSION))])
    assert "instructions_open_claims" in indexes
    SqliteHookStore(path).close()  # and opens again as current


def test_a_failed_sqlite_migration_leaves_the_store_as_it_was(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The migration is one transaction: a statement that fails undoes the ones before it."""
    path = tmp_path / "hooks.db"
    sqlite_v1(path)
    broken = {**_sqlite.MIGRATIONS, 2: (*_sqlite.MIGRATIONS[2], "CREATE TABLE sessions (x)")}
    monkeypatch.setattr(SqliteHookStore, "MIGRATIONS", broken)
    with pytest.raises(StoreError, match="already exists"):
        SqliteHookStore(path)
    user_version, meta, indexes = sqlite_meta(path)
    assert (user_version, meta) == (1, [])
    assert "instructions_open_claims" not in indexes
    monkeypatch.undo()
    with SqliteHookStore(path) as store:
        assert store.receipt("s", "old") is not None


def test_a_newer_sqlite_store_is_refused_naming_both_versions(tmp_path: pathlib.Path) -> None:
    """A store a newer library wrote is refused, untouched, with both versions and the way out."""
    path = tmp_path / "hooks.db"
    SqliteHookStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match=f"{NEWER}: upgrade live-steering"):
        SqliteHookStore(path)
    assert sqlite_meta(path)[1] == [("schema_version", str(SCHEMA_VERSION + 1))]


# -- PostgreSQL --------------------------------------------------------------------------------


@pytest.fixture
def pg_schema(postgres_dsn: str) -> tuple[str, str]:
    """(a DSN whose current schema is a fresh one, that schema's name)."""
    import psycopg

    schema = f"hooks_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{postgres_dsn} options='-c search_path={schema}'", schema


def pg_run(dsn: str, script: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in script.split(";"):
            if statement.strip():
                conn.execute(statement)


def pg_meta(dsn: str, schema: str) -> tuple[list[tuple[str, str]], set[str]]:
    """(meta rows, index names) of the schema."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        meta = conn.execute("SELECT key, value FROM ls_hook_meta").fetchall()
        indexes = {
            r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s", (schema,))
        }
    return meta, indexes


def test_a_postgres_version_1_store_is_migrated_with_its_rows(pg_schema: tuple[str, str]) -> None:
    """A version-1 schema (built by hand) opens migrated to today's version, its queue intact."""
    from live_steering.hooks._postgres import PostgresHookStore

    dsn, schema = pg_schema
    pg_run(dsn, POSTGRES_V1)
    with PostgresHookStore(dsn) as store:
        assert store.receipt("s", "old").state == "queued"  # type: ignore[union-attr]
        claim = store.claim("claude-code", "s", "PostToolUse")
        assert claim.delivered == ("old",)
        store.confirm(claim)
        store.claim("claude-code", "s", "PostToolUse", agent_id="agent-1")  # version 4's table
        assert [r["agents"] for r in store.sessions()] == [["agent-1"]]
    meta, indexes = pg_meta(dsn, schema)
    assert meta == [("schema_version", str(SCHEMA_VERSION))]
    assert "ls_hook_instructions_open_claims" in indexes
    PostgresHookStore(dsn).close()


def test_two_processes_creating_an_empty_postgres_store_at_once_both_open_it(
    pg_schema: tuple[str, str],
) -> None:
    """Both find no tables and wait for the DDL lock (held here until both wait): the second
    one's look after the lock sees the first one's tables, and nothing is created twice."""
    import psycopg

    from live_steering.hooks._postgres import _DDL, PostgresHookStore

    dsn, schema = pg_schema
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def open_store() -> None:
        start.wait(timeout=10)
        try:
            PostgresHookStore(dsn).close()
        except BaseException as exc:  # handed to the test's thread
            errors.append(exc)

    with psycopg.connect(dsn, autocommit=True) as gate:
        gate.execute("SELECT pg_advisory_lock(%s, 0)", (_DDL,))
        threads = [threading.Thread(target=open_store) for _ in range(2)]
        for thread in threads:
            thread.start()
        waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = %s"
        deadline = time.monotonic() + 30
        while gate.execute(waiting, (_DDL,)).fetchone() != (2,):
            assert time.monotonic() < deadline, "the two stores never both waited for the DDL lock"
            time.sleep(0.005)
        gate.execute("SELECT pg_advisory_unlock(%s, 0)", (_DDL,))
        for thread in threads:
            thread.join(timeout=30)
    assert errors == []
    meta, _indexes = pg_meta(dsn, schema)
    assert meta == [("schema_version", str(SCHEMA_VERSION))]


def test_a_failed_postgres_migration_leaves_the_store_as_it_was(
    pg_schema: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The migration is one transaction: a statement that fails undoes the ones before it."""
    from live_steering.hooks import _postgres
    from live_steering.hooks._postgres import PostgresHookStore

    dsn, schema = pg_schema
    pg_run(dsn, POSTGRES_V1)
    broken = {**_postgres.MIGRATIONS, 2: (*_postgres.MIGRATIONS[2], "CREATE TABLE ls_hook_sessions (x INT)")}
    monkeypatch.setattr(PostgresHookStore, "MIGRATIONS", broken)
    with pytest.raises(StoreError, match="already exists"):
        PostgresHookStore(dsn)
    meta, indexes = pg_meta(dsn, schema)
    assert meta == [("schema_version", "1")]
    assert "ls_hook_instructions_open_claims" not in indexes


def test_a_newer_postgres_store_is_refused_naming_both_versions(pg_schema: tuple[str, str]) -> None:
    """A schema a newer library wrote is refused, untouched, with both versions and the way out."""
    from live_steering.hooks._postgres import PostgresHookStore

    dsn, schema = pg_schema
    PostgresHookStore(dsn).close()
    pg_run(dsn, f"UPDATE ls_hook_meta SET value = '{SCHEMA_VERSION + 1}' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match=f"{NEWER}: upgrade live-steering"):
        PostgresHookStore(dsn)
    assert pg_meta(dsn, schema)[0] == [("schema_version", str(SCHEMA_VERSION + 1))]
