"""``live-steering steer (--store PATH | --dsn DSN) SESSION TEXT --id ID``: steer from a shell.

Sends one steer through a fleet store to whichever process owns SESSION, and prints the
owner's receipt (C27): ``queued`` is durable when printed; ``unreachable`` means the
owner did not decide before ``--timeout`` and never will (C28). Without
``--generation`` the steer is anchored to the generation the owner runs now. Exit
status: 0 accepted, 1 refused (the receipt says why), 2 for a usage or store error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import anyio

from .._types import Input, Receipt
from ..fleet import Fleet, FleetError, SQLiteFleet


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "steer",
        help="send a steer through a fleet store to the process that owns a session",
        description="Send a steer through a fleet store (SQLite file or PostgreSQL) to the process "
        "that owns SESSION, and print the owner's receipt.",
    )
    store_arguments(parser)
    parser.add_argument("text", metavar="TEXT", help="the steer")
    parser.add_argument(
        "--id", required=True, metavar="ID", help="a stable id: a retry with it is answered, not re-sent"
    )
    parser.add_argument(
        "--generation", metavar="G", help="anchor to generation G (default: the one running now)"
    )
    timeout_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the receipt as one JSON object")
    parser.set_defaults(handler=run)


def store_arguments(parser: argparse.ArgumentParser) -> None:
    """``--store PATH | --dsn DSN`` and ``SESSION`` (shared with ``live-steering stop``)."""
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--store", metavar="PATH", help="a SQLite fleet store (processes on one machine)")
    where.add_argument("--dsn", metavar="DSN", help="a PostgreSQL fleet store (needs the 'postgres' extra)")
    parser.add_argument("session", metavar="SESSION", help="the session id the owner runs")


def timeout_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds the owner has to decide (default 10)",
    )


def usage_error(args: argparse.Namespace, command: str) -> str | None:
    """What is wrong with ``--timeout`` or ``--store`` before anything opens, or ``None``."""
    if args.timeout <= 0:
        return f"live-steering {command}: --timeout must be positive"
    if args.store is not None and not os.path.isfile(args.store):
        # opening would create an empty store: a mistyped path must not look like an idle session
        return f"live-steering {command}: no fleet store at {args.store!r}"
    return None


def fleet_of(args: argparse.Namespace) -> Fleet:
    if args.dsn is not None:
        from ..fleet import PostgresFleet

        return PostgresFleet(args.dsn, timeout=args.timeout)
    return SQLiteFleet(args.store, timeout=args.timeout)


class _NoGeneration(Exception):
    pass


async def _steer(args: argparse.Namespace) -> Receipt:
    async with fleet_of(args) as fleet:
        generation = args.generation
        if generation is None:
            running = await fleet.generation(args.session)
            if running is None:
                raise _NoGeneration(args.session)
            generation = running["id"]
        return await fleet.submit(args.session, Input("steer", args.text, id=args.id), generation)


def run(args: argparse.Namespace) -> int:
    problem = usage_error(args, "steer")
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    try:
        receipt = anyio.run(_steer, args)
    except _NoGeneration:
        print(
            f"live-steering steer: session {args.session!r} runs no generation now "
            "(no live owner, or between generations); pass --generation G to anchor anyway",
            file=sys.stderr,
        )
        return 2
    except (FleetError, ImportError) as exc:
        print(f"live-steering steer: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(receipt.to_dict(), ensure_ascii=False))
    elif receipt.accepted:
        assert receipt.disposition is not None
        print(
            f"{receipt.input_id}: {receipt.disposition.value}"
            + (f" ({receipt.reason})" if receipt.reason else "")
        )
    else:
        print(f"{receipt.input_id}: refused ({receipt.reason})")
    return 0 if receipt.accepted else 1
