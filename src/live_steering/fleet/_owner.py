"""The owner: the one process that decides a session's requests, and its receipt journal.

Theory of operation
-------------------
``Fleet.own(runtime)`` takes the session's lease (epoch +1) and attaches to the runtime
exactly as ``ReceiptJournal`` does: a listener turns each disposition event into a
numbered change, and the runtime's write barrier queues a ``writing`` mark for the one
input about to be written and waits until it is durable. One committer task then runs
every transaction of this owner, one at a time, on one connection:

1. fence: lock the lease row *only if its epoch is still ours* (else ``FencedError``),
   renewing it when a renewal is due (every ``ttl / 3``), and lock the pending requests
   of the session, in request order;
2. decide each, in that order, in the event loop (the transaction still open, the rows
   still locked) with ``runtime.submit_steering_nowait`` (the core decides, C8, C12),
   which queues its ``accepted`` change synchronously;
3. write the queued changes (accepted, writing marks, applied, held, unknown) and the
   decisions, notify the requesters, commit: one transaction, one fsync (group commit).

An idle owner commits once per ``ttl / 3`` (its renewal) and in between looks for requests
whose wake-up was lost with a read every ``poll_interval``. A change counts as durable
only when that commit returned. A failed commit (a fenced
lease, a lost database) fails the owner: nothing more is reported durable, the barrier
refuses every later write, and the runtime is closed. Whatever it left ``queued`` is
finalised by whoever takes the lease next (C23). The owner never decides a request it
did not lock in a transaction that also proved its epoch: that is the fencing of C28.
"""

from __future__ import annotations

import contextlib
import logging
import time as _time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

import anyio
import anyio.abc
import anyio.lowlevel
import attrs
from sortedcontainers import SortedDict

from .._errors import InvariantError
from .._runtime import LiveRuntime, internals
from .._types import Input, Receipt, StopReason
from ..journal import ChangeKind, JournalChange
from ..journal._store import DISPOSITION_OF_CHANGE, digest
from ._store import (
    NOT_RUNNING,
    Decision,
    FencedError,
    FleetError,
    Request,
    StoreConnection,
    Taken,
)

_log = logging.getLogger("live_steering.fleet")

_EVENT_CHANGES: Final = {
    "steering.accepted": ChangeKind.ACCEPTED,
    "steering.applied": ChangeKind.APPLIED,
    "steering.held": ChangeKind.HELD,
    "steering.unknown": ChangeKind.UNKNOWN,
}
_STARTS: Final = frozenset({"generation.started", "generation.continued"})
_ENDS: Final = frozenset(
    {"generation.finished", "generation.stopped", "generation.cancelled", "generation.failed"}
)


@attrs.frozen
class OwnerStatistics:
    """A snapshot of one owner's counters."""

    session_id: str
    epoch: int
    commits: int
    """Owner transactions committed (each fences, decides and journals)."""
    decisions: int
    """Remote requests decided."""
    largest_batch: int
    """Most requests decided in one commit."""
    enqueued: int
    durable: int
    failed: str | None
    recovered_held: int
    """Inputs of earlier owners this take finalised ``held`` (``runtime-lost``)."""
    recovered_unknown: int


@contextlib.asynccontextmanager
async def holding(limiter: anyio.CapacityLimiter) -> AsyncIterator[None]:
    """Hold a connection's limiter; when it is free, without yielding (``async with limiter``
    checkpoints twice, and on a remote submit's path each checkpoint is a turn of the loop)."""
    try:
        limiter.acquire_nowait()
    except anyio.WouldBlock:
        await limiter.acquire()
    try:
        yield
    finally:
        limiter.release()


