"""``live-steering receipts PATH``: the table, the filters and the JSON lines."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from journal_helpers import damage_dispositions, killed_writer
from live_steering import Disposition, Input, LiveRuntime
from live_steering._cli import main
from live_steering.journal import ReceiptJournal, read_receipts


async def _build(path: Path) -> None:
    async with ReceiptJournal(path) as journal:
        runtime = LiveRuntime()
        journal.attach(runtime)

        async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
            await anyio.lowlevel.checkpoint()

        async with runtime.open_generation("gen-a") as gen:
            for input_id in ("fix-1", "fix-2"):
                await runtime.submit_steering(Input("steer", f"text {input_id}", id=input_id), gen.id)
            await gen.boundary(writer)
            await runtime.submit_steering(Input("steer", "too late", id="bell\x07id"), gen.id)
            gen.stop()
        async with runtime.open_generation("gen-b") as gen:
            await runtime.submit_steering(Input("steer", "never written", id="fix-3"), gen.id)
            gen.stop()


@pytest.fixture
def journal_path(tmp_path: Path) -> Path:
    path = tmp_path / "receipts.db"
    anyio.run(_build, path)
    return path


def test_table_lists_every_receipt(journal_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The table has a header and one row per input: id, kind, generation, disposition, reason, time,
    runtime."""
    assert main(["receipts", str(journal_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "KIND", "GENERATION", "DISPOSITION", "REASON", "WHEN", "RUNTIME"]
    cells = [line.split() for line in lines[1:]]
    assert [c[:5] for c in cells] == [
        ["fix-1", "steer", "gen-a", "applied", "-"],
        ["fix-2", "steer", "gen-a", "applied", "-"],
        ["bell\\x07id", "steer", "gen-a", "held", "generation-stopped"],
        ["fix-3", "steer", "gen-b", "held", "generation-stopped"],
    ]
    assert all(c[5].endswith("Z") and "T" in c[5] for c in cells)
    assert len({c[6] for c in cells}) == 1
    assert cells[0][6].endswith("#1")


def test_filters_by_generation_and_disposition(
    journal_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--generation and --disposition keep only the matching receipts, and combine."""
    assert main(["receipts", str(journal_path), "--generation", "gen-a", "--disposition", "held"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [r.split()[0] for r in rows] == ["bell\\x07id"]
    assert main(["receipts", str(journal_path), "--disposition", "applied"]) == 0
    assert [r.split()[0] for r in capsys.readouterr().out.splitlines()[1:]] == ["fix-1", "fix-2"]
    with pytest.raises(SystemExit):
        main(["receipts", str(journal_path), "--disposition", "lost"])


def test_a_filter_no_id_can_match_is_a_usage_error(
    journal_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--generation or --session outside the id rules (empty, NUL): one line, exit 2, nothing
    listed, from a journal as from a fleet store (tests/test_fleet_hardening.py)."""
    for option, value in (("--generation", ""), ("--generation", "g\x00"), ("--session", "")):
        assert main(["receipts", str(journal_path), option, value]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.count("\n") == 1
        assert captured.err.startswith(f"live-steering receipts: {option} must be")


def test_filters_a_journal_by_session(journal_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--session keeps a journal's rows of that runtime session: all of them, or none for another."""
    session = read_receipts(journal_path)[0].session_id
    assert main(["receipts", str(journal_path), "--session", session]) == 0
    assert len(capsys.readouterr().out.splitlines()[1:]) == 4
    assert main(["receipts", str(journal_path), "--session", "another-session", "--json"]) == 0
    assert capsys.readouterr().out == ""


def test_json_lines_carry_the_wire_shape(journal_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints one object per receipt: the C4 wire shape plus kind, reason and updatedAt."""
    assert main(["receipts", str(journal_path), "--json", "--generation", "gen-b"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    record = json.loads(line)
    assert set(record) == {
        "accepted",
        "inputId",
        "generationId",
        "disposition",
        "reason",
        "kind",
        "updatedAt",
        "writing",
    }
    assert record["writing"] is False
    assert record["accepted"] is True
    assert (record["inputId"], record["generationId"]) == ("fix-3", "gen-b")
    assert (record["disposition"], record["reason"], record["kind"]) == (
        "held",
        "generation-stopped",
        "steer",
    )
    assert main(["receipts", str(journal_path), "--json", "--disposition", "applied"]) == 0
    applied = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["reason"] for r in applied] == [None, None]


def test_every_json_row_has_the_same_keys_in_the_same_order(
    journal_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A consumer that reads the rows as records (a CSV writer, a diff) gets one key order for all
    of them: a held row (with a reason) and an applied row (without) do not differ."""
    assert main(["receipts", str(journal_path), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {row["disposition"] for row in rows} == {"applied", "held"}
    orders = {tuple(row) for row in rows}
    assert orders == {
        ("accepted", "inputId", "generationId", "disposition", "reason", "kind", "updatedAt", "writing")
    }


def _one_line(err: str) -> str:
    """The single line a CLI error must be (no traceback, nothing else)."""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_missing_or_foreign_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing file exits 1, a file that is not a journal exits 2, each with one line, creating nothing."""
    missing = tmp_path / "missing.db"
    for extra in ([], ["--recover"]):
        assert main(["receipts", str(missing), *extra]) == 1
        assert "no receipt journal" in _one_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not sqlite" * 100)
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    for path in (garbage, empty):
        for extra in ([], ["--recover"]):
            assert main(["receipts", str(path), *extra]) == 2
            assert _one_line(capsys.readouterr().err).startswith("live-steering receipts:")
    assert empty.read_bytes() == b""  # --recover did not make a journal of it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db", "garbage.db"]


def test_a_damaged_file_exits_2_with_one_line(tmp_path: Path) -> None:
    """A damaged stored value ('appBied') is exit 2 and one line naming the damage, as a real
    process: no ValueError traceback, for the listing and for --recover."""
    path = tmp_path / "r.db"
    anyio.run(_build, path)
    damage_dispositions(path)
    for extra in ([], ["--json"], ["--recover"]):
        shown = subprocess.run(
            [sys.executable, "-m", "live_steering._cli", "receipts", str(path), *extra],
            capture_output=True,
            text=True,
            check=False,
        )
        assert (shown.returncode, shown.stdout) == (2, "")
        line = _one_line(shown.stderr)
        assert line.startswith("live-steering receipts: receipt journal ")
        assert "is damaged" in line


def test_queued_rows_of_a_dead_writer_are_marked_and_recovered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a kill -9 the listing marks the queued row whose mark is durable ``queued (writing)``,
    says the rows were left by a process that died, and ``--recover`` makes that row unknown and
    the others held (runtime-lost)."""
    path = tmp_path / "killed.db"
    killed_writer(path)
    assert main(["receipts", str(path), "--disposition", "queued"]) == 0
    out, err = capsys.readouterr()
    queued = [line.split("  ")[0].strip() for line in out.splitlines()[1:]]
    writing = [line.split()[0] for line in out.splitlines()[1:] if "queued (writing)" in line]
    assert len(queued) == 2
    assert len(writing) == 1
    note = _one_line(err)
    assert "left by a process that died (no live writer holds this file)" in note
    assert f"'live-steering receipts {path} --recover' makes them 1 unknown (marked writing), 1 held" in note
    assert main(["receipts", str(path), "--json", "--disposition", "queued"]) == 0
    marked = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["inputId"] for r in marked if r["writing"]] == writing

    assert main(["receipts", str(path), "--recover", "--json"]) == 0
    out, err = capsys.readouterr()
    summary = "2 left queued by a process that died: 1 held, 1 unknown (marked writing), reason runtime-lost"
    assert _one_line(err).endswith(summary)
    after = {r["inputId"]: (r["disposition"], r["reason"]) for r in map(json.loads, out.splitlines())}
    assert after[writing[0]] == ("unknown", "runtime-lost")
    (other,) = set(queued) - set(writing)
    assert after[other] == ("held", "runtime-lost")
    assert "queued" not in {d for d, _ in after.values()}
    assert main(["receipts", str(path), "--recover"]) == 0  # a second recovery finds nothing
    assert "nothing was left queued" in capsys.readouterr().err


@pytest.mark.anyio
async def test_a_live_writer_is_named_and_recovery_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Beside a live journal the listing says a live writer holds the file, and --recover is refused
    with one line, exit 1, changing nothing."""
    path = tmp_path / "live.db"
    async with ReceiptJournal(path) as journal:
        runtime = LiveRuntime()
        journal.attach(runtime)
        async with runtime.open_generation("g1") as gen:
            await runtime.submit_steering(Input("steer", "still queued", id="pending"), gen.id)
            await journal.wait_durable("pending")
            # main() calls anyio.run for --recover: run it off this event loop's thread
            assert await anyio.to_thread.run_sync(main, ["receipts", str(path)]) == 0
            out, err = capsys.readouterr()
            assert "pending" in out
            assert _one_line(err) == (
                "note: a live writer holds this file (its lock is taken): this is its last commit; "
                "1 queued may still change"
            )
            assert await anyio.to_thread.run_sync(main, ["receipts", str(path), "--recover"]) == 1
            out, err = capsys.readouterr()
            assert out == ""
            assert _one_line(err) == (
                f"live-steering receipts: refusing to recover {path}: a live writer holds it "
                "(its lock is taken); recovery runs once no process has the journal open"
            )
            assert [e.disposition for e in read_receipts(path)] == [Disposition.QUEUED]
            gen.stop()


def test_listing_into_a_closed_pipe_exits_quietly(journal_path: Path) -> None:
    """``receipts PATH | head -0``: a reader already gone is no traceback and exit 0."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        shown = subprocess.run(
            [sys.executable, "-m", "live_steering._cli", "receipts", str(journal_path)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (shown.returncode, shown.stderr) == (0, "")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_demo_journal_prints_durable_receipts_matching_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], backend: str
) -> None:
    """``demo --journal --steers N``: every disposition is printed durable once, and the file agrees."""
    path = tmp_path / "demo.db"
    assert main(["demo", "--journal", str(path), "--steers", "25", "--json", "--backend", backend]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    durable = [line for line in lines if line["type"] == "receipt.durable"]
    assert all(set(line) == {"type", "input_id", "disposition"} for line in durable)
    final = {line["input_id"]: line["disposition"] for line in durable}
    assert len(final) == 25
    assert [line["disposition"] for line in durable if line["input_id"] == "steer-1"] == ["queued", "applied"]
    stored = {e.input_id: e.disposition.value for e in read_receipts(path)}
    assert stored == final
    assert set(stored.values()) == {"applied", "held"}  # every fifth generation is stopped
    events = [line for line in lines if line["type"] == "steering.applied"]
    assert len(events) == sum(1 for v in stored.values() if v == "applied")


def test_demo_steers_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    """``--steers 0`` is a usage error, not a silent empty run."""
    with pytest.raises(SystemExit):
        main(["demo", "--steers", "0"])
    assert "positive" in capsys.readouterr().err


def test_the_recover_transcript_in_the_docs_is_what_it_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/receipts.md's ``--recover`` transcript, replayed on a writer killed after its second mark,
    prints the same lines (times aside): the notes on stderr, the table on stdout."""
    docs = (Path(__file__).parent.parent / "docs" / "receipts.md").read_text()
    block = next(b for b in docs.split("```") if b.startswith("\n$ live-steering receipts crash.db"))
    monkeypatch.chdir(tmp_path)
    killed_writer(tmp_path / "crash.db")
    when = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
    for command in block.strip().split("$ ")[1:]:
        line, *expected = command.strip().splitlines()
        argv = line.split()
        assert argv[0] == "live-steering"
        assert main(argv[1:]) == 0
        out, err = capsys.readouterr()
        printed = err.splitlines() + out.splitlines() if "--recover" in argv else (out + err).splitlines()
        assert [when.sub("WHEN", x) for x in printed] == [when.sub("WHEN", x) for x in expected]
