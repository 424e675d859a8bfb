"""The receipt journal: durability, group commit, write-ahead marks, recovery, faults (C22, C23)."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from journal_helpers import FaultyConnection, rows, snapshot
from live_steering import Disposition, HoldReason, Input, LiveRuntime, LiveSteeringError, UnknownInputError
from live_steering.journal import (
    ChangeKind,
    JournalBusyError,
    JournalChange,
    JournalCorruptError,
    JournalError,
    ReceiptJournal,
    read_receipts,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _submit(runtime: LiveRuntime, gen_id: str, *ids: str) -> None:
    for input_id in ids:
        receipt = await runtime.submit_steering(Input("steer", f"text of {input_id}", id=input_id), gen_id)
        assert receipt.accepted, receipt


async def _noop_writer(input: Input, metadata: Mapping[str, Any]) -> None:
    await anyio.lowlevel.checkpoint()


def _states(path: Path) -> dict[str, tuple[str, str | None]]:
    return {e.input_id: (e.disposition.value, e.reason) for e in read_receipts(path)}


# -- recording ------------------------------------------------------------------------------


async def test_every_disposition_change_is_recorded(tmp_path: Path) -> None:
    """Accepted, applied, held and unknown inputs are in the file with kind, digest, reason and history."""
    path = tmp_path / "r.db"
    async with ReceiptJournal(path) as journal:
        runtime = LiveRuntime(session_id="s1")
        journal.attach(runtime)
        async with runtime.open_generation("g1") as gen:
            await _submit(runtime, "g1", "ok", "boom")

            async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
                if input.id == "boom":
                    raise RuntimeError("context store down")

            with pytest.raises(RuntimeError, match="context store down"):
                await gen.boundary(writer)
            await _submit(runtime, "g1", "late")
            gen.stop()
        await journal.flush()
        entries = {e.input_id: e for e in await journal.entries()}
    assert {k: (e.disposition, e.reason) for k, e in entries.items()} == {
        "ok": (Disposition.APPLIED, None),
        "boom": (Disposition.UNKNOWN, HoldReason.WRITE_INTERRUPTED.value),
        "late": (Disposition.HELD, HoldReason.GENERATION_STOPPED.value),
    }
    ok = entries["ok"]
    assert (ok.session_id, ok.generation_id, ok.kind) == ("s1", "g1", "steer")
    assert ok.digest == hashlib.sha256(b"steer\x00text of ok").hexdigest()
    assert ok.marked
    assert entries["boom"].marked
    assert not entries["late"].marked
    history = rows(path, "SELECT input_id, change FROM changes ORDER BY id")
    assert [h for h in history if h[0] == "ok"] == [("ok", "accepted"), ("ok", "writing"), ("ok", "applied")]
    assert [h for h in history if h[0] == "late"] == [("late", "accepted"), ("late", "held")]
    assert read_receipts(path, disposition="held")[0].input_id == "late"
    assert [e.input_id for e in read_receipts(path, generation_id="g1")] == ["ok", "boom", "late"]


async def test_refused_input_never_reaches_sqlite(tmp_path: Path) -> None:
    """Lone surrogates, NUL, blank or oversized text are refused at admission and never journaled."""
    path = tmp_path / "r.db"
    async with ReceiptJournal(path) as journal:
        runtime = LiveRuntime(max_text_chars=100)
        journal.attach(runtime)
        bad = [
            Input("steer", "lone \ud800 surrogate", id="surrogate-text"),
            Input("steer", "fine", id="id-\udfff"),
            Input("steer", "nul \x00 inside", id="nul"),
            Input("steer", "   ", id="blank"),
            Input("steer", "x" * 101, id="huge"),
            Input("note", "wrong kind", id="kind"),
        ]
        async with runtime.open_generation("g1") as gen:
            for input in bad:
                receipt = await runtime.submit_steering(input, "g1")
                assert not receipt.accepted
                with pytest.raises(UnknownInputError, match="was never journaled"):
                    await journal.wait_durable(input.id)
                assert journal.durable_receipt(input.id) is None
            await _submit(runtime, "g1", "good")
            await journal.wait_durable("good")
            gen.stop()
        await journal.flush()
        assert journal.statistics().unjournaled == 0
    assert rows(path, "SELECT input_id FROM receipts") == [("good",)]
    assert {r[0] for r in rows(path, "SELECT DISTINCT input_id FROM changes")} == {"good"}


async def test_attach_journals_what_the_runtime_already_holds(tmp_path: Path) -> None:
    """Inputs accepted (and finalised) before attach are journaled as they stand."""
    runtime = LiveRuntime()
    async with runtime.open_generation("g1") as gen:
        await _submit(runtime, "g1", "early")
        await gen.boundary(_noop_writer)
        await _submit(runtime, "g1", "pending")
        async with ReceiptJournal(tmp_path / "r.db") as journal:
            journal.attach(runtime)
            await journal.flush()
            assert _states(tmp_path / "r.db") == {"early": ("applied", None), "pending": ("queued", None)}
            await gen.boundary(_noop_writer)
            gen.stop()
            await journal.flush()
            assert _states(tmp_path / "r.db")["pending"] == ("applied", None)


async def test_attach_in_a_woken_engine_first_step_journals_the_admission_once(tmp_path: Path) -> None:
    """Attached before the submitter resumed (its steering.accepted still owed): one accepted change."""
    runtime = LiveRuntime()
    async with ReceiptJournal(tmp_path / "r.db") as journal:

        async def engine() -> None:
            async with runtime.open_generation("g1") as gen:
                assert await gen.wait_for_input()
                journal.attach(runtime)  # the engine's first step after the wake-up
                await gen.boundary(_noop_writer)
                assert not gen.continue_after_checkpoint()

        async with anyio.create_task_group() as tg:
            tg.start_soon(engine)
            await anyio.wait_all_tasks_blocked()
            await _submit(runtime, "g1", "a")
        await journal.flush()
    changes = rows(tmp_path / "r.db", "SELECT change FROM changes WHERE input_id = 'a' ORDER BY id")
    assert [change for (change,) in changes] == ["accepted", "writing", "applied"]
    assert _states(tmp_path / "r.db") == {"a": ("applied", None)}


async def test_journal_reads_in_a_woken_engine_first_step_see_the_admission(tmp_path: Path) -> None:
    """Before the submitter resumed: the journal answers for the input the runtime shows queued."""
    runtime = LiveRuntime()
    seen: list[object] = []
    async with ReceiptJournal(tmp_path / "r.db") as journal:
        journal.attach(runtime)

        async def engine() -> None:
            async with runtime.open_generation("g1") as gen:
                assert await gen.wait_for_input()
                enqueued = journal.statistics().enqueued  # the engine's first step
                await journal.wait_durable("a")  # no KeyError: the journal saw it
                seen.append(enqueued)
                await gen.boundary(_noop_writer)
                gen.stop()

        async with anyio.create_task_group() as tg:
            tg.start_soon(engine)
            await anyio.wait_all_tasks_blocked()
            await _submit(runtime, "g1", "a")
    assert seen == [1]
    assert _states(tmp_path / "r.db") == {"a": ("applied", None)}


@pytest.mark.parametrize("leave", ["detach", "aclose"])
async def test_leaving_in_a_woken_engine_first_step_keeps_the_admission(tmp_path: Path, leave: str) -> None:
    """Detached or closed before the submitter resumed: the acceptance it still owed is journaled."""
    runtime = LiveRuntime()
    journal = ReceiptJournal(tmp_path / "r.db")
    async with journal:
        detach = journal.attach(runtime)

        async def engine() -> None:
            async with runtime.open_generation("g1") as gen:
                assert await gen.wait_for_input()
                if leave == "detach":  # the engine's first step after the wake-up
                    detach()
                else:
                    await journal.aclose()
                gen.stop()

        async with anyio.create_task_group() as tg:
            tg.start_soon(engine)
            await anyio.wait_all_tasks_blocked()
            await _submit(runtime, "g1", "a")
    changes = rows(tmp_path / "r.db", "SELECT change FROM changes WHERE input_id = 'a' ORDER BY id")
    assert [change for (change,) in changes] == ["accepted"]
    assert journal.statistics().unjournaled == 0


async def test_attach_refuses_a_second_journal_and_detach_refuses_unjournaled_writes(tmp_path: Path) -> None:
    """One journal per runtime; once detached the barrier refuses writes: nothing is written unjournaled."""
    async with ReceiptJournal(tmp_path / "r.db") as journal:
        runtime = LiveRuntime()
        detach = journal.attach(runtime)
        with pytest.raises(ValueError, match="already has a write barrier"):
            journal.attach(runtime)
        detach()
        assert journal.statistics().attached == 0
        async with runtime.open_generation("g1") as gen:
            await _submit(runtime, "g1", "a")
            with pytest.raises(JournalError, match="detached or closed"):
                await gen.boundary(_noop_writer)
            assert runtime.receipt("a").disposition is Disposition.QUEUED  # type: ignore[union-attr]
            runtime.set_write_barrier(None)  # the host's deliberate choice
            await gen.boundary(_noop_writer)
            gen.stop()
        runtime._check()


async def test_attach_during_a_context_write_is_refused(tmp_path: Path) -> None:
    """A write that began unmarked could not be told from one never written, so attach refuses it."""
    async with ReceiptJournal(tmp_path / "r.db") as journal:
        runtime = LiveRuntime()
        refused: list[str] = []

        async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
            with pytest.raises(ValueError, match="a context write is in progress") as caught:
                journal.attach(runtime)
            refused.append(str(caught.value))

        async with runtime.open_generation("g1") as gen:
            await _submit(runtime, "g1", "a")
            await gen.boundary(writer)
            assert len(refused) == 1
            assert runtime.write_barrier is None
            journal.attach(runtime)  # between boundaries it is fine
            gen.stop()
        await journal.flush()
        assert [(e.input_id, e.disposition) for e in await journal.entries()] == [("a", Disposition.APPLIED)]


# -- durability and group commit ------------------------------------------------------------


async def test_wait_durable_returns_only_after_the_commit_returned(tmp_path: Path) -> None:
    """While a commit is in flight nothing is durable; the waiter and listeners fire after it returns."""
    path = tmp_path / "r.db"
    gate = threading.Event()
    conn = FaultyConnection(gate=gate)
    reported: list[JournalChange] = []
    async with ReceiptJournal(path, connect=conn.factory) as journal:
        runtime = LiveRuntime()
        journal.attach(runtime)

        def on_durable(changes: Sequence[JournalChange]) -> None:
            # every change reported is already in the file
            assert {c.input_id for c in changes} <= {e.input_id for e in read_receipts(path)}
            reported.extend(changes)

        journal.add_durable_listener(on_durable)
        conn.armed = True
        done = anyio.Event()
        async with runtime.open_generation("g1") as gen:
            await _submit(runtime, "g1", "a")

            async def wait() -> None:
                await journal.wait_durable("a")
                done.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await anyio.to_thread.run_sync(conn.parked.wait)
                await anyio.wait_all_tasks_blocked()
                assert not done.is_set()
                assert journal.durable_receipt("a") is None
                assert journal.statistics().durable == 0
                assert reported == []
                assert read_receipts(path) == []
                gate.set()
            assert done.is_set()
            durable = journal.durable_receipt("a")
            assert durable is not None
            assert durable.disposition is Disposition.QUEUED
            assert [(c.input_id, c.change) for c in reported] == [("a", ChangeKind.ACCEPTED)]
            gen.stop()


async def test_group_commit_batches_changes_queued_during_a_commit(tmp_path: Path) -> None:
    """Fifty submits made while one commit is in flight go to disk in one more commit, not fifty."""
    gate = threading.Event()
    conn = FaultyConnection(gate=gate)
    async with ReceiptJournal(tmp_path / "r.db", connect=conn.factory) as journal:
        runtime = LiveRuntime()
        journal.attach(runtime)
        conn.armed = True
        async with runtime.open_generation("g1") as gen:
            await _submit(runtime, "g1", "first")
            await anyio.to_thread.run_sync(conn.parked.wait)
            await _submit(runtime, "g1", *(f"in-{i}" for i in range(50)))
            gate.set()
            await journal.wait_durable("in-49")
            stats = journal.statistics()
            assert stats.commits == 2
            assert stats.largest_batch == 50
            assert stats.durable == stats.enqueued == 51
            gen.stop()


async def test_waiters_return_with_everything_before_them_durable(tmp_path: Path) -> None:
    """A waiter on change N returns only once every change up to N is durable, whatever order they wait in."""
    async with ReceiptJournal(tmp_path / "r.db") as journal:
        runtime = LiveRuntime()
        journal.attach(runtime)
        seen: list[tuple[int, int]] = []
        async with runtime.open_generation("g1") as gen:
            await _submit(runtime, "g1", *(f"i{n}" for n in range(20)))
            numbers = list(range(journal.statistics().enqueued, 0, -3))

            async def wait(number: int) -> None:
                await journal.wait_durable(number)
                seen.append((number, journal.statistics().durable))

            async with anyio.create_task_group() as tg:
                for number in numbers:
                    tg.start_soon(wait, number)
            gen.stop()
        assert sorted(n for n, _ in seen) == sorted(numbers)
        assert all(durable >= number for number, durable in seen)
        assert journal.statistics().waiters == 0
        with pytest.raises(ValueError, match="never queued"):
            await journal.wait_durable(10_000)


async def test_cancelled_waiter_does_not_abandon_the_commit(tmp_path: Path) -> None:
    """Cancelling a wait_durable caller leaves the in-flight commit to finish; the change becomes durable."""
    path = tmp_path / "r.db"
    gate = threading.Event()
    conn = FaultyConnection(gate=gate)
    async with ReceiptJournal(path, connect=conn.factory) as journal:
        runtime = LiveRuntime()
        journal.attach(runtime)
        conn.armed = True
        async with runtime.open_generation("g1") as gen:
            await _submit(runtime, "g1", "a")
            with anyio.CancelScope() as scope:
                await anyio.to_thread.run_sync(conn.parked.wait)
                scope.cancel()
                await journal.wait_durable("a")
            assert scope.cancelled_caught
            gate.set()
            await journal.flush()
            gen.stop()
        await journal.flush()
    assert _states(path)["a"][0] == "held"


async def test_closing_under_cancellation_still_commits_what_was_queued(tmp_path: Path) -> None:
    """A host cancelled mid-commit: the begun commit completes and the rest is committed on close."""
    path = tmp_path / "r.db"
    gate = threading.Event()
    conn = FaultyConnection(gate=gate)
    runtime = LiveRuntime()
    with anyio.CancelScope() as scope:
        async with ReceiptJournal(path, connect=conn.factory) as journal:
            journal.attach(runtime)
            conn.armed = True
            gen = runtime.open_generation("g1")
            await gen.__aenter__()
            await _submit(runtime, "g1", "a")
            await anyio.to_thread.run_sync(conn.parked.wait)
            await _submit(runtime, "g1", "b")
            scope.cancel()
            gate.set()
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert _states(path) == {"a": ("queued", None), "b": ("queued", None)}
    async with ReceiptJournal(path) as reopened:
        assert reopened.recovery.held == ("a", "b")
    assert journal.statistics().waiters == 0


# -- write-ahead marks ----------------------------------------------------------------------


async def test_mark_is_durable_before_the_writer_sees_the_input(tmp_path: Path) -> None:
    """C23: when the writer runs, its input is marked in the file and no input behind it is."""
    path = tmp_path / "r.db"
    ids = [f"i{n}" for n in range(10)]
    async with ReceiptJournal(path) as journal:
        runtime = LiveRuntime()
        journal.attach(runtime)
        commits_at_write: list[int] = []
        marked_at_write: list[dict[str, bool]] = []

        async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
            commits_at_write.append(journal.statistics().commits)
            marked_at_write.append({e.input_id: e.marked for e in read_receipts(path)})

        async with runtime.open_generation("g1") as gen:
            await _submit(runtime, "g1", *ids)
            await journal.flush()
            before = journal.statistics().commits
            await gen.boundary(writer)
            gen.stop()
    assert len(marked_at_write) == 10
    for k, marks in enumerate(marked_at_write):
        assert marks[ids[k]], f"{ids[k]} reached the writer unmarked"
        assert not any(marks[i] for i in ids[k + 1 :]), f"inputs behind {ids[k]} were already marked"
    # one durable commit per input written: its mark (with the previous input's applied)
    assert commits_at_write == [before + k + 1 for k in range(10)]


async def test_cancelled_while_the_mark_commits_the_input_is_held_not_unknown(tmp_path: Path) -> None:
    """Cancelling the loop during its write-ahead commit: never written, held in memory and on disk."""
    path = tmp_path / "r.db"
    gate = threading.Event()
    conn = FaultyConnection(gate=gate)
    written: list[str] = []

    async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
        written.append(input.id)

    async with ReceiptJournal(path, connect=conn.factory) as journal:
        runtime = LiveRuntime()
        journal.attach(runtime)

        async def engine() -> None:
            async with runtime.open_generation("g1") as gen:
                await _submit(runtime, "g1", "a")
                await journal.flush()
                conn.armed = True
                await gen.boundary(writer)

        async with anyio.create_task_group() as tg:
            tg.start_soon(engine)
            await anyio.to_thread.run_sync(conn.parked.wait)
            tg.cancel_scope.cancel()
        receipt = runtime.receipt("a")
        assert receipt is not None
        assert (receipt.disposition, receipt.reason) == (Disposition.HELD, HoldReason.GENERATION_CANCELLED)
        runtime._check()
        gate.set()
        await journal.flush()
    assert written == []
    (entry,) = read_receipts(path)
    assert (entry.disposition, entry.reason, entry.marked) == (
        Disposition.HELD,
        HoldReason.GENERATION_CANCELLED.value,
        True,
    )


# -- recovery -------------------------------------------------------------------------------


async def test_recovery_finalises_queued_inputs_by_their_mark(tmp_path: Path) -> None:
    """After process loss: applied stays, marked-but-unconfirmed is unknown, never-marked is held (C23)."""
    live = tmp_path / "live.db"
    crashed = tmp_path / "crashed.db"
    async with ReceiptJournal(live) as journal:
        runtime = LiveRuntime()
        journal.attach(runtime)
        async with runtime.open_generation("g1") as gen:
            await _submit(runtime, "g1", "applied", "maybe")

            async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
                if input.id == "maybe":
                    await _submit(runtime, "g1", "never")
                    await journal.flush()
                    snapshot(live, crashed)  # the process "dies" in the middle of this write

            await gen.boundary(writer)
            gen.stop()
    assert _states(crashed) == {
        "applied": ("applied", None),
        "maybe": ("queued", None),
        "never": ("queued", None),
    }
    async with ReceiptJournal(crashed, clock=lambda: 1234.5) as recovered:
        assert recovered.recovery.unknown == ("maybe",)
        assert recovered.recovery.held == ("never",)
        assert recovered.statistics().recovered_unknown == 1
        entries = {e.input_id: e for e in await recovered.entries()}
    lost = HoldReason.RUNTIME_LOST.value
    assert _states(crashed) == {
        "applied": ("applied", None),
        "maybe": ("unknown", lost),
        "never": ("held", lost),
    }
    assert entries["never"].updated_at == 1234.5
    assert rows(crashed, "SELECT input_id, change, disposition FROM changes WHERE change = 'recovered'") == [
        ("maybe", "recovered", "unknown"),
        ("never", "recovered", "held"),
    ]
    async with ReceiptJournal(crashed) as again:  # recovery is durable: nothing left to do
        assert again.recovery.held == again.recovery.unknown == ()


async def test_a_new_runtime_reusing_ids_gets_its_own_rows(tmp_path: Path) -> None:
    """Identities are per runtime: a restarted session reusing an id adds a row instead of clobbering."""
    path = tmp_path / "r.db"
    for _ in range(2):
        async with ReceiptJournal(path) as journal:
            runtime = LiveRuntime(session_id="same-session")
            journal.attach(runtime)
            async with runtime.open_generation() as gen:
                await _submit(runtime, gen.id, "fix-1")
                await gen.boundary(_noop_writer)
                gen.stop()
    assert rows(path, "SELECT runtime_no, input_id, disposition FROM receipts ORDER BY runtime_no") == [
        (1, "fix-1", "applied"),
        (2, "fix-1", "applied"),
    ]


async def test_several_runtimes_need_a_session_id_to_wait_on_a_shared_id(tmp_path: Path) -> None:
    """The same input id in two attached runtimes is ambiguous until a session_id picks one."""
    async with ReceiptJournal(tmp_path / "r.db") as journal:
        one, two = LiveRuntime(session_id="one"), LiveRuntime(session_id="two")
        journal.attach(one)
        journal.attach(two)
        async with one.open_generation("g1") as g1, two.open_generation("g2") as g2:
            await _submit(one, "g1", "shared")
            await _submit(two, "g2", "shared")
            with pytest.raises(ValueError, match="pass session_id"):
                await journal.wait_durable("shared")
            await journal.wait_durable("shared", session_id="two")
            receipt = journal.durable_receipt("shared", session_id="two")
            assert receipt is not None
            assert receipt.generation_id == "g2"
            g1.stop()
            g2.stop()


# -- opening: integrity, locking, foreign files ----------------------------------------------


async def test_second_open_of_a_live_journal_is_refused(tmp_path: Path) -> None:
    """Recovery never runs under a live writer: a second open is JournalBusyError until the first closes."""
    path = tmp_path / "r.db"
    async with ReceiptJournal(path):
        with pytest.raises(JournalBusyError, match="open elsewhere"):
            async with ReceiptJournal(path):
                pass
    async with ReceiptJournal(path) as journal:
        assert journal.statistics().open


async def test_garbage_and_foreign_files_are_refused_as_corrupt(tmp_path: Path) -> None:
    """A file that is not SQLite, or a SQLite file that is not a journal, is JournalCorruptError."""
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database at all" * 200)
    with pytest.raises(JournalCorruptError):
        async with ReceiptJournal(garbage):
            pass
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(JournalCorruptError, match="not a live_steering receipt journal"):
        async with ReceiptJournal(foreign):
            pass
    with pytest.raises(JournalCorruptError, match="not a live_steering receipt journal"):
        read_receipts(foreign)
    with pytest.raises(FileNotFoundError):
        read_receipts(tmp_path / "missing.db")


async def test_damaged_pages_fail_the_integrity_check(tmp_path: Path) -> None:
    """Overwritten table pages make opening raise JournalCorruptError with SQLite's findings."""
    path = tmp_path / "r.db"
    async with ReceiptJournal(path) as journal:
        runtime = LiveRuntime()
        journal.attach(runtime)
        async with runtime.open_generation("g1") as gen:
            await _submit(runtime, "g1", *(f"input-{n:04d}" for n in range(300)))
            gen.stop()
    data = bytearray(path.read_bytes())
    assert len(data) > 8 * 4096
    for page in range(3, len(data) // 4096):
        data[page * 4096 + 8 : page * 4096 + 72] = b"\xff" * 64
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorruptError, match=r"damaged|malformed"):
        async with ReceiptJournal(path):
            pass


