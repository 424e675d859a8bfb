"""The fleet across processes (C27, C28): owners killed and stopped, several submitting processes.

Each child is ``live_steering.testing._fleet_node`` on the test's anyio backend, stopped by
its pid at the end. Both stores, both backends; few and small children, so the file stays fast.
"""

from __future__ import annotations

import random
import signal
import time
from typing import Any

import anyio
import pytest

from fleet_helpers import BOUND, EXPECTED_REASONS, Child, FleetStore, LocalEngine, new_session, script, spawn
from live_steering import Disposition, Input, LiveRuntime

#: These tests leave generations with steers pending on purpose, to see them held across the
#: store (C17, C23); the library's warning for a forgotten checkpoint decision is not their subject.
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::live_steering.CheckpointDecisionWarning"),
]


async def _changes_of_epoch(store: FleetStore, session: str, epoch: int) -> int:
    def count() -> int:
        conn = store.connection()
        try:
            row = conn.execute(
                "SELECT count(*) FROM ls_changes WHERE session_id = ? AND epoch = ?", (session, epoch)
            ).fetchone()
            return int(row[0])
        finally:
            conn.close()

    return await anyio.to_thread.run_sync(count)


async def _hanging_owner(fleet_store: FleetStore, session: str, backend: str, *args: str) -> Child:
    """Owner ``w1`` of ``session`` whose writer hangs from its first input on (``--hang-after 0``)."""
    return await spawn(
        fleet_store, "owner", session, "--hang-after", "0", "--node", "w1", *args, backend=backend
    )


async def _x_writing_y_queued(host: Any, owner: Child, session: str) -> None:
    """From ``host``: steer x, which the owner (``--hang-after 0``) hangs writing, then steer y,
    queued behind it: x may be in a context, y is durable and was never handed to the writer."""
    x = await host.submit(session, Input("steer", "x", id="x"), "g1")
    assert x.disposition is Disposition.QUEUED
    assert (await owner.next("context.write"))["input_id"] == "x"
    y = await host.submit(session, Input("steer", "y", id="y"), "g1")
    assert y.disposition is Disposition.QUEUED


class ChildEngine:
    """The engine steps of the script, run by a ``scripted`` child that owns the session."""

    def __init__(self, child: Child) -> None:
        self.child = child

    async def _do(self, command: str) -> Any:
        assert self.child.process.stdin is not None
        await self.child.process.stdin.send(command.encode() + b"\n")
        done = await self.child.next("done")
        assert done["command"] == command.split()[0]
        return done["result"]

    async def open(self, generation_id: str) -> None:
        await self._do(f"open {generation_id}")

    async def boundary(self) -> None:
        await self._do("boundary")

    async def checkpoint(self) -> bool:
        return bool(await self._do("checkpoint"))

    async def stop(self) -> None:
        await self._do("stop")

    async def close(self) -> None:
        await self._do("close")


async def test_second_process_gets_the_in_process_receipts(
    fleet_store: FleetStore, anyio_backend: str
) -> None:
    """C27: the C6-C12, C16, C17 script, owned by a second process, gives the in-process receipts."""
    local = LiveRuntime(session_id="local", identity_limit=4)
    expected = await script(LocalEngine(local), local.submit_steering)
    session = new_session()
    owner = await spawn(fleet_store, "scripted", session, "--identity-limit", "4", backend=anyio_backend)
    try:
        await owner.next("owning")
        async with fleet_store.fleet("host") as host:
            capability = await host.capability(session)
            got = await script(ChildEngine(owner), capability["submit"])
        assert [r.to_dict() for r in got] == [r.to_dict() for r in expected]
        assert {r.reason for r in got if not r.accepted} >= EXPECTED_REASONS
    finally:
        await owner.kill()


