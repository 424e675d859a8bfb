"""Event fan-out: the bounded recent-event log, listeners and subscriptions (C21).

The core hands every event to ``EventHub.publish`` synchronously, in the step that
caused it (an awaited admission's ``steering.accepted`` once the submitter resumes,
or earlier in whichever step first needs it out; see ``SteeringCore.settle`` and
``EventHub.owed``). Publishing never awaits and never raises into the core: a
listener that raises is logged and counted, a subscriber that does not keep up
loses the overflow (counted), and the recent-event log forgets its oldest entries
(counted).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final

import anyio

__all__ = ["Event", "EventHub", "Listener", "Subscription"]

Event = dict[str, Any]
Listener = Callable[[Event], None]

DEFAULT_LOG_SIZE: Final = 1_024
DEFAULT_SUBSCRIPTION_BUFFER: Final = 1_024

_log = logging.getLogger("live_steering")


class Subscription:
    """An async iterator over the events published after it was created.

    >>> async def watch(runtime):                            # doctest: +SKIP
    ...     with runtime.subscribe() as events:
    ...         async for event in events:
    ...             print(event["type"])

    Each subscription buffers at most ``max_buffer`` events; what does not fit is
    dropped and counted in ``dropped`` (the runtime never waits for a consumer).
    Iteration ends once the runtime is closed and the buffer is drained.
    """

    def __init__(self, hub: EventHub, max_buffer: int) -> None:
        if type(max_buffer) is not int or max_buffer < 1:
            raise ValueError(f"max_buffer must be a positive int, got {max_buffer!r}")
        self._hub = hub
        self._buffer: collections.deque[Event] = collections.deque()
        self._max_buffer = max_buffer
        self._waiter: anyio.Event | None = None
        self._closed = False
        self.dropped = 0
        """Events that arrived while the buffer was full."""

    def _push(self, event: Event) -> None:
        if len(self._buffer) >= self._max_buffer:
            self.dropped += 1
        else:
            self._buffer.append(event)
        if self._waiter is not None:
            self._waiter.set()

    def _end(self) -> None:
        self._closed = True
        if self._waiter is not None:
            self._waiter.set()

    def receive_nowait(self) -> Event | None:
        """The next buffered event, or ``None`` when the buffer is empty."""
        return self._buffer.popleft() if self._buffer else None

    def close(self) -> None:
        """Stop receiving events (one being fanned out at this moment still arrives).

        Buffered ones can still be read.
        """
        self._hub._unsubscribe(self)
        self._end()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        while not self._buffer:
            if self._closed:
                raise StopAsyncIteration
            self._waiter = waiter = anyio.Event()
            try:
                await waiter.wait()
            finally:
                self._waiter = None
        await anyio.lowlevel.checkpoint_if_cancelled()
        return self._buffer.popleft()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class EventHub:
    """Fans each event out to the log, the listeners and the subscriptions. O(listeners + subscriptions)."""

    def __init__(self, log_size: int = DEFAULT_LOG_SIZE) -> None:
        if type(log_size) is not int or log_size < 1:
            raise ValueError(f"event_log_size must be a positive int, got {log_size!r}")
        self.log: collections.deque[Event] = collections.deque(maxlen=log_size)
        self._log_size = log_size
        self.log_dropped = 0
        self.listener_errors = 0
        # A fan-out goes on over the consumers it started with, whatever a listener adds
        # or removes meanwhile: listeners (few) are a tuple replaced on every change;
        # subscriptions (maybe one per client) an insertion-ordered dict, O(1) to add and
        # remove, with a snapshot that the first publish after a change rebuilds.
        self._listeners: tuple[Listener, ...] = ()
        self._subscriptions: dict[Subscription, None] = {}
        self._fan_out: tuple[Subscription, ...] | None = ()
        self._closed = False
        self.dispatching = False
        """True while a listener is being called (``LiveRuntime`` refuses to submit then)."""
        self.owed: Callable[[], None] | None = None
        """Set by the owner while it may owe an event (``LiveRuntime`` while a generation
        runs: ``SteeringCore.settle``). The hub calls it before it shows its log, adds or
        removes a consumer, or closes, so that each consumer gets exactly the events of
        the changes made while it was attached. Holding it only that long keeps the hub
        from holding its owner for good (which holds the hub)."""

    def _settle(self) -> None:
        owed = self.owed
        if owed is not None:
            owed()

    def publish(self, event: Event) -> None:
        log = self.log
        if len(log) == self._log_size:
            self.log_dropped += 1
        log.append(event)
        subscriptions = self._fan_out  # the consumers this fan-out started with
        if subscriptions is None:
            subscriptions = self._fan_out = tuple(self._subscriptions)
        if self._listeners:
            # While a listener runs, the runtime refuses submits and stops (C8): one made
            # here would publish before this event reached the consumers after it.
            outer, self.dispatching = self.dispatching, True
            try:
                for listener in self._listeners:
                    try:
                        listener(event)
                    except Exception:
                        self.listener_errors += 1
                        _log.exception("live_steering event listener %r raised; event kept", listener)
            finally:
                self.dispatching = outer
        if subscriptions:
            for subscription in subscriptions:
                subscription._push(event)

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        if not callable(listener):  # refused before it is attached, as a write barrier is
            raise TypeError(f"a listener must be callable as listener(event), got {type(listener).__name__}")
        self._settle()
        self._listeners += (listener,)

        def remove() -> None:
            if listener in self._listeners:
                self._settle()
                listeners = list(self._listeners)
                listeners.remove(listener)
                self._listeners = tuple(listeners)

        return remove

    def subscribe(self, max_buffer: int) -> Subscription:
        subscription = Subscription(self, max_buffer)
        self._settle()
        if self._closed:  # nothing will ever be published: end it now rather than park forever
            subscription._end()
        else:
            self._subscriptions[subscription] = None
            self._fan_out = None
        return subscription

    def _unsubscribe(self, subscription: Subscription) -> None:
        if subscription in self._subscriptions:
            self._settle()
            del self._subscriptions[subscription]
            self._fan_out = None

    def close(self) -> None:
        self._settle()
        self._closed = True
        subscriptions = list(self._subscriptions)
        self._subscriptions.clear()
        self._fan_out = ()
        for subscription in subscriptions:
            subscription._end()

    def events(self) -> list[Event]:
        """The recent-event log, oldest first, with anything owed published first."""
        self._settle()
        return list(self.log)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def subscribers(self) -> int:
        return len(self._subscriptions)
