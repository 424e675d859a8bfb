"""``LiveRuntime`` and ``Generation``: the anyio shell around ``SteeringCore``.

This module only parks and wakes tasks. Every decision (admit, refuse, repeat,
apply, hold, unknown, continue, close, a generation's id, how it ended, what the
write barrier's return means) is the core's, taken synchronously; the shell then
does the follow-up work: wake the engine, await the loop's writer, publish. It
must never put an await between a decision and the state change it implies (C8,
C16), and it never starts a task of its own.

``RuntimeInternals`` (at the end) is the one door from a wing (the journal, the
fleet's owner, the ACP sessions) into a runtime beyond its public API: no wing
touches ``LiveRuntime._core`` or the core's attributes.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time
import uuid
import warnings
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import CoroutineType, FunctionType, MethodType, TracebackType
from typing import Any, Final, Protocol

import anyio
import anyio.lowlevel
import attrs

from ._core import (
    CONTINUED_WARNING,
    DEFAULT_GENERATION_ID_LIMIT,
    DEFAULT_IDENTITY_LIMIT,
    DEFAULT_MAX_TEXT_CHARS,
    DELIVERY,
    OPEN,
    CoreStatistics,
    Exit,
    GenerationState,
    InputRecord,
    SteeringCore,
    exit_of,
)
from ._errors import (
    CheckpointDecisionWarning,
    GenerationStateError,
    GenerationStopped,
    InvariantError,
    RuntimeClosedError,
    UnknownInputError,
)
from ._events import DEFAULT_LOG_SIZE, DEFAULT_SUBSCRIPTION_BUFFER, Event, EventHub, Listener, Subscription
from ._parking import Parker, checkpoint
from ._rules import FOLLOW_UP_DELIVERY
from ._types import Disposition, HoldReason, Input, Receipt, StopReason
from ._validate import input_problem, plain_str

__all__ = [
    "AcceptedInput",
    "Generation",
    "LiveRuntime",
    "RuntimeInternals",
    "RuntimeStatistics",
    "WriteBarrier",
    "Writer",
    "internals",
]

#: A context writer: called once per input, in admission order, with the input and
#: the metadata its context entry must carry. May be sync or async. When it returns,
#: the input is applied; if it raises or is cancelled, the input is unknown. A writer
#: that cannot be called with those two arguments is refused (``TypeError``) before
#: the boundary takes any input.
Writer = Callable[[Input, Mapping[str, Any]], Awaitable[None] | None]

#: The events after which an input is final (C20): what ``wait_final`` waits for.
_FINAL_EVENTS: Final = frozenset({"steering.applied", "steering.held", "steering.unknown"})

#: An optional write-ahead hook (see ``LiveRuntime.set_write_barrier``): awaited with the
#: id of the generation it is written into and the one input about to be handed to the writer
#: (as a 1-tuple).
#: If it raises or is cancelled, the input was not handed: it stays pending (C15).
WriteBarrier = Callable[[str, Sequence[Input]], Awaitable[None]]


@attrs.frozen
class RuntimeStatistics(CoreStatistics):
    """A snapshot of a runtime's counters (core counters plus event fan-out)."""

    events_logged: int
    """Events currently in the bounded recent-event log."""
    events_dropped: int
    """Events that fell out of the recent-event log because it was full."""
    subscribers: int
    listener_errors: int
    """Listener calls that raised (logged, never propagated into the runtime)."""


