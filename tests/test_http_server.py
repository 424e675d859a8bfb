"""The app under real ASGI servers (uvicorn on asyncio, hypercorn on trio): the event stream over
SSE, its resume, text redaction, body caps, and a slow client that must not starve the others."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from fleet_helpers import FleetStore, spawn
from http_helpers import AUTH, TOKEN, owned, serving, sse_stream
from live_steering.fleet import SQLiteFleet
from live_steering.hooks import instruct
from live_steering.http import create_app

pytestmark = pytest.mark.anyio


def steer(text: str, id_: str) -> dict[str, str]:
    return {"kind": "steer", "text": text, "id": id_}


async def test_events_stream_resumes_without_duplicates_or_gaps(tmp_path: Path) -> None:
    """``id:`` is each event's sequence; a reconnect with Last-Event-ID continues after it: the
    sequences seen across both connections are exactly the store's, once each, in order."""
    path = str(tmp_path / "fleet.db")
    async with SQLiteFleet(path, node_id="worker") as worker, SQLiteFleet(path, node_id="api") as host:
        app = create_app(fleet=host, token=TOKEN, poll_interval=0.05)
        async with owned(worker), serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
            events_url = "/v1/sessions/chat-42/events"
            seen: list[dict[str, Any]] = []
            async with sse_stream(url, events_url, AUTH) as stream:
                assert stream.status == 200
                assert stream.headers["content-type"].startswith("text/event-stream")
                assert stream.headers["cache-control"] == "no-store"
                session = await stream.read(1, name="session")
                assert session[0]["data"]["generation"] == {"id": "gen-1"}
                for n in range(3):
                    await http.post(
                        "/v1/sessions/chat-42/inputs", json=steer(f"s{n}", f"m-{n}"), headers=AUTH
                    )
                    await http.get(f"/v1/sessions/chat-42/inputs/m-{n}?wait=30", headers=AUTH)
                seen += await stream.read(4)  # accepted, writing, applied of m-0, accepted of m-1
            last = seen[-1]["id"]
            for n in range(3, 5):
                await http.post("/v1/sessions/chat-42/inputs", json=steer(f"s{n}", f"m-{n}"), headers=AUTH)
                await http.get(f"/v1/sessions/chat-42/inputs/m-{n}?wait=30", headers=AUTH)
            async with sse_stream(url, events_url, {**AUTH, "Last-Event-ID": str(last)}) as stream:
                seen += [r for r in await stream.read(12) if "id" in r]
            ids = [int(str(r["id"])) for r in seen]
            assert ids == sorted(set(ids))  # increasing, no duplicate
            with sqlite3.connect(path) as db:
                stored = [
                    row[0]
                    for row in db.execute(
                        "SELECT id FROM ls_changes WHERE session_id = 'chat-42' ORDER BY id"
                    )
                ]
            assert ids == stored[: len(ids)]
            assert len(ids) >= 12
            applied = [r["data"]["input_id"] for r in seen if r["event"] == "steering.applied"]
            assert applied == [f"m-{n}" for n in range(5)]
            for record in seen:
                assert record["data"]["sequence"] == int(str(record["id"]))
                assert record["data"]["session_id"] == "chat-42"
            # ?after= is the same cursor for a client that cannot set headers
            async with sse_stream(url, f"{events_url}?after={ids[-2]}", AUTH) as stream:
                again = [r for r in await stream.read(2) if "id" in r]
            assert [int(str(r["id"])) for r in again][:1] == [ids[-1]]


