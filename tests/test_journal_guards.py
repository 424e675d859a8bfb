"""The journal never reports durable what is not in its file (C23): row counts, file identity,
damaged files met by a reader, and the lock probe that tells a live writer from a dead one."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from journal_helpers import damage_dispositions, damage_the_schema, killed_writer, rows
from live_steering import Disposition, Input, LiveRuntime
from live_steering.journal import (
    ChangeKind,
    JournalChange,
    JournalCorruptError,
    JournalError,
    ReceiptJournal,
    connect,
    live_writer,
    read_receipts,
)
from live_steering.journal import _store as store

pytestmark = pytest.mark.anyio


async def _submit(runtime: LiveRuntime, gen_id: str, *ids: str) -> None:
    for input_id in ids:
        receipt = await runtime.submit_steering(Input("steer", f"text of {input_id}", id=input_id), gen_id)
        assert receipt.accepted, receipt


class _Writer:
    """A context writer that records the ids it was handed."""

    def __init__(self) -> None:
        self.written: list[str] = []

    async def __call__(self, input: Input, metadata: Mapping[str, Any]) -> None:
        self.written.append(input.id)


def _failed_events(runtime: LiveRuntime) -> list[dict[str, Any]]:
    return [dict(e) for e in runtime.recent_events() if e["type"] == "journal.failed"]


async def _small_journal(path: Path, *ids: str) -> None:
    """A closed journal at ``path`` whose inputs ``ids`` are all applied."""

    async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
        await anyio.lowlevel.checkpoint()

    async with ReceiptJournal(path) as journal:
        runtime = LiveRuntime(session_id="other")
        journal.attach(runtime)
        async with runtime.open_generation("g0") as gen:
            await _submit(runtime, "g0", *ids)
            await gen.boundary(writer)
            gen.stop()


# -- the file under a running journal --------------------------------------------------------


def _unlink(path: Path, tmp: Path) -> None:
    path.unlink()


def _rename(path: Path, tmp: Path) -> None:
    path.rename(tmp / "moved.db")


def _replace(path: Path, tmp: Path) -> None:
    os.replace(tmp / "other.db", path)


def _unlink_lock(path: Path, tmp: Path) -> None:
    Path(f"{path}.lock").unlink()


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (_unlink, "was unlinked or renamed while open"),
        (_rename, "was unlinked or renamed while open"),
        (_replace, "was replaced by another file while open"),
        (_unlink_lock, r"r\.db\.lock' was unlinked or renamed"),
    ],
    ids=["unlink", "rename", "replace", "unlink-lock"],
)
async def test_a_file_changed_under_a_running_journal_fails_it(
    tmp_path: Path, change: Any, says: str
) -> None:
    """Unlinked, renamed or replaced under a live journal: the next commit fails it (journal.failed),
    nothing after is reported durable, and the barrier lets nothing reach the writer."""
    path = tmp_path / "r.db"
    await _small_journal(tmp_path / "other.db", "theirs")
    reported: list[JournalChange] = []
    writer = _Writer()
    async with ReceiptJournal(path) as journal:
        runtime = LiveRuntime()
        journal.attach(runtime)
        journal.add_durable_listener(reported.extend)
        async with runtime.open_generation("g1") as gen:
            await _submit(runtime, "g1", "before")
            await journal.wait_durable("before")
            change(path, tmp_path)
            await _submit(runtime, "g1", "after")
            with pytest.raises(JournalError, match=says):
                await journal.wait_durable("after")
            assert journal.durable_receipt("after") is None
            assert journal.statistics().failed is not None
            (event,) = _failed_events(runtime)
            assert event["durable_through"] == 1  # the accepted record of "before", nothing later
            assert event["sqlite_error"] is None
            with pytest.raises(JournalError, match=says):
                await gen.boundary(writer)
            assert writer.written == []
            gen.stop()
        runtime._check()
    assert [(c.input_id, c.change) for c in reported] == [("before", ChangeKind.ACCEPTED)]
    # the WAL left at the path was emptied into the file written: nothing of it leaks elsewhere
    if change is _replace:  # the file now at the path is the other one, untouched
        assert {e.input_id: e.disposition for e in read_receipts(path)} == {"theirs": Disposition.APPLIED}
    if change is _rename:  # the renamed file holds every commit, the durable one included
        assert "before" in {e.input_id for e in read_receipts(tmp_path / "moved.db")}
    if change is _unlink:  # a new journal at the path starts empty and sound
        async with ReceiptJournal(path) as fresh:
            assert await fresh.entries() == []


async def test_an_update_that_touches_no_row_fails_the_journal(tmp_path: Path) -> None:
    """A row changed behind the journal: the mark finds no queued row, the commit is rolled back,
    the journal fails and the writer never sees the input."""
    path = tmp_path / "r.db"
    writer = _Writer()
    async with ReceiptJournal(path) as journal:
        runtime = LiveRuntime()
        journal.attach(runtime)
        async with runtime.open_generation("g1") as gen:
            await _submit(runtime, "g1", "a")
            await journal.wait_durable("a")
            with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
                other.execute("UPDATE receipts SET disposition = 'held', reason = 'tampered'")
            with pytest.raises(JournalError, match=r"writing change of input 'a' .* no row still queued"):
                await gen.boundary(writer)
            assert writer.written == []
            assert len(_failed_events(runtime)) == 1
            gen.stop()
        runtime._check()
    assert rows(path, "SELECT change FROM changes") == [("accepted",)]  # the mark was rolled back


def _change(number: int, input_id: str, kind: ChangeKind) -> JournalChange:
    return JournalChange(
        number=number,
        runtime_no=1,
        session_id="s",
        input_id=input_id,
        generation_id="g",
        change=kind,
        disposition=store.DISPOSITION_OF_CHANGE[kind],
        reason=None,
        kind="steer",
        digest="0" * 64,
        sequence=number,
        admission=number,
        time=1.0,
    )


@pytest.mark.parametrize("kind", [ChangeKind.WRITING, ChangeKind.APPLIED, ChangeKind.HELD])
def test_commit_refuses_an_update_of_a_row_that_is_not_queued(tmp_path: Path, kind: ChangeKind) -> None:
    """``commit`` rolls back the whole batch when an update matches no queued row (never accepted,
    or already final), so nothing of it is in the file."""
    path = str(tmp_path / "r.db")
    lock = store.lock(path)
    conn = connect(path)
    try:
        store.prepare(conn, path)
        file = store.FileIdentity.of(path, lock)
        store.commit(conn, [_change(1, "a", ChangeKind.ACCEPTED), _change(2, "a", ChangeKind.APPLIED)], file)
        for batch in (
            [_change(3, "b", ChangeKind.ACCEPTED), _change(4, "never", kind)],  # no such row
            [_change(5, "c", ChangeKind.ACCEPTED), _change(6, "a", kind)],  # "a" is final already
        ):
            with pytest.raises(JournalError, match="found no row still queued"):
                store.commit(conn, batch, file)
        assert [e.input_id for e in store.select(conn, path)] == ["a"]
        assert conn.execute("SELECT count(*) FROM changes").fetchone()[0] == 2
    finally:
        conn.close()
        store.unlock(lock)


# -- damaged files met by a reader ------------------------------------------------------------


async def test_a_damaged_value_is_corruption_for_every_reader(tmp_path: Path) -> None:
    """A flipped byte in a stored disposition ('appBied') is JournalCorruptError for read_receipts
    (with and without the integrity check) exactly as for opening, never a ValueError."""
    path = tmp_path / "r.db"
    await _small_journal(path, "a", "b")
    damage_dispositions(path)
    # a read-only connection's integrity check skips CHECK constraints: each row is checked instead
    for check in (True, False):
        with pytest.raises(JournalCorruptError, match="is damaged: input 'a' holds disposition='appBied'"):
            read_receipts(path, check=check)
    with pytest.raises(JournalCorruptError, match="is damaged: CHECK constraint failed"):
        async with ReceiptJournal(path):
            pass


async def test_a_read_filter_of_the_wrong_type_or_no_possible_id_is_refused(tmp_path: Path) -> None:
    """An id filter that is not a str is a TypeError, an id nothing can have (a lone surrogate,
    empty, NUL) a ValueError naming the filter, for read_receipts and ReceiptJournal.entries alike:
    not an empty answer, not an encoding error from SQLite."""
    path = tmp_path / "r.db"
    await _small_journal(path, "a", "b")
    for bad in ("g\ud800", "", "nul\x00inside"):
        with pytest.raises(ValueError, match="generation_id"):
            read_receipts(path, generation_id=bad)
    with pytest.raises(TypeError, match="generation_id must be a str"):
        read_receipts(path, generation_id=5)  # type: ignore[arg-type]
    async with ReceiptJournal(path) as journal:
        with pytest.raises(ValueError, match="input_id"):
            await journal.entries(input_id="a\ud800")
        with pytest.raises(TypeError, match="generation_id must be a str"):
            await journal.entries(generation_id=5)  # type: ignore[arg-type]
        assert [e.input_id for e in await journal.entries(input_id="a")] == ["a"]


async def test_a_damaged_schema_is_corruption_for_every_reader(tmp_path: Path) -> None:
    """A flipped byte in the schema's CHECK constraint, with every row intact, is JournalCorruptError
    for read_receipts (with and without the integrity check) as for opening: a reader never lists
    rows of a file that a writer then refuses to open."""
    path = tmp_path / "r.db"
    await _small_journal(path, "a", "b")
    damage_the_schema(path)
    damage = r"is damaged: its schema differs from a journal's \(receipts\)"
    for check in (True, False):
        with pytest.raises(JournalCorruptError, match=damage):
            read_receipts(path, check=check)
    with pytest.raises(JournalCorruptError, match="is damaged"):
        async with ReceiptJournal(path):
            pass


def test_a_value_of_the_wrong_type_is_corruption(tmp_path: Path) -> None:
    """A row holding a value no journal writes (a blob id, a text sequence) is JournalCorruptError."""
    path = tmp_path / "r.db"
    anyio.run(_small_journal, path, "a")
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("UPDATE receipts SET input_id = x'00ff', accepted_sequence = 'one'")
    damage = r"a row holds input_id=b'\\x00\\xff', accepted_sequence='one'"
    with pytest.raises(JournalCorruptError, match=damage):
        read_receipts(path)


def test_opening_a_foreign_sqlite_file_changes_nothing_in_it(tmp_path: Path) -> None:
    """A SQLite file that is not a journal is refused before its journal mode is switched to WAL."""
    foreign = tmp_path / "foreign.db"
    with contextlib.closing(sqlite3.connect(foreign)) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.commit()

    async def open_it() -> None:
        async with ReceiptJournal(foreign):
            pass

    with pytest.raises(JournalCorruptError, match="not a live_steering receipt journal"):
        anyio.run(open_it)
    assert rows(foreign, "PRAGMA journal_mode") == [("delete",)]


async def test_a_missing_directory_is_a_journal_error(tmp_path: Path) -> None:
    """Opening a journal in a directory that does not exist raises JournalError naming the path."""
    path = tmp_path / "nowhere" / "r.db"
    with pytest.raises(JournalError, match=r"nowhere/r\.db.*cannot open its lock file.*No such file"):
        async with ReceiptJournal(path):
            pass


# -- the lock probe ---------------------------------------------------------------------------


async def test_live_writer_tells_a_live_journal_from_a_closed_one(tmp_path: Path) -> None:
    """live_writer is True while a journal has the file open, False before and after, and never
    creates the lock file."""
    path = tmp_path / "r.db"
    assert live_writer(path) is False
    assert not await anyio.Path(f"{path}.lock").exists()
    async with ReceiptJournal(path):
        assert live_writer(path) is True
        assert live_writer(path) is True  # probing twice takes nothing away
    assert live_writer(path) is False
    async with ReceiptJournal(path):  # and a probe never stands in the way of the next writer
        pass


def test_live_writer_is_false_once_the_writer_is_killed(tmp_path: Path) -> None:
    """A writer killed with SIGKILL leaves its lock file, but the kernel dropped the lock."""
    path = tmp_path / "killed.db"
    killed_writer(path)
    assert Path(f"{path}.lock").exists()
    assert live_writer(path) is False


def test_opening_rides_out_a_probe_holding_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``lock`` retries a lock held for an instant (a probe's shared lock) instead of failing busy."""
    path = str(tmp_path / "r.db")
    probe = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(probe, fcntl.LOCK_SH)
    waits: list[float] = []

    def sleep(delay: float) -> None:  # the probe ends during the first wait
        if not waits:
            os.close(probe)
        waits.append(delay)

    monkeypatch.setattr(time, "sleep", sleep)
    held = store.lock(path)
    store.unlock(held)
    assert len(waits) == 1


