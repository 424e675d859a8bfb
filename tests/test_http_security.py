"""C32's security rules against hostile input: tokens, body caps, malformed and oddly encoded
bodies, path traversal, CORS, headers, loopback host names; and the HTTP hook route."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from http_helpers import AUTH, TOKEN, client
from live_steering.hooks import instruct, open_store
from live_steering.http import create_app

pytestmark = pytest.mark.anyio
FIXTURES = Path(__file__).parent / "fixtures" / "hooks" / "claude-code"
BODY = {"kind": "steer", "text": "Use X", "id": "cmd-1"}


def hooks_app(tmp_path: Path, **options: object) -> object:
    path = str(tmp_path / "hooks.db")
    instruct("hook-7", "first", id="cmd-0", store=path)
    return create_app(hooks_store=path, token=TOKEN, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {TOKEN[:-1]}"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
        {"Authorization": f"Bearer {TOKEN.upper()}"},
    ],
)
async def test_every_api_route_needs_the_token(tmp_path: Path, headers: dict[str, str]) -> None:
    """Missing, empty, wrong, truncated, extended, other-scheme tokens: 401, and nothing is queued."""
    app = hooks_app(tmp_path)
    async with client(app) as http:
        routes = [
            ("GET", "/v1/sessions", None),
            ("GET", "/v1/sessions/hook-7", None),
            ("POST", "/v1/sessions/hook-7/inputs", BODY),
            ("GET", "/v1/sessions/hook-7/inputs/cmd-0", None),
            ("POST", "/v1/sessions/hook-7/stop", {}),
            ("GET", "/v1/sessions/hook-7/events", None),
        ]
        for method, url, body in routes:
            response = await http.request(method, url, json=body, headers=headers)
            assert response.status_code == 401, (method, url)
            assert response.headers["www-authenticate"].startswith("Bearer")
        hook = await http.post(
            "/v1/hooks/claude-code", content=b"{}", headers={**headers, "Content-Type": "application/json"}
        )
        assert hook.status_code == 401
    with open_store(str(tmp_path / "hooks.db")) as store:
        assert [row["command_id"] for row in store.instructions("hook-7")] == ["cmd-0"]


async def test_bodies_that_carry_no_input_are_refused_before_any_store(tmp_path: Path) -> None:
    """Not JSON, not UTF-8, not an object, fields of the wrong type 400; not application/json
    415; and the store holds nothing new. (Bodies over the cap: tests/test_http_server.py, through
    a real server: the in-process transport cannot leave a body unread.)"""
    app = hooks_app(tmp_path, max_body=4096)
    url = "/v1/sessions/hook-7/inputs"
    json_type = {**AUTH, "Content-Type": "application/json"}
    async with client(app) as http:
        cases = [
            b"{not json",
            b'{"kind": "steer", "text": "caf\xe9", "id": "c"}',  # Latin-1, not UTF-8
            b"\xff\xfe{\x00}\x00",  # UTF-16 with a BOM
            b"[1, 2]",
            b'{"kind": "steer", "text": 5, "id": "c"}',
            b'{"kind": "steer", "text": "t", "id": null}',
            b'{"kind": "steer", "text": "t", "id": "c", "generation_id": 7}',
            b'"just a string"',
            b"[" * 4000,  # under the cap, deeper than the parser recurses: 400, not a 500 and a traceback
            # Python's parser takes these three; JSON has no such values
            b'{"kind": "steer", "text": "t", "id": "c", "x": NaN}',
            b'{"kind": "steer", "text": "t", "id": "c", "x": -Infinity}',
            b'{"kind": "steer", "text": "t", "id": "c", "x": [Infinity]}',
        ]
        for raw in cases:
            response = await http.post(url, content=raw, headers=json_type)
            assert response.status_code == 400, raw
            assert "error" in response.json()
        deep = await http.post("/v1/sessions/hook-7/stop", content=b"[" * 1500, headers=json_type)
        assert (deep.status_code, deep.json()["error"]) == (
            400,
            "the body is not JSON this server reads: nested too deeply",
        )
        for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data", ""):
            response = await http.post(
                url, content=json.dumps(BODY).encode(), headers={**AUTH, "Content-Type": content_type}
            )
            assert response.status_code == 415, content_type
    with open_store(str(tmp_path / "hooks.db")) as store:
        assert [row["command_id"] for row in store.instructions("hook-7")] == ["cmd-0"]


async def test_odd_text_gets_the_relays_receipt(tmp_path: Path) -> None:
    """A lone surrogate or a NUL in valid JSON is an input: refused invalid-input (422) by the store."""
    app = hooks_app(tmp_path)
    async with client(app) as http:
        for raw in (
            b'{"kind": "steer", "text": "half \\ud800 pair", "id": "c-1"}',
            b'{"kind": "steer", "text": "nul \\u0000", "id": "c-2"}',
            b'{"kind": "steer", "text": "ok", "id": "\\udfff"}',
        ):
            response = await http.post(
                "/v1/sessions/hook-7/inputs",
                content=raw,
                headers={**AUTH, "Content-Type": "application/json"},
            )
            assert (response.status_code, response.json()["reason"]) == (422, "invalid-input"), raw


async def test_paths_outside_the_package_are_never_served(tmp_path: Path) -> None:
    """Traversal in every spelling is 404 (or a normalised 404), never a file from disk."""
    app = hooks_app(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("do not serve")
    async with client(app) as http:
        for path in (
            "/../../../../etc/passwd",
            "/static/../../etc/passwd",
            "/console.js/..%2f..%2fsecret.txt",
            "/%2e%2e/%2e%2e/etc/passwd",
            "/..%5c..%5cetc%5cpasswd",
            "/static/index.html",
            "/index.html",
            "/_stores.py",
            "/console.js%00.html",
        ):
            response = await http.get(path)
            assert response.status_code in (404, 405), path
            assert "root:" not in response.text
            assert "do not serve" not in response.text
        page = await http.get("/")
        assert page.status_code == 200
        assert "<title>live-steering console</title>" in page.text


@pytest.mark.parametrize("mounted", [False, True])
async def test_unknown_api_routes_and_methods_answer_json(tmp_path: Path, mounted: bool) -> None:
    """No route under /v1/ (404) or a route asked with another method (405, with its Allow):
    a JSON {"error"} like every other API answer, with the API's headers, mounted or not; a
    console path that does not exist stays a plain 404."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    app = hooks_app(tmp_path)
    prefix = "/steering" if mounted else ""
    outer = Starlette(routes=[Mount(prefix, app=app)]) if mounted else app  # type: ignore[arg-type]
    async with client(outer) as http:
        for method, url, status in [
            ("GET", "/v1/nope", 404),
            ("GET", "/v1/sessions/hook-7/nope", 404),
            ("DELETE", "/v1/sessions", 405),
            ("PUT", "/v1/sessions/hook-7/stop", 405),
            ("GET", "/v1/sessions/hook-7/inputs", 405),
            # a trailing slash is no route either: no redirect built from the Host header
            ("GET", "/v1/sessions/", 404),
            ("POST", "/v1/sessions/hook-7/inputs/", 404),
            ("GET", "/v1/sessions/hook-7/", 404),
        ]:
            response = await http.request(method, prefix + url, headers=AUTH)
            assert response.status_code == status, (method, url)
            assert response.headers["content-type"] == "application/json", (method, url)
            assert set(response.json()) == {"error"}
            assert response.headers["x-content-type-options"] == "nosniff"
            if status == 405:
                assert method not in response.headers["allow"]
        page = await http.get(prefix + "/nope")
        assert page.status_code == 404
        assert page.headers["content-type"].startswith("text/plain")


