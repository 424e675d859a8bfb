"""The server's guards: the bearer token, the body cap, the headers every answer carries.

Nothing here knows a route's meaning. ``Guard`` wraps the whole ASGI application:

* every answer gets ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer``
  and ``X-Frame-Options: DENY``; answers under ``/v1/`` get ``Cache-Control: no-store``;
  the console's get its Content-Security-Policy (same-origin scripts, styles and fetches
  only, no inline code, no framing);
* with no token configured (loopback only, ``serve`` refuses otherwise), a request whose
  ``Host`` is not a loopback name is refused 421: a web page cannot reach a loopback
  server through a rebound DNS name.

The token is compared with ``hmac.compare_digest`` on bytes (constant time in the
token's length). ``read_body`` reads a request body up to a cap (413 past it) with a
deadline for the whole body (408), so a client that sends slowly holds only its own
request.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final
from urllib.parse import unquote

import anyio

from .._errors import LiveSteeringError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The console's policy: everything from this origin, nothing inline, never framed.
CONSOLE_CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost.", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, ``[::1]`` included) is this machine's loopback."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_name(value: str) -> str:
    if value.startswith("["):
        return value.partition("]")[0] + "]"
    return value.rpartition(":")[0] if value.count(":") == 1 else value


class BodyTooLarge(LiveSteeringError):
    """A request body went past its cap (answered 413)."""


class BodyTimeout(LiveSteeringError):
    """A request body did not arrive within its deadline (answered 408)."""


class BodyIncomplete(LiveSteeringError):
    """The client disconnected before its request body ended (fewer bytes than its
    ``Content-Length``, or a chunked body without its last chunk): not a request at all, so
    nothing is submitted or claimed for it (answered 400, which nobody is left to read)."""


#: Seconds a request body still being read when the server begins to shut down may take: under
#: the servers' graceful wait (``serve``'s 3 s), so its request is answered (503) before that
#: wait runs out and cancels it (uvicorn would answer 500 and print a traceback).
BODY_GRACE_AT_SHUTDOWN: Final = 2.0


class BodyReads:
    """The request bodies being read now, so that a shutdown can bound them (``close``)."""

    def __init__(self) -> None:
        self._scopes: set[anyio.CancelScope] = set()
        self.closing = False

    def close(self, grace: float = BODY_GRACE_AT_SHUTDOWN) -> None:
        """The server begins to shut down: every body read in flight, and any started from now
        on, ends within ``grace`` seconds (``BodyTimeout``; its route then answers 503)."""
        self.closing = True
        if self._scopes:
            cut = anyio.current_time() + grace  # called in the server's event loop
            for scope in self._scopes:
                scope.deadline = min(scope.deadline, cut)


async def read_body(receive: Receive, limit: int, deadline: float, reads: BodyReads | None = None) -> bytes:
    """The request body, at most ``limit`` bytes (``BodyTooLarge`` past it, before reading the
    rest), within ``deadline`` seconds for the whole of it (``BodyTimeout``; sooner once
    ``reads`` closed, see ``BodyReads.close``). ``BodyIncomplete`` when the client disconnected
    before the body's end: what arrived may parse as a whole request (a complete JSON object
    under a longer ``Content-Length``), but the client never sent it as one."""
    chunks: list[bytes] = []
    size = 0
    if reads is not None and reads.closing:
        deadline = min(deadline, BODY_GRACE_AT_SHUTDOWN)
    with anyio.move_on_after(deadline) as scope:
        if reads is not None:
            reads._scopes.add(scope)
        try:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise BodyIncomplete
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
        finally:
            if reads is not None:
                reads._scopes.discard(scope)
    if scope.cancelled_caught:
        raise BodyTimeout
    return b"".join(chunks)


def token_ok(expected: str | None, headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether the request carries ``Authorization: Bearer <expected>`` (always, with no token)."""
    if expected is None:
        return True
    given = b""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, credentials = value.partition(b" ")
            if scheme.lower() == b"bearer":
                given = credentials.strip()
            break
    # compare_digest takes the time of the expected token's length whatever was given
    return hmac.compare_digest(given, expected.encode("utf-8"))


#: An encoded slash (``%2F``) inside one segment of an API path, in the path the routes see: a
#: NUL, which no id may hold (C7). Servers decode ``%2F`` to ``/`` before routing, which put an id
#: holding a slash out of every route's reach; ``path_param`` turns it back.
SLASH_IN_SEGMENT: Final = "\x00"
#: The scope key that says the path was rewritten so (``path_param`` reads it).
_SLASHES: Final = "live_steering.slashes"


def _segmented(raw: bytes) -> str | None:
    """``raw_path`` decoded segment by segment, each encoded slash kept as ``SLASH_IN_SEGMENT``;
    None when a segment holds a NUL of its own (no id can: the path is left as it was)."""
    parts = [unquote(part) for part in raw.decode("latin-1").partition("?")[0].split("/")]
    if any(SLASH_IN_SEGMENT in part for part in parts):
        return None
    return "/".join(part.replace("/", SLASH_IN_SEGMENT) for part in parts)


def path_param(request: Any, name: str) -> str:
    """A route's path parameter as the client encoded it: an id may hold ``/``, sent as ``%2F``."""
    value: str = request.path_params[name]
    return value.replace(SLASH_IN_SEGMENT, "/") if request.scope.get(_SLASHES) else value


class Guard:
    """The ASGI middleware of the module docs."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        close_streams: Callable[[], None] | None = None,
        body_reads: BodyReads | None = None,
    ) -> None:
        self.app = app
        self.token = token
        self._close_streams = close_streams
        self._body_reads = body_reads

    def close_streams(self) -> None:
        """End every open event stream cleanly, and any opened from now on: call it when the
        server begins to shut down (``live-steering serve`` does), so that its graceful wait
        sees the streams finish instead of cancelling them when it runs out. A request body still
        being read then gets ``BODY_GRACE_AT_SHUTDOWN`` seconds more, and its request is answered
        (503) if it does not arrive in them."""
        if self._close_streams is not None:
            self._close_streams()
        if self._body_reads is not None:
            self._body_reads.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        root: str = scope.get("root_path", "")
        if root and path.startswith(root):  # mounted in another app: the path below the mount
            path = path[len(root) :]
        api = path.startswith("/v1/")
        raw = scope.get("raw_path")
        if api and isinstance(raw, bytes) and b"%2f" in raw.lower():
            segmented = _segmented(raw)
            if segmented is not None:
                scope = {**scope, "path": segmented, _SLASHES: True}

        async def guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"x-content-type-options", b"nosniff"))
                headers.append((b"referrer-policy", b"no-referrer"))
                headers.append((b"x-frame-options", b"DENY"))
                if api:
                    headers.append((b"cache-control", b"no-store"))
                else:
                    headers.append((b"content-security-policy", CONSOLE_CSP.encode("ascii")))
                message["headers"] = headers
            await send(message)

        if self.token is None:
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
            if not is_loopback(_host_name(host)):  # every answer's headers, this one's too
                await plain(guarded, 421, b"this server answers only loopback host names (no token set)\n")
                return
        await self.app(scope, receive, guarded)


async def plain(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode("ascii")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
