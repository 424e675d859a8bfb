"""What the framework integrations share: the steering events a framework's own event bus re-emits.

It also holds what every integration's run raises when its generation was stopped
(``RunStopped``), and the text a tool call gets when a stop kept it from running.

A runtime publishes its events synchronously, from whichever task caused them (a host's
submit, the engine's boundary); a framework's event bus is usually awaited. ``EventBridge``
buffers the events as they are published and hands them, in publication order, to an
async ``emit`` at the points the integration chooses (its own steps). It never drops or
reorders an event (an ``emit`` cut short by a cancellation or an error is handed the same
event again at the next flush), and it never calls into the runtime from the listener.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Final

from .._errors import LiveSteeringError
from .._rules import STOPPED_TOOL_RESULT  # one text for every integration and the reference loop
from .._runtime import LiveRuntime

__all__ = ["STOPPED_TOOL_RESULT", "EventBridge", "RunStopped"]


class RunStopped(LiveSteeringError):
    """A framework's run ended because its generation was stopped (C17).

    Raised by an integration's run when a host's ``runtime.stop(generation_id)`` (the
    same call the fleet and the HTTP stop make), or a stop of the engine's own, ended
    the run at its next boundary: no model request and no tool call started after it.
    The pending steers and follow-ups are held (``generation-stopped``) and the stream
    ends with ``generation.stopped``. It is not a failure: catch it where a stopped run
    is an ordinary outcome.
    """

    def __init__(self, generation_id: str, reason: str, history: list[Any] | None = None) -> None:
        if not isinstance(generation_id, str) or not isinstance(reason, str):
            raise TypeError("RunStopped(generation_id, reason, history): the id and the reason are str")
        if history is not None and not isinstance(history, list):
            raise TypeError(f"RunStopped's history is a list or None, got {type(history).__name__}")
        super().__init__(f"generation {generation_id!r} was stopped ({reason}): the run ended at a boundary")
        self.generation_id: Final = generation_id
        """The generation that was stopped."""
        self.reason: Final = reason
        """The ``StopReason`` value it was stopped with (``"generation-stopped"`` for a host's stop)."""
        self.history: Final = history
        """The conversation so far in the framework's own shape, steers in place (what each
        framework gives is on its integration's page), or ``None`` if it gives none."""


Emit = Callable[[str, dict[str, Any]], Awaitable[object]]


class EventBridge:
    """Buffers a runtime's events; ``await flush(emit)`` hands them on, oldest first. O(1) per event."""

    def __init__(self, runtime: LiveRuntime) -> None:
        self._buffer: deque[dict[str, Any]] = deque()
        self.events: deque[dict[str, Any]] = self._buffer
        """The buffer itself, for a loop that tests it at every step: ``if bridge.events:`` is no
        Python call, where ``bridge.buffered`` is one. Read it; only ``flush`` empties it."""
        self.detach: Callable[[], None] = runtime.add_listener(self._buffer.append)
        self._flushing = False

    @property
    def buffered(self) -> int:
        """Events published and not yet flushed."""
        return len(self._buffer)

    async def flush(self, emit: Emit) -> None:
        """Emit every buffered event as ``emit(event["type"], event)``, in publication order.

        Events published while ``emit`` awaits are emitted by the same call, after the
        ones before them, so a flush leaves the buffer empty. Each ``emit`` gets its own
        copy: the runtime's log and its other consumers share the published dict. An ``emit``
        that raises or is cancelled leaves its event at the head of the buffer, so the next
        flush hands it again (an event is never dropped; one whose ``emit`` was cut short may
        reach the hooks twice). A flush called while another task's flush runs returns at once:
        that one hands on every event, so two never interleave their events.
        """
        if self._flushing:  # another task's flush is handing them on, in order: it takes these too
            return
        self._flushing = True
        buffer = self._buffer
        try:
            while buffer:
                event = buffer.popleft()
                try:
                    await emit(event["type"], dict(event))
                except BaseException:
                    buffer.appendleft(event)  # not handed on: the next flush hands it again, first
                    raise
        finally:
            self._flushing = False
