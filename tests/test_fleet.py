"""The fleet's conformance suite (C27, C28), in one process: every test on both stores and both backends.

A host node and an owner node are two ``Fleet`` objects on one store; everything between
them crosses the store (rows, wake-ups), exactly as between processes. The cross-process
cases (kill -9, SIGSTOP, several submitting processes) are in ``test_fleet_processes.py``.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from fleet_helpers import BOUND, EXPECTED_REASONS, FleetStore, LocalEngine, new_session, script
from live_steering import Disposition, Input, LiveRuntime, Receipt, RefusalReason, UnknownInputError
from live_steering.fleet import UNREACHABLE, FleetError, LeaseHeldError, OwnerLostError, SQLiteFleet
from live_steering.fleet._sqlite import socket_dir

#: These tests leave generations with steers pending on purpose, to see them held across the
#: store (C17, C23); the library's warning for a forgotten checkpoint decision is not their subject.
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::live_steering.CheckpointDecisionWarning"),
]


def _wire(receipts: list[Receipt]) -> list[dict[str, Any]]:
    return [r.to_dict() for r in receipts]


async def test_remote_receipts_equal_in_process_receipts(fleet_store: FleetStore) -> None:
    """The C6-C12, C16, C17 scripts through fleet.capability give the receipts of in-process submits."""
    local = LiveRuntime(session_id="local", identity_limit=4)
    expected = await script(LocalEngine(local), local.submit_steering)
    session = new_session()
    async with (
        fleet_store.fleet("owner") as owner,
        fleet_store.fleet("host") as host,
        owner.own(LiveRuntime(session_id=session, identity_limit=4)) as runtime,
    ):
        capability = await host.capability(session)
        assert {k: v for k, v in capability.items() if k != "submit"} == {
            "version": 1,
            "mode": "request_boundary",
            "cancellable": False,
        }
        got = await script(LocalEngine(runtime), capability["submit"])
        assert runtime.statistics().accepted == local.statistics().accepted == 4
    assert _wire(got) == _wire(expected)
    assert {r.reason for r in got if not r.accepted} >= EXPECTED_REASONS


async def test_remote_queued_is_durable_when_returned(fleet_store: FleetStore) -> None:
    """A remote queued receipt is already in the store when returned (C27): a third node reads it."""
    session = new_session()
    async with (
        fleet_store.fleet("owner") as owner,
        fleet_store.fleet("host") as host,
        owner.own(LiveRuntime(session_id=session)) as runtime,
        runtime.open_generation("g1"),
    ):
        receipt = await host.submit(session, Input("steer", "Use X", id="m-1"), "g1")
        assert receipt.disposition is Disposition.QUEUED
        async with fleet_store.fleet("reader") as reader:
            assert await reader.receipt(session, "m-1") == receipt
            (entry,) = await reader.entries(session_id=session)
            assert (entry.input_id, entry.disposition, entry.marked) == ("m-1", Disposition.QUEUED, False)


async def test_applied_receipt_and_generation_readable_from_any_node(fleet_store: FleetStore) -> None:
    """A host reads the running generation, waits for applied, and the mark and applied are stored."""
    session = new_session()
    async with fleet_store.fleet("owner") as owner, fleet_store.fleet("host") as host:
        async with owner.own(LiveRuntime(session_id=session)) as runtime:
            assert await host.generation(session) is None
            async with runtime.open_generation("g1") as gen:
                await owner.flush(session)
                generation = await host.generation(session)
                assert generation == {"id": "g1", "steering_mode": "all"}
                await host.submit(session, Input("steer", "Use X", id="m-1"), generation["id"])
                written: list[str] = []
                await gen.boundary(lambda input, metadata: written.append(input.id))
                final = await host.wait_final(session, "m-1")
                assert final.disposition is Disposition.APPLIED
                assert written == ["m-1"]
        (entry,) = await host.entries(session_id=session)
        assert entry.marked
        assert entry.disposition is Disposition.APPLIED


async def test_the_lease_records_the_owners_delivery_modes(fleet_store: FleetStore) -> None:
    """Owning a runtime records its steering_mode and follow_up_mode (C30) on the lease, read from
    any node; releasing the lease clears them; the next owner records its own."""
    session = new_session()
    async with fleet_store.fleet("a") as node_a, fleet_store.fleet("host") as host:
        async with node_a.own(LiveRuntime(session_id=session, steering_mode="one-at-a-time")) as runtime:
            lease = await host.lease(session)
            assert lease is not None
            assert (lease.live, lease.steering_mode, lease.follow_up_mode) == (True, "one-at-a-time", "all")
            assert lease.delivery == "request_boundary"
            assert (await host.capability(session))["mode"] == "request_boundary"
            async with runtime.open_generation("g1"):
                await node_a.flush(session)
                # C30: a host's view of the running generation carries the mode, as in-process
                assert await host.generation(session) == {"id": "g1", "steering_mode": "one-at-a-time"}
        released = await host.lease(session)
        assert released is not None
        assert (released.live, released.steering_mode, released.follow_up_mode) == (False, None, None)
        async with (
            fleet_store.fleet("b") as node_b,
            node_b.own(LiveRuntime(session_id=session, follow_up_mode="one-at-a-time")),
        ):
            lease = await host.lease(session)
            assert lease is not None
            assert (lease.node_id, lease.steering_mode, lease.follow_up_mode) == ("b", "all", "one-at-a-time")


async def test_an_owner_that_delivers_no_steer_is_unavailable_to_hosts(fleet_store: FleetStore) -> None:
    """An owner whose runtime was made with ``boundary_delivery=False`` (its provider steers
    natively, C1) records it on the lease: a host's remote capability says ``unavailable``, as
    the owner's own does, and a submit through it is refused ``unavailable`` by the owner."""
    session = new_session()
    async with fleet_store.fleet("owner") as owner, fleet_store.fleet("host") as host:
        runtime = LiveRuntime(session_id=session, boundary_delivery=False)
        async with owner.own(runtime), runtime.open_generation("g1"):
            await owner.flush(session)
            assert runtime.capability["mode"] == "unavailable"
            lease = await host.lease(session)
            assert lease is not None
            assert (lease.live, lease.delivery) == (True, "unavailable")
            capability = await host.capability(session)
            assert capability["mode"] == "unavailable"
            refused = await capability["submit"](Input("steer", "Use X", id="m-1"), "g1")
            assert (refused.accepted, refused.reason) == (False, RefusalReason.UNAVAILABLE)
        released = await host.lease(session)
        assert released is not None
        assert released.delivery is None


