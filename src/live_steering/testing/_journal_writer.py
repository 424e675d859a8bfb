"""A short journaled agent run to be killed: the subject of the receipt journal's crash tests.

``python -m live_steering.testing._journal_writer PATH [--generations G] [--steers N] [--backend B]``
runs G generations of a tiny loop on one runtime attached to a ``ReceiptJournal`` at
PATH, cycling through the ways a generation ends (finished, stopped with input
pending, a writer that raises, input arriving mid-boundary). It prints one JSON
object per line, flushed at once:

* ``{"type": "context.write", "input_id": ...}`` just before an input is written
  into the (in-memory) context: from then on it *may be in a context*;
* ``{"type": "receipt.durable", "input_id": ..., "disposition": ...}`` after the
  commit that made that disposition durable returned;
* ``{"type": "done"}`` at the end.

``LIVE_STEERING_KILL=POINT:N`` makes the process SIGKILL itself at the N-th
occurrence of POINT: ``before-mark`` (the write barrier is entered),
``after-mark`` (the marks are durable, the writer not yet called),
``after-write`` (the context write returned, ``applied`` not yet journaled),
``in-commit`` (a transaction's statements ran, ``COMMIT`` not yet issued) or
``after-commit`` (``COMMIT`` returned, not yet reported durable). Testing aid only.

``python -m live_steering.testing._journal_writer --serve`` is a fork server for test suites
that need many such runs: it imports everything once, then for each JSON request
line ``{"id", "path", "out", "kill", "backend"}`` on stdin forks a writer whose
output goes to the FIFO or file ``out``, answers ``{"id", "pid"}`` at once, and
after stdin closes answers ``{"id", "exitcode"}`` for each child (``-9``: SIGKILL).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sqlite3
import sys
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from .._runtime import LiveRuntime
from .._types import Input
from ..journal import ChangeKind, JournalChange, ReceiptJournal, connect

KILL_ENV = "LIVE_STEERING_KILL"
KILL_POINTS = ("before-mark", "after-mark", "after-write", "in-commit", "after-commit")


class KillSwitch:
    """SIGKILLs this process at the N-th occurrence of one named point."""

    def __init__(self, spec: str | None, points: tuple[str, ...] = KILL_POINTS) -> None:
        self.point: str | None = None
        self.nth = 0
        self.seen = 0
        if spec:
            point, _, nth = spec.partition(":")
            if point not in points or not nth.isdigit() or int(nth) < 1:
                raise SystemExit(f"{KILL_ENV} must be POINT:N with POINT in {points}, got {spec!r}")
            self.point, self.nth = point, int(nth)

    def __call__(self, point: str) -> None:
        """``reached(point)``, as a store's ``trace`` callback."""
        self.reached(point)

    def reached(self, point: str) -> None:
        if point == self.point:
            self.seen += 1
            if self.seen == self.nth:
                os.kill(os.getpid(), signal.SIGKILL)


class _KillingConnection:
    """The journal's connection, with the commit kill points around ``COMMIT``."""

    def __init__(self, conn: sqlite3.Connection, switch: KillSwitch) -> None:
        self._conn = conn
        self._switch = switch
        self.ready = False

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> sqlite3.Cursor:
        is_commit = self.ready and sql == "COMMIT"
        if is_commit:
            self._switch.reached("in-commit")
        cursor = self._conn.execute(sql, parameters)
        if is_commit:
            self._switch.reached("after-commit")
        return cursor

    def close(self) -> None:
        self._conn.close()


def _emit(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _print_durable(changes: Sequence[JournalChange]) -> None:
    for change in changes:
        if change.change is not ChangeKind.WRITING:  # a mark is not a disposition change
            _emit(type="receipt.durable", input_id=change.input_id, disposition=change.disposition.value)


async def run(path: str, generations: int, steers: int, switch: KillSwitch) -> None:
    conn: _KillingConnection | None = None

    def factory(file: str) -> _KillingConnection:
        nonlocal conn
        conn = _KillingConnection(connect(file), switch)
        return conn

    context: list[str] = []
    async with ReceiptJournal(path, connect=factory) as journal:
        assert conn is not None
        conn.ready = True  # opening and recovery are not kill points
        runtime = LiveRuntime(session_id="crash-writer")
        journal.attach(runtime)
        journal.add_durable_listener(_print_durable)
        inner = runtime.write_barrier
        assert inner is not None

        async def barrier(generation_id: str, inputs: Sequence[Input]) -> None:
            switch.reached("before-mark")
            await inner(generation_id, inputs)
            switch.reached("after-mark")

        runtime.set_write_barrier(barrier)
        for g in range(generations):
            await _generation(runtime, g, steers, context, switch)
        await journal.flush()
    _emit(type="done")


async def _generation(
    runtime: LiveRuntime, g: int, steers: int, context: list[str], switch: KillSwitch
) -> None:
    shape = g % 4
    late_sent = False

    async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
        nonlocal late_sent
        _emit(type="context.write", input_id=input.id)
        if shape == 2 and input.id.endswith("-s1"):
            raise OSError("context store refused the write")
        context.append(input.id)
        await anyio.lowlevel.checkpoint()
        switch.reached("after-write")
        if shape == 3 and not late_sent:  # arrives mid-boundary: needs a mark of its own
            late_sent = True
            await _steer(runtime, gen_id, f"g{g}-late")

    gen_id = f"g{g}"
    try:
        async with runtime.open_generation(gen_id) as gen:
            for s in range(steers):
                await _steer(runtime, gen_id, f"g{g}-s{s}")
            while True:
                await gen.boundary(writer)
                if shape == 1:  # stopped with input pending: held
                    await _steer(runtime, gen_id, f"g{g}-pending")
                    gen.stop()
                    break
                if not gen.continue_after_checkpoint():
                    break
    except OSError:
        pass  # shape 2: the generation failed; its receipts say so


async def _steer(runtime: LiveRuntime, gen_id: str, input_id: str) -> None:
    receipt = await runtime.submit_steering(Input("steer", f"please adjust: {input_id}", id=input_id), gen_id)
    assert receipt.accepted, receipt


def _reply(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def serve() -> int:
    """Fork one writer per request line; forked children skip the interpreter start and imports."""
    with contextlib.suppress(ImportError):
        import trio  # noqa: F401  (imported once here, so forked trio writers start fast)
    children: dict[int, str] = {}
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _serve_child(request)
        children[pid] = request["id"]
        _reply({"id": request["id"], "pid": pid})
    for pid, ident in children.items():
        _, status = os.waitpid(pid, 0)
        _reply({"id": ident, "exitcode": os.waitstatus_to_exitcode(status)})
    return 0


def _serve_child(request: dict[str, Any]) -> None:
    code = 1
    try:
        os.close(0)
        out = os.open(request["out"], os.O_WRONLY | os.O_CREAT, 0o644)  # a FIFO blocks for its reader
        os.dup2(out, 1)
        os.close(out)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115  (lives until os._exit)
        os.environ.pop(KILL_ENV, None)
        if request.get("kill"):
            os.environ[KILL_ENV] = request["kill"]
        code = main([request["path"], "--backend", request.get("backend", "asyncio")])
        sys.stdout.flush()
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and sys.argv[1:] == ["--serve"]:
        return serve()
    parser = argparse.ArgumentParser(prog="python -m live_steering.testing._journal_writer")
    parser.add_argument("path")
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--steers", type=int, default=3, help="steers submitted per generation")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args(argv)
    switch = KillSwitch(os.environ.get(KILL_ENV))
    anyio.run(run, args.path, args.generations, args.steers, switch, backend=args.backend)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
