"""``Parker``: where a generation's engine waits for input, and how an admission hands over to it.

Every wake-up of the engine sits on the path from ``submit_steering`` to the
engine's next line (C8): the submitter unparks the engine in the same step as the
admission, then yields once so that the engine runs first. ``wait_for_input`` used
to park on an ``anyio.Event`` (a fresh one per wait, wrapping the backend's event,
which parks on a list or a ``ParkingLot`` built for many waiters). The engine is
one task, so it parks on the backend's bare primitive instead:

* asyncio: a future of the running loop, which ``unpark`` resolves. An anyio
  cancel scope cancels a task waiting on a pending future (``task.cancel()``), so
  a parked engine is cancelled as it was on the event.
* trio: ``trio.lowlevel.wait_task_rescheduled``, ``unpark`` reschedules the task.
  A cancellation calls the abort function, which forgets the task (no later
  ``unpark`` may reschedule it) and lets trio deliver the ``Cancelled``.

Callers check their condition before parking and after waking: ``unpark`` with no
task parked does nothing, and a parked task also wakes when cancelled.

A parker also knows the event loop and thread it was made in (``at_home``): a
runtime belongs to them (C8), and a call from anywhere else must be refused
before it changes anything. ``checkpoint()`` is the cancellable yield of an
awaited call that wakes nobody (a repeat, a refusal): a full checkpoint of the
backend (a schedule point, then a cancel point, as ``trio.lowlevel.checkpoint``),
without anyio's backend lookup.

Which backend runs is sniffio's answer (``_trio_runs``), as anyio's: trio names
itself in sniffio's thread-local while it runs a task, also as a guest on an
asyncio loop (``trio.lowlevel.start_guest_run``), where that loop is running
too; only when nobody named a library does a running asyncio loop decide.

``checkpoint_if_cancelled`` is the start of every boundary: anyio's function of that
name looks the backend up (``sniffio``) on each call, about as long as the rest of a
one-input boundary, so each parker binds its backend's own once.

Private state, fenced. Three shortcuts read state anyio and trio do not publish:
anyio's backend table (``get_async_backend``), anyio's asyncio cancel scopes
(``cancel_pending``) and trio's checkpoint message and task fields
(``_one_frame_trio_checkpoint``). Each is taken only on a version this module was
tested with (``_TESTED_ANYIO``, ``_TESTED_TRIO``: the newest minor, pinned for ``dev``
in pyproject.toml) and only when the names it reads are there; otherwise the parker
uses the public function it stands for, slower and with the same behaviour.
tests/test_parking.py forces each of those paths on both backends.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import sys
import threading
import types
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import trio.lowlevel

__all__ = ["Parker", "checkpoint"]

_TESTED_ANYIO = (4, 16)
"""The newest anyio minor whose private state this module reads (pyproject.toml's ``dev`` pin)."""
_TESTED_TRIO = (0, 35)
"""The newest trio minor whose private state this module reads (pyproject.toml's ``dev`` pin)."""


def _tested(distribution: str, newest: tuple[int, int]) -> bool:
    """True when the installed ``distribution`` is no newer than ``newest`` (major, minor).

    A newer (or unreadable) version keeps its private state unread: its public function
    serves instead. Read once per process per shortcut, never on a hot path.
    """
    try:
        major, minor = importlib.metadata.version(distribution).split(".")[:2]
        return (int(major), int(minor)) <= newest
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False


_running_loop = asyncio._get_running_loop
_InvalidStateError = asyncio.InvalidStateError
_modules = sys.modules
_get_ident = threading.get_ident
_forks = 0
"""How many times this process was forked from its parent (``os.fork`` in a child): ``at_home``'s
thread test is no answer in a forked child, where the parent's loop does not run."""


def _forked() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_forked)

_trio_checkpoint: Callable[[], Awaitable[None]] | None = None

_current_task_of: Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None] = asyncio.current_task
"""asyncio's running task of a loop. On 3.11 ``asyncio.current_task`` is Python code reading
asyncio's table of running tasks by loop (``_current_tasks.get(loop)``, one frame on the path
of every boundary); that table's own ``get`` answers the same without the frame."""
if (
    type(asyncio.current_task) is types.FunctionType
    and type(getattr(asyncio.tasks, "_current_tasks", None)) is dict
):
    _current_task_of = asyncio.tasks._current_tasks.get  # type: ignore[attr-defined]


