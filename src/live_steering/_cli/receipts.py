"""``live-steering receipts PATH`` (or ``--dsn DSN``): print the receipts a journal or fleet store holds.

Read-only: it takes no lock and runs no recovery, so it is safe beside a live
writer. Inputs a dead process left ``queued`` are shown as they are stored until
a ``ReceiptJournal`` opens the file and recovers it (CONTRACT.md C23), or, in a
fleet store, until a node takes over or recovers the session. PATH may be a
receipt journal or a SQLite fleet store (told apart by their tables); ``--dsn``
reads a PostgreSQL fleet store. For a fleet store, RUNTIME is ``session#epoch``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

from .._extras import install_hint
from .._types import Disposition
from ..fleet._store import read_sqlite_receipts
from ..journal import JournalEntry, JournalError, read_receipts
from ..journal._store import iso

#: RUNTIME is ``session#n``: identities are per runtime, so the same id may appear once
#: for each runtime that journaled into the file (two runs of the demo, say).
_COLUMNS = ("ID", "GENERATION", "DISPOSITION", "REASON", "WHEN", "RUNTIME")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "receipts",
        help="print the receipts stored in a receipt journal",
        description="Print the receipts stored in a receipt journal (read-only; no recovery).",
    )
    parser.add_argument("path", metavar="PATH", nargs="?", help="a journal file or a SQLite fleet store")
    parser.add_argument("--dsn", metavar="DSN", help="read a PostgreSQL fleet store instead of PATH")
    parser.add_argument("--session", metavar="S", help="fleet stores: only session S")
    parser.add_argument("--generation", metavar="G", help="only inputs anchored to generation G")
    parser.add_argument(
        "--disposition",
        metavar="D",
        choices=[d.value for d in Disposition],
        help="only inputs whose disposition is D (queued, applied, held, unknown)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per receipt: the receipt wire shape plus kind, reason and updatedAt",
    )
    parser.set_defaults(handler=run)


def _printable(text: str) -> str:
    # ids and generation ids may hold control characters (only NUL is refused); never let
    # one move the cursor or recolour the terminal
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def _row(entry: JournalEntry) -> tuple[str, ...]:
    return (
        _printable(entry.input_id),
        _printable(entry.generation_id),
        entry.disposition.value,
        entry.reason or "-",
        iso(entry.updated_at),
        f"{_printable(entry.session_id)}#{entry.runtime_no}",
    )


def _table(entries: list[JournalEntry]) -> str:
    rows = [_COLUMNS, *(_row(e) for e in entries)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def _read(args: argparse.Namespace) -> list[JournalEntry]:
    """Journal or fleet store, whichever PATH (or ``--dsn``) is."""
    if args.dsn is not None:
        try:
            from ..fleet._postgres import PostgresConnection
        except ImportError as exc:
            hint = install_hint("live-steering receipts --dsn", "postgres", "psycopg[binary]")
            raise ImportError(hint) from exc

        conn = PostgresConnection(args.dsn)
        try:
            entries = conn.entries(session_id=args.session)
        finally:
            conn.close()
    else:
        if not Path(args.path).is_file():
            raise FileNotFoundError(f"no receipt journal or fleet store at {args.path!r}")
        fleet_entries = read_sqlite_receipts(args.path, session_id=args.session)
        if fleet_entries is None:
            return read_receipts(args.path, generation_id=args.generation, disposition=args.disposition)
        entries = fleet_entries
    return [
        e
        for e in entries
        if (args.generation is None or e.generation_id == args.generation)
        and (args.disposition is None or e.disposition.value == args.disposition)
    ]


def run(args: argparse.Namespace) -> int:
    if (args.path is None) == (args.dsn is None):
        print("live-steering receipts: give a PATH or --dsn DSN (one of them)", file=sys.stderr)
        return 2
    try:
        entries = _read(args)
    except (FileNotFoundError, JournalError, sqlite3.Error, ImportError) as exc:
        print(f"live-steering receipts: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # psycopg's errors, without importing psycopg here
        if type(exc).__module__.split(".")[0] != "psycopg":
            raise
        print(f"live-steering receipts: {exc}", file=sys.stderr)
        return 1
    if args.json:
        for entry in entries:
            print(json.dumps(entry.to_dict(), ensure_ascii=False))
    else:
        print(_table(entries))
    queued = sum(e.disposition is Disposition.QUEUED for e in entries)
    if queued:
        print(
            f"note: {queued} queued: still live, or left by a process that died "
            "(finalised when a ReceiptJournal next opens the file, or a fleet node takes the session over)",
            file=sys.stderr,
        )
    return 0
