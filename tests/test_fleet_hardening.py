"""The fleet's answers to the faults of issue 25, one deterministic test per fix, on both stores
and both backends: malformed request rows, fenced loops, symlinked paths, interrupted submits,
the sockets of dead nodes. (The fault-injection runs with real processes are in
``test_fleet_faults.py``.)"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest

from fleet_helpers import BOUND, FleetStore, new_session, restart_cluster, spawn, terminate_backends
from live_steering import Disposition, Input, LiveRuntime, Receipt, RuntimeClosedError
from live_steering.fleet import Fleet, FleetError, LeaseHeldError, OwnerLostError
from live_steering.fleet._sqlite import node_socket, socket_dir
from live_steering.testing._postgres import PostgresCluster

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::live_steering.CheckpointDecisionWarning"),
]


def _sql(store: FleetStore, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """One statement in its own transaction on a raw connection; the rows it returned."""
    conn = store.connection()
    try:
        conn.begin()
        cursor = conn.execute(sql, params)
        rows = list(cursor.fetchall()) if cursor.description is not None else []
        conn.commit()
        return rows
    finally:
        conn.close()


#: Rows no node of the library writes: not JSON, no input, not an object, a field missing or
#: of another type, a stop whose value is not a string.
POISON = [
    "not json",
    None,
    "[1, 2]",
    '{"kind": "steer", "text": "x", "id": "p"}',
    '{"kind": 1, "text": "x", "id": "p", "anchor": "g1"}',
    '{"kind": "steer", "text": "x", "id": "p", "anchor": "g1", "stop": 7}',
    "[" * 100_000,
]


async def test_a_malformed_request_row_is_quarantined(fleet_store: FleetStore) -> None:
    """Issue 25 (2): each poison row is refused ``invalid-input`` (its requester can read that),
    an event names it, and the owner and the session live on: a later steer is queued."""
    session = new_session()
    async with fleet_store.fleet("owner") as owner, fleet_store.fleet("host") as host:
        async with owner.own(LiveRuntime(session_id=session)) as runtime, runtime.open_generation("g1"):
            numbers = []
            for n, wire in enumerate(POISON):
                rows = await anyio.to_thread.run_sync(
                    _sql,
                    fleet_store,
                    "INSERT INTO ls_requests (session_id, input_id, anchor, input, digest, node_id, "
                    "owner_node_id, state, created_at) VALUES (?, ?, 'g1', ?, 'd', 'host', 'owner', "
                    "'pending', 0) RETURNING request_no",
                    (session, f"p-{n}", wire),
                )
                numbers.append(int(rows[0][0]))
            await owner.flush(session)
            statistics = owner.owner(session)
            assert statistics is not None
            assert statistics.failed is None
            store = host._store()
            for n, request_no in enumerate(numbers):
                receipt = await host._call(store.request_receipt, request_no)
                assert receipt is not None
                assert (receipt.accepted, receipt.input_id, receipt.generation_id, receipt.reason) == (
                    False,
                    f"p-{n}",
                    "g1",
                    "invalid-input",
                )
            quarantined = [e for e in runtime.recent_events() if e["type"] == "fleet.request_quarantined"]
            assert [e["request_no"] for e in quarantined] == numbers
            assert {e["reason"] for e in quarantined} == {"invalid-input"}
            assert all("malformed" in e["problem"] for e in quarantined)
            after = await host.submit(session, Input("steer", "still here", id="ok"), "g1")
            assert after.disposition is Disposition.QUEUED
        assert await host.request_states(session) == {"decided": len(POISON) + 1}


async def test_a_fenced_owner_loop_ends_loudly(fleet_store: FleetStore) -> None:
    """Issue 25 (3): once a commit met the fence (here the idle owner's own, not the boundary's),
    ``boundary()``, ``wait_for_input()`` (a steer was pending) and a new generation all raise
    ``OwnerLostError``: a ``FleetError`` and a ``RuntimeClosedError``, caused by ``FencedError``
    (or, on PostgreSQL, by the lost connection when the taker ended the zombie's session)."""
    session = new_session()
    async with fleet_store.fleet("a", ttl=30.0) as node_a, fleet_store.fleet("host") as host:
        async with node_a.own(LiveRuntime(session_id=session)) as runtime:
            async with runtime.open_generation("g1") as gen:
                await host.submit(session, Input("steer", "x", id="x"), "g1")
                await node_a.flush(session)
                thief = fleet_store.connection()
                try:
                    await anyio.to_thread.run_sync(thief.execute, "UPDATE ls_leases SET expires_at = 0")
                    assert await anyio.to_thread.run_sync(thief.take, session, "b", 30.0) is not None
                finally:
                    await anyio.to_thread.run_sync(thief.close)
                with pytest.raises(FleetError):
                    await node_a.flush(session)  # the commit that meets the fence
                assert runtime.closed
                for call in (gen.wait_for_input, lambda: gen.boundary(lambda input, metadata: None)):
                    with pytest.raises(OwnerLostError) as raised:
                        await call()
                    assert isinstance(raised.value, RuntimeClosedError)
                    assert isinstance(raised.value.__cause__, FleetError)
            with pytest.raises(OwnerLostError):
                async with runtime.open_generation("g2"):
                    pass
        receipt = await host.receipt(session, "x")
        assert receipt is not None
        assert receipt.disposition is Disposition.HELD


@pytest.mark.parametrize("link", ["file", "folder"])
async def test_a_store_opened_through_a_symlink_is_the_same_store(
    tmp_path: Path, link: str, anyio_backend: str
) -> None:
    """Issue 25 (1): nodes that name one SQLite file through a symlink (to the file, or to its
    folder) and through its real path find the same liveness locks: the live owner looks live,
    a recovery changes nothing, a second owner is refused ``LeaseHeldError``, and the steer a host
    sent through the link is applied by the owner, never finalised ``held runtime-lost``."""
    real = tmp_path / "a" / "fleet.db"
    real.parent.mkdir()
    if link == "file":
        through = tmp_path / "link.db"
        through.symlink_to(Path("a") / "fleet.db")
    else:
        (tmp_path / "b").symlink_to("a", target_is_directory=True)
        through = tmp_path / "b" / "fleet.db"
    real_store, linked = FleetStore("sqlite", str(real)), FleetStore("sqlite", str(through))
    for owner_store, other_store in ((real_store, linked), (linked, real_store)):
        session = new_session()
        async with (
            owner_store.fleet("owner") as owner,
            other_store.fleet("host") as host,
            owner.own(LiveRuntime(session_id=session)) as runtime,
            runtime.open_generation("g1") as gen,
        ):
            await owner.flush(session)
            lease = await host.lease(session)
            assert lease is not None
            assert lease.live
            assert not await host.recover(session)
            with pytest.raises(LeaseHeldError):
                async with host.own(LiveRuntime(session_id=session)):
                    pass
            queued = await host.submit(session, Input("steer", "x", id="x"), "g1")
            assert queued.disposition is Disposition.QUEUED
            async with anyio.create_task_group() as tg:
                tg.start_soon(gen.boundary, lambda input, metadata: None)
                final = await host.wait_final(session, "x")
            assert final.disposition is Disposition.APPLIED
    assert not (tmp_path / "link.db.locks").exists()


def test_receipts_with_a_session_that_is_not_utf8_fails_in_one_line(fleet_store: FleetStore) -> None:
    """Issue 25 (6): ``live-steering receipts STORE --session $'\\xff'`` is a usage error in one
    line (exit 2), on a SQLite path and with ``--dsn``, never a traceback."""
    fleet_store.connection().close()  # the store exists, with its tables
    where = ["--dsn", fleet_store.location] if fleet_store.kind == "postgres" else [fleet_store.location]
    for extra in ([], ["--recover"], ["--json"], ["--generation", "g1"]):
        proc = subprocess.run(
            [sys.executable, "-m", "live_steering._cli", "receipts", *where, "--session", b"\xff", *extra],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stdout == b""
        assert proc.stderr.count(b"\n") == 1, proc.stderr
        assert proc.stderr.startswith(b"live-steering receipts: --session must be valid UTF-8"), proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "live_steering._cli", "receipts", *where, "--generation", ""],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (2, b"")  # as from a journal: no id can match it
    assert proc.stderr.startswith(b"live-steering receipts: --generation must be"), proc.stderr


async def test_an_interrupted_submit_withdraws_its_request(
    fleet_store: FleetStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25 (6): a submit left by ``KeyboardInterrupt`` (raised at its first poll for the
    answer, the request stored and undecided: trio delivers it at any checkpoint) withdraws the
    request, as a cancelled one does: the owner can never decide it later."""
    session = new_session()
    holder = fleet_store.connection()  # a live owner that decides nothing: the lease and its lock
    try:
        assert await anyio.to_thread.run_sync(holder.take, session, "silent", 60.0) is not None
        async with fleet_store.fleet("host", poll_interval=0.01) as host:
            real_call = host._call

            async def interrupted(function: Any, *args: Any, **kwargs: Any) -> Any:
                if getattr(function, "__name__", "") == "request_receipt":
                    raise KeyboardInterrupt
                return await real_call(function, *args, **kwargs)

            monkeypatch.setattr(host, "_call", interrupted)
            with pytest.raises(KeyboardInterrupt):
                await host.submit(session, Input("steer", "x", id="x"), "g1")
            monkeypatch.undo()
            assert await host.request_states(session) == {"withdrawn": 1}
            with anyio.CancelScope() as scope:  # and a cancelled one, for comparison

                async def cancel_soon() -> None:
                    while (await host.request_states(session)).get("pending", 0) == 0:  # noqa: ASYNC110 - another connection's row
                        await anyio.sleep(0.01)
                    scope.cancel()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(cancel_soon)
                    await host.submit(session, Input("steer", "y", id="y"), "g1")
            assert await host.request_states(session) == {"withdrawn": 2}
    finally:
        await anyio.to_thread.run_sync(holder.close)


def _dead_socket(path: Path) -> None:
    """A socket file no process listens on: what ``kill -9`` of a node leaves behind."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.close()


def _names(folder: Path) -> list[str]:
    """The entries of a folder; ``[]`` when it is gone."""
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


async def test_the_sockets_and_folders_of_dead_nodes_are_swept(
    monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    """Issue 25 (7): a SQLite node that opens sweeps what nodes that died left in the temp folder
    (their sockets, in its store's folder and in other stores' folders, and those folders once
    empty), leaves live nodes' sockets and every other folder alone, and the store's last node
    to close leaves no folder behind, though a node of it was killed (``kill -9``)."""
    temp = Path(tempfile.mkdtemp(prefix="lsf-"))  # short: a socket's path has 107 bytes at most
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setenv("TMPDIR", str(temp))  # the child's too
    live = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        dead_folder = temp / "live-steering-0123456789abcdef"
        dead_folder.mkdir(mode=0o700)
        _dead_socket(dead_folder / "a.sock")
        _dead_socket(dead_folder / "b.sock")
        live_folder = temp / "live-steering-fedcba9876543210"
        live_folder.mkdir(mode=0o700)
        live.bind(str(live_folder / "live.sock"))
        other = temp / "live-steering-clients"  # not a socket folder: never touched
        other.mkdir()
        _dead_socket(other / "c.sock")
        store = FleetStore("sqlite", str(temp / "fleet.db"))
        folder = Path(socket_dir(store.location))
        child = await spawn(store, "owner", new_session(), "--node", "doomed", backend=anyio_backend)
        try:
            await child.next("owning")
        finally:
            await child.kill()
        assert _names(folder) == [Path(node_socket(store.location, "doomed")).name]
        async with store.fleet("host"):
            assert _names(folder) == [Path(node_socket(store.location, "host")).name]
            assert dead_folder.name not in _names(temp)
            assert _names(live_folder) == ["live.sock"]
            assert _names(other) == ["c.sock"]
        assert folder.name not in _names(temp)
    finally:
        live.close()
        shutil.rmtree(temp)


async def _owned_again(host: Fleet, session: str, n: int) -> Receipt:
    """Steer the session until a live owner queues it: the store may be down, the owner gone."""
    while True:
        try:
            generation = await host.generation(session)
            if generation is not None:
                receipt = await host.submit(
                    session, Input("steer", f"after {n}", id=f"after-{n}"), generation["id"]
                )
                if receipt.disposition is Disposition.QUEUED:
                    return receipt
        except FleetError:
            pass  # the server is still down, or the host's connection was ended: try again
        await anyio.sleep(0.05)


@pytest.mark.parametrize("fault", ["terminate", "restart"])
async def test_a_session_is_owned_again_once_the_server_is_back(
    own_cluster: PostgresCluster, fault: str, anyio_backend: str
) -> None:
    """Issue 25 (4): every backend ended (``pg_terminate_backend``), or the server restarted after
    a while down: the standby waiting in ``own(wait=...)`` and the owner ride it out with bounded
    backoff (neither fails with ``FleetError``), and the session is owned again (by either: the
    owner that reconnected, or the standby that took it over) once the server is back."""
    store = FleetStore("postgres", own_cluster.dsn)
    session = new_session()
    failures: list[BaseException] = []
    done = anyio.Event()
    owning = anyio.Event()

    async def node(fleet: Fleet, wait: float | None) -> None:
        name = fleet.node_id
        try:
            async with (
                fleet.own(LiveRuntime(session_id=session), wait=wait) as runtime,
                runtime.open_generation(f"g-{name}") as gen,
            ):
                await fleet.flush(session)
                owning.set()
                while not done.is_set():
                    with anyio.move_on_after(0.2):
                        if await gen.wait_for_input():
                            await gen.boundary(lambda input, metadata: None)
        except OwnerLostError:
            pass  # the other one owns it now: this one's loop ended loudly, as it must
        except Exception as exc:
            failures.append(exc)

    async with (
        store.fleet("a", ttl=3.0, poll_interval=0.2) as a,
        store.fleet("b", ttl=3.0, poll_interval=0.2) as b,  # open before the fault: opening needs the server
        store.fleet("host", timeout=5.0) as host,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(node, a, None)
        await owning.wait()
        tg.start_soon(node, b, BOUND * 4)  # a standby: waits for the lease
        assert (await _owned_again(host, session, 0)).disposition is Disposition.QUEUED
        if fault == "terminate":
            assert await anyio.to_thread.run_sync(terminate_backends, own_cluster.dsn) >= 3
        else:
            await anyio.to_thread.run_sync(lambda: restart_cluster(own_cluster, down=1.0))
        back = anyio.current_time()
        with anyio.fail_after(BOUND):
            await _owned_again(host, session, 1)
        took = anyio.current_time() - back
        done.set()
        tg.cancel_scope.cancel()
    print(f"owned again {took:.2f} s after the server was back ({fault})")
    assert failures == []


async def test_a_submit_waits_out_a_store_that_goes_away(
    fleet_store: FleetStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poll for the answer that fails because the store is away (a lost connection, a restart)
    does not end the submit: it waits on until its deadline and withdraws (``unreachable``),
    trying the withdrawal again too, so no request is left pending by a host that gave up."""
    session = new_session()
    holder = fleet_store.connection()  # a live owner that decides nothing: the lease and its lock
    try:
        assert await anyio.to_thread.run_sync(holder.take, session, "silent", 60.0) is not None
        async with fleet_store.fleet("host", poll_interval=0.01, timeout=0.5) as host:
            real_call = host._call
            failures = {"request_receipt": 3, "withdraw": 2}

            async def away(function: Any, *args: Any, **kwargs: Any) -> Any:
                name = getattr(function, "__name__", "")
                if failures.get(name, 0) > 0:
                    failures[name] -= 1
                    cause = host._errors()[0]("the store is away")
                    raise FleetError(f"fleet store {host.location}: {cause}") from cause
                return await real_call(function, *args, **kwargs)

            monkeypatch.setattr(host, "_call", away)
            receipt = await host.submit(session, Input("steer", "x", id="x"), "g1")
            monkeypatch.undo()
            assert (receipt.accepted, receipt.reason) == (False, "unreachable")
            assert failures == {"request_receipt": 0, "withdraw": 0}
            assert await host.request_states(session) == {"withdrawn": 1}
    finally:
        await anyio.to_thread.run_sync(holder.close)


async def _pending(host: Fleet, session: str) -> None:
    """Until the session has a pending request (another connection's row), bounded."""
    with anyio.fail_after(BOUND):
        while (await host.request_states(session)).get("pending", 0) == 0:  # noqa: ASYNC110 - another connection's row
            await anyio.sleep(0.01)


async def _settled(host: Fleet) -> None:
    """Until the node owes no withdrawal (its task withdrew them once the store answered), bounded."""
    with anyio.fail_after(BOUND):
        while host.statistics().withdrawals_owed:  # noqa: ASYNC110 - the node's own task settles them
            await anyio.sleep(0.01)


async def test_a_submit_cancelled_while_the_store_is_away_is_withdrawn_once_it_is_back(
    fleet_store: FleetStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submit cancelled while its withdrawal cannot reach the store (every try fails for longer
    than ``ABANDON_RETRY``) leaves the request owed, not forgotten: the node stores nothing else
    meanwhile (a submit raises ``FleetError``), and withdraws it as soon as the store answers, so
    its owner can never decide it (before the fix it stayed pending for the owner to decide)."""
    session = new_session()
    holder = fleet_store.connection()  # a live owner that decides nothing: the lease and its lock
    try:
        assert await anyio.to_thread.run_sync(holder.take, session, "silent", 60.0) is not None
        async with fleet_store.fleet("host", poll_interval=0.01) as host:
            real_call = host._call
            away = anyio.Event()
            back = anyio.Event()
            tries = {"withdraw": 0}

            async def store_away(function: Any, *args: Any, **kwargs: Any) -> Any:
                name = getattr(function, "__name__", "")
                if away.is_set() and not back.is_set() and name in ("withdraw", "request_receipt"):
                    tries[name] = tries.get(name, 0) + 1
                    cause = host._errors()[0]("the store is away")
                    raise FleetError(f"fleet store {host.location}: {cause}") from cause
                return await real_call(function, *args, **kwargs)

            monkeypatch.setattr(host, "_call", store_away)
            with anyio.CancelScope() as scope:

                async def cancel_once_away() -> None:
                    await _pending(host, session)
                    away.set()
                    scope.cancel()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(cancel_once_away)
                    await host.submit(session, Input("steer", "x", id="x"), "g1")
            assert scope.cancelled_caught
            assert tries["withdraw"] >= 2  # tried again, shielded, before giving it to the node
            assert host.statistics().withdrawals_owed == 1
            with pytest.raises(FleetError):  # the owed withdrawal goes first: nothing else is stored
                await host.submit(session, Input("steer", "y", id="y"), "g1")
            back.set()
            await _settled(host)
            monkeypatch.undo()
            assert await host.request_states(session) == {"withdrawn": 1}
    finally:
        await anyio.to_thread.run_sync(holder.close)


async def test_a_withdrawal_at_the_deadline_is_tried_for_the_calls_timeout_not_the_fleets(
    fleet_store: FleetStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submit with its own short timeout whose withdrawal at the deadline finds the store away
    tries it again for one more of its timeout, then raises FleetError (docs of submit). It tried
    for the fleet's timeout instead, an hour here: the call hung long after its own deadline."""
    session = new_session()
    holder = fleet_store.connection()  # a live owner that decides nothing: the request stays pending
    try:
        assert await anyio.to_thread.run_sync(holder.take, session, "silent", 60.0) is not None
        async with fleet_store.fleet("host", poll_interval=0.01, timeout=3600.0) as host:
            real_call = host._call
            away = {"on": False}

            async def store_away(function: Any, *args: Any, **kwargs: Any) -> Any:
                if away["on"] and getattr(function, "__name__", "") in ("withdraw", "request_receipt"):
                    cause = host._errors()[0]("the store is away")
                    raise FleetError(f"fleet store {host.location}: {cause}") from cause
                return await real_call(function, *args, **kwargs)

            monkeypatch.setattr(host, "_call", store_away)

            async def away_once_pending() -> None:
                await _pending(host, session)
                away["on"] = True

            with anyio.fail_after(BOUND):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(away_once_pending)
                    with pytest.raises(FleetError, match="the store is away"):
                        await host.submit(session, Input("steer", "x", id="x"), "g1", timeout=0.3)
            away["on"] = False
            monkeypatch.undo()
    finally:
        await anyio.to_thread.run_sync(holder.close)


async def test_a_submit_cancelled_while_sqlite_is_locked_is_withdrawn_once_it_is_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite, no stand-in: another process's connection holds the write lock (as a stopped
    writer does) while a submit is cancelled, so its withdrawal fails ``database is locked`` (the
    busy timeout shortened to 50 ms); once the lock is free the node withdraws the request."""
    import sqlite3

    from live_steering.fleet import _sqlite

    monkeypatch.setattr(_sqlite, "_PATIENT", ("FULL", 50, _sqlite._AUTOCHECKPOINT))
    store = FleetStore("sqlite", str(tmp_path / "fleet.db"))
    session = new_session()
    holder = store.connection()
    try:
        assert await anyio.to_thread.run_sync(holder.take, session, "silent", 60.0) is not None
        async with store.fleet("host", poll_interval=0.01) as host:
            locker = sqlite3.connect(store.location, isolation_level=None, check_same_thread=False)
            try:
                with anyio.CancelScope() as scope:

                    async def cancel_once_locked() -> None:
                        await _pending(host, session)
                        locker.execute("BEGIN IMMEDIATE")  # every writer of the file waits now
                        scope.cancel()

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(cancel_once_locked)
                        await host.submit(session, Input("steer", "x", id="x"), "g1")
                assert host.statistics().withdrawals_owed == 1
                assert await host.request_states(session) == {"pending": 1}
            finally:
                locker.execute("ROLLBACK")
                locker.close()
            await _settled(host)
            assert await host.request_states(session) == {"withdrawn": 1}
    finally:
        await anyio.to_thread.run_sync(holder.close)


async def test_a_submit_cancelled_while_postgres_is_down_is_withdrawn_once_it_is_back(
    own_cluster: PostgresCluster,
) -> None:
    """PostgreSQL, no stand-in: the server is stopped while a submit waits for its owner, the
    submit is cancelled while it is down, and the node withdraws the request once it is back."""
    store = FleetStore("postgres", own_cluster.dsn)
    session = new_session()
    holder = store.connection()
    try:
        assert await anyio.to_thread.run_sync(holder.take, session, "silent", 60.0) is not None
        async with store.fleet("host", poll_interval=0.05) as host, anyio.create_task_group() as tg:
            with anyio.CancelScope() as scope:

                async def cancel_once_down() -> None:
                    await _pending(host, session)
                    # down for 6 s: the cancel lands, and the shielded retries (1 s) run out, in it
                    tg.start_soon(anyio.to_thread.run_sync, lambda: restart_cluster(own_cluster, down=6.0))
                    with anyio.fail_after(BOUND):
                        while await anyio.to_thread.run_sync(_accepts, own_cluster.dsn):  # noqa: ASYNC110 - the server
                            await anyio.sleep(0.01)
                    scope.cancel()

                async with anyio.create_task_group() as inner:
                    inner.start_soon(cancel_once_down)
                    await host.submit(session, Input("steer", "x", id="x"), "g1")
            assert host.statistics().withdrawals_owed == 1
            await _settled(host)  # once the server is back
            assert await host.request_states(session) == {"withdrawn": 1}
    finally:
        await anyio.to_thread.run_sync(holder.close)


def _accepts(dsn: str) -> bool:
    import psycopg

    try:
        psycopg.connect(dsn, connect_timeout=2).close()
    except psycopg.Error:
        return False
    return True


async def test_own_checks_its_wait_and_a_fleet_its_seconds(fleet_store: FleetStore) -> None:
    """``own(wait=...)`` follows the rule of every call's timeout, before the store is touched: a
    non-number (a bool included) is a ``TypeError``, a negative, NaN or infinite one a
    ``ValueError``; ``wait=0`` tries once (a free lease is taken, a held one is ``LeaseHeldError``
    at once). A fleet's ``ttl``, ``timeout`` and ``poll_interval`` must be finite and positive."""
    import math

    session = new_session()
    async with fleet_store.fleet("a") as a, fleet_store.fleet("b") as b:
        for wrong_type in ("1", True, b"1"):
            with pytest.raises(TypeError, match="wait must be a number of seconds"):
                async with a.own(LiveRuntime(session_id=session), wait=wrong_type):  # type: ignore[arg-type]
                    pass
        for wrong in (-1, -0.5, math.nan, math.inf):
            with pytest.raises(ValueError, match="wait must be a non-negative, finite number"):
                async with a.own(LiveRuntime(session_id=session), wait=wrong):
                    pass
        assert await a.lease(session) is None  # nothing was tried
        with anyio.fail_after(BOUND):
            async with a.own(LiveRuntime(session_id=session), wait=0):  # free: taken at once
                with pytest.raises(LeaseHeldError):  # held: refused at once, as with no wait
                    async with b.own(LiveRuntime(session_id=session), wait=0):
                        pass
            async with b.own(LiveRuntime(session_id=session), wait=0.0):  # released: taken again
                pass
    for name in ("ttl", "timeout", "poll_interval"):
        for wrong in (math.inf, math.nan, 0, -1):
            with pytest.raises(ValueError, match=f"{name} must be a positive, finite number"):
                fleet_store.fleet("c", **{name: wrong})