async def test_a_generation_that_ends_with_nothing_queued_shows_on_the_stream(tmp_path: Path) -> None:
    """A stop with nothing queued writes no event row; the stream still says the generation ended
    (``event: session`` with ``generation: null``) within a poll, not at the next heartbeat (an
    hour here), and says nothing else meanwhile."""
    path = str(tmp_path / "fleet.db")
    async with SQLiteFleet(path, node_id="worker") as worker, SQLiteFleet(path, node_id="api") as host:
        app = create_app(fleet=host, token=TOKEN, poll_interval=0.05, heartbeat=3600)
        async with (
            owned(worker) as state,
            serving(app) as url,
            httpx.AsyncClient(base_url=url, timeout=60) as http,
        ):
            async with sse_stream(url, "/v1/sessions/chat-42/events", AUTH) as stream:
                (first,) = await stream.read(1, name="session")
                assert first["data"]["generation"] == {"id": "gen-1"}
                stopped = await http.post("/v1/sessions/chat-42/stop", json={}, headers=AUTH)
                assert stopped.json()["stopped"] is True
                with anyio.fail_after(60):
                    (ended,) = await stream.read(1)
            assert (ended["event"], ended["data"]["generation"]) == ("session", None)
            assert ended["data"]["owner_live"] is True  # the owner lives on, between generations
            assert state.ended == ["generation-stopped"]


async def test_a_dead_owners_queued_inputs_end_on_the_stream_with_no_one_waiting(
    tmp_path: Path, anyio_backend: str
) -> None:
    """kill -9 of the owner, no standby, and nobody asks ``?wait=``: a client watching the stream
    (the console) sees the owner go and what it left queued end as C23 says (``unknown`` for the
    input being written, ``held`` for the other, ``runtime-lost``) within a poll, and a plain
    GET of the receipt says the same, instead of ``queued`` until a standby comes."""
    store = FleetStore("sqlite", str(tmp_path / "fleet.db"))
    owner = await spawn(store, "owner", "chat-9", "--hang-after", "0", "--node", "w1", backend=anyio_backend)
    try:
        await owner.next("owning")
        async with SQLiteFleet(store.location, node_id="api") as host:
            app = create_app(fleet=host, token=TOKEN, poll_interval=0.05, heartbeat=3600)
            async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
                inputs = "/v1/sessions/chat-9/inputs"
                sent = await http.post(inputs, json={**steer("x", "x"), "generation_id": "g1"}, headers=AUTH)
                assert sent.json()["disposition"] == "queued"
                assert (await owner.next("context.write"))["input_id"] == "x"  # the owner hangs writing x
                sent = await http.post(inputs, json={**steer("y", "y"), "generation_id": "g1"}, headers=AUTH)
                assert sent.json()["disposition"] == "queued"
                async with sse_stream(url, "/v1/sessions/chat-9/events", AUTH) as stream:
                    (first,) = await stream.read(1, name="session")
                    assert first["data"]["owner_live"] is True
                    await owner.kill()
                    ended: dict[str, tuple[str, str]] = {}
                    with anyio.fail_after(60):
                        while len(ended) < 2:
                            for record in await stream.read(1):
                                data = record["data"]
                                if record["event"] != "session" and data["disposition"] != "queued":
                                    ended[data["input_id"]] = (data["disposition"], data["reason"])
                assert ended == {"x": ("unknown", "runtime-lost"), "y": ("held", "runtime-lost")}
                plain = (await http.get(f"{inputs}/y", headers=AUTH)).json()
                assert (plain["disposition"], plain["reason"]) == ("held", "runtime-lost")
    finally:
        await owner.kill()


