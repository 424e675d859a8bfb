"""The ASGI application: C32's routes over a fleet node and a hook store, and the console.

Theory of operation
-------------------
Each route gathers what the request says, asks a store (``_stores.py``) and maps the
store's answer to a status code (``STATUS_OF_REASON``). It decides no refusal itself:
a receipt's ``reason`` is the owner's core's (or the fleet store's, or the hook relay's),
and this layer only picks the HTTP status that goes with it; the body is the receipt
either way. A request that carries no input at all (a body that is not a JSON object
with string fields ``kind``, ``text``, ``id``) is a caller's error, as ``TypeError`` is
in-process (C6): 400, with ``{"error": ...}`` and nothing submitted.

A session id names a runtime session when the fleet store has a lease row for it (some
node owned it once), else a hook session when the hook store knows it, else nothing
(404). An id in both is the runtime's. A submit to nothing answers 404 with the receipt a
fleet gives a session no owner runs (``stale-generation`` for a valid new input, the core's
order otherwise); the other routes name no input and answer 404 ``{"error": ...}``.

A store that cannot be reached (``FleetError``, the hook store's ``StoreError``: a database
down, a lost connection, a locked file) is answered 503 ``unavailable`` by every route, with
one warning logged and no traceback: a submit's body is its refusal receipt, a stop's its
``stop`` shape, the others ``{"error", "reason"}``. Nothing here says whether a submit's
request was stored: the same body again is safe (C10).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import Any, Final

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse as _StarletteJSON
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from .._errors import UnknownInputError
from .._types import Input, Receipt, RefusalReason
from .._validate import origin_problem
from ..fleet import Fleet, FleetError, Lease, StopResult
from ..fleet._store import Submission, answer_without_runtime, input_digest
from ..hooks._store import StoreError
from ._events import Feeds, SessionChanged, parse_cursor, sse
from ._hook_route import HookRoute
from ._security import (
    SLASH_IN_SEGMENT,
    BodyIncomplete,
    BodyReads,
    BodyTimeout,
    BodyTooLarge,
    Guard,
    path_param,
    read_body,
    token_ok,
)
from ._stores import LEASE_AGE, FleetView, HookView, receipt_wire, valid_session_id

#: The status of a refusal, by its pinned reason (C32); the hook relay's own two as their
#: nearest kin (``session-ended`` as a generation that ended, ``queue-full`` as capacity).
STATUS_OF_REASON: Final = {
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
#: A stop's answer that did not stop, by its reason.
STATUS_OF_STOP: Final = {"not-running": 409, "no-owner": 503, "unreachable": 503, "unavailable": 503}

#: What a store that cannot be reached raises: the fleet's and the hook relay's error.
_STORE_ERRORS: Final = (FleetError, StoreError)
#: The reason of every answer to a store that cannot be reached (C32: 503).
_AWAY: Final = RefusalReason.UNAVAILABLE.value

_log = logging.getLogger("live_steering.http")

DEFAULT_MAX_BODY: Final = 1024 * 1024
DEFAULT_MAX_WAIT: Final = 60.0
BODY_DEADLINE: Final = 30.0
HEARTBEAT: Final = 15.0

_STATIC: Final = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console.css": ("console.css", "text/css; charset=utf-8"),
}


class JSONResponse(_StarletteJSON):
    """ASCII JSON: a refused id may hold a lone surrogate, which UTF-8 cannot carry but an
    escape can (the receipt names exactly the id that was sent, C24)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


class _ClosingStream(StreamingResponse):
    """A streaming response that closes its body generator when the stream ends, however it ends
    (Starlette leaves it to the garbage collector, which on trio comes late, with a warning)."""

    async def stream_response(self, send: Any) -> None:
        body = self.body_iterator
        try:
            await super().stream_response(send)
        finally:
            close = getattr(body, "aclose", None)
            if close is not None:
                with anyio.CancelScope(shield=True):
                    await close()


def _not_json(name: str) -> Any:
    """``json.loads``'s hook for ``NaN``, ``Infinity`` and ``-Infinity``: Python's parser takes
    them, JSON (RFC 8259) has no such values."""
    raise ValueError(f"{name} is not a JSON value")


