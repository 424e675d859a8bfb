# examples/fleet_two_nodes.py
"""Fleet mode: a host node steers a runtime that another node owns, through a shared SQLite store."""

import os
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

import anyio

from live_steering import Input, LiveRuntime
from live_steering.fleet import SQLiteFleet


async def main(path: str) -> None:  # every process of the machine opens this file
    context: list[str] = []

    def write(steer: Input, metadata: Mapping[str, Any]) -> None:
        context.append(steer.text)

    # The worker: owns session "chat-42" (a lease) and runs its loop. Usually its own process.
    async with SQLiteFleet(path, node_id="worker-7") as worker:
        async with worker.own(LiveRuntime(session_id="chat-42")) as runtime:
            async with runtime.open_generation("gen-1") as gen:
                await worker.flush("chat-42")  # the running generation is in the store now

                # A host: any process that opens the store. It decides nothing itself.
                async with SQLiteFleet(path, node_id="api-3") as host:
                    generation = await host.generation("chat-42")
                    assert generation == {"id": "gen-1", "steering_mode": "all"}
                    capability = await host.capability("chat-42")  # C1's shape
                    receipt = await capability["submit"](
                        Input("steer", "Use the corrected path", id="msg-1"), generation["id"]
                    )
                    assert receipt.disposition == "queued"  # decided by the owner, durable already

                    await gen.boundary(write)  # the owner's loop, at its next request boundary
                    final = await host.wait_final("chat-42", "msg-1")
                    assert final.disposition == "applied"

                    late = await host.submit(
                        "chat-42", Input("steer", "Too late?", id="msg-2"), "gen-0", timeout=2.0
                    )
                    assert late.reason == "stale-generation"  # the owner's refusal, unchanged
                    print(receipt.to_dict(), final.to_dict(), late.to_dict(), sep="\n")
    assert context == ["Use the corrected path"]


with tempfile.TemporaryDirectory() as folder:
    anyio.run(main, os.path.join(folder, "fleet.db"), backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
