"""What the fleet's shell commands share (``steer``, ``stop``, ``receipts``): the store
arguments, the checks made before a fleet opens, and a plain connection for the reads.

A host command never creates a store. Opening a ``Fleet`` creates the fleet's tables in
whatever database it is pointed at, so a mistyped path or DSN would write tables and
then look like an idle session: every command first checks, reading only, that the
tables are there (the nodes that own sessions create them). Every problem found here is
a ``StoreProblem``: one line on stderr and the command's exit status for it.
"""

from __future__ import annotations

import argparse
import math
import os
import sqlite3
from pathlib import Path
from typing import Any

from .._errors import LiveSteeringError
from .._extras import install_hint
from .._validate import checked_id
from ..fleet import Fleet, SQLiteFleet
from ..fleet._store import StoreConnection
from ._output import dsn, file_path

__all__ = [
    "StoreProblem",
    "check_store",
    "connect",
    "fleet_at",
    "store_arguments",
    "timeout_argument",
    "usage_error",
]

#: Every table of the fleet's schema (``fleet/_store.py``): a database without them is no store.
_TABLES = ("ls_meta", "ls_leases", "ls_requests", "ls_receipts")


class StoreProblem(LiveSteeringError):
    """The store named cannot be used (missing, not a fleet store, unreachable); ``code``: exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def store_arguments(parser: argparse.ArgumentParser) -> None:
    """``--store PATH | --dsn DSN`` and ``SESSION`` (``steer`` and ``stop``)."""
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--store", metavar="PATH", type=file_path, help="a SQLite fleet store (processes on one machine)"
    )
    where.add_argument(
        "--dsn", metavar="DSN", type=dsn, help="a PostgreSQL fleet store (needs the 'postgres' extra)"
    )
    parser.add_argument("session", metavar="SESSION", help="the session id the owner runs")


def timeout_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds the owner has to decide (default 10)",
    )


def usage_error(args: argparse.Namespace) -> str | None:
    """What is wrong with ``--timeout``, ``SESSION`` or ``--store`` before anything opens, or ``None``."""
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        return f"--timeout must be a finite number of seconds above 0, got {args.timeout}"
    try:
        # the library's rule for session ids (non-empty, at most 128 characters, UTF-8, no NUL):
        # a usage error here, not a ValueError's traceback from inside the fleet
        checked_id(args.session, "SESSION")
    except ValueError as exc:
        return str(exc)
    if args.store is not None:
        return _path_problem(args.store)
    return None


def _path_problem(path: str) -> str | None:
    if os.path.isdir(path):
        return f"{path!r} is a directory, not a fleet store"
    if not os.path.isfile(path):
        # opening would create an empty store: a mistyped path must not look like an idle session
        return f"no fleet store at {path!r}"
    return None


def postgres(command: str) -> Any:
    """``live_steering.fleet._postgres``, or a ``StoreProblem`` (exit 2) naming the extra to install."""
    try:
        from ..fleet import _postgres
    except ImportError as exc:
        if exc.name != "psycopg":
            raise
        raise StoreProblem(install_hint(f"{command} --dsn", "postgres", "psycopg[binary]"), 2) from exc
    return _postgres


def connect(path: str | None, dsn: str | None, command: str, *, unreachable: int) -> StoreConnection:
    """A plain connection to a store checked to hold the fleet's tables (reads and lock probes only).

    ``unreachable``: the exit status when the store cannot be opened or holds no fleet.
    """
    if dsn is not None:
        pg = postgres(command)
        where = pg.redact(dsn)
        try:
            conn: StoreConnection = pg.PostgresConnection(dsn)
        except pg.psycopg.Error as exc:
            raise StoreProblem(f"fleet store {where}: {exc}", unreachable) from exc
        try:
            missing = [table for table in _TABLES if not conn.table_exists(table)]
        except pg.psycopg.Error as exc:
            conn.close()
            raise StoreProblem(f"fleet store {where}: {exc}", unreachable) from exc
        if missing:
            conn.close()
            raise StoreProblem(
                f"no fleet store in database {where!r}: it has no fleet tables ({', '.join(missing)}); "
                "a host command never creates them (a node that owns a session does)",
                unreachable,
            )
        return conn
    assert path is not None
    check_sqlite(path, unreachable)
    from ..fleet._sqlite import SQLiteConnection

    return SQLiteConnection(path)


def check_sqlite(path: str, code: int) -> None:
    """Refuse (``StoreProblem``) a path that is no SQLite fleet store, reading it only."""
    problem = _path_problem(path)
    if problem is not None:
        raise StoreProblem(problem, code)
    try:
        conn = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=ro", uri=True)
        try:
            names = {row[0] for row in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise StoreProblem(f"no fleet store at {path!r}: {exc}", code) from exc
    missing = [table for table in _TABLES if table not in names]
    if missing:
        raise StoreProblem(
            f"no fleet store at {path!r}: the file has no fleet tables ({', '.join(missing)}); "
            "a host command never creates them (a node that owns a session does)",
            code,
        )


def check_store(args: argparse.Namespace, command: str) -> None:
    """``steer``'s and ``stop``'s check before a fleet opens: the store exists and is a fleet's."""
    connect(args.store, args.dsn, command, unreachable=2).close()


def fleet_at(path: str | None, dsn: str | None, timeout: float = 10.0) -> Fleet:
    """A fleet node on the store (call ``connect`` or ``check_store`` first: this one creates tables)."""
    if dsn is not None:
        from ..fleet import PostgresFleet

        return PostgresFleet(dsn, timeout=timeout)
    assert path is not None
    return SQLiteFleet(path, timeout=timeout)
