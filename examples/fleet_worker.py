# examples/fleet_worker.py
"""A worker process: owns session "chat-42" on a SQLite fleet store and writes each steer it gets."""

import sys
from collections.abc import Mapping
from typing import Any

import anyio

from live_steering import Input, LiveRuntime
from live_steering.fleet import OwnerLostError, SQLiteFleet


async def main(path: str) -> None:
    def write(steer: Input, metadata: Mapping[str, Any]) -> None:  # your context store
        print(f"wrote {steer.id}: {steer.text}", flush=True)

    async with SQLiteFleet(path, node_id="worker-7") as fleet:
        async with fleet.own(LiveRuntime(session_id="chat-42")) as runtime:  # the fleet's key
            async with runtime.open_generation("gen-1") as gen:
                await fleet.flush("chat-42")  # the running generation is in the store now
                print("owning chat-42, running gen-1: steer it from another shell", flush=True)
                # True: a steer is pending. False: the generation was stopped (`live-steering stop`).
                while await gen.wait_for_input():
                    await gen.boundary(write)  # your loop's request boundary
            print(f"gen-1 ended: {gen.end_reason or 'finished'}", flush=True)


if len(sys.argv) < 2:
    sys.exit("usage: fleet_worker.py STORE [asyncio|trio]   (STORE: a SQLite file, created if absent)")
try:
    anyio.run(main, sys.argv[1], backend=sys.argv[2] if len(sys.argv) > 2 else "asyncio")
except KeyboardInterrupt:  # Ctrl-C: leaving the blocks above released the lease
    sys.exit(130)
except OwnerLostError as exc:  # another node took the session over (or the store was lost)
    sys.exit(f"fleet_worker: {exc}")
