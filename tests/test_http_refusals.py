"""C32's 503 and 410 refusals answered by a route, not only by the status table: each case is
made to happen for real (the owner's core, the fleet's deadline, the hook relay decide it) and
the test reads the status code and the body, which is the refusal receipt in C4's wire shape."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from fleet_helpers import FleetStore, new_session
from http_helpers import AUTH, TOKEN, client
from live_steering import Input, LiveRuntime
from live_steering.fleet import SQLiteFleet
from live_steering.hooks import instruct
from live_steering.http import create_app
from live_steering.testing import Gate

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).parent / "fixtures" / "hooks"
URL = "/v1/sessions/chat-42/inputs"


def steer(text: str, id_: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "steer", "text": text, "id": id_, **extra}


def refusal(id_: str, generation_id: str | None, reason: str) -> dict[str, Any]:
    """C4's wire shape of a refusal (C6: not accepted, no disposition, a pinned reason)."""
    return {
        "accepted": False,
        "inputId": id_,
        "generationId": generation_id,
        "disposition": None,
        "reason": reason,
    }


async def _write(steer: Input, metadata: Mapping[str, Any]) -> None:
    await anyio.lowlevel.checkpoint()


async def test_an_owner_without_boundary_delivery_answers_503_unavailable(tmp_path: Path) -> None:
    """A live owner whose runtime has boundary delivery off (C1 mode ``unavailable``)."""
    path = str(tmp_path / "fleet.db")
    async with (
        SQLiteFleet(path, node_id="worker") as worker,
        SQLiteFleet(path, node_id="api") as host,
        client(create_app(fleet=host, token=TOKEN)) as http,
        worker.own(LiveRuntime(session_id="chat-42", boundary_delivery=False)) as runtime,
        runtime.open_generation("gen-1"),
    ):
        await worker.flush("chat-42")
        response = await http.post(URL, json=steer("Use X", "m-1", generation_id="gen-1"), headers=AUTH)
        assert (response.status_code, response.json()) == (503, refusal("m-1", "gen-1", "unavailable"))


async def test_a_closed_owner_runtime_answers_503_closed(tmp_path: Path) -> None:
    """A runtime closed while its node still holds the session: the core's ``closed``."""
    path = str(tmp_path / "fleet.db")
    async with (
        SQLiteFleet(path, node_id="worker") as worker,
        SQLiteFleet(path, node_id="api") as host,
        client(create_app(fleet=host, token=TOKEN)) as http,
        worker.own(LiveRuntime(session_id="chat-42")) as runtime,
    ):
        async with runtime.open_generation("gen-1"):
            await worker.flush("chat-42")
        await runtime.aclose()
        await worker.flush("chat-42")
        response = await http.post(URL, json=steer("Use X", "m-1", generation_id="gen-1"), headers=AUTH)
        assert (response.status_code, response.json()) == (503, refusal("m-1", "gen-1", "closed"))


async def test_an_owner_the_fleet_cannot_reach_answers_503_unreachable(fleet_store: FleetStore) -> None:
    """The lease is held by a node that never decides (a partitioned owner): the server's fleet
    node withdraws the request at its deadline (C28) and the route answers ``unreachable``."""
    session = new_session()  # a PostgreSQL cluster is shared by the tests: a fresh id
    silent = fleet_store.connection()
    taken = await anyio.to_thread.run_sync(silent.take, session, "silent", 30.0)
    assert taken is not None
    try:
        async with (
            fleet_store.fleet("api", timeout=0.2) as host,
            client(create_app(fleet=host, token=TOKEN)) as http,
        ):
            response = await http.post(
                f"/v1/sessions/{session}/inputs", json=steer("Use X", "m-1", generation_id="g1"), headers=AUTH
            )
            assert (response.status_code, response.json()) == (503, refusal("m-1", "g1", "unreachable"))
            assert await host.request_states(session) == {"withdrawn": 1}
    finally:
        await anyio.to_thread.run_sync(silent.release, session, "silent", taken.epoch)
        silent.close()


async def test_a_submit_racing_the_end_of_turn_answers_410_finishing(tmp_path: Path) -> None:
    """C16: the owner's last check after its checkpoint closed admission; its generation block
    has not been left yet (held there by a gate), so a steer anchored to it is ``finishing``."""
    path = str(tmp_path / "fleet.db")
    gate = Gate()
    async with (
        SQLiteFleet(path, node_id="worker") as worker,
        SQLiteFleet(path, node_id="api") as host,
        client(create_app(fleet=host, token=TOKEN)) as http,
        worker.own(LiveRuntime(session_id="chat-42")) as runtime,
        anyio.create_task_group() as tg,
    ):

        async def loop() -> None:
            async with runtime.open_generation("gen-1") as gen:
                await worker.flush("chat-42")
                await gen.boundary(_write)
                assert not gen.continue_after_checkpoint()  # admission closed, nothing pending
                await gate.passage()  # the block is not left: generation.finished not published

        tg.start_soon(loop)
        await gate.wait_reached()
        response = await http.post(URL, json=steer("Too late", "m-1", generation_id="gen-1"), headers=AUTH)
        gate.release()
        assert (response.status_code, response.json()) == (410, refusal("m-1", "gen-1", "finishing"))


