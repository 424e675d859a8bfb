"""What the framework integrations share: the steering events a framework's own event bus re-emits.

A runtime publishes its events synchronously, from whichever task caused them (a host's
submit, the engine's boundary); a framework's event bus is usually awaited. ``EventBridge``
buffers the events as they are published and hands them, in publication order, to an
async ``emit`` at the points the integration chooses (its own steps). It never drops or
reorders an event, and it never calls into the runtime from the listener.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from .._runtime import LiveRuntime

__all__ = ["EventBridge"]

Emit = Callable[[str, dict[str, Any]], Awaitable[object]]


class EventBridge:
    """Buffers a runtime's events; ``await flush(emit)`` hands them on, oldest first. O(1) per event."""

    def __init__(self, runtime: LiveRuntime) -> None:
        self._buffer: deque[dict[str, Any]] = deque()
        self.events: deque[dict[str, Any]] = self._buffer
        """The buffer itself, for a loop that tests it at every step: ``if bridge.events:`` is no
        Python call, where ``bridge.buffered`` is one. Read it; only ``flush`` empties it."""
        self.detach: Callable[[], None] = runtime.add_listener(self._buffer.append)

    @property
    def buffered(self) -> int:
        """Events published and not yet flushed."""
        return len(self._buffer)

    async def flush(self, emit: Emit) -> None:
        """Emit every buffered event as ``emit(event["type"], event)``, in publication order.

        Events published while ``emit`` awaits are emitted by the same call, after the
        ones before them, so a flush leaves the buffer empty. Each ``emit`` gets its own
        copy: the runtime's log and its other consumers share the published dict.
        """
        buffer = self._buffer
        while buffer:
            event = buffer.popleft()
            await emit(event["type"], dict(event))
