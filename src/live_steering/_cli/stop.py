"""``live-steering stop (--store PATH | --dsn DSN) SESSION [--generation G]``: stop from a shell.

Asks whichever process owns SESSION to stop a generation by id (``Fleet.stop``): the
owner calls ``runtime.stop`` in request order with the steers stored before it, its
engine's next boundary ends the loop (``generation.stopped``), and what was pending is
held. Without ``--generation`` it stops the generation the owner runs now. A command of
its own rather than ``steer --stop``: a stop has no TEXT and no ``--id``, and its answer
is not a receipt. With no generation running and none named, the answer is ``no-owner``
when no live owner holds the session's lease (the owner's process died, or none took
it), else ``not-running`` (the owner is between generations). Exit status: 0 stopped, 1
not stopped (the answer says why: ``not-running``, ``no-owner``, ``unreachable``), 2 for
a usage or store error.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from .._types import StopReason
from ..fleet import NO_OWNER, NOT_RUNNING, FleetError, StopResult
from ._fleet import (
    StoreProblem,
    check_store,
    fleet_at,
    store_arguments,
    timeout_argument,
    usage_error,
)
from ._output import error, json_line, printable

_PROG = "live-steering stop"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "stop",
        help="stop a generation by id through a fleet store, in the process that owns its session",
        description="Ask the process that owns SESSION (through a SQLite or PostgreSQL fleet store) "
        "to stop a generation by id; its pending steers are held.",
    )
    store_arguments(parser)
    parser.add_argument("--generation", metavar="G", help="stop generation G (default: the one running now)")
    parser.add_argument(
        "--reason",
        choices=[reason.value for reason in StopReason],
        default=StopReason.GENERATION_STOPPED.value,
        help="the reason the pending steers are held with (default generation-stopped)",
    )
    timeout_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    parser.set_defaults(handler=run)


async def _stop(args: argparse.Namespace) -> StopResult | str:
    """The owner's answer; else why nothing was asked: no generation runs now (and none was named)."""
    async with fleet_at(args.store, args.dsn, args.timeout) as fleet:
        generation = args.generation
        if generation is None:
            running = await fleet.generation(args.session)
            if running is None:
                # a live owner between generations, or none: a lease free, expired, or left by a
                # process that died (``lease`` probes the owner's liveness lock)
                lease = await fleet.lease(args.session)
                return NOT_RUNNING if lease is not None and lease.live else NO_OWNER
            generation = running["id"]
        return await fleet.stop(args.session, generation, StopReason(args.reason))


def run(args: argparse.Namespace) -> int:
    problem = usage_error(args)
    if problem is not None:
        error(_PROG, problem)
        return 2
    try:
        check_store(args, _PROG)
        result = anyio.run(_stop, args)
    except StoreProblem as exc:
        error(_PROG, exc)
        return exc.code
    except FleetError as exc:
        error(_PROG, exc)
        return 2
    if isinstance(result, str):
        # "" as the HTTP stop and a refusal receipt (C4) name no generation
        answer = {"stopped": False, "sessionId": args.session, "generationId": "", "reason": result}
        why = "has no live owner" if result == NO_OWNER else "runs no generation now"
        text = f"session {printable(args.session)!r} {why}: nothing to stop ({result})"
    else:
        answer = {
            "stopped": result.stopped,
            "sessionId": args.session,
            "generationId": result.generation_id,
            "reason": result.reason,
        }
        generation = printable(result.generation_id)
        text = f"{generation}: stopped" if result.stopped else f"{generation}: not stopped ({result.reason})"
    print(json_line(answer) if args.json else text)
    return 0 if answer["stopped"] else 1
