"""Load through a real server: many HTTP clients steering one owned session while SSE subscribers
watch it. Every receipt is checked whole with the library's history checker (C4-C20 against the
owner runtime's own events), and every subscriber sees every event of the session once, in order,
across a forced reconnect (Last-Event-ID).

The default run is sized for a shared 2-core machine (40 clients x 10 steers, 20 subscribers);
``--runslow`` runs the issue's counts (200 clients x 50 steers, 100 subscribers).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sqlite3
import sys
import tracemalloc
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from http_helpers import AUTH, TOKEN, serving, sse_stream
from live_steering import Disposition, Input, LiveRuntime, Receipt
from live_steering.fleet import SQLiteFleet
from live_steering.http import _events, create_app
from live_steering.http._stores import CHANGES_PAGE, FleetView
from live_steering.testing import History

pytestmark = pytest.mark.anyio


def _receipt(wire: Mapping[str, Any]) -> Receipt:
    disposition = wire["disposition"]
    return Receipt(
        wire["accepted"],
        wire["inputId"],
        wire["generationId"],
        None if disposition is None else Disposition(disposition),
        wire.get("reason"),
    )


def _feeds(app: Any) -> Any:
    """The app's per-session feeds (its ``Feeds``), found through a route's bound endpoint."""
    for route in app.app.routes:
        # the API's bound method, under the wrapper that answers 503 for a store away
        owner = getattr(inspect.unwrap(route.endpoint), "__self__", None)
        if owner is not None and hasattr(owner, "feeds"):
            return owner.feeds
    raise AssertionError("no feeds")


#: What the server may still hold, live, once every steer is answered (the subscribers still
#: connected, those behind reading the store): a base (the feed's shared tail, the routes) plus,
#: per subscriber, its stream (``STREAM_BYTES``: its generators and closures, the SSE record in
#: flight; about 5 KB measured) and the one page of events it may have in flight, read from the
#: store. The page is measured in the run (``_page_bytes``): a full page of this run's events,
#: rows and dicts, about 680 bytes an event, so 340 KB for the 500 of ``_events.PAGE`` (an
#: estimate of 130 KB here made the bound fail on a loaded machine, 2026-12-06). What it rules
#: out: anything that grows with the events sent, per subscriber, such as a copy of each event a
#: stream sent (1.0 MB measured at the default size, over a bound of 0.6 MB). A stream that kept
#: references to the shared tail's events would hold the run's ~1,200 events once (about 0.4 MB
#: with the 16-event pages below) and is not told apart at the default size.
SERVER_BASE_BYTES = 200_000
STREAM_BYTES = 8_000
#: Untraced (the issue's size runs too long under ``tracemalloc``), the process's resident memory
#: may grow by this much from the server's start to the moment every steer is answered: what the
#: test itself keeps per steer (its history, receipts, ids: about 10,000 of each) and the 300
#: connections' buffers, far under what one kept buffer of the run's events per subscriber would
#: take (about 8 MB each, 800 MB for 100 subscribers).
PROCESS_GROWTH_BYTES = 300_000_000


def _resident_bytes() -> int:
    """The process's resident set (Linux's ``/proc/self/statm``)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _page_bytes(path: str, session_id: str) -> int:
    """Traced bytes of one full page of the session's events as the server reads it from the store
    (the oldest ``_events.PAGE``, rows and event dicts: a subscriber behind the shared tail holds
    one such page). Read and built here without an await, so nothing else allocates meanwhile."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        before = tracemalloc.get_traced_memory()[0]
        rows = db.execute(CHANGES_PAGE, (session_id, 0, _events.PAGE)).fetchall()
        page = [FleetView._event(row) for row in rows]
        held = tracemalloc.get_traced_memory()[0] - before
    assert len(page) == _events.PAGE, len(page)  # the run wrote more than a page: the page is full
    return held


def _server_bytes(snapshot: tracemalloc.Snapshot) -> int:
    """Bytes still allocated from the HTTP server's own code (live_steering.http)."""
    here = f"*{os.sep}live_steering{os.sep}http{os.sep}*"
    server = snapshot.filter_traces([tracemalloc.Filter(True, here)])
    return sum(stat.size for stat in server.statistics("filename"))


