"""``POST /v1/hooks/{vendor}``: a vendor's HTTP hook, answered as ``live-steering hook VENDOR`` answers.

The request body is the vendor's hook JSON (what the command reads on stdin); the
response body is exactly what the command writes on stdout for it (the vendor's reply
as one JSON line, or nothing: ``200`` with an empty body, which every vendor's HTTP hook
reads as "nothing to say"). It is the command's own code path, ``_command.run_hook``,
run on a worker thread with the body as its stdin and this response as its stdout: the
same store, the same claim, the same audit events, the same failures recorded.

The one order that matters (C26b) is kept across the network: the command confirms a
delivery only after its reply is written and flushed. Here ``flush`` sends the response
and returns once the server took it. A server's ``send`` says nothing of a client already
gone (uvicorn drops the bytes), so ``flush`` first asks the server whether the client
disconnected (the vendor gave up at its hook timeout while the store was busy); then it
raises without sending, and the command abandons the claim (``unknown``,
``reply-not-written``), as it does when its stdout breaks. An instruction is never confirmed
delivered on a reply that was not sent, and never claimed twice.

Whatever fails on this side (the store locked, missing, damaged) the command writes
nothing and returns: the vendor gets ``200`` and an empty body, and its agent goes on.

The store is opened once per worker thread and kept (a SQLite store belongs to the thread that
opened it), not once per request as the command must: opening costs about 0.6 ms of a hook's
2.5 (its schema check, its PRAGMAs). A SQLite file that was deleted or replaced since (``hooks``
docs: delete the file when no session needs it) is noticed by its inode before each request and
opened again, so the route never writes into a file no other command reads.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import threading
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread

from ..hooks._command import MAX_STDIN_BYTES, run_hook
from ..hooks._open import open_store
from ..hooks._store import HOOK_BUSY_TIMEOUT, HookStore
from ._security import (
    BodyIncomplete,
    BodyReads,
    BodyTimeout,
    BodyTooLarge,
    Receive,
    Scope,
    Send,
    plain,
    read_body,
    token_ok,
)

_log = logging.getLogger("live_steering.http")

#: Seconds a vendor has to send its hook JSON.
BODY_DEADLINE = 30.0


class _Reply(io.RawIOBase):
    """The command's stdout: ``write`` collects the reply, ``flush`` sends it as the response."""

    def __init__(self, send: Send, receive: Receive | None = None) -> None:
        super().__init__()
        self._send = send
        self._receive = receive
        self._data = bytearray()
        self.sent = False

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._data += bytes(data)
        return len(data)

    def flush(self) -> None:
        if self.sent or not self._data:
            return
        self.sent = True
        # One trip to the event loop for both the check and the send (each trip and its way
        # back cost about 0.1 ms on a busy machine, on the reply's path).
        if not anyio.from_thread.run(_respond_unless_gone, self._send, self._receive, bytes(self._data)):
            # The vendor gave up (its hook timeout) while the store was busy: a reply sent now
            # reaches nobody, and the server's send would not say so. Raised as a stdout that
            # failed, so the claim is abandoned (reply-not-written), never confirmed delivered.
            raise ConnectionError("the vendor closed the connection before the reply was sent")


async def _client_gone(receive: Receive) -> bool:
    """Whether the server already reported the client gone (``http.disconnect``), without waiting:
    uvicorn answers at once once it saw the connection close; a server whose ``receive`` would
    wait (or checkpoints first, as hypercorn on trio does) answers "not gone"."""
    with anyio.CancelScope() as scope:
        scope.cancel()
        message = await receive()
        return bool(message["type"] == "http.disconnect")
    return False


async def _respond_unless_gone(send: Send, receive: Receive | None, body: bytes) -> bool:
    """Send ``body`` as a ``200`` unless the client is already gone; whether it was sent."""
    if receive is not None and await _client_gone(receive):
        return False
    await _respond(send, 200, body)
    return True