async def test_resume_from_an_event_the_log_no_longer_holds_is_announced(tmp_path: Path) -> None:
    """A Last-Event-ID whose event was pruned (or never was the session's) opens with one
    ``reset`` record, then everything the store still holds for the session."""
    path = str(tmp_path / "fleet.db")
    async with SQLiteFleet(path, node_id="worker") as worker, SQLiteFleet(path, node_id="api") as host:
        app = create_app(fleet=host, token=TOKEN, poll_interval=0.05)
        async with owned(worker), serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
            for n in range(2):
                await http.post("/v1/sessions/chat-42/inputs", json=steer(f"s{n}", f"m-{n}"), headers=AUTH)
                await http.get(f"/v1/sessions/chat-42/inputs/m-{n}?wait=30", headers=AUTH)
            with sqlite3.connect(path) as db:
                first = db.execute("SELECT min(id) FROM ls_changes WHERE session_id = 'chat-42'").fetchone()[
                    0
                ]
                db.execute("DELETE FROM ls_changes WHERE id <= ?", (first + 2,))  # prune m-0's rows
                kept = [
                    row[0]
                    for row in db.execute(
                        "SELECT id FROM ls_changes WHERE session_id = 'chat-42' ORDER BY id"
                    )
                ]
            headers = {**AUTH, "Last-Event-ID": str(first + 1)}
            async with sse_stream(url, "/v1/sessions/chat-42/events", headers) as stream:
                records = await stream.read(2 + len(kept))
            assert records[0]["event"] == "reset"
            assert "id" not in records[0]
            assert records[0]["data"]["reason"] == "not-in-log"
            assert records[0]["data"]["last_event_id"] == first + 1
            assert [int(str(r["id"])) for r in records if "id" in r] == kept
            fine = {**AUTH, "Last-Event-ID": str(kept[0])}
            async with sse_stream(url, "/v1/sessions/chat-42/events", fine) as stream:
                (record,) = await stream.read(1)
            assert record["event"] == "session"  # held: no reset
            for huge in ("9" * 19, "1" + "0" * 39):  # no sequence is this long: never in the log
                beyond = {**AUTH, "Last-Event-ID": huge}
                async with sse_stream(url, "/v1/sessions/chat-42/events", beyond) as stream:
                    (record,) = await stream.read(1)
                assert (record["event"], record["data"]["reason"]) == ("reset", "not-in-log")


async def test_hook_event_text_is_redacted_unless_asked_with_the_token(tmp_path: Path) -> None:
    """The stream shows ``[redacted]`` for instruction text, and the text only with ?text=1 and
    a configured token; with no token configured, ?text=1 changes nothing."""
    path = str(tmp_path / "hooks.db")
    instruct("hook-7", "a private instruction", id="cmd-1", store=path)
    for token, asked, shown in (
        (TOKEN, "", "[redacted]"),
        (TOKEN, "?text=1", "a private instruction"),
        (None, "?text=1", "[redacted]"),
    ):
        app = create_app(hooks_store=path, token=token, poll_interval=0.05)
        async with serving(app) as url:
            headers = AUTH if token else {}
            async with sse_stream(url, f"/v1/sessions/hook-7/events{asked}", headers) as stream:
                (record,) = await stream.read(1, name="control.accepted")
        assert record["data"]["text"] == shown
        assert record["data"]["disposition"] == "queued"
        assert record["data"]["input_id"] == "cmd-1"


async def test_bodies_over_the_cap_are_refused_413(tmp_path: Path) -> None:
    """An API body over ``max_body`` and a hook body over the command's 8 MiB: 413, nothing queued
    or claimed; the hook's is recorded as the command records it (stdin-too-large)."""
    from live_steering.hooks import open_store
    from live_steering.hooks._command import MAX_STDIN_BYTES

    path = str(tmp_path / "hooks.db")
    instruct("hook-7", "first", id="cmd-0", store=path)
    app = create_app(hooks_store=path, token=TOKEN, max_body=4096)
    headers = {**AUTH, "Content-Type": "application/json"}
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=120) as http:
        body = b'{"kind": "steer", "id": "c", "text": "' + b"x" * 10_000 + b'"}'
        response = await http.post("/v1/sessions/hook-7/inputs", content=body, headers=headers)
        assert response.status_code == 413
        huge = b"{" + b" " * (MAX_STDIN_BYTES + 10) + b"}"
        try:
            hook = await http.post("/v1/hooks/claude-code", content=huge, headers=headers)
            assert hook.status_code == 413
        except httpx.WriteError:  # the server answered and closed before the upload ended
            pass
        assert (await http.get("/v1/sessions", headers=AUTH)).status_code == 200
    with open_store(path) as store:
        assert [row["command_id"] for row in store.instructions("hook-7")] == ["cmd-0"]
        assert [row["state"] for row in store.instructions("hook-7")] == ["queued"]
        reasons = [e["reason"] for e in store.events() if str(e["type"]).endswith("hook.failed")]
        assert reasons == ["stdin-too-large"]


