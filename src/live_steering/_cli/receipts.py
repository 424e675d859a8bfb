"""``live-steering receipts PATH [--recover]``: print the receipts a journal holds.

Without ``--recover`` it is read-only: no lock taken, no recovery, so it is safe
beside a live writer. It probes the journal's lock to say whether inputs shown
``queued`` belong to a live writer or were left by a process that died, and marks
those whose write-ahead mark is durable (``queued (writing)``: recovery makes them
``unknown``, the others ``held``; rule C23, docs/rules.md). ``--recover`` runs that
recovery first, by opening the journal, and refuses while a live writer has it.

PATH may also be a SQLite fleet store (told apart by its tables), and ``--dsn``
reads a PostgreSQL fleet store; there RUNTIME is ``session#epoch``. The note on
``queued`` rows says, per session, whether a live owner holds it (the probe
``Fleet.recover`` makes: its lease held, its lock taken) or its owner died;
``--recover`` finalises each session whose owner is dead (``--session S``: only S)
as ``Fleet.recover`` does, and leaves sessions with a live owner alone. It never
creates a fleet store.

Exit codes: 0 listed; 1 the file is missing or cannot be read or recovered (a
live writer holds it), or the fleet store cannot be reached or holds no fleet;
2 the file is damaged or is not a receipt journal, the 'postgres' extra is
missing (and usage errors). Every error is one line on stderr.
"""

from __future__ import annotations

import argparse
import shlex
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio

from .._types import Disposition, HoldReason
from .._validate import checked_id
from ..fleet import FleetError
from ..fleet._store import StoreConnection, read_sqlite_receipts
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
from ._fleet import StoreProblem, connect, fleet_at
from ._output import dsn, error, file_path, json_line, printable, redacted_dsn, stdout_gone

__all__ = ["register", "run"]

#: RUNTIME is ``session#n``: identities are per runtime, so the same id may appear once
#: for each runtime that journaled into the file (two runs of the demo, say).
_COLUMNS = ("ID", "KIND", "GENERATION", "DISPOSITION", "REASON", "WHEN", "RUNTIME")

_PROG = "live-steering receipts"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "receipts",
        help="print the receipts stored in a receipt journal or a fleet store",
        description="Print the receipts stored in a receipt journal or a fleet store. Read-only unless "
        "--recover: safe beside a live writer.",
    )
    parser.add_argument(
        "path", metavar="PATH", nargs="?", type=file_path, help="a journal file or a SQLite fleet store"
    )
    parser.add_argument(
        "--dsn", metavar="DSN", type=dsn, help="read a PostgreSQL fleet store instead of PATH"
    )
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


def _writing(entry: JournalEntry) -> bool:
    """Queued with a durable write-ahead mark: the writer may have it (recovery: ``unknown``)."""
    return entry.disposition is Disposition.QUEUED and entry.marked


