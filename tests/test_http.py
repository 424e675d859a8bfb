"""C32 over the ASGI app in-process: every route, every pinned status code, ?wait, stop, follow-ups.

The app is driven through httpx's ASGI transport on both anyio backends, over a SQLite fleet
store whose owner runs a loop in the same test (the owner's core decides every receipt), and
over a hook store filled with ``instruct``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from fleet_helpers import FleetStore, new_session
from http_helpers import AUTH, TOKEN, client, owned
from live_steering import LiveRuntime
from live_steering.fleet import Lease, SQLiteFleet
from live_steering.hooks import instruct
from live_steering.http import STATUS_OF_REASON, create_app
from live_steering.http._stores import FleetView

pytestmark = pytest.mark.anyio


def steer(text: str, id_: str, kind: str = "steer", **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "text": text, "id": id_, **extra}


async def test_sessions_lists_runtime_and_hook_sessions(tmp_path: Path) -> None:
    """GET /v1/sessions names each session's kind, vendor, owner liveness, generation and mode."""
    hooks = str(tmp_path / "hooks.db")
    instruct("hook-7", "Use the corrected path", id="cmd-1", vendor="claude-code", store=hooks)
    path = str(tmp_path / "fleet.db")
    async with (
        SQLiteFleet(path, node_id="worker") as worker,
        SQLiteFleet(path, node_id="api") as host,
        owned(worker),
        client(create_app(fleet=host, hooks_store=hooks, token=TOKEN)) as http,
    ):
        response = await http.get("/v1/sessions", headers=AUTH)
        assert response.status_code == 200
        sessions = {s["id"]: s for s in response.json()["sessions"]}
        assert sessions["chat-42"] == {
            "id": "chat-42",
            "kind": "runtime",
            "vendor": None,
            "owner_live": True,
            "generation": {"id": "gen-1"},
            "mode": "all",  # the owner's steering_mode (C30), the default
        }
        assert sessions["hook-7"]["kind"] == "hook"
        assert sessions["hook-7"]["vendor"] == "claude-code"
        assert sessions["hook-7"]["generation"] is None
        one = await http.get("/v1/sessions/chat-42", headers=AUTH)
        assert one.json() == sessions["chat-42"]
        assert (await http.get("/v1/sessions/nobody", headers=AUTH)).status_code == 404
        assert (await http.get("/v1/sessions/" + "x" * 200, headers=AUTH)).status_code == 404


async def test_a_runtime_sessions_mode_is_its_owners_steering_mode(fleet_store: FleetStore) -> None:
    """On either fleet store, GET /v1/sessions and /v1/sessions/{session} give a live owner's
    steering_mode (C30) as the session's ``mode``, with the same keys as before; once the owner
    has left, ``unavailable``."""
    one, every = new_session(), new_session()
    async with (
        fleet_store.fleet("worker") as worker,
        fleet_store.fleet("api") as host,
        client(create_app(fleet=host, token=TOKEN)) as http,
    ):
        async with owned(worker, one, steering_mode="one-at-a-time"), owned(worker, every):
            sessions = (await http.get("/v1/sessions", headers=AUTH)).json()["sessions"]
            listed = {s["id"]: s for s in sessions}
            assert listed[one] == {
                "id": one,
                "kind": "runtime",
                "vendor": None,
                "owner_live": True,
                "generation": {"id": "gen-1"},
                "mode": "one-at-a-time",
            }
            assert listed[every]["mode"] == "all"
            assert (await http.get(f"/v1/sessions/{one}", headers=AUTH)).json() == listed[one]
        gone = (await http.get(f"/v1/sessions/{one}", headers=AUTH)).json()
        assert (gone["owner_live"], gone["mode"]) == (False, "unavailable")