async def test_a_slow_client_does_not_starve_the_others(tmp_path: Path) -> None:
    """A slowloris-style client (headers a byte at a time, then a body it never finishes) holds
    only its own connection: other clients are answered meanwhile, many times over."""
    path = str(tmp_path / "hooks.db")
    instruct("hook-7", "first", id="cmd-0", store=path)
    app = create_app(hooks_store=path, token=TOKEN)
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
        port = int(url.rsplit(":", 1)[1])
        slow = [await anyio.connect_tcp("127.0.0.1", port) for _ in range(20)]
        try:
            request = (
                b"POST /v1/sessions/hook-7/inputs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Type: application/json\r\n"
                b'Content-Length: 100000\r\n\r\n{"kind"'
            )
            for at in range(0, 40):  # part of the headers, a byte on each connection in turn
                for connection in slow:
                    await connection.send(request[at : at + 1])
            for connection in slow[:10]:
                await connection.send(request[40:])  # the rest: a body that never ends
            for n in range(20):
                response = await http.get("/v1/sessions/hook-7/inputs/cmd-0", headers=AUTH)
                assert response.status_code == 200, n
        finally:
            for connection in slow:
                await connection.aclose()


def _finished(app: Any, path: str) -> tuple[Any, anyio.Event]:
    """``app``, and an event set once a request to ``path`` has been handled to its end."""
    done = anyio.Event()

    async def outer(scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            await app(scope, receive, send)
        finally:
            if scope["type"] == "http" and scope["path"] == path:
                done.set()

    return outer, done


@pytest.mark.parametrize("cut", ["short", "chunked"])
async def test_a_body_the_client_never_finished_submits_and_claims_nothing(tmp_path: Path, cut: str) -> None:
    """A client that disconnects before its body ends (fewer bytes than its Content-Length, or a
    chunked body without its last chunk) sent no request, though what arrived parses as one: a
    submit admits nothing, and a hook call claims nothing (the instruction stays queued, never
    marked delivered or burnt unknown on a reply nobody asked for)."""
    from live_steering.hooks import open_store

    path = str(tmp_path / "hooks.db")
    instruct("hook-7", "Use the corrected path", id="cmd-0", vendor="claude-code", store=path)
    hook_json = (
        b'{"session_id": "hook-7", "hook_event_name": "PostToolBatch", "cwd": "/tmp",'
        b' "transcript_path": "/tmp/t.jsonl"}'
    )
    submit_json = b'{"kind": "steer", "text": "Use X", "id": "half-1"}'
    for route, body in (("/v1/hooks/claude-code", hook_json), ("/v1/sessions/hook-7/inputs", submit_json)):
        app, done = _finished(create_app(hooks_store=path, token=TOKEN), route)
        async with serving(app) as url:
            port = int(url.rsplit(":", 1)[1])
            head = (
                f"POST {route} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
                "Content-Type: application/json\r\n"
            ).encode()
            if cut == "short":
                request = head + f"Content-Length: {len(body) + 10}\r\n\r\n".encode() + body
            else:
                chunk = b"%x\r\n" % len(body) + body + b"\r\n"  # and no last chunk
                request = head + b"Transfer-Encoding: chunked\r\n\r\n" + chunk
            connection = await anyio.connect_tcp("127.0.0.1", port)
            await connection.send(request)
            await connection.aclose()
            with anyio.fail_after(60):
                await done.wait()  # the server saw the disconnect and the route returned
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                half = await http.get("/v1/sessions/hook-7/inputs/half-1", headers=AUTH)
                assert half.status_code == 404  # nothing admitted
    with open_store(path) as store:
        rows = [(row["command_id"], row["state"]) for row in store.instructions("hook-7")]
        assert rows == [("cmd-0", "queued")]
        assert not [e for e in store.events() if str(e["type"]).endswith(("claimed", "delivered", "unknown"))]