@pytest.mark.parametrize("gone", [True, False])
async def test_a_hook_reply_to_a_vendor_gone_is_not_confirmed_delivered(tmp_path: Path, gone: bool) -> None:
    """The vendor's HTTP hook gave up (its timeout) while the store was busy: the server reports
    the client gone, so the relay does not send the instruction into the void and call it
    delivered; the claim is abandoned (unknown, reply-not-written), as for a broken stdout. A
    vendor still there gets it, delivered."""
    path = str(tmp_path / "hooks.db")
    moment = json.loads((FIXTURES / "PostToolUse.json").read_text(encoding="utf-8"))
    session = moment["session_id"]
    assert instruct(session, "Use X", id="cmd-1", vendor="claude-code", store=path).accepted
    app: Any = create_app(hooks_store=path, token=TOKEN)
    body = json.dumps(moment).encode("utf-8")
    incoming = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        if gone:
            return {"type": "http.disconnect"}  # what uvicorn answers once the client closed
        await anyio.sleep_forever()  # still connected: nothing more to receive
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/hooks/claude-code",
        "raw_path": b"/v1/hooks/claude-code",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"authorization", f"Bearer {TOKEN}".encode("ascii")),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8765),
    }
    await app(scope, receive, send)
    replied = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    store = open_store(path)
    try:
        receipt = store.receipt(session, "cmd-1")
    finally:
        store.close()
    assert receipt is not None
    if gone:
        assert b"Use X" not in replied
        assert (receipt.disposition, receipt.reason) == ("unknown", "reply-not-written")
    else:
        assert b"Use X" in replied
        assert receipt.disposition == "applied"