async def test_an_owner_that_delivers_no_steer_is_listed_unavailable(fleet_store: FleetStore) -> None:
    """A live owner whose runtime was made with ``boundary_delivery=False`` is listed with its
    generation and ``mode`` ``unavailable`` (its capability's, C1), not its steering_mode."""
    session = new_session()
    async with (
        fleet_store.fleet("worker") as worker,
        fleet_store.fleet("api") as host,
        client(create_app(fleet=host, token=TOKEN)) as http,
        owned(worker, session, boundary_delivery=False),
    ):
        listed = (await http.get(f"/v1/sessions/{session}", headers=AUTH)).json()
        assert (listed["owner_live"], listed["generation"]) == (True, {"id": "gen-1"})
        assert listed["mode"] == "unavailable"


def test_a_live_owner_that_recorded_no_mode_shows_request_boundary() -> None:
    """A live lease without delivery modes (taken by an older node still running against the
    migrated store) reads as before: ``request_boundary``; a free one ``unavailable``."""
    live = Lease("s", "old-node", 3, 1e12, "g1", True)
    assert FleetView.describe(live)["mode"] == "request_boundary"
    free = Lease("s", None, 3, 0.0, None, False, "one-at-a-time", "all")
    assert FleetView.describe(free)["mode"] == "unavailable"


async def test_submit_answers_the_owners_receipts_with_the_pinned_codes(tmp_path: Path) -> None:
    """200 accepted or repeat, 409 identity-conflict, 422 invalid-input / unsupported-kind, 404,
    410 stale-generation, 429 capacity; the body is the C4 receipt either way."""
    path = str(tmp_path / "fleet.db")
    async with (
        SQLiteFleet(path, node_id="worker") as worker,
        SQLiteFleet(path, node_id="api") as host,
        owned(worker, identity_limit=2) as state,
        client(create_app(fleet=host, token=TOKEN)) as http,
    ):
        url = "/v1/sessions/chat-42/inputs"
        first = await http.post(url, json=steer("Use X", "m-1"), headers=AUTH)
        assert (first.status_code, first.json()) == (
            200,
            {"accepted": True, "inputId": "m-1", "generationId": "gen-1", "disposition": "queued"},
        )
        final = await http.get(f"{url}/m-1?wait=30", headers=AUTH)
        assert final.json()["disposition"] == "applied"
        assert state.written == ["Use X"]
        repeat = await http.post(url, json=steer("Use X", "m-1"), headers=AUTH)
        assert (repeat.status_code, repeat.json()["disposition"]) == (200, "applied")
        cases = [
            (steer("Other text", "m-1"), 409, "identity-conflict"),
            (steer("   ", "m-2"), 422, "invalid-input"),
            (steer("nul \x00 here", "m-2"), 422, "invalid-input"),
            (steer("a note", "m-2", kind="note"), 422, "unsupported-kind"),
            (steer("late", "m-2", generation_id="gen-0"), 410, "stale-generation"),
        ]
        for body, status, reason in cases:
            response = await http.post(url, json=body, headers=AUTH)
            assert (response.status_code, response.json()["reason"]) == (status, reason), body
            assert response.json()["accepted"] is False
            assert response.json()["disposition"] is None
        assert (await http.post(url, json=steer("Use Y", "m-2"), headers=AUTH)).status_code == 200
        # written at the owner's next boundary: wait for its final receipt, not for the clock
        assert (await http.get(f"{url}/m-2?wait=30", headers=AUTH)).json()["disposition"] == "applied"
        full = await http.post(url, json=steer("Use Z", "m-3"), headers=AUTH)
        assert (full.status_code, full.json()["reason"]) == (429, "capacity")
        missing = await http.post("/v1/sessions/nobody/inputs", json=steer("x", "m-4"), headers=AUTH)
        # 404, and the body is the refusal receipt (C32): what a fleet answers a session no owner runs
        assert (missing.status_code, missing.json()) == (
            404,
            {
                "accepted": False,
                "inputId": "m-4",
                "generationId": "",
                "disposition": None,
                "reason": "stale-generation",
            },
        )
        blank = await http.post(
            "/v1/sessions/nobody/inputs", json=steer(" ", "m-4", generation_id="g"), headers=AUTH
        )
        assert (blank.status_code, blank.json()["reason"], blank.json()["generationId"]) == (
            404,
            "invalid-input",
            "g",
        )
        assert state.written == ["Use X", "Use Y"]