# -- faults ---------------------------------------------------------------------------------


@pytest.mark.parametrize("message", ["database or disk is full", "disk I/O error"])
@pytest.mark.parametrize(("fail_on", "nth"), [("COMMIT", 1), ("COMMIT", 2), ("INSERT", 3)])
async def test_failed_write_surfaces_and_reports_nothing_false(
    tmp_path: Path, message: str, fail_on: str, nth: int
) -> None:
    """Disk full / I/O error on the Nth write: waiters and the barrier raise, journal.failed is published,
    the runtime stays consistent and only what was reported durable is in the file."""
    path = tmp_path / "r.db"
    conn = FaultyConnection(fail_on=fail_on, nth=nth, error=sqlite3.OperationalError(message))
    reported: list[JournalChange] = []
    written: list[str] = []
    runtime = LiveRuntime()

    async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
        written.append(input.id)

    async with ReceiptJournal(path, connect=conn.factory) as journal:
        journal.attach(runtime)
        journal.add_durable_listener(reported.extend)
        conn.armed = True
        async with runtime.open_generation("g1") as gen:
            failure: JournalError | None = None
            for n in range(6):
                await _submit(runtime, "g1", f"i{n}")
                try:
                    await journal.wait_durable(f"i{n}")
                except JournalError as exc:
                    failure = exc
                    break
            assert failure is not None, "the injected fault never fired"
            assert message in str(failure)
            stats = journal.statistics()
            assert stats.failed is not None
            assert message in stats.failed
            failed_events = [e for e in runtime.recent_events() if e["type"] == "journal.failed"]
            assert len(failed_events) == 1
            assert message in failed_events[0]["error"]
            assert failed_events[0]["durable_through"] == stats.durable
            with pytest.raises(JournalError, match=message):
                await journal.wait_durable("i0")  # a failed journal vouches for nothing
            await _submit(runtime, "g1", "after-failure")
            with pytest.raises(JournalError, match=message):  # not KeyError: it was never journaled
                await journal.wait_durable("after-failure")
            assert journal.durable_receipt("after-failure") is None
            with pytest.raises(JournalError, match=message):
                await gen.boundary(writer)
            assert written == []
            assert all(r.disposition is Disposition.QUEUED for r in map(runtime.receipt, ["i0"]) if r)
            runtime._check()
            gen.stop()
        runtime._check()
        assert runtime.statistics().unknown == 0
        assert journal.statistics().unjournaled > 0
    in_file = _states(path)
    assert {c.input_id for c in reported} == set(in_file)
    assert all(state == ("queued", None) for state in in_file.values())
    last = f"i{n}"
    assert last not in in_file
    async with ReceiptJournal(path) as reopened:  # the file is intact and recovers
        assert set(reopened.recovery.held) == set(in_file)


