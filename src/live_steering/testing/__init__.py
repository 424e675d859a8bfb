"""Deterministic fixtures for driving a whole loop from a test, race by race.

Every step of the scripted provider, the scripted tools and the recording
context can be held at a ``Gate`` and released by the test, so a race is written
as a sequence ("steer while the model call is in flight": hold call 0, submit,
release), never as a sleep. Nothing here sleeps or reads a clock.

>>> async def test_steer_during_model_call():             # doctest: +SKIP
...     runtime = LiveRuntime()
...     provider = ScriptedProvider([Reply("done")])
...     gate = provider.gate(0)
...     loop = AgentLoop(runtime, provider, ScriptedTools({}))
...     async with anyio.create_task_group() as tg:
...         tg.start_soon(loop.run, "hello")
...         await gate.wait_reached()
...         await runtime.submit_steering(Input("steer", "go left", id="s1"),
...                                       runtime.generation["id"])
...         gate.release()

Gates and the recorder's waits use ``anyio.Event``, so create them inside the
running test (both asyncio and trio work).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import anyio

from .._errors import LiveSteeringError
from .._events import Event
from .._rules import FOLLOW_UP
from .._types import Input
from ..loop import Context, ContextEntry, Reply, ToolCall
from ._history import History, HistoryReport, HistoryViolationError, Operation, Violation, check_history

__all__ = [
    "EventRecorder",
    "Gate",
    "History",
    "HistoryReport",
    "HistoryViolationError",
    "Operation",
    "Violation",
    "check_history",
    "RecordingContext",
    "ScriptError",
    "ScriptedProvider",
    "ScriptedTools",
]


class ScriptError(LiveSteeringError, AssertionError):
    """A scripted fixture was driven past its script (a test bug, reported loudly)."""


class Gate:
    """A point a fixture stops at until the test releases it.

    The fixture calls ``await gate.passage()``; the test ``await gate.wait_reached()``,
    does its thing (submit a steer, cancel a scope), then ``gate.release()``.
    Releasing before the fixture arrives lets it pass straight through.
    """

    def __init__(self) -> None:
        self._reached = anyio.Event()
        self._released = anyio.Event()

    @property
    def reached(self) -> bool:
        """True once the fixture arrived at the gate."""
        return self._reached.is_set()

    @property
    def released(self) -> bool:
        return self._released.is_set()

    async def wait_reached(self) -> None:
        """Wait until the fixture is parked at the gate."""
        await self._reached.wait()

    def release(self) -> None:
        """Let the fixture go on (idempotent)."""
        self._released.set()

    async def passage(self) -> None:
        """Called by the fixture: announce arrival, then wait for release."""
        self._reached.set()
        await self._released.wait()


class _Gates:
    """Gates keyed by the index of the call they hold."""

    def __init__(self) -> None:
        self._gates: dict[Any, Gate] = {}

    def gate(self, key: Any) -> Gate:
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gates[key] = Gate()
        return gate

    async def pass_through(self, key: Any) -> None:
        gate = self._gates.get(key)
        if gate is not None:
            await gate.passage()


class ScriptedProvider:
    """A provider that answers from a script and records every request it got.

    ``replies`` are returned in order, one per call; a plain string is a text
    reply. Past the end, ``then`` is returned if given, else ``ScriptError``.
    ``gate(n)`` holds call ``n`` (0-based) after its request was recorded and
    before the reply returns: the model call is "in flight" while held.
    """

    def __init__(self, replies: Iterable[Reply | str], *, then: Reply | str | None = None) -> None:
        self._replies = collections.deque(_reply(r) for r in replies)
        self._then = None if then is None else _reply(then)
        self._gates = _Gates()
        self.requests: list[tuple[ContextEntry, ...]] = []
        """Every request received, as sent (immutable snapshots)."""

    def gate(self, call_index: int) -> Gate:
        """The gate holding call ``call_index`` (0-based) while it is in flight."""
        return self._gates.gate(call_index)

    @property
    def calls(self) -> int:
        return len(self.requests)

    async def complete(self, request: Sequence[ContextEntry]) -> Reply:
        index = len(self.requests)
        self.requests.append(tuple(request))
        await self._gates.pass_through(index)
        await anyio.lowlevel.checkpoint()
        if self._replies:
            return self._replies.popleft()
        if self._then is not None:
            return self._then
        raise ScriptError(f"scripted provider has no reply for call {index}")

    def texts_of(self, call_index: int, role: str | None = None) -> list[str]:
        """The entry texts of request ``call_index``, optionally only of one role."""
        return [e.text for e in self.requests[call_index] if role is None or e.role == role]


def _reply(value: Reply | str) -> Reply:
    return Reply(value) if isinstance(value, str) else value


class ScriptedTools:
    """Tools that return scripted results and record every call.

    ``results`` maps a tool name to its result text (or a function of the call).
    ``gate(name, n)`` holds the ``n``-th call (0-based) of that tool while it runs.
    """

    def __init__(self, results: Mapping[str, str | Callable[[ToolCall], str]]) -> None:
        self._results = dict(results)
        self._gates = _Gates()
        self._counts: collections.Counter[str] = collections.Counter()
        self.calls: list[ToolCall] = []

    def gate(self, name: str, call_index: int = 0) -> Gate:
        return self._gates.gate((name, call_index))

    async def run(self, call: ToolCall) -> str:
        index = self._counts[call.name]
        self._counts[call.name] += 1
        self.calls.append(call)
        await self._gates.pass_through((call.name, index))
        await anyio.lowlevel.checkpoint()
        result = self._results.get(call.name)
        if result is None:
            raise ScriptError(f"scripted tools have no tool named {call.name!r}")
        return result if isinstance(result, str) else result(call)


class RecordingContext(Context):
    """An in-memory ``Context`` whose steer writes can be held or made to fail.

    ``gate_write(n)`` holds the ``n``-th steer write (0-based) *before* it takes
    effect: cancel the generation there to interrupt a write. ``fail_write(n, exc)``
    makes it raise instead. ``steers()`` lists the steer entries with metadata.
    """

    def __init__(self) -> None:
        super().__init__()
        self._gates = _Gates()
        self._failures: dict[int, BaseException] = {}
        self.writes_started = 0

    def gate_write(self, write_index: int) -> Gate:
        return self._gates.gate(write_index)

    def fail_write(self, write_index: int, error: BaseException) -> None:
        self._failures[write_index] = error

    async def add_steer(self, input: Input, metadata: Mapping[str, Any]) -> None:
        index = self.writes_started
        self.writes_started += 1
        await self._gates.pass_through(index)
        failure = self._failures.pop(index, None)
        if failure is not None:
            raise failure
        # as the reference loop's ``Context``: a follow-up is the next turn's request (C29)
        self.add("user" if metadata.get("kind") == FOLLOW_UP else "steer", input.text, metadata)

    def steers(self) -> list[ContextEntry]:
        return [e for e in self.entries if e.role == "steer"]

    def steer_ids(self) -> list[str]:
        return [str(e.metadata["input_id"]) for e in self.steers()]


class EventRecorder:
    """Records every event of a runtime, in order, with helpers to assert on the stream.

    >>> recorder = EventRecorder.attach(runtime)               # doctest: +SKIP
    >>> recorder.types()                                       # doctest: +SKIP
    ['generation.started', 'steering.accepted', ...]
    """

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._waiters: list[tuple[Callable[[Event], bool], anyio.Event]] = []
        self.detach: Callable[[], None] = lambda: None

    @classmethod
    def attach(cls, runtime: Any) -> EventRecorder:
        """A recorder listening to ``runtime`` (a ``LiveRuntime``) from now on."""
        recorder = cls()
        recorder.detach = runtime.add_listener(recorder)
        return recorder

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        for predicate, ready in self._waiters:
            if not ready.is_set() and predicate(event):
                ready.set()

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    def of_type(self, *types: str) -> list[Event]:
        return [e for e in self.events if e["type"] in types]

    def count(self, type_: str) -> int:
        return sum(1 for e in self.events if e["type"] == type_)

    def for_input(self, input_id: str) -> list[Event]:
        """Events about one input (accepted, applied, held, ...), in order."""
        return [e for e in self.events if e.get("input_id") == input_id]

    def dispositions(self, input_id: str) -> list[str]:
        """The disposition path of one input as the stream tells it, e.g. ``['queued', 'applied']``."""
        path = []
        for event in self.for_input(input_id):
            disposition = _DISPOSITION_EVENTS.get(event["type"])
            if disposition is not None:
                path.append(disposition)
        return path

    def assert_order(self, *types: str) -> None:
        """Assert the stream contains ``types`` as a subsequence, in this order."""
        it = iter(self.types())
        missing = [t for t in types if not any(seen == t for seen in it)]
        if missing:
            raise AssertionError(f"events {list(types)} not in order in {self.types()}")

    async def wait_for(self, type_: str, **fields: Any) -> Event:
        """Wait for the first event (past or future) of ``type_`` whose fields match."""

        def matches(event: Event) -> bool:
            return event["type"] == type_ and all(event.get(k) == v for k, v in fields.items())

        for event in self.events:
            if matches(event):
                return event
        ready = anyio.Event()
        entry = (matches, ready)
        self._waiters.append(entry)
        try:
            await ready.wait()
        finally:
            self._waiters.remove(entry)
        return next(e for e in self.events if matches(e))


_DISPOSITION_EVENTS = {
    "steering.accepted": "queued",
    "steering.applied": "applied",
    "steering.held": "held",
    "steering.unknown": "unknown",
}
