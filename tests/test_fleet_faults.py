"""Fault injection against the fleet (issue 25): owners killed (``kill -9``) and stopped
(``SIGSTOP``) under a flood of remote submits, PostgreSQL backends ended and the server
restarted, a SQLite store opened through a symlink, poison rows among the requests, submits
cancelled at random. Both stores, both backends (children run the test's backend).

Each run ends with the same checks, made from three sources that do not trust each other: the
hosts' log (every receipt a submit returned), the owners' logs (each child prints the id of
every input right before it hands it to its writer, ``context.write``, and after, ``applied``),
and the store after recovery:

* nothing written twice: no id is handed to a writer twice, by one owner or two;
* nothing written that a host was told ``held``: an id finalised ``held`` never reached a writer;
* nothing lost once recovery ran: every ``queued`` a host got is in the store, final
  (``applied``, ``held`` or ``unknown``), ``applied`` ones were written, one an owner applied
  is ``applied`` or ``unknown`` (never ``held``), and no request is left pending but one whose
  host was told only ``FleetError``.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import weakref
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from fleet_helpers import BOUND, Child, FleetStore, new_session, restart_cluster, spawn, terminate_backends
from live_steering import Disposition, Input, Receipt
from live_steering.fleet import Fleet, FleetError
from live_steering.testing._postgres import PostgresCluster

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.faults,
    pytest.mark.filterwarnings("ignore::live_steering.CheckpointDecisionWarning"),
]

#: Steers per run, and how many are in flight at once.
FLOOD = 120
IN_FLIGHT = 12
TTL = "1.5"


#: For each child, an event per line type, set when the first such line was read. Keyed by the
#: child itself, weakly: an ``id()`` is reused once a child is collected, and a later test (on
#: the other backend) would then wait on an earlier test's event.
_SEEN: weakref.WeakKeyDictionary[Child, dict[str, anyio.Event]] = weakref.WeakKeyDictionary()


def _seen(child: Child, type_: str) -> anyio.Event:
    return _SEEN.setdefault(child, {}).setdefault(type_, anyio.Event())


async def _pump(child: Child) -> None:
    """Read a child's lines as they come (its pipe never fills), until it closes stdout."""
    with contextlib.suppress(anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError):
        while True:
            line = json.loads(await child._stdout.receive_until(b"\n", 1 << 20))
            child.lines.append(line)
            _seen(child, line["type"]).set()


async def _until(child: Child, type_: str) -> None:
    with anyio.fail_after(BOUND):
        await _seen(child, type_).wait()


class Flood:
    """A host's flood of distinct steers, each anchored to the generation the owner runs as the
    host reads it; the hosts' log is ``receipts`` (and ``errors``: a ``FleetError`` while the
    store was down, also a fact a host was told)."""

    def __init__(self, host: Fleet, session: str, *, cancel_some: bool = False) -> None:
        self.host = host
        self.session = session
        self.receipts: dict[str, Receipt] = {}
        self.errors: dict[str, str] = {}
        self.cancelled: list[str] = []
        self.sent = 0
        self._cancel_some = cancel_some
        self._rng = random.Random(25)
        self.a_third = anyio.Event()
        self.taken_while_stopped: bool | None = None

    async def run(self, count: int) -> None:
        limiter = anyio.CapacityLimiter(IN_FLIGHT)

        async def one(n: int) -> None:
            async with limiter:
                input_id = f"f-{n}"
                try:
                    generation = await self.host.generation(self.session)
                    anchor = "none" if generation is None else generation["id"]
                    if self._cancel_some and self._rng.random() < 0.3:
                        with anyio.move_on_after(self._rng.random() * 0.02) as scope:
                            self.receipts[input_id] = await self.host.submit(
                                self.session, Input("steer", f"text {n}", id=input_id), anchor
                            )
                        if scope.cancelled_caught:
                            self.cancelled.append(input_id)
                    else:
                        self.receipts[input_id] = await self.host.submit(
                            self.session, Input("steer", f"text {n}", id=input_id), anchor
                        )
                except FleetError as exc:
                    self.errors[input_id] = str(exc)
                self.sent += 1
                if self.sent >= FLOOD // 3:
                    self.a_third.set()

        async with anyio.create_task_group() as tg:
            for n in range(count):
                tg.start_soon(one, n)
                await anyio.sleep(0.002)  # a flood, spread a little: the faults land mid-way


