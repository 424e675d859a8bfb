"""``live-steering stop``: a host stops a generation by id through a fleet store, from a shell."""

from __future__ import annotations

import json

import anyio
import pytest

from fleet_helpers import FleetStore, new_session
from live_steering import Disposition, Input, LiveRuntime
from live_steering._cli import main

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::live_steering.CheckpointDecisionWarning"),
]


async def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = await anyio.to_thread.run_sync(main, argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def test_stop_reaches_the_owner_and_holds_the_pending_steer(
    fleet_store: FleetStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """stop (the running generation by default) answers stopped, exit 0; a second stop exits 1."""
    session = new_session()
    where = fleet_store.args()
    async with (
        fleet_store.fleet("owner") as owner,
        owner.own(LiveRuntime(session_id=session)) as runtime,
        runtime.open_generation("g1") as gen,
    ):
        await owner.flush(session)
        await owner.submit(session, Input("steer", "Use X", id="m-1"), "g1")
        code, out, _ = await _cli(["stop", *where, session, "--reason", "budget-exhausted", "--json"], capsys)
        assert (code, json.loads(out)) == (
            0,
            {"stopped": True, "sessionId": session, "generationId": "g1", "reason": None},
        )
        assert not gen.accepting
        held = runtime.receipt("m-1")
        assert held is not None
        assert (held.disposition, held.reason) == (Disposition.HELD, "budget-exhausted")
        code, out, _ = await _cli(["stop", *where, session, "--generation", "g1"], capsys)
        assert (code, out) == (1, "g1: not stopped (not-running)\n")
    code, out, _ = await _cli(["stop", *where, session, "--generation", "g1"], capsys)
    assert (code, out) == (1, "g1: not stopped (no-owner)\n")


async def test_stop_without_a_generation_or_store_says_so(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing store or a bad timeout exit 2; no live owner and no --generation: no-owner, exit 1."""
    store = FleetStore("sqlite", f"{tmp_path}/fleet.db")
    code, out, err = await _cli(["stop", "--store", store.location, "nobody"], capsys)
    assert (code, out) == (2, "")
    assert "no fleet store" in err  # a mistyped path creates nothing
    async with store.fleet("creates-it"):
        pass
    code, out, _ = await _cli(["stop", "--store", store.location, "nobody", "--json"], capsys)
    assert (code, json.loads(out)) == (
        1,
        {"stopped": False, "sessionId": "nobody", "generationId": "", "reason": "no-owner"},
    )
    code, out, _ = await _cli(["stop", "--store", store.location, "nobody"], capsys)
    assert (code, out) == (1, "session 'nobody' has no live owner: nothing to stop (no-owner)\n")
    code, _, err = await _cli(["stop", "--store", store.location, "nobody", "--timeout", "0"], capsys)
    assert code == 2
    assert "--timeout" in err


async def test_stop_between_generations_is_not_running_and_after_the_owner_no_owner(
    fleet_store: FleetStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """No --generation: a live owner between generations answers not-running; once its lease is
    released the same command answers no-owner (as it does with --generation)."""
    session = new_session()
    where = fleet_store.args()
    async with fleet_store.fleet("owner") as owner, owner.own(LiveRuntime(session_id=session)) as runtime:
        async with runtime.open_generation("g1"):
            pass
        await owner.flush(session)
        code, out, _ = await _cli(["stop", *where, session, "--json"], capsys)
        assert (code, json.loads(out)["reason"]) == (1, "not-running")
    code, out, _ = await _cli(["stop", *where, session, "--json"], capsys)
    assert (code, json.loads(out)["reason"]) == (1, "no-owner")