@types.coroutine
def _asyncio_checkpoint() -> Generator[None, None, None]:
    # A bare yield: the task reschedules itself at once (what ``asyncio.sleep(0)`` does).
    # It waits on no future, so anyio delivers a pending cancel scope's cancellation
    # here (``task.cancel()``), as at any checkpoint.
    yield


_sniffio_names: Any = None
"""sniffio's thread-local (trio names itself there), once sniffio is imported."""
_sniffio_cvar: Any = None
"""sniffio's context variable (``anyio.run`` names the backend there), found with the thread-local."""


def _find_sniffio_names() -> Any:
    """sniffio's thread-local if sniffio is imported (trio imports it), else None; kept once found,
    with its context variable."""
    global _sniffio_names, _sniffio_cvar
    sniffio = _modules.get("sniffio")
    if sniffio is not None:
        _sniffio_cvar = sniffio.current_async_library_cvar
        _sniffio_names = sniffio.thread_local
    return _sniffio_names


def _trio_runs() -> bool:
    """True when trio runs the calling task; False on asyncio. Two attribute reads, mostly.

    ``sniffio.current_async_library()``'s order, without its call: sniffio's thread-local
    (trio sets it for each of its steps, as host or as guest), then its context variable
    (``anyio.run`` sets it), then asyncio's running loop. sniffio is trio's dependency,
    so when it was never imported trio is not running (and it is not imported here).
    """
    sniffio = _modules.get("sniffio")
    if sniffio is not None:
        name = sniffio.thread_local.name or sniffio.current_async_library_cvar.get()
        if name is not None:
            return bool(name == "trio")
    return _running_loop() is None


def checkpoint() -> Awaitable[None]:
    """A checkpoint of the running backend: yield once, and raise a pending cancellation.

    For an awaited call that wakes nobody (C8: every awaited submit is a checkpoint).
    Like ``anyio.lowlevel.checkpoint()`` without its backend lookup; await it at once.
    """
    global _trio_checkpoint
    if not _trio_runs():
        return _asyncio_checkpoint()
    if _trio_checkpoint is None:
        import trio.lowlevel  # only when trio runs: it is anyio's optional backend

        _trio_checkpoint = trio.lowlevel.checkpoint
    return _trio_checkpoint()