async def _check(store: FleetStore, flood: Flood, owners: list[Child]) -> dict[str, int]:
    """The three invariants, after recovery; the counts of the outcomes, for the record."""
    writes = [line["input_id"] for c in owners for line in c.lines if line["type"] == "context.write"]
    applied = {line["input_id"] for c in owners for line in c.lines if line["type"] == "applied"}
    assert len(writes) == len(set(writes)), "an input was handed to a writer twice"

    def read() -> tuple[dict[str, Any], list[str]]:
        conn = store.connection()
        try:
            final: dict[str, Any] = {}
            for entry in conn.entries(session_id=flood.session):
                final[entry.input_id] = entry  # ordered by epoch: the latest owner's wins
            conn.begin()
            pending = [
                row[0]
                for row in conn.execute(
                    "SELECT input_id FROM ls_requests WHERE session_id = ? AND state = 'pending'",
                    (flood.session,),
                ).fetchall()
            ]
            conn.commit()
            return final, pending
        finally:
            conn.close()

    final, pending = await anyio.to_thread.run_sync(read)
    # A request left pending is one whose host was told only FleetError (its insert's commit
    # reached the server, the answer did not: the server went down in between): never a receipt.
    assert set(pending) <= set(flood.errors), (pending, flood.errors)
    for entry in final.values():
        assert entry.disposition is not Disposition.QUEUED, entry  # recovery finalised everything
        if entry.disposition is Disposition.HELD:
            assert entry.input_id not in writes, f"{entry.input_id} was held, yet written"
        if entry.disposition is Disposition.APPLIED:
            assert entry.input_id in writes
    for input_id, receipt in flood.receipts.items():
        if receipt.accepted:
            assert input_id in final, f"{input_id} was accepted ({receipt}) but is not in the store"
            if receipt.disposition is Disposition.HELD:
                assert input_id not in writes
        else:
            # a refusal (unreachable included) is never decided later: nothing was accepted
            assert (
                input_id not in final
                or final[input_id].generation_id != receipt.generation_id
                or (receipt.reason == "identity-conflict")
            ), (input_id, receipt, final.get(input_id))
            assert input_id not in writes, f"{input_id} was refused ({receipt.reason}), yet written"
    for input_id in applied:
        # applied in its owner's runtime; in the store applied, or unknown when that owner's
        # applied change was not committed before it was lost (it was marked: maybe written)
        assert final[input_id].disposition in (Disposition.APPLIED, Disposition.UNKNOWN)
    outcomes: dict[str, int] = {}
    for entry in final.values():
        outcomes[entry.disposition.value] = outcomes.get(entry.disposition.value, 0) + 1
    outcomes["refused"] = sum(not r.accepted for r in flood.receipts.values())
    outcomes["errors"] = len(flood.errors)
    if flood.taken_while_stopped is not None:
        outcomes["taken_while_stopped"] = int(flood.taken_while_stopped)
    return outcomes


async def _owner(store: FleetStore, session: str, name: str, backend: str, *args: str) -> Child:
    return await spawn(
        store,
        "owner",
        session,
        "--node",
        name,
        "--ttl",
        TTL,
        "--generation",
        f"g-{name}",
        *args,
        backend=backend,
    )