#: What ``?wait=`` takes: a plain decimal number of seconds (``float`` would also take ``1_0``,
#: `` 5 ``, ``1e3``, ``nan`` and ``inf``).
_SECONDS: Final = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\Z", re.ASCII)


def _error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


async def _no_route(request: Request, exc: Exception) -> Response:
    """Starlette's 404 (no route) and 405 (a route, another method): JSON ``{"error"}`` under
    ``/v1/``, as every other answer of the API, so a host that parses every body can; plain
    text elsewhere (the console's paths)."""
    status = getattr(exc, "status_code", 404)
    headers = dict(getattr(exc, "headers", None) or {})  # a 405's Allow
    path = request.url.path.removeprefix(request.scope.get("root_path", "") or "")
    path = path.replace(SLASH_IN_SEGMENT, "%2F")  # an id's slash, as the client encoded it
    if not path.startswith("/v1/"):
        return PlainTextResponse(_HTTP_PHRASES.get(status, "Not Found"), status_code=status, headers=headers)
    if status == 405:
        message = f"{request.method} is not a method of {path} (it takes {headers.get('Allow', 'another')})"
    else:
        message = f"no route {path} in this API (see docs/http.md for the routes)"
    return _error(status, message, **headers)


_HTTP_PHRASES: Final = {404: "Not Found", 405: "Method Not Allowed"}


def _store_away(request: Request, exc: Exception) -> None:
    """One warning line for a store that could not be reached (no traceback: it is not a bug)."""
    _log.warning("%s %s: 503 %s: %s", request.method, request.url.path, _AWAY, exc)