class Parker:
    """One task at a time parks here until another task unparks it (or it is cancelled).

    Make one with ``Parker.for_running_backend()`` inside the event loop that uses it.
    """

    __slots__ = ()

    @staticmethod
    def for_running_backend(reuse: Parker | None = None) -> Parker:
        """A parker for the running anyio backend (asyncio or trio).

        ``reuse``: a parker to return instead of a new one if it serves the same way (an
        asyncio parker of the running loop with no task parked on it); a generation
        reuses its runtime's previous one: an asyncio parker nobody is parked on keeps nothing
        of the generation that used it.
        """
        if (
            type(reuse) is _AsyncioParker
            and reuse._future is None
            and _running_loop() is reuse._loop
            and reuse._thread == _get_ident()  # a loop run again in another thread gets a new parker
        ):
            # A generation after another on the same asyncio loop (the common case; once per
            # agent run, with cold caches): ``_trio_runs()`` written out for a running loop,
            # which leaves sniffio's names: trio as a guest on this loop names itself there.
            names = _sniffio_names or _find_sniffio_names()
            name = None if names is None else (names.name or _sniffio_cvar.get())
            if name is None or name != "trio":
                return reuse
        if _trio_runs():
            return _TrioParker()
        loop = asyncio.get_running_loop()
        if (
            type(reuse) is _AsyncioParker
            and reuse._loop is loop
            and reuse._future is None
            and reuse._thread == _get_ident()
        ):
            return reuse
        return _AsyncioParker(loop)

    @property
    def occupied(self) -> bool:
        """True from a task's call of ``park()`` (or ``park_future()``) until that call returns,
        woken or cancelled; on asyncio, until it is woken (``unpark`` frees the spot at once)."""
        raise NotImplementedError

    def at_home(self) -> bool:
        """True when called from the event loop (and so the thread) this parker was made in. O(1).

        asyncio: the running loop is this parker's (another thread has another loop or
        none). trio: the calling thread is this parker's (one thread runs one trio loop).
        """
        raise NotImplementedError

    @property
    def waiting(self) -> bool:
        """True while a task is parked here and nothing has woken it yet."""
        raise NotImplementedError

    async def park(self) -> None:
        """Suspend the calling task until ``unpark()``: a checkpoint, cancellable.

        Raises ``RuntimeError`` if another task is already parked here.
        """
        raise NotImplementedError

    def park_future(self) -> Awaitable[None] | None:
        """``park()`` without its coroutine, where the backend allows: the future to await at
        once, or None (await ``park()`` instead). ``unpark()`` resolves it and frees the spot;
        a caller whose await raises (cancelled) must ``abandon`` it. asyncio only: the engine's
        wake (``wake_latency``) then resumes one coroutine less.
        """
        return None

    def abandon(self, future: Awaitable[None]) -> None:
        """The await of ``park_future()``'s future raised: free the spot, if it is still its."""

    def unpark(self) -> bool:
        """Wake the parked task, if any; True if one was woken. Never blocks."""
        raise NotImplementedError

    def yield_shielded(self) -> Awaitable[None]:
        """Yield once, shielded from cancellation, letting a task just unparked here run first.

        Like ``anyio.lowlevel.cancel_shielded_checkpoint()``: a cancellation of the
        caller is not delivered here but at its next checkpoint. Costs about a plain
        checkpoint.
        """
        raise NotImplementedError

    def checkpoint(self) -> Awaitable[None]:
        """``checkpoint()`` on this parker's backend, without looking the backend up; await it at once.

        Only from the parker's own loop (``at_home``): the awaited form of a submit
        that woke nobody (a repeat, a refusal) while a generation runs.
        """
        raise NotImplementedError

    def hand_over(self) -> Awaitable[None]:
        """``unpark()`` then ``yield_shielded()`` in one call; await the result at once.

        The path from a submit to the engine it wakes: written out in each backend's
        parker rather than as two calls, since every step on it counts.
        """
        raise NotImplementedError

    def cancel_pending(self) -> bool:
        """False when no cancellation is pending for the calling task, so that
        ``checkpoint_if_cancelled()`` would return at once and need not be awaited;
        True when it must be awaited (it raises the cancellation if there is one).

        The start of every boundary asks this first: on asyncio it is anyio's own test,
        without building an awaitable; on trio it is always True (trio's function is
        public and cheap, its test is not).
        """
        raise NotImplementedError

    def checkpoint_if_cancelled(self) -> Awaitable[None]:
        """``anyio.lowlevel.checkpoint_if_cancelled()`` without its backend lookup.

        Raises the backend's cancellation if an enclosing cancel scope was cancelled;
        otherwise returns without letting another task run. Await the result at once.
        """
        raise NotImplementedError


_checkpoints_if_cancelled: dict[str, Callable[[], Awaitable[None]]] = {}
"""Each backend's, looked up once per process: a generation is entered per agent run."""


def _backend_checkpoint_if_cancelled(name: str) -> Callable[[], Awaitable[None]]:
    """The backend's own ``checkpoint_if_cancelled``, the one ``anyio.lowlevel`` looks up per call."""
    found = _checkpoints_if_cancelled.get(name)
    if found is None:
        found = _private_checkpoint_if_cancelled(name)
        if found is None:  # another anyio: the public function, which looks the backend up per call
            import anyio.lowlevel

            found = anyio.lowlevel.checkpoint_if_cancelled
        _checkpoints_if_cancelled[name] = found
    return found


def _private_checkpoint_if_cancelled(name: str) -> Callable[[], Awaitable[None]] | None:
    """The backend's function out of anyio's private backend table, or None on another anyio."""
    if not _tested("anyio", _TESTED_ANYIO):
        return None
    try:
        from anyio._core._eventloop import get_async_backend
    except ImportError:  # anyio moved it
        return None
    found = getattr(get_async_backend(name), "checkpoint_if_cancelled", None)
    return found if callable(found) else None


def _occupied() -> RuntimeError:
    return RuntimeError("another task is already parked here")


def _anyio_asyncio_task_states() -> Any:
    """anyio's asyncio table of task -> its cancel scopes, if it has the shape this module reads.

    ``_AsyncioParker.checkpoint_if_cancelled`` walks it as anyio's own function does, but
    without that function's per-call lookups; with any other shape (another anyio), the
    parker calls anyio's function instead.
    """
    if not _tested("anyio", _TESTED_ANYIO):
        return None
    try:
        from anyio._backends._asyncio import CancelScope, TaskState, _task_states
    except ImportError:  # another anyio
        return None
    probe = CancelScope()
    if not all(hasattr(probe, name) for name in ("_cancel_called", "_shield", "_parent_scope")):
        return None  # another anyio
    if "cancel_scope" not in getattr(TaskState, "__slots__", ()) or not callable(
        getattr(_task_states, "get", None)
    ):
        return None  # another anyio
    return _task_states