async def test_no_owner_answers_repeats_from_the_store(fleet_store: FleetStore) -> None:
    """With no live owner a repeat gets its stored receipt, other content a conflict, a new id stale."""
    session = new_session()
    async with fleet_store.fleet("owner") as owner, fleet_store.fleet("host") as host:
        async with (
            owner.own(LiveRuntime(session_id=session)) as runtime,
            runtime.open_generation("g1") as gen,
        ):
            await host.submit(session, Input("steer", "x", id="a"), "g1")
            await gen.boundary(lambda input, metadata: None)
        assert (await host.capability(session))["mode"] == "unavailable"
        repeat = await host.submit(session, Input("steer", "x", id="a"), "g1")
        assert (repeat.accepted, repeat.disposition) == (True, Disposition.APPLIED)
        conflict = await host.submit(session, Input("steer", "y", id="a"), "g1")
        assert conflict.reason == "identity-conflict"
        fresh = await host.submit(session, Input("steer", "y", id="b"), "g1")
        assert fresh.reason == "stale-generation"
        assert host.statistics().answered_without_owner == 3


async def test_every_awaited_remote_submit_lets_other_tasks_run(fleet_store: FleetStore) -> None:
    """C8: a submit answered without an owner (a host polling while no node owns the session) still
    yields, so the host's other tasks run; inside a cancelled scope it raises and stores nothing."""
    session = new_session()
    async with fleet_store.fleet("host") as host, anyio.create_task_group() as tg:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await anyio.lowlevel.checkpoint()

        tg.start_soon(ticker)
        await anyio.lowlevel.checkpoint()  # the ticker is started (it never blocks)
        before = ticks
        for _ in range(20):
            receipt = await host.submit(session, Input("steer", "x", id="m-1"), "g1")
            assert receipt.reason == "stale-generation"
        assert ticks - before >= 10  # about once per submit; it was 0: the ticker never ran
        with anyio.CancelScope() as scope:
            scope.cancel()
            await host.submit(session, Input("steer", "x", id="m-2"), "g1")
        assert scope.cancelled_caught
        assert host.statistics().answered_without_owner == 20
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("bad", ["s\ud800", "", "x" * 200, "nul\x00inside"])
async def test_a_bad_session_id_is_refused_before_anything_is_stored(
    fleet_store: FleetStore, bad: str
) -> None:
    """A session id no runtime could have (a lone surrogate, empty, too long, NUL) is a ValueError
    from every host call, before the store is touched; the node goes on serving."""
    session = new_session()
    async with (
        fleet_store.fleet("owner") as owner,
        fleet_store.fleet("host") as host,
        owner.own(LiveRuntime(session_id=session)) as runtime,
        runtime.open_generation("g1") as gen,
    ):
        with pytest.raises(ValueError, match="session_id"):
            await host.submit(bad, Input("steer", "x", id="a"), "g1")
        with pytest.raises(ValueError, match="session_id"):
            await host.receipt(bad, "a")
        with pytest.raises(ValueError, match="session_id"):
            await host.stop(bad, "g1")
        with pytest.raises(ValueError, match="session_id"):
            await host.entries(session_id=bad)
        with pytest.raises(ValueError, match="generation_id"):
            await host.entries(generation_id=bad)
        with pytest.raises(ValueError, match="session_id"):
            await host.request_states(bad)
        with pytest.raises(ValueError, match="session_id"):
            await owner.flush(bad)
        receipt = await host.submit(session, Input("steer", "x", id="a"), "g1")
        assert (receipt.input_id, receipt.disposition) == ("a", Disposition.QUEUED)
        assert host.statistics().submitted == 1
        gen.stop()


