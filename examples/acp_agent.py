"""A steerable ACP agent on your own model call: ``python examples/acp_agent.py`` (stdio).

Set OPENAI_BASE_URL (default http://127.0.0.1:8080/v1, a llama.cpp server) and MODEL.
"""

import os
from collections.abc import Mapping
from typing import Any

import anyio
import httpx

from live_steering import Input
from live_steering.acp import SteeringAgent, Turn, TurnError, serve_stdio

URL = os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1")
MODEL = os.environ.get("MODEL", "local")


async def run_turn(turn: Turn) -> None:
    messages = turn.state.setdefault("messages", [])  # the conversation, kept across turns
    if turn.prompt:  # empty in a turn that runs follow-ups: they arrive through add_steer
        messages.append({"role": "user", "content": turn.prompt})

    async def add_steer(steer: Input, metadata: Mapping[str, Any]) -> None:
        messages.append({"role": "user", "content": steer.text})

    async with httpx.AsyncClient(base_url=URL, timeout=120) as http:
        while True:
            await turn.boundary(add_steer)  # before each model request: steers sent meanwhile land here
            response = await http.post("/chat/completions", json={"model": MODEL, "messages": messages})
            if response.is_error:
                raise TurnError(f"the model answered HTTP {response.status_code}")
            answer = response.json()["choices"][0]["message"]["content"]
            messages.append({"role": "assistant", "content": answer})
            await turn.say(answer, message_id=turn.message_id())  # each reply its own message
            if not turn.continue_after_checkpoint():  # no steer arrived meanwhile: the turn is done
                break


if __name__ == "__main__":
    anyio.run(serve_stdio, SteeringAgent(run_turn), backend="asyncio")