_TASK_STATES: Any = None
_TASK_STATES_READ = False


class _AsyncioParker(Parker):
    __slots__ = (
        "_done",
        "_forks",
        "_future",
        "_loop",
        "_state",
        "_task",
        "_task_states",
        "_thread",
        "checkpoint_if_cancelled",
    )

    def at_home(self) -> bool:
        if _get_ident() == self._thread and _forks == self._forks:
            # This loop's thread, where no other asyncio loop can run while this one does (asyncio
            # refuses): home, unless trio runs this step, as a guest on this loop or on its own
            # after this loop finished. ``_running_loop()`` would say as much, but it pays a
            # ``getpid()`` (150-250 ns here) on each call. A loop runs a generation in the thread
            # that entered it (a parker is made or reused per generation in the running loop).
            # A trio that was never imported runs no step anywhere: most asyncio hosts never
            # import it, and sniffio's thread-local costs more to read than a lookup in
            # ``sys.modules`` (on the path of every submit, ``wake_latency``).
            if "trio" not in _modules:
                return True
            names = _sniffio_names or _find_sniffio_names()
            if names is None or names.name != "trio":
                return True
        if _running_loop() is self._loop:
            # trio as a guest on this loop (``start_guest_run``) is another event loop: its
            # tasks see this loop running, but trio names itself in sniffio's thread-local.
            names = _sniffio_names or _find_sniffio_names()
            return names is None or names.name != "trio"
        # A loop that stopped running (its ``asyncio.run`` returned) is no one's home any more.
        return not self._loop.is_running()

    @types.coroutine
    def checkpoint(self) -> Generator[None, None, None]:
        yield  # as ``_asyncio_checkpoint``, one call less: this is the awaited repeat's yield

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        global _TASK_STATES, _TASK_STATES_READ
        self._loop = loop
        self._thread = _get_ident()  # made in the running loop, so in its thread
        self._forks = _forks
        if not _TASK_STATES_READ:
            _TASK_STATES, _TASK_STATES_READ = _anyio_asyncio_task_states(), True
        self._task_states = _TASK_STATES
        self._task: asyncio.Task[Any] | None = None
        self._state: Any = None
        """anyio's state of ``_task`` (one object for a task's whole life), read once."""
        # anyio's asyncio backend: its cancel scopes are anyio's own, so they are walked.
        if self._task_states is None:  # another anyio: its own function, looked up once
            self.checkpoint_if_cancelled = _backend_checkpoint_if_cancelled("asyncio")  # type: ignore[method-assign]
        else:
            self.checkpoint_if_cancelled = self._checkpoint_if_cancelled  # type: ignore[method-assign]
        self._future: asyncio.Future[None] | None = None
        self._done: asyncio.Future[None] = loop.create_future()
        """Resolved once and shared by every ``yield_shielded``: a task awaiting a done
        future schedules its own wake-up and leaves nothing on it, so one serves all."""
        self._done.set_result(None)

    @property
    def occupied(self) -> bool:
        return self._future is not None

    @property
    def waiting(self) -> bool:
        future = self._future
        return future is not None and not future.done()

    async def park(self) -> None:
        if self._future is not None:
            raise _occupied()
        self._future = future = self._loop.create_future()
        try:
            await future
        finally:
            if self._future is future:  # not freed by ``unpark`` (cancelled), nor taken since
                self._future = None

    def park_future(self) -> asyncio.Future[None]:
        if self._future is not None:
            raise _occupied()
        self._future = future = self._loop.create_future()
        return future

    def abandon(self, future: Awaitable[None]) -> None:
        if self._future is future:
            self._future = None

    def unpark(self) -> bool:
        future = self._future
        if future is None or future.done():
            return False
        future.set_result(None)  # schedules the parked task's wake-up
        self._future = None  # woken: the spot is free (the woken task no longer waits here)
        return True

    def cancel_pending(self) -> bool:
        # What anyio's asyncio ``checkpoint_if_cancelled`` tests (walk the task's cancel
        # scopes from the innermost: a cancelled one means a checkpoint, which raises; a
        # shielded one ends the walk), with the task's state read once per task: anyio
        # makes it when the task starts (or enters its first scope) and drops it when the
        # task ends, so a live task keeps one.
        task_states = self._task_states
        if task_states is None:  # another anyio: let its own function decide
            return True
        task = _current_task_of(self._loop)
        state = self._state if task is self._task else None
        if state is None:
            state = task_states.get(task)
            if state is None:
                return False
            self._task, self._state = task, state
        scope = state.cancel_scope
        while scope is not None:
            if scope._cancel_called:
                return True
            if scope._shield:
                break
            scope = scope._parent_scope
        return False

    def _checkpoint_if_cancelled(self) -> Awaitable[None]:
        if self.cancel_pending():  # the rare path: anyio's own, which yields until it raises
            return _backend_checkpoint_if_cancelled("asyncio")()
        return self._done  # awaiting a done future returns at once, without suspending

    @types.coroutine
    def yield_shielded(self) -> Generator[asyncio.Future[None], None, None]:
        # Suspends the task on a future that is already done: its wake-up is scheduled
        # at once, behind the callbacks scheduled before it (asyncio runs them first in,
        # first out), so behind the task just unparked. anyio never delivers a cancel
        # scope's cancellation to a task whose awaited future is done (that would lose
        # the result), so the cancellation reaches the caller at its next checkpoint,
        # as with anyio's shielded checkpoint but without the CancelScope it enters.
        # A bare ``task.cancel()`` is still delivered here, as asyncio requires.
        future = self._done
        future._asyncio_future_blocking = True  # what ``await future`` sets before it suspends
        yield future

    @types.coroutine
    def hand_over(self) -> Generator[asyncio.Future[None], None, None]:
        parked = self._future
        if parked is not None:
            try:
                parked.set_result(None)  # ``unpark`` without its ``done()`` test, which this is
            except _InvalidStateError:  # cancelled, its waiter not resumed yet: it frees the spot
                pass
            else:
                self._future = None  # as ``unpark``: woken, the spot is free
        done = self._done
        done._asyncio_future_blocking = True
        yield done


