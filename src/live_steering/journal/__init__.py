"""Durable receipts: a crash-safe SQLite journal of every disposition change (C22, C23).

Theory of operation
-------------------
A ``ReceiptJournal`` owns one SQLite file (stdlib ``sqlite3``, WAL,
``synchronous=FULL``) and an exclusive lock beside it (``PATH.lock``, released by
the kernel when the process dies). It attaches to ``LiveRuntime``s: a listener
turns each disposition event (``steering.accepted``/``applied``/``held``/``unknown``)
into a numbered *change* appended to an in-memory queue, in event order, and the
runtime's write barrier appends a ``writing`` mark for the one input about to be
written and waits until that mark is durable before the loop's writer sees it.

The numbering, the waiting and the group commit are the one committer every journal
shares (``journal/_committer.py``, also the fleet owner's): it takes everything queued
(up to ``max_batch``) and this journal commits it in one ``BEGIN IMMEDIATE`` transaction
on a worker thread, one thread at a time (group commit: many changes, one fsync). A
commit that has begun is shielded from cancellation and always runs to its end. Only
when it has returned do the changes count as durable: ``durable_through`` moves,
waiters keyed by change number are woken in order, and durable listeners hear about
them. A failed commit (disk full, I/O error, an update that found no row still
``queued``, the file unlinked, renamed or replaced under the journal) makes the journal
*failed*: waiters raise ``JournalError``, the barrier refuses every later write,
``journal.failed`` is published on each attached runtime's event stream, and nothing
more is ever reported durable.

Opening a file runs ``PRAGMA integrity_check`` (corruption raises
``JournalCorruptError``, no guessing), then finalises what a dead process left
``queued``: never marked ``writing`` -> ``held``, marked -> ``unknown``, both with
reason ``runtime-lost``. The journal never records an input the runtime refused;
it stores a SHA-256 digest of the content, not the text. The SQL itself (schema,
recovery, the commit of a batch, reading) is in ``journal/_store.py``.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import time as _time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, Final

import anyio
import anyio.abc
import attrs

from .._errors import UnknownInputError
from .._runtime import AcceptedInput, LiveRuntime, RuntimeInternals, internals
from .._types import Disposition, Input, Receipt
from . import _store as store
from ._committer import EVENT_CHANGES, Committer
from ._store import (
    DISPOSITION_OF_CHANGE,
    ChangeKind,
    JournalBusyError,
    JournalChange,
    JournalConnection,
    JournalCorruptError,
    JournalEntry,
    JournalError,
    RecoveryReport,
    connect,
    live_writer,
    read_receipts,
)

__all__ = [
    "ReceiptJournal",
    "JournalChange",
    "ChangeKind",
    "JournalEntry",
    "JournalStatistics",
    "RecoveryReport",
    "JournalConnection",
    "connect",
    "read_receipts",
    "live_writer",
    "JournalError",
    "JournalCorruptError",
    "JournalBusyError",
]

DEFAULT_MAX_BATCH: Final = 4_096

_log = logging.getLogger("live_steering.journal")


@attrs.frozen
class JournalStatistics:
    """A snapshot of a journal's counters; tests and hosts assert on this."""

    path: str
    open: bool
    attached: int
    """Runtimes attached now."""
    enqueued: int
    """Number of the last change queued (changes are numbered from 1)."""
    durable: int
    """Every change up to this number is durable."""
    commits: int
    largest_batch: int
    waiters: int
    """Change numbers some task is waiting on."""
    failed: str | None
    """The error that failed the journal, or ``None``."""
    unjournaled: int
    """Changes seen after the journal failed or closed, never queued."""
    recovered_held: int
    recovered_unknown: int


# -- the journal --------------------------------------------------------------------------


@attrs.define(eq=False)
class _Attachment:
    runtime_no: int
    runtime: LiveRuntime
    session_id: str
    access: RuntimeInternals
    """The journal's only door into the runtime (``_runtime.RuntimeInternals``)."""
    latest: dict[str, int] = attrs.Factory(dict)
    """input id -> number of the last change queued for it."""
    durable: dict[str, Receipt] = attrs.Factory(dict)
    """input id -> the last receipt made durable."""
    digests: dict[str, str] = attrs.Factory(dict)
    """input id -> content digest, computed once per input rather than once per change."""
    detach: Callable[[], None] | None = None

    def digest(self, input: Input) -> str:
        found = self.digests.get(input.id)
        if found is None:
            found = self.digests[input.id] = store.digest(input)
        return found


