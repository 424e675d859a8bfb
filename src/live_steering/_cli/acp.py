"""``live-steering acp``: the scripted steering agent over ACP on stdio.

The SDK is an optional extra, so it is imported only when the command runs;
without it the command prints how to install it and exits 2. Stdout belongs to
the protocol: nothing else may ever be printed there.
"""

from __future__ import annotations

import argparse
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


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "acp",
        help="serve a scripted steerable agent over ACP on stdio",
        description="Run an Agent Client Protocol agent on stdin/stdout that drives the reference loop "
        "with a scripted model, and accepts _session/steering while a turn runs.",
    )
    parser.add_argument(
        "--steps",
        type=_positive_int,
        default=6,
        help="model requests per turn (default 6, tool calls between)",
    )
    parser.add_argument(
        "--step-delay",
        type=_positive_float,
        default=0.5,
        help="seconds the scripted model takes per request (default 0.5: about 3 s per turn)",
    )
    parser.add_argument(
        "--client-paced",
        action="store_true",
        help="each model request waits for the client's _liveSteering/step notification "
        "instead of --step-delay (deterministic demos and tests)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        import acp  # noqa: F401  (only to know the extra is installed)
    except ImportError:
        print(install_hint("live-steering acp", "acp", "agent-client-protocol"), file=sys.stderr)
        return 2
    import anyio

    from ..acp import AgentConfig, serve_stdio

    config = AgentConfig(steps=args.steps, step_delay=args.step_delay, client_paced=args.client_paced)
    # The SDK is asyncio-only (asyncio streams and tasks), hence the fixed backend.
    anyio.run(serve_stdio, config, backend="asyncio")
    return 0