async def test_a_callers_type_errors_and_a_session_not_owned_are_typed_refusals(
    fleet_store: FleetStore,
) -> None:
    """Filters and timeouts of the wrong type are TypeErrors, a timeout that is not a positive
    finite number a ValueError, and a flush of a session this node does not own a LookupError
    naming it: each before anything is stored, so the session's requests are unchanged."""
    session = new_session()
    async with (
        fleet_store.fleet("owner") as owner,
        fleet_store.fleet("host") as host,
        owner.own(LiveRuntime(session_id=session)) as runtime,
        runtime.open_generation("g1") as gen,
    ):
        for call in (
            host.entries(session_id=5),  # type: ignore[arg-type]
            host.entries(generation_id=b"g1"),  # type: ignore[arg-type]
            host.request_states(5),  # type: ignore[arg-type]
            host.submit(session, Input("steer", "x", id="a"), "g1", timeout="1"),  # type: ignore[arg-type]
            host.stop(session, "g1", timeout=True),  # a bool is not a number of seconds here
        ):
            with pytest.raises(TypeError):
                await call
        for timeout in (0, -1, float("nan"), float("inf")):
            with pytest.raises(ValueError, match="timeout must be a positive, finite number"):
                await host.submit(session, Input("steer", "x", id="a"), "g1", timeout=timeout)
        with pytest.raises(LookupError, match="does not own session 'elsewhere'"):
            await host.flush("elsewhere")
        with pytest.raises(ValueError, match="timeout must be a positive"):  # at the call, not at each submit
            await host.capability(session, timeout=0)
        assert await host.request_states(session) == {}
        assert await host.receipt(session, "a") is None
        gen.stop()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_submit_cancelled_after_its_group_insert_is_withdrawn(fleet_store: FleetStore) -> None:
    """A submit waiting in a group insert run by another submit, cancelled (asyncio's own
    ``task.cancel()``) right after that insert stored its request and before it resumed, is
    withdrawn: never decided later (C28). asyncio only: trio has no such cancellation."""
    import asyncio

    session = new_session()
    async with (
        fleet_store.fleet("owner") as owner,
        fleet_store.fleet("host") as host,
        owner.own(LiveRuntime(session_id=session)) as runtime,
        runtime.open_generation("g1") as gen,
    ):
        # The owner's batches wait until B's cancellation has run its course, so that a request
        # left pending would be decided after it (what a missed withdraw looked like).
        owner_conn: Any = owner._owners[session].conn
        begin_batch = owner_conn.begin_batch_async
        cancelled = anyio.Event()

        async def gated_begin_batch(*args: Any) -> Any:
            await cancelled.wait()
            return await begin_batch(*args)

        owner_conn.begin_batch_async = gated_begin_batch
        store: Any = host._store()
        original = store.submit_async
        tasks: dict[str, asyncio.Task[Receipt]] = {}

        async def insert_then_cancel_b(node_id: str, items: Any) -> Any:
            results = await original(node_id, items)
            if any(item.input.id == "B" for item in items):
                asyncio.get_running_loop().call_soon(tasks["B"].cancel)  # after the insert, before B resumes
            return results

        store.submit_async = insert_then_cancel_b
        tasks["A"] = asyncio.ensure_future(host.submit(session, Input("steer", "a", id="A"), "g1"))
        await asyncio.sleep(0)  # A runs the insert itself
        tasks["B"] = asyncio.ensure_future(host.submit(session, Input("steer", "b", id="B"), "g1"))
        with pytest.raises(asyncio.CancelledError):
            await tasks["B"]
        store.submit_async = original
        cancelled.set()
        owner_conn.begin_batch_async = begin_batch
        assert (await tasks["A"]).disposition is Disposition.QUEUED
        await owner.flush(session)
        assert runtime.receipt("B") is None  # never decided: withdrawn
        assert await host.receipt(session, "B") is None
        gen.stop()