async def test_no_live_owner_is_answered_from_the_store(tmp_path: Path) -> None:
    """After the owner left, a repeat gets its stored receipt and a new id stale-generation (410)."""
    path = str(tmp_path / "fleet.db")
    async with SQLiteFleet(path, node_id="worker") as worker, SQLiteFleet(path, node_id="api") as host:
        app = create_app(fleet=host, token=TOKEN)
        async with client(app) as http:
            async with owned(worker):
                await http.post("/v1/sessions/chat-42/inputs", json=steer("Use X", "m-1"), headers=AUTH)
                await http.get("/v1/sessions/chat-42/inputs/m-1?wait=30", headers=AUTH)
            listed = (await http.get("/v1/sessions/chat-42", headers=AUTH)).json()
            assert (listed["owner_live"], listed["generation"], listed["mode"]) == (
                False,
                None,
                "unavailable",
            )
            repeat = await http.post("/v1/sessions/chat-42/inputs", json=steer("Use X", "m-1"), headers=AUTH)
            assert (repeat.status_code, repeat.json()["disposition"]) == (200, "applied")
            new = await http.post("/v1/sessions/chat-42/inputs", json=steer("Use Y", "m-2"), headers=AUTH)
            assert (new.status_code, new.json()["reason"]) == (410, "stale-generation")
            assert (await http.get("/v1/sessions/chat-42/inputs/m-9", headers=AUTH)).status_code == 404


async def test_stop_ends_the_generation_and_holds_a_follow_up(tmp_path: Path) -> None:
    """POST .../stop stops the running generation (200); a follow-up queued for after it is held
    (C29: a stop discards the plan); a second stop is 409 not-running; a new steer then 410."""
    path = str(tmp_path / "fleet.db")
    async with (
        SQLiteFleet(path, node_id="worker") as worker,
        SQLiteFleet(path, node_id="api") as host,
        owned(worker) as state,
        client(create_app(fleet=host, token=TOKEN)) as http,
    ):
        url = "/v1/sessions/chat-42"
        follow = await http.post(
            f"{url}/inputs", json=steer("Then run the suite", "f-1", kind="follow_up"), headers=AUTH
        )
        assert (follow.status_code, follow.json()["disposition"]) == (200, "queued")
        stopped = await http.post(f"{url}/stop", json={}, headers=AUTH)
        assert (stopped.status_code, stopped.json()) == (
            200,
            {"stopped": True, "sessionId": "chat-42", "generationId": "gen-1", "reason": None},
        )
        held = await http.get(f"{url}/inputs/f-1?wait=30", headers=AUTH)
        assert held.json() == {
            "accepted": True,
            "inputId": "f-1",
            "generationId": "gen-1",
            "disposition": "held",
            "reason": "generation-stopped",
        }
        again = await http.post(f"{url}/stop", json={"generation_id": "gen-1"}, headers=AUTH)
        assert (again.status_code, again.json()["reason"]) == (409, "not-running")
        assert state.written == []
        assert (await http.post("/v1/sessions/nobody/stop", json={}, headers=AUTH)).status_code == 404


async def test_wait_returns_the_current_receipt_when_nothing_is_final(tmp_path: Path) -> None:
    """?wait=S bounds the wait: a steer no boundary took yet answers queued after S; bad waits 400."""
    path = str(tmp_path / "fleet.db")
    async with SQLiteFleet(path, node_id="worker") as worker, SQLiteFleet(path, node_id="api") as host:
        runtime_session = "quiet"
        async with (
            worker.own(LiveRuntime(session_id=runtime_session)) as rt,
            rt.open_generation("gen-1") as gen,
        ):
            await worker.flush(runtime_session)
            async with client(create_app(fleet=host, token=TOKEN)) as http:
                url = f"/v1/sessions/{runtime_session}/inputs"
                await http.post(url, json=steer("Use X", "m-1"), headers=AUTH)
                waited = await http.get(f"{url}/m-1?wait=0.2", headers=AUTH)
                assert (waited.status_code, waited.json()["disposition"]) == (200, "queued")
                # float() takes all of these; a number of seconds is plain decimal digits
                for bad in ("soon", "-1", "nan", "inf", "1_0", " 1", "1e1", "0x10", "%2B1"):
                    assert (await http.get(f"{url}/m-1?wait={bad}", headers=AUTH)).status_code == 400
            gen.stop()  # ends it on purpose: the steer no boundary took is held


