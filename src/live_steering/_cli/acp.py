"""``live-steering acp``: a steerable ACP agent on stdio, scripted or on a real model.

Without ``--openai-base-url`` it serves the scripted test bed
(``live_steering.acp.scripted``); with it, ``live_steering.acp.chat_completions``
on that OpenAI-compatible endpoint. The SDK and httpx are an optional extra, so
they are imported only when the command runs; without them the command prints
how to install them and exits 2. Stdout belongs to the protocol: nothing else
may ever be printed there (diagnostics go to stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import stat
import sys
from typing import TYPE_CHECKING, Any

from .._extras import install_hint

if TYPE_CHECKING:
    from acp.schema import InitializeResponse, NewSessionResponse

    from ..acp import SteeringAgent, Turn

__all__ = ["register", "run"]


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {value!r}")
    return number


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value!r}")
    return number


def _base_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"must be an http:// or https:// URL, got {value!r}")
    return value


class _OneLineProtocolErrors(logging.Filter):
    """The SDK logs a whole traceback for each protocol error it answers or drops (say, a
    notification for a method nobody serves); a hostile client could fill stderr with them.
    Keep them, as one line each."""

    def filter(self, record: logging.LogRecord) -> bool:
        import acp

        error = record.exc_info[1] if record.exc_info else None
        if error is not None:  # a RequestError with its data; any other (a bad notification's) by name
            detail = f"{error} {error.data or ''}" if isinstance(error, acp.RequestError) else repr(error)
            record.msg, record.args = f"{record.getMessage()}: {detail}".rstrip()[:500], ()
            record.exc_info = record.exc_text = None
        return True


class _NeverBlockingStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """The log lines on stderr, never blocking the agent: a client that pipes the agent's stderr
    and never reads it (the ACP Python SDK's ``spawn_agent_process`` does) fills the pipe after
    some 64 KB, and a blocking write would then stop the agent's event loop for good. A line that
    does not fit the pipe now is dropped (counted, and said once the pipe takes lines again)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self.dropped = 0
        # a pipe only: a terminal's flag would outlive the agent (the shell's own writes then fail)
        with contextlib.suppress(AttributeError, OSError, ValueError):  # not a real file: a capture
            fd = sys.stderr.fileno()
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.set_blocking(fd, False)

    def emit(self, record: logging.LogRecord) -> None:
        line = (self.format(record) + "\n").encode("utf-8", "backslashreplace")
        if self.dropped:
            line = f"live-steering acp: {self.dropped} log line(s) dropped: stderr was full\n".encode() + line
        try:
            fd = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):
            super().emit(record)
            return
        try:
            written = os.write(fd, line)
        except (BlockingIOError, InterruptedError):
            self.dropped += 1
            return
        except OSError:
            return  # stderr closed: nothing to say it on
        self.dropped = 0 if written == len(line) else self.dropped + 1


_ENV_HINT = (
    "A client that spawns the agent must pass the variable in the child's environment: the ACP "
    "Python SDK's spawn_agent_process gives the child only HOME, LOGNAME, PATH, SHELL, TERM and "
    "USER unless it is called with env=."
)


