"""``live-steering steer``, ``receipts`` on a fleet store and ``demo --fleet``: the fleet from a shell."""

from __future__ import annotations

import io
import json

import anyio
import pytest

from fleet_helpers import FleetStore, new_session
from live_steering import Disposition, LiveRuntime
from live_steering._cli import main
from live_steering._cli._demo_fleet import run_fleet_demo

#: These tests leave generations with steers pending on purpose, to see them held across the
#: store (C17, C23); the library's warning for a forgotten checkpoint decision is not their subject.
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::live_steering.CheckpointDecisionWarning"),
]


def _store_args(store: FleetStore) -> list[str]:
    return ["--store", store.location] if store.kind == "sqlite" else ["--dsn", store.location]


async def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = await anyio.to_thread.run_sync(main, argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def test_steer_reaches_the_owner_and_receipts_reads_the_store(
    fleet_store: FleetStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """steer prints the owner's receipt (anchored to the running generation); receipts lists it."""
    session = new_session()
    where = _store_args(fleet_store)
    async with (
        fleet_store.fleet("owner") as owner,
        owner.own(LiveRuntime(session_id=session)) as runtime,
        runtime.open_generation("g1"),
    ):
        await owner.flush(session)
        code, out, _ = await _cli(["steer", *where, session, "Use X", "--id", "m-1", "--json"], capsys)
        assert code == 0
        assert json.loads(out) == {
            "accepted": True,
            "inputId": "m-1",
            "generationId": "g1",
            "disposition": "queued",
        }
        assert runtime.receipt("m-1") is not None
        code, out, _ = await _cli(["steer", *where, session, "Other", "--id", "m-1"], capsys)
        assert (code, out) == (1, "m-1: refused (identity-conflict)\n")
        code, out, _ = await _cli(
            ["steer", *where, session, "Old", "--id", "m-2", "--generation", "g0"], capsys
        )
        assert (code, out) == (1, "m-2: refused (stale-generation)\n")
    if fleet_store.kind == "sqlite":
        argv = ["receipts", fleet_store.location, "--session", session, "--json"]
    else:
        argv = ["receipts", "--dsn", fleet_store.location, "--session", session, "--json"]
    code, out, _ = await _cli(argv, capsys)
    assert code == 0
    (line,) = [json.loads(text) for text in out.splitlines()]
    assert (line["inputId"], line["disposition"], line["reason"]) == ("m-1", "held", "generation-stopped")
    code, out, _ = await _cli([*argv[:-1]], capsys)
    assert code == 0
    assert out.splitlines()[0].split() == ["ID", "GENERATION", "DISPOSITION", "REASON", "WHEN", "RUNTIME"]
    assert f"{session}#1" in out


async def test_steer_without_a_running_generation_says_so(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing store, no generation to anchor to, a bad timeout: steer explains and exits 2."""
    store = FleetStore("sqlite", f"{tmp_path}/fleet.db")
    code, out, err = await _cli(["steer", "--store", store.location, "nobody", "hi", "--id", "a"], capsys)
    assert (code, out) == (2, "")
    assert "no fleet store" in err  # a mistyped path creates nothing
    async with store.fleet("creates-it"):
        pass
    code, out, err = await _cli(["steer", "--store", store.location, "nobody", "hi", "--id", "a"], capsys)
    assert (code, out) == (2, "")
    assert "runs no generation" in err
    code, _, err = await _cli(
        ["steer", "--store", store.location, "s", "hi", "--id", "a", "--timeout", "0"], capsys
    )
    assert code == 2
    assert "--timeout" in err
    code, out, _ = await _cli(
        ["steer", "--store", store.location, "nobody", "hi", "--id", "a", "--generation", "g"], capsys
    )
    assert (code, out) == (1, "a: refused (stale-generation)\n")


async def test_receipts_needs_exactly_one_source(capsys: pytest.CaptureFixture[str]) -> None:
    """receipts with neither PATH nor --dsn is a usage error (exit 2), not a traceback."""
    code, _, err = await _cli(["receipts"], capsys)
    assert code == 2
    assert "PATH or --dsn" in err


async def test_demo_fleet_narrates_a_takeover(anyio_backend: str) -> None:
    """demo --fleet: applied through the store, then kill -9 and takeover give unknown and held."""
    out = io.StringIO()
    final = await run_fleet_demo(out, anyio_backend)
    assert {i: (r.disposition, r.reason) for i, r in final.items() if r is not None} == {
        "fix-1": (Disposition.APPLIED, None),
        "fix-2": (Disposition.UNKNOWN, "runtime-lost"),
        "fix-3": (Disposition.HELD, "runtime-lost"),
    }
    text = out.getvalue()
    assert "identity-conflict" in text
    assert "kill -9" in text