async def test_owner_killed_is_taken_over_and_finalised(fleet_store: FleetStore, anyio_backend: str) -> None:
    """kill -9 of an owner mid-write: marked -> unknown, unwritten -> held (C23), by the taker (asyncio
    runs) or first by a host's wait_final (trio runs: each path once per store)."""
    session = new_session()
    # a short lease: on PostgreSQL a host's wait_final finalises only once it has expired
    owner = await _hanging_owner(fleet_store, session, anyio_backend, "--ttl", "2")
    try:
        await owner.next("owning")
        async with fleet_store.fleet("host") as host:
            await _x_writing_y_queued(host, owner, session)
            await owner.kill()
            # (a submit now would make this host finalise the session itself: the next test)
            if anyio_backend == "trio":  # any node's recovery, before anyone takes the session over
                with anyio.fail_after(BOUND):  # until the server has seen the dead owner's socket close
                    final = await host.wait_final(session, "y")
                assert (final.disposition, final.reason) == (Disposition.HELD, "runtime-lost")
                expected = (3, 0, 0)  # recovery bumped the epoch; the taker finds nothing left
            else:
                expected = (2, 1, 1)  # the taker finalises in its take
            async with fleet_store.fleet("w2") as taker, taker.own(LiveRuntime(session_id=session)):
                stats = taker.owner(session)
                assert stats is not None
                assert (stats.epoch, stats.recovered_unknown, stats.recovered_held) == expected
                async with fleet_store.fleet("reader") as reader:
                    receipts = {i: await reader.receipt(session, i) for i in ("x", "y")}
            assert receipts["x"] is not None
            assert (receipts["x"].disposition, receipts["x"].reason) == (Disposition.UNKNOWN, "runtime-lost")
            assert receipts["y"] is not None
            assert (receipts["y"].disposition, receipts["y"].reason) == (Disposition.HELD, "runtime-lost")
    finally:
        await owner.kill()


async def test_a_host_answers_soon_after_its_owner_is_killed(
    fleet_store: FleetStore, anyio_backend: str
) -> None:
    """kill -9 of the owner while its lease is unexpired: the host's reads report it dead at once
    (its liveness lock is gone), and a submit stored for it is answered at the host's next poll,
    as with no owner (the session finalised, C23), not ``unreachable`` at the deadline."""
    session = new_session()
    owner = await _hanging_owner(fleet_store, session, anyio_backend)
    try:
        await owner.next("owning")
        async with fleet_store.fleet("host", poll_interval=0.05) as host:
            y = await host.submit(session, Input("steer", "y", id="y"), "g1")
            assert y.disposition is Disposition.QUEUED
            await owner.next("context.write")  # y is being written: the owner hangs there
            assert (await host.lease(session)).live  # type: ignore[union-attr]
            await owner.kill()
            lease = await host.lease(session)
            with anyio.fail_after(BOUND):  # PostgreSQL frees the lock once its backend sees the socket close
                while lease is not None and lease.live:  # the server drives it: poll, bounded
                    await anyio.sleep(0.01)
                    lease = await host.lease(session)
            assert lease is not None
            assert lease.node_id == "w1"  # unexpired, as stored
            assert not lease.live  # but its process is gone
            assert await host.generation(session) is None
            assert (await host.capability(session))["mode"] == "unavailable"
            with anyio.fail_after(20):  # the deadline is 30 s: the answer comes at a poll
                z = await host.submit(session, Input("steer", "z", id="z"), "g1", timeout=30)
            assert (z.accepted, z.reason) == (False, "stale-generation")  # no generation runs
            assert await host.receipt(session, "z") is None  # withdrawn, never decided
            again = await host.submit(session, Input("steer", "y", id="y"), "g1")
            assert (again.disposition, again.reason) == (Disposition.UNKNOWN, "runtime-lost")
            stop = await host.stop(session, "g1")
            assert (stop.stopped, stop.reason) == (False, "no-owner")
    finally:
        await owner.kill()


async def test_a_read_of_a_dead_owners_queued_input_finalises_it(
    fleet_store: FleetStore, anyio_backend: str
) -> None:
    """kill -9 of the owner and no standby: a host's ``receipt`` of what it left queued does not
    say ``queued`` for an input no process can apply any more. The read finalises the session as
    the next take would (C23): the input never handed to the writer ``held``, the one being
    written ``unknown``, both ``runtime-lost``; the lease is freed; a second read only reads."""
    session = new_session()
    owner = await _hanging_owner(fleet_store, session, anyio_backend, "--ttl", "1")
    try:
        await owner.next("owning")
        async with fleet_store.fleet("host") as host:
            await _x_writing_y_queued(host, owner, session)
            await owner.kill()
            # SQLite: at once (the holder's process is gone); PostgreSQL: once the lease expired
            # too (a connection's lock says nothing of a client that may be reconnecting)
            final_y = await host.receipt(session, "y")
            with anyio.fail_after(BOUND):
                while final_y is not None and final_y.disposition is Disposition.QUEUED:
                    await anyio.sleep(0.05)
                    final_y = await host.receipt(session, "y")
            if fleet_store.kind == "sqlite":
                assert (await host.lease(session)).node_id is None  # type: ignore[union-attr]
            assert final_y is not None
            assert (final_y.disposition, final_y.reason) == (Disposition.HELD, "runtime-lost")
            final_x = await host.receipt(session, "x")
            assert final_x is not None
            assert (final_x.disposition, final_x.reason) == (Disposition.UNKNOWN, "runtime-lost")
            lease = await host.lease(session)
            assert lease is not None
            assert (lease.node_id, lease.epoch) == (None, 2)  # freed once, by the first read
    finally:
        await owner.kill()