async def test_hook_sessions_take_steers_and_refuse_other_kinds(tmp_path: Path) -> None:
    """A hook session's input goes to the relay (its receipt, generationId null); it ignores
    generation_id; a follow-up to a session of no known vendor is refused unsupported-kind (422);
    it cannot be stopped (405)."""
    hooks = str(tmp_path / "hooks.db")
    instruct("hook-7", "first", id="cmd-0", store=hooks)
    async with client(create_app(hooks_store=hooks, token=TOKEN)) as http:
        url = "/v1/sessions/hook-7/inputs"
        response = await http.post(url, json=steer("Use X", "cmd-1", generation_id="whatever"), headers=AUTH)
        assert (response.status_code, response.json()) == (
            200,
            {"accepted": True, "inputId": "cmd-1", "generationId": None, "disposition": "queued"},
        )
        conflict = await http.post(url, json=steer("Other", "cmd-1"), headers=AUTH)
        assert (conflict.status_code, conflict.json()["reason"]) == (409, "identity-conflict")
        follow = await http.post(url, json=steer("later", "cmd-2", kind="follow_up"), headers=AUTH)
        assert (follow.status_code, follow.json()["reason"]) == (422, "unsupported-kind")
        receipt = await http.get(f"{url}/cmd-1", headers=AUTH)
        assert receipt.json()["disposition"] == "queued"
        stop = await http.post("/v1/sessions/hook-7/stop", json={}, headers=AUTH)
        # 405 with an empty Allow: GET on this path is a 405 too, so no method would do
        assert (stop.status_code, stop.headers["allow"]) == (405, "")


async def test_a_claude_code_session_takes_a_follow_up(tmp_path: Path) -> None:
    """Claude Code has a "do not stop yet" reply (its Stop decision): a follow-up to its session is
    queued; the same to a Hermes session, which has none, is refused unsupported-kind (422)."""
    hooks = str(tmp_path / "hooks.db")
    instruct("claude-1", "first", id="cmd-0", vendor="claude-code", store=hooks)
    instruct("hermes-1", "first", id="cmd-0", vendor="hermes", store=hooks)
    async with client(create_app(hooks_store=hooks, token=TOKEN)) as http:
        later = steer("Then run the suite", "f-1", kind="follow_up")
        queued = await http.post("/v1/sessions/claude-1/inputs", json=later, headers=AUTH)
        assert (queued.status_code, queued.json()["disposition"]) == (200, "queued")
        refused = await http.post("/v1/sessions/hermes-1/inputs", json=later, headers=AUTH)
        assert (refused.status_code, refused.json()["reason"]) == (422, "unsupported-kind")


def test_status_table_covers_every_pinned_reason() -> None:
    """Every refusal reason of C7 (and the relay's two) has C32's status."""
    assert STATUS_OF_REASON == {
        "identity-conflict": 409,
        "invalid-input": 422,
        "unsupported-kind": 422,
        "stale-generation": 410,
        "finishing": 410,
        "session-ended": 410,
        "capacity": 429,
        "queue-full": 429,
        "unavailable": 503,
        "unreachable": 503,
        "closed": 503,
    }


def test_create_app_refuses_bad_configuration(tmp_path: Path) -> None:
    """No store at all, an empty token, a zero body cap: ValueError, nothing served."""
    with pytest.raises(ValueError, match="needs a fleet"):
        create_app()
    with pytest.raises(ValueError, match="token"):
        create_app(hooks_store=str(tmp_path / "h.db"), token="")
    with pytest.raises(ValueError, match="max_body"):
        create_app(hooks_store=str(tmp_path / "h.db"), max_body=0)


