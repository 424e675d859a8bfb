"""The SQLite store's worker threads (``fleet._threads``): a call's result and exception come back,
a cancelled caller waits for its call to end, idle threads are reused and end after their idle
time, and the wake-ups a committing thread owes are sent from that thread.

Both anyio backends; races are scripted with ``threading.Event`` gates and
``wait_all_tasks_blocked``, never sleeps.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from fleet_helpers import new_session
from live_steering import Disposition, Input, LiveRuntime
from live_steering.fleet import FleetError, SQLiteFleet, _sqlite, _threads
from live_steering.fleet._sqlite import SQLiteConnection, node_socket

pytestmark = pytest.mark.anyio


async def test_a_call_returns_its_result_from_another_thread() -> None:
    threads: list[threading.Thread] = []

    def work(a: int, b: int) -> int:
        threads.append(threading.current_thread())
        return a * b

    assert await _threads.run_sync(work, 6, 7) == 42
    assert threads[0] is not threading.current_thread()


async def test_a_call_raises_its_exception_in_the_caller() -> None:
    def fail() -> None:
        raise LookupError("no such row")

    with pytest.raises(LookupError, match="no such row"):
        await _threads.run_sync(fail)
    assert await _threads.run_sync(lambda: "next") == "next"  # the thread serves on


async def test_an_idle_thread_is_reused() -> None:
    seen: set[int] = set()
    for _ in range(5):
        seen.add(await _threads.run_sync(threading.get_ident))
    assert len(seen) == 1


async def test_concurrent_calls_each_get_their_own_thread_and_outcome() -> None:
    gate = threading.Event()
    results: dict[int, int] = {}

    def wait_then(n: int) -> int:
        gate.wait()
        return n * 10

    async def call(n: int) -> None:
        results[n] = await _threads.run_sync(wait_then, n)

    async with anyio.create_task_group() as tg:
        for n in range(4):
            tg.start_soon(call, n)
        try:
            await anyio.wait_all_tasks_blocked()
            assert results == {}  # all four wait on their threads, the loop runs on
        finally:
            gate.set()  # also when the assertion fails: else the calls would never end
    assert results == {0: 0, 1: 10, 2: 20, 3: 30}


async def test_a_cancelled_caller_waits_for_the_call_to_end() -> None:
    """Cancelling the caller never leaves its call running behind it (the connection it uses would
    be in use by a thread nobody waits for): the caller waits, then raises the cancellation."""
    started, release = threading.Event(), threading.Event()
    ended: list[str] = []

    def slow() -> str:
        started.set()
        release.wait()
        ended.append("call")
        return "done"

    scope = anyio.CancelScope()

    async def caller() -> None:
        with scope:
            try:
                await _threads.run_sync(slow)
            finally:
                ended.append("caller")

    async with anyio.create_task_group() as tg:
        tg.start_soon(caller)
        await anyio.to_thread.run_sync(started.wait)
        scope.cancel()
        try:
            await anyio.wait_all_tasks_blocked()
            assert ended == []  # cancelled, and still waiting for its call
        finally:
            release.set()
    assert ended == ["call", "caller"]
    assert await _threads.run_sync(lambda: "free") == "free"  # the thread is usable again


async def test_an_idle_thread_ends_after_its_idle_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_threads, "IDLE_SECONDS", 0.01)
    ident = await _threads.run_sync(threading.get_ident)
    [worker] = [w for w in _threads._idle if w.thread.ident == ident]
    await anyio.to_thread.run_sync(worker.thread.join, 5.0)
    assert not worker.thread.is_alive()
    assert worker not in _threads._idle
    assert await _threads.run_sync(lambda: "new thread") == "new thread"


async def test_a_committing_thread_sends_the_wake_ups_it_owes(tmp_path: Path) -> None:
    """The reply datagram leaves from the thread that made the commit, before its result reaches
    the event loop: a requester in another process is woken one hand-off sooner."""
    path = str(tmp_path / "fleet.db")
    conn = SQLiteConnection(path)
    os.makedirs(os.path.dirname(node_socket(path, "requester")), mode=0o700, exist_ok=True)
    inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    inbox.bind(node_socket(path, "requester"))
    senders: list[threading.Thread] = []
    send = conn._send

    def spy(node_id: str, payload: str) -> None:
        senders.append(threading.current_thread())
        send(node_id, payload)

    conn._send = spy  # type: ignore[method-assign]
    try:
        conn.ensure_schema()

        def transaction() -> None:
            conn.begin()
            conn.notify("requester", "r1 payload")
            conn.commit()

        await conn._then_wake(transaction)
        assert inbox.recv(100) == b"r1 payload"
        assert len(senders) == 1
        assert senders[0] is not threading.current_thread()
    finally:
        inbox.close()
        os.unlink(node_socket(path, "requester"))
        conn.close()


async def test_the_listener_reads_every_wake_up_of_a_burst(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More wake-ups waiting than one step of the listener reads (``_DRAIN``): none is lost, the
    rest are read after a yield, in the order sent."""
    monkeypatch.setattr(_sqlite, "_DRAIN", 3)
    path = str(tmp_path / "fleet.db")
    session = new_session()
    async with SQLiteFleet(path, node_id="owner") as owner, owner.own(LiveRuntime(session_id=session)):
        seen: list[str] = []
        dispatch = owner._dispatch

        def spy(payload: str) -> None:
            seen.append(payload)
            dispatch(payload)

        owner._dispatch = spy  # type: ignore[method-assign]
        sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            # sent while the listener cannot run: all of them wait in the socket at once (fewer
            # than Linux's default queue of 10 datagrams, net.unix.max_dgram_qlen)
            for n in range(8):
                sender.sendto(f"w{session}-{n}".encode(), node_socket(path, "owner"))
        finally:
            sender.close()
        with anyio.fail_after(5):
            while len(seen) < 8:
                await anyio.lowlevel.checkpoint()
        assert seen == [f"w{session}-{n}" for n in range(8)]
        owner._dispatch = dispatch  # type: ignore[method-assign]