class _TrioParker(Parker):
    __slots__ = (
        "_checkpoint",
        "_current_task",
        "_follower",
        "_follower_resumes",
        "_occupied",
        "_outcome",
        "_reschedule",
        "_resumes",
        "_run_context",
        "_run_finished",
        "_sniffio",
        "_task",
        "_thread",
        "_token",
        "_wait",
        "_wait_followed",
        "checkpoint",
        "checkpoint_if_cancelled",
    )

    def at_home(self) -> bool:
        if _get_ident() == self._thread and self._sniffio.name == "trio":
            return True
        # Another thread, or this thread outside trio's steps (the asyncio loop hosting
        # trio as a guest): home only if this parker's trio run is over (no one's home any
        # more). Asking schedules a no-op in a live run; only a misuse takes this path.
        try:
            self._token.run_sync_soon(_nothing)
        except self._run_finished:
            return True
        return False

    def __init__(self) -> None:
        import outcome  # trio's own dependency
        import trio.lowlevel  # only when trio runs: it is anyio's optional backend

        self._outcome = outcome.Value
        # What the parked task and its follower are resumed with. ``reschedule`` would
        # build a fresh ``Value(None)`` on the spot (in the waker's step or in the woken
        # task's, before its first line; docs/performance.md); ``park()`` builds both ahead, while
        # nobody waits on it. An outcome is used once: each park builds its own (at most
        # one wake and one follower per park), so these first two are never used.
        self._resumes = self._outcome(None)
        self._follower_resumes = self._outcome(None)
        self._occupied = False
        self._thread = threading.get_ident()
        self._sniffio = sys.modules["sniffio"].thread_local  # trio imported it, and names itself there
        self._token = trio.lowlevel.current_trio_token()
        self._run_finished = trio.RunFinishedError
        self._task: trio.lowlevel.Task | None = None
        """The parked task, until it is unparked or its park is aborted."""
        self._follower: trio.lowlevel.Task | None = None
        """A task in ``yield_shielded`` waiting for the unparked task to run first."""
        self._current_task = trio.lowlevel.current_task
        self._reschedule = trio.lowlevel.reschedule
        self._checkpoint = trio.lowlevel.cancel_shielded_checkpoint
        # trio's own full checkpoint: its yield first, then the cancel test, so that a
        # deadline the scheduler processes in that yield, or a scope another task
        # cancels meanwhile, raises here. Reading the cancel status before yielding
        # (cheaper by a frame) would miss both, and trio.testing would not count it.
        # ``_one_frame_trio_checkpoint`` is that function in one frame instead of three, where
        # this trio has the fields it reads; trio's own otherwise.
        one_frame = _one_frame_trio_checkpoint()
        self.checkpoint = one_frame or trio.lowlevel.checkpoint  # type: ignore[method-assign]
        # Where trio keeps the running task (what ``trio.lowlevel.current_task()`` reads), for
        # ``cancel_pending``'s test: only where the fields that test reads were checked.
        self._run_context: Any = _TRIO_RUN_CONTEXT if one_frame is not None else None
        # What a task waits with, parked (``_abort`` lets trio cancel it) or following a woken
        # task (``_refuse_abort``): ``wait_task_rescheduled(abort)``, where this trio was checked
        # in one frame instead of three (its coroutine, the message's ``__init__``, the yield).
        self._wait = _trio_wait(self._abort, one_frame is not None)
        self._wait_followed = _trio_wait(_refuse_abort, one_frame is not None)
        # anyio's trio backend calls trio's own, which is public: bind that.
        self.checkpoint_if_cancelled = trio.lowlevel.checkpoint_if_cancelled  # type: ignore[method-assign]

    def cancel_pending(self) -> bool:
        # trio's ``checkpoint_if_cancelled`` without its two frames: the same test of the task's
        # cancel status and of a KeyboardInterrupt pending for the main task, and the same count
        # of a cancel point when it passes. A cancellation: True, and trio's function raises it.
        context = self._run_context
        if context is None:  # another trio: its own function decides
            return True
        task = context.task
        if task._cancel_status.effectively_cancelled or (
            task is task._runner.main_task and task._runner.ki_pending
        ):
            return True
        task._cancel_points += 1  # as trio's function counts the cancel point it made
        return False

    @property
    def occupied(self) -> bool:
        return self._occupied

    @property
    def waiting(self) -> bool:
        return self._task is not None

    async def park(self) -> None:
        if self._occupied:
            raise _occupied()
        self._occupied = True
        context = self._run_context  # ``current_task()``'s read, without its frame
        self._task = self._current_task() if context is None else context.task
        self._resumes = self._outcome(None)
        self._follower_resumes = self._outcome(None)
        try:
            await self._wait()
        finally:
            self._occupied = False
            follower, self._follower = self._follower, None
            if follower is not None:
                self._reschedule(follower, self._follower_resumes)

    def _abort(self, raise_cancel: object) -> trio.lowlevel.Abort:
        import trio.lowlevel

        self._task = None  # trio reschedules it itself, with the Cancelled
        return trio.lowlevel.Abort.SUCCEEDED

    def unpark(self) -> bool:
        task = self._task
        if task is None:
            return False
        self._task = None  # a task is rescheduled exactly once
        self._reschedule(task, self._resumes)
        return True

    def yield_shielded(self) -> Awaitable[None]:
        # Returns trio's own awaitable rather than wrapping it in a coroutine of its
        # own: one frame less on the path to the engine. The caller awaits it at once.
        if self._occupied and self._task is None and self._follower is None:
            # The parked task was unparked and has not run yet. trio runs the tasks of
            # one batch in either order, so rather than joining its batch, wait for it
            # to reschedule this task as it leaves ``park()``.
            context = self._run_context  # ``current_task()``'s read, without its frame
            self._follower = self._current_task() if context is None else context.task
            return self._wait_followed()
        return self._checkpoint()

    def hand_over(self) -> Awaitable[None]:
        task = self._task
        if task is None:  # nobody parked, or woken by another task: as yield_shielded()
            return self.yield_shielded()
        self._task = None
        self._reschedule(task, self._resumes)
        # As yield_shielded() then finds it (a follower only ever waits on a woken task,
        # so there is none yet): follow the task just woken.
        context = self._run_context  # ``current_task()``'s read, without its frame
        self._follower = self._current_task() if context is None else context.task
        return self._wait_followed()