async def test_identities_outlive_the_owner(fleet_store: FleetStore) -> None:
    """A later owner of the session answers a repeat of an earlier owner's input from the store."""
    session = new_session()
    async with fleet_store.fleet("owner") as owner, fleet_store.fleet("host") as host:
        async with owner.own(LiveRuntime(session_id=session)) as runtime, runtime.open_generation("g1"):
            await host.submit(session, Input("steer", "x", id="a"), "g1")
        async with owner.own(LiveRuntime(session_id=session)) as runtime, runtime.open_generation("g2"):
            repeat = await host.submit(session, Input("steer", "x", id="a"), "g1")
            assert (repeat.accepted, repeat.disposition, repeat.reason) == (
                True,
                Disposition.HELD,
                "generation-stopped",
            )
            conflict = await host.submit(session, Input("steer", "x", id="a"), "g2")
            assert conflict.reason == "identity-conflict"
            assert runtime.receipt("a") is None  # nothing admitted twice


async def test_deadline_withdraws_and_refuses_unreachable(fleet_store: FleetStore) -> None:
    """An owner that does not decide in time: the request is withdrawn, unreachable, never decided later."""
    session = new_session()
    silent = fleet_store.connection()  # holds the lease and never decides: a partitioned owner
    taken = await anyio.to_thread.run_sync(silent.take, session, "silent", 30.0)
    assert taken is not None
    async with fleet_store.fleet("host") as host, fleet_store.fleet("owner") as owner:
        receipt = await host.submit(session, Input("steer", "x", id="a"), "g1", timeout=0.2)
        assert receipt.to_dict() == {
            "accepted": False,
            "inputId": "a",
            "generationId": "g1",
            "disposition": None,
            "reason": UNREACHABLE,
        }
        assert await host.request_states(session) == {"withdrawn": 1}
        with pytest.raises(LeaseHeldError):
            async with owner.own(LiveRuntime(session_id=session)):
                pass
        await anyio.to_thread.run_sync(silent.release, session, "silent", taken.epoch)
        async with owner.own(LiveRuntime(session_id=session)) as runtime, runtime.open_generation("g1"):
            await owner.flush(session)
            assert runtime.receipt("a") is None
        assert await host.request_states(session) == {"withdrawn": 1}
    await anyio.to_thread.run_sync(silent.close)


async def test_withdraw_race_never_both_decided_and_withdrawn(fleet_store: FleetStore) -> None:
    """Randomly timed deadlines against a live owner: each request is decided xor withdrawn."""
    await _withdraw_race(fleet_store, 120)