class ReceiptJournal:
    """A crash-safe journal of every receipt of the runtimes attached to it (C22, C23).

    >>> async with ReceiptJournal("receipts.db") as journal:     # doctest: +SKIP
    ...     journal.attach(runtime)
    ...     receipt = await runtime.submit_steering(Input("steer", "Use X", id="fix-1"), gen_id)
    ...     await journal.wait_durable("fix-1")     # the queued receipt survives kill -9 now

    ``max_batch`` bounds how many changes one commit carries (``1`` gives one commit
    per change, for comparison). ``connect`` makes the SQLite connection; wrap
    ``live_steering.journal.connect`` to inject faults. ``clock`` dates recovery.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
        connect: store.ConnectionFactory = connect,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if type(max_batch) is not int or max_batch < 1:
            raise ValueError(f"max_batch must be a positive int, got {max_batch!r}")
        self.path: Final = os.fspath(path)
        if self.path == ":memory:" or self.path.startswith("file:"):
            raise ValueError("the receipt journal needs a file path")
        self._max_batch = max_batch
        self._connect = connect
        self._clock = clock
        self._conn: JournalConnection | None = None
        self._lock_fd: int | None = None
        self._file: store.FileIdentity | None = None
        self._limiter: anyio.CapacityLimiter | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._committer: Committer[JournalError] = Committer(_Commits(self), max_batch=max_batch)
        self._attachments: list[_Attachment] = []
        self._by_no: dict[int, _Attachment] = {}
        self._next_runtime_no = 1
        self._durable_listeners: list[Callable[[Sequence[JournalChange]], None]] = []
        self._open = False
        self._closing = False
        self._unjournaled = 0
        self.recovery: RecoveryReport = RecoveryReport((), ())
        """What opening the file finalised (filled in by ``__aenter__``)."""

    # -- opening, recovery and closing ---------------------------------------------------

    async def __aenter__(self) -> ReceiptJournal:
        if self._open or self._closing:
            raise JournalError("a ReceiptJournal is opened once")
        self._limiter = anyio.CapacityLimiter(1)
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._open_sync, limiter=self._limiter)
        self._open = True
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._task_group.start_soon(self._committer.run)
        return self

    def _open_sync(self) -> None:
        """Lock, connect, check, recover (on the worker thread). Leaves nothing held on failure."""
        made_lock = not os.path.lexists(self.path + ".lock")
        lock_fd = store.lock(self.path)

        def release() -> None:  # a failed open leaves no lock file it made behind
            if made_lock:
                store.discard_lock(self.path, lock_fd)
            else:
                store.unlock(lock_fd)

        try:
            conn = self._connect(self.path)
        except sqlite3.Error as exc:
            release()
            raise store.translate(exc, "opening", self.path) from exc
        try:
            store.prepare(conn, self.path)
            file = store.FileIdentity.of(self.path, lock_fd)
            self.recovery = store.recover(conn, self._now())
            store.check_file(conn, file)
            self._next_runtime_no = store.next_runtime_no(conn)
        except BaseException as exc:
            conn.close()
            release()
            if isinstance(exc, sqlite3.Error):
                raise store.translate(exc, "opening", self.path) from exc
            raise
        self._conn, self._lock_fd, self._file = conn, lock_fd, file

    def _now(self) -> float:
        return _time.time() if self._clock is None else self._clock()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.aclose()
        finally:
            # The committer has ended, so the task group is empty. The body's own exception
            # is not handed to it (it would come back wrapped in an ExceptionGroup).
            assert self._task_group is not None
            await self._task_group.__aexit__(None, None, None)

    async def aclose(self) -> None:
        """Commit what is queued, detach every runtime and close the file. Idempotent.

        A runtime still attached keeps a barrier that refuses to write (``JournalError``):
        no input can reach a context unjournaled. Close the runtime first.
        """
        if not self._open or self._closing:
            return
        with anyio.CancelScope(shield=True):
            # Detach before closing the queue: detaching publishes an acceptance a runtime
            # still owes (``EventHub.owed``), and it is this journal's to record.
            for attachment in self._attachments:
                self._detach(attachment)
            self._closing = True
            committer = self._committer
            await committer.stop()
            while committer.queued and committer.failure is None:  # its task was cancelled early
                await committer.commit_next()
            self._open = False
            committer.release_waiters()
            await anyio.to_thread.run_sync(self._close_sync, limiter=self._limiter)

    def _close_sync(self) -> None:
        try:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        finally:
            if self._lock_fd is not None:
                store.unlock(self._lock_fd)
                self._lock_fd = None

    # -- attaching runtimes ----------------------------------------------------------------

    def attach(self, runtime: LiveRuntime) -> Callable[[], None]:
        """Journal every disposition change of ``runtime`` from now on; returns a detacher.

        Inputs the runtime already holds are journaled first, as they stand. Installs
        the runtime's write barrier (``LiveRuntime.set_write_barrier``), so a runtime
        takes one journal. Detaching leaves a barrier that refuses to write, so no
        input the journal saw queued can reach a context unjournaled; call
        ``runtime.set_write_barrier(None)`` to drop it deliberately.
        """
        if not self._open or self._closing:
            raise JournalError("attach needs an open journal ('async with ReceiptJournal(path)')")
        if not isinstance(runtime, LiveRuntime):
            raise TypeError(f"attach takes a LiveRuntime, got {type(runtime).__name__}")
        if runtime.write_barrier is not None:
            raise ValueError("this runtime already has a write barrier (attached to a journal?)")
        access = internals(runtime)
        records = access.accepted_inputs()
        if any(record.writing for record in records):
            # its write began unmarked: recovery could not tell it from one never written
            raise ValueError("attach between boundaries: a context write is in progress")
        attachment = _Attachment(self._next_runtime_no, runtime, runtime.session_id, access)
        self._next_runtime_no += 1
        self._attachments.append(attachment)
        self._by_no[attachment.runtime_no] = attachment
        for record in records:
            self._enqueue(attachment, ChangeKind.ACCEPTED, record, None)
            disposition = record.disposition
            if disposition is not Disposition.QUEUED:
                reason = None if record.reason is None else record.reason.value
                self._enqueue(attachment, ChangeKind(disposition.value), record, None, reason)
        remove_listener = runtime.add_listener(lambda event: self._on_event(attachment, event))

        async def barrier(generation_id: str, inputs: Sequence[Input]) -> None:
            await self._mark_writing(attachment, inputs)

        runtime.set_write_barrier(barrier)

        def detach() -> None:
            remove_listener()
            if runtime.write_barrier is barrier:
                runtime.set_write_barrier(self._refusing_barrier)

        attachment.detach = detach
        return lambda: self._detach(attachment)

    def _detach(self, attachment: _Attachment) -> None:
        if attachment.detach is not None:
            attachment.detach()
            attachment.detach = None

    async def _refusing_barrier(self, generation_id: str, inputs: Sequence[Input]) -> None:
        raise JournalError(
            f"receipt journal {self.path!r} was detached or closed; refusing to write unjournaled input"
        )

    def _on_event(self, attachment: _Attachment, event: dict[str, Any]) -> None:
        change = EVENT_CHANGES.get(event["type"])
        if change is None:
            return
        input_id = event["input_id"]
        record = attachment.access.accepted(input_id)
        if record is None:  # cannot happen for these event types: the core emits them for records
            raise JournalError(f"event {event['type']} for an input the runtime does not hold")
        self._enqueue(attachment, change, record, event["sequence"], event.get("reason"), time=event["time"])

    def _enqueue(
        self,
        attachment: _Attachment,
        change: ChangeKind,
        record: AcceptedInput,
        sequence: int | None,
        reason: str | None = None,
        *,
        time: float | None = None,
    ) -> int:
        """Queue one change for the next commit; its number. O(1) (the digest is O(text))."""
        committer = self._committer
        if committer.failure is not None or self._closing:
            self._unjournaled += 1
            return 0
        if time is None:
            time = self._now()
        input = record.input
        number = committer.enqueue(
            JournalChange(
                number=committer.number + 1,
                runtime_no=attachment.runtime_no,
                session_id=attachment.session_id,
                input_id=input.id,
                generation_id=record.generation_id,
                change=change,
                disposition=DISPOSITION_OF_CHANGE[change],
                reason=reason,
                kind=input.kind,
                digest=attachment.digest(input),
                sequence=sequence,
                admission=record.sequence,
                time=time,
            )
        )
        attachment.latest[input.id] = number
        return number

    async def _mark_writing(self, attachment: _Attachment, inputs: Sequence[Input]) -> None:
        """The write barrier: the marks of ``inputs`` (the runtime passes one) are durable on return."""
        self._raise_if_unusable()
        number = 0
        for input in inputs:
            record = attachment.access.accepted(input.id)
            if record is None:  # cannot happen: the runtime announces only inputs it accepted
                raise JournalError(f"the write barrier announced {input.id!r}, never accepted by the runtime")
            number = self._enqueue(attachment, ChangeKind.WRITING, record, None)
        await self._committer.wait(number)

    # -- durability ------------------------------------------------------------------------

    def add_durable_listener(self, listener: Callable[[Sequence[JournalChange]], None]) -> Callable[[], None]:
        """Call ``listener(changes)`` after each commit returned, with the changes it made durable.

        Called in the event loop, in change order; keep it quick. Returns a remover.
        """
        self._durable_listeners.append(listener)

        def remove() -> None:
            if listener in self._durable_listeners:
                self._durable_listeners.remove(listener)

        return remove

    async def wait_durable(self, target: str | int, *, session_id: str | None = None) -> None:
        """Return once a change is durable: it survives ``kill -9`` from then on.

        ``target`` is an input id (everything journaled for it so far, for example its
        ``queued`` receipt right after the submit) or a change number (``JournalChange.number``,
        ``statistics().enqueued``). ``session_id`` picks the runtime when several attached
        runtimes accepted the same id. Raises ``UnknownInputError`` (a ``LookupError``) for an
        input the journal never saw (a refused one), as ``LiveRuntime.wait_final`` does, and
        ``JournalError`` if the journal failed or closed first.
        """
        committer = self._committer
        committer.raise_if_failed()  # checked first: after a failure nothing is journaled
        self._settle()
        if isinstance(target, str):
            number = self._attachment_of(target, session_id).latest[target]
        elif type(target) is int:
            if target > committer.number:
                raise ValueError(f"change {target} was never queued (last is {committer.number})")
            number = target
        else:
            raise TypeError("wait_durable takes an input id (str) or a change number (int)")
        await committer.wait(number)

    def durable_receipt(self, input_id: str, *, session_id: str | None = None) -> Receipt | None:
        """The last receipt of ``input_id`` known durable, or ``None`` if there is none (yet)."""
        try:
            attachment = self._attachment_of(input_id, session_id)
        except UnknownInputError:
            return None
        return attachment.durable.get(input_id)

    async def flush(self) -> None:
        """Wait until every change queued so far is durable."""
        self._settle()
        await self._committer.wait(self._committer.number)

    def _settle(self) -> None:
        """Journal what an attached runtime still owes: an admission whose ``steering.accepted``
        waits for its submitter to resume. A read here then agrees with ``runtime.receipt()``."""
        for attachment in self._attachments:
            if attachment.detach is not None:
                attachment.access.settle()

    def _attachment_of(self, input_id: str, session_id: str | None) -> _Attachment:
        found = [
            a
            for a in self._attachments
            if input_id in a.latest and (session_id is None or a.session_id == session_id)
        ]
        if not found:
            raise UnknownInputError(
                f"input {input_id!r} was never journaled: no attached runtime accepted it (a refused "
                "submit leaves nothing to journal)"
            )
        if len(found) > 1:
            if session_id is None:
                raise ValueError(f"input id {input_id!r} is journaled for several runtimes; pass session_id")
            found = found[-1:]  # the same session attached twice: the latest runtime
        return found[0]

    def _raise_if_unusable(self) -> None:
        self._committer.raise_if_failed()
        if not self._open or self._closing:
            raise JournalError(f"receipt journal {self.path!r} is closed")

    # -- reading ---------------------------------------------------------------------------

    async def entries(
        self,
        *,
        generation_id: str | None = None,
        disposition: Disposition | str | None = None,
        input_id: str | None = None,
    ) -> list[JournalEntry]:
        """The durable state of the journaled inputs (all runtimes), read on the journal's thread.

        Works on a failed journal too (it shows what is durable), not on a closed one. A filter
        that is not a ``str`` is a ``TypeError``, an id nothing can have a ``ValueError``.
        """
        generation_id, disposition, input_id = store.check_filters(generation_id, disposition, input_id)
        if not self._open or self._closing:
            raise JournalError(f"receipt journal {self.path!r} is closed")
        conn = self._conn
        assert conn is not None

        def read() -> list[JournalEntry]:
            return store.select(
                conn, self.path, generation_id=generation_id, disposition=disposition, input_id=input_id
            )

        try:
            return await anyio.to_thread.run_sync(read, limiter=self._limiter)
        except sqlite3.Error as exc:
            raise store.translate(exc, "reading", self.path) from exc

    def statistics(self) -> JournalStatistics:
        self._settle()
        committer = self._committer
        return JournalStatistics(
            path=self.path,
            open=self._open,
            attached=sum(1 for a in self._attachments if a.detach is not None),
            enqueued=committer.number,
            durable=committer.durable_through,
            commits=committer.commits,
            largest_batch=committer.largest_batch,
            waiters=committer.waiters,
            failed=None if committer.failure is None else str(committer.failure),
            unjournaled=self._unjournaled,
            recovered_held=len(self.recovery.held),
            recovered_unknown=len(self.recovery.unknown),
        )


class _Commits:
    """The journal's commit step for its ``Committer``: a batch into the SQLite file."""

    idle_wait: float = math.inf  # nothing to do until a change is queued

    def __init__(self, journal: ReceiptJournal) -> None:
        self._journal = journal

    def has_work(self) -> bool:
        return False

    async def when_idle(self) -> bool:
        return False

    async def commit(self) -> None:
        journal = self._journal
        conn, file = journal._conn, journal._file
        assert conn is not None
        assert file is not None
        batch = journal._committer.take()
        await anyio.to_thread.run_sync(store.commit, conn, batch, file, limiter=journal._limiter)

    def durable(self, batch: Sequence[JournalChange]) -> None:
        journal = self._journal
        by_no = journal._by_no
        for change in batch:
            by_no[change.runtime_no].durable[change.input_id] = change.receipt()
        for listener in list(journal._durable_listeners):
            try:
                listener(batch)
            except Exception:
                _log.exception("receipt journal durable listener %r raised", listener)

    def failure(self, exc: Exception) -> tuple[JournalError, dict[str, Any]]:
        path = self._journal.path
        if isinstance(exc, sqlite3.Error):
            error = store.translate(exc, "commit", path)
        elif isinstance(exc, JournalError):  # a row or the file is not what this journal wrote
            error = exc
        else:
            error = JournalError(f"receipt journal {path!r}: commit failed: {exc!r}")
            error.__cause__ = exc
        return error, {"path": path, "sqlite_error": error.sqlite_error}

    def again(self, failure: JournalError) -> JournalError:
        error = JournalError(str(failure), sqlite_error=failure.sqlite_error)
        error.__cause__ = failure
        return error

    def closed(self, number: int | None) -> JournalError:
        path = self._journal.path
        if number is None:
            return JournalError(f"receipt journal {path!r} is closed")
        return JournalError(f"receipt journal {path!r} closed before change {number} was durable")

    def runtimes(self) -> Iterable[RuntimeInternals]:
        return [attachment.access for attachment in self._journal._attachments]

    async def failed(self, error: JournalError, lost: int) -> None:
        self._journal._unjournaled += lost
        _log.error("%s", error)