async def test_a_read_leaves_a_stopped_owners_queued_input_queued(
    fleet_store: FleetStore, anyio_backend: str
) -> None:
    """An owner stopped (SIGSTOP) lives on and may still apply what it holds: a host's read of
    its queued input says ``queued`` and recovers nothing (its lease keeps owner and epoch)."""
    session = new_session()
    owner = await _hanging_owner(fleet_store, session, anyio_backend)
    try:
        await owner.next("owning")
        async with fleet_store.fleet("host") as host:
            await _x_writing_y_queued(host, owner, session)
            before = await host.lease(session)
            assert before is not None
            owner.signal(signal.SIGSTOP)
            try:
                for input_id in ("x", "y"):
                    still = await host.receipt(session, input_id)
                    assert still is not None
                    assert still.disposition is Disposition.QUEUED
                lease = await host.lease(session)
                assert lease is not None
                assert (lease.node_id, lease.epoch, lease.live) == ("w1", before.epoch, True)
            finally:
                owner.signal(signal.SIGCONT)
            await owner.kill()  # before the host leaves: its close sweeps the dead owner's socket
    finally:
        await owner.kill()


async def test_a_read_leaves_a_standby_that_took_a_stopped_owners_session_alone(
    fleet_store: FleetStore, anyio_backend: str
) -> None:
    """w1 stopped (SIGSTOP) past its lease, w2 takes its session (on SQLite without the liveness
    lock, which the stopped process still holds), then w1 is killed: the lock is free until w2's
    next fence, but w2 lives. Reads (``fleet.receipt``, the HTTP server's lease read) finalise
    nothing and w2 keeps the session: a free lock alone is no proof that an owner is gone."""
    from live_steering.http._stores import FleetView

    session = new_session()
    w1 = await spawn(fleet_store, "owner", session, "--node", "w1", "--ttl", "1", backend=anyio_backend)
    w2: Child | None = None
    try:
        await w1.next("owning")
        # the standby, started once w1 owns; it renews only every 10 s: its next fence, which
        # takes the lock, is far off
        w2 = await spawn(
            fleet_store,
            "owner",
            session,
            "--node",
            "w2",
            "--ttl",
            "30",
            "--wait",
            "60",
            "--hang-after",
            "0",
            backend=anyio_backend,
        )
        async with fleet_store.fleet("host") as host:
            w1.signal(signal.SIGSTOP)
            taken = await w2.next("owning")
            x = await host.submit(session, Input("steer", "x", id="x"), "g1")
            assert x.disposition is Disposition.QUEUED
            assert (await w2.next("context.write"))["input_id"] == "x"  # w2 hangs writing x
            await w1.kill()
            for _ in range(3):
                still = await host.receipt(session, "x")
                assert still is not None
                assert still.disposition is Disposition.QUEUED
                lease = await FleetView(host).lease(session)
                assert lease is not None
                assert (lease.node_id, lease.epoch) == ("w2", taken["epoch"])
            assert all(line["type"] != "lost" for line in w2.lines)
            await w2.kill()  # before the host leaves: its close sweeps the dead owners' sockets
    finally:
        await w1.kill()
        if w2 is not None:
            await w2.kill()


