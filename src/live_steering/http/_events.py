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


class Feed:
    """The shared tail of one session's log; see the module docs."""

    def __init__(self, read: Reader, poll_interval: float) -> None:
        self.read = read
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

    async def after(self, cursor: int) -> list[dict[str, Any]]:
        """Events above ``cursor`` (at most a page), waiting for the next poll if none is known."""
        while True:
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
                    if self.last <= cursor:
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

    def get(self, key: tuple[str, str]) -> Feed | None:
        return self._feeds.get(key)

    async def subscribe(
        self, key: tuple[str, str], read: Reader, cursor: int, heartbeat: float
    ) -> AsyncGenerator[dict[str, Any] | None, None]:
        """Events above ``cursor`` as they come; ``None`` when ``heartbeat`` seconds pass without one."""
        feed = self._feeds.get(key)
        if feed is None:
            feed = self._feeds[key] = Feed(read, self.poll_interval)
        feed.subscribers += 1
        try:
            while True:
                events: list[dict[str, Any]] = []
                with anyio.move_on_after(heartbeat):
                    events = await feed.after(cursor)
                if not events:
                    yield None
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
    """A ``Last-Event-ID`` / ``?after=`` value: a non-negative integer, else ``None`` (ignored)."""
    if value is None:
        return None
    value = value.strip()
    if not value.isascii() or not value.isdigit() or len(value) > 18:
        return None
    return int(value)
