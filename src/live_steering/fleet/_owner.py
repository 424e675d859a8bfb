"""The owner: the one process that decides a session's requests, and its receipt journal.

Theory of operation
-------------------
``Fleet.own(runtime)`` takes the session's lease (epoch +1) and attaches to the runtime
exactly as ``ReceiptJournal`` does, through the same committer (``journal/_committer.py``):
a listener turns each disposition event into a numbered change, and the runtime's write
barrier queues a ``writing`` mark for the one input about to be written and waits until
it is durable. The committer's task then runs every transaction of this owner, one at a
time, on one connection; this module plugs in what one transaction does (``_Commits``):

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
lease, a lost database) fails the owner as a failed commit fails a journal: waiters and
the barrier raise ``FleetError`` (``FencedError`` as its cause when fenced), nothing more
is reported durable, ``journal.failed`` is published on the runtime's stream, and the
runtime is closed. Whatever it left ``queued`` is
finalised by whoever takes the lease next (C23). The owner never decides a request it
did not lock in a transaction that also proved its epoch: that is the fencing of C28.
"""

from __future__ import annotations

import contextlib
import logging
import time as _time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, Final

import anyio
import anyio.abc
import anyio.lowlevel
import attrs

from .._errors import InvariantError
from .._runtime import LiveRuntime, RuntimeInternals, internals
from .._types import Input, Receipt, StopReason
from ..journal import ChangeKind, JournalChange
from ..journal._committer import EVENT_CHANGES, Committer
from ..journal._store import DISPOSITION_OF_CHANGE, digest
from ._store import (
    NOT_RUNNING,
    Decision,
    FencedError,
    FleetError,
    OwnerLostError,
    Request,
    StoreConnection,
    Taken,
    answer_malformed,
)

_log = logging.getLogger("live_steering.fleet")

