"""``live-steering serve``: the HTTP API and the web console (``live_steering.http``) under an ASGI server.

``serve [--host H] [--port P] [--store PATH | --dsn DSN] [--hooks-store PATH | --hooks-dsn DSN]
[--token-env VAR]``
serves runtime sessions of a fleet store and hook sessions of a hook store. It runs under
uvicorn (asyncio), or hypercorn with ``--backend trio``. It refuses to listen on an
address other than loopback without a token, and never creates a fleet store (a node that
owns a session does, as for ``steer``). SIGINT and SIGTERM stop it gracefully: open
requests get a few seconds to finish, the fleet node is closed, exit status 0. Errors are
one line on stderr: exit 2 for usage and stores that cannot be used, 1 when the address
cannot be bound.

Starlette, uvicorn and hypercorn are imported only when the command runs, never when
the parser is built: ``live-steering hook`` and ``instruct`` never load them.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from typing import Any

from .._errors import LiveSteeringError
from .._extras import install_hint
from .._validate import origin_problem as _origin_problem
from ._output import dsn, error, file_path, redacted_dsn

_PROG = "live-steering serve"
DEFAULT_PORT = 8765
#: Seconds open requests (event streams) get to finish at shutdown.
GRACE = 3.0

#: Connections the kernel queues for the server before it accepts them (uvicorn's default).
#: Both servers listen again with their own setting, so each is given this one: hypercorn's
#: default of 100 made a burst of 300 connections lose a third of them (the kernel drops a
#: SYN while the queue is full, and some clients saw their connection reset).
BACKLOG = 2048


def _origin(text: str) -> str:
    """``--cors-origin``: a browser origin (the HTTP app's own rule, without importing Starlette)."""
    problem = _origin_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve the HTTP API and the web console over a fleet store and a hook store",
        description="Serve the HTTP API (steer, follow-up, stop, receipts, events over SSE) and the web "
        "console at /, over a fleet store (runtime sessions) and a hook store (hook sessions).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"the port (default {DEFAULT_PORT}; 0: any free one)"
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--store", metavar="PATH", type=file_path, help="a SQLite fleet store (runtime sessions)"
    )
    where.add_argument(
        "--dsn", metavar="DSN", type=dsn, help="a PostgreSQL fleet store (needs the 'postgres' extra)"
    )
    hooks = parser.add_mutually_exclusive_group()
    hooks.add_argument(
        "--hooks-store", metavar="PATH", type=file_path, help="a SQLite hook store (hook sessions)"
    )
    hooks.add_argument(
        "--hooks-dsn",
        metavar="DSN",
        type=dsn,
        help="a PostgreSQL hook store (hook sessions; needs the 'postgres' extra)",
    )
    parser.add_argument(
        "--token-env",
        metavar="VAR",
        help="the environment variable holding the bearer token every /v1/ route requires",
    )
    parser.add_argument(
        "--cors-origin",
        action="append",
        type=_origin,
        default=[],
        metavar="ORIGIN",
        help="allow this origin to call the API from a browser (repeatable; default: no CORS)",
    )
    parser.add_argument(
        "--backend",
        choices=("asyncio", "trio"),
        default="asyncio",
        help="asyncio (uvicorn, default) or trio (hypercorn)",
    )
    parser.set_defaults(handler=run)


def _token(args: argparse.Namespace) -> str | None:
    from ._fleet import StoreProblem

    if args.token_env is None:
        return None
    value = os.environ.get(args.token_env, "")
    if not value:
        raise StoreProblem(f"--token-env {args.token_env}: that environment variable is not set or empty", 2)
    if not value.isprintable() or value != value.strip():
        raise StoreProblem(f"--token-env {args.token_env}: the token must be printable, with no spaces", 2)
    return value


def _check_hook_store(path: str | None, dsn: str | None) -> None:
    """Open the hook store once before listening (creating it, as the hook command does): a
    file that is not a hook store, or a PostgreSQL that cannot be reached, is a one-line
    refusal here, not a 500 with a traceback on every request."""
    from ..hooks._open import open_store
    from ..hooks._store import StoreError
    from ._fleet import StoreProblem

    where = f"--hooks-dsn {redacted_dsn(dsn)!r}" if dsn is not None else f"--hooks-store {path!r}"
    try:
        open_store(path, dsn=dsn).close()
    except StoreError as exc:
        raise StoreProblem(f"{where}: {exc}", 2) from None
    except Exception as exc:  # psycopg's errors (a server that is down, a bad DSN), without importing it
        if type(exc).__module__.split(".")[0] != "psycopg":
            raise
        raise StoreProblem(f"{where}: {str(exc).strip().splitlines()[0]}", 2) from None


