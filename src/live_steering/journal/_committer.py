"""The one durable committer: group commit, write-ahead marks and failure, for every journal.

Theory of operation
-------------------
The receipt journal (``ReceiptJournal``, one SQLite file) and the fleet's owner
(``fleet/_owner.py``, a transaction fenced on its lease) journal a runtime the same way,
and this class is that way. Their listeners turn disposition events (``EVENT_CHANGES``)
into ``JournalChange``s numbered from 1 in event order (``enqueue``, O(1)); their write
barriers queue a ``writing`` mark and ``wait`` until its number is durable, so a mark is
durable before the writer sees its input (C15, C23).

One task (``run``) commits, one commit at a time. A commit is the user's ``CommitStep``:
it opens its transaction, calls ``take()`` once (everything queued at that moment, up to
``max_batch``, goes in this commit: group commit, many changes and one fsync), writes it and
commits. Only when the step has returned do the changes count as durable:
``durable_through`` moves, the waiters keyed by change number (a ``SortedDict``, O(log n)
each) are released in order, and ``step.durable(batch)`` hears of them. A commit that began
is shielded from cancellation and runs to its end.

A step that raises fails the committer for good, the same way for every user: the step
turns the exception into its typed error (``JournalError``, ``FleetError``), the queue is
dropped, every waiter now and later raises that error, ``journal.failed`` is published on
the stream of each runtime served (``RuntimeInternals.publish``), and ``step.failed`` does
what else the user must (the owner closes its runtime). Nothing is reported durable after.

This module never touches SQL or an engine, decides nothing about inputs, and never counts
a change durable before the step that committed it returned.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Final, Generic, Protocol, TypeVar

import anyio
import anyio.lowlevel
from sortedcontainers import SortedDict

from .._runtime import RuntimeInternals
from ._store import ChangeKind, JournalChange

#: The disposition events a journal's listener turns into changes.
EVENT_CHANGES: Final = {
    "steering.accepted": ChangeKind.ACCEPTED,
    "steering.applied": ChangeKind.APPLIED,
    "steering.held": ChangeKind.HELD,
    "steering.unknown": ChangeKind.UNKNOWN,
}

#: The event a failed commit publishes on each runtime it journals (docs/events.md).
FAILED_EVENT: Final = "journal.failed"

E = TypeVar("E", bound=Exception)


class CommitStep(Protocol[E]):
    """What a user plugs into the ``Committer``: its transaction, its errors, its runtimes."""

    #: Seconds ``run`` waits, idle, before it asks ``when_idle`` (``math.inf``: never asks).
    idle_wait: float

    def has_work(self) -> bool:
        """Something to commit besides queued changes (the owner: requests, a generation)."""

    async def when_idle(self) -> bool:
        """After ``idle_wait`` passed with nothing queued: True to commit anyway (a renewal)."""

    async def commit(self) -> None:
        """One transaction: open it, ``committer.take()`` once, write, commit. Raise on failure."""

    def durable(self, batch: Sequence[JournalChange]) -> None:
        """The changes of ``batch`` are durable now (called in the event loop, after ``commit``)."""

    def failure(self, exc: Exception) -> tuple[E, dict[str, Any]]:
        """The typed error a failed ``commit`` raised ``exc`` for, and the fields of its event."""

    def again(self, failure: E) -> E:
        """A fresh error for one more caller (re-raising one instance piles up tracebacks)."""

    def closed(self, number: int | None) -> E:
        """The error of a wait the closing ended before change ``number`` was durable."""

    def runtimes(self) -> Iterable[RuntimeInternals]:
        """The runtimes whose streams hear of a failure."""

    async def failed(self, error: E, lost: int) -> None:
        """After a failure was surfaced: ``lost`` changes queued will never be committed."""


class Committer(Generic[E]):
    """The numbered queue of one journal's changes and the task that commits it in groups.

    >>> committer = Committer(step, max_batch=4096)          # doctest: +SKIP
    >>> number = committer.enqueue(change)                    # in a listener, O(1)
    >>> await committer.wait(number)                          # in a write barrier
    """

    def __init__(self, step: CommitStep[E], *, max_batch: int | None = None) -> None:
        self._step = step
        self._max_batch = max_batch
        self._queue: list[JournalChange] = []
        self._batch: list[JournalChange] | None = None
        self._number = 0
        self._durable_through = 0
        self._waiters: SortedDict[int, anyio.Event] = SortedDict()
        self._wakeup: anyio.Event | None = None
        self._failure: E | None = None
        self._closing = False
        # Events are made when first awaited: a committer may be built outside an event loop
        # (``ReceiptJournal(path)``), and a commit no flush waits for needs none.
        self._done = False
        self._on_done: anyio.Event | None = None
        self._in_commit = False
        self._on_commit: anyio.Event | None = None
        self.commits = 0
        """Commits that returned."""
        self.largest_batch = 0
        """Most changes one commit carried."""

    # -- queueing ---------------------------------------------------------------------------

    @property
    def number(self) -> int:
        """The number of the last change queued (0: none yet)."""
        return self._number

    @property
    def durable_through(self) -> int:
        """Every change up to this number is durable."""
        return self._durable_through

    @property
    def failure(self) -> E | None:
        return self._failure

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def waiters(self) -> int:
        """Change numbers some task is waiting on."""
        return len(self._waiters)

    @property
    def queued(self) -> bool:
        return bool(self._queue)

    def enqueue(self, change: JournalChange) -> int:
        """Queue ``change`` (numbered ``number + 1``) for the next commit and wake the task. O(1)."""
        number = self._number + 1
        assert change.number == number, "changes are numbered by the committer's count"
        self._number = number
        self._queue.append(change)
        wakeup = self._wakeup
        if wakeup is not None:
            wakeup.set()
        return number

    def wake(self) -> None:
        """Have ``run`` look again (``step.has_work()`` changed, or the committer is closing)."""
        if self._wakeup is not None:
            self._wakeup.set()

    def take(self) -> list[JournalChange]:
        """Inside ``step.commit``, once: everything queued now (up to ``max_batch``) goes in it."""
        assert self._batch is None, "a commit takes its changes once"
        queue, limit = self._queue, self._max_batch
        if limit is None or len(queue) <= limit:
            batch, self._queue = queue, []
        else:
            batch = queue[:limit]
            del queue[:limit]
        self._batch = batch
        return batch

    # -- waiting ----------------------------------------------------------------------------

    def raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._step.again(self._failure)

    async def wait(self, number: int) -> None:
        """Return once change ``number`` is durable; the typed error if the committer failed or
        closed first. A failed committer vouches for nothing, not even what was durable before."""
        self.raise_if_failed()
        if number <= self._durable_through:
            await anyio.lowlevel.checkpoint()
            return
        if self._closing:
            raise self._step.closed(None)
        waiter = self._waiters.get(number)
        if waiter is None:
            waiter = self._waiters[number] = anyio.Event()
        await waiter.wait()
        self.raise_if_failed()
        if number > self._durable_through:
            raise self._step.closed(number)

    async def next_commit(self) -> None:
        """Wait for a commit that begins after this call to return."""
        self.raise_if_failed()
        target = self.commits + (2 if self._in_commit else 1)
        while self.commits < target:
            if self._done:
                raise self._step.closed(None)
            if self._on_commit is None:
                self._on_commit = anyio.Event()
            await self._on_commit.wait()
            self.raise_if_failed()

    def release_waiters(self) -> None:
        """Wake every waiter (closing): each raises, as its change was not made durable."""
        waiters = self._waiters
        while waiters:
            waiters.popitem(0)[1].set()

    # -- the task ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Commit until closed (and nothing is left) or failed."""
        step = self._step
        try:
            while self._failure is None:
                if not (self._queue or step.has_work()):
                    if self._closing:
                        return
                    self._wakeup = wakeup = anyio.Event()
                    try:
                        if step.idle_wait == math.inf:
                            await wakeup.wait()
                        else:
                            with anyio.move_on_after(step.idle_wait):
                                await wakeup.wait()
                    finally:
                        self._wakeup = None
                    if not (self._queue or step.has_work()) and (self._closing or not await step.when_idle()):
                        continue
                await self.commit_next()
        finally:
            self._done = True
            for event in (self._on_done, self._on_commit):
                if event is not None:
                    event.set()

    async def stop(self) -> None:
        """Close: ``run`` (started already) commits what is queued and ends; wait for it.
        Shield the caller."""
        self._closing = True
        self.wake()
        if not self._done:
            if self._on_done is None:
                self._on_done = anyio.Event()
            await self._on_done.wait()

    async def commit_next(self) -> None:
        """One commit of the step; never abandoned once begun; a failure fails the committer."""
        self._in_commit = True
        self._batch = None
        try:
            with anyio.CancelScope(shield=True):
                try:
                    await self._step.commit()
                except Exception as exc:  # anything must fail the journal loudly, not kill its task
                    await self._fail(exc)
                    return
            batch = self._batch
            self.commits += 1
            if batch:  # None (a commit that took nothing) or empty: nothing more is durable
                self.largest_batch = max(self.largest_batch, len(batch))
                self._durable_through = batch[-1].number
                waiters = self._waiters
                while waiters and waiters.peekitem(0)[0] <= self._durable_through:
                    waiters.popitem(0)[1].set()
                self._step.durable(batch)
        finally:
            self._batch = None
            self._in_commit = False
            committed, self._on_commit = self._on_commit, None
            if committed is not None:
                committed.set()

    async def _fail(self, exc: Exception) -> None:
        """Surface a failed commit the one way: typed error to every waiter, the event, the step."""
        step = self._step
        error, fields = step.failure(exc)
        lost = len(self._batch or ()) + len(self._queue)
        self._failure = error
        self._queue = []
        self.release_waiters()
        event = {"error": str(error), **fields, "durable_through": self._durable_through}
        for runtime in step.runtimes():
            runtime.publish(FAILED_EVENT, dict(event))
        await step.failed(error, lost)
