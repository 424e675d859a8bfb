"""The ``live-steering`` command: one subcommand per module of this package.

Each subcommand module exposes ``register(subparsers)``, which adds its parser and
sets ``handler`` (``args -> exit code``) as a default. This file only lists them,
imported by name so the type checker follows every one. The CLI is the top layer:
it may import any part of the library, and no library module imports it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import cast

from . import acp, demo, receipts, steer

#: Modules that register a subcommand, in the order ``--help`` lists them.
_SUBCOMMANDS = (demo, receipts, steer, acp)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="live-steering",
        description="Steer a running agent at its next request boundary, with honest receipts.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _SUBCOMMANDS:
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = cast("Callable[[argparse.Namespace], int] | None", getattr(args, "handler", None))
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    return handler(args)
