"""``LiveRuntime`` and ``Generation``: the anyio shell around ``SteeringCore``.

This module only parks and wakes tasks. Every decision (admit, refuse, repeat,
apply, hold, unknown, continue, close) is the core's, taken synchronously; the
shell then does the follow-up work: wake the engine, await the loop's writer,
publish. It must never put an await between a decision and the state change it
implies (C8, C16), and it never starts a task of its own.
"""

from __future__ import annotations

import inspect
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Final

import anyio
import anyio.lowlevel
import attrs

from ._core import (
    DEFAULT_IDENTITY_LIMIT,
    DEFAULT_MAX_TEXT_CHARS,
    DELIVERY,
    MAX_ID_CHARS,
    CoreStatistics,
    Ending,
    GenerationState,
    Phase,
    SteeringCore,
)
from ._errors import GenerationClosedError, GenerationStateError, RuntimeClosedError
from ._events import DEFAULT_LOG_SIZE, DEFAULT_SUBSCRIPTION_BUFFER, Event, EventHub, Listener, Subscription
from ._parking import Parker
from ._types import HoldReason, Input, Receipt, plain_str, utf8_encodable

__all__ = ["Generation", "LiveRuntime", "RuntimeStatistics", "WriteBarrier", "Writer"]

#: A context writer: called once per input, in admission order, with the input and
#: the metadata its context entry must carry. May be sync or async. When it returns,
#: the input is applied; if it raises or is cancelled, the input is unknown.
Writer = Callable[[Input, Mapping[str, Any]], Awaitable[None] | None]

#: An optional write-ahead hook (see ``LiveRuntime.set_write_barrier``): awaited with the
#: generation id and the one input about to be handed to the writer (as a 1-tuple).
#: If it raises or is cancelled, the input was not handed: it stays pending (C15).
WriteBarrier = Callable[[str, Sequence[Input]], Awaitable[None]]

_STOP_REASONS: Final = frozenset({HoldReason.GENERATION_STOPPED, HoldReason.BUDGET_EXHAUSTED})


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


