"""The one durable committer (``journal/_committer.py``) that the receipt journal and the fleet owner share.

Its own rules first, on a scripted step with no I/O (group commit, numbering, waiters released
by number, a failure surfaced one way); then the journal's commit failing under a write barrier
that waits for its mark. The owner's failing commit is in ``test_fleet.py`` (it needs a store).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from journal_helpers import FaultyConnection
from live_steering import Disposition, Input, LiveRuntime
from live_steering._runtime import RuntimeInternals, internals
from live_steering.journal import ChangeKind, JournalChange, JournalError, ReceiptJournal
from live_steering.journal._committer import FAILED_EVENT, Committer

pytestmark = pytest.mark.anyio


class Boom(RuntimeError):
    """The typed error of the scripted step."""


class Step:
    """A scripted commit step: each commit takes its batch, waits for ``gate`` if set, and fails
    when ``fail`` is set."""

    idle_wait = float("inf")

    def __init__(self, runtime: LiveRuntime) -> None:
        self.committer: Committer[Boom] = Committer(self, max_batch=3)
        self.door = internals(runtime)
        self.batches: list[list[int]] = []
        self.durables: list[list[int]] = []
        self.gate: anyio.Event | None = None
        self.entered = anyio.Event()
        self.fail = False
        self.lost: int | None = None

    def has_work(self) -> bool:
        return False

    async def when_idle(self) -> bool:
        return False

    async def commit(self) -> None:
        batch = self.committer.take()
        self.batches.append([c.number for c in batch])
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise OSError("disk on fire")

    def durable(self, batch: Sequence[JournalChange]) -> None:
        self.durables.append([c.number for c in batch])

    def failure(self, exc: Exception) -> tuple[Boom, dict[str, Any]]:
        error = Boom(f"step failed: {exc}")
        error.__cause__ = exc
        return error, {"path": "scripted", "sqlite_error": None}

    def again(self, failure: Boom) -> Boom:
        error = Boom(str(failure))
        error.__cause__ = failure
        return error

    def closed(self, number: int | None) -> Boom:
        return Boom(f"closed before {number}")

    def runtimes(self) -> Iterable[RuntimeInternals]:
        return (self.door,)

    async def failed(self, error: Boom, lost: int) -> None:
        self.lost = lost


def _change(committer: Committer[Boom], input_id: str = "i") -> JournalChange:
    return JournalChange(
        number=committer.number + 1,
        runtime_no=1,
        session_id="s",
        input_id=input_id,
        generation_id="g",
        change=ChangeKind.ACCEPTED,
        disposition=Disposition.QUEUED,
        reason=None,
        kind="steer",
        digest="d",
        sequence=None,
        admission=1,
        time=0.0,
    )


async def test_everything_queued_when_a_commit_starts_goes_in_it_up_to_max_batch() -> None:
    """Group commit: changes queued while one commit runs go in the next, at most max_batch each,
    and a waiter is released exactly when its number's commit returned."""
    step = Step(LiveRuntime())
    committer = step.committer
    step.gate = anyio.Event()
    released: list[int] = []

    async def wait(number: int) -> None:
        await committer.wait(number)
        released.append(number)

    async with anyio.create_task_group() as tg:
        tg.start_soon(committer.run)
        committer.enqueue(_change(committer))
        await step.entered.wait()  # the first commit took change 1 and is in flight
        for _ in range(4):
            committer.enqueue(_change(committer))
        tg.start_soon(wait, 1)
        tg.start_soon(wait, 5)
        await anyio.wait_all_tasks_blocked()
        assert released == []  # change 1's commit has not returned
        assert committer.waiters == 2
        step.gate.set()
        await committer.next_commit()
        await committer.stop()
        tg.cancel_scope.cancel()
    assert step.batches == [[1], [2, 3, 4], [5]]
    assert step.durables == step.batches
    assert released == [1, 5]
    assert (committer.durable_through, committer.commits, committer.largest_batch) == (5, 3, 3)


async def test_a_failed_commit_raises_to_waiters_publishes_once_and_vouches_for_nothing() -> None:
    """A step that raises: every waiter gets the typed error (its cause the step's), journal.failed
    is published once with the step's fields, and later waits raise even for durable numbers."""
    runtime = LiveRuntime()
    step = Step(runtime)
    committer = step.committer
    outcomes: list[BaseException] = []

    async def wait(number: int) -> None:
        try:
            await committer.wait(number)
        except Boom as exc:
            outcomes.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(committer.run)
        committer.enqueue(_change(committer))
        await committer.wait(1)  # durable
        step.gate, step.fail = anyio.Event(), True
        step.entered = anyio.Event()
        for _ in range(4):
            committer.enqueue(_change(committer))
        await step.entered.wait()
        tg.start_soon(wait, 2)
        tg.start_soon(wait, 5)
        await anyio.wait_all_tasks_blocked()
        step.gate.set()
    assert len(outcomes) == 2
    assert all(isinstance(exc.__cause__, Boom) for exc in outcomes)
    assert "disk on fire" in str(outcomes[0])
    assert step.lost == 4  # the batch in flight (3) and the one still queued
    failed = [e for e in runtime.recent_events() if e["type"] == FAILED_EVENT]
    assert len(failed) == 1
    assert failed[0]["path"] == "scripted"
    assert failed[0]["durable_through"] == 1
    assert "disk on fire" in failed[0]["error"]
    with pytest.raises(Boom):
        await committer.wait(1)
    assert committer.durable_through == 1


class _FailingCommit(FaultyConnection):
    """Holds each ``COMMIT`` at ``gate`` once armed, then fails it with ``error``."""

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> sqlite3.Cursor:
        if self.armed and sql == "COMMIT":
            self.parked.set()
            assert self.gate is not None
            assert self.gate.wait(timeout=20), "the test never released the commit gate"
            assert self.error is not None
            raise self.error
        return super().execute(sql, parameters)


async def test_the_journals_failed_commit_raises_to_a_waiting_barrier_and_publishes(tmp_path: Path) -> None:
    """The write barrier waits for its mark while the commit fails: the boundary raises
    JournalError, nothing reaches the writer, and journal.failed is on the stream."""
    gate = threading.Event()
    error = sqlite3.OperationalError("disk I/O error")
    error.sqlite_errorname = "SQLITE_IOERR"  # as SQLite's own error carries it
    conn = _FailingCommit(gate=gate, error=error)
    written: list[str] = []
    runtime = LiveRuntime()

    async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
        written.append(input.id)

    async with ReceiptJournal(tmp_path / "r.db", connect=conn.factory) as journal:
        journal.attach(runtime)
        async with runtime.open_generation("g1") as gen:
            await runtime.submit_steering(Input("steer", "x", id="x"), "g1")
            await journal.wait_durable("x")
            conn.armed = True
            outcome: list[BaseException] = []

            async def boundary() -> None:
                try:
                    await gen.boundary(writer)
                except JournalError as exc:
                    outcome.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(boundary)
                await anyio.to_thread.run_sync(conn.parked.wait, 20)  # the mark's commit is in flight
                assert journal.statistics().waiters == 1  # the barrier waits for it
                gate.set()
            assert len(outcome) == 1
            assert "disk I/O error" in str(outcome[0])
            assert written == []
            failed = [e for e in runtime.recent_events() if e["type"] == "journal.failed"]
            assert len(failed) == 1
            assert failed[0]["path"] == str(tmp_path / "r.db")
            assert failed[0]["sqlite_error"] == "SQLITE_IOERR"
            assert failed[0]["durable_through"] == journal.statistics().durable
            gen.stop()
        runtime._check()