@pytest.mark.parametrize("lease_age", [3600, 0], ids=["recent-lease", "fresh-read"])
async def test_a_submit_anchored_to_a_generation_that_ended_meanwhile_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lease_age: float
) -> None:
    """A submit with no generation_id is anchored to the lease's generation: one read before
    gen-1 ended (kept as recent, ``lease_age=3600``), or read afresh (``lease_age=0``) and
    overtaken by the generation's end before the owner decided (here: that read answers what was
    read while gen-1 ran). The owner refuses (nothing admitted) and it is asked again with the
    running generation: accepted into gen-2. The fresh-read path used to answer 410
    stale-generation, naming a generation the client never sent."""
    path = str(tmp_path / "fleet.db")
    real = FleetView.lease
    reads: list[Lease | None] = []
    overtaken = False

    async def lease(self: FleetView, session_id: str) -> Lease | None:
        nonlocal overtaken
        reads.append(await real(self, session_id))
        if overtaken:  # overtaken by the generation's end: it answers the gen-1 lease
            overtaken = False
            return reads[0]
        return reads[-1]

    monkeypatch.setattr(FleetView, "lease", lease)
    async with (
        SQLiteFleet(path, node_id="worker") as worker,
        SQLiteFleet(path, node_id="api") as host,
        worker.own(LiveRuntime(session_id="chat-42")) as runtime,
    ):
        async with client(create_app(fleet=host, token=TOKEN, lease_age=lease_age)) as http:
            async with runtime.open_generation("gen-1"):
                await worker.flush("chat-42")
                listed = await http.get("/v1/sessions/chat-42", headers=AUTH)  # the lease is read here
                assert listed.json()["generation"] == {"id": "gen-1"}
            async with runtime.open_generation("gen-2") as gen:
                await worker.flush("chat-42")
                overtaken = lease_age == 0
                sent = await http.post(
                    "/v1/sessions/chat-42/inputs", json=steer("Use X", "m-1"), headers=AUTH
                )
                assert (sent.status_code, sent.json()["generationId"]) == (200, "gen-2")
                gen.stop()
        entries = await host.entries(session_id="chat-42")
        assert [(e.input_id, e.generation_id) for e in entries] == [("m-1", "gen-2")]


@contextlib.asynccontextmanager
async def _worker_and_api(
    tmp_path: Path,
) -> AsyncIterator[tuple[SQLiteFleet, SQLiteFleet, LiveRuntime, httpx.AsyncClient]]:
    """A worker node owning chat-42 (the test runs its generations), an API node, and a client of
    the app over it that reads the lease afresh at every submit (``lease_age=0``)."""
    path = str(tmp_path / "fleet.db")
    async with (
        SQLiteFleet(path, node_id="worker") as worker,
        SQLiteFleet(path, node_id="api") as host,
        worker.own(LiveRuntime(session_id="chat-42")) as runtime,
        client(create_app(fleet=host, token=TOKEN, lease_age=0)) as http,
    ):
        yield worker, host, runtime, http


async def test_a_retry_after_the_generation_moved_on_gets_the_current_receipt(tmp_path: Path) -> None:
    """C10 over HTTP: a body with no generation_id is anchored to the running generation, so its
    retry once the next one runs names another anchor; it is still answered with the input's
    current receipt (applied in gen-1), not 409 identity-conflict, and admits nothing. Other text
    under the same id stays a conflict."""
    async with _worker_and_api(tmp_path) as (worker, _host, runtime, http):
        url = "/v1/sessions/chat-42/inputs"
        async with runtime.open_generation("gen-1") as gen:
            await worker.flush("chat-42")
            first = await http.post(url, json=steer("Use X", "m-1"), headers=AUTH)  # its answer "lost"
            assert (first.status_code, first.json()["generationId"]) == (200, "gen-1")
            await gen.boundary(lambda input, metadata: None)
            assert not gen.continue_after_checkpoint()
        async with runtime.open_generation("gen-2") as gen:
            await worker.flush("chat-42")
            retry = await http.post(url, json=steer("Use X", "m-1"), headers=AUTH)
            assert (retry.status_code, retry.json()) == (
                200,
                {"accepted": True, "inputId": "m-1", "generationId": "gen-1", "disposition": "applied"},
            )
            other = await http.post(url, json=steer("Use Y", "m-1"), headers=AUTH)
            assert (other.status_code, other.json()["reason"]) == (409, "identity-conflict")
            gen.stop()
        # the owner's own stream shows both asks of the retry: anchored to gen-2 (refused,
        # admitting nothing), then where it was accepted (repeated); then the other text's refusal
        answers = [
            (e["type"], e.get("target_generation_id", e.get("generation_id")), e.get("reason"))
            for e in runtime.recent_events()
            if e.get("input_id") == "m-1"
        ]
        assert answers == [
            ("steering.accepted", "gen-1", None),
            ("input.delivered", "gen-1", None),
            ("steering.applied", "gen-1", None),
            ("steering.refused", "gen-2", "identity-conflict"),
            ("steering.repeated", "gen-1", None),
            ("steering.refused", "gen-2", "identity-conflict"),
            ("steering.refused", "gen-1", "identity-conflict"),
        ]


