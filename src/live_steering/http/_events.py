"""A session's event stream over Server-Sent Events: ``id:`` = the event's sequence (C32).

Theory of operation
-------------------
The stores are the log: every event a subscriber gets was read from a store, so a
stream resumed with ``Last-Event-ID: N`` (or ``?after=N``) continues with the first event
after N, on any server of the fleet, after any restart: no duplicates (only sequences
above the cursor are sent, in order) and no gaps (a session's sequences are committed in
order, see ``_stores.py``).

One ``Feed`` per session serves all its subscribers from memory: whichever subscriber
finds nothing new polls the store (one at a time; the others wait on the feed's
``changed`` event), appends what it read to ``recent`` (bounded: ``RECENT`` events) and
wakes the rest. A subscriber whose cursor is older than what ``recent`` holds reads the
store itself, page by page, until it catches up. Memory per session is therefore
bounded, whatever the number of subscribers, and a slow subscriber only falls back to
the store, never holds anyone else up.

A session's description (its running generation, its owner's liveness: what ``GET
/v1/sessions/{session}`` answers) is not an event row: starting or ending a generation with
nothing queued writes none. So each poll also reads the description, once per session
whatever the number of subscribers, and a change wakes every subscriber with a
``SessionChanged`` (the stream's ``event: session`` record) within one poll interval.

When the store no longer holds the event a client resumes from (its rows were pruned,
or the id is not one of the session's), the stream opens with one ``event: reset``
record (``{"type": "stream.reset", "last_event_id": N, "reason": "not-in-log"}``, no
``id:``) and continues with what the store holds after N: the client should re-read the
receipts it cares about (``GET .../inputs/{id}``).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Final

import anyio

#: Events a feed keeps in memory per session.
RECENT: Final = 2_048
#: Events read from a store in one page.
PAGE: Final = 500

Reader = Callable[[int, int], Awaitable[list[dict[str, Any]]]]
Describer = Callable[[], Awaitable[dict[str, Any] | None]]


class SessionChanged:
    """What a subscriber gets when the session's description changed: the new one."""

    __slots__ = ("description",)

    def __init__(self, description: dict[str, Any]) -> None:
        self.description = description


