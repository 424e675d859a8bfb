"""``live-steering stop (--store PATH | --dsn DSN) SESSION [--generation G]``: stop from a shell.

Asks whichever process owns SESSION to stop a generation by id (``Fleet.stop``): the
owner calls ``runtime.stop`` in request order with the steers stored before it, its
engine's next boundary ends the loop (``generation.stopped``), and what was pending is
held. Without ``--generation`` it stops the generation the owner runs now. A command of
its own rather than ``steer --stop``: a stop has no TEXT and no ``--id``, and its answer
is not a receipt. Exit status: 0 stopped, 1 not stopped (the answer says why:
``not-running``, ``no-owner``, ``unreachable``), 2 for a usage or store error.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio

from .._types import StopReason
from ..fleet import NOT_RUNNING, FleetError, StopResult
from .steer import fleet_of, store_arguments, timeout_argument, usage_error


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


async def _stop(args: argparse.Namespace) -> StopResult | None:
    """The owner's answer; ``None`` if no generation runs now (and none was named)."""
    async with fleet_of(args) as fleet:
        generation = args.generation
        if generation is None:
            running = await fleet.generation(args.session)
            if running is None:
                return None
            generation = running["id"]
        return await fleet.stop(args.session, generation, StopReason(args.reason))


def run(args: argparse.Namespace) -> int:
    problem = usage_error(args, "stop")
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    try:
        result = anyio.run(_stop, args)
    except (FleetError, ImportError) as exc:
        print(f"live-steering stop: {exc}", file=sys.stderr)
        return 2
    if args.json:
        answer = {
            "stopped": False if result is None else result.stopped,
            "sessionId": args.session,
            "generationId": None if result is None else result.generation_id,
            "reason": NOT_RUNNING if result is None else result.reason,
        }
        print(json.dumps(answer, ensure_ascii=False))
    elif result is None:
        print(f"session {args.session!r} runs no generation now: nothing to stop")
    elif result.stopped:
        print(f"{result.generation_id}: stopped")
    else:
        print(f"{result.generation_id}: not stopped ({result.reason})")
    return 0 if result is not None and result.stopped else 1
