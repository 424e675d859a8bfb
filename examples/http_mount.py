# examples/http_mount.py
"""The HTTP API mounted in your own Starlette app: a web client steers a session a fleet worker owns."""

import os
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.routing import Mount

from live_steering import Input, LiveRuntime
from live_steering.fleet import SQLiteFleet
from live_steering.http import create_app  # needs the 'http' extra (Starlette)


async def main(path: str) -> None:
    context: list[str] = []

    def write(steer: Input, metadata: Mapping[str, Any]) -> None:
        context.append(steer.text)

    # The worker: owns session "chat-42" and runs its loop. Usually a process of its own.
    async with SQLiteFleet(path, node_id="worker-7") as worker:
        async with worker.own(LiveRuntime(session_id="chat-42")) as runtime:
            async with runtime.open_generation("gen-1") as gen:
                await worker.flush("chat-42")

                # Your web app: one more fleet node, and the steering API under /steering.
                async with SQLiteFleet(path, node_id="web-1") as node:
                    steering = create_app(fleet=node, token="change-me")
                    app = Starlette(routes=[Mount("/steering", app=steering)])

                    # A client of your app (here in-process; in production, a browser or a server).
                    transport = httpx.ASGITransport(app=app)
                    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
                        auth = {"Authorization": "Bearer change-me"}
                        sent = await http.post(
                            "/steering/v1/sessions/chat-42/inputs",
                            json={"kind": "steer", "text": "Use the corrected path", "id": "msg-1"},
                            headers=auth,
                        )
                        assert sent.status_code == 200
                        assert sent.json()["disposition"] == "queued"  # decided by the owner, durable

                        await gen.boundary(write)  # the owner's loop, at its next request boundary
                        final = await http.get(
                            "/steering/v1/sessions/chat-42/inputs/msg-1?wait=10", headers=auth
                        )
                        assert final.json()["disposition"] == "applied"

                        late = await http.post(
                            "/steering/v1/sessions/chat-42/inputs",
                            json={
                                "kind": "steer", "text": "Too late?", "id": "msg-2", "generation_id": "gen-0"
                            },
                            headers=auth,
                        )
                        assert late.status_code == 410  # stale-generation: the owner's refusal, unchanged
                        print(sent.json(), final.json(), late.json(), sep="\n")
    assert context == ["Use the corrected path"]


with tempfile.TemporaryDirectory() as folder:
    anyio.run(main, os.path.join(folder, "fleet.db"), backend=sys.argv[1] if len(sys.argv) > 1 else "asyncio")