async def test_an_ended_hook_session_answers_410_session_ended(tmp_path: Path) -> None:
    """A hook session whose vendor sent its session-end moment (through the app's hook route):
    the relay refuses ``session-ended``, with the session's ``generation_id`` ignored."""
    hooks = str(tmp_path / "hooks.db")
    end = json.loads((FIXTURES / "claude-code" / "SessionEnd.json").read_text(encoding="utf-8"))
    session = end["session_id"]
    assert instruct(session, "early", id="c0", vendor="claude-code", store=hooks).accepted
    async with client(create_app(hooks_store=hooks, token=TOKEN)) as http:
        ended = await http.post("/v1/hooks/claude-code", json=end, headers=AUTH)
        assert ended.status_code == 200
        url = f"/v1/sessions/{session}/inputs"
        response = await http.post(url, json=steer("Use X", "c1", generation_id="whatever"), headers=AUTH)
        assert response.status_code == 410
        # a hook session runs no generation: its receipts anchor to none
        assert response.json() == refusal("c1", None, "session-ended")


#: Every route that reads or writes a store, as (method, path, JSON body or None).
_ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/v1/sessions", None),
    ("GET", "/v1/sessions/{s}", None),
    ("GET", "/v1/sessions/{s}/inputs/m-1", None),
    ("GET", "/v1/sessions/{s}/inputs/m-1?wait=5", None),
    ("POST", "/v1/sessions/{s}/inputs", steer("Use X", "m-2")),
    ("POST", "/v1/sessions/{s}/inputs", steer("Use X", "m-3", generation_id="gen-1")),
    ("POST", "/v1/sessions/{s}/stop", {}),
    ("POST", "/v1/sessions/{s}/stop", {"generation_id": "gen-1"}),
    ("GET", "/v1/sessions/{s}/events", None),
]


def _away_body(method: str, path: str, body: dict[str, Any] | None, session: str) -> dict[str, Any]:
    """What C32 answers when the store cannot be reached: 503 ``unavailable``, in the route's shape."""
    if path.endswith("/inputs"):
        assert body is not None
        return refusal(body["id"], body.get("generation_id", ""), "unavailable")
    if path.endswith("/stop"):
        assert body is not None
        generation = body.get("generation_id", "")
        return {"stopped": False, "sessionId": session, "generationId": generation, "reason": "unavailable"}
    return {"error": "the store cannot be reached now: try again", "reason": "unavailable"}


async def _every_route_answers_503(http: Any, session: str, caplog: pytest.LogCaptureFixture) -> None:
    for method, template, body in _ROUTES:
        path = template.format(s=session)
        caplog.clear()
        with anyio.fail_after(30):
            response = await http.request(method, path, json=body, headers=AUTH)
        where = (method, path)
        assert response.status_code == 503, (where, response.text)
        assert response.headers["content-type"] == "application/json", where
        assert response.json() == _away_body(method, template, body, session), where
        logged = [r for r in caplog.records if r.name == "live_steering.http"]
        assert len(logged) == 1, (where, [r.getMessage() for r in logged])  # one line, no traceback
        assert logged[0].exc_info is None
        assert "unavailable" in logged[0].getMessage()


async def test_a_sqlite_store_that_cannot_be_reached_is_503_on_every_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every route over a SQLite fleet store whose every call fails as a lost store fails (an I/O
    error under each read and write: a stand-in, as no real SQLite fault stops a WAL reader)
    answers 503 ``unavailable`` in its JSON shape with one warning, not a plain-text 500."""
    import sqlite3

    from live_steering.fleet import FleetError

    path = str(tmp_path / "fleet.db")
    async with (
        SQLiteFleet(path, node_id="worker") as worker,
        SQLiteFleet(path, node_id="api", timeout=2.0) as host,
        client(create_app(fleet=host, token=TOKEN)) as http,
    ):
        async with worker.own(LiveRuntime(session_id="chat-42")):
            pass  # the session has a lease row: the routes read it, none answers 404

        async def away(*args: Any, **kwargs: Any) -> Any:
            cause = sqlite3.OperationalError("disk I/O error")
            raise FleetError(f"fleet store {host.location}: {cause}") from cause

        monkeypatch.setattr(host, "_call", away)
        monkeypatch.setattr(host, "_call_async", away)
        await _every_route_answers_503(http, "chat-42", caplog)
        monkeypatch.undo()
        response = await http.get("/v1/sessions/chat-42", headers=AUTH)
        assert response.status_code == 200  # back: the same app answers again


async def test_a_postgres_server_that_is_down_is_503_on_every_route(
    own_cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """``serve --dsn`` with the PostgreSQL server stopped: every route answers 503 ``unavailable``
    in its JSON shape with one warning (before the fix: plain-text 500s and tracebacks), and the
    same app answers again once the server is back."""
    from fleet_helpers import restart_cluster
    from live_steering.fleet import PostgresFleet

    cluster = own_cluster
    session = new_session()
    holder = FleetStore("postgres", cluster.dsn).connection()
    try:
        assert await anyio.to_thread.run_sync(holder.take, session, "gone", 60.0) is not None
    finally:
        await anyio.to_thread.run_sync(holder.close)  # a session whose owner went: its row stays
    async with (
        PostgresFleet(cluster.dsn, node_id="api", timeout=2.0) as host,
        client(create_app(fleet=host, token=TOKEN)) as http,
    ):
        cluster.process.send_signal(2)  # SIGINT: a fast shutdown, every connection closed
        await anyio.to_thread.run_sync(cluster.process.wait, 60)
        await _every_route_answers_503(http, session, caplog)
        await anyio.to_thread.run_sync(lambda: restart_cluster(cluster))
        with anyio.fail_after(60):
            while (await http.get(f"/v1/sessions/{session}", headers=AUTH)).status_code != 200:  # noqa: ASYNC110 - reconnects
                await anyio.sleep(0.05)
