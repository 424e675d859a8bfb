"""Steer a running ACP agent: spawn ``live-steering acp``, prompt it, steer mid-turn.

Run it from a checkout with the ``acp`` extra installed::

    .venv/bin/python examples/acp_client.py            # about 4 seconds
    .venv/bin/python examples/acp_client.py --step-delay 0.05

It prints every session update as it arrives, the steer's outcome, and the agent
message of the request in which the steer landed. Exits 1 if the steer did not land.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable
from typing import Any, cast

import acp
import anyio
from acp.schema import AgentMessageChunk, SessionInfoUpdate, ToolCallProgress, ToolCallStart


class Client:
    """The client side: records session updates so the script can wait for one."""

    def __init__(self) -> None:
        self.updates: list[Any] = []
        self._changed = anyio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        print(f"  update: {describe(update)}")
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, predicate: Callable[[Any], bool]) -> Any:
        """The first update matching ``predicate``, waiting for it if needed (30 s at most)."""
        with anyio.fail_after(30):
            while True:
                for update in self.updates:
                    if predicate(update):
                        return update
                await self._changed.wait()


def describe(update: Any) -> str:
    if isinstance(update, AgentMessageChunk):
        return f"agent: {getattr(update.content, 'text', '')}"
    if isinstance(update, ToolCallStart | ToolCallProgress):
        return f"tool {update.tool_call_id}: {update.status}"
    if isinstance(update, SessionInfoUpdate) and update.field_meta:
        meta = update.field_meta["liveSteering"]
        return f"turn: {meta['turn']}" if "turn" in meta else f"steer settled: {meta['steer']}"
    return type(update).__name__


def received(update: Any) -> list[dict[str, Any]]:
    """What the scripted model says it received in the request behind an agent message."""
    if not isinstance(update, AgentMessageChunk) or not update.field_meta:
        return []
    return cast("list[dict[str, Any]]", update.field_meta["liveSteering"]["received"])


def agent_command() -> list[str]:
    """The ``live-steering`` console script next to this Python (its venv), else the same via ``-m``."""
    script = shutil.which("live-steering", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-m", "live_steering._cli"]


async def main(step_delay: float, steps: int) -> int:
    client = Client()
    command = [*agent_command(), "acp", f"--steps={steps}", f"--step-delay={step_delay}"]
    # The SDK gives the agent only HOME, LOGNAME, PATH, SHELL, TERM and USER unless env= says
    # more: pass what your agent reads (an API key for --api-key-env, OPENAI_BASE_URL, MODEL).
    env = {name: os.environ[name] for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MODEL")
           if name in os.environ}  # fmt: skip
    async with acp.spawn_agent_process(cast("acp.Client", client), *command, env=env) as (conn, _process):
        init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        print(f"initialize: _meta.steering = {(init.field_meta or {}).get('steering')}")
        session = await conn.new_session(cwd=".", mcp_servers=[])
        print(f"session: {session.session_id}")
        async with anyio.create_task_group() as tg:
            results: list[Any] = []

            async def prompt() -> None:
                results.append(
                    await conn.prompt(
                        session_id=session.session_id, prompt=[acp.text_block("Count the steps")]
                    )
                )

            tg.start_soon(prompt)
            # Steer as soon as the turn is visibly running: after the first agent message.
            await client.wait_for(lambda u: bool(received(u)))
            steer = "Stop after the next step"
            outcome = await conn.ext_method(
                "session/steering",
                {
                    "sessionId": session.session_id,
                    "prompt": [{"type": "text", "text": steer}],
                },
            )
            print(f"steer -> {outcome['outcome']} (input {outcome['_meta']['liveSteering']['inputId']})")
        print(f"prompt finished: {results[0].stop_reason}")
        landed = await client.wait_for(lambda u: any(e["text"] == steer for e in received(u)))
        print(f"the steer landed in model request {landed.field_meta['liveSteering']['request']}")
        return 0 if outcome["outcome"] == "injected" else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step-delay", type=float, default=0.2)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    sys.exit(anyio.run(main, args.step_delay, args.steps, backend="asyncio"))