async def _load(tmp_path: Path, clients: int, steers: int, subscribers: int, bound: float = 600) -> int:
    """Run the load; returns the bytes the server still held at its peak of subscribers."""
    path = str(tmp_path / "fleet.db")
    total = clients * steers
    written: list[str] = []

    def write(steer: Input, metadata: Mapping[str, Any]) -> None:
        written.append(steer.id)

    async with (
        SQLiteFleet(path, node_id="worker") as worker,
        SQLiteFleet(path, node_id="server") as node,
        worker.own(LiveRuntime(session_id="load", identity_limit=total + 10)) as runtime,
    ):
        history = History.attach(runtime)
        app = create_app(fleet=node, token=TOKEN, poll_interval=0.05)
        async with runtime.open_generation("gen-1") as gen, serving(app) as url:
            await worker.flush("load")
            stop_loop = anyio.Event()

            async def loop() -> None:
                while await gen.wait_for_input():
                    await gen.boundary(write)
                stop_loop.set()

            seen: list[list[int]] = [[] for _ in range(subscribers)]
            done_sending = anyio.Event()
            scopes = [anyio.CancelScope() for _ in range(subscribers)]

            async def subscriber(n: int) -> None:
                with scopes[n]:  # cancelled once it has every event, if it had them all already
                    await follow(n)

            async def follow(n: int) -> None:
                cursor: int | None = None
                reconnected = False
                while True:
                    headers = dict(AUTH) if cursor is None else {**AUTH, "Last-Event-ID": str(cursor)}
                    async with sse_stream(url, "/v1/sessions/load/events", headers) as stream:
                        while True:
                            (record,) = await stream.read(1)
                            if "id" not in record:
                                continue
                            cursor = int(record["id"])
                            seen[n].append(cursor)
                            if not reconnected and len(seen[n]) == 10 + n:
                                reconnected = True  # drop the connection: resume must cover it
                                break
                            if done_sending.is_set() and len(seen[n]) >= expected_count[0]:
                                return

            expected_count = [10**9]
            resident_before = _resident_bytes() if sys.platform == "linux" else 0

            async def client(c: int, http: httpx.AsyncClient) -> None:
                for s in range(steers):
                    steer = Input("steer", f"steer {c}.{s}", id=f"c{c}-s{s}")
                    op = history.invoke(steer, "gen-1")
                    answer = await http.post(
                        "/v1/sessions/load/inputs",
                        json={"kind": "steer", "text": steer.text, "id": steer.id},
                    )
                    history.complete(op, _receipt(answer.json()))
                    assert answer.status_code == 200, answer.text

            limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
            async with (
                httpx.AsyncClient(base_url=url, headers=AUTH, timeout=120, limits=limits) as http,
                anyio.create_task_group() as tg,
            ):
                tg.start_soon(loop)
                with anyio.fail_after(bound):
                    async with anyio.create_task_group() as watchers:
                        for n in range(subscribers):
                            watchers.start_soon(subscriber, n)
                        async with anyio.create_task_group() as senders:
                            for c in range(clients):
                                senders.start_soon(client, c, http)
                        # every steer answered: wait until each is applied, then count the log
                        for c in range(clients):
                            for s in range(steers):
                                await worker.wait_final("load", f"c{c}-s{s}")
                        await worker.flush("load")
                        with sqlite3.connect(path) as db:
                            stored = [
                                row[0]
                                for row in db.execute(
                                    "SELECT id FROM ls_changes WHERE session_id = 'load' ORDER BY id"
                                )
                            ]
                        expected_count[0] = len(stored)
                        if tracemalloc.is_tracing():
                            held = _server_bytes(tracemalloc.take_snapshot())
                            bound = SERVER_BASE_BYTES + subscribers * (
                                STREAM_BYTES + _page_bytes(path, "load")
                            )
                        elif sys.platform == "linux":
                            grown = _resident_bytes() - resident_before
                            print(f"resident memory grew by {grown:,} bytes")
                            assert grown <= PROCESS_GROWTH_BYTES, grown
                            held = bound = 0
                        else:
                            held = bound = 0
                        done_sending.set()
                        # A subscriber that read every event before this waits for a record that
                        # never comes (it checks on each record): it is done. The others finish
                        # on their own once their last record arrives. One loop: no race between.
                        for n in range(subscribers):
                            if len(seen[n]) >= expected_count[0]:
                                scopes[n].cancel()
                        feeds = _feeds(app)
                        assert all(len(f.recent) <= _events.RECENT for f in feeds._feeds.values())
                gen.stop()
                await stop_loop.wait()
    assert feeds._feeds == {}  # every subscriber gone: no feed is kept
    history.detach()
    assert sorted(written) == sorted(f"c{c}-s{s}" for c in range(clients) for s in range(steers))
    report = history.check(require_final=True)
    report.assert_ok()
    for ids in seen:
        assert ids == stored  # every event once, in order, none missing, across the reconnect
    assert held <= bound, (held, bound)
    return held


@pytest.fixture
def traced() -> Iterator[None]:
    """Trace allocations for the test (what the server holds is read from a snapshot)."""
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


async def test_many_clients_and_subscribers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, traced: None
) -> None:
    """40 clients x 10 steers and 20 subscribers: honest receipts, no subscriber loses an event;
    with a feed of 64 events (of about 1,200), subscribers that fall behind read the store, 16
    events a page, and the feed's memory stays bounded, as does all the server holds (traced)."""
    monkeypatch.setattr(_events, "RECENT", 64)
    monkeypatch.setattr(_events, "PAGE", 16)
    held = await _load(tmp_path, clients=40, steers=10, subscribers=20)
    print(f"the server held {held:,} bytes with 20 subscribers after 400 steers")


@pytest.mark.slow
async def test_the_issues_load(tmp_path: Path) -> None:
    """200 clients x 50 steers into one owned session, 100 SSE subscribers (issue 23's counts)."""
    # one process plays server, owner, 200 clients and 100 subscribers: over 10 minutes on a busy
    # 2-core machine (a bound against a hang, never a measurement)
    # untraced (tracemalloc makes it over twice as slow): its memory is the process's resident set,
    # which grew 141 MB on asyncio and 158 MB on trio, most of it the subscribers' own lists of
    # the 30,000 ids they saw (docs/http.md); it passed in 18-21 min on asyncio and 23-46 min on
    # trio (load average 2-5), once hypercorn listened with a backlog of 2048
    await _load(tmp_path, clients=200, steers=50, subscribers=100, bound=3600)