def _answers_store_away(
    endpoint: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """A route that answers 503 ``unavailable`` (``{"error", "reason"}``) when its store cannot be
    reached, instead of a plain-text 500 and a traceback."""

    @functools.wraps(endpoint)
    async def guarded(request: Request) -> Response:
        try:
            return await endpoint(request)
        except _STORE_ERRORS as exc:
            _store_away(request, exc)
            return JSONResponse(
                {"error": "the store cannot be reached now: try again", "reason": _AWAY}, status_code=503
            )

    return guarded


def _status(wire: dict[str, Any]) -> int:
    if wire["accepted"]:
        return 200
    return STATUS_OF_REASON.get(str(wire.get("reason")), 422)


class _Api:
    def __init__(
        self,
        fleet: Fleet | None,
        hooks: HookView | None,
        token: str | None,
        max_body: int,
        max_wait: float,
        poll_interval: float,
        heartbeat: float,
        lease_age: float,
    ) -> None:
        self.fleet = None if fleet is None else FleetView(fleet, lease_age)
        self.hooks = hooks
        self.token = token
        self.max_body = max_body
        self.max_wait = max_wait
        self.heartbeat = heartbeat
        self.feeds = Feeds(poll_interval)
        self.body_reads = BodyReads()

    # -- shared steps --------------------------------------------------------------------------

    def _unauthorised(self, request: Request) -> Response | None:
        if token_ok(self.token, request.scope["headers"]):
            return None
        return _error(
            401,
            "a bearer token is required (Authorization: Bearer TOKEN)",
            **{"WWW-Authenticate": 'Bearer realm="live-steering"'},
        )

    async def _json_body(self, request: Request) -> Any | Response:
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json":
            return _error(415, "send the body as Content-Type: application/json")
        try:
            raw = await read_body(request.receive, self.max_body, BODY_DEADLINE, self.body_reads)
        except BodyTooLarge:
            return _error(413, f"the body is over {self.max_body:,} bytes")
        except BodyTimeout:
            if self.body_reads.closing:  # cut short by a shutdown: nothing was submitted
                return _error(
                    503, "the server is shutting down: its body did not arrive before; send it again"
                )
            return _error(408, "the body did not arrive in time")
        except BodyIncomplete:  # the client left mid-body: nothing of it is submitted
            return _error(400, "the body did not arrive whole: the client disconnected before its end")
        if not raw.strip():
            return {}
        try:
            return json.loads(raw.decode("utf-8"), parse_constant=_not_json)
        except UnicodeDecodeError:
            return _error(400, "the body is not UTF-8")
        except ValueError as exc:
            return _error(400, f"the body is not JSON: {exc}")
        except RecursionError:  # nested deeper than the parser goes: not a body of any route
            return _error(400, "the body is not JSON this server reads: nested too deeply")

    async def _find(self, session_id: str) -> tuple[str, Lease | dict[str, Any]] | None:
        """``("runtime", lease)``, ``("hook", description)``, or ``None`` for an unknown session."""
        if not valid_session_id(session_id):
            return None
        if self.fleet is not None:
            lease = await self.fleet.lease(session_id)
            if lease is not None:
                return ("runtime", lease)
        if self.hooks is not None:
            found = await self.hooks.session(session_id)
            if found is not None:
                return ("hook", found)
        return None

    # -- routes --------------------------------------------------------------------------------

    async def sessions(self, request: Request) -> Response:
        if (denied := self._unauthorised(request)) is not None:
            return denied
        listed: list[dict[str, Any]] = []
        if self.fleet is not None:
            for session_id in await self.fleet.session_ids():
                lease = await self.fleet.lease(session_id)
                if lease is not None:
                    listed.append(FleetView.describe(lease))
        if self.hooks is not None:
            # an id in both stores is the runtime's, as every other route reads it (``_find``)
            runtimes = {session["id"] for session in listed}
            listed += [s for s in await self.hooks.sessions() if s["id"] not in runtimes]
        return JSONResponse({"sessions": listed})

    async def session(self, request: Request) -> Response:
        if (denied := self._unauthorised(request)) is not None:
            return denied
        found = await self._find(path_param(request, "session"))
        if found is None:
            return _error(404, "no such session")
        _kind, what = found
        if isinstance(what, Lease):
            return JSONResponse(FleetView.describe(what))
        return JSONResponse(what)

    async def submit(self, request: Request) -> Response:
        if (denied := self._unauthorised(request)) is not None:
            return denied
        body = await self._json_body(request)
        if isinstance(body, Response):
            return body
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object {kind, text, id, generation_id?}")
        fields: dict[str, str] = {}
        for name in ("kind", "text", "id"):
            value = body.get(name)
            if not isinstance(value, str):
                return _error(400, f"'{name}' must be a string")
            fields[name] = value
        generation_id = body.get("generation_id")
        if generation_id is not None and not isinstance(generation_id, str):
            return _error(400, "'generation_id' must be a string when given")
        session_id = path_param(request, "session")
        steer = Input(fields["kind"], fields["text"], id=fields["id"])
        try:
            return await self._submit(session_id, steer, generation_id)
        except _STORE_ERRORS as exc:
            _store_away(request, exc)
            # The refusal receipt (C32), as a remote submit's is: this request admitted nothing
            # it can vouch for; a stored request of it is withdrawn or decided as docs/fleet.md says.
            away = Receipt(False, steer.id, generation_id or "", None, _AWAY)
            return JSONResponse(receipt_wire(away), status_code=503)

    async def _submit(self, session_id: str, steer: Input, generation_id: str | None) -> Response:
        recent = None if self.fleet is None else self.fleet.recent_lease(session_id)
        if recent is not None:
            # A lease read a moment ago: its session exists (lease rows stay), and the owner
            # decides whatever anchor it gives. A refusal admitted nothing (C6), so when the
            # running generation has moved meanwhile, the submit is asked again, freshly anchored.
            wire = await self._fleet_submit(session_id, steer, generation_id, recent)
            kind = "runtime"
            feed = self.feeds.get((kind, session_id))
            if feed is not None:
                feed.nudge()
            return JSONResponse(wire, status_code=_status(wire))
        found = await self._find(session_id)
        if found is None:
            # No store knows the session: what a fleet answers a session with no live owner
            # (the core's order on what is known: nothing), 404 as C32 pins, the receipt the body.
            unknown = answer_without_runtime(
                Submission(session_id, steer, input_digest(steer), generation_id or ""), None
            )
            return JSONResponse(receipt_wire(unknown), status_code=404)
        kind, what = found
        if isinstance(what, Lease):
            wire = await self._fleet_submit(session_id, steer, generation_id, what)
        else:
            assert self.hooks is not None
            wire = await self.hooks.enqueue(session_id, steer)
        feed = self.feeds.get((kind, session_id))
        if feed is not None:
            feed.nudge()
        return JSONResponse(wire, status_code=_status(wire))

    async def _fleet_submit(
        self, session_id: str, steer: Input, generation_id: str | None, lease: Lease
    ) -> dict[str, Any]:
        """Submit through the fleet, anchored to ``generation_id`` or, without one, to the lease's
        running generation. A lease read a moment ago (or just now) may name a generation that has
        ended since: a refusal admitted nothing (C6), so a submit that named no generation is asked
        again, freshly anchored, while the running generation keeps moving (up to
        ``_REANCHORS`` times): "no generation_id" means the one running when the owner decides."""
        assert self.fleet is not None
        wire = await self.fleet.submit(session_id, steer, generation_id, lease)
        for _ in range(_REANCHORS):
            if generation_id is not None or wire.get("reason") not in _MOVED:
                break
            fresh = await self.fleet.lease(session_id)
            if fresh is None or fresh.generation_id == lease.generation_id:
                break  # the generation has not moved: the refusal stands
            lease = fresh
            wire = await self.fleet.submit(session_id, steer, None, lease)
        return wire

    async def receipt(self, request: Request) -> Response:
        if (denied := self._unauthorised(request)) is not None:
            return denied
        wait_text = request.query_params.get("wait")
        wait = 0.0
        if wait_text is not None:
            if _SECONDS.match(wait_text) is None:
                return _error(400, "'wait' must be a number of seconds")
            wait = min(float(wait_text), self.max_wait)
        session_id, input_id = path_param(request, "session"), path_param(request, "input")
        found = await self._find(session_id)
        if found is None:
            return _error(404, "no such session")
        if isinstance(found[1], Lease):
            assert self.fleet is not None
            fleet = self.fleet
            if wait > 0:

                async def final() -> None:
                    with contextlib.suppress(UnknownInputError):
                        await fleet.wait_final(session_id, input_id)

                await self.feeds.waited(wait, final)
            wire = await fleet.receipt(session_id, input_id)
        else:
            assert self.hooks is not None
            wire = await self._hook_receipt(session_id, input_id, wait)
        if wire is None:
            return _error(404, "this session never accepted that input id")
        return JSONResponse(wire)

    async def _hook_receipt(self, session_id: str, input_id: str, wait: float) -> dict[str, Any] | None:
        assert self.hooks is not None
        hooks = self.hooks
        wire = await hooks.receipt(session_id, input_id)

        async def final() -> None:
            nonlocal wire
            delay = 0.01
            while wire is not None and wire["disposition"] == "queued":
                await anyio.sleep(delay)
                delay = min(delay * 2, 0.25)
                wire = await hooks.receipt(session_id, input_id)

        if wait > 0:
            await self.feeds.waited(wait, final)
        return wire

    async def stop(self, request: Request) -> Response:
        if (denied := self._unauthorised(request)) is not None:
            return denied
        body = await self._json_body(request)
        if isinstance(body, Response):
            return body
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object {generation_id?}")
        generation_id = body.get("generation_id")
        if generation_id is not None and not isinstance(generation_id, str):
            return _error(400, "'generation_id' must be a string when given")
        session_id = path_param(request, "session")
        from ._stores import stop_wire

        try:
            found = await self._find(session_id)
            if found is None:
                return _error(404, "no such session")
            if not isinstance(found[1], Lease):
                # this path takes no method for a hook session (RFC 9110: an empty Allow says so)
                return _error(405, "a hook session runs no generation this server can stop", Allow="")
            assert self.fleet is not None
            result = await self.fleet.stop(session_id, generation_id, found[1])
        except _STORE_ERRORS as exc:
            _store_away(request, exc)
            away = StopResult(False, session_id, generation_id or "", _AWAY)
            return JSONResponse(stop_wire(away), status_code=503)
        feed = self.feeds.get(("runtime", session_id))
        if feed is not None:
            feed.nudge()
        status = 200 if result.stopped else STATUS_OF_STOP.get(str(result.reason), 409)
        return JSONResponse(stop_wire(result), status_code=status)

    async def events(self, request: Request) -> Response:
        if (denied := self._unauthorised(request)) is not None:
            return denied
        session_id = path_param(request, "session")
        found = await self._find(session_id)
        if found is None:
            return _error(404, "no such session")
        kind = found[0]
        asked_text = request.query_params.get("text") in ("1", "true")
        # text only to a client that asked for it and proved the token: none is set, none shown
        show_text = asked_text and self.token is not None
        cursor = parse_cursor(request.headers.get("last-event-id"))
        if cursor is None:
            cursor = parse_cursor(request.query_params.get("after"))
        reset = False
        if kind == "runtime":
            assert self.fleet is not None
            fleet = self.fleet

            async def read(after: int, limit: int) -> list[dict[str, Any]]:
                return await fleet.events(session_id, after, limit)

            holds = fleet.holds
        else:
            assert self.hooks is not None
            hooks = self.hooks

            async def read(after: int, limit: int) -> list[dict[str, Any]]:
                return await hooks.events(session_id, after, limit, True)

            holds = hooks.holds
        if cursor is not None and cursor > 0 and not await holds(session_id, cursor):
            reset, resumed_from = True, cursor
            cursor = 0
        start = 0 if cursor is None else cursor
        feeds, heartbeat = self.feeds, self.heartbeat
        view = self._describer(kind, session_id)

        async def stream() -> Any:
            yield b": live-steering event stream\nretry: 1000\n\n"
            if reset:
                note = {"type": "stream.reset", "last_event_id": resumed_from, "reason": "not-in-log"}
                yield sse({**note, "sequence": 0}, name="reset", with_id=False)
            try:
                since = anyio.current_time()  # descriptions read from here on are newer than this one
                described = await view()
                if described is not None:
                    yield sse({"sequence": 0, **described}, name="session", with_id=False)
                # closed here, not by a garbage collector, when the client goes (the feed's count)
                async with contextlib.aclosing(
                    feeds.subscribe((kind, session_id), read, start, heartbeat, view, described, since)
                ) as events:
                    async for event in events:
                        if isinstance(
                            event, SessionChanged
                        ):  # a generation started or ended, an owner came or went
                            if event.description != described:
                                described = event.description
                                yield sse({"sequence": 0, **described}, name="session", with_id=False)
                            continue
                        if event is None:
                            yield b": keepalive\n\n"
                            continue
                        # a description change (a generation's start or end, even after a disposition
                        # event) comes from the feed's polls, in their order: never an older one
                        shown = {**event, "session_id": session_id}
                        if "text" in shown and not show_text:
                            shown["text"] = "[redacted]"
                        yield sse(shown)
            except _STORE_ERRORS as exc:
                # the store went away under an open stream: too late for a 503, so the stream
                # ends cleanly, with one warning; the client reconnects with Last-Event-ID
                _store_away(request, exc)

        return _ClosingStream(
            stream(),
            media_type="text/event-stream",
            headers={"X-Accel-Buffering": "no"},
        )

    def _describer(self, kind: str, session_id: str) -> Any:
        async def describe() -> dict[str, Any] | None:
            try:
                found = await self._find(session_id)
            except (FleetError, StoreError):
                return None
            if found is None:
                return None
            what = found[1]
            return FleetView.describe(what) if isinstance(what, Lease) else what

        return describe

    @staticmethod
    def static(name: str, media_type: str) -> Any:
        """An endpoint for one file of the package's ``static/`` folder: fixed names only, so no
        request path ever reaches the file system."""

        async def endpoint(request: Request) -> Response:
            data = resources.files(__package__).joinpath("static", name).read_bytes()
            return Response(data, media_type=media_type)

        return endpoint


#: Refusals a submit anchored to a recently read lease gets when the generation moved meanwhile.
_MOVED: Final = frozenset({"stale-generation", "finishing"})
#: How many times a submit with no ``generation_id`` is anchored again to a generation that
#: started while it was on its way (each attempt admitted nothing, C6).
_REANCHORS: Final = 3


def create_app(
    *,
    fleet: Fleet | None = None,
    hooks_store: str | os.PathLike[str] | None = None,
    hooks_dsn: str | None = None,
    token: str | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    max_wait: float = DEFAULT_MAX_WAIT,
    poll_interval: float = 0.2,
    heartbeat: float = HEARTBEAT,
    lease_age: float = LEASE_AGE,
    cors_origins: Sequence[str] = (),
    console: bool = True,
) -> Any:
    """The ASGI application of C32, to run under any ASGI server or mount in your own app.

    >>> async with SQLiteFleet("fleet.db") as fleet:                       # doctest: +SKIP
    ...     app = create_app(fleet=fleet, hooks_store="hooks.db", token=os.environ["TOKEN"])
    ...     await serve_it(app)  # uvicorn, hypercorn, or Mount("/steering", app) in Starlette

    ``fleet``: an open fleet node (runtime sessions); ``hooks_store``/``hooks_dsn``: the hook
    relay's store (hook sessions and ``POST /v1/hooks/{vendor}``); at least one of them.
    ``token``: the bearer token every ``/v1/`` route requires (``None``: none, for loopback
    only; ``live-steering serve`` refuses a public address without one). ``max_body``: the
    largest request body (413 past it). ``max_wait``: the cap of ``?wait=``. ``poll_interval``:
    how often an event stream reads its store when nothing new was submitted here.
    ``lease_age``: how long a session's lease, once read, anchors submits that name no
    generation (0: read it for every submit); a submit refused because the generation moved
    meanwhile is asked again, freshly anchored.
    ``cors_origins``: origins allowed to call the API from a browser (none by default: no
    CORS header is ever sent). ``console``: serve the web console at ``/``.

    The app's ``close_streams()`` ends every open event stream cleanly (and any opened after
    it): call it when your server begins to shut down, before its graceful wait, or that wait
    runs out on the streams and cancels them.
    """
    if fleet is None and hooks_store is None and hooks_dsn is None:
        raise ValueError("create_app needs a fleet, a hook store, or both")
    if token is not None and (not isinstance(token, str) or not token or not token.isprintable()):
        raise ValueError("the token must be a non-empty printable string")
    if not isinstance(max_body, int) or max_body < 1:
        raise ValueError("max_body must be a positive number of bytes")
    if isinstance(cors_origins, str):
        raise TypeError("cors_origins is a list of origins, not one string")
    cors_origins = list(cors_origins)  # an iterator is read once, here
    for origin in cors_origins:
        if (problem := origin_problem(origin)) is not None:
            raise ValueError(f"cors_origins: {problem}")
    hooks = None if hooks_store is None and hooks_dsn is None else HookView(hooks_store, hooks_dsn)
    api = _Api(fleet, hooks, token, max_body, max_wait, poll_interval, heartbeat, lease_age)
    routes: list[BaseRoute] = [
        Route("/v1/sessions", _answers_store_away(api.sessions), methods=["GET"]),
        Route("/v1/sessions/{session}", _answers_store_away(api.session), methods=["GET"]),
        Route("/v1/sessions/{session}/inputs", _answers_store_away(api.submit), methods=["POST"]),
        Route("/v1/sessions/{session}/inputs/{input}", _answers_store_away(api.receipt), methods=["GET"]),
        Route("/v1/sessions/{session}/stop", _answers_store_away(api.stop), methods=["POST"]),
        Route("/v1/sessions/{session}/events", _answers_store_away(api.events), methods=["GET"]),
    ]
    if hooks is not None:
        routes.append(
            Route(
                "/v1/hooks/{vendor}",
                HookRoute(hooks.path, hooks.dsn, token, api.body_reads),
                methods=["POST"],
            )
        )
    if console:
        routes += [Route(path, api.static(*_STATIC[path]), methods=["GET"]) for path in _STATIC]
    middleware = []
    if cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
            )
        )
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={404: _no_route, 405: _no_route},
    )
    # No redirect of ``/v1/sessions/`` to ``/v1/sessions``: Starlette's builds its ``Location``
    # from the request's ``Host`` header; a path that is no route answers 404 as every other.
    app.router.redirect_slashes = False
    return Guard(app, token=token, close_streams=api.feeds.close, body_reads=api.body_reads)