async def test_a_read_leaves_an_owner_whose_connection_was_cut_alone(
    fleet_store: FleetStore, anyio_backend: str
) -> None:
    """PostgreSQL: the owner's backend ended (``pg_terminate_backend``) frees its liveness lock
    while the owner lives on and reconnects at its next renewal. Reads meanwhile finalise nothing:
    its lease is unexpired, and it keeps its session and its queued input."""
    if fleet_store.kind != "postgres":
        pytest.skip("a connection's lock: PostgreSQL only")
    import psycopg

    from live_steering.http._stores import FleetView

    session = new_session()
    owner = await spawn(
        fleet_store,
        "owner",
        session,
        "--node",
        "w1",
        "--ttl",
        "30",
        "--hang-after",
        "0",
        backend=anyio_backend,
    )
    try:
        await owner.next("owning")
        async with fleet_store.fleet("host") as host:
            x = await host.submit(session, Input("steer", "x", id="x"), "g1")
            assert x.disposition is Disposition.QUEUED
            assert (await owner.next("context.write"))["input_id"] == "x"  # it hangs writing x

            def cut() -> None:
                with psycopg.connect(fleet_store.location, autocommit=True) as admin:
                    (pid,) = admin.execute(
                        "SELECT holder_pid FROM ls_leases WHERE session_id = %s", (session,)
                    ).fetchone() or (None,)
                    assert pid is not None
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                    gone = "SELECT count(*) FROM pg_stat_activity WHERE pid = %s"
                    while admin.execute(gone, (pid,)).fetchone() != (0,):  # bounded by the test's timeout
                        time.sleep(0.01)

            with anyio.fail_after(BOUND):
                await anyio.to_thread.run_sync(cut)
            before = await host.lease(session)
            assert before is not None
            assert (before.node_id, before.live) == ("w1", False)  # its lock is free: not live as probed
            for _ in range(3):
                still = await host.receipt(session, "x")
                assert still is not None
                assert still.disposition is Disposition.QUEUED
                lease = await FleetView(host).lease(session)
                assert lease is not None
                assert (lease.node_id, lease.epoch) == ("w1", before.epoch)
            assert all(line["type"] != "lost" for line in owner.lines)
    finally:
        await owner.kill()


def _pending_requests(store: FleetStore, session: str) -> int:
    """Requests of ``session`` stored and not yet decided or withdrawn (read from the store)."""
    conn = store.connection()
    try:
        conn.begin()
        (count,) = conn.execute(
            "SELECT count(*) FROM ls_requests WHERE session_id = ? AND state = 'pending'", (session,)
        ).fetchone()
        conn.commit()
        return int(count)
    finally:
        conn.close()


async def test_a_submit_whose_dead_owner_another_node_recovered_is_answered_at_the_next_poll(
    fleet_store: FleetStore, anyio_backend: str
) -> None:
    """A submit stored for an owner that then dies, when another node recovers the session before
    the host's next poll (its wait_final, a receipts --recover, the HTTP ?wait=): the lease is
    freed, so no owner is left to decide it, and the host answers as with no owner at that poll,
    not ``unreachable`` at its deadline."""
    session = new_session()
    owner = await spawn(fleet_store, "owner", session, "--node", "w1", backend=anyio_backend)
    try:
        await owner.next("owning")
        answers: list[Any] = []
        answered = anyio.Event()
        async with (
            fleet_store.fleet("host", poll_interval=2.0) as host,
            fleet_store.fleet("other") as other,
            anyio.create_task_group() as tg,
        ):
            owner.signal(signal.SIGSTOP)  # alive (its lock held), deciding nothing

            async def submit() -> None:
                answers.append(await host.submit(session, Input("steer", "z", id="z"), "g1", timeout=60))
                answered.set()

            tg.start_soon(submit)
            with anyio.fail_after(BOUND):  # stored: the request is pending in the store
                while not await anyio.to_thread.run_sync(_pending_requests, fleet_store, session):  # noqa: ASYNC110 - another process's store
                    await anyio.sleep(0.01)
            await owner.kill()
            with anyio.fail_after(BOUND):  # the server frees the dead owner's lock: poll, bounded
                while not await other.recover(session):  # noqa: ASYNC110 - the server drives it
                    await anyio.sleep(0.01)
            lease = await host.lease(session)
            assert lease is not None
            assert lease.node_id is None  # recovered: nobody owns it
            with anyio.fail_after(40):  # the deadline is 60 s: the answer comes at a poll (2 s)
                await answered.wait()
        (z,) = answers
        assert (z.accepted, z.reason) == (False, "stale-generation")
        async with fleet_store.fleet("reader") as reader:
            assert await reader.receipt(session, "z") is None  # withdrawn, never decided
    finally:
        await owner.kill()


