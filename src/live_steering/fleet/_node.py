"""A node of the fleet: hosts submit from it, workers own runtimes through it.

Theory of operation
-------------------
A ``Fleet`` is one process's handle on a fleet store. It keeps one connection for its
hosts' requests and reads (one call at a time, guarded by a limiter: on a worker thread, or
from the event loop for the insert, see ``_store.py``), one listener for wake-ups
addressed to this node (a Unix datagram socket for SQLite, ``LISTEN`` for PostgreSQL),
and one connection per runtime it owns (``Fleet.own``, see ``_owner.py``).

A host's ``submit`` commits a request row (which wakes the owner), then waits for the
owner's reply: the receipt rides in the wake-up, and the row is re-read every
``poll_interval`` in case a wake-up was lost. When the deadline passes first, the
request is withdrawn in one statement that succeeds only while it is still pending:
won, the owner can never decide it and the answer is ``unreachable`` (C28); lost, the
decided receipt is the answer. No decision is ever taken here: a node with no live
owner for the session only answers from stored receipts (C10) or refuses.
"""

from __future__ import annotations

import abc
import collections
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import attrs

from .._errors import UnknownInputError
from .._runtime import LiveRuntime, internals
from .._types import Disposition, Input, Receipt, RefusalReason, StopReason
from .._validate import checked_id, optional_id, plain_str
from ..journal import JournalEntry
from ._owner import Owner, OwnerStatistics, holding
from ._store import (
    UNREACHABLE,
    FleetError,
    Lease,
    LeaseHeldError,
    StoreConnection,
    Submission,
    delivers,
    input_digest,
    receipt_from_wire,
)

_log = logging.getLogger("live_steering.fleet")

_T = TypeVar("_T")

DEFAULT_TTL: Final = 10.0
DEFAULT_TIMEOUT: Final = 10.0
DEFAULT_POLL: Final = 1.0
_EARLY_REPLIES: Final = 4_096

#: Seconds a submit left without its answer (a cancel, ``KeyboardInterrupt``) keeps trying,
#: shielded, to withdraw its request while the store is away, before the node takes it over.
ABANDON_RETRY: Final = 1.0


class Backoff:
    """Bounded exponential backoff for a retry after a lost store: 0.05 s doubling to 1 s, so a
    node retries at least once a second and is back within about a second of the store."""

    FIRST: Final = 0.05
    MOST: Final = 1.0

    def __init__(self) -> None:
        self.delay = self.FIRST

    def reset(self) -> None:
        self.delay = self.FIRST

    async def sleep(self) -> None:
        await anyio.sleep(self.delay)
        self.delay = min(self.delay * 2, self.MOST)


@attrs.define(eq=False)
class _Queued:
    """A submit waiting for the node's next group insert."""

    submission: Submission
    done: anyio.Event = attrs.Factory(anyio.Event)
    result: Receipt | int | None = None
    error: FleetError | None = None
    abandoned: bool = False
    """Its submitter was cancelled during the insert: the inserter withdraws it."""


@attrs.define(eq=False)
class _Waiter:
    event: anyio.Event = attrs.Factory(anyio.Event)
    receipt: Receipt | None = None


@attrs.frozen
class StopResult:
    """The answer to ``Fleet.stop``: the owner's ``runtime.stop`` result, or why no owner gave one."""

    stopped: bool
    """True: this request stopped the generation (its pending steers are held ``reason``)."""
    session_id: str
    generation_id: str
    reason: str | None
    """``None`` when stopped; else ``"not-running"``, ``"no-owner"`` or ``"unreachable"``."""


@attrs.frozen
class FleetStatistics:
    """A snapshot of a node's counters."""

    node_id: str
    submitted: int
    """Requests this node stored for an owner."""
    answered_without_owner: int
    """Submits answered from stored receipts (no live owner)."""
    unreachable: int
    """Requests withdrawn at their deadline (refused ``unreachable``)."""
    wakeups: int
    """Wake-ups received."""
    listener_reconnects: int
    owners: tuple[OwnerStatistics, ...]
    withdrawals_owed: int = 0
    """Requests of submits left without their answer (a cancel, ``KeyboardInterrupt``) while the
    store was away, which this node withdraws as soon as the store answers again."""


