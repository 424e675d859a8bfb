"""``live-steering receipts PATH``: the table, the filters and the JSON lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from live_steering import Input, LiveRuntime
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
    """The table has a header and one row per input: id, generation, disposition, reason, time, runtime."""
    assert main(["receipts", str(journal_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "GENERATION", "DISPOSITION", "REASON", "WHEN", "RUNTIME"]
    cells = [line.split() for line in lines[1:]]
    assert [c[:4] for c in cells] == [
        ["fix-1", "gen-a", "applied", "-"],
        ["fix-2", "gen-a", "applied", "-"],
        ["bell\\x07id", "gen-a", "held", "generation-stopped"],
        ["fix-3", "gen-b", "held", "generation-stopped"],
    ]
    assert all(c[4].endswith("Z") and "T" in c[4] for c in cells)
    assert len({c[5] for c in cells}) == 1
    assert cells[0][5].endswith("#1")


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
    }
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


def test_missing_or_foreign_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing file or a file that is not a journal exits 1 with a message, creating nothing."""
    missing = tmp_path / "missing.db"
    assert main(["receipts", str(missing)]) == 1
    assert "no receipt journal" in capsys.readouterr().err
    assert not missing.exists()
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not sqlite" * 100)
    assert main(["receipts", str(garbage)]) == 1
    assert "live-steering receipts:" in capsys.readouterr().err


def test_unrecovered_queued_inputs_are_shown_with_a_note(tmp_path: Path) -> None:
    """A journal left by a killed writer shows its queued inputs as stored, and says recovery is pending."""
    path = tmp_path / "killed.db"
    writer = subprocess.run(
        [sys.executable, "-m", "live_steering.testing._journal_writer", str(path)],
        env={**os.environ, "LIVE_STEERING_KILL": "after-mark:2"},
        capture_output=True,
        check=False,
    )
    assert writer.returncode == -9
    shown = subprocess.run(
        [sys.executable, "-m", "live_steering._cli", "receipts", str(path), "--disposition", "queued"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert len(shown.stdout.splitlines()) > 1
    assert "queued: still live, or left by a process that died" in shown.stderr


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