async def _respond(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode("ascii")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class HookRoute:
    """The ASGI endpoint (a class, so Starlette hands it the raw request)."""

    def __init__(
        self, path: str | None, dsn: str | None, token: str | None, body_reads: BodyReads | None = None
    ) -> None:
        self.path = path
        self.dsn = dsn
        self.token = token
        self.body_reads = body_reads
        self._limiter = anyio.CapacityLimiter(8)
        self._local = threading.local()  # this worker thread's (key, open store)

    def _key(self) -> object:
        """What identifies the store's file now: its inode for SQLite (``None``: no file yet)."""
        if self.dsn is not None:
            return self.dsn
        assert self.path is not None
        try:
            status = os.stat(self.path)
        except OSError:
            return None
        return (status.st_dev, status.st_ino)

    def _forget(self) -> None:
        """Close this worker thread's store, if any (in the thread that opened it)."""
        cached: tuple[object, HookStore] | None = getattr(self._local, "store", None)
        self._local.store = None
        if cached is not None:
            # a file or a connection gone under it: nothing left to close cleanly
            with contextlib.suppress(Exception):
                cached[1].close()

    def _store(self) -> HookStore | None:
        """This worker thread's open store, opened again when its file changed; ``None`` when
        there is no file yet or it cannot be opened (then ``run_hook`` opens, creates or reports
        it itself, as the command does)."""
        key = self._key()
        cached: tuple[object, HookStore] | None = getattr(self._local, "store", None)
        if cached is not None:
            if cached[0] == key:
                return cached[1]
            self._forget()
        if key is None:
            return None
        try:
            store = open_store(self.path, dsn=self.dsn, busy_timeout=HOOK_BUSY_TIMEOUT)
        except Exception:
            return None
        self._local.store = (key, store)
        return store

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not token_ok(self.token, scope["headers"]):
            await plain(send, 401, b"a bearer token is required (Authorization: Bearer TOKEN)\n")
            return
        vendor: str = scope["path_params"]["vendor"]
        content_type = next((v for k, v in scope["headers"] if k == b"content-type"), b"")
        if content_type.split(b";")[0].strip().lower() != b"application/json":
            # JSON only: a cross-site form post cannot reach this route without a CORS preflight
            await plain(send, 415, b"send the hook JSON as Content-Type: application/json\n")
            return
        try:
            body = await read_body(receive, MAX_STDIN_BYTES, BODY_DEADLINE, self.body_reads)
        except BodyTooLarge:
            # the command's own answer to too much stdin: recorded (stdin-too-large), no reply
            body = b" " * (MAX_STDIN_BYTES + 1)
            await self._run(vendor, body, None)
            await plain(send, 413, b"")
            return
        except BodyIncomplete:
            # The vendor left before its hook JSON ended: no hook call at all (what arrived may
            # still parse), so nothing is claimed; the command, whose stdin ends, never sees this.
            await plain(send, 400, b"")
            return
        except BodyTimeout:
            closing = self.body_reads is not None and self.body_reads.closing
            await plain(send, 503 if closing else 408, b"")  # 503: cut short by a shutdown
            return
        reply = _Reply(send, receive)
        await self._run(vendor, body, reply)
        if not reply.sent:
            await _respond(send, 200, b"")

    async def _run(self, vendor: str, body: bytes, reply: _Reply | None) -> None:
        stdout: Any = reply if reply is not None else io.BytesIO()
        stderr = io.StringIO()

        def call() -> None:
            run_hook(
                vendor,
                store_path=self.path,
                dsn=self.dsn,
                stdin=io.BytesIO(body),
                stdout=stdout,
                stderr=stderr,
                store=self._store(),
            )
            if stderr.getvalue():  # the store failed (locked, lost, damaged): the next request reopens
                self._forget()

        await anyio.to_thread.run_sync(call, limiter=self._limiter)
        said = stderr.getvalue().strip()
        if said:
            _log.warning("%s", said)