def _nothing() -> None:
    """What ``_TrioParker.at_home`` schedules to learn whether its trio run is still alive."""


_TRIO_CHECKPOINT: Any = None
_TRIO_RUN_CONTEXT: Any = None
"""trio's thread-local run context (its ``task`` is ``current_task()``), once checked."""
_TRIO_CHECKPOINT_READ = False


def _one_frame_trio_checkpoint() -> Callable[[], Awaitable[None]] | None:
    """``trio.lowlevel.checkpoint`` as one generator-based coroutine, or None for another trio.

    trio's function awaits ``cancel_shielded_checkpoint()``, which awaits a yield of
    trio's ``CancelShieldedCheckpoint`` message: three frames on the path of every awaited
    repeat or refusal (``submit_repeat``). This yields the message itself, then makes the
    same test trio's makes afterwards (the task's cancel status, a pending
    KeyboardInterrupt of the main task) and counts the cancel point as trio's does, so
    ``trio.testing.assert_checkpoints`` sees a checkpoint. When the test finds a
    cancellation it awaits trio's own checkpoint, which delivers it. Called from a trio
    task (the parker is made in one), once per process: the fields are checked on it.
    """
    global _TRIO_CHECKPOINT, _TRIO_CHECKPOINT_READ
    if _TRIO_CHECKPOINT_READ:
        return _TRIO_CHECKPOINT  # type: ignore[no-any-return]
    _TRIO_CHECKPOINT_READ = True
    import trio.lowlevel

    if not _tested("trio", _TESTED_TRIO):
        return None
    try:
        import outcome  # trio's own dependency
        from trio._core._run import GLOBAL_RUN_CONTEXT, CancelShieldedCheckpoint  # type: ignore[attr-defined]
    except ImportError:  # another trio
        return None
    task: Any = trio.lowlevel.current_task()
    if getattr(GLOBAL_RUN_CONTEXT, "task", None) is not task:
        return None  # another trio: it keeps the running task elsewhere
    runner = getattr(task, "_runner", None)
    status = getattr(task, "_cancel_status", None)
    if not (
        type(getattr(task, "_cancel_points", None)) is int
        and type(getattr(status, "effectively_cancelled", None)) is bool
        and hasattr(runner, "main_task")
        and type(getattr(runner, "ki_pending", None)) is bool
    ):
        return None  # another trio
    full_checkpoint = trio.lowlevel.checkpoint
    value = outcome.Value
    run_context = GLOBAL_RUN_CONTEXT

    @types.coroutine
    def checkpoint() -> Generator[Any, Any, None]:
        resumed = yield CancelShieldedCheckpoint
        if type(resumed) is not value:  # a Value(None) is the common answer: nothing to unwrap
            resumed.unwrap()
        task = run_context.task  # what ``current_task()`` reads, without its frame
        task._cancel_points += 1
        if task._cancel_status.effectively_cancelled or (
            task is task._runner.main_task and task._runner.ki_pending
        ):
            yield from full_checkpoint().__await__()  # raises the cancellation, trio's way

    global _TRIO_RUN_CONTEXT
    _TRIO_CHECKPOINT, _TRIO_RUN_CONTEXT = checkpoint, run_context
    return checkpoint