# -- the lock file of an open that failed ---------------------------------------------------


@pytest.mark.parametrize("what", ["a directory", "not a database"])
async def test_an_open_that_fails_leaves_no_lock_file_it_made(tmp_path: Path, what: str) -> None:
    """Opening a directory or a file that is no SQLite database fails, and removes the
    PATH.lock it created (the demo's ``--journal /tmp`` used to leave ``/tmp.lock``)."""
    path = tmp_path / "target"
    if what == "a directory":
        path.mkdir()
    else:
        path.write_text("plain text, not a database\n" * 100)
    with pytest.raises(JournalError):
        async with ReceiptJournal(path):
            pass
    assert not await anyio.Path(f"{path}.lock").exists()


async def test_an_open_that_fails_keeps_a_lock_file_it_found(tmp_path: Path) -> None:
    """A lock file that was there before the failed open (another journal's) stays."""
    path = tmp_path / "target"
    path.write_text("plain text, not a database\n" * 100)
    os.close(os.open(f"{path}.lock", os.O_CREAT | os.O_WRONLY))
    with pytest.raises(JournalError):
        async with ReceiptJournal(path):
            pass
    assert await anyio.Path(f"{path}.lock").exists()


def test_a_lock_file_removed_while_waiting_for_it_is_not_the_one_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that waited on a lock file which the holder then discarded locks the new file at
    the path, never the removed one (two holders otherwise)."""
    path = str(tmp_path / "r.db")
    holder = store.lock(path)

    class Clock:
        """``time`` for the waiter: its first wait is where the holder discards its lock file."""

        def __init__(self) -> None:
            self.waits = 0

        def sleep(self, delay: float) -> None:
            self.waits += 1
            if self.waits == 1:
                store.discard_lock(path, holder)

    clock = Clock()
    monkeypatch.setattr(store, "time", clock)
    waiter = store.lock(path)
    try:
        assert clock.waits == 1
        held, at_path = os.fstat(waiter), os.stat(f"{path}.lock")
        assert (held.st_dev, held.st_ino) == (at_path.st_dev, at_path.st_ino)
        probe = os.open(f"{path}.lock", os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(probe)
    finally:
        store.unlock(waiter)
