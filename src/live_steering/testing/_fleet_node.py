"""A fleet node in a process of its own: the subject of the fleet's cross-process tests and demo.

``python -m live_steering.testing._fleet_node ROLE (--store PATH | --dsn DSN) --session S ...``

* ``owner``: owns session S (``--wait`` seconds for a live owner to go), runs generation
  ``--generation`` of a tiny loop that writes every steer into an in-memory context, and
  prints one JSON object per line, flushed at once: ``{"type": "owning", "epoch"}`` once
  the lease is taken and the generation is in the store; ``{"type": "context.write",
  "input_id"}`` right before an input is handed to the writer (from then on it *may be in
  a context*); ``{"type": "applied", "input_id"}`` after. ``--hang-after N`` makes the
  writer hang (after printing its line) from the (N+1)-th input on, so a test or the demo
  can kill it mid-write. It runs until its stdin closes, then leaves cleanly. An owner that
  lost the session (fenced, its store gone) prints ``{"type": "lost", "error"}`` and exits 3.
* ``scripted``: owns session S (runtime ``--identity-limit``) and runs the engine's side of
  a test script from stdin, one command a line: ``open G``, ``boundary`` (writes what is
  pending), ``checkpoint`` (``continue_after_checkpoint()``), ``stop``, ``close`` (leaves
  the generation block); each answered ``{"type": "done", "command", "result"}``.
* ``submit``: ``--tasks N`` concurrent submits of ``--id`` with ``--text`` anchored to
  ``--generation`` and, with ``--distinct-id D``, N more of id D, each with a text of its
  own, all at once; prints ``{"type": "receipts", "receipts": [...], "distinct": [...]}``.

Testing aid only. ``--backend`` picks ``asyncio`` (default) or ``trio``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

import anyio

from .._runtime import Generation, LiveRuntime
from .._types import Input, Receipt
from ..fleet import Fleet, OwnerLostError, SQLiteFleet


def _say(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _fleet(args: argparse.Namespace) -> Fleet:
    options: dict[str, Any] = {"node_id": args.node, "ttl": args.ttl, "timeout": args.timeout}
    if args.dsn is not None:
        from ..fleet import PostgresFleet

        return PostgresFleet(args.dsn, **options)
    return SQLiteFleet(args.store, **options)


async def _stdin_closed() -> None:
    await anyio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)


async def _owner(args: argparse.Namespace) -> None:
    async with _fleet(args) as fleet:
        runtime = LiveRuntime(session_id=args.session)
        async with fleet.own(runtime, wait=args.wait):
            context: list[str] = []

            async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
                _say(type="context.write", input_id=input.id)
                if args.hang_after is not None and len(context) >= args.hang_after:
                    await anyio.sleep_forever()
                context.append(input.text)

            async with anyio.create_task_group() as tg, runtime.open_generation(args.generation) as gen:

                async def stop_when_told() -> None:
                    await _stdin_closed()
                    # runtime.stop, not gen.stop: a fenced owner may have closed its runtime (and
                    # so ended the generation) first; then there is nothing left to stop
                    runtime.stop(gen.id)

                tg.start_soon(stop_when_told)
                await fleet.flush(args.session)  # the running generation is in the store
                owner = fleet.owner(args.session)
                assert owner is not None
                _say(type="owning", epoch=owner.epoch, node=fleet.node_id)
                while await gen.wait_for_input():
                    for receipt in await gen.boundary(writer):
                        _say(type="applied", input_id=receipt.input_id)
                tg.cancel_scope.cancel()
    _say(type="done")


async def _scripted(args: argparse.Namespace) -> None:
    async with _fleet(args) as fleet:
        runtime = LiveRuntime(session_id=args.session, identity_limit=args.identity_limit)
        async with fleet.own(runtime, wait=args.wait):
            _say(type="owning")
            gen: Generation | None = None
            while command := (await anyio.to_thread.run_sync(sys.stdin.readline)).split():
                result: Any = None
                if command[0] == "open":
                    gen = runtime.open_generation(command[1])
                    await gen.__aenter__()
                else:
                    assert gen is not None, "open a generation first"
                    if command[0] == "boundary":
                        result = len(await gen.boundary(lambda input, metadata: None))
                    elif command[0] == "checkpoint":
                        result = gen.continue_after_checkpoint()
                    elif command[0] == "stop":
                        gen.stop()
                    elif command[0] == "close":
                        await gen.__aexit__(None, None, None)
                        gen = None
                    else:
                        raise ValueError(f"unknown command {command!r}")
                _say(type="done", command=command[0], result=result)


async def _submit(args: argparse.Namespace) -> None:
    same: list[Receipt] = []
    distinct: list[Receipt] = []
    async with _fleet(args) as fleet:

        async def one(input: Input, into: list[Receipt]) -> None:
            into.append(await fleet.submit(args.session, input, args.generation))

        async with anyio.create_task_group() as tg:
            for n in range(args.tasks):
                tg.start_soon(one, Input("steer", args.text, id=args.id), same)
                if args.distinct_id is not None:
                    text = f"{args.text} #{n} of {fleet.node_id}"
                    tg.start_soon(one, Input("steer", text, id=args.distinct_id), distinct)
    _say(type="receipts", receipts=[r.to_dict() for r in same], distinct=[r.to_dict() for r in distinct])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m live_steering.testing._fleet_node")
    parser.add_argument("role", choices=["owner", "scripted", "submit"])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--store")
    where.add_argument("--dsn")
    parser.add_argument("--session", required=True)
    parser.add_argument("--generation", default="g1")
    parser.add_argument("--node", default=None)
    parser.add_argument("--ttl", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--wait", type=float, default=None)
    parser.add_argument("--hang-after", type=int, default=None)
    parser.add_argument("--identity-limit", type=int, default=2_000)
    parser.add_argument("--id", default="m-1")
    parser.add_argument("--text", default="steer")
    parser.add_argument("--tasks", type=int, default=1)
    parser.add_argument("--distinct-id", default=None)
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args(argv)
    role = {"owner": _owner, "scripted": _scripted, "submit": _submit}[args.role]
    try:
        anyio.run(role, args, backend=args.backend)
    except BaseException as exc:
        lost = _lost(exc)
        if lost is None:
            raise
        _say(type="lost", error=str(lost))  # fenced or its store gone: the loop ended loudly
        return 3
    return 0


def _lost(exc: BaseException) -> OwnerLostError | None:
    """The ``OwnerLostError`` that ended the role, also inside a task group's exception group."""
    if isinstance(exc, OwnerLostError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _lost(inner)) is not None:
                return found
    return None


if __name__ == "__main__":
    sys.exit(main())