def _engine_id(value: object, name: str) -> str:
    """Check an id the engine chooses (session, generation) by the rules of input ids (C7).

    These ids ride in every event and in the receipt journal, so they must be as
    clean as an admitted input id: 1-128 characters, no NUL, valid UTF-8.
    ``TypeError`` for a non-string, ``ValueError`` for a bad one.
    """
    value = plain_str(value, name)
    if not 1 <= len(value) <= MAX_ID_CHARS:
        raise ValueError(f"{name} must be a non-empty str of at most {MAX_ID_CHARS} characters")
    if "\x00" in value or not utf8_encodable(value):
        raise ValueError(f"{name} must be valid UTF-8 text without NUL, got {value!r}")
    return value


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
    ) -> None:
        """Configure a runtime.

        ``identity_limit``: accepted identities retained (C11). ``max_text_chars``: the
        longest steer text admitted (C7). ``boundary_delivery=False`` makes the
        capability ``unavailable`` (for a provider that steers natively, C1).
        ``event_log_size``: events kept by ``recent_events()``. ``clock``: the
        ``time`` of events, seconds since the epoch.
        """
        if session_id is None:
            session_id = f"session-{uuid.uuid4().hex[:12]}"
        else:
            session_id = _engine_id(session_id, "session_id")
        if type(boundary_delivery) is not bool:
            raise TypeError("boundary_delivery must be a bool")
        self._hub = EventHub(event_log_size)
        self._core = SteeringCore(
            session_id=session_id,
            sink=self._hub.publish,
            clock=clock,
            identity_limit=identity_limit,
            max_text_chars=max_text_chars,
            boundary_delivery=boundary_delivery,
        )
        self._hub.settle = _publisher_of_owed(self._core)
        self._active: Generation | None = None
        self._generation_ids: set[str] = set()
        self._write_barrier: WriteBarrier | None = None

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
        """``None`` while no generation runs, else ``{"id", "phase", "pending"}`` (C2)."""
        self._core.publish_owed()  # what "pending" counts has its steering.accepted out
        gen = self._core.current
        if gen is None:
            return None
        return {"id": gen.id, "phase": gen.phase.value, "pending": len(gen.pending)}

    async def submit_steering(self, input: Input, generation_id: str) -> Receipt:
        """Submit a steer anchored to a generation; the receipt says what happened (C3-C12).

        >>> receipt = await runtime.submit_steering(           # doctest: +SKIP
        ...     Input("steer", "Use the corrected path", id="fix-1"), runtime.generation["id"])

        Admission is decided before the first await, so cancelling this call never
        un-admits an input. After an admission or a refusal the call yields once,
        shielded from cancellation, so that a woken engine runs first and the caller
        still gets its receipt (a cancellation reaches it at its next checkpoint).
        ``steering.accepted`` is published when the call resumes, or earlier if the
        engine publishes anything first: always before the call returns, and
        before any later event.
        An identical repeat (C10) changes nothing and wakes no one, so it is answered
        without a scheduling round: to wait for a disposition, subscribe to events
        rather than resubmitting in a loop. Refusals are receipts; only wrong
        argument types raise ``TypeError``.
        """
        core = self._core
        receipt = core.decide(input, generation_id)
        if receipt is None:  # admitted, so a generation of this runtime is running
            gen = self._active
            assert gen is not None
            parker = gen._parker
            assert parker is not None  # made when the generation was entered
            try:
                await parker.hand_over()  # wakes the engine, which runs first
            finally:  # also when asyncio's task.cancel() lands on the yield
                core.publish_owed()  # steering.accepted, unless the engine published it first
            return core.queued_receipt(input.id)
        if not receipt.accepted:
            await anyio.lowlevel.cancel_shielded_checkpoint()
        return receipt

    def submit_steering_nowait(self, input: Input, generation_id: str) -> Receipt:
        """``submit_steering`` without the yield, for synchronous callers. O(1) plus validation."""
        receipt = self._core.decide(input, generation_id)
        if receipt is None:  # admitted
            assert self._active is not None
            self._active._wake()
            self._core.publish_owed()
            return self._core.queued_receipt(input.id)
        return receipt

    def receipt(self, input_id: str) -> Receipt | None:
        """The current receipt of an accepted input id, or ``None``. O(1)."""
        self._core.publish_owed()  # an input seen queued has its steering.accepted out
        return self._core.receipt(input_id)

    def subscribe(self, max_buffer: int = DEFAULT_SUBSCRIPTION_BUFFER) -> Subscription:
        """Receive every event published from now on, as an async iterator (C21)."""
        return self._hub.subscribe(max_buffer)

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event)`` synchronously for every event; returns a remover.

        A listener must be quick and must not call back into the runtime. One that
        raises is logged and counted, and the runtime carries on.
        """
        return self._hub.add_listener(listener)

    def recent_events(self) -> list[Event]:
        """The bounded log of recent events, oldest first."""
        self._core.publish_owed()
        return list(self._hub.log)

    def statistics(self) -> RuntimeStatistics:
        """A frozen snapshot of the runtime's counters."""
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
        an input is handed to the writer; ``inputs`` holds exactly that input. Announcing
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
        Raises ``GenerationStateError`` if one is running, ``ValueError`` for an id
        used before in this runtime.
        """
        if generation_id is None:
            generation_id = f"gen-{uuid.uuid4().hex}"
        else:
            generation_id = _engine_id(generation_id, "generation_id")
        if generation_id in self._generation_ids:
            raise ValueError(f"generation id {generation_id!r} was already used in this runtime")
        return Generation(self, generation_id)

    def _check(self) -> None:
        self._core._check()


def _publisher_of_owed(core: SteeringCore) -> Callable[[], None]:
    """``core.publish_owed``, without the hub holding the core (which holds the hub)."""
    core_ref = weakref.ref(core)

    def settle() -> None:
        owner = core_ref()
        if owner is not None:
            owner.publish_owed()

    return settle


def _only_cancellation(exc: BaseException) -> bool:
    """True for the backend's cancellation, also when a nursery grouped several of them.

    A native trio nursery (strict exception groups) re-raises the ``Cancelled`` of its
    children as a ``BaseExceptionGroup``; that is still a cancellation, not a failure.
    """
    cancelled = anyio.get_cancelled_exc_class()
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(cancelled)[1] is None
    return isinstance(exc, cancelled)


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
    is pending and makes the block's exit publish ``generation.stopped``.
    """

    def __init__(self, runtime: LiveRuntime, generation_id: str) -> None:
        self._runtime = runtime
        self.id: Final = generation_id
        self._state: GenerationState | None = None
        self._parker: Parker | None = None
        """Where the engine waits for input; made for the running backend on entry."""
        self._terminal: Event | None = None

    def _require(self) -> GenerationState:
        if self._state is None:
            raise GenerationStateError("use the generation as 'async with runtime.open_generation() as gen'")
        return self._state

    async def __aenter__(self) -> Generation:
        if self._state is not None:
            raise GenerationStateError(f"generation {self.id!r} was already entered")
        runtime = self._runtime
        # Checked again here: two handles made for one id before either ran would
        # otherwise let an anchor to the first generation reach the second (C18).
        if self.id in runtime._generation_ids:
            raise ValueError(f"generation id {self.id!r} was already used in this runtime")
        self._state = runtime._core.start_generation(self.id)
        self._parker = Parker.for_running_backend()
        runtime._generation_ids.add(self.id)
        runtime._active = self
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        state = self._require()
        fields: dict[str, str] = {}
        reason: HoldReason | None = None
        if exc is None:
            ending = Ending.FINISHED
        elif _only_cancellation(exc):
            ending = Ending.CANCELLED
        elif isinstance(exc, (GenerationClosedError, RuntimeClosedError)) and state.ending is Ending.STOPPED:
            # The loop ran into the stop (its next boundary was refused): that is how a
            # stopped generation ends, not a failure. The exception still propagates.
            ending, reason = Ending.STOPPED, state.end_reason
        else:
            ending, fields["error"] = Ending.FAILED, type(exc).__name__
        self._terminal = self._runtime._core.end_generation(state, ending, reason, **fields)
        self._runtime._active = None
        self._wake()
        if self._runtime.closed:  # aclose() left the hub open for this generation's last events
            self._runtime._hub.close()

    # -- state ----------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Inputs admitted and waiting for the next boundary."""
        self._runtime._core.publish_owed()
        return len(self._require().pending)

    @property
    def accepting(self) -> bool:
        """True while admission is open."""
        return self._require().phase is Phase.OPEN

    @property
    def terminal_event(self) -> Event | None:
        """The fields of the terminal event, once the block was left."""
        return self._terminal

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
        """
        state = self._require()
        runtime = self._runtime
        core = runtime._core
        await anyio.lowlevel.checkpoint_if_cancelled()
        core.begin_boundary(state)
        applied: list[Receipt] = []
        try:
            while (record := core.next_write(state)) is not None:
                barrier = runtime._write_barrier
                if barrier is not None:
                    # One input per call: an input marked "maybe written" must be the one
                    # about to be handed over, so recovery can hold the rest (C23).
                    try:
                        await barrier(record.generation_id, (record.input,))
                    except BaseException:
                        # never handed to the writer: pending again, not unknown (C15)
                        core.return_write(state, record)
                        raise
                    if state.phase is not Phase.OPEN:
                        # stopped or closed while the barrier ran: held like the rest (C17)
                        core.return_write(state, record)
                        break
                metadata = {
                    "input_id": record.input.id,
                    "target_generation_id": record.generation_id,
                    "delivery": DELIVERY,
                    "kind": record.input.kind,
                }
                try:
                    result = writer(record.input, metadata)
                    if inspect.isawaitable(result):
                        await result
                except BaseException:
                    core.interrupt_write(state, record)
                    raise
                applied.append(core.confirm_write(state, record))
        finally:
            core.end_boundary(state)
        return applied

    async def wait_for_input(self) -> bool:
        """Park until an input is pending (True) or admission closes (False).

        Admission wakes it in the same step (C8): no inbox or manager in between.
        """
        state = self._require()
        if state.pending or state.phase is not Phase.OPEN:
            # Nothing to wait for, but an async call is always a checkpoint.
            await anyio.lowlevel.checkpoint()
            return bool(state.pending)
        parker = self._parker
        assert parker is not None  # entered: _require() passed
        while not state.pending:
            if state.phase is not Phase.OPEN:
                return False
            if parker.occupied:
                # One parking spot: a second waiter would orphan the first, which then never wakes.
                raise GenerationStateError(f"another task is already waiting for input of {self.id!r}")
            await parker.park()  # the checkpoint of this call: it parked
        return True

    def continue_after_checkpoint(self) -> bool:
        """Call after the loop's durable checkpoint: True means run again, same generation (C16).

        False means admission closed in this very call (nothing was pending), and the
        loop should leave the block; submits from now on are refused ``finishing``.
        """
        return self._runtime._core.after_checkpoint(self._require())

    def stop(self, reason: HoldReason = HoldReason.GENERATION_STOPPED) -> None:
        """Stop the generation: close admission and hold what is pending (C17).

        ``reason`` is ``HoldReason.GENERATION_STOPPED`` or ``HoldReason.BUDGET_EXHAUSTED``.
        Leave the block afterwards; its exit publishes ``generation.stopped``.
        Safe to call from another task; a write already handed to the writer completes.
        """
        if reason not in _STOP_REASONS:
            raise ValueError(f"stop reason must be one of {sorted(r.value for r in _STOP_REASONS)}")
        self._runtime._core.stop(self._require(), reason)
        self._wake()

    def _wake(self) -> None:
        if self._parker is not None:
            self._parker.unpark()