class LiveRuntime:
    """One live session's steering runtime. Create one per session; close it with ``aclose()``.

    >>> runtime = LiveRuntime()
    >>> runtime.capability["mode"]
    'request_boundary'
    >>> runtime.generation is None
    True

    Host side: ``capability``, ``generation``, ``submit_steering``, ``receipt``,
    ``subscribe``/``add_listener``/``recent_events`` and ``statistics``.
    Engine side: ``open_generation()``, see ``Generation``.
    """

    def __init__(
        self,
        *,
        session_id: str | None = None,
        identity_limit: int = DEFAULT_IDENTITY_LIMIT,
        max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
        boundary_delivery: bool = True,
        event_log_size: int = DEFAULT_LOG_SIZE,
        clock: Callable[[], float] = time.time,
        generation_prefix: str | None = None,
        generation_id_limit: int = DEFAULT_GENERATION_ID_LIMIT,
        steering_mode: str = "all",
        follow_up_mode: str = "all",
    ) -> None:
        """Configure a runtime.

        ``identity_limit``: accepted identities retained (C11). ``max_text_chars``: the
        longest steer text admitted (C7). ``boundary_delivery=False`` makes the
        capability ``unavailable`` (for a provider that steers natively, C1).
        ``event_log_size``: events kept by ``recent_events()``. ``clock``: the
        ``time`` of events, seconds since the epoch. ``generation_prefix``: what the
        ids ``open_generation()`` issues start with (then 1, 2, ...); by default
        ``gen-`` and 32 random hex digits, so that no other runtime issues the same
        ids (pick your own only if it is as unique, e.g. a session id: ids of the
        caller's choosing may not start with it). ``generation_id_limit``: how many
        generations may run with an id of the caller's choosing
        (``open_generation(id)``), each remembered so that none runs twice (C18);
        past it ``open_generation(id)`` raises ``ValueError``. Issued ids cost nothing.
        ``steering_mode`` and ``follow_up_mode`` (C30): ``"all"`` (default), a boundary writes
        every pending input of that kind; ``"one-at-a-time"``, only the oldest (the rest stay
        pending, in order). ``ValueError`` for another string, ``TypeError`` for a non-string.
        """
        if session_id is None:
            session_id = f"session-{uuid.uuid4().hex[:12]}"
        if type(boundary_delivery) is not bool:
            raise TypeError("boundary_delivery must be a bool")
        if not callable(clock):
            raise TypeError(f"clock must be callable (as time.time), got {type(clock).__name__}")
        self._hub = EventHub(event_log_size)
        self._core = SteeringCore(
            session_id=session_id,
            sink=self._hub.publish,
            clock=clock,
            identity_limit=identity_limit,
            max_text_chars=max_text_chars,
            boundary_delivery=boundary_delivery,
            # Random per runtime: an anchor kept from another runtime's generation (before a
            # restart, say) never names one of this runtime's.
            generation_prefix=(
                f"gen-{os.urandom(16).hex()}-" if generation_prefix is None else generation_prefix
            ),
            generation_id_limit=generation_id_limit,
            steering_mode=steering_mode,
            follow_up_mode=follow_up_mode,
        )
        self._settle = self._settle_at_home
        """What the hub calls before it shows its log or changes its consumers, while a
        generation runs (the only time an admission's acceptance can be owed): entering
        a generation installs it on the hub and leaving removes it, so the hub holds
        the core (which holds the hub) only while a task holds the generation anyway."""
        self._active: Generation | None = None
        self._home: Parker | None = None
        """The parker of the latest generation entered: the event loop and thread this
        runtime belongs to (C8), checked before any call that could change its state."""
        self._write_barrier: WriteBarrier | None = None
        self._final_waiters: dict[str, list[anyio.Event]] = {}
        """``wait_final`` callers by input id; a listener wakes them while there are any."""
        self._remove_final_listener: Callable[[], None] | None = None

    # -- host side ------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._core.session_id

    @property
    def capability(self) -> dict[str, Any]:
        """The ``live.steering`` capability (C1), a fresh dict on each access."""
        return {
            "version": 1,
            "mode": self._core.mode,
            "cancellable": False,
            "submit": self.submit_steering,
        }

    @property
    def generation(self) -> dict[str, Any] | None:
        """``None`` while no generation runs, else ``{"id", "phase", "pending", "steering_mode",
        "follow_up_mode"}`` (C2, C30)."""
        core = self._core
        return core.generation_view(settle=core._owed is None or not self._elsewhere())

    def _elsewhere(self) -> bool:
        """True for a call from another thread or event loop than the runtime's. A read made
        there publishes nothing (an owed acceptance stays for the runtime's loop, C8): its
        listeners run in that loop only."""
        home = self._home
        return home is not None and not home.at_home()

    def _settle_at_home(self) -> None:
        if not self._elsewhere():
            self._core.settle()

    @property
    def pending_follow_ups(self) -> int:
        """Follow-ups accepted and not yet in a boundary queue (C29): those of the running
        generation, for after it, and those of the generation that finished last, waiting for
        the next one. A loop that finds any after a generation finished starts the next one
        (no new prompt needed: its first boundary writes them). O(1)."""
        core = self._core
        if core._owed is not None and not self._elsewhere():
            core.settle()  # a read that shows an admission finds its acceptance out first
        return core.follow_ups_pending

    async def submit_steering(self, input: Input, generation_id: str) -> Receipt:
        """Submit a steer anchored to a generation; the receipt says what happened (C3-C12).

        >>> receipt = await runtime.submit_steering(           # doctest: +SKIP
        ...     Input("steer", "Use the corrected path", id="fix-1"), runtime.generation["id"])

        Admission is decided before the first await, so cancelling this call never
        un-admits an input. The call is a checkpoint (C8): it yields exactly once on
        every path. After an admission the yield is shielded from cancellation, so
        that the woken engine runs first and the caller still gets its receipt (a
        cancellation reaches it at its next checkpoint). ``steering.accepted`` is
        published when the call resumes, or earlier if the engine publishes anything
        first: always before the call returns, and before any later event. After a
        repeat (C10) or a refusal, which change nothing, the yield is an ordinary
        checkpoint: a pending cancellation is raised there, so a host polling with
        repeats lets the engine run and its own timeout fire. To wait for an
        outcome, ``await runtime.wait_final(input_id)``. Refusals are receipts;
        wrong argument types raise ``TypeError``; a call from another thread or event
        loop, or from inside an event listener, raises ``RuntimeError`` before
        anything is decided.
        """
        core = self._core
        gen = self._active
        if gen is None:  # nothing can be admitted: a refusal or a repeat
            home = self._home
            if (home is not None and not home.at_home()) or self._hub.dispatching:
                raise self._misuse("submit_steering")
            receipt = core.decide(input, generation_id)
            assert receipt is not None
            await checkpoint()
            return receipt
        # ``gen._parker``: entering a generation made its parker the runtime's home, and the
        # runtime object is at hand already (one object less to read on every submit)
        parker = self._home
        assert parker is not None
        if not parker.at_home() or self._hub.dispatching:
            raise self._misuse("submit_steering")
        receipt = core.decide(input, generation_id)
        if receipt is None:  # admitted
            try:
                await parker.hand_over()  # wakes the engine, which runs first
            finally:  # also when asyncio's task.cancel() lands on the yield
                core.settle()  # steering.accepted, unless something published it first
            return core.queued_receipt(input.id)
        await parker.checkpoint()
        return receipt

    def submit_steering_nowait(self, input: Input, generation_id: str) -> Receipt:
        """``submit_steering`` without the yield, for synchronous callers. O(1) plus validation.

        It never yields. It too must be called from the runtime's own event loop and
        thread, and not from inside an event listener (``RuntimeError`` otherwise,
        before anything is decided): from another thread, go through the loop with
        ``anyio.from_thread`` (docs/hosts.md).
        """
        home = self._home
        if (home is not None and not home.at_home()) or self._hub.dispatching:
            raise self._misuse("submit_steering_nowait")
        receipt = self._core.decide(input, generation_id)
        if receipt is None:  # admitted
            assert self._active is not None
            self._active._wake()
            self._core.settle()
            return self._core.queued_receipt(input.id)
        return receipt

    def _misuse(self, call: str) -> RuntimeError:
        """The error of a call made where this runtime cannot serve it (C8); nothing changed."""
        if self._hub.dispatching:
            return RuntimeError(
                f"{call}() called from inside an event listener: a listener must not call back into "
                "the runtime (the stream would be reordered); call it from a task instead"
            )
        return RuntimeError(
            f"{call}() called from another thread or event loop than the runtime's: a runtime belongs "
            "to the event loop it runs in; from a thread use anyio.from_thread.run() or a "
            "BlockingPortal (docs/hosts.md)"
        )

    def _guard(self, call: str) -> None:
        home = self._home
        if (home is not None and not home.at_home()) or self._hub.dispatching:
            raise self._misuse(call)

    async def wait_final(self, input_id: str) -> Receipt:
        """Wait until the accepted input ``input_id`` is final; return its receipt (C20).

        >>> receipt = await runtime.wait_final("fix-1")          # doctest: +SKIP
        >>> final = (Disposition.APPLIED, Disposition.HELD, Disposition.UNKNOWN)
        >>> receipt.disposition in final                         # doctest: +SKIP
        True

        Returns at once (after one checkpoint) for an input already applied, held or
        unknown, also after ``aclose()``. A queued input becomes final at the latest
        when its generation ends. Put a deadline around it with the caller's own
        cancel scope (``anyio.fail_after``, ``move_on_after``): cancelling the wait
        changes nothing. ``UnknownInputError`` (a ``LookupError``) for an id this
        runtime never accepted (a refused one included), which can never become final;
        ``TypeError`` for a non-string id. O(1) per waiter.
        """
        input_id = plain_str(input_id, "input_id")
        self._guard("wait_final")
        receipt = self._core.receipt(input_id)
        if receipt is None:
            raise UnknownInputError(f"input {input_id!r} was never accepted by this runtime")
        if receipt.disposition is not Disposition.QUEUED:
            await checkpoint()
            return receipt
        woken = anyio.Event()
        waiters = self._final_waiters.setdefault(input_id, [])
        waiters.append(woken)
        if self._remove_final_listener is None:
            self._remove_final_listener = self._hub.add_listener(self._wake_final)
        try:
            await woken.wait()
        finally:
            waiters.remove(woken)
            if not waiters:
                del self._final_waiters[input_id]
                if not self._final_waiters and self._remove_final_listener is not None:
                    self._remove_final_listener()
                    self._remove_final_listener = None
        receipt = self._core.receipt(input_id)
        if receipt is None or receipt.disposition is Disposition.QUEUED:
            raise InvariantError(f"input {input_id!r} was announced final but is {receipt}")
        return receipt

    def _wake_final(self, event: Event) -> None:
        """The listener ``wait_final`` installs: wake the waiters of an input that became final."""
        if event["type"] in _FINAL_EVENTS:
            waiters = self._final_waiters.get(event["input_id"])
            if waiters:
                for woken in waiters:
                    woken.set()

    def stop(self, generation_id: str, reason: StopReason = StopReason.GENERATION_STOPPED) -> bool:
        """Stop the running generation ``generation_id`` without its engine's handle (C17).

        >>> runtime.stop(runtime.generation["id"])                # doctest: +SKIP
        True

        The same as the engine's ``gen.stop(reason)`` made from another task: admission
        closes, pending input is held (``reason``), a write already handed to the
        writer completes, a parked ``wait_for_input`` returns, the engine's next
        boundary ends its loop, and leaving the block publishes ``generation.stopped``.
        Returns True if this call stopped it; False, changing nothing, if
        ``generation_id`` is not the running generation (it ended, or never ran: a host
        racing the end of a generation needs no special case) or its admission had
        already closed (stopped, finishing, or the runtime closed: the first ending
        stands). ``TypeError`` for a non-string id or a reason that is not a
        ``StopReason``; ``RuntimeError`` from another thread or loop, or a listener.
        """
        generation_id = plain_str(generation_id, "generation_id")
        if type(reason) is not StopReason:
            raise TypeError(f"reason must be a StopReason, got {reason!r}")
        self._guard("stop")
        active = self._active
        if active is None or active.id != generation_id:
            return False
        return active.stop(reason)  # the core's answer: did this call close admission

    def receipt(self, input_id: str) -> Receipt | None:
        """The current receipt of an accepted input id, or ``None``. O(1). ``TypeError`` for a
        non-string id. From another thread it is a plain read (it publishes nothing)."""
        input_id = plain_str(input_id, "input_id")
        core = self._core
        return core.receipt(input_id, settle=core._owed is None or not self._elsewhere())

    def subscribe(self, max_buffer: int = DEFAULT_SUBSCRIPTION_BUFFER) -> Subscription:
        """Receive every event published from now on, as an async iterator (C21)."""
        return self._hub.subscribe(max_buffer)

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event)`` synchronously for every event; returns a remover.

        A listener must be quick and must not call back into the runtime. One that
        raises is logged and counted, and the runtime carries on. ``TypeError``, attaching
        nothing, for a listener that is not callable.
        """
        return self._hub.add_listener(listener)

    def recent_events(self) -> list[Event]:
        """The bounded log of recent events, oldest first."""
        return self._hub.events()

    def statistics(self) -> RuntimeStatistics:
        """A frozen snapshot of the runtime's counters. A pure read: it publishes nothing."""
        core = self._core.statistics()
        return RuntimeStatistics(
            **attrs.asdict(core),
            events_logged=len(self._hub.log),
            events_dropped=self._hub.log_dropped,
            subscribers=self._hub.subscribers,
            listener_errors=self._hub.listener_errors,
        )

    @property
    def closed(self) -> bool:
        return self._core.closed

    @property
    def write_barrier(self) -> WriteBarrier | None:
        """The write-ahead hook set with ``set_write_barrier``, or ``None``."""
        return self._write_barrier

    def set_write_barrier(self, barrier: WriteBarrier | None) -> None:
        """Install (or with ``None`` remove) a write-ahead hook for every boundary.

        ``await barrier(generation_id, inputs)`` runs inside ``boundary()`` right before
        an input is handed to the writer; ``inputs`` holds exactly that input, and
        ``generation_id`` names the generation it is written into (for a follow-up, the one it
        opens, as ``input.delivered`` does, not its anchor: C29). Announcing
        one input at a time is what lets a journal tell "maybe written" (the one input
        marked) from "never handed over" (everything behind it) after a crash (C23); the
        receipt journal pays one durable commit per input written, which also carries the
        previous input's ``applied``.

        If the barrier raises or is cancelled, the input was not handed to the writer: it
        stays pending (or is held if the generation is ending, C15) and the exception
        propagates out of ``boundary()``. If the generation was stopped while the barrier
        ran, the input is held instead of written.
        """
        if barrier is not None and not callable(barrier):
            raise TypeError("the write barrier must be an async callable or None")
        self._write_barrier = barrier

    async def aclose(self) -> None:
        """Close the runtime: refuse new work, hold pending input (``runtime-closed``). Idempotent.

        A running generation is not interrupted: its engine's waits return, its
        next boundary raises ``RuntimeClosedError``, and leaving its block still
        publishes ``generation.stopped``. Subscriptions end after their buffers,
        once the running generation (if any) has published its last event.
        """
        self._guard("aclose")
        self._core.close()
        if self._active is not None:
            # Its in-flight write and terminal event are still to come: the hub closes
            # when the block is left (Generation.__aexit__), so subscribers see them.
            self._active._wake()
        else:
            self._hub.close()
        await anyio.lowlevel.checkpoint()

    async def __aenter__(self) -> LiveRuntime:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            await self.aclose()

    # -- engine side ----------------------------------------------------------------------

    def open_generation(self, generation_id: str | None = None) -> Generation:
        """A generation to run as ``async with runtime.open_generation() as gen:``.

        Entering opens admission for it; leaving publishes its terminal event.
        Without an id the runtime issues one (``generation_prefix`` and a counter,
        remembered as a counter: prefer it for a long-lived runtime); issued
        generations start in the order they were opened, each once. With an id of
        the caller's choosing: ``ValueError`` for an id used before in this runtime,
        one starting with ``generation_prefix``, or once ``generation_id_limit``
        chosen ids ran. Entering raises ``GenerationStateError`` if one is running.
        """
        if generation_id is None:
            # unique by construction: the runtime remembers a counter, not the id (issue 11)
            return Generation(self, self._core.new_generation_id(), issued=True)
        return Generation(self, self._core.check_generation_id(generation_id))

    def _check(self) -> None:
        """Assert the core's invariants and that this shell agrees with its core."""
        core = self._core
        core._check()

        def require(condition: bool, message: str) -> None:
            if not condition:
                raise InvariantError(message)

        active = self._active
        gen = core.current
        if active is None:
            require(gen is None, "the core runs a generation the shell does not know")
        else:
            parker = active._parker
            if gen is None or active._state is not gen or parker is None:
                raise InvariantError("the shell's running generation is not the core's, or has no parker")
            require(active.id == gen.id, "the shell's generation id is not the core's")
            if parker.waiting:
                # A parked engine not yet woken while there is something to wake it for
                # would sleep through it: a lost wake-up.
                require(not gen.pending and gen.phase is OPEN, "the engine sleeps through pending input")
        hub = self._hub
        require(
            hub.log_dropped + len(hub.log) == core.events_published,
            "the hub's log does not count every event the core published",
        )
        require(
            not hub.log or hub.log[-1]["sequence"] == core.events_published,
            "the hub's last event is not the core's last",
        )
        require(not hub.closed or (core.closed and active is None), "the hub closed before the runtime")
        if active is None:
            require(hub.owed is None, "the hub still settles for a generation that ended")
        else:
            require(hub.owed == self._settle, "the hub settles for another runtime")
        barrier = self._write_barrier
        require(barrier is None or callable(barrier), "the write barrier is not callable")