def _seconds(value: object, name: str, *, zero: bool = False) -> float:
    """A number of seconds given to a call: ``TypeError`` for a non-number (a bool included),
    ``ValueError`` unless it is finite and positive (or zero, given ``zero``; never NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not (value >= 0 if zero else value > 0) or value == float("inf"):
        what = "non-negative" if zero else "positive"
        raise ValueError(f"{name} must be a {what}, finite number of seconds, got {value!r}")
    return float(value)


class Fleet(abc.ABC):
    """One process's node of a fleet; use ``SQLiteFleet`` or ``PostgresFleet``.

    >>> async with SQLiteFleet("fleet.db", node_id="worker-1") as fleet:     # doctest: +SKIP
    ...     async with fleet.own(LiveRuntime(session_id="chat-42")) as runtime:
    ...         async with runtime.open_generation() as gen: ...

    ``ttl``: the lease's time to live, renewed every ``ttl / 3``. ``timeout``: a host's
    default deadline for a remote submit. ``poll_interval``: how often a waiting host
    and an idle owner re-read the tables when no wake-up came.
    """

    def __init__(
        self,
        *,
        node_id: str | None = None,
        ttl: float = DEFAULT_TTL,
        timeout: float = DEFAULT_TIMEOUT,
        poll_interval: float = DEFAULT_POLL,
    ) -> None:
        if node_id is None:
            node_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        node_id = checked_id(node_id, "node_id")  # the runtime's rules for the ids it carries
        for name, value in (("ttl", ttl), ("timeout", timeout), ("poll_interval", poll_interval)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r}")
        self.node_id: Final = node_id
        self.ttl: Final = float(ttl)
        self.timeout: Final = float(timeout)
        self.poll_interval: Final = float(poll_interval)
        self._conn: StoreConnection | None = None
        self._limiter = anyio.CapacityLimiter(1)
        self._task_group: anyio.abc.TaskGroup | None = None
        self._owners: dict[str, Owner] = {}
        self._replies: dict[int, _Waiter] = {}
        self._early: collections.OrderedDict[int, Receipt] = collections.OrderedDict()
        self._inserts: list[_Queued] = []
        self._inserting = False
        self._open = False
        self._submitted = 0
        self._without_owner = 0
        self._unreachable = 0
        self._wakeups = 0
        self._reconnects = 0
        self._owed: dict[int, Submission] = {}
        self._settling = False

    # -- what an engine supplies ---------------------------------------------------------------

    @abc.abstractmethod
    def _connect(self) -> StoreConnection:
        """A new connection (on a worker thread)."""

    @abc.abstractmethod
    async def _listen(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Receive this node's wake-ups and hand each payload to ``_dispatch`` until cancelled."""

    @abc.abstractmethod
    def _errors(self) -> tuple[type[Exception], ...]:
        """The engine's exception classes, translated to ``FleetError``."""

    @property
    @abc.abstractmethod
    def location(self) -> str:
        """The store, for messages (a path or a DSN without its password)."""

    @property
    def _journal_path(self) -> str:
        """The store as an owner's ``journal.failed`` names it in ``path`` (a DSN without its password)."""
        return self.location

    # -- opening and closing -------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._open:
            raise FleetError("a Fleet is opened once")
        self._conn = await self._call(self._open_conn, opening=True)
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        try:
            await self._task_group.start(self._listen_task)
        except BaseException:
            self._task_group.cancel_scope.cancel()
            await self._task_group.__aexit__(None, None, None)
            await anyio.to_thread.run_sync(self._conn.close)
            raise
        self._open = True
        return self

    def _open_conn(self) -> StoreConnection:
        conn = self._connect()
        try:
            conn.ensure_schema()
        except BaseException:
            conn.close()
            raise
        return conn

    async def _listen_task(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        await self._listen(task_status=task_status)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._owed and self._open:
            # Not tried again here: a store call cannot be cut short (SQLite waits out its busy
            # timeout in a thread), and leaving must not wait on the store that is away.
            for request_no, submission in self._owed.items():
                _log.warning(
                    "fleet node %r closed with request %d (input %r of session %r) still pending: "
                    "the store could not be reached to withdraw it, and its owner may decide it",
                    self.node_id,
                    request_no,
                    submission.input.id,
                    submission.session_id,
                )
        self._open = False
        with anyio.CancelScope(shield=True):
            for owner in list(self._owners.values()):
                await owner.aclose()
        assert self._task_group is not None
        self._task_group.cancel_scope.cancel()
        try:
            await self._task_group.__aexit__(None, None, None)
        finally:
            if self._conn is not None:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self._conn.close, limiter=self._limiter)
                self._conn = None

    async def _call(self, function: Callable[..., _T], *args: Any, opening: bool = False) -> _T:
        """Run a store call on the node's connection, on a worker thread; ``FleetError`` on failure."""
        if not opening and not self._open:
            raise FleetError("the fleet is not open ('async with SQLiteFleet(...) as fleet')")
        try:
            return await anyio.to_thread.run_sync(function, *args, limiter=self._limiter)
        except FleetError:
            raise
        except self._errors() as exc:
            raise FleetError(f"fleet store {self.location}: {exc}") from exc

    async def _call_async(self, function: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        """Await a store call that holds the node's connection (the limiter); ``FleetError`` on failure."""
        if not self._open:
            raise FleetError("the fleet is not open ('async with SQLiteFleet(...) as fleet')")
        try:
            async with holding(self._limiter):
                return await function(*args)
        except FleetError:
            raise
        except self._errors() as exc:
            raise FleetError(f"fleet store {self.location}: {exc}") from exc

    def _store(self) -> StoreConnection:
        assert self._conn is not None
        return self._conn

    # -- wake-ups --------------------------------------------------------------------------------

    def _dispatch(self, payload: str) -> None:
        self._wakeups += 1
        if payload.startswith("w"):
            owner = self._owners.get(payload[1:])
            if owner is not None:
                owner.request()
        elif payload.startswith("r"):
            for line in payload[1:].split("\n"):
                number, _, wire = line.partition(" ")
                try:
                    request_no, receipt = int(number), receipt_from_wire(wire)
                except Exception:  # sent by no node of ours (any local process can): never ends the node
                    _log.warning("fleet node %r: ignored a malformed wake-up %r", self.node_id, line[:80])
                    continue
                waiter = self._replies.get(request_no)
                if waiter is not None:
                    waiter.receipt = receipt
                    waiter.event.set()
                else:  # the reply beat its requester back from the insert
                    self._early[request_no] = receipt
                    while len(self._early) > _EARLY_REPLIES:
                        self._early.popitem(last=False)

    def _sweep(self) -> None:
        """Wake-ups may have been lost (the listener reconnected): re-read everything waited for."""
        self._reconnects += 1
        for owner in self._owners.values():
            owner.request()
        for waiter in self._replies.values():
            waiter.event.set()

    # -- hosts -------------------------------------------------------------------------------------

    async def capability(
        self,
        session_id: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the remote deadline of C28 (withdraw + unreachable)
    ) -> dict[str, Any]:
        """C1's capability for a session owned anywhere in the fleet; ``submit`` crosses to the owner.

        >>> capability = await fleet.capability("chat-42")           # doctest: +SKIP
        >>> receipt = await capability["submit"](Input("steer", "Use X", id="m-1"), generation_id)

        ``mode`` is ``"request_boundary"`` while a live owner holds the lease, else
        ``"unavailable"`` (as read now; a submit always asks the store again); ``"unavailable"``
        too for an owner whose runtime was made with ``boundary_delivery=False``, as its own
        capability says (the owner refuses every steer ``unavailable``).
        """
        session_id = checked_id(session_id, "session_id")
        self._timeout(timeout)  # a bad one is refused here, not by every submit through it
        lease = await self.lease(session_id)

        async def submit(input: Input, generation_id: str) -> Receipt:
            return await self.submit(session_id, input, generation_id, timeout=timeout)

        return {
            "version": 1,
            "mode": "request_boundary" if delivers(lease) else "unavailable",
            "cancellable": False,
            "submit": submit,
        }

    def _timeout(self, timeout: object) -> float:
        """A call's ``timeout`` (``None``: the fleet's), checked before anything is stored:
        ``TypeError`` for a non-number, ``ValueError`` unless it is a positive number of seconds."""
        if timeout is None:
            return self.timeout
        return _seconds(timeout, "timeout")

    async def lease(self, session_id: str) -> Lease | None:
        """The session's lease as stored now, or ``None`` if no node ever owned it.

        ``live`` is False for a free or expired lease, and for an owner whose process is gone
        (``kill -9``), though its lease has not expired yet: the owner's liveness lock is
        probed (an ``flock`` beside a SQLite store, an advisory lock on PostgreSQL).
        """
        return await self._call(self._store().probed_lease, checked_id(session_id, "session_id"))

    async def generation(self, session_id: str) -> dict[str, Any] | None:
        """``{"id", "steering_mode"}`` of the generation the session's live owner runs, else
        ``None`` (C2, C30); ``steering_mode`` is left out for an owner that recorded none (a node
        of a library older than the store's schema version 3)."""
        lease = await self.lease(session_id)
        if lease is None or not lease.live or lease.generation_id is None:
            return None
        if lease.steering_mode is None:
            return {"id": lease.generation_id}
        return {"id": lease.generation_id, "steering_mode": lease.steering_mode}

    async def submit(
        self,
        session_id: str,
        input: Input,
        generation_id: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline that withdraws, not a cancel scope
    ) -> Receipt:
        """Submit a steer to the session's owner, wherever it runs; its receipt (C27, C28).

        Returns the owner's receipt: ``queued`` is durable when returned. With no reply
        before ``timeout`` (default: the fleet's), the request is withdrawn and refused
        ``unreachable``, and it is never decided later. A store that goes away meanwhile (a lost
        connection, a server restart) is waited out until the deadline, and the withdrawal
        tried again until one more ``timeout`` has passed (then ``FleetError``: the request may
        still be decided, ``fleet.receipt`` tells). Any other way out of the call (a cancel,
        ``KeyboardInterrupt``) withdraws it too, unless it was already decided.
        """
        session_id = checked_id(session_id, "session_id")
        if not isinstance(input, Input):
            raise TypeError(f"submit takes an Input, got {type(input).__name__}")
        if not isinstance(generation_id, str):
            raise TypeError(f"generation_id must be a str, got {type(generation_id).__name__}")
        generation_id = plain_str(generation_id)
        budget = self._timeout(timeout)
        deadline = anyio.current_time() + budget
        await anyio.lowlevel.checkpoint_if_cancelled()  # cancelled already: nothing is stored (C8)
        submission = Submission(session_id, input, input_digest(input), generation_id)
        started = await self._insert(submission)
        if isinstance(started, Receipt):
            self._without_owner += 1
            # Answered without an owner by an insert run in the event loop, which may not have
            # yielded: every awaited submit lets the other tasks run (C8).
            await anyio.lowlevel.cancel_shielded_checkpoint()
            return started
        decided = await self._decision(started, deadline, budget, submission)
        if decided is not None:
            return decided
        return Receipt(False, input.id, generation_id, None, UNREACHABLE)

    async def stop(
        self,
        session_id: str,
        generation_id: str,
        reason: StopReason = StopReason.GENERATION_STOPPED,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline that withdraws, not a cancel scope
    ) -> StopResult:
        """Stop generation ``generation_id`` of the session's owner, wherever it runs (C17).

        >>> result = await fleet.stop("chat-42", "g-7")             # doctest: +SKIP
        >>> result.stopped
        True

        Crosses to the owner like a submit, and in request order with them: a steer stored
        before the stop is decided first (then held ``reason`` by the stop). The owner calls
        ``runtime.stop(generation_id, reason)``; ``stopped`` is its answer. Refused, changing
        nothing: ``not-running`` (not the running generation, or it is already ending),
        ``no-owner`` (no live owner holds the lease), ``unreachable`` (the owner did not
        decide before ``timeout``: withdrawn, never decided later).
        """
        session_id = checked_id(session_id, "session_id")
        if type(generation_id) is not str:
            raise TypeError(f"generation_id must be a str, got {type(generation_id).__name__}")
        if type(reason) is not StopReason:
            raise TypeError(f"reason must be a StopReason, got {reason!r}")
        budget = self._timeout(timeout)
        deadline = anyio.current_time() + budget
        stop = Submission(session_id, Input("stop", "", id=""), "", generation_id, reason.value)
        await anyio.lowlevel.checkpoint_if_cancelled()
        started = await self._insert(stop)
        if isinstance(started, Receipt):
            await anyio.lowlevel.cancel_shielded_checkpoint()  # as submit's (C8)
            return StopResult(False, session_id, generation_id, started.reason)
        decided = await self._decision(started, deadline, budget, stop)
        if decided is None:
            return StopResult(False, session_id, generation_id, UNREACHABLE)
        return StopResult(decided.accepted, session_id, generation_id, decided.reason)

    async def _decision(
        self, request_no: int, deadline: float, budget: float, submission: Submission
    ) -> Receipt | None:
        """Wait for the owner's answer to a stored request; ``None``: withdrawn at the deadline
        (a store away then: the withdrawal tried again for one more ``budget``, the call's timeout).

        At each poll without an answer, the owner's liveness lock is probed: an owner killed
        after the request was stored decides nothing, so the session is finalised (C23), the
        request withdrawn and answered as a node with no owner answers it (a repeat its stored
        receipt, a new input ``stale-generation``, a stop ``no-owner``): within the poll
        interval of the death, instead of ``unreachable`` at the deadline.
        """
        self._submitted += 1
        store = self._store()
        early = self._early.pop(request_no, None)
        if early is not None:
            await anyio.lowlevel.cancel_shielded_checkpoint()  # decided: returned, after a yield (C8)
            return early
        waiter = _Waiter()
        self._replies[request_no] = waiter
        try:
            while True:
                remaining = deadline - anyio.current_time()
                if remaining <= 0:
                    break
                with anyio.move_on_after(min(remaining, self.poll_interval)):
                    await waiter.event.wait()
                if waiter.receipt is not None:
                    return waiter.receipt
                waiter.event = anyio.Event()
                try:
                    decided = await self._call(store.request_receipt, request_no)
                    if decided is not None:
                        return decided
                    if await self._call(store.owner_died, submission.session_id):
                        with anyio.CancelScope(shield=True):
                            return await self._after_owner_died(request_no, submission)
                except FleetError as exc:  # the store is away (a lost connection, a restart): wait on
                    if not isinstance(exc.__cause__, self._errors()):
                        raise
                    _log.warning("fleet node %r: waiting for request %d: %s", self.node_id, request_no, exc)
            with anyio.CancelScope(shield=True):
                decided = await self._withdraw(request_no, deadline + budget)
            if decided is None:
                self._unreachable += 1
            return decided
        except BaseException as exc:
            # Every way out without an answer (a cancel, KeyboardInterrupt, a lost store) withdraws
            # the request, so it is never decided later: decided already, ``fleet.receipt`` tells.
            # A caller told ``FleetError`` waited out the store already: no more tries here.
            await self._abandon(request_no, submission, retry=not isinstance(exc, FleetError))
            raise
        finally:
            self._replies.pop(request_no, None)

    async def _abandon(self, request_no: int, submission: Submission, *, retry: bool = True) -> None:
        """Withdraw the request of a submit that is left without its answer, shielded: tried again
        while the store is away for up to ``ABANDON_RETRY`` seconds (``retry``), then owed: the
        node withdraws it as soon as the store answers again (a task of its own, and before it
        stores anything else), and logs a warning meanwhile."""
        with anyio.CancelScope(shield=True):
            try:
                give_up = anyio.current_time() + (ABANDON_RETRY if retry else 0.0)
                await self._withdraw(request_no, give_up)
                return
            except FleetError as exc:
                if not isinstance(exc.__cause__, self._errors()):  # the fleet is closed: nobody can
                    _log.warning("fleet node %r: request %d not withdrawn: %s", self.node_id, request_no, exc)
                    return
                reason = exc
            self._owed[request_no] = submission
            _log.warning(
                "fleet node %r: request %d (input %r of session %r) of a submit left without its "
                "answer could not be withdrawn (%s): it is withdrawn as soon as the store answers "
                "again; if its owner gets there first and decides it, fleet.receipt tells",
                self.node_id,
                request_no,
                submission.input.id,
                submission.session_id,
                reason,
            )
            if not self._settling and self._open and self._task_group is not None:
                self._settling = True
                self._task_group.start_soon(self._settle_owed)

    async def _settle_owed(self) -> None:
        """Withdraw the owed requests, trying again with a bounded backoff until the store answers."""
        backoff = Backoff()
        try:
            while self._owed:
                try:
                    await self._withdraw_owed()
                except FleetError as exc:
                    if not isinstance(exc.__cause__, self._errors()):
                        return
                    await backoff.sleep()
        finally:
            self._settling = False

    async def _withdraw_owed(self) -> None:
        """Withdraw each owed request once; the store's ``FleetError`` while it is still away
        (the rest stay owed). Each withdrawal, once begun, runs to its end (shielded)."""
        for request_no, submission in list(self._owed.items()):
            if request_no not in self._owed:
                continue  # withdrawn meanwhile by another task of this node
            with anyio.CancelScope(shield=True):
                decided = await self._call(self._store().withdraw, request_no)
            if self._owed.pop(request_no, None) is None:
                continue
            if decided is None:
                _log.warning(
                    "fleet node %r: request %d (input %r of session %r) withdrawn: never decided",
                    self.node_id,
                    request_no,
                    submission.input.id,
                    submission.session_id,
                )
            else:
                _log.warning(
                    "fleet node %r: request %d (input %r of session %r) of a submit left without its "
                    "answer was decided before it could be withdrawn: %s",
                    self.node_id,
                    request_no,
                    submission.input.id,
                    submission.session_id,
                    decided.to_dict(),
                )

    async def _withdraw(self, request_no: int, give_up: float) -> Receipt | None:
        """``store.withdraw``, tried again with a bounded backoff while the store is away, until
        ``give_up``; then the store's ``FleetError`` (the request may still be decided later:
        ``fleet.receipt`` tells)."""
        backoff = Backoff()
        while True:
            try:
                return await self._call(self._store().withdraw, request_no)
            except FleetError as exc:
                if not isinstance(exc.__cause__, self._errors()) or anyio.current_time() >= give_up:
                    raise
                _log.warning("fleet node %r: withdrawing request %d: %s", self.node_id, request_no, exc)
            await backoff.sleep()

    async def _after_owner_died(self, request_no: int, submission: Submission) -> Receipt:
        store = self._store()
        await self._call(store.recover, submission.session_id)
        decided = await self._call(store.withdraw, request_no)
        if decided is not None:  # a new owner took the session over and decided it first
            return decided
        self._without_owner += 1
        return await self._call(store.answer_without_owner, submission)

    async def _insert(self, submission: Submission) -> Receipt | int:
        """Store one request in a group insert (one transaction for every submit waiting).

        The first submitter runs the insert itself (no task hop on an idle node); those that
        arrive meanwhile wait and go in the next one, which a task of the node runs.
        """
        if not self._open:
            raise FleetError("the fleet is not open ('async with SQLiteFleet(...) as fleet')")
        if self._owed:  # withdrawals this node owes go first: FleetError while the store is away
            await self._withdraw_owed()
        queued = _Queued(submission)
        self._inserts.append(queued)
        if not self._inserting:
            self._inserting = True
            try:
                await self._insert_batch()
            finally:
                if self._inserts:
                    assert self._task_group is not None
                    self._task_group.start_soon(self._drain_inserts)
                else:
                    self._inserting = False
        try:
            if not queued.done.is_set():  # set already when this task ran the insert: no extra turn
                await queued.done.wait()
        except BaseException:
            if queued in self._inserts:
                self._inserts.remove(queued)  # never stored
            elif queued.done.is_set():
                # Stored already, and the insert's task is past its look at abandoned requests
                # (the cancellation landed between the insert and this task's resumption):
                # withdraw it here, so that it is never decided later.
                if isinstance(queued.result, int):
                    await self._abandon(queued.result, submission)
            else:
                queued.abandoned = True  # the insert's task withdraws it once stored
            raise
        if queued.error is not None:
            raise queued.error
        assert queued.result is not None
        return queued.result

    async def _drain_inserts(self) -> None:
        try:
            while self._inserts:
                await self._insert_batch()
        finally:
            self._inserting = False

    async def _insert_batch(self) -> None:
        """Insert everything queued, in one transaction; never abandoned once begun."""
        store = self._store()
        batch, self._inserts = self._inserts, []
        if self._owed:  # queued before a withdrawal became owed: stored nothing, told so
            error = FleetError(
                f"fleet node {self.node_id!r} owes the withdrawal of {len(self._owed)} request(s) the "
                "store could not take: it stores nothing else until the store answers again"
            )
            for queued in batch:
                queued.error = error
                queued.done.set()
            return
        with anyio.CancelScope(shield=True):
            try:
                results = await self._call_async(
                    store.submit_async, self.node_id, [q.submission for q in batch]
                )
            except Exception as exc:  # any failure is every waiter's, never the fleet's task group's
                where = self.location
                error = exc if isinstance(exc, FleetError) else FleetError(f"fleet store {where}: {exc!r}")
                for queued in batch:
                    queued.error = error
                    queued.done.set()
                return
            abandoned: list[tuple[int, Submission]] = []
            for queued, result in zip(batch, results, strict=True):
                queued.result = result
                queued.done.set()
                if queued.abandoned and isinstance(result, int):
                    abandoned.append((result, queued.submission))
            for request_no, submission in abandoned:  # a cancelled submit is never decided later
                # one try each here (the inserts of the node wait on this task): owed if it fails
                await self._abandon(request_no, submission, retry=False)

    async def receipt(self, session_id: str, input_id: str) -> Receipt | None:
        """The stored receipt of an accepted input, from any node, also after its owner died.

        An input stored ``queued`` whose owner is surely gone (``kill -9``, a crash) and that no
        node took over yet is finalised first, as the next owner's take would (C23: ``held`` or
        ``unknown``, ``runtime-lost``; ``fleet.recover``), so a read does not keep saying
        ``queued`` for an input nothing can apply. Surely gone: its liveness lock is free and the
        process the lease names has ended (SQLite) or the lease has expired (PostgreSQL, where a
        cut connection frees the lock of an owner that reconnects). An owner that lives on,
        stopped, slow or reconnecting, is left alone.
        """
        session_id = checked_id(session_id, "session_id")
        input_id = plain_str(input_id, "input_id")
        store, owned = self._store(), session_id in self._owners

        def read() -> Receipt | None:
            found = store.receipt(session_id, input_id)
            if found is None or found.disposition is not Disposition.QUEUED or owned:
                return found
            return store.receipt(session_id, input_id) if store.recover_if_gone(session_id) else found

        return await self._call(read)

    async def wait_final(self, session_id: str, input_id: str) -> Receipt:
        """Wait until an accepted input is ``applied``, ``held`` or ``unknown``; its receipt.

        If its owner died meanwhile, this node finalises the session (C23) rather than wait
        for a new owner, once the owner is surely gone (``receipt``'s rule: on PostgreSQL once
        its lease expired too, so an owner riding out a lost connection keeps its session).
        Raises ``UnknownInputError`` (a ``LookupError``) for an id the session never accepted,
        as ``LiveRuntime.wait_final`` does; bound the wait with ``anyio.fail_after``.
        """
        session_id = checked_id(session_id, "session_id")
        input_id = plain_str(input_id, "input_id")
        store = self._store()
        delay = 0.005
        while True:
            receipt = await self._call(store.receipt, session_id, input_id)
            if receipt is None:
                raise UnknownInputError(
                    f"session {session_id!r} never accepted input {input_id!r}: it can never be final"
                )
            if receipt.disposition is not Disposition.QUEUED:
                return receipt
            if session_id not in self._owners:  # a dead owner's inputs: finalise them here (C23)
                await self._call(store.recover_if_gone, session_id)
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.1)

    async def recover(self, session_id: str) -> bool:
        """Finalise a session whose owner is dead or expired (C23); True if it did. Any node may."""
        return await self._call(self._store().recover, checked_id(session_id, "session_id"))

    async def entries(
        self,
        *,
        session_id: str | None = None,
        generation_id: str | None = None,
        disposition: Disposition | str | None = None,
    ) -> list[JournalEntry]:
        """The stored receipts (``runtime_no`` is the owner's lease epoch), oldest first.

        Filters are checked before the store is read: ``TypeError`` for a filter that is not a
        ``str``, ``ValueError`` for an id no session or generation can have (C7) or an unknown
        disposition."""
        session_id = optional_id(session_id, "session_id")
        generation_id = optional_id(generation_id, "generation_id")
        value = None if disposition is None else Disposition(disposition).value
        return await self._call(
            lambda: self._store().entries(
                session_id=session_id, generation_id=generation_id, disposition=value
            )
        )

    async def request_states(self, session_id: str) -> dict[str, int]:
        """How many of the session's requests are pending, decided and withdrawn."""
        return await self._call(self._store().request_states, checked_id(session_id, "session_id"))

    # -- owners ------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def own(self, runtime: LiveRuntime, *, wait: float | None = None) -> AsyncIterator[LiveRuntime]:
        """Own ``runtime``'s session: take its lease, decide its remote requests, journal it.

        The runtime must be new (nothing accepted, no generation, no write barrier): the
        fleet store becomes its receipt journal. Leaving the block closes the runtime,
        commits what it owes and releases the lease. ``wait``: seconds to wait for a live
        owner to go (``TimeoutError`` when they run out; ``None`` or 0: one try, and
        ``LeaseHeldError`` at once if a live owner holds the lease); a ``wait`` that is not a
        number is a ``TypeError``, a negative, NaN or infinite one a ``ValueError``. A dead owner (its lock is
        free) or an expired one is taken over at once, and what it left ``queued`` is
        finalised as in C23 in the same transaction.

        An owner that fails (its lease taken over: fenced; its store lost) closes the runtime,
        and from then on ``gen.boundary()``, ``gen.wait_for_input()`` and ``open_generation``
        raise ``OwnerLostError``; a block left without an error, when none was raised yet, raises it
        too, so a loop that ended meanwhile (a stop) still learns that the session was lost.
        """
        if not isinstance(runtime, LiveRuntime):
            raise TypeError(f"own takes a LiveRuntime, got {type(runtime).__name__}")
        if wait is not None:
            # ``wait=0``: do not wait, as with no ``wait`` (one try: ``LeaseHeldError`` if held)
            wait = _seconds(wait, "wait", zero=True) or None
        if not self._open:
            raise FleetError("own needs an open fleet")
        stats = runtime.statistics()
        if runtime.closed or stats.accepted or stats.refused or stats.generations_started:
            raise ValueError("own takes a new runtime (nothing submitted, no generation yet)")
        if runtime.write_barrier is not None:
            raise ValueError("this runtime already has a write barrier (attached to a journal?)")
        session_id = runtime.session_id
        if session_id in self._owners:
            raise LeaseHeldError(f"this node already owns session {session_id!r}")
        limiter = anyio.CapacityLimiter(1)
        # recorded on the lease for hosts to show (C30), with whether its boundaries deliver (C1)
        modes = (*internals(runtime).delivery_modes(), runtime.capability["mode"])
        conn: StoreConnection | None = None
        backoff = Backoff()
        try:
            with anyio.fail_after(wait) if wait is not None else contextlib.nullcontext():
                while True:
                    try:
                        if conn is None:
                            conn = await self._call(self._connect)
                        taken = await self._owner_call(
                            limiter, conn.take, session_id, self.node_id, self.ttl, modes
                        )
                    except FleetError as exc:
                        if wait is None or not isinstance(exc.__cause__, self._errors()):
                            raise
                        # a standby outlives a lost connection and a restart of the server: it
                        # tries again, on a new connection when the last one is gone, until ``wait``
                        _log.warning("fleet node %r: waiting for %r: %s", self.node_id, session_id, exc)
                        await backoff.sleep()
                        continue
                    backoff.reset()
                    if taken is not None:
                        break
                    if wait is None:
                        raise LeaseHeldError(f"session {session_id!r} is owned by another live node")
                    await anyio.sleep(min(0.01, self.ttl / 10))  # a probe: a read, no write
        except BaseException:
            if conn is not None:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(conn.close)
            raise
        assert conn is not None  # the loop above ends with a connection or raises
        owner = Owner(
            runtime,
            conn,
            limiter,
            taken,
            node_id=self.node_id,
            ttl=self.ttl,
            poll_interval=self.poll_interval,
            location=self._journal_path,
            errors=self._errors(),
        )
        self._owners[session_id] = owner
        assert self._task_group is not None
        self._task_group.start_soon(owner.run)
        try:
            yield runtime
        finally:
            with anyio.CancelScope(shield=True):
                await owner.aclose()
                del self._owners[session_id]
                try:
                    if owner.failure is None:
                        await self._owner_call(limiter, conn.release, session_id, self.node_id, owner.epoch)
                finally:
                    await anyio.to_thread.run_sync(conn.close, limiter=limiter)
        if owner.failure is not None and not owner.told:
            raise owner._lost()  # the block ended as if nothing happened: it did not own it to the end

    async def _owner_call(
        self, limiter: anyio.CapacityLimiter, function: Callable[..., _T], *args: Any
    ) -> _T:
        try:
            return await anyio.to_thread.run_sync(function, *args, limiter=limiter)
        except FleetError:
            raise
        except self._errors() as exc:
            raise FleetError(f"fleet store {self.location}: {exc}") from exc

    def owner(self, session_id: str) -> OwnerStatistics | None:
        """The counters of this node's owner of ``session_id``, if it owns it."""
        found = self._owners.get(session_id)
        return None if found is None else found.statistics()

    async def flush(self, session_id: str) -> None:
        """Wait until everything this node's owner of ``session_id`` queued is durable.

        ``LookupError`` for a session this node does not own (``fleet.own`` it first), and the
        id rules' ``TypeError`` / ``ValueError`` for an id no session can have."""
        session_id = checked_id(session_id, "session_id")
        owner = self._owners.get(session_id)
        if owner is None:
            raise LookupError(
                f"this node ({self.node_id}) does not own session {session_id!r}: flush waits for "
                "the commits of an owner it runs (fleet.own)"
            )
        await owner.flush()

    def statistics(self) -> FleetStatistics:
        return FleetStatistics(
            node_id=self.node_id,
            submitted=self._submitted,
            answered_without_owner=self._without_owner,
            unreachable=self._unreachable,
            wakeups=self._wakeups,
            listener_reconnects=self._reconnects,
            owners=tuple(owner.statistics() for owner in self._owners.values()),
            withdrawals_owed=len(self._owed),
        )


async def submit_unanchored(fleet: Fleet, session_id: str, input: Input, running: str | None) -> Receipt:
    """Submit ``input`` for a caller that named no generation (``live-steering steer`` and the
    HTTP API without ``generation_id``): anchored to ``running``, the generation the session's
    live owner runs, if any.

    A repeat of an input accepted before is anchored where it was accepted, so a client that
    retries after the generation moved on gets the input's current receipt (C10), not
    ``identity-conflict``: a conflict from ``running`` costs one stored-receipt read and, if
    the input was accepted in another generation, the submit again with that anchor (which
    refuses other content there as a conflict). With no generation running, a new id is
    anchored to no generation (refused ``stale-generation``, as in-process) and a stored one
    where it was accepted.
    """
    if running is None:
        stored = await fleet.receipt(session_id, input.id)
        return await fleet.submit(session_id, input, "" if stored is None else stored.generation_id)
    receipt = await fleet.submit(session_id, input, running)
    if receipt.reason != RefusalReason.IDENTITY_CONFLICT:
        return receipt
    stored = await fleet.receipt(session_id, input.id)
    if stored is None or stored.generation_id == running:
        return receipt
    return await fleet.submit(session_id, input, stored.generation_id)