def _trio_wait(abort: Callable[[Any], Any], checked: bool) -> Callable[[], Awaitable[Any]]:
    """``lambda: trio.lowlevel.wait_task_rescheduled(abort)`` without the lambda's frame; with
    ``checked`` (this trio's private layout was checked, ``_one_frame_trio_checkpoint``), a
    generator-based coroutine that yields trio's ``WaitTaskRescheduled`` message, made once,
    itself: what trio's function does in three frames (its coroutine, the message's
    ``__init__``, ``_async_yield``), on the path of every wake (``wake_latency``)."""
    import functools

    import trio.lowlevel

    if checked:
        try:
            from trio._core._traps import WaitTaskRescheduled
        except ImportError:  # another trio
            pass
        else:
            import outcome  # trio's own dependency

            message = WaitTaskRescheduled(abort)
            value = outcome.Value

            @types.coroutine
            def wait() -> Generator[Any, Any, Any]:
                resumed = yield message
                # a Value is what the parkers resume with: its value without ``unwrap()``'s two
                # frames (an outcome is used once: each is built for one resume, see ``park``)
                return resumed.value if type(resumed) is value else resumed.unwrap()

            return wait
    return functools.partial(trio.lowlevel.wait_task_rescheduled, abort)


def _refuse_abort(raise_cancel: object) -> trio.lowlevel.Abort:
    """Shielded: a cancellation waits for the caller's next checkpoint."""
    import trio.lowlevel

    return trio.lowlevel.Abort.FAILED