class Feed:
    """The shared tail of one session's log; see the module docs."""

    def __init__(self, read: Reader, poll_interval: float, describe: Describer | None = None) -> None:
        self.read = read
        self.describe = describe
        self.description: dict[str, Any] | None = None
        """The session's description as the last poll read it (``None``: none read yet, or gone)."""
        self.described_at = float("-inf")
        """When the read that gave ``description`` started (``anyio.current_time()``)."""
        self.version = 0
        """How many times the description changed: a subscriber compares it with what it saw."""
        self.poll_interval = poll_interval
        self.recent: list[dict[str, Any]] = []
        self.ids: list[int] = []
        self.floor: int | None = None
        """Every event of the session with a sequence above ``floor`` (up to ``last``) is in ``recent``."""
        self.last = 0
        self.changed = anyio.Event()
        self.nudged = anyio.Event()
        self.polling = False
        self.subscribers = 0
        self.closed = False

    def close(self) -> None:
        """End every subscriber's wait at once: the server is shutting down (``Feeds.close``)."""
        self.closed = True
        self.nudged.set()
        self.changed.set()

    def nudge(self) -> None:
        """Something was just submitted here: poll now rather than at the next interval."""
        self.nudged.set()

    def _append(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            if event["sequence"] > self.last:
                self.recent.append(event)
                self.ids.append(event["sequence"])
                self.last = event["sequence"]
        if len(self.recent) > RECENT:
            cut = len(self.recent) - RECENT
            self.floor = self.ids[cut - 1]
            del self.recent[:cut], self.ids[:cut]
        changed, self.changed = self.changed, anyio.Event()
        changed.set()

    async def _poll(self) -> None:
        await self._read_events()
        if self.describe is not None:  # after the events: their subscribers are woken already
            started = anyio.current_time()
            now = await self.describe()
            if now is not None and now != self.description:
                self.description = now
                self.described_at = started
                self.version += 1

    async def _read_events(self) -> None:
        if self.floor is None:
            # first poll: start the shared tail at what exists now (history is read from the store)
            events = await self.read(0, PAGE)
            while len(events) == PAGE:
                more = await self.read(events[-1]["sequence"], PAGE)
                events = events[-1:] + more
            self.last = events[-1]["sequence"] if events else 0
            self.floor = self.last
            changed, self.changed = self.changed, anyio.Event()
            changed.set()
            return
        events = await self.read(self.last, PAGE)
        if events:
            self._append(events)

    async def after(self, cursor: int, version: int = -1) -> list[dict[str, Any]]:
        """Events above ``cursor`` (at most a page), waiting for the next poll if none is known;
        ``[]`` at once when the description's ``version`` moved past the one given."""
        while True:
            if self.closed or (version >= 0 and self.version != version):
                return []
            if self.floor is not None and cursor >= self.floor:
                at = bisect.bisect_right(self.ids, cursor)
                if at < len(self.ids):
                    return self.recent[at : at + PAGE]
            elif self.floor is not None:
                return await self.read(cursor, PAGE)  # behind the shared tail: from the store
            if not self.polling:
                self.polling = True
                try:
                    await self._poll()
                    if self.floor is not None and cursor < self.floor:
                        continue
                    if self.last <= cursor and (version < 0 or self.version == version):
                        with anyio.move_on_after(self.poll_interval):
                            await self.nudged.wait()
                        self.nudged = anyio.Event()
                finally:
                    self.polling = False
                    changed, self.changed = self.changed, anyio.Event()
                    changed.set()  # a waiter takes over the polling if this task leaves
            else:
                await self.changed.wait()


class Feeds:
    """Every session's feed, created on the first subscriber and dropped after the last."""

    def __init__(self, poll_interval: float) -> None:
        self.poll_interval = poll_interval
        self._feeds: dict[tuple[str, str], Feed] = {}
        self.closed = False
        self._closing: anyio.Event | None = None

    def close(self) -> None:
        """End every stream, now and from now on: each subscription returns (its response ends
        cleanly) instead of waiting to be cancelled by a server shutting down; every long poll
        (``?wait=``) answers at once."""
        self.closed = True
        for feed in self._feeds.values():
            feed.close()
        if self._closing is not None:
            self._closing.set()

    async def waited(self, seconds: float, waiting: Callable[[], Awaitable[object]]) -> None:
        """Run ``waiting()`` for up to ``seconds``, or until ``close()``: a long poll open when
        the server begins to shut down answers then, instead of being cancelled by it."""
        if self.closed:
            return
        if self._closing is None:
            self._closing = anyio.Event()  # made here, in the server's event loop
        closing = self._closing
        async with anyio.create_task_group() as tg:

            async def end_on_close() -> None:
                await closing.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(end_on_close)
            with anyio.move_on_after(seconds):
                await waiting()
            tg.cancel_scope.cancel()

    def get(self, key: tuple[str, str]) -> Feed | None:
        return self._feeds.get(key)

    async def subscribe(
        self,
        key: tuple[str, str],
        read: Reader,
        cursor: int,
        heartbeat: float,
        describe: Describer | None = None,
        described: dict[str, Any] | None = None,
        since: float = float("-inf"),
    ) -> AsyncGenerator[dict[str, Any] | SessionChanged | None, None]:
        """Events above ``cursor`` as they come; ``None`` when ``heartbeat`` seconds pass without
        one; a ``SessionChanged`` when the session's description (``describe()``, polled with
        the events) differs from the last one this subscriber got: ``described``, read from
        ``since`` on. Only a description read after that is newer, so none older is ever sent
        (the descriptions a subscriber gets never step back)."""
        if self.closed:
            return
        feed = self._feeds.get(key)
        if feed is None:
            feed = self._feeds[key] = Feed(read, self.poll_interval, describe)
        feed.subscribers += 1
        seen = feed.version
        try:
            while not feed.closed:
                if seen != feed.version:
                    seen = feed.version
                    now = feed.description
                    if now is not None and now != described and feed.described_at >= since:
                        described = now
                        yield SessionChanged(now)
                events: list[dict[str, Any]] = []
                with anyio.move_on_after(heartbeat):
                    events = await feed.after(cursor, seen if feed.describe is not None else -1)
                if not events:
                    if feed.version == seen and not feed.closed:
                        yield None  # the heartbeat, not a change
                    continue
                for event in events:
                    cursor = event["sequence"]
                    yield event
        finally:
            feed.subscribers -= 1
            if feed.subscribers == 0 and self._feeds.get(key) is feed:
                del self._feeds[key]


def sse(event: dict[str, Any], *, name: str | None = None, with_id: bool = True) -> bytes:
    """One SSE record: ``id:`` (the sequence), ``event:`` (the type), one ``data:`` line of JSON."""
    lines = []
    if with_id:
        lines.append(f"id: {event['sequence']}")
    lines.append(f"event: {name or event['type']}")
    # ASCII JSON: one line whatever the text holds (a newline would end the data field)
    lines.append("data: " + json.dumps(event, ensure_ascii=True, separators=(",", ":")))
    return ("\n".join(lines) + "\n\n").encode("ascii")


def parse_cursor(value: str | None) -> int | None:
    """A ``Last-Event-ID`` / ``?after=`` value: a non-negative integer, else ``None`` (ignored).

    A number too long for any sequence is one the log never held, as the largest 18-digit one
    is: the stream opens with its ``reset`` record (it replayed the whole log without one)."""
    if value is None:
        return None
    value = value.strip()
    if not value.isascii() or not value.isdigit():
        return None
    return int(value) if len(value) <= 18 else _NEVER_AN_EVENT


#: The cursor of a ``Last-Event-ID`` longer than 18 digits: beyond every event a log can hold.
_NEVER_AN_EVENT: Final = 10**18 - 1