async def test_an_unexpected_commit_error_fails_the_journal_instead_of_killing_it(tmp_path: Path) -> None:
    """A non-SQLite exception in a commit fails the journal like a disk error: waiters raise JournalError."""

    class Exploding(FaultyConnection):
        def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> sqlite3.Cursor:
            if self.armed and sql == "COMMIT":
                raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
            return super().execute(sql, parameters)

    conn = Exploding()
    async with ReceiptJournal(tmp_path / "r.db", connect=conn.factory) as journal:
        runtime = LiveRuntime()
        journal.attach(runtime)
        conn.armed = True
        async with runtime.open_generation("g1") as gen:
            await _submit(runtime, "g1", "a")
            with pytest.raises(JournalError, match="commit failed"):
                await journal.wait_durable("a")
            assert journal.statistics().failed is not None
            assert [e["type"] for e in runtime.recent_events()].count("journal.failed") == 1
            gen.stop()
        runtime._check()


async def test_the_connection_runs_wal_with_synchronous_full(tmp_path: Path) -> None:
    """C22: the journal's own connection is in WAL mode with synchronous=FULL (2), as durability needs."""
    conn = FaultyConnection()
    async with ReceiptJournal(tmp_path / "r.db", connect=conn.factory):
        assert conn._conn is not None
        assert conn._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn._conn.execute("PRAGMA synchronous").fetchone()[0] == 2