async def _run_fault(
    store: FleetStore,
    anyio_backend: str,
    fault: str,
    *,
    cluster: PostgresCluster | None = None,
    host_store: FleetStore | None = None,
) -> dict[str, int]:
    """One owner and one standby (children), a host's flood, the fault mid-way, then recovery."""
    session = new_session()
    first = await _owner(store, session, "o1", anyio_backend)
    standby: Child | None = None
    children = [first]
    try:
        async with anyio.create_task_group() as pumps:
            pumps.start_soon(_pump, first)
            await _until(first, "owning")
            standby = await _owner(store, session, "o2", anyio_backend, "--wait", str(BOUND * 2))
            children.append(standby)
            pumps.start_soon(_pump, standby)
            async with (host_store or store).fleet("host", timeout=5.0, poll_interval=0.1) as host:
                flood = Flood(host, session, cancel_some=fault == "cancel")
                async with anyio.create_task_group() as tg:
                    tg.start_soon(flood.run, FLOOD)
                    with anyio.fail_after(BOUND):
                        await flood.a_third.wait()
                    if fault == "kill":
                        await first.kill()
                    elif fault == "stop":
                        first.signal(signal.SIGSTOP)
                        with anyio.move_on_after(float(TTL) + 3.0):  # past its lease: a zombie
                            await _until(standby, "owning")
                        # SQLite: False when the owner was stopped holding the write lock (docs/fleet.md)
                        flood.taken_while_stopped = _seen(standby, "owning").is_set()
                        first.signal(signal.SIGCONT)
                    elif fault == "terminate":
                        await anyio.to_thread.run_sync(terminate_backends, store.location)
                    elif fault == "restart":
                        assert cluster is not None
                        await anyio.to_thread.run_sync(lambda: restart_cluster(cluster, down=0.5))
                    elif fault == "poison":
                        await anyio.to_thread.run_sync(_poison, store, session)
                # the flood is over: the last owner stops its generation and leaves
                for child in children:
                    if child.process.returncode is None:
                        await child.close_stdin()
                for child in children:
                    with anyio.fail_after(BOUND):
                        await child.process.wait()
                await host.recover(session)
            pumps.cancel_scope.cancel()
        outcomes = await _check(store, flood, children)
    finally:
        for child in children:
            await child.kill()
    return outcomes


def _poison(store: FleetStore, session: str) -> None:
    """Garbage rows for the session's live owner, among the flood's."""
    conn = store.connection()
    try:
        lease = conn.read_lease(session)
        assert lease is not None
        conn.begin()
        for n, wire in enumerate(["not json", None, "[1]", '{"kind": 5}']):
            conn.execute(
                "INSERT INTO ls_requests (session_id, input_id, anchor, input, digest, node_id, "
                "owner_node_id, state, created_at) VALUES (?, ?, 'g-o1', ?, 'd', 'host', ?, 'pending', 0)",
                (session, f"poison-{n}", wire, lease.node_id),
            )
        conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize("fault", ["kill", "stop", "poison", "cancel"])
async def test_faults_under_a_flood(fleet_store: FleetStore, anyio_backend: str, fault: str) -> None:
    """kill -9, SIGSTOP past the lease, poison rows, cancelled submits: the invariants hold."""
    outcomes = await _run_fault(fleet_store, anyio_backend, fault)
    assert sum(outcomes.values()) > 0
    print(f"{fault} {fleet_store.kind} {anyio_backend}: {outcomes}")


@pytest.mark.parametrize("fault", ["terminate", "restart"])
async def test_postgres_faults_under_a_flood(
    own_cluster: PostgresCluster, anyio_backend: str, fault: str
) -> None:
    """Every backend ended, the server restarted: the invariants hold and the flood goes on."""
    store = FleetStore("postgres", own_cluster.dsn)
    outcomes = await _run_fault(store, anyio_backend, fault, cluster=own_cluster)
    print(f"{fault} postgres {anyio_backend}: {outcomes}")


async def test_kill_through_a_symlinked_store(tmp_path: Path, anyio_backend: str) -> None:
    """The owners open the store through a symlink, the host through its real path: kill -9 of the
    owner, the standby takes over, and the invariants hold."""
    real = tmp_path / "a" / "fleet.db"
    real.parent.mkdir()
    (tmp_path / "link.db").symlink_to(Path("a") / "fleet.db")
    outcomes = await _run_fault(
        FleetStore("sqlite", str(tmp_path / "link.db")),
        anyio_backend,
        "kill",
        host_store=FleetStore("sqlite", str(real)),
    )
    print(f"kill via symlink {anyio_backend}: {outcomes}")