@pytest.mark.slow
async def test_withdraw_race_long(fleet_store: FleetStore) -> None:
    """The published figure: 1,000 randomly timed withdraws, 0 both decided and withdrawn."""
    await _withdraw_race(fleet_store, 1_000)


async def _withdraw_race(fleet_store: FleetStore, count: int) -> None:
    session = new_session()
    rng = random.Random(15)
    results: dict[str, Receipt] = {}
    async with fleet_store.fleet("owner") as owner, fleet_store.fleet("host") as host:
        async with (
            owner.own(LiveRuntime(session_id=session, identity_limit=count)) as runtime,
            runtime.open_generation("g1"),
        ):
            limiter = anyio.CapacityLimiter(20)

            async def one(n: int) -> None:
                async with limiter:
                    input = Input("steer", f"text {n}", id=f"r-{n}")
                    results[input.id] = await host.submit(session, input, "g1", timeout=rng.random() * 0.01)

            async with anyio.create_task_group() as tg:
                for n in range(count):
                    tg.start_soon(one, n)
            await owner.flush(session)
            unreachable = [i for i, r in results.items() if r.reason == UNREACHABLE]
            decided = [i for i, r in results.items() if r.reason != UNREACHABLE]
            for input_id in unreachable:
                assert runtime.receipt(input_id) is None  # never decided later
            for input_id in decided:
                assert runtime.receipt(input_id) == results[input_id]
        states = await host.request_states(session)
    assert states.get("pending", 0) == 0
    assert states.get("withdrawn", 0) == len(unreachable)
    assert states.get("decided", 0) == len(decided)
    assert len(results) == count


async def test_fenced_owner_writes_nothing(fleet_store: FleetStore) -> None:
    """An owner whose lease was taken fails its next commit; its barrier refuses, the taker finalises."""
    session = new_session()
    async with fleet_store.fleet("a", ttl=30.0) as node_a, fleet_store.fleet("host") as host:
        async with node_a.own(LiveRuntime(session_id=session)) as runtime:
            async with runtime.open_generation("g1") as gen:
                await host.submit(session, Input("steer", "x", id="x"), "g1")
                thief = fleet_store.connection()
                await node_a.flush(session)  # a is idle now, until its next renewal (1 s)
                # the lease expires (a partition); another node takes it over
                await anyio.to_thread.run_sync(thief.execute, "UPDATE ls_leases SET expires_at = 0")
                taken = await anyio.to_thread.run_sync(thief.take, session, "b", 30.0)
                assert taken is not None
                assert taken.epoch == 2
                assert taken.recovered_held == 1
                written: list[str] = []
                with pytest.raises(FleetError):
                    await gen.boundary(lambda input, metadata: written.append(input.id))
                assert written == []  # never handed to the writer
            stats = node_a.owner(session)
            assert stats is not None
            assert stats.failed is not None
            assert runtime.closed
            failed = [e for e in runtime.recent_events() if e["type"] == "journal.failed"]
            assert len(failed) == 1  # surfaced as a journal's failed commit is
            assert failed[0]["path"] == (
                fleet_store.location if fleet_store.kind == "sqlite" else node_a.location
            )
            # PostgreSQL: the taker may end the zombie's session first (a lost connection)
            assert failed[0]["fenced"] is True or fleet_store.kind == "postgres"
        receipt = await host.receipt(session, "x")
        assert receipt is not None
        assert (receipt.disposition, receipt.reason) == (
            Disposition.HELD,
            "runtime-lost",
        )
    await anyio.to_thread.run_sync(thief.close)


