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
import logging
import math
import sys
from typing import Any

from .._extras import install_hint

__all__ = ["register", "run"]


def _positive_float(value: str) -> float:
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {value!r}")
    return number


def _positive_int(value: str) -> int:
    number = int(value)
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
        if isinstance(error, acp.RequestError):
            record.msg, record.args = f"{record.getMessage()}: {error} {error.data or ''}".rstrip(), ()
            record.exc_info = record.exc_text = None
        return True


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
    try:
        import acp  # noqa: F401  (only to know the extra is installed)
        import httpx  # noqa: F401
    except ImportError:
        print(install_hint("live-steering acp", "acp", "agent-client-protocol and httpx"), file=sys.stderr)
        return 2
    import anyio

    from ..acp import SteeringAgent, serve_stdio

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="live-steering acp: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_OneLineProtocolErrors())
    agent: SteeringAgent
    if args.openai_base_url is not None:
        from ..acp.chat_completions import ChatCompletionsAgent, ChatCompletionsConfig, api_key_from_env

        api_key = None
        if args.api_key_env:
            try:
                api_key = api_key_from_env(args.api_key_env)
            except KeyError as error:
                print(f"live-steering acp: {error.args[0]}", file=sys.stderr)
                return 2
        config = ChatCompletionsConfig(
            args.openai_base_url, args.model, api_key=api_key, timeout=args.timeout
        )
        agent = ChatCompletionsAgent(config, max_requests=args.max_requests)
    else:
        from ..acp.scripted import ScriptedAgent

        agent = ScriptedAgent(steps=args.steps, step_delay=args.step_delay, client_paced=args.client_paced)
    # The SDK is asyncio-only (asyncio streams and tasks), hence the fixed backend.
    anyio.run(serve_stdio, agent, backend="asyncio")
    return 0