#: The owner's event for a request row it could not read (``Request.problem``), refused
#: ``invalid-input`` and so settled: published on the runtime's stream (docs/events.md).
QUARANTINED_EVENT: Final = "fleet.request_quarantined"

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
        location: str = "",
        errors: tuple[type[Exception], ...] = (),
    ) -> None:
        self.runtime = runtime
        self._errors = errors
        """The engine's errors: a fence-and-lock that failed with one, before anything was
        decided, is tried again (a lost connection, a restarting server) while the lease lasts."""
        self.session_id = runtime.session_id
        self.conn = conn
        self.location = location
        """The store as ``journal.failed`` names it in ``path`` (a file, a DSN without its password)."""
        self._limiter = limiter
        self.epoch = taken.epoch
        self._door = door = internals(runtime)
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
        self._committer: Committer[FleetError] = Committer(_Commits(self))
        self._inputs: dict[str, tuple[str, str]] = {}
        self._deciding: tuple[str, str, str] | None = None
        self._generation: tuple[str | None] | None = None
        self._taken_generation: tuple[str | None] | None = None
        self._requested = True  # decide what waited for this owner before it took the lease
        self.told = False
        """True once an ``OwnerLostError`` was raised to a caller (``Fleet.own`` raises one on
        leaving the block only if none was)."""
        self._closing = False
        self._decisions = 0
        self._largest = 0
        self._detach_listener = runtime.add_listener(self._on_event)
        runtime.set_write_barrier(self._barrier)

    def _lost(self) -> OwnerLostError:
        """A fresh ``OwnerLostError`` for one more caller after the owner failed; its cause is the
        failure (``FencedError`` when the lease was taken over)."""
        failure = self._committer.failure
        self.told = True
        error = OwnerLostError(
            f"the owner of session {self.session_id!r} lost the session: {failure}; this loop must end"
        )
        error.__cause__ = failure
        return error

    @property
    def failure(self) -> FleetError | None:
        """The error that failed this owner, or ``None``."""
        return self._committer.failure

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
        change = EVENT_CHANGES.get(type_)
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
        committer = self._committer
        if committer.failure is not None:
            return 0
        return committer.enqueue(
            JournalChange(
                number=committer.number + 1,
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

    async def _barrier(self, generation_id: str, inputs: Sequence[Input]) -> None:
        """The write barrier: the ``writing`` mark of each input is durable on return."""
        self._committer.raise_if_failed()
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
        await self._committer.wait(number)

    async def flush(self) -> None:
        """Wait for a commit that began after this call: everything queued so far is durable,
        the running generation is published, and the requests stored so far are decided."""
        self.runtime.receipt("")  # a public read publishes an acceptance the runtime still owes
        self._committer.raise_if_failed()
        self.request()
        await self._committer.next_commit()

    # -- requests --------------------------------------------------------------------------

    def request(self) -> None:
        """A requester stored a request for this session: decide it soon."""
        self._requested = True
        self._committer.wake()

    def _wake(self) -> None:
        self._committer.wake()

    def _decide_all(self, requests: list[Request]) -> tuple[list[Decision], list[JournalChange]]:
        """In the event loop, inside the owner's transaction: decide in request order, then take
        everything queued for the journal (the decisions' own ``accepted`` changes included)."""
        decisions = [Decision(r, self._decide(r)) for r in requests]
        batch = self._committer.take()
        self._taken_generation, self._generation = self._generation, None
        return decisions, batch

    def _decide(self, request: Request) -> Receipt:
        """One request, decided by the core (which knows the identities of earlier owners too)."""
        input = request.input
        runtime = self.runtime
        if request.problem is not None:  # a row no node wrote: quarantined, the session lives on
            receipt = answer_malformed(request)
            _log.warning("the owner of session %r quarantined %s", self.session_id, request.problem)
            self._door.publish(
                QUARANTINED_EVENT,
                {
                    "request_no": request.request_no,
                    "input_id": input.id,
                    "generation_id": request.anchor,
                    "reason": receipt.reason,
                    "problem": request.problem,
                },
            )
            return receipt
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
        await self._committer.run()

    async def _has_pending(self) -> bool:
        try:
            return await anyio.to_thread.run_sync(
                self.conn.has_pending, self.session_id, limiter=self._limiter
            )
        except Exception as exc:  # the store is gone: the next commit fails the owner properly
            _log.warning("the owner of session %r could not poll for requests: %r", self.session_id, exc)
            return True

    async def _commit_once(self) -> None:
        """One owner transaction (the committer's step): fence, decide, write, commit."""
        self._requested = False
        conn = self.conn
        started = anyio.current_time()
        renew = self._ttl if started >= self._last_renewal + self._renew else None
        async with holding(self._limiter):  # the connection is this transaction's until it ends
            requests = await self._begin(renew)
            try:
                decisions, batch = self._decide_all(requests)  # in the event loop, rows locked
            except BaseException:
                await conn.rollback_async()
                raise
            await conn.finish_batch_async(
                self.session_id, self.epoch, batch, decisions, self._taken_generation
            )
            if decisions:
                # The requesters were woken by the commit itself (SQLite: the committing thread
                # sent their datagrams before it handed the result back). A requester in this
                # process is then ready in the same turn of the loop as this task: let it return
                # its receipt first, and do this commit's bookkeeping (the committer's
                # waiters, its next wait, about 0.1 ms) after it. Shielded by ``commit_next``.
                await anyio.lowlevel.checkpoint()
        if renew is not None:
            self._last_renewal = started
        self._decisions += len(decisions)
        self._largest = max(self._largest, len(decisions))

    async def _begin(self, renew: float | None) -> list[Request]:
        """The fence-and-lock, tried again with a bounded backoff (0.05 s doubling to 1 s) when the
        store failed it (a lost connection: the next try reconnects and takes the liveness lock
        again; a server restarting): nothing was decided yet, so nothing is lost by trying again.
        Given up once the lease this owner last renewed has run out (another node may take it
        from then on), and never for ``FencedError``."""
        lease_ends = self._last_renewal + self._ttl
        delay = 0.05
        while True:
            try:
                return await self.conn.begin_batch_async(self.session_id, self._node_id, self.epoch, renew)
            except FencedError:
                raise
            except self._errors as exc:
                if anyio.current_time() + delay >= lease_ends:
                    raise
                _log.warning(
                    "the owner of session %r: the store failed (%s); trying again in %.2f s",
                    self.session_id,
                    exc,
                    delay,
                )
            await anyio.sleep(delay)
            delay = min(delay * 2, 1.0)
            if renew is None:
                renew = self._ttl  # renew on the next try: the lease is what the waiting spends

    async def aclose(self) -> None:
        """Close the runtime, commit what it owes, stop the committer. Shielded; idempotent."""
        with anyio.CancelScope(shield=True):
            await self.runtime.aclose()
            if self.failure is None:
                self.runtime.receipt("")
            self._closing = True
            await self._committer.stop()
            self._detach_listener()
            self._committer.release_waiters()

    def statistics(self) -> OwnerStatistics:
        return OwnerStatistics(
            session_id=self.session_id,
            epoch=self.epoch,
            commits=self._committer.commits,
            decisions=self._decisions,
            largest_batch=self._largest,
            enqueued=self._committer.number,
            durable=self._committer.durable_through,
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


class _Commits:
    """The owner's commit step for its ``Committer``: one fenced transaction that also decides."""

    def __init__(self, owner: Owner) -> None:
        self._owner = owner
        self.idle_wait = owner._poll

    def has_work(self) -> bool:
        owner = self._owner
        return owner._requested or owner._generation is not None

    async def when_idle(self) -> bool:
        """Commit a renewal when one is due; else look, with a read, for a request whose
        wake-up was lost."""
        owner = self._owner
        if anyio.current_time() >= owner._last_renewal + owner._renew:
            return True
        return await owner._has_pending()

    async def commit(self) -> None:
        await self._owner._commit_once()

    def durable(self, batch: Sequence[JournalChange]) -> None:
        pass

    def failure(self, exc: Exception) -> tuple[FleetError, dict[str, Any]]:
        owner = self._owner
        if isinstance(exc, FleetError):
            error = exc
        else:
            error = FleetError(f"the owner of session {owner.session_id!r}: commit failed: {exc!r}")
            error.__cause__ = exc
        return error, {
            "path": owner.location,
            "sqlite_error": owner.conn.sqlite_error(exc),
            "fenced": isinstance(exc, FencedError),
        }

    def again(self, failure: FleetError) -> FleetError:
        return self._owner._lost()

    def closed(self, number: int | None) -> FleetError:
        session_id = self._owner.session_id
        if number is None:
            return FleetError(f"the owner of session {session_id!r} is closed")
        return FleetError(f"the owner of session {session_id!r} closed before change {number} was durable")

    def runtimes(self) -> Iterable[RuntimeInternals]:
        return (self._owner._door,)

    async def failed(self, error: FleetError, lost: int) -> None:
        if isinstance(error, FencedError):
            _log.warning("%s: this owner stops writing", error)
        else:
            _log.error("%s", error)
        # nothing this runtime does from now on can be journaled: stop it (its inputs are
        # finalised by whoever takes the lease next), and have its loop end loudly
        owner = self._owner
        owner._door.fail_closed(owner._lost)
        await owner.runtime.aclose()