async def test_an_owners_failed_commit_raises_to_a_waiting_barrier_and_publishes(
    fleet_store: FleetStore,
) -> None:
    """The owner's commit fails while its write barrier waits for the mark: the boundary raises
    FleetError (the failure its cause), nothing reaches the writer, journal.failed is published
    on the runtime's stream as a journal's failed commit publishes it, and the runtime is closed."""
    session = new_session()
    async with (
        fleet_store.fleet("a") as node,
        node.own(LiveRuntime(session_id=session)) as runtime,
        runtime.open_generation("g1") as gen,
    ):
        await runtime.submit_steering(Input("steer", "x", id="x"), "g1")
        await node.flush(session)
        conn: Any = node._owners[session].conn
        entered, gate = anyio.Event(), anyio.Event()

        async def failing_finish(*args: Any) -> None:
            entered.set()
            await gate.wait()
            await conn.rollback_async()  # as the real one does before it raises
            raise OSError("the store is on fire")

        conn.finish_batch_async = failing_finish
        written: list[str] = []
        outcome: list[FleetError] = []

        async def boundary() -> None:
            try:
                await gen.boundary(lambda input, metadata: written.append(input.id))
            except FleetError as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(boundary)
            await entered.wait()
            await anyio.wait_all_tasks_blocked()
            stats = node.owner(session)
            assert stats is not None
            assert stats.enqueued > stats.durable  # the mark waits for this commit
            assert outcome == []
            gate.set()
        assert len(outcome) == 1
        assert "the store is on fire" in str(outcome[0])
        assert isinstance(outcome[0].__cause__, FleetError)
        assert written == []
        stats = node.owner(session)
        assert stats is not None
        assert stats.failed is not None
        assert runtime.closed
        failed = [e for e in runtime.recent_events() if e["type"] == "journal.failed"]
        assert len(failed) == 1
        event = failed[0]
        path = fleet_store.location if fleet_store.kind == "sqlite" else node.location  # no password
        assert (event["path"], event["fenced"], event["sqlite_error"]) == (path, False, None)
        assert "the store is on fire" in event["error"]
        assert event["durable_through"] == stats.durable
        assert event["session_id"] == session
        with pytest.raises(FleetError):
            await node.flush(session)


async def test_takeover_finalises_as_c23(fleet_store: FleetStore) -> None:
    """A takeover finalises a marked input unknown and an unwritten one held, both runtime-lost (C23)."""
    session = new_session()
    release = anyio.Event()
    async with fleet_store.fleet("a", ttl=30.0) as node_a, fleet_store.fleet("b") as node_b:
        async with (
            node_a.own(LiveRuntime(session_id=session)) as runtime,
            runtime.open_generation("g1") as gen,
            anyio.create_task_group() as tg,
        ):
            await node_b.submit(session, Input("steer", "x", id="x"), "g1")
            await node_b.submit(session, Input("steer", "y", id="y"), "g1")
            in_writer = anyio.Event()

            async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
                in_writer.set()
                await release.wait()

            async def engine() -> None:
                with pytest.raises(FleetError):
                    await gen.boundary(writer)

            tg.start_soon(engine)
            await in_writer.wait()  # x's mark is durable: x may be in a context
            await node_a.flush(session)  # a is idle now, until its next renewal (1 s)
            thief = fleet_store.connection()
            await anyio.to_thread.run_sync(thief.execute, "UPDATE ls_leases SET expires_at = 0")
            await anyio.to_thread.run_sync(thief.close)
            async with node_b.own(LiveRuntime(session_id=session), wait=5) as taken_over:
                stats = node_b.owner(session)
                assert stats is not None
                assert (stats.recovered_unknown, stats.recovered_held) == (1, 1)
                x = await node_b.receipt(session, "x")
                y = await node_b.receipt(session, "y")
                assert x is not None
                assert (x.disposition, x.reason) == (
                    Disposition.UNKNOWN,
                    "runtime-lost",
                )
                assert y is not None
                assert (y.disposition, y.reason) == (Disposition.HELD, "runtime-lost")
                release.set()  # a's write returns: its applied can no longer be written
                async with taken_over.open_generation("g2"):
                    again = await node_b.submit(session, Input("steer", "x", id="x"), "g1")
                    assert again == x
        final = await node_b.receipt(session, "x")
        assert final == x