def _refusing_agent(problem: str) -> SteeringAgent:
    """An agent that answers ``initialize`` and ``session/new`` with a JSON-RPC error saying ``problem``."""
    import acp

    from ..acp import SteeringAgent

    data = {"details": f"live-steering acp cannot serve: {problem}"}

    class _Refusing(SteeringAgent):
        async def initialize(self, protocol_version: int, client_capabilities: Any = None,
                             **kwargs: Any) -> InitializeResponse:  # fmt: skip
            raise acp.RequestError.internal_error(data)

        async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
            raise acp.RequestError.internal_error(data)

    async def no_turn(turn: Turn) -> None:
        raise acp.RequestError.internal_error(data)  # pragma: no cover - no session, no turn

    return _Refusing(no_turn)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "acp",
        help="serve a steerable agent over ACP on stdio (scripted, or on an OpenAI-compatible endpoint)",
        description="Run an Agent Client Protocol agent on stdin/stdout that accepts _session/steering "
        "while a turn runs. By default the model is scripted (a test bed); with --openai-base-url and "
        "--model it is a real model behind any OpenAI-compatible Chat Completions endpoint.",
    )
    real = parser.add_argument_group("real model (OpenAI-compatible Chat Completions)")
    real.add_argument(
        "--openai-base-url",
        type=_base_url,
        metavar="URL",
        help="the endpoint's base URL, e.g. http://127.0.0.1:8080/v1 (llama.cpp, vLLM, Ollama, hosted)",
    )
    real.add_argument("--model", metavar="NAME", help="the model name sent with every request")
    real.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="read the API key from this environment variable (never logged); default: no key",
    )
    real.add_argument(
        "--system-prompt",
        metavar="TEXT",
        help="the system message that opens every conversation ('' for none; default: a short "
        "coding-assistant prompt that says corrections arrive as extra user messages)",
    )
    real.add_argument(
        "--timeout",
        type=_positive_float,
        default=120.0,
        help="seconds to connect and between two chunks of a reply (default 120)",
    )
    real.add_argument(
        "--max-requests",
        type=_positive_int,
        default=16,
        help="model requests per turn before it ends with max_turn_requests (default 16)",
    )
    scripted = parser.add_argument_group("scripted model (the default)")
    scripted.add_argument(
        "--steps",
        type=_positive_int,
        default=6,
        help="model requests per turn (default 6, tool calls between)",
    )
    scripted.add_argument(
        "--step-delay",
        type=_positive_float,
        default=0.5,
        help="seconds the scripted model takes per request (default 0.5: about 3 s per turn)",
    )
    scripted.add_argument(
        "--client-paced",
        action="store_true",
        help="each model request waits for the client's _liveSteering/step notification "
        "instead of --step-delay (deterministic demos and tests)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if (args.openai_base_url is None) != (args.model is None):
        print("live-steering acp: --openai-base-url and --model go together", file=sys.stderr)
        return 2
    if args.model is not None and not args.model.strip():
        print("live-steering acp: --model needs a model name", file=sys.stderr)
        return 2
    if args.openai_base_url is not None and args.client_paced:
        print(
            "live-steering acp: --client-paced paces the scripted model; a real model paces itself",
            file=sys.stderr,
        )
        return 2
    try:
        import acp  # noqa: F401  (only to know the extra is installed)
        import httpx  # noqa: F401
    except ImportError:
        print(install_hint("live-steering acp", "acp", "agent-client-protocol and httpx"), file=sys.stderr)
        return 2
    import anyio

    from ..acp import serve_stdio

    logging.basicConfig(
        level=logging.WARNING, format="live-steering acp: %(message)s", handlers=[_NeverBlockingStderr()]
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(_OneLineProtocolErrors())
    agent: SteeringAgent
    if args.openai_base_url is not None:
        from ..acp.chat_completions import (
            DEFAULT_SYSTEM_PROMPT,
            ChatCompletionsAgent,
            ChatCompletionsConfig,
            api_key_from_env,
        )

        api_key = None
        if args.api_key_env:
            try:
                api_key = api_key_from_env(args.api_key_env)
            except KeyError as error:
                # Serve the protocol anyway and refuse it with the reason: a client that spawned
                # the agent reads its stderr rarely (the SDK pipes it away), and an agent that
                # exits before initialize is only "Connection closed" to it.
                problem = f"{error.args[0]} (--api-key-env {args.api_key_env}). {_ENV_HINT}"
                print(f"live-steering acp: {problem}", file=sys.stderr)
                anyio.run(serve_stdio, _refusing_agent(problem), backend="asyncio")
                return 2
        system_prompt = DEFAULT_SYSTEM_PROMPT if args.system_prompt is None else args.system_prompt
        config = ChatCompletionsConfig(
            args.openai_base_url, args.model, api_key=api_key, timeout=args.timeout,
            system_prompt=system_prompt or None,
        )  # fmt: skip
        agent = ChatCompletionsAgent(config, max_requests=args.max_requests)
    else:
        from ..acp.scripted import ScriptedAgent

        agent = ScriptedAgent(steps=args.steps, step_delay=args.step_delay, client_paced=args.client_paced)
    # The SDK is asyncio-only (asyncio streams and tasks), hence the fixed backend.
    anyio.run(serve_stdio, agent, backend="asyncio")
    return 0