async def test_three_processes_one_id_one_admission(fleet_store: FleetStore, anyio_backend: str) -> None:
    """3 processes x 100 tasks, one new id: 1 admission, 300 equal receipts; differing text: conflicts."""
    session = new_session()
    children: list[Child] = []
    try:
        async with (
            fleet_store.fleet("owner") as owner,
            owner.own(LiveRuntime(session_id=session)) as runtime,
            runtime.open_generation("g1"),
        ):
            for n in range(3):
                children.append(
                    await spawn(
                        fleet_store,
                        "submit",
                        session,
                        *("--node", f"host-{n}", "--tasks", "100", "--id", "same", "--distinct-id", "other"),
                        backend=anyio_backend,
                    )
                )
            results = [await child.next("receipts") for child in children]
            assert runtime.statistics().accepted == 2
        same = [r for result in results for r in result["receipts"]]
        assert len(same) == 300
        assert all(r == same[0] for r in same)
        assert same[0]["disposition"] == "queued"
        other = [r for result in results for r in result["distinct"]]
        assert len(other) == 300
        assert sum(r["accepted"] for r in other) == 1
        assert sum(r.get("reason") == "identity-conflict" for r in other) == 299
    finally:
        for child in children:
            await child.kill()


async def test_zombie_owner_writes_nothing_after_takeover(
    fleet_store: FleetStore, anyio_backend: str
) -> None:
    """SIGSTOP past the lease, takeover, SIGCONT: the zombie writes nothing more and stops."""
    session = new_session()
    zombie = await spawn(fleet_store, "owner", session, "--ttl", "0.5", "--node", "z1", backend=anyio_backend)
    try:
        await zombie.next("owning")
        async with fleet_store.fleet("host") as host:
            x = await host.submit(session, Input("steer", "x", id="x"), "g9")  # stale: g1 runs
            assert x.reason == "stale-generation"
            zombie.signal(signal.SIGSTOP)
            with anyio.fail_after(BOUND):
                while (lease := await host.lease(session)) is not None and lease.live:  # noqa: ASYNC110 - a lease expiring on the store clock
                    await anyio.sleep(0.05)
            async with (
                fleet_store.fleet("w2") as taker,
                taker.own(LiveRuntime(session_id=session)) as runtime,
                runtime.open_generation("g2"),
            ):
                stats = taker.owner(session)
                assert stats is not None
                assert stats.epoch == 2
                before = await _changes_of_epoch(fleet_store, session, 1)
                zombie.signal(signal.SIGCONT)
                await zombie.close_stdin()
                # it found itself fenced, closed its runtime, and its loop ended loudly
                assert await zombie.wait() == 3
                await zombie.drain()
                assert [line["type"] for line in zombie.lines][-1] == "lost"
                y = await host.submit(session, Input("steer", "y", id="y"), "g2")
                assert y.disposition is Disposition.QUEUED
                assert await _changes_of_epoch(fleet_store, session, 1) == before
                lease = await host.lease(session)
                assert lease is not None
                assert (lease.node_id, lease.epoch) == ("w2", 2)
        assert not [line for line in zombie.lines if line["type"] == "applied"]
    finally:
        await zombie.kill()


@pytest.mark.slow
async def test_owner_killed_at_many_points(fleet_store: FleetStore, anyio_backend: str) -> None:
    """The published figure: kill -9 at >= 20 random points under load; every submit answered,
    0 queued after takeover, 0 held that the writer saw, every receipt readable from another node."""
    session = new_session()
    rng = random.Random(28)
    seen_written: set[str] = set()
    answered: dict[str, dict[str, Any]] = {}
    async with fleet_store.fleet("host") as host:
        for round_ in range(20):
            owner = await spawn(
                fleet_store,
                "owner",
                session,
                "--wait",
                "10",
                "--generation",
                f"g{round_}",
                backend=anyio_backend,
            )
            try:
                await owner.next("owning")

                async def submit(n: int, generation: str, round_: int = round_) -> None:
                    input = Input("steer", f"t{n}", id=f"r{round_}-{n}")
                    answered[input.id] = (
                        await host.submit(session, input, generation, timeout=1.0)
                    ).to_dict()

                async with anyio.create_task_group() as tg:
                    for n in range(10):
                        tg.start_soon(submit, n, f"g{round_}")
                    await anyio.sleep(rng.random() * 0.05)
                    owner.signal(signal.SIGKILL)
                await owner.kill()
                await owner.drain()
                seen_written |= {line["input_id"] for line in owner.lines if line["type"] == "context.write"}
            finally:
                await owner.kill()
            for input_id, wire in answered.items():  # durable when returned: readable elsewhere at once
                if wire["accepted"] and input_id.startswith(f"r{round_}-"):
                    assert await host.receipt(session, input_id) is not None
        await host.recover(session)
        entries = await host.entries(session_id=session)
    assert len(answered) == 200
    assert not [e for e in entries if e.disposition is Disposition.QUEUED]
    assert not [e for e in entries if e.disposition is Disposition.HELD and e.input_id in seen_written]
