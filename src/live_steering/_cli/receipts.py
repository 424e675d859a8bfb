"""``live-steering receipts PATH [--recover]``: print the receipts a journal holds.

Without ``--recover`` it is read-only: no lock taken, no recovery, so it is safe
beside a live writer. It probes the journal's lock to say whether inputs shown
``queued`` belong to a live writer or were left by a process that died, and marks
those whose write-ahead mark is durable (``queued (writing)``: recovery makes them
``unknown``, the others ``held``; CONTRACT.md C23). ``--recover`` runs that
recovery first, by opening the journal, and refuses while a live writer has it.

PATH may also be a SQLite fleet store (told apart by its tables), and ``--dsn``
reads a PostgreSQL fleet store; there RUNTIME is ``session#epoch``, and what a
dead owner left ``queued`` is finalised by the node that takes the session over
or recovers it (``--recover`` is for journals only).

Exit codes: 0 listed; 1 the file is missing or cannot be read or recovered (a
live writer holds it), or the fleet store cannot be reached; 2 the file is
damaged or is not a receipt journal (and usage errors). Every error is one line
on stderr.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio

from .._extras import install_hint
from .._types import Disposition
from ..fleet._store import read_sqlite_receipts
from ..journal import (
    JournalBusyError,
    JournalCorruptError,
    JournalEntry,
    JournalError,
    ReceiptJournal,
    RecoveryReport,
    live_writer,
    read_receipts,
)
from ..journal._store import iso
from ._output import error, stdout_gone

__all__ = ["register", "run"]

#: RUNTIME is ``session#n``: identities are per runtime, so the same id may appear once
#: for each runtime that journaled into the file (two runs of the demo, say).
_COLUMNS = ("ID", "GENERATION", "DISPOSITION", "REASON", "WHEN", "RUNTIME")

_PROG = "live-steering receipts"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "receipts",
        help="print the receipts stored in a receipt journal or a fleet store",
        description="Print the receipts stored in a receipt journal or a fleet store. Read-only unless "
        "--recover: safe beside a live writer.",
    )
    parser.add_argument("path", metavar="PATH", nargs="?", help="a journal file or a SQLite fleet store")
    parser.add_argument("--dsn", metavar="DSN", help="read a PostgreSQL fleet store instead of PATH")
    parser.add_argument("--session", metavar="S", help="only inputs of session S (a runtime's session_id)")
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
        help="one JSON object per receipt: the receipt wire shape plus kind, reason, updatedAt and writing",
    )
    parser.add_argument(
        "--recover",
        action="store_true",
        help="first finalise what a process that died left queued (held, or unknown if marked writing); "
        "refused while a live writer has the file open",
    )
    parser.set_defaults(handler=run)


def _printable(text: str) -> str:
    # ids and generation ids may hold control characters (only NUL is refused); never let
    # one move the cursor or recolour the terminal
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def _writing(entry: JournalEntry) -> bool:
    """Queued with a durable write-ahead mark: the writer may have it (recovery: ``unknown``)."""
    return entry.disposition is Disposition.QUEUED and entry.marked


def _row(entry: JournalEntry) -> tuple[str, ...]:
    return (
        _printable(entry.input_id),
        _printable(entry.generation_id),
        "queued (writing)" if _writing(entry) else entry.disposition.value,
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


async def _recover(path: str) -> RecoveryReport:
    async with ReceiptJournal(path) as journal:
        return journal.recovery


def _recovered(path: str, report: RecoveryReport) -> str:
    total = len(report.held) + len(report.unknown)
    if not total:
        return f"recovered {path}: nothing was left queued"
    return (
        f"recovered {path}: {total} left queued by a process that died: {len(report.held)} held, "
        f"{len(report.unknown)} unknown (marked writing), reason runtime-lost"
    )


def _queued_note(path: str, entries: list[JournalEntry], live: bool | None) -> str | None:
    """What the ``queued`` rows shown are: a live writer's, or a dead process's awaiting recovery."""
    queued = [e for e in entries if e.disposition is Disposition.QUEUED]
    if live:
        pending = f"; {len(queued)} queued may still change" if queued else ""
        return f"note: a live writer holds this file (its lock is taken): this is its last commit{pending}"
    if not queued:
        return None
    writing = sum(map(_writing, queued))
    effect = (
        f"{writing} unknown (marked writing), {len(queued) - writing} held (never handed to a writer), "
        "reason runtime-lost"
    )
    if live is None:
        return (
            f"note: {len(queued)} queued; cannot tell whether a live writer holds this file "
            f"(its lock cannot be probed); recovery would make them {effect}"
        )
    return (
        f"note: {len(queued)} queued, left by a process that died (no live writer holds this file); "
        f"'{_PROG} {shlex.quote(path)} --recover' makes them {effect}"
    )


def _fleet_entries(args: argparse.Namespace) -> list[JournalEntry] | None:
    """The receipts of a fleet store (``--dsn``, or PATH when it is a SQLite fleet store), filtered;
    ``None`` when PATH is not a fleet store (then it is read as a receipt journal)."""
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
            return None  # the journal path says what is missing
        try:
            found = read_sqlite_receipts(args.path, session_id=args.session)
        except sqlite3.DatabaseError:
            return None  # not SQLite, or damaged: the journal's reader reports it as corruption
        if found is None:
            return None
        entries = found
    return [
        e
        for e in entries
        if (args.generation is None or e.generation_id == args.generation)
        and (args.disposition is None or e.disposition.value == args.disposition)
    ]


def _print(entries: list[JournalEntry], as_json: bool) -> None:
    if as_json:
        for entry in entries:
            wire = entry.to_dict()
            wire["writing"] = _writing(entry)
            print(json.dumps(wire, ensure_ascii=False))
    else:
        print(_table(entries))
    sys.stdout.flush()


def _run_fleet(args: argparse.Namespace) -> int | None:
    """List a fleet store; ``None`` when PATH is a receipt journal instead."""
    try:
        entries = _fleet_entries(args)
    except (OSError, sqlite3.Error, ImportError) as exc:
        error(_PROG, exc)
        return 1
    except Exception as exc:  # psycopg's errors, without importing psycopg here
        if type(exc).__module__.split(".")[0] != "psycopg":
            raise
        error(_PROG, exc)
        return 1
    if entries is None:
        return None
    if args.recover:
        error(_PROG, "--recover is for receipt journals: a fleet node recovers a session as it takes it over")
        return 2
    try:
        _print(entries, args.json)
    except BrokenPipeError:
        stdout_gone()
    queued = sum(e.disposition is Disposition.QUEUED for e in entries)
    if queued:
        print(
            f"note: {queued} queued: still live, or left by an owner that died "
            "(finalised when a fleet node takes the session over or recovers it)",
            file=sys.stderr,
        )
    return 0


def run(args: argparse.Namespace) -> int:
    if (args.path is None) == (args.dsn is None):
        error(_PROG, "give a PATH or --dsn DSN (one of them)")
        return 2
    fleet = _run_fleet(args)
    if fleet is not None:
        return fleet
    path: str = args.path
    try:
        if args.recover:
            # a file that is not a journal yet must not become one (opening creates the schema)
            read_receipts(path, disposition=Disposition.QUEUED, check=False)
            try:
                report = anyio.run(_recover, path)
            except JournalBusyError:
                error(
                    _PROG,
                    f"refusing to recover {path}: a live writer holds it (its lock is taken); "
                    "recovery runs once no process has the journal open",
                )
                return 1
            print(_recovered(path, report), file=sys.stderr)
        entries = read_receipts(path, generation_id=args.generation, disposition=args.disposition)
        if args.session is not None:
            entries = [e for e in entries if e.session_id == args.session]
    except JournalCorruptError as exc:
        error(_PROG, exc)
        return 2
    except (OSError, JournalError) as exc:
        error(_PROG, exc)
        return 1
    try:
        _print(entries, args.json)
    except BrokenPipeError:  # | head: the reader has what it wanted
        stdout_gone()
    note = _queued_note(path, entries, live_writer(path))
    if note is not None:
        print(note, file=sys.stderr)
    return 0