def _only_cancellation(exc: BaseException) -> bool:
    """True for the backend's cancellation, also when a nursery grouped several of them.

    A native trio nursery (strict exception groups) re-raises the ``Cancelled`` of its
    children as a ``BaseExceptionGroup``; that is still a cancellation, not a failure.
    """
    cancelled = anyio.get_cancelled_exc_class()
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(cancelled)[1] is None
    return isinstance(exc, cancelled)


def _own_stop(exc: BaseException, state: GenerationState) -> bool:
    """True for the stop signal of ``state`` (also a group of nothing else): the block absorbs it.

    A stop signal of another generation (another runtime's, raised inside this block)
    is not this block's to absorb.
    """

    def own(error: BaseException) -> bool:
        return isinstance(error, GenerationStopped) and error._origin is state

    if isinstance(exc, BaseExceptionGroup):
        match, rest = exc.split(own)
        return match is not None and rest is None
    return own(exc)


_RETURNED: Final = exit_of(None, cancelled=False)
"""How a block left without an exception was left (``Generation.__aexit__``)."""

_NO_WRITER: Final = object()
"""``Generation._writer`` before any writer was checked (``None`` is a writer to refuse)."""
_CALLABLE_WRITERS: weakref.WeakKeyDictionary[object, bool] = weakref.WeakKeyDictionary()
"""Callables already found callable as writers: reading a
signature costs more than a whole boundary, and a loop passes the same writer to every
generation. Weak: a writer's function is not kept alive by having been checked."""
_CALLABLE_METHODS: weakref.WeakKeyDictionary[object, bool] = weakref.WeakKeyDictionary()
"""The same for bound methods, by their ``__func__`` (bound, it takes one argument less)."""