class Owner:
    """The journal and decider of one owned runtime; made by ``Fleet.own``."""

    def __init__(
        self,
        runtime: LiveRuntime,
        conn: StoreConnection,
        limiter: anyio.CapacityLimiter,
        taken: Taken,
        *,
        node_id: str,
        ttl: float,
        poll_interval: float,
    ) -> None:
        self.runtime = runtime
        self.session_id = runtime.session_id
        self.conn = conn
        self._limiter = limiter
        self.epoch = taken.epoch
        door = internals(runtime)
        for input_id, prior in taken.prior.items():
            # The session's identities outlive one runtime: the core answers those of earlier
            # owners in its one order (C7), as if it had accepted them (an id this runtime
            # accepted itself, straight from this process, is its own already).
            if door.accepted(input_id) is None:
                door.retain(input_id, prior.generation_id, prior.digest, prior.receipt)
        self._taken = taken
        self._node_id = node_id
        self._ttl = ttl
        self._renew = ttl / 3
        self._poll = min(self._renew, poll_interval)
        self._last_renewal = anyio.current_time()  # the take set the lease's expiry
        self._queue: list[JournalChange] = []
        self._number = 0
        self._durable_through = 0
        self._waiters: SortedDict[int, anyio.Event] = SortedDict()
        self._inputs: dict[str, tuple[str, str]] = {}
        self._deciding: tuple[str, str, str] | None = None
        self._generation: tuple[str | None] | None = None
        self._taken_generation: tuple[str | None] | None = None
        self._wakeup: anyio.Event | None = None
        self._requested = True  # decide what waited for this owner before it took the lease
        self._closing = False
        self._done = anyio.Event()
        self.failure: FleetError | None = None
        self._commits = 0
        self._in_commit = False
        self._committed = anyio.Event()
        self._decisions = 0
        self._largest = 0
        self._detach_listener = runtime.add_listener(self._on_event)
        runtime.set_write_barrier(self._barrier)

    # -- attachment (the journal's pattern) ------------------------------------------------

    def _on_event(self, event: dict[str, Any]) -> None:
        type_ = event["type"]
        if type_ in _STARTS:
            self._generation = (event["generation_id"],)
            self._wake()
            return
        if type_ in _ENDS:
            self._generation = (None,)
            self._wake()
            return
        change = _EVENT_CHANGES.get(type_)
        if change is None:
            return
        input_id = event["input_id"]
        known = self._inputs.get(input_id)
        if known is None:
            deciding = self._deciding
            if deciding is not None and deciding[0] == input_id:
                known = deciding[1], deciding[2]
            else:  # submitted in this process, straight to the runtime
                known = _local_input(self.runtime, input_id)
            self._inputs[input_id] = known
        self._enqueue(
            change,
            input_id,
            event["target_generation_id"],
            known,
            sequence=event["sequence"],
            reason=event.get("reason"),
            time=event["time"],
        )

    def _enqueue(
        self,
        change: ChangeKind,
        input_id: str,
        generation_id: str,
        known: tuple[str, str],
        *,
        sequence: int | None,
        reason: str | None,
        time: float,
    ) -> int:
        if self.failure is not None:
            return 0
        self._number += 1
        self._queue.append(
            JournalChange(
                number=self._number,
                runtime_no=self.epoch,
                session_id=self.session_id,
                input_id=input_id,
                generation_id=generation_id,
                change=change,
                disposition=DISPOSITION_OF_CHANGE[change],
                reason=reason,
                kind=known[0],
                digest=known[1],
                sequence=sequence,
                admission=sequence or 0,
                time=time,
            )
        )
        self._wake()
        return self._number

    async def _barrier(self, generation_id: str, inputs: Sequence[Input]) -> None:
        """The write barrier: the ``writing`` mark of each input is durable on return."""
        self._raise_if_failed()
        if self._closing:
            raise FleetError(f"the owner of session {self.session_id!r} is closing")
        number = 0
        for input in inputs:
            known = self._inputs.get(input.id) or (input.kind, digest(input))
            number = self._enqueue(
                ChangeKind.WRITING,
                input.id,
                generation_id,
                known,
                sequence=None,
                reason=None,
                time=_time.time(),
            )
        await self._wait(number)

    def _raise_if_failed(self) -> None:
        if self.failure is not None:
            error = FleetError(str(self.failure))
            error.__cause__ = self.failure
            raise error

    async def _wait(self, number: int) -> None:
        self._raise_if_failed()
        if number <= self._durable_through:
            await anyio.lowlevel.checkpoint()
            return
        waiter = self._waiters.get(number)
        if waiter is None:
            waiter = self._waiters[number] = anyio.Event()
        await waiter.wait()
        self._raise_if_failed()
        if number > self._durable_through:
            raise FleetError(
                f"the owner of session {self.session_id!r} closed before change {number} was durable"
            )

    async def flush(self) -> None:
        """Wait for a commit that began after this call: everything queued so far is durable,
        the running generation is published, and the requests stored so far are decided."""
        self.runtime.receipt("")  # a public read publishes an acceptance the runtime still owes
        self._raise_if_failed()
        target = self._commits + (2 if self._in_commit else 1)
        self.request()
        while self._commits < target:
            if self._done.is_set():
                raise FleetError(f"the owner of session {self.session_id!r} is closed")
            await self._committed.wait()
            self._raise_if_failed()

    # -- requests --------------------------------------------------------------------------

    def request(self) -> None:
        """A requester stored a request for this session: decide it soon."""
        self._requested = True
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _decide_all(self, requests: list[Request]) -> tuple[list[Decision], list[JournalChange]]:
        """In the event loop, inside the owner's transaction: decide in request order, then take
        everything queued for the journal (the decisions' own ``accepted`` changes included)."""
        decisions = [Decision(r, self._decide(r)) for r in requests]
        batch, self._queue = self._queue, []
        self._taken_generation, self._generation = self._generation, None
        return decisions, batch

    def _decide(self, request: Request) -> Receipt:
        """One request, decided by the core (which knows the identities of earlier owners too)."""
        input = request.input
        runtime = self.runtime
        if request.stop is not None:  # a host's stop of a generation by id, in request order
            try:
                stopped = runtime.stop(request.anchor, StopReason(request.stop))
            except ValueError:  # not a reason this library knows: a row no node of it wrote
                stopped = False
            return Receipt(stopped, input.id, request.anchor, None, None if stopped else NOT_RUNNING)
        self._deciding = (input.id, input.kind, request.digest)
        try:
            return runtime.submit_steering_nowait(input, request.anchor)
        finally:
            self._deciding = None

    # -- the committer ---------------------------------------------------------------------

    async def run(self) -> None:
        try:
            while self.failure is None:
                if not (self._queue or self._requested or self._generation is not None):
                    if self._closing:
                        return
                    self._wakeup = anyio.Event()
                    with anyio.move_on_after(self._poll):
                        await self._wakeup.wait()
                    self._wakeup = None
                    idle = not (self._queue or self._requested or self._generation is not None)
                    renewal_due = anyio.current_time() >= self._last_renewal + self._renew
                    # no renewal due: look for a request whose wake-up was lost, with a read
                    if idle and not renewal_due and not await self._has_pending():
                        continue
                self._requested = False
                await self._commit_next()
        finally:
            self._done.set()
            self._committed.set()

    async def _has_pending(self) -> bool:
        try:
            return await anyio.to_thread.run_sync(
                self.conn.has_pending, self.session_id, limiter=self._limiter
            )
        except Exception as exc:  # the store is gone: the next commit fails the owner properly
            _log.warning("the owner of session %r could not poll for requests: %r", self.session_id, exc)
            return True

    async def _commit_next(self) -> None:
        self._in_commit = True
        try:
            await self._commit_once()
        finally:
            self._in_commit = False
            self._committed.set()
            self._committed = anyio.Event()

    async def _commit_once(self) -> None:
        conn = self.conn
        with anyio.CancelScope(shield=True):
            try:
                started = anyio.current_time()
                renew = self._ttl if started >= self._last_renewal + self._renew else None
                async with holding(self._limiter):  # the connection is this transaction's until it ends
                    requests = await conn.begin_batch_async(self.session_id, self._node_id, self.epoch, renew)
                    try:
                        decisions, batch = self._decide_all(requests)  # in the event loop, rows locked
                    except BaseException:
                        await conn.rollback_async()
                        raise
                    await conn.finish_batch_async(
                        self.session_id, self.epoch, batch, decisions, self._taken_generation
                    )
            except Exception as exc:
                await self._fail(exc)
                return
        if renew is not None:
            self._last_renewal = started
        self._commits += 1
        self._decisions += len(decisions)
        self._largest = max(self._largest, len(decisions))
        if batch:
            self._durable_through = batch[-1].number
        waiters = self._waiters
        while waiters and waiters.peekitem(0)[0] <= self._durable_through:
            waiters.popitem(0)[1].set()

    async def _fail(self, exc: Exception) -> None:
        if isinstance(exc, FleetError):
            error = exc
        else:
            error = FleetError(f"the owner of session {self.session_id!r}: commit failed: {exc!r}")
            error.__cause__ = exc
        if isinstance(exc, FencedError):
            _log.warning("%s: this owner stops writing", error)
        else:
            _log.error("%s", error)
        self.failure = error
        self._queue.clear()
        while self._waiters:
            self._waiters.popitem(0)[1].set()
        # nothing this runtime does from now on can be journaled: stop it (its inputs are
        # finalised by whoever takes the lease next)
        await self.runtime.aclose()

    async def aclose(self) -> None:
        """Close the runtime, commit what it owes, stop the committer. Shielded; idempotent."""
        with anyio.CancelScope(shield=True):
            await self.runtime.aclose()
            if self.failure is None:
                self.runtime.receipt("")
            self._closing = True
            self._wake()
            await self._done.wait()
            self._detach_listener()
            while self._waiters:
                self._waiters.popitem(0)[1].set()

    def statistics(self) -> OwnerStatistics:
        return OwnerStatistics(
            session_id=self.session_id,
            epoch=self.epoch,
            commits=self._commits,
            decisions=self._decisions,
            largest_batch=self._largest,
            enqueued=self._number,
            durable=self._durable_through,
            failed=None if self.failure is None else str(self.failure),
            recovered_held=self._taken.recovered_held,
            recovered_unknown=self._taken.recovered_unknown,
        )


def _local_input(runtime: LiveRuntime, input_id: str) -> tuple[str, str]:
    """Kind and digest of an input submitted to the runtime directly, not through the fleet.

    Events carry ids only: the content is read through the wings' one door into the
    runtime (``RuntimeInternals``), as the receipt journal reads it.
    """
    record = internals(runtime).accepted(input_id)
    if record is None:
        raise InvariantError(f"the runtime announced {input_id!r} but never accepted it")
    return record.input.kind, digest(record.input)
