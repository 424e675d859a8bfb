"""The fleet's answers to the faults of issue 25, one deterministic test per fix, on both stores
and both backends: malformed request rows, fenced loops, symlinked paths, interrupted submits,
the sockets of dead nodes. (The fault-injection runs with real processes are in
``test_fleet_faults.py``.)"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from fleet_helpers import FleetStore, new_session
from live_steering import Disposition, Input, LiveRuntime

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
            assert owner.owner(session) is not None
            statistics = owner.owner(session)
            assert statistics is not None and statistics.failed is None
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