async def test_an_interrupted_caller_waits_for_its_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyboardInterrupt at the caller's wait (trio raises Ctrl-C at the main task's checkpoint)
    is raised once the call ended, its worker given back: the call's connection is never closed
    under it (which crashed the process: SIGSEGV in sqlite3)."""
    started, release = threading.Event(), threading.Event()
    ended: list[str] = []
    real_wait = anyio.wait_readable
    interrupts = [KeyboardInterrupt()]

    async def wait_readable(obj: socket.socket) -> None:
        if interrupts:
            await anyio.to_thread.run_sync(started.wait)
            release.set()  # the call may end now; the caller is interrupted first
            raise interrupts.pop()
        await real_wait(obj)

    monkeypatch.setattr(anyio, "wait_readable", wait_readable)

    def slow() -> str:
        release.wait()
        ended.append("call")
        return "done"

    def start_then_slow() -> str:
        started.set()
        return slow()

    async def caller() -> None:
        try:
            await _threads.run_sync(start_then_slow)
        finally:
            ended.append("caller")

    with pytest.raises(KeyboardInterrupt):
        await caller()
    assert ended == ["call", "caller"]
    assert await _threads.run_sync(lambda: "free") == "free"


async def test_calls_beyond_the_pool_run_on_anyio_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """At most MAX_THREADS pool threads exist; the calls beyond them still run, on anyio's threads."""
    idle, alive = len(_threads._idle), _threads._alive  # left by earlier tests: reused first
    monkeypatch.setattr(_threads, "MAX_THREADS", alive + 2)
    gate, running = threading.Event(), threading.Semaphore(0)
    names: dict[int, str] = {}

    def wait_then(n: int) -> int:
        names[n] = threading.current_thread().name
        running.release()
        gate.wait()
        return n

    results: dict[int, int] = {}

    async def call(n: int) -> None:
        results[n] = await _threads.run_sync(wait_then, n)

    async with anyio.create_task_group() as tg:
        for n in range(idle + 5):
            tg.start_soon(call, n)
        try:
            for _ in range(idle + 5):  # every call has started on its thread (bounded wait)
                assert await anyio.to_thread.run_sync(running.acquire, True, 10.0)
            assert list(names.values()).count("live-steering-commit") == idle + 2  # 3 on anyio's
        finally:
            gate.set()
    assert results == {n: n for n in range(idle + 5)}
    assert _threads._alive <= alive + 2  # (an idle worker of an earlier test may have retired)


async def test_a_refused_thread_or_socket_pair_falls_back_to_anyio(monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of descriptors (EMFILE) for a new worker: the call runs on anyio's threads instead of
    failing the owner's commit."""
    monkeypatch.setattr(_threads, "_idle", [])
    monkeypatch.setattr(_threads, "_alive", 0)

    def no_descriptors() -> None:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(_threads, "_Worker", no_descriptors)
    assert await _threads.run_sync(lambda: threading.current_thread().name) != "live-steering-commit"
    assert _threads._alive == 0  # the refused worker is not counted


async def test_a_malformed_wake_up_never_ends_the_node(tmp_path: Path) -> None:
    """Any local process can send to a node's socket: bytes that are not UTF-8, or a reply too
    deeply nested to parse, are ignored (logged) and the node goes on answering."""
    path = str(tmp_path / "fleet.db")
    session = new_session()
    async with (
        SQLiteFleet(path, node_id="owner") as owner,
        owner.own(LiveRuntime(session_id=session)) as runtime,
        runtime.open_generation("g1") as gen,
        SQLiteFleet(path, node_id="host") as host,
    ):
        await owner.flush(session)
        sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            for target in ("owner", "host"):
                sender.sendto(b"\xff\xfe", node_socket(path, target))
                sender.sendto(b"r1 " + b"[" * 60_000, node_socket(path, target))
        finally:
            sender.close()
        for n in range(3):  # the listeners have read the bad ones by the second round trip
            receipt = await host.submit(session, Input("steer", "x", id=f"x{n}"), "g1")
            assert receipt.disposition is Disposition.QUEUED
        gen.stop()


async def test_a_node_id_bound_meanwhile_is_refused_and_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A socket bound by another process between the probe and the bind: the node refuses to open
    (FleetError naming the id) and leaves the other process's socket in place."""
    path = str(tmp_path / "fleet.db")
    taken = node_socket(path, "twin")
    os.makedirs(os.path.dirname(taken), mode=0o700, exist_ok=True)
    other = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    other.bind(taken)
    try:
        monkeypatch.setattr(SQLiteFleet, "_free_socket_path", lambda self: taken)  # the probe raced
        with pytest.raises(FleetError, match="'twin' is in use"):
            async with SQLiteFleet(path, node_id="twin"):
                pass
        assert await anyio.Path(taken).exists()
        other.sendto(b"", taken)  # still the other process's, and still bound
    finally:
        other.close()
        os.unlink(taken)
