"""The ``live-steering`` command: one subcommand per module of this package.

Each subcommand module exposes ``register(subparsers)``, which adds its parser and
sets ``handler`` (``args -> exit code``) as a default. This file only lists them,
imported by name so the type checker follows every one. The CLI is the top layer:
it may import any part of the library, and no library module imports it.

``live-steering hook`` is dispatched before anything else is imported: a vendor's
agent runs it at every hook moment, so it must not pay for argparse or for the other
subcommands' imports (anyio, attrs). The other subcommands are imported when the
parser is built.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse


def _version() -> str:
    """The installed distribution's version (``importlib.metadata``), or ``unknown`` when the
    package runs from a source tree nobody installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("live-steering")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    import argparse
    from typing import NoReturn

    from . import acp, demo, hook, hooks, instruct, receipts, serve, steer, stop

    class Parser(argparse.ArgumentParser):
        """argparse, but a usage error is one line on stderr (exit 2), like every other CLI error."""

        def error(self, message: str) -> NoReturn:
            self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    parser = Parser(
        prog="live-steering",
        description="Steer a running agent at its next request boundary, with honest receipts.",
    )
    parser.add_argument("--version", action="version", version=f"live-steering {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    # in the order ``--help`` lists them
    for module in (demo, receipts, steer, stop, acp, instruct, hook, hooks, serve):
        module.register(subparsers)
    parser._subcommands = subparsers.choices  # type: ignore[attr-defined]  # for main's errors
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["hook"] and args[1:2] not in (["-h"], ["--help"]):
        from . import hook

        return hook.main(args[1:])
    from collections.abc import Callable
    from typing import cast

    parser = build_parser()
    namespace, unknown = parser.parse_known_args(args)
    if unknown:
        # argparse reports them as the top command's; the subcommand's usage is the useful one
        subcommands = parser._subcommands  # type: ignore[attr-defined]
        where = subcommands.get(getattr(namespace, "command", None), parser)
        where.error(f"unrecognized arguments: {' '.join(unknown)}")
    handler = cast("Callable[[argparse.Namespace], int] | None", getattr(namespace, "handler", None))
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    return handler(namespace)