def _row(entry: JournalEntry) -> tuple[str, ...]:
    return (
        printable(entry.input_id),
        printable(entry.kind),
        printable(entry.generation_id),
        "queued (writing)" if _writing(entry) else entry.disposition.value,
        entry.reason or "-",
        iso(entry.updated_at),
        f"{printable(entry.session_id)}#{entry.runtime_no}",
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


def _filtered(args: argparse.Namespace, entries: list[JournalEntry]) -> list[JournalEntry]:
    return [
        e
        for e in entries
        if (args.generation is None or e.generation_id == args.generation)
        and (args.disposition is None or e.disposition.value == args.disposition)
    ]


def _is_fleet_file(path: str) -> bool:
    """True if PATH is a SQLite fleet store (else it is read as a receipt journal)."""
    if not Path(path).is_file():
        return False
    try:
        return read_sqlite_receipts(path, session_id="") is not None
    except sqlite3.DatabaseError:
        return False  # not SQLite, or damaged: the journal's reader reports it as corruption


def _print(entries: list[JournalEntry], as_json: bool) -> None:
    if as_json:
        for entry in entries:
            wire = entry.to_dict()
            wire["writing"] = _writing(entry)
            print(json_line(wire))
    else:
        print(_table(entries))
    sys.stdout.flush()


def _fleet_command(args: argparse.Namespace) -> str:
    where = f"--dsn {shlex.quote(redacted_dsn(args.dsn))}" if args.dsn is not None else shlex.quote(args.path)
    return f"{_PROG} {where}"


def _counts(entries: list[JournalEntry]) -> str:
    writing = sum(map(_writing, entries))
    return f"{writing} unknown (marked writing), {len(entries) - writing} held"


async def _recover_fleet(args: argparse.Namespace, sessions: list[str]) -> list[str]:
    """``Fleet.recover`` of each session whose owner is dead; one line per session, saying what it did."""
    lines: list[str] = []
    lost = HoldReason.RUNTIME_LOST.value
    recovered = live = free = 0
    async with fleet_at(args.path, args.dsn) as fleet:
        for session in sessions:
            shown = repr(printable(session))
            lease = await fleet.lease(session)
            if lease is None or lease.node_id is None:
                free += 1
                if args.session is not None:  # every session: counted in the summary, not listed
                    lines.append(f"session {shown}: no owner holds it: nothing to recover")
                continue
            queued = await fleet.entries(session_id=session, disposition=Disposition.QUEUED)
            owner = repr(printable(lease.node_id))
            if not await fleet.recover(session):
                live += 1
                lines.append(f"session {shown}: its owner {owner} is live: left alone")
                continue
            recovered += 1
            mark = {(e.runtime_no, e.input_id) for e in queued}
            final = [e for e in await fleet.entries(session_id=session) if (e.runtime_no, e.input_id) in mark]
            finalised = [e for e in final if e.reason == lost]
            unknown = sum(e.disposition is Disposition.UNKNOWN for e in finalised)
            left = "nothing was left queued"
            if finalised:
                held = len(finalised) - unknown
                left = (
                    f"{len(finalised)} left queued: {held} held, {unknown} unknown (marked writing), "
                    f"reason {lost}"
                )
            lines.append(f"recovered session {shown}: its owner {owner} is dead; {left}")
    if args.session is None:
        lines.append(
            f"{len(sessions)} sessions: {recovered} recovered (owner dead), "
            f"{live} left alone (live owner), {free} with no owner"
        )
    return lines


def _queued_notes(
    args: argparse.Namespace, conn: StoreConnection, entries: list[JournalEntry]
) -> Iterator[str]:
    """Per session with ``queued`` rows: a live owner's (they may still change), or a dead one's."""
    by_session: dict[str, list[JournalEntry]] = {}
    for entry in entries:
        if entry.disposition is Disposition.QUEUED:
            by_session.setdefault(entry.session_id, []).append(entry)
    for session, queued in by_session.items():
        shown = repr(printable(session))
        lease = conn.probed_lease(session)  # live: held, unexpired, its owner's lock taken
        if lease is not None and lease.live:
            yield (
                f"note: {len(queued)} queued in session {shown}, whose live owner has them: "
                "they may still change"
            )
        else:
            command = f"{_fleet_command(args)} --session {shlex.quote(printable(session))} --recover"
            yield (
                f"note: {len(queued)} queued in session {shown}, left by an owner that died; "
                f"'{command}' makes them {_counts(queued)}, reason runtime-lost"
            )


def _run_fleet(args: argparse.Namespace) -> int | None:
    """List (and with ``--recover`` first recover) a fleet store; ``None`` when PATH is a receipt journal."""
    if args.dsn is None and not _is_fleet_file(args.path):
        return None
    try:
        conn = connect(args.path, args.dsn, _PROG, unreachable=1)
    except StoreProblem as exc:
        error(_PROG, exc)
        return exc.code
    try:
        if args.recover:
            sessions = [args.session] if args.session is not None else conn.lease_sessions()
            for line in anyio.run(_recover_fleet, args, sessions):
                print(line, file=sys.stderr)
        entries = _filtered(args, conn.entries(session_id=args.session))
        try:
            _print(entries, args.json)
        except BrokenPipeError:
            stdout_gone()
        for note in _queued_notes(args, conn, entries):
            print(note, file=sys.stderr)
    except (OSError, sqlite3.Error, FleetError) as exc:
        error(_PROG, exc)
        return 1
    except Exception as exc:  # psycopg's errors, without importing psycopg here
        if type(exc).__module__.split(".")[0] != "psycopg":
            raise
        error(_PROG, exc)
        return 1
    finally:
        conn.close()
    return 0


def run(args: argparse.Namespace) -> int:
    if (args.path is None) == (args.dsn is None):
        error(_PROG, "give a PATH or --dsn DSN (one of them)")
        return 2
    for value, name in ((args.session, "--session"), (args.generation, "--generation")):
        if value is not None:
            try:
                # the library's rule (no store holds such an id): a usage error, never a traceback,
                # and the same answer from a journal and from a fleet store
                checked_id(value, name)
            except ValueError as exc:
                error(_PROG, exc)
                return 2
    fleet = _run_fleet(args)
    if fleet is not None:
        return fleet
    path: str = args.path
    if Path(path).is_dir():
        error(_PROG, f"{path!r} is a directory, not a receipt journal or fleet store")
        return 1
    if not Path(path).exists():
        error(_PROG, f"no receipt journal or fleet store at {path!r}")
        return 1
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