async def test_an_exception_from_the_body_propagates_unwrapped(tmp_path: Path) -> None:
    """The journal's internal task group never wraps the host's own exception in an ExceptionGroup."""
    with pytest.raises(KeyError, match="host bug"):
        async with ReceiptJournal(tmp_path / "r.db"):
            raise KeyError("host bug")
    async with ReceiptJournal(tmp_path / "r.db") as journal:  # and the lock was released
        assert journal.statistics().open
    assert not journal.statistics().open


def test_public_names_of_the_journal_module() -> None:
    """``live_steering.journal.__all__`` is the documented surface, and every name in it exists."""
    import live_steering.journal as module

    assert set(module.__all__) == {
        "ReceiptJournal",
        "JournalChange",
        "ChangeKind",
        "JournalEntry",
        "JournalStatistics",
        "RecoveryReport",
        "JournalConnection",
        "connect",
        "read_receipts",
        "live_writer",
        "JournalError",
        "JournalCorruptError",
        "JournalBusyError",
    }
    assert all(hasattr(module, name) for name in module.__all__)
    assert issubclass(module.JournalCorruptError, module.JournalError)
    assert issubclass(module.JournalError, LiveSteeringError)


def test_the_host_example_in_the_docs_runs_as_shown(tmp_path: Path) -> None:
    """The docs host example dies mid-run; after the restart fix-1 is held and nothing is resubmitted."""
    docs = (Path(__file__).parent.parent / "docs" / "receipts.md").read_text()
    blocks = docs.split("```")
    at = next(i for i, b in enumerate(blocks) if b.startswith('python\n"""host.py'))
    source, transcript = blocks[at].removeprefix("python\n"), blocks[at + 2]
    (tmp_path / "host.py").write_text(source)
    outputs = []
    for phase in ("first", "restart"):
        done = subprocess.run(
            [sys.executable, "host.py", phase], cwd=tmp_path, capture_output=True, text=True, check=True
        )
        outputs.append(f"$ python host.py {phase}\n{done.stdout}")
    assert "".join(outputs).strip() == transcript.strip()


