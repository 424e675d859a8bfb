"""Shared helpers for the HTTP tests: a fleet owner running a loop, and the app under a real server."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import anyio.abc
import attrs
import httpx

from live_steering import Input, LiveRuntime
from live_steering.fleet import Fleet

TOKEN = "s3cret-token-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@attrs.define
class Owned:
    """A session owned by a fleet node, whose loop writes every steer at its next boundary."""

    session_id: str
    written: list[str] = attrs.Factory(list)
    ended: list[str] = attrs.Factory(list)
    """The terminal reason of each generation the loop ran (``None`` while it runs)."""


@contextlib.asynccontextmanager
async def owned(
    worker: Fleet, session_id: str = "chat-42", generation_id: str = "gen-1", **runtime: Any
) -> AsyncIterator[Owned]:
    """Own ``session_id`` on ``worker`` and run generation ``generation_id`` until it is stopped."""
    state = Owned(session_id)

    def write(steer: Input, metadata: Mapping[str, Any]) -> None:
        state.written.append(steer.text)

    async with anyio.create_task_group() as tg:
        ready = anyio.Event()

        async def loop() -> None:
            async with worker.own(LiveRuntime(session_id=session_id, **runtime)) as rt:
                async with rt.open_generation(generation_id) as gen:
                    await worker.flush(session_id)
                    ready.set()
                    while await gen.wait_for_input():
                        await gen.boundary(write)
                assert gen.terminal_event is not None
                state.ended.append(str(gen.terminal_event.get("reason")))
                await worker.flush(session_id)
                await anyio.sleep_forever()  # still the owner, between generations

        tg.start_soon(loop)
        await ready.wait()
        try:
            yield state
        finally:
            tg.cancel_scope.cancel()


def client(app: Any, **options: Any) -> httpx.AsyncClient:
    """An httpx client that drives the ASGI app in-process (no server: responses are buffered)."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", **options)


def free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as `live-steering serve` does
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    return sock


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """``app`` under a real ASGI server on a free loopback port: uvicorn on asyncio, hypercorn on
    trio (uvicorn runs on asyncio only). Yields the base URL; stops the server on exit."""
    sock = free_socket()
    port = sock.getsockname()[1]
    import sniffio

    backend = sniffio.current_async_library()
    async with anyio.create_task_group() as tg:
        if backend == "trio":
            from hypercorn.config import Config
            from hypercorn.trio import serve

            config = Config()
            config.bind = [f"fd://{sock.detach()}"]  # hypercorn closes the descriptor itself
            config.graceful_timeout = 1.0
            config.backlog = 2048  # as `live-steering serve` does: hypercorn listens again, with 100
            config.keep_alive_timeout = 3600  # a loaded test loop may leave a kept-alive connection idle
            config.accesslog = None
            stopped = anyio.Event()

            async def trigger() -> None:
                await stopped.wait()

            tg.start_soon(lambda: serve(app, config, shutdown_trigger=trigger))
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                stopped.set()
        else:
            import uvicorn

            # a long keep-alive: a loaded test loop (server and clients in one) may leave a kept-alive
            # connection idle past uvicorn's 5 s, and a request racing its close fails (ReadError)
            config_u = uvicorn.Config(
                app, lifespan="off", log_level="warning", timeout_graceful_shutdown=1, timeout_keep_alive=3600
            )
            server = uvicorn.Server(config_u)
            server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
            tg.start_soon(lambda: server.serve(sockets=[sock]))
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                server.should_exit = True
    if sock.fileno() != -1:
        sock.close()


class SSEStream:
    """An event stream read over a plain socket with an HTTP/1.0 request, so the body is the raw
    SSE bytes (no chunking) and nothing is left for a garbage collector (httpx leaves its body
    iterators to one when a stream is read only in part, which trio reports)."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self._stream = stream
        self._buffer = b""
        self.status = 0
        self.headers: dict[str, str] = {}

    async def _fill(self) -> None:
        chunk = await self._stream.receive()
        self._buffer += chunk

    async def _start(self) -> None:
        while b"\r\n\r\n" not in self._buffer:
            await self._fill()
        head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()

    async def read(self, count: int, *, name: str | None = None) -> list[dict[str, Any]]:
        """The next ``count`` records (``name``: only those of that event), as ``{"id", "event", "data"}``."""
        import json

        found: list[dict[str, Any]] = []
        while len(found) < count:
            while b"\n\n" not in self._buffer:
                await self._fill()
            raw, self._buffer = self._buffer.split(b"\n\n", 1)
            record: dict[str, Any] = {}
            for line in raw.decode("utf-8").split("\n"):
                if line.startswith(":"):
                    continue
                field, _, value = line.partition(": ")
                record[field] = value
            if "data" in record and (name is None or record.get("event") == name):
                record["data"] = json.loads(record["data"])
                found.append(record)
        return found


@contextlib.asynccontextmanager
async def sse_stream(
    base_url: str, path: str, headers: Mapping[str, str] | None = None
) -> AsyncIterator[SSEStream]:
    """GET ``path`` as an event stream; the connection closes on exit."""
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    connection = await anyio.connect_tcp(host, int(port))
    async with connection:
        lines = [f"GET {path} HTTP/1.0", f"Host: {host}:{port}", "Accept: text/event-stream"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        await connection.send(("\r\n".join(lines) + "\r\n\r\n").encode("utf-8"))
        stream = SSEStream(connection)
        with anyio.fail_after(60):
            await stream._start()
        yield stream