async def test_lost_listener_strands_nothing(postgres_dsn: str) -> None:
    """Listener connections terminated server-side: the next submit is still answered, by the wake-ups
    and the reconnected listeners' re-read alone (no poll runs within the test's bound)."""
    import psycopg

    store = FleetStore("postgres", postgres_dsn)
    session = new_session()
    async with (
        # No poll within BOUND (an owner also looks every ttl/3): only a wake-up or a re-read answers.
        store.fleet("owner-l", ttl=10 * BOUND, poll_interval=10 * BOUND) as owner,
        store.fleet("host-l", poll_interval=10 * BOUND) as host,
        owner.own(LiveRuntime(session_id=session)) as runtime,
        runtime.open_generation("g1"),
    ):
        first = await host.submit(session, Input("steer", "x", id="a"), "g1")
        assert first.disposition is Disposition.QUEUED

        def terminate() -> int:
            with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()"
                ).fetchall()
            return len(rows)

        assert await anyio.to_thread.run_sync(terminate) >= 2
        second = await host.submit(session, Input("steer", "y", id="b"), "g1", timeout=BOUND)
        assert second.disposition is Disposition.QUEUED
        with anyio.fail_after(BOUND):  # the server ends the listeners' sessions: poll, bounded
            while owner.statistics().listener_reconnects < 1 or host.statistics().listener_reconnects < 1:  # noqa: ASYNC110 - the server drives it
                await anyio.sleep(0.01)


async def test_own_refuses_a_used_runtime_and_bad_arguments(tmp_path: Any) -> None:
    """own() takes only a new runtime; bad arguments raise clear errors and change nothing."""
    async with SQLiteFleet(tmp_path / "f.db", node_id="n") as fleet:
        used = LiveRuntime(session_id="s")
        async with used.open_generation("g"):
            pass
        with pytest.raises(ValueError, match="new runtime"):
            async with fleet.own(used):
                pass
        with pytest.raises(TypeError):
            async with fleet.own("s"):  # type: ignore[arg-type]
                pass
        with pytest.raises(TypeError):
            await fleet.submit("s", "text", "g")  # type: ignore[arg-type]
        assert await fleet.lease("s") is None
    with pytest.raises(ValueError, match="ttl"):
        SQLiteFleet(tmp_path / "f.db", ttl=0)
    with pytest.raises(ValueError, match="file path"):
        SQLiteFleet(":memory:")
    with pytest.raises(ValueError, match="file path"):
        SQLiteFleet("")  # SQLite's private temporary database: nothing would be shared


async def test_wait_final_of_an_unknown_id_raises_as_in_process(fleet_store: FleetStore) -> None:
    """fleet.wait_final of an id the session never accepted raises UnknownInputError, as
    LiveRuntime.wait_final does (it can never become final)."""
    session = new_session()
    async with fleet_store.fleet("owner") as owner, owner.own(LiveRuntime(session_id=session)):
        with pytest.raises(UnknownInputError, match="never accepted"):
            await owner.wait_final(session, "no-such-id")


