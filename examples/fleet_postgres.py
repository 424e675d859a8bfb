# examples/fleet_postgres.py
"""Fleet mode on PostgreSQL: a host node steers a runtime that another node owns, through the database."""

import os
import sys
import uuid
from collections.abc import Mapping
from typing import Any

import anyio

from live_steering import Input, LiveRuntime
from live_steering.fleet import PostgresFleet  # needs the 'postgres' extra (psycopg 3)


async def main(dsn: str) -> None:  # every node of the fleet connects to this database
    context: list[str] = []
    # The database keeps every session's identities (no dedup window): a fresh session per run,
    # so a second run is not answered with the first run's receipts.
    session = f"chat-{uuid.uuid4().hex[:8]}"

    def write(steer: Input, metadata: Mapping[str, Any]) -> None:
        context.append(steer.text)

    # The worker: owns the session (a lease) and runs its loop. Usually a machine of its own.
    async with PostgresFleet(dsn, node_id="worker-7") as worker:
        async with worker.own(LiveRuntime(session_id=session)) as runtime:
            async with runtime.open_generation("gen-1") as gen:
                await worker.flush(session)  # the running generation is in the database now

                # A host: any process that connects to the database. It decides nothing itself.
                async with PostgresFleet(dsn, node_id="api-3") as host:
                    generation = await host.generation(session)
                    assert generation == {"id": "gen-1", "steering_mode": "all"}
                    capability = await host.capability(session)  # C1's shape
                    receipt = await capability["submit"](
                        Input("steer", "Use the corrected path", id="msg-1"), generation["id"]
                    )
                    assert receipt.disposition == "queued"  # decided by the owner, durable already

                    await gen.boundary(write)  # the owner's loop, at its next request boundary
                    final = await host.wait_final(session, "msg-1")
                    assert final.disposition == "applied"

                    late = await host.submit(
                        session, Input("steer", "Too late?", id="msg-2"), "gen-0", timeout=2.0
                    )
                    assert late.reason == "stale-generation"  # the owner's refusal, unchanged
                    print(receipt.to_dict(), final.to_dict(), late.to_dict(), sep="\n")
    assert context == ["Use the corrected path"]


args = sys.argv[1:]  # [DSN] [asyncio|trio]
backend = args.pop() if args and args[-1] in ("asyncio", "trio") else "asyncio"
dsn = args[0] if args else os.environ.get("LIVE_STEERING_DSN")
if not dsn:
    sys.exit("usage: fleet_postgres.py [DSN] [asyncio|trio]: give a PostgreSQL DSN or set LIVE_STEERING_DSN")
anyio.run(main, dsn, backend=backend)