async def test_a_follow_ups_write_and_apply_name_its_generation_and_delivery(tmp_path: Path) -> None:
    """C29 on a runtime session's event stream: a follow-up's ``input.writing`` and
    ``steering.applied`` name the generation it was written into and carry ``delivery:
    "follow_up"`` (a steer's, ``request_boundary``); every event carries the input's ``kind``."""
    async with _worker_and_api(tmp_path) as (worker, host, runtime, http):
        url = "/v1/sessions/chat-42/inputs"
        async with runtime.open_generation("gen-1") as gen:
            await worker.flush("chat-42")
            follow = await http.post(
                url, json=steer("Then run the suite", "f-1", kind="follow_up"), headers=AUTH
            )
            assert follow.status_code == 200
            assert (await http.post(url, json=steer("Use X", "s-1"), headers=AUTH)).status_code == 200
            await gen.boundary(lambda input, metadata: None)
            assert not gen.continue_after_checkpoint()
        async with runtime.open_generation("gen-2") as gen:
            await gen.boundary(lambda input, metadata: None)
            assert not gen.continue_after_checkpoint()
        await worker.flush("chat-42")
        events = await FleetView(host).events("chat-42", 0, 100)
    seen = [
        (e["type"], e["input_id"], e["target_generation_id"], e["kind"], e.get("delivery")) for e in events
    ]
    assert seen == [
        ("steering.accepted", "f-1", "gen-1", "follow_up", None),
        ("steering.accepted", "s-1", "gen-1", "steer", None),
        ("input.writing", "s-1", "gen-1", "steer", "request_boundary"),
        ("steering.applied", "s-1", "gen-1", "steer", "request_boundary"),
        ("input.writing", "f-1", "gen-2", "follow_up", "follow_up"),
        ("steering.applied", "f-1", "gen-2", "follow_up", "follow_up"),
    ]


async def test_an_id_in_both_stores_is_listed_once_as_the_runtime(tmp_path: Path) -> None:
    """A session id the fleet and the hook store both know is the runtime's on every route, so
    ``GET /v1/sessions`` lists it once, as the runtime (not a hook row whose steers would reach
    the runtime)."""
    hooks = str(tmp_path / "hooks.db")
    instruct("chat-42", "Use the corrected path", id="cmd-1", vendor="claude-code", store=hooks)
    instruct("hook-7", "Use the corrected path", id="cmd-2", vendor="claude-code", store=hooks)
    path = str(tmp_path / "fleet.db")
    async with (
        SQLiteFleet(path, node_id="worker") as worker,
        SQLiteFleet(path, node_id="api") as host,
        owned(worker),
        client(create_app(fleet=host, hooks_store=hooks, token=TOKEN)) as http,
    ):
        listed = (await http.get("/v1/sessions", headers=AUTH)).json()["sessions"]
        assert sorted((s["id"], s["kind"]) for s in listed) == [("chat-42", "runtime"), ("hook-7", "hook")]
        assert (await http.get("/v1/sessions/chat-42", headers=AUTH)).json()["kind"] == "runtime"


