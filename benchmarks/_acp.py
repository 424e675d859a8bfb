"""The ACP group: ``acp_steer_roundtrip``, a steer over stdio against the SDK's own floor.

``live-steering acp --client-paced`` runs in a subprocess with a turn held in
flight (its first model request waits for a ``_liveSteering/step`` that never
comes), so every steer is answered ``injected``. One round times, in a shuffled
order, a batch of ``_session/steering`` requests and a batch of requests for a
method the agent does not have (the SDK's router answers ``methodNotFound`` at
once): from writing the request line to reading its answer, one at a time. The
figure is the median steer over the median floor, both through the same pipes,
the same JSON framing and the same process. asyncio only: the SDK is.

A session holds at most 2,000 steer identities (C11), so the rig moves to a new
session (with its own held turn) before it gets there.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from typing import Any

from ._timing import Figure, Samples, figure, no_gc, perf_counter_ns

__all__ = ["ACP_FIGURES", "run_acp"]

#: The figure of this group, its unit and target.
ACP_FIGURES = {"acp_steer_roundtrip": ("ns", 1.5)}

BATCH = 5
"""Requests per timed batch."""
STEERS_PER_SESSION = 1_500


class _Rig:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.next_id = 0
        self.session_id = ""
        self.steers = 0

    async def request(self, method: str, params: Any) -> dict[str, Any]:
        """Send one request and wait for its answer (skipping notifications)."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.next_id += 1
        request_id = self.next_id
        line = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        self.process.stdin.write(line.encode() + b"\n")
        await self.process.stdin.drain()
        while True:
            message = json.loads(await self.process.stdout.readline())
            if message.get("id") == request_id and "method" not in message:
                return message  # type: ignore[no-any-return]

    async def new_session(self) -> None:
        """A session with a turn in flight: its first model request waits for a step that never comes."""
        answer = await self.request("session/new", {"cwd": "/", "mcpServers": []})
        self.session_id = answer["result"]["sessionId"]
        self.steers = 0
        # An idle steer starts the turn and is answered once it runs: from here on, steers are injected.
        started = await self.request("_session/steering", self._steer("start the turn"))
        if started["result"]["outcome"] != "startedNewTurn":
            raise RuntimeError(f"the benchmark turn did not start: {started}")

    def _steer(self, text: str) -> dict[str, Any]:
        return {"sessionId": self.session_id, "prompt": [{"type": "text", "text": text}]}

    async def steer_batch(self) -> float:
        if self.steers + BATCH > STEERS_PER_SESSION:
            await self.new_session()
        params = [self._steer(f"steer {self.steers + i}") for i in range(BATCH)]
        with no_gc():
            start = perf_counter_ns()
            answers = [await self.request("_session/steering", p) for p in params]
            stop = perf_counter_ns()
        self.steers += BATCH
        if any(a.get("result", {}).get("outcome") != "injected" for a in answers):
            raise RuntimeError(f"a benchmark steer was not injected: {answers}")
        return (stop - start) / BATCH

    async def floor_batch(self) -> float:
        with no_gc():
            start = perf_counter_ns()
            answers = [await self.request("benchmark/noSuchMethod", {}) for _ in range(BATCH)]
            stop = perf_counter_ns()
        if any(a.get("error", {}).get("code") != -32601 for a in answers):
            raise RuntimeError(f"the floor request was not answered methodNotFound: {answers}")
        return (stop - start) / BATCH


async def _measure(rounds: int) -> Samples:
    command = [sys.executable, "-m", "live_steering._cli", "acp", "--client-paced", "--steps=2"]
    process = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=16 * 1024 * 1024
    )
    samples = Samples()
    order = random.Random(13)
    try:
        rig = _Rig(process)
        await rig.request("initialize", {"protocolVersion": 1})
        await rig.new_session()
        for _ in range(3):  # warm both paths up
            await rig.steer_batch()
            await rig.floor_batch()
        for _ in range(rounds):
            probes = [("steer", rig.steer_batch), ("floor", rig.floor_batch)]
            order.shuffle(probes)
            for name, probe in probes:
                samples.add(name, await probe())
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()
    return samples


def run_acp(rounds: int) -> list[Figure]:
    """Measure ``acp_steer_roundtrip`` (asyncio); ``rounds`` batches of each side."""
    samples = asyncio.run(_measure(rounds))
    unit, target = ACP_FIGURES["acp_steer_roundtrip"]
    assert unit == "ns"
    return [
        figure(
            "acp_steer_roundtrip", "asyncio", "ns", samples.median("steer"), samples.median("floor"), target
        )
    ]
