"""``live-steering hook VENDOR [--store PATH | --dsn DSN]``: the command a vendor's hook config runs.

It reads the vendor's hook JSON on stdin and writes the vendor's reply (or nothing)
on stdout; see ``live_steering.hooks._command``. ``main()`` dispatches here before
it builds the argument parser or imports any other subcommand, and this module
parses its two arguments by hand: every hook moment of every tool call pays for
this process's start-up, so nothing it does not need is imported.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

USAGE = "usage: live-steering hook VENDOR [--store PATH | --dsn DSN]\n"
#: Set by the installed hook program and the console script's dispatch (``exit_fast()``), never
#: by an in-process caller of ``main`` (a test), whose interpreter must go on.
_EXIT_FAST = False


def exit_fast() -> None:
    """Let ``main`` end the process itself once the moment is handled (see ``main``)."""
    global _EXIT_FAST
    _EXIT_FAST = True


VENDORS = ("claude-code", "codex", "qwen-code", "vscode", "hermes")


def register(subparsers: object) -> None:
    """Add ``hook`` to ``--help`` (the command itself never goes through argparse)."""
    parser = subparsers.add_parser(  # type: ignore[attr-defined]
        "hook",
        help="the command a vendor's hook config runs: hook JSON on stdin, the vendor's reply on stdout",
        description=(
            "Handle one hook moment: read the vendor's hook JSON on stdin, claim the session's eligible "
            "instructions from the store, write the vendor's reply on stdout. Always exits 0."
        ),
    )
    parser.add_argument("vendor", metavar="VENDOR", help=f"one of {', '.join(VENDORS)}")
    parser.add_argument(
        "--store",
        metavar="PATH",
        help=(
            "the hook store (default: $LIVE_STEERING_STORE_DSN if set, else $LIVE_STEERING_STORE, else XDG)"
        ),
    )
    parser.add_argument(
        "--dsn",
        metavar="DSN",
        help="a PostgreSQL hook store (default: $LIVE_STEERING_STORE_DSN; needs the 'postgres' extra)",
    )


def _option(args: list[str], name: str) -> tuple[bool, str | None]:
    """Take ``--name VALUE`` or ``--name=VALUE`` out of ``args``: (well-formed, value)."""
    if name in args:
        at = args.index(name)
        if at + 1 >= len(args):
            return False, None
        value = args[at + 1]
        del args[at : at + 2]
        return True, value
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            del args[i]
            return True, arg.partition("=")[2]
    return True, None


def _usage(argv: Sequence[str], store: str | None = None, dsn: str | None = None) -> int:
    sys.stderr.write(USAGE)
    from ..hooks._command import record_failure

    shown = " ".join(argv) if argv else "(no arguments)"
    record_failure(
        None, "usage-error", f"live-steering hook {shown[:200]}: {USAGE.strip()}", store_path=store, dsn=dsn
    )
    try:  # read the vendor's JSON to its end, so its write never fails on a closed pipe
        if not sys.stdin.isatty():
            while sys.stdin.buffer.read(1 << 20):
                pass
    except (OSError, ValueError, AttributeError):
        pass
    return 0


def main(argv: Sequence[str]) -> int:
    """Run one hook moment. Exit 0 whatever happens, a usage error included.

    Vendors read exit codes: Claude Code, Qwen Code and the VS Code agent treat 2 as a
    blocking error (the tool call is refused), others as a warning. A hook config with a
    typo must not do that to the agent, so the usage goes to stderr, the failure is recorded
    in the store (``hook.failed {reason: "usage-error"}``; the given ``--store`` if any, else
    the default one), and the exit is 0.
    """
    args = list(argv)
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE)
        return 0
    ok_store, store = _option(args, "--store")
    ok_dsn, dsn = _option(args, "--dsn")
    if not (ok_store and ok_dsn):
        return _usage(argv)
    if store is not None and dsn is not None:
        return _usage(argv, store)  # one store or the other: recorded in the file it names
    if len(args) != 1:
        return _usage(argv, store, dsn)
    from ..hooks._command import run_hook

    code = run_hook(args[0], store_path=store, dsn=dsn, leave_open=True)
    if _EXIT_FAST:
        # Everything is committed and the reply flushed: leave without closing the store (a WAL
        # checkpoint) or finalising the interpreter, both paid by the agent at every moment.
        import os

        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    return code
