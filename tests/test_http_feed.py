"""The shared feed behind a session's event stream (``http/_events.py``), driven directly: the
session descriptions a subscriber gets never step back, and ``close()`` ends every wait."""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import anyio
import pytest

from live_steering.http._events import Feeds, SessionChanged

pytestmark = pytest.mark.anyio

KEY = ("runtime", "chat-42")


class Store:
    """A session's store as a feed reads it: no events, and a description the test moves."""

    def __init__(self, generation: str) -> None:
        self.generation = generation

    async def read(self, after: int, limit: int) -> list[dict[str, Any]]:
        await anyio.lowlevel.checkpoint()
        return []

    async def describe(self) -> dict[str, Any]:
        await anyio.lowlevel.checkpoint()
        return {"generation": self.generation}


class Collector:
    """What one subscriber got: each description change by its generation, ``None`` a heartbeat."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._changed = anyio.Event()

    async def run(self, feeds: Feeds, store: Store, **options: Any) -> None:
        async with contextlib.aclosing(
            feeds.subscribe(KEY, store.read, 0, 3600, store.describe, **options)
        ) as items:
            async for item in items:
                self.items.append(
                    item.description["generation"] if isinstance(item, SessionChanged) else item
                )
                self._changed.set()
                self._changed = anyio.Event()

    async def until(self, last: str) -> None:
        while self.items[-1:] != [last]:
            await self._changed.wait()


async def test_a_new_subscriber_never_gets_an_older_description_than_its_own() -> None:
    """A polled the session at g1; the session moved to g2, and B opened reading g2 before the
    feed polled again. B must not be sent the feed's g1 (a step back); A gets g2, and both get
    g3 when it comes, once."""
    store, feeds = Store("g1"), Feeds(poll_interval=0.01)
    a, b = Collector(), Collector()
    with anyio.fail_after(30):  # polls run on their interval: bounded waits, not an order
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: a.run(feeds, store, described={"generation": "g1"}))
            await anyio.wait_all_tasks_blocked()  # A's first poll read g1, and A waits for the next
            store.generation = "g2"
            since = anyio.current_time()
            tg.start_soon(lambda: b.run(feeds, store, described={"generation": "g2"}, since=since))
            await a.until("g2")
            store.generation = "g3"
            await a.until("g3")
            await b.until("g3")
            feeds.close()
    assert a.items == ["g2", "g3"]
    assert b.items == ["g3"]


async def test_close_ends_every_subscription_now_and_later() -> None:
    """``close()`` ends each waiting subscriber (its response can end cleanly) without a
    heartbeat, and a subscription made after it ends at once."""
    store, feeds = Store("g1"), Feeds(poll_interval=3600)
    waiting = [Collector() for _ in range(3)]
    with anyio.fail_after(30):  # a poll interval and a heartbeat of an hour: only close ends them
        async with anyio.create_task_group() as tg:
            for collector in waiting:
                tg.start_soon(functools.partial(collector.run, feeds, store, described={"generation": "g1"}))
            await anyio.wait_all_tasks_blocked()
            feeds.close()
        late = Collector()
        await late.run(feeds, store)
    assert [c.items for c in [*waiting, late]] == [[], [], [], []]