async def test_headers_cors_and_loopback_host_names(tmp_path: Path) -> None:
    """nosniff everywhere, no-store on the API, a CSP on the console, no CORS header unless
    configured; with no token, a non-loopback Host is refused 421 (DNS rebinding)."""
    async with client(hooks_app(tmp_path)) as http:
        api = await http.get("/v1/sessions", headers={**AUTH, "Origin": "https://evil.example"})
        assert api.headers["x-content-type-options"] == "nosniff"
        assert api.headers["cache-control"] == "no-store"
        assert not any(name.startswith("access-control-") for name in api.headers)
        page = await http.get("/")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-content-type-options"] == "nosniff"
        preflight = await http.options(
            "/v1/sessions",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert "access-control-allow-origin" not in preflight.headers
    other_dir = tmp_path / "cors"
    other_dir.mkdir()
    allowed = hooks_app(other_dir, cors_origins=["https://app.example"])
    async with client(allowed) as http:
        response = await http.get("/v1/sessions", headers={**AUTH, "Origin": "https://app.example"})
        assert response.headers["access-control-allow-origin"] == "https://app.example"
        other = await http.get("/v1/sessions", headers={**AUTH, "Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers
    open_app = create_app(hooks_store=str(tmp_path / "open.db"))
    async with client(open_app) as http:
        assert (await http.get("/v1/sessions")).status_code == 200
        rebound = await http.get("/v1/sessions", headers={"Host": "evil.example"})
        assert rebound.status_code == 421
        assert (rebound.headers["x-frame-options"], rebound.headers["referrer-policy"]) == (
            "DENY",
            "no-referrer",
        )
        assert rebound.headers.get_list("x-content-type-options") == ["nosniff"]
        for host in ("localhost:8765", "[::1]:8765", "127.0.0.2"):
            assert (await http.get("/v1/sessions", headers={"Host": host})).status_code == 200, host


async def test_cors_origins_an_iterator_and_an_extensions_origin(tmp_path: Path) -> None:
    """cors_origins given as an iterator (read once, for the check and for the middleware) and a
    browser extension's origin (chrome-extension://ID) are both allowed; a bad one is refused."""
    app = hooks_app(
        tmp_path, cors_origins=map(str.strip, [" https://app.example ", "chrome-extension://abcdefgh"])
    )
    async with client(app) as http:
        for origin in ("https://app.example", "chrome-extension://abcdefgh"):
            preflight = await http.options(
                "/v1/sessions", headers={"Origin": origin, "Access-Control-Request-Method": "POST"}
            )
            assert preflight.status_code == 200
            assert preflight.headers["access-control-allow-origin"] == origin
    with pytest.raises(ValueError, match="is not an origin"):
        create_app(hooks_store=str(tmp_path / "x.db"), cors_origins=["https://app.example/path"])


# -- POST /v1/hooks/{vendor}: the answer `live-steering hook VENDOR` prints ----------------------


def _command(vendor: str, store: str, payload: bytes) -> bytes:
    done = subprocess.run(
        [sys.executable, "-m", "live_steering._cli", "hook", vendor, "--store", store],
        input=payload,
        capture_output=True,
        timeout=120,
        check=True,
    )
    return done.stdout


async def test_hook_route_answers_exactly_as_the_command(tmp_path: Path) -> None:
    """Same store state, same payload: the route's body is the command's stdout byte for byte;
    the instruction is delivered once (a second moment gets nothing)."""
    payload = (FIXTURES / "PostToolUse.json").read_bytes()
    session = json.loads(payload)["session_id"]
    by_route, by_command = str(tmp_path / "route.db"), str(tmp_path / "command.db")
    for store in (by_route, by_command):
        instruct(session, "Use the corrected path", id="cmd-1", vendor="claude-code", store=store)
    expected = _command("claude-code", by_command, payload)
    assert expected  # the command had something to say
    app = create_app(hooks_store=by_route, token=TOKEN)
    async with client(app) as http:
        headers = {**AUTH, "Content-Type": "application/json"}
        first = await http.post("/v1/hooks/claude-code", content=payload, headers=headers)
        assert (first.status_code, first.content) == (200, expected)
        second = await http.post("/v1/hooks/claude-code", content=payload, headers=headers)
        assert (second.status_code, second.content) == (200, _command("claude-code", by_command, payload))
        assert second.content == b""
        receipt = await http.get(f"/v1/sessions/{session}/inputs/cmd-1", headers=AUTH)
        assert receipt.json()["disposition"] == "applied"


async def test_hook_route_lets_the_agent_go_on_when_anything_fails(tmp_path: Path) -> None:
    """Malformed hook JSON, an unknown vendor, a store that cannot be opened: 200 and an empty
    body, as the command exits 0 with nothing on stdout; the failures are recorded."""
    path = str(tmp_path / "hooks.db")
    instruct("s-1", "x", id="c-1", store=path)
    headers = {**AUTH, "Content-Type": "application/json"}
    async with client(create_app(hooks_store=path, token=TOKEN)) as http:
        for vendor, raw in (("claude-code", b"{oops"), ("no-such-vendor", b"{}"), ("claude-code", b"[]")):
            response = await http.post(f"/v1/hooks/{vendor}", content=raw, headers=headers)
            assert (response.status_code, response.content) == (200, b"")
    with open_store(path) as store:
        failures = [e["reason"] for e in store.events() if str(e["type"]).endswith("hook.failed")]
    assert failures == ["malformed-input", "unknown-vendor", "malformed-input"]
    broken = tmp_path / "a-directory"
    broken.mkdir()
    async with client(create_app(hooks_store=str(broken), token=TOKEN)) as http:
        payload = (FIXTURES / "PostToolUse.json").read_bytes()
        response = await http.post("/v1/hooks/claude-code", content=payload, headers=headers)
        assert (response.status_code, response.content) == (200, b"")


async def test_hook_route_follows_a_store_file_that_was_deleted_and_made_again(tmp_path: Path) -> None:
    """The route keeps its store open between requests, but a store file deleted (and made again
    by the next `instruct`, as docs/hooks.md allows) is the file it uses next: the instruction
    queued in the new file is delivered, and the new file records it applied."""
    payload = (FIXTURES / "PostToolUse.json").read_bytes()
    session = json.loads(payload)["session_id"]
    path = tmp_path / "hooks.db"
    headers = {**AUTH, "Content-Type": "application/json"}
    instruct(session, "First", id="cmd-1", vendor="claude-code", store=str(path))
    async with client(create_app(hooks_store=str(path), token=TOKEN)) as http:
        first = await http.post("/v1/hooks/claude-code", content=payload, headers=headers)
        assert b"First" in first.content
        for name in ("hooks.db", "hooks.db-wal", "hooks.db-shm"):
            (tmp_path / name).unlink(missing_ok=True)
        instruct(session, "Second", id="cmd-2", vendor="claude-code", store=str(path))
        second = await http.post("/v1/hooks/claude-code", content=payload, headers=headers)
        assert (second.status_code, b"Second" in second.content) == (200, True)
    with open_store(str(path)) as store:
        receipt = store.receipt(session, "cmd-2")
    assert receipt is not None
    assert receipt.disposition == "applied"
