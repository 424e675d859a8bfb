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
    from collections.abc import Callable
    from typing import Any, NoReturn


def _version() -> str:
    """The installed distribution's version (``importlib.metadata``), or ``unknown`` when the
    package runs from a source tree nobody installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("live-steering")
    except PackageNotFoundError:
        return "unknown"


#: Subcommands a person or a script runs often on the relay's store: ``main()`` builds a
#: parser of that one command, so they never import the demo, ACP, the fleet or anyio.
LIGHT = ("instruct", "hooks")


def _version_action() -> type[argparse.Action]:
    import argparse

    class VersionAction(argparse.Action):
        """``--version``: reads the installed version only when asked (importlib.metadata costs
        every other command some 60 ms)."""

        def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
            sys.stdout.write(f"live-steering {_version()}\n")
            parser.exit(0)

    return VersionAction


def _terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``, as argparse reads it, without importing ``shutil``:
    ``$COLUMNS`` when a positive number, else the terminal of ``sys.__stdout__``, else 80."""
    import os

    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
        columns = columns or 80
    return columns


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command's parser; ``only``: a parser with just that one subcommand of ``LIGHT``."""
    import argparse

    class Formatter(argparse.HelpFormatter):
        """argparse's own, its width found without ``shutil``: argparse builds a formatter for
        every ``add_argument`` (to check the metavar), and ``shutil`` (with ``bz2``, ``lzma``,
        ``fnmatch``) would cost every ``instruct`` its import for a help it never prints."""

        def __init__(
            self,
            prog: str,
            indent_increment: int = 2,
            max_help_position: int = 24,
            width: int | None = None,
            **kwargs: Any,
        ) -> None:
            width = _terminal_columns() - 2 if width is None else width  # argparse's own "- 2"
            super().__init__(prog, indent_increment, max_help_position, width, **kwargs)

    class Parser(argparse.ArgumentParser):
        """argparse, but a usage error is one line on stderr (exit 2), like every other CLI error."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("formatter_class", Formatter)
            super().__init__(*args, **kwargs)

        def error(self, message: str) -> NoReturn:
            # an argument that is not UTF-8 (the shell's $'\\xff') is shown escaped, not a crash
            shown = message.encode("utf-8", "backslashreplace").decode("utf-8")
            self.exit(2, f"{self.prog}: error: {shown} (see {self.prog} --help)\n")

    parser = Parser(
        prog="live-steering",
        description="Steer a running agent at its next request boundary, with honest receipts.",
    )
    parser.add_argument("--version", action=_version_action(), nargs=0, help="show the version and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    if only == "instruct":
        from . import instruct

        modules: tuple[Any, ...] = (instruct,)
    elif only == "hooks":
        from . import hooks

        modules = (hooks,)
    else:
        from . import acp, demo, hook, hooks, instruct, receipts, serve, steer, stop

        # in the order ``--help`` lists them
        modules = (demo, receipts, steer, stop, acp, instruct, hook, hooks, serve)
    for module in modules:
        module.register(subparsers)
    parser._subcommands = subparsers.choices  # type: ignore[attr-defined]  # for main's errors
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["hook"] and args[1:2] not in (["-h"], ["--help"]):
        from . import hook

        if argv is None:  # the console script: this process is the hook's, it may end it itself
            hook.exit_fast()
        return hook.main(args[1:])
    parser = build_parser(args[0] if args[:1] and args[0] in LIGHT else None)
    namespace, unknown = parser.parse_known_args(args)
    if unknown:
        # argparse reports them as the top command's; the subcommand's usage is the useful one
        subcommands = parser._subcommands  # type: ignore[attr-defined]
        where = subcommands.get(getattr(namespace, "command", None), parser)
        where.error(f"unrecognized arguments: {' '.join(unknown)}")
    # annotated, not ``typing.cast``: ``typing`` costs every ``instruct`` some milliseconds
    handler: Callable[[argparse.Namespace], int] | None = getattr(namespace, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    if argv is None and getattr(namespace, "command", None) == "instruct":
        from . import instruct

        instruct.LEAVE_OPEN = True
    try:
        code = handler(namespace)
        if argv is None and getattr(namespace, "command", None) == "instruct":
            import os

            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)  # see instruct.LEAVE_OPEN
        return code
    except Exception as exc:
        # A person-facing command fails in one line, never a traceback (exit 2: the same as a
        # usage error or an unusable store). LIVE_STEERING_DEBUG=1 shows the traceback.
        import os

        if os.environ.get("LIVE_STEERING_DEBUG") == "1":
            raise
        from .._errors import LiveSteeringError

        parts = (getattr(namespace, "command", None), getattr(namespace, "hooks_command", None))
        name = " ".join(str(part) for part in parts if part)
        what = str(exc) if isinstance(exc, LiveSteeringError) else f"{type(exc).__name__}: {exc}"
        print(f"live-steering {name}: {what}".replace("\n", " "), file=sys.stderr)
        return 2