def _pg_rows(dsn: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """One query on a connection of its own (the test's view of the server, not a node's)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return list(conn.execute(sql, params).fetchall())


def _holders(dsn: str, session: str) -> tuple[int | None, list[int], int]:
    """The lease row's ``holder_pid``, the backends granted a session advisory lock (this test's
    cluster runs one session: the owner's liveness lock), and how many client backends run."""
    lease = _pg_rows(dsn, "SELECT holder_pid FROM ls_leases WHERE session_id = %s", (session,))
    locks = _pg_rows(dsn, "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1")
    clients = _pg_rows(
        dsn,
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
        "AND pid <> pg_backend_pid()",
    )
    holder = None if not lease or lease[0][0] is None else int(lease[0][0])
    return holder, sorted(int(row[0]) for row in locks), int(clients[0][0])


async def test_a_reconnected_owner_is_ended_when_it_becomes_a_zombie(
    own_cluster: PostgresCluster, anyio_backend: str
) -> None:
    """An owner that rode out ``pg_terminate_backend`` (a new connection, its liveness lock taken
    again) names its new backend in the lease row, fenced by its epoch; once it is SIGSTOPped
    past its lease, the standby ends that backend and owns the session within TTL + 5 s, holding
    the liveness lock itself (before the fix the row named the dead backend: the taker ended
    nothing, then waited on the row or took over while the zombie kept the lock)."""
    dsn = own_cluster.dsn
    store = FleetStore("postgres", dsn)
    session = new_session()
    first = await _owner(store, session, "o1", anyio_backend)
    children = [first]
    try:
        async with anyio.create_task_group() as pumps:
            pumps.start_soon(_pump, first)
            await _until(first, "owning")
            old, locks, _ = await anyio.to_thread.run_sync(_holders, dsn, session)
            assert old is not None
            assert locks == [old]  # the take named the backend that locks
            assert await anyio.to_thread.run_sync(terminate_backends, dsn) >= 1
            with anyio.fail_after(BOUND):  # the owner renews every ttl / 3, on a new connection
                while True:
                    assert first.process.returncode is None
                    assert not _seen(first, "lost").is_set()
                    holder, locks, _ = await anyio.to_thread.run_sync(_holders, dsn, session)
                    if locks and locks != [old] and holder == locks[0]:
                        break
                    await anyio.sleep(0.05)
            new = holder
            assert new != old
            _, _, before = await anyio.to_thread.run_sync(_holders, dsn, session)
            standby = await _owner(store, session, "o2", anyio_backend, "--wait", str(BOUND * 2))
            children.append(standby)
            pumps.start_soon(_pump, standby)
            with anyio.fail_after(BOUND):  # the standby is connected (its node, listener, owner)
                while (await anyio.to_thread.run_sync(_holders, dsn, session))[2] < before + 3:  # noqa: ASYNC110 - another process's connections
                    await anyio.sleep(0.05)
            first.signal(signal.SIGSTOP)
            stopped = anyio.current_time()
            try:
                with anyio.fail_after(float(TTL) + 5.0):
                    await _seen(standby, "owning").wait()
                took = anyio.current_time() - stopped
                holder, locks, _ = await anyio.to_thread.run_sync(_holders, dsn, session)
                alive = await anyio.to_thread.run_sync(
                    _pg_rows, dsn, "SELECT pid FROM pg_stat_activity WHERE pid = %s", (new,)
                )
            finally:
                first.signal(signal.SIGCONT)
            assert holder is not None
            assert holder != new
            assert locks == [holder], (holder, locks, new)
            assert alive == []  # the zombie's backend was ended
            await _until(first, "lost")  # continued, it is fenced: its loop ends loudly
            await standby.close_stdin()
            with anyio.fail_after(BOUND):
                await standby.process.wait()
            pumps.cancel_scope.cancel()
        print(f"a reconnected zombie taken over {took:.2f} s after SIGSTOP (TTL {TTL} s)")
    finally:
        for child in children:
            await child.kill()