async def test_follow_up_dispositions_are_durable_and_a_lost_one_is_held(tmp_path: Path) -> None:
    """C29 with C22/C23: a follow-up's applied (in the next generation) is journaled under its anchor;
    one still queued when the process dies (carried, never marked) is held ``runtime-lost``."""
    live = tmp_path / "live.db"
    crashed = tmp_path / "crashed.db"
    async with ReceiptJournal(live) as journal:
        runtime = LiveRuntime()
        journal.attach(runtime)
        async with runtime.open_generation("g1") as gen:
            for id_ in ("f-1", "f-2"):
                await runtime.submit_steering(Input("follow_up", f"then {id_}", id=id_), "g1")
            assert not gen.continue_after_checkpoint()
        async with runtime.open_generation("g2") as gen2:

            async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
                if input.id == "f-1":
                    await journal.flush()
                    snapshot(live, crashed)  # the process "dies" while f-1 is written

            await gen2.boundary(writer)
            assert not gen2.continue_after_checkpoint()
        await journal.flush()
        entries = {e.input_id: e for e in await journal.entries()}
    assert (entries["f-1"].disposition, entries["f-1"].generation_id) == (Disposition.APPLIED, "g1")
    assert _states(crashed) == {"f-1": ("queued", None), "f-2": ("queued", None)}
    async with ReceiptJournal(crashed) as recovered:
        assert recovered.recovery.unknown == ("f-1",)  # marked: it may be in a context
        assert recovered.recovery.held == ("f-2",)  # never handed to a writer
    lost = HoldReason.RUNTIME_LOST.value
    assert _states(crashed) == {"f-1": ("unknown", lost), "f-2": ("held", lost)}
