"""``live-steering demo --fleet``: an owner and a host in two processes, narrated.

A worker process (``live_steering.testing._fleet_node owner``) owns session
``demo-chat`` on a temporary SQLite fleet store and runs a tiny loop that writes
each steer into its context; its writer hangs from the second steer on, so the
demo can kill it mid-write. This process is the host: it steers through the store,
waits for ``applied``, kills the worker with SIGKILL, takes the session over, and
shows what C23 makes of what the worker left: the input being written is
``unknown``, the one behind it ``held``, both ``runtime-lost``, readable from any node.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from typing import Any, TextIO

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from .._errors import LiveSteeringError
from .._runtime import LiveRuntime
from .._types import Input, Receipt
from ..fleet import SQLiteFleet
from ._output import stdout_gone

SESSION = "demo-chat"


class FleetDemoError(LiveSteeringError):
    """The worker process did not behave (it died early, or said something unexpected)."""


def _show(receipt: Receipt | None) -> str:
    if receipt is None:
        return "no receipt"
    if not receipt.accepted:
        return f"refused ({receipt.reason})"
    assert receipt.disposition is not None
    return receipt.disposition.value + (f" ({receipt.reason})" if receipt.reason else "")


async def _line(stream: BufferedByteReceiveStream, type_: str, input_id: str | None = None) -> dict[str, Any]:
    """The worker's next line of ``type_`` (about ``input_id``, if given), skipping the others."""
    with anyio.fail_after(20):
        while True:
            try:
                line: dict[str, Any] = json.loads(await stream.receive_until(b"\n", 1 << 16))
            except (anyio.EndOfStream, anyio.IncompleteRead):
                raise FleetDemoError("the worker process ended early") from None
            if line["type"] == type_ and (input_id is None or line.get("input_id") == input_id):
                return line


async def run_fleet_demo(out: TextIO, backend: str = "asyncio") -> dict[str, Receipt | None]:
    """Run the demo on a temporary store, narrating to ``out``; the final receipts by input id."""

    gone = False

    def say(text: str) -> None:
        # a reader gone (``| head``) ends the narration quietly; the story still runs to its end,
        # so the worker is killed and the temporary store removed as on any run
        nonlocal gone
        if gone:
            return
        try:
            out.write(text + "\n")
            out.flush()
        except BrokenPipeError:
            gone = True
            if out is sys.stdout:
                stdout_gone()

    with tempfile.TemporaryDirectory(prefix="live-steering-fleet-") as folder:
        path = os.path.join(folder, "fleet.db")
        command = [sys.executable, "-m", "live_steering.testing._fleet_node", "owner", "--store", path]
        command += ["--session", SESSION, "--generation", "gen-1", "--hang-after", "1", "--node", "worker-1"]
        command += ["--backend", backend]
        async with await anyio.open_process(command, stderr=None) as worker:
            assert worker.stdout is not None
            lines = BufferedByteReceiveStream(worker.stdout)
            try:
                owning = await _line(lines, "owning")
                epoch = owning["epoch"]
                say(f"1. worker process {worker.pid} owns session {SESSION!r} (lease epoch {epoch}),")
                say(f"   running generation 'gen-1'; the fleet store is {path}")
                async with SQLiteFleet(path, node_id="host-1") as host:
                    capability = await host.capability(SESSION)
                    generation = await host.generation(SESSION)
                    assert generation is not None
                    mode = capability["mode"]
                    say(f"2. this process is a host: mode {mode!r}, running generation {generation['id']!r}")
                    submit = capability["submit"]
                    steer = Input("steer", "Use the corrected path", id="fix-1")
                    first = await submit(steer, "gen-1")
                    say(f"   steer 'fix-1' crossed to the owner: {_show(first)} (durable when returned)")
                    applied = await host.wait_final(SESSION, "fix-1")
                    say(f"   the worker wrote it into its context at its next boundary: {_show(applied)}")
                    repeat = await submit(steer, "gen-1")
                    say(f"3. a retry with the same id is answered, not re-sent: {_show(repeat)}")
                    conflict = await submit(Input("steer", "Something else", id="fix-1"), "gen-1")
                    say(f"   the same id with other text: {_show(conflict)}")
                    second = await submit(Input("steer", "Check the tests", id="fix-2"), "gen-1")
                    await _line(lines, "context.write", "fix-2")  # its write-ahead mark is durable
                    third = await submit(Input("steer", "And update the docs", id="fix-3"), "gen-1")
                    say(f"4. 'fix-2': {_show(second)}; the worker is writing it now (its mark is durable)")
                    say(f"   'fix-3': {_show(third)}, waiting behind it")
                    os.kill(worker.pid, signal.SIGKILL)
                    await worker.wait()
                    say(f"5. kill -9 of worker {worker.pid}: its lease lock is gone at once")
                    async with host.own(LiveRuntime(session_id=SESSION)):
                        owner = host.owner(SESSION)
                        assert owner is not None
                        say(f"6. this process took the session over (epoch {owner.epoch}) and finalised")
                        say(
                            f"   what the worker left: {owner.recovered_unknown} unknown, "
                            f"{owner.recovered_held} held"
                        )
                    async with SQLiteFleet(path, node_id="reader") as reader:
                        final = {i: await reader.receipt(SESSION, i) for i in ("fix-1", "fix-2", "fix-3")}
                    for input_id, receipt in final.items():
                        say(f"   {input_id}: {_show(receipt)}")
                    say("   'unknown': it may be in the dead worker's context; 'held': it was never written.")
                    say(
                        "   Nothing is queued for ever, and nothing is reported held that a writer saw (C23)."
                    )
                    return final
            finally:
                if worker.returncode is None:
                    worker.kill()
                    with anyio.CancelScope(shield=True):
                        await worker.wait()