class _Terminated(LiveSteeringError):
    """SIGTERM, raised where the server re-raises the signal it captured: the fleet closes cleanly."""


def run(args: argparse.Namespace) -> int:
    try:
        import starlette  # noqa: F401

        if args.backend == "trio":
            import hypercorn  # noqa: F401
            import trio  # noqa: F401
        else:
            import uvicorn  # noqa: F401
    except ImportError as exc:
        package = "hypercorn and trio" if args.backend == "trio" else "starlette and uvicorn"
        error(_PROG, f"{install_hint(_PROG, 'http', package)} ({exc.name} is missing)")
        return 2
    from ..http._security import is_loopback
    from ._fleet import StoreProblem, connect

    if args.store is None and args.dsn is None and args.hooks_store is None and args.hooks_dsn is None:
        error(
            _PROG,
            "give a fleet store (--store PATH or --dsn DSN), a hook store (--hooks-store PATH or "
            "--hooks-dsn DSN), or both",
        )
        return 2
    if not 0 <= args.port <= 65535:
        error(_PROG, f"--port {args.port}: not a port number")
        return 2
    try:
        token = _token(args)
        if token is None and not is_loopback(args.host):
            raise StoreProblem(
                f"--host {args.host} is not a loopback address: set a token first "
                "(--token-env VAR, with the token in $VAR)",
                2,
            )
        if args.store is not None or args.dsn is not None:
            connect(args.store, args.dsn, _PROG, unreachable=2).close()
        if args.hooks_store is not None and os.path.isdir(args.hooks_store):
            raise StoreProblem(f"--hooks-store {args.hooks_store!r} is a directory, not a hook store", 2)
        if args.hooks_store is not None or args.hooks_dsn is not None:
            _check_hook_store(args.hooks_store, args.hooks_dsn)
    except StoreProblem as exc:
        error(_PROG, exc)
        return exc.code
    try:
        family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it: without it, a response sent in two writes (its
        # headers, then its body) waits out the client's delayed ACK, 40 ms per request.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((args.host.strip("[]"), args.port))
        sock.listen(BACKLOG)
    except OSError as exc:
        error(_PROG, f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
        return 1
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    previous = signal.getsignal(signal.SIGTERM)

    def terminated(signum: int, frame: object) -> None:
        raise _Terminated

    signal.signal(signal.SIGTERM, terminated)
    try:
        import anyio

        anyio.run(_serve, args, token, sock, f"http://{shown}:{port}/", backend=args.backend)
    except (KeyboardInterrupt, _Terminated):
        pass
    except Exception as exc:  # a store that fails while serving: one line, not a traceback
        error(_PROG, exc)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        if sock.fileno() != -1:
            sock.close()
    print(f"{_PROG}: stopped", file=sys.stderr, flush=True)
    return 0


async def _serve(args: argparse.Namespace, token: str | None, sock: socket.socket, url: str) -> None:
    import contextlib

    from ..http import create_app
    from ._fleet import fleet_at

    async with contextlib.AsyncExitStack() as stack:
        fleet = None
        if args.store is not None or args.dsn is not None:
            fleet = await stack.enter_async_context(fleet_at(args.store, args.dsn))
        app = create_app(
            fleet=fleet,
            hooks_store=args.hooks_store,
            hooks_dsn=args.hooks_dsn,
            token=token,
            cors_origins=args.cors_origin,
        )
        print(f"{_PROG}: listening on {url}", flush=True)
        if args.backend == "trio":
            await _hypercorn(app, sock)
        else:
            import uvicorn

            class Server(uvicorn.Server):
                async def shutdown(self, sockets: Any = None) -> None:
                    app.close_streams()  # streams end now, so the graceful wait needs cancel none
                    await super().shutdown(sockets)

            config = uvicorn.Config(
                app,
                lifespan="off",
                log_level="warning",
                timeout_graceful_shutdown=int(GRACE),
                server_header=False,
                backlog=BACKLOG,
            )
            await Server(config).serve(sockets=[sock])


async def _hypercorn(app: Any, sock: socket.socket) -> None:
    import trio
    from hypercorn.config import Config
    from hypercorn.trio import serve

    config = Config()
    config.bind = [f"fd://{sock.detach()}"]  # hypercorn closes the descriptor itself
    config.graceful_timeout = GRACE
    config.backlog = BACKLOG  # hypercorn listens again, with 100 unless told
    config.accesslog = None
    config.loglevel = "WARNING"  # as uvicorn's log_level: no "Running on ..." beside our own line
    config.include_server_header = False

    async def shutdown() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                app.close_streams()  # streams end now, inside hypercorn's graceful wait
                return

    await serve(app, config, shutdown_trigger=shutdown)