def _check_writer(writer: object) -> None:
    """Raise ``TypeError`` unless ``writer`` can be called as ``writer(input, metadata)``."""
    func = getattr(writer, "__func__", None)  # a bound method is made anew at each access
    key, known = (writer, _CALLABLE_WRITERS) if func is None else (func, _CALLABLE_METHODS)
    if type(key) is FunctionType and _signature_is_its_code(key):
        # A closure or lambda made anew for each boundary (``lambda i, m: ...``) is a new
        # function of the same code: its signature is its code's, so the code is the key.
        key = key.__code__
    try:
        if key in known:
            return
    except TypeError:  # unhashable or not weakly referable: checked every time
        key = None
    problem = _writer_problem(writer)
    if problem is not None:
        raise TypeError(problem)
    if key is not None:
        with contextlib.suppress(TypeError):
            known[key] = True


def _signature_is_its_code(func: FunctionType) -> bool:
    """True when ``inspect.signature(func)`` depends on ``func.__code__`` alone: no defaults,
    and nothing (``__wrapped__``, ``__signature__``) that ``inspect`` reads instead."""
    return (
        func.__defaults__ is None
        and func.__kwdefaults__ is None
        and "__wrapped__" not in func.__dict__
        and "__signature__" not in func.__dict__
    )


