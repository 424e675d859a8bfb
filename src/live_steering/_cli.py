"""The ``live-steering`` command: one subcommand per module.

Each subcommand lives in its own module exposing ``register(subparsers)``, which
adds its parser and sets ``handler`` (``args -> exit code``) as a default. This
file only lists them, so features stay out of each other's way.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import cast

#: Modules that register a subcommand, in the order ``--help`` lists them.
_SUBCOMMANDS = ("live_steering._demo", "live_steering._receipts_cli", "live_steering._acp_cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="live-steering",
        description="Steer a running agent at its next request boundary, with honest receipts.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _SUBCOMMANDS:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = cast("Callable[[argparse.Namespace], int] | None", getattr(args, "handler", None))
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    return handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
