"""``live-steering steer (--store PATH | --dsn DSN) SESSION TEXT --id ID``: steer from a shell.

Sends one steer through a fleet store to whichever process owns SESSION, and prints the
owner's receipt (C27): ``queued`` is durable when printed; ``unreachable`` means the
owner did not decide before ``--timeout`` and never will (C28). Without
``--generation`` the steer is anchored to the generation the owner runs now; when none
runs it is answered as the library answers a submit no live owner decides: a repeat of
a stored input gets its stored receipt, a new one is refused ``stale-generation``. It
never creates a store (``_fleet.py``). Exit status: 0 accepted, 1 refused (the receipt
says why), 2 for a usage or store error.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from .._types import Input, Receipt
from ..fleet import FleetError
from ..fleet._node import submit_unanchored
from ._fleet import StoreProblem, check_store, fleet_at, store_arguments, timeout_argument, usage_error
from ._output import error, json_line, printable

_PROG = "live-steering steer"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "steer",
        help="send a steer through a fleet store to the process that owns a session",
        description="Send a steer through a fleet store (SQLite file or PostgreSQL) to the process "
        "that owns SESSION, and print the owner's receipt.",
    )
    store_arguments(parser)
    parser.add_argument("text", metavar="TEXT", help="the steer (or, with --follow-up, the follow-up)")
    parser.add_argument(
        "--id", required=True, metavar="ID", help="a stable id: a retry with it is answered, not re-sent"
    )
    parser.add_argument(
        "--generation", metavar="G", help="anchor to generation G (default: the one running now)"
    )
    parser.add_argument(
        "--follow-up",
        action="store_true",
        help="send a follow-up: written as the next generation's request once the anchor finishes "
        "(held if it is stopped)",
    )
    timeout_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the receipt as one JSON object")
    parser.set_defaults(handler=run)


async def _steer(args: argparse.Namespace) -> Receipt:
    async with fleet_at(args.store, args.dsn, args.timeout) as fleet:
        steer = Input("follow_up" if args.follow_up else "steer", args.text, id=args.id)
        if args.generation is not None:
            return await fleet.submit(args.session, steer, args.generation)
        # No --generation: the running one. A repeat of a stored input is anchored where it
        # was accepted, so it gets its current receipt (or identity-conflict); a new one with
        # no generation running is refused stale-generation, as it would be in-process.
        running = await fleet.generation(args.session)
        return await submit_unanchored(fleet, args.session, steer, None if running is None else running["id"])


def run(args: argparse.Namespace) -> int:
    problem = usage_error(args)
    if problem is not None:
        error(_PROG, problem)
        return 2
    try:
        check_store(args, _PROG)
        receipt = anyio.run(_steer, args)
    except StoreProblem as exc:
        error(_PROG, exc)
        return exc.code
    except FleetError as exc:
        error(_PROG, exc)
        return 2
    if args.json:
        print(json_line(receipt.to_dict()))
    elif receipt.accepted:
        assert receipt.disposition is not None
        print(
            f"{printable(receipt.input_id)}: {receipt.disposition.value}"
            + (f" ({receipt.reason})" if receipt.reason else "")
        )
    else:
        print(f"{printable(receipt.input_id)}: refused ({receipt.reason})")
    return 0 if receipt.accepted else 1