async def test_a_store_opened_through_a_symlink_wakes_the_same_nodes(tmp_path: Any) -> None:
    """Every name of one SQLite file (a symlink, a path with ``..``) reaches the same nodes'
    wake-up sockets: the owner answers at once, not at its next poll."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    session = new_session()
    async with (
        SQLiteFleet(tmp_path / "real" / "f.db", node_id="owner", ttl=120, poll_interval=60) as owner,
        owner.own(LiveRuntime(session_id=session)) as runtime,
        runtime.open_generation("g1") as gen,
    ):
        await owner.flush(session)
        for i, path in enumerate((tmp_path / "link" / "f.db", tmp_path / "real" / ".." / "real" / "f.db")):
            async with SQLiteFleet(path, node_id=f"host-{i}", poll_interval=60) as host:
                with anyio.fail_after(BOUND / 2):  # without its wake-up the owner would look in 60 s
                    receipt = await host.submit(session, Input("steer", "x", id=f"x{i}"), "g1")
                assert receipt.disposition is Disposition.QUEUED
        gen.stop()
    folder = anyio.Path(socket_dir(str(tmp_path / "real" / "f.db")))
    assert not await folder.exists()  # the last node of the store removed it


@pytest.mark.parametrize("how", ["unlinked", "replaced"])
async def test_a_sqlite_store_unlinked_or_replaced_under_its_nodes_reports_nothing_durable(
    tmp_path: Any, how: str
) -> None:
    """C23, C27: `rm fleet.db` (or a copy moved over it) while an owner and a host run. SQLite
    goes on writing to the file it opened, which no node can read again: a host's submit now
    raises FleetError instead of answering `queued`, and the owner fails (its next commit finds
    the path naming another file or none) instead of reporting receipts durable."""
    path = tmp_path / "f.db"
    session = new_session()
    async with (
        SQLiteFleet(path, node_id="owner", ttl=120, poll_interval=60) as owner,
        owner.own(LiveRuntime(session_id=session)) as runtime,
        runtime.open_generation("g1") as gen,
        SQLiteFleet(path, node_id="host", poll_interval=60) as host,
    ):
        with anyio.fail_after(BOUND):
            before = await host.submit(session, Input("steer", "x", id="before"), "g1")
        assert before.disposition is Disposition.QUEUED
        if how == "unlinked":
            path.unlink()
        else:
            (tmp_path / "copy.db").write_bytes(path.read_bytes())
            (tmp_path / "copy.db").replace(path)
        with pytest.raises(FleetError, match=f"was {how}"), anyio.fail_after(BOUND):
            await host.submit(session, Input("steer", "y", id="after"), "g1")
        with pytest.raises(FleetError, match=f"was {how}"), anyio.fail_after(BOUND):
            await owner.flush(session)  # the owner's commit of what it decided since
        with pytest.raises(OwnerLostError), anyio.fail_after(BOUND):
            await gen.boundary(lambda steer, metadata: None)


def test_importing_the_fleet_never_imports_psycopg() -> None:
    """live_steering.fleet loads without psycopg; PostgresFleet without it names the extra to install."""
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "import live_steering.fleet as fleet\n"
        "assert 'psycopg' not in {m for m in sys.modules if sys.modules[m] is not None}\n"
        "try:\n"
        "    fleet.PostgresFleet\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    command = [sys.executable, "-c", code]
    proc = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'live-steering[postgres]'" in proc.stdout


async def test_two_nodes_race_to_own_a_new_session(fleet_store: FleetStore) -> None:
    """Two nodes owning one new session at once: one owns it (epoch 1), the other is told it is held."""
    session = new_session()
    outcomes: list[str] = []
    both = anyio.Event()
    release = anyio.Event()

    def record(outcome: str) -> None:
        outcomes.append(outcome)
        if len(outcomes) == 2:
            both.set()

    async with fleet_store.fleet("a") as a, fleet_store.fleet("b") as b, anyio.create_task_group() as tg:

        async def try_own(fleet: Any) -> None:
            try:
                async with fleet.own(LiveRuntime(session_id=session)):
                    record(f"owner {fleet.node_id} epoch {fleet.owner(session).epoch}")
                    await release.wait()
            except LeaseHeldError:
                record("held")

        tg.start_soon(try_own, a)
        tg.start_soon(try_own, b)
        await both.wait()
        release.set()
    assert sorted(outcomes)[0] == "held"
    assert sorted(outcomes)[1] in {"owner a epoch 1", "owner b epoch 1"}


async def test_hostile_content_crosses_the_store_exactly(fleet_store: FleetStore) -> None:
    """NUL, lone surrogates, control characters reach the owner's core as sent: in-process receipts (C24)."""
    hostile = [
        Input("steer", "nul\x00text", id="n1"),
        Input("steer", "lone \ud800 surrogate", id="n2"),
        Input("steer", "ok", id="id\x00nul"),
        Input("steer", "ok", id="\udfff"),
        Input("note\x00", "kind with NUL", id="n3"),
        Input("steer", "bell\x07 and\nnewline", id="ctl\x1b[31m"),
    ]
    local = LiveRuntime(session_id="local")
    session = new_session()
    async with (
        fleet_store.fleet("owner") as owner,
        fleet_store.fleet("host") as host,
        owner.own(LiveRuntime(session_id=session)) as runtime,
        runtime.open_generation("g1"),
        local.open_generation("g1"),
    ):
        for anchor in ("g1", "g\x00", "g\ud800"):
            for input in hostile:
                expected = await local.submit_steering(input, anchor)
                got = await host.submit(session, input, anchor)
                assert got == expected, (input, anchor)
        assert await host.receipt(session, "id\x00nul") is None
        ctl = await host.receipt(session, "ctl\x1b[31m")
        assert ctl is not None
        assert ctl.disposition is Disposition.QUEUED