def _writer_problem(writer: object) -> str | None:
    """Why ``writer`` cannot be called as ``writer(input, metadata)``, or ``None``."""
    if not callable(writer):
        return f"the writer must be callable as writer(input, metadata), got {type(writer).__name__}"
    try:
        signature = inspect.signature(writer)
    except (TypeError, ValueError):  # no signature to read (some builtins): it is called as is
        return None
    try:
        signature.bind(None, None)
    except TypeError as exc:
        return (
            f"the writer must be callable as writer(input, metadata), with two positional arguments; "
            f"{writer!r} has the signature {signature} ({exc})"
        )
    return None


class Generation:
    """The engine's handle on one generation; made by ``LiveRuntime.open_generation``.

    >>> async with runtime.open_generation() as gen:          # doctest: +SKIP
    ...     while True:
    ...         await gen.boundary(context.add_steer)
    ...         reply = await provider.complete(context)
    ...         ...
    ...         await save_checkpoint(context)
    ...         if not gen.continue_after_checkpoint():
    ...             break

    Leaving the block normally publishes ``generation.finished``; with an exception
    ``generation.failed``; cancelled, ``generation.cancelled``. ``stop()`` holds what
    is pending and makes the block's exit publish ``generation.stopped``; once stopped,
    ``boundary()`` raises the stop signal ``GenerationStopped``, which the block's exit
    absorbs, so a loop stopped from another task ends cleanly.
    """

    def __init__(self, runtime: LiveRuntime, generation_id: str, *, issued: bool = False) -> None:
        self._runtime = runtime
        self.id: Final = generation_id
        self._issued = issued
        """True for an id the runtime made (``open_generation()`` without an id)."""
        self._state: GenerationState | None = None
        self._parker: Parker | None = None
        """Where the engine waits for input; for the running backend on entry (asyncio: the
        runtime's last one while nobody is parked on it, see ``Parker.for_running_backend``)."""
        self._terminal: Event | None = None
        self._writer: object = _NO_WRITER
        """The last writer found callable as ``writer(input, metadata)`` (checked once)."""

    def _require(self) -> GenerationState:
        if self._state is None:
            raise GenerationStateError("use the generation as 'async with runtime.open_generation() as gen'")
        return self._state

    def _guard(self, call: str) -> None:
        """``RuntimeError`` (nothing changed) for a call from another thread or event loop than
        the one the generation was entered in, or from inside an event listener (C8, C21)."""
        parker = self._parker
        if (parker is not None and not parker.at_home()) or self._runtime._hub.dispatching:
            raise self._runtime._misuse(call)

    async def __aenter__(self) -> Generation:
        if self._state is not None:
            raise GenerationStateError(f"generation {self.id!r} was already entered")
        runtime = self._runtime
        if runtime._elsewhere():  # its loop still runs in another thread: it is that loop's (C8)
            raise runtime._misuse("open_generation")
        # The core checks the id again: two handles made for one id before either ran
        # would otherwise let an anchor to the first generation reach the second (C18).
        self._state = runtime._core.start_generation(self.id, issued=self._issued)
        self._parker = Parker.for_running_backend(runtime._home)  # the last one, if it serves
        runtime._home = self._parker
        runtime._active = self
        runtime._hub.owed = runtime._settle
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        state = self._state
        if state is None:
            state = self._require()  # raises
        # How the block was left; the core's ENDINGS table decides what that means (a
        # loop running into a stop ends stopped, not failed). This generation's stop
        # signal is absorbed; any other exception propagates.
        if exc is None:  # most blocks: ``exit_of(None)``, read off it at import
            absorbed, how, error = False, _RETURNED, None
        else:
            absorbed = _own_stop(exc, state)
            if absorbed:
                how, error = Exit.STOP_SIGNAL, None
            else:
                how, error = exit_of(exc, cancelled=_only_cancellation(exc)), type(exc).__name__
        runtime = self._runtime
        try:
            terminal = self._terminal = runtime._core.end_generation(state, how, error)
        finally:  # the core ends the generation even when its clock raises, then re-raises it
            runtime._active = None
            runtime._hub.owed = None  # nothing is owed once the terminal event is out
            parker = self._parker  # ``_wake()``, written out: once per generation
            if parker is not None:
                parker.unpark()
            if runtime._core.closed:  # aclose() left the hub open for this generation's last events
                runtime._hub.close()
        if "warning" in terminal:  # the last step: under -W error the warning raises here
            warning = terminal["warning"]
            if warning == CONTINUED_WARNING:
                message = (
                    f"generation {self.id!r} was left after gen.continue_after_checkpoint() returned "
                    "True, before a boundary delivered the input pending: it is held "
                    "(generation-stopped) although the loop decided to continue; run the next "
                    "boundary, or call gen.stop() to end it on purpose"
                )
            else:
                message = (
                    f"generation {self.id!r} was left with input pending and no "
                    "gen.continue_after_checkpoint() decision: it is held (generation-stopped) "
                    "instead of continued; call gen.stop() to end it on purpose"
                )
            warnings.warn(CheckpointDecisionWarning(message), stacklevel=2)
        return absorbed

    # -- state ----------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Inputs admitted and waiting for the next boundary."""
        state = self._state
        if state is None:
            state = self._require()  # raises
        core = self._runtime._core  # ``core.pending_of(state)``, written out: a loop asks at every step
        if core._owed is not None:
            core.settle()  # an owed acceptance is out before anything shows the admission
        return len(state.pending)

    @property
    def accepting(self) -> bool:
        """True while admission is open."""
        state = self._state
        if state is None:
            state = self._require()  # raises
        return state.phase is OPEN

    @property
    def terminal_event(self) -> Event | None:
        """The fields of the terminal event, once the block was left."""
        return self._terminal

    @property
    def end_reason(self) -> HoldReason | None:
        """Once the block was left: the reason the generation ended with (the ``reason`` of
        its terminal event), ``None`` if it finished; ``None`` while it runs."""
        state = self._state
        if state is None or self._terminal is None:
            return None
        return state.end_reason

    # -- the loop's calls -----------------------------------------------------------------

    async def boundary(self, writer: Writer) -> list[Receipt]:
        """Drain the pending batch in admission order into the context (C13-C15).

        Each input is passed to ``writer(input, metadata)`` with metadata
        ``{"input_id", "target_generation_id", "delivery", "kind"}``; when the call
        returns, the input is applied and ``input.delivered`` + ``steering.applied``
        are published. If the writer raises or is cancelled, that input is unknown,
        the rest stay pending, and the exception propagates. Inputs admitted while
        the boundary runs join it. Returns the applied receipts. O(batch).

        With a write barrier (``LiveRuntime.set_write_barrier``) each input is
        announced to it, on its own, right before it is handed to the writer.

        Raises the stop signal ``GenerationStopped`` once the generation was stopped
        (leaving the block absorbs it), ``TypeError`` for a writer that cannot be
        called as ``writer(input, metadata)`` (before any input is taken), and
        ``GenerationStateError`` for a misuse (two boundaries at once, a boundary
        after the decision to finish, the block left while this boundary wrote).
        """
        state = self._state
        if state is None:
            state = self._require()  # raises
        parker = self._parker
        assert parker is not None  # entered: _require() passed
        if not parker.at_home():  # before anything changes (C8); an event listener cannot await
            raise self._runtime._misuse("gen.boundary")
        last = self._writer
        # (``context.add_steer`` is a new bound method at each access, equal to the last one)
        if writer is not last and not (type(writer) is MethodType and writer == last):
            _check_writer(writer)
            self._writer = writer
        runtime = self._runtime
        core = runtime._core
        if parker.cancel_pending():  # asyncio answers without an awaitable (boundary_single)
            await parker.checkpoint_if_cancelled()
        # ``begin_boundary`` and the first ``next_write`` in one call; None: nothing to write,
        # and the boundary is already over
        record = core.start_boundary(state)
        applied: list[Receipt] = []
        if record is None:
            return applied
        try:
            while True:
                barrier = runtime._write_barrier
                if barrier is not None:
                    # One input per call: an input marked "maybe written" must be the one
                    # about to be handed over, so recovery can hold the rest (C23).
                    core.announce(state, record)
                    try:
                        # the generation it is written into: for a follow-up, the one it opens (C29)
                        await barrier(state.id, (record.input,))
                    except BaseException:
                        # never handed to the writer: pending again, not unknown (C15)
                        core.return_write(state, record)
                        raise
                    if not core.after_barrier(state, record):
                        break  # stopped or closed while the barrier ran: held like the rest (C17)
                metadata = {
                    "input_id": record.input.id,
                    "target_generation_id": state.id,  # a follow-up's is the generation it opens (C29)
                    "delivery": DELIVERY if record.target is None else FOLLOW_UP_DELIVERY,
                    "kind": record.input.kind,
                }
                try:
                    result = writer(record.input, metadata)
                    # an ``async def`` writer's coroutine without ``inspect.isawaitable``'s call
                    if type(result) is CoroutineType or (result is not None and inspect.isawaitable(result)):
                        await result
                except BaseException:
                    core.interrupt_write(state, record)
                    raise
                applied.append(core.confirm_write(state, record, True))
                if not state.boundary_active:
                    # nothing pending: the boundary ended at this last confirmed write (no
                    # ``next_write`` answering None, no ``end_boundary``: boundary_single)
                    return applied
                record = core.next_write(state)
                if record is None:
                    break
        finally:
            if state.boundary_active:  # not ended by the core already
                core.end_boundary(state)
        return applied

    async def wait_for_input(self) -> bool:
        """Park until an input is pending (True) or admission closes (False).

        Admission wakes it in the same step (C8): no inbox or manager in between.
        """
        state = self._require()
        self._guard("gen.wait_for_input")
        core = self._runtime._core
        if state.pending or state.phase is not OPEN:
            # Nothing to wait for, but an async call is always a checkpoint.
            await anyio.lowlevel.checkpoint()
            if not state.pending and core.closed and core.closed_error is not None:
                raise core.closed_error()  # closed by a wing's failure: the loop ends loudly
            return bool(state.pending)
        parker = self._parker
        assert parker is not None  # entered: _require() passed
        while not state.pending:
            if state.phase is not OPEN:
                if core.closed and core.closed_error is not None:
                    raise core.closed_error()
                return False
            if parker.occupied:
                # One parking spot: a second waiter would orphan the first, which then never wakes.
                raise GenerationStateError(f"another task is already waiting for input of {self.id!r}")
            future = parker.park_future()  # asyncio: ``park()`` without its coroutine
            if future is None:
                await parker.park()  # the checkpoint of this call: it parked
            else:
                try:
                    await future  # the checkpoint of this call: it parked; ``unpark()`` frees it
                except BaseException:
                    parker.abandon(future)  # cancelled while parked: the spot is free again
                    raise
        return True

    def continue_after_checkpoint(self, *, may_call: bool = True) -> bool:
        """Call after the loop's durable checkpoint: True means run again, same generation (C16).

        ``may_call=False`` tells it the loop may make no further model call (its call
        budget is spent): pending input is then held ``budget-exhausted`` and the
        generation stops, without a ``generation.continued`` first (C17).
        False means admission closed in this very call, and the loop should leave the
        block; submits from now on are refused ``finishing``. Like ``stop()``, it raises
        ``RuntimeError`` (changing nothing) from another thread or loop, or a listener.
        """
        state = self._state
        if state is None:
            state = self._require()  # raises
        # ``_guard``, written out (once per generation, with cold caches): the C8 refusal
        runtime = self._runtime
        parker = self._parker
        if (parker is not None and not parker.at_home()) or runtime._hub.dispatching:
            raise runtime._misuse("gen.continue_after_checkpoint")
        return runtime._core.after_checkpoint(state, may_call)

    @property
    def steers_pending(self) -> list[str]:
        """The ids of the steers (not follow-ups) waiting for the next boundary, in order: a loop
        that finds any after a tool call returned may skip the rest of its batch (C31)."""
        return self._runtime._core.steers_pending(self._require())

    def skip_tools(self, tool_call_ids: Sequence[str]) -> list[str]:
        """Record that the loop answers ``tool_call_ids`` (the rest of a tool batch) without
        running them, because steers are pending (C31): publishes ``tools.skipped
        {generation_id, tool_call_ids, input_ids}`` and returns the pending steers' ids. Give
        each skipped call the result ``SKIPPED_TOOL_RESULT`` so every tool call keeps a result.
        ``GenerationStateError`` when no steer is pending; ``TypeError`` for a single string
        (pass a list: ``["call-2"]``) or ids that are not strings; ``ValueError`` for no ids (a
        skip names the calls it skips); ``RuntimeError`` from another thread or loop, or a
        listener. Each refusal changes nothing."""
        state = self._require()
        self._guard("gen.skip_tools")
        if isinstance(tool_call_ids, (str, bytes)):
            raise TypeError(
                f"tool_call_ids is a sequence of ids, got the single {type(tool_call_ids).__name__} "
                f"{tool_call_ids!r}: pass [{tool_call_ids!r}]"
            )
        ids = [plain_str(i, "tool_call_id") for i in tool_call_ids]
        if not ids:
            raise ValueError("tool_call_ids is empty: a skip names the tool calls it answers without running")
        return self._runtime._core.skip_tools(state, ids)

    def stop(self, reason: StopReason = StopReason.GENERATION_STOPPED) -> bool:
        """Stop the generation: close admission and hold what is pending (C17).

        ``reason`` is a ``StopReason`` (``TypeError`` otherwise). Safe to call from
        another task: the engine's next ``boundary()`` raises ``GenerationStopped``,
        which leaving the block absorbs; its exit publishes ``generation.stopped``. A
        write already handed to the writer completes. Stopping a generation whose
        admission already closed changes nothing. ``RuntimeError``, before anything
        changes, from another thread or event loop (use ``anyio.from_thread``, or the
        host's ``runtime.stop(id)`` through a portal) or from inside an event listener
        (the stream would be reordered). Returns True if this call stopped it, False if
        its admission had closed already.
        """
        state = self._require()
        self._guard("gen.stop")
        stopped = self._runtime._core.stop(state, reason)
        self._wake()
        return stopped

    def _wake(self) -> None:
        if self._parker is not None:
            self._parker.unpark()


