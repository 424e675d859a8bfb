"""``live-steering receipts PATH``: print the receipts a journal holds.

Read-only: it takes no lock and runs no recovery, so it is safe beside a live
writer. Inputs a dead process left ``queued`` are shown as they are stored until
a ``ReceiptJournal`` opens the file and recovers it (CONTRACT.md C23).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .._types import Disposition
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
    parser.add_argument("path", metavar="PATH", help="the journal file")
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


def run(args: argparse.Namespace) -> int:
    try:
        entries = read_receipts(args.path, generation_id=args.generation, disposition=args.disposition)
    except (FileNotFoundError, JournalError) as exc:
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
            "(finalised when a ReceiptJournal next opens the file)",
            file=sys.stderr,
        )
    return 0