async def test_ids_that_hold_a_slash_are_reached_percent_encoded(tmp_path: Path) -> None:
    """A session or input id may hold '/' (C7): sent as %2F (as the console's encodeURIComponent
    does) every route reaches it, also with the app mounted in another Starlette app. Servers
    decode %2F before routing, which put such ids out of reach. The slash unencoded, or a NUL,
    names no session."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    path = str(tmp_path / "fleet.db")
    async with (
        SQLiteFleet(path, node_id="worker") as worker,
        SQLiteFleet(path, node_id="api") as host,
        owned(worker, "team/alice") as state,
    ):
        api = create_app(fleet=host, token=TOKEN)
        for prefix, asgi in (("", api), ("/steering", Starlette(routes=[Mount("/steering", app=api)]))):
            async with client(asgi) as http:
                url = f"{prefix}/v1/sessions/team%2Falice"
                got = await http.get(url, headers=AUTH)
                assert (got.status_code, got.json()["id"]) == (200, "team/alice")
                input_id = f"fix/{len(prefix)}"
                sent = await http.post(f"{url}/inputs", json=steer("Use b.py", input_id), headers=AUTH)
                assert (sent.status_code, sent.json()["inputId"]) == (200, input_id)
                final = await http.get(f"{url}/inputs/{input_id.replace('/', '%2F')}?wait=30", headers=AUTH)
                assert (final.status_code, final.json()["disposition"]) == (200, "applied")
                for unreachable in ("team/alice", "team%00alice"):
                    missing = await http.get(f"{prefix}/v1/sessions/{unreachable}", headers=AUTH)
                    assert missing.status_code == 404
        async with client(api) as http:
            stopped = await http.post("/v1/sessions/team%2Falice/stop", json={}, headers=AUTH)
            assert (stopped.status_code, stopped.json()["sessionId"]) == (200, "team/alice")
            wrong = await http.get("/v1/sessions/team%2Falice/stop", headers=AUTH)  # the path as sent
            assert wrong.status_code == 405
            assert (
                wrong.json()["error"]
                == "GET is not a method of /v1/sessions/team%2Falice/stop (it takes POST)"
            )
        assert state.written == ["Use b.py", "Use b.py"]


async def test_a_long_poll_open_when_the_server_shuts_down_answers_the_current_receipt(
    tmp_path: Path,
) -> None:
    """``?wait=30`` on a steer nobody applies, then ``close_streams()`` (``serve`` calls it as
    SIGTERM's graceful shutdown begins): the wait answers at once with the current receipt, for a
    runtime and for a hook session. It was cancelled by the shutdown: a 500 and a traceback."""
    from anyio import wait_all_tasks_blocked

    path = str(tmp_path / "fleet.db")
    hooks = str(tmp_path / "hooks.db")
    instruct("hook-1", "Use b.py", id="h-1", store=hooks)
    async with (
        SQLiteFleet(path, node_id="worker") as worker,
        SQLiteFleet(path, node_id="api") as host,
        worker.own(LiveRuntime(session_id="quiet")) as rt,
        rt.open_generation("gen-1") as gen,
    ):
        await worker.flush("quiet")
        app = create_app(fleet=host, hooks_store=hooks, token=TOKEN)
        async with client(app) as http:
            await http.post("/v1/sessions/quiet/inputs", json=steer("Use X", "m-1"), headers=AUTH)
            answers: dict[str, httpx.Response] = {}

            async def poll(url: str) -> None:
                answers[url] = await http.get(f"{url}?wait=30", headers=AUTH)

            urls = ("/v1/sessions/quiet/inputs/m-1", "/v1/sessions/hook-1/inputs/h-1")
            with anyio.fail_after(20):
                async with anyio.create_task_group() as tg:
                    for url in urls:
                        tg.start_soon(poll, url)
                    await wait_all_tasks_blocked()
                    assert answers == {}  # both are waiting
                    app.close_streams()
            for url in urls:
                assert (answers[url].status_code, answers[url].json()["disposition"]) == (200, "queued")
            again = await http.get(f"{urls[0]}?wait=30", headers=AUTH)  # after the close: at once
            assert again.json()["disposition"] == "queued"
        gen.stop()