# -- the one door for wings ---------------------------------------------------------------


class AcceptedInput(Protocol):
    """What a wing may read of an accepted input (a live view: it moves as the input does)."""

    @property
    def input(self) -> Input:
        """The input exactly as admitted."""

    @property
    def generation_id(self) -> str:
        """The generation it was admitted into."""

    @property
    def sequence(self) -> int:
        """Admission order across the runtime, from 1."""

    @property
    def disposition(self) -> Disposition:
        """What hosts see of it now."""

    @property
    def reason(self) -> HoldReason | None:
        """Why it is held or unknown; ``None`` otherwise."""

    @property
    def writing(self) -> bool:
        """True while it is handed to the writer and not confirmed (still ``queued``)."""


@attrs.frozen
class RuntimeInternals:
    """What a wing (the receipt journal; the fleet, integrations) may do with a runtime
    beyond its public API, and nothing else. Get one with ``internals(runtime)``.

    A wing reads accepted inputs (events carry only ids), publishes its own events
    on the runtime's stream (numbered in sequence with the core's), and settles an
    owed acceptance before it answers a read of what it has heard (the rule of
    ``_core``'s theory of operation). Every call is O(1) but ``accepted_inputs``.
    """

    _core: SteeringCore

    def running_generation_id(self) -> str | None:
        """``runtime.generation["id"]`` (``None`` while no generation runs), without building the
        view: for a wing that asks on every submission which generation runs (an ACP steer). O(1)."""
        core = self._core
        if core._owed is not None:  # as ``generation_view``: an owed acceptance is out first
            core.settle()
        gen = core.current
        return None if gen is None else gen.id

    def accepted(self, input_id: str) -> AcceptedInput | None:
        """The accepted input ``input_id``, or ``None`` if the runtime never accepted it."""
        record: InputRecord | None = self._core.identities.get(input_id)
        return record

    def accepted_inputs(self) -> list[AcceptedInput]:
        """Every input the runtime accepted, in admission order. O(identities)."""
        return list(self._core.identities.values())

    def input_problem(self, input: Input) -> str | None:
        """What the runtime would refuse ``input`` for as ``invalid-input`` (its configured text
        limit included), or ``None``: for a wing that must refuse exactly as the runtime would
        before anything is submitted (an ACP steer that would start a new turn). O(len)."""
        return input_problem(input.id, input.text, self._core.max_text_chars)

    def delivery_modes(self) -> tuple[str, str]:
        """The runtime's ``(steering_mode, follow_up_mode)`` (C30), as its constructor took them:
        for a wing that records them (the fleet's lease row, shown by ``GET /v1/sessions``). O(1)."""
        return self._core.steering_mode.value, self._core.follow_up_mode.value

    def retain(self, input_id: str, generation_id: str, digest: str, receipt: Receipt) -> None:
        """Have the core answer ``input_id`` as an identity an earlier runtime of the session
        accepted (the fleet's earlier owners): ``SteeringCore.retain``. O(1)."""
        self._core.retain(input_id, generation_id, digest, receipt)

    def fail_closed(self, error: Callable[[], RuntimeClosedError]) -> None:
        """Record that the wing closes the runtime because it failed: from then on a boundary, a
        wait for input (instead of returning False) and a new generation raise ``error()``.
        Call before ``aclose()``. O(1)."""
        self._core.closed_error = error

    def publish(self, type_: str, fields: dict[str, Any]) -> None:
        """Publish the wing's event ``type_`` (not one of the core's types, ``ValueError``)."""
        self._core.publish(type_, fields)

    def settle(self) -> None:
        """Publish an acceptance the runtime still owes, so the wing's listener has heard it."""
        self._core.settle()


def internals(runtime: LiveRuntime) -> RuntimeInternals:
    """The wing's door into ``runtime`` (see ``RuntimeInternals``)."""
    if not isinstance(runtime, LiveRuntime):
        raise TypeError(f"expected a LiveRuntime, got {type(runtime).__name__}")
    return RuntimeInternals(runtime._core)
