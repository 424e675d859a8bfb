"""``live-steering instruct SESSION TEXT``: send one instruction to a hook-steered session.

Prints the receipt (a line, or with ``--json`` the receipt's wire shape plus ``"seen"``:
whether any hook of SESSION has run against this store; an unseen one, often a typo, is
still queued, with a one-line note on stderr). Exit 0 when accepted or an identical repeat,
1 when refused (the receipt still printed) or, with ``--require-seen``, when no hook of
SESSION has run yet (nothing queued), 2 for usage errors and an unusable store.

It runs on the store alone (``hooks._store``, standard library only): ``main()`` builds a
parser of this command only, and nothing here imports the session machine, anyio,
asyncio or the other subcommands.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

VENDORS = ("claude-code", "codex", "qwen-code", "vscode", "hermes")
#: Set by ``main()`` when this process is the console script's and ends right after the command:
#: the store (its instruction committed, fully synced) is then not closed, which would cost a
#: WAL checkpoint, a second disk flush, for nothing the person waits on.
LEAVE_OPEN = False


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "instruct",
        help="send an instruction to a hook-steered session (from any process)",
        description=(
            "Queue TEXT for the next eligible hook moment of SESSION (its vendor's session id). "
            "Exit 0 when accepted or repeated, 1 when refused, 2 for usage errors."
        ),
    )
    parser.add_argument("session", metavar="SESSION", help="the vendor's session id")
    parser.add_argument(
        "text", metavar="TEXT", help="the instruction; '-' reads it from stdin (one trailing newline removed)"
    )
    parser.add_argument(
        "--id", metavar="ID", help="command id (makes a retry idempotent); default: a new UUID"
    )
    parser.add_argument(
        "--vendor", metavar="V", choices=VENDORS, help=f"the session's vendor: {', '.join(VENDORS)}"
    )
    parser.add_argument(
        "--follow-up",
        action="store_true",
        help="a follow-up: delivered when the agent would stop, through the vendor's 'do not stop yet' "
        "reply (the Stop reply of Claude Code, Codex, Qwen Code); refused unsupported-kind for a "
        "vendor without one",
    )
    parser.add_argument(
        "--agent",
        metavar="AGENT_ID",
        help="for this subagent of the session (its agent_id) instead of the main agent",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="if SESSION has ended, queue TEXT for its next run (delivered once the vendor resumes "
        "it, e.g. at a resumed Hermes session's first model request) instead of refusing session-ended",
    )
    from .hooks import store_options

    store_options(parser)
    parser.add_argument("--json", action="store_true", help="print the receipt as one JSON object")
    parser.add_argument(
        "--require-seen",
        action="store_true",
        help="queue nothing and exit 1 when no hook of SESSION has run against the store yet (a typo?)",
    )
    parser.set_defaults(handler=run)


def _uuid4() -> str:
    """A random UUID (version 4) as ``uuid.uuid4()`` spells it, without importing ``uuid`` (10 ms).

    >>> len(_uuid4()), _uuid4()[14]
    (36, '4')
    """
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def run(args: argparse.Namespace) -> int:
    from ..hooks._admit import SESSION_ENDED
    from ..hooks._open import open_store
    from ..hooks._store import FOLLOW_UP, STEER, StoreError
    from ..hooks._vendors import session_id_problem

    text = args.text
    if text == "-":  # stdin, less one trailing newline (what `echo` and heredocs add)
        text = sys.stdin.read()
        text = text[:-2] if text.endswith("\r\n") else text.removesuffix("\n")
    kind = FOLLOW_UP if args.follow_up else STEER
    if args.store is not None and args.dsn is None:
        folder = os.path.dirname(os.path.abspath(args.store))
        if not os.path.isdir(folder):  # a typo: the hooks' store is never in a folder that does not exist
            shown = folder if folder.isprintable() else ascii(folder)
            print(
                f"live-steering instruct: --store: there is no folder {shown}; nothing was queued",
                file=sys.stderr,
            )
            return 2
    try:
        store = open_store(args.store, dsn=args.dsn)
        try:
            # an id outside the id rules is the ValueError enqueue raises below, before any query
            seen = session_id_problem(args.session) is not None or store.seen(args.session)
            if args.require_seen and not seen:
                print(
                    f"live-steering instruct: no hook of session {args.session!r} has run against this "
                    "store; nothing was queued (see `live-steering hooks sessions`)",
                    file=sys.stderr,
                )
                return 1
            receipt = store.enqueue(
                args.session,
                args.id if args.id is not None else _uuid4(),
                text,
                vendor=args.vendor,
                kind=kind,
                agent_id=args.agent,
                resume=args.resume,
            )
        finally:
            if not (LEAVE_OPEN and store.__class__.__name__ == "SqliteHookStore"):
                store.close()
    except (StoreError, ValueError) as exc:
        print(f"live-steering instruct: {exc}", file=sys.stderr)
        return 2
    wire = receipt.to_dict()
    wire["seen"] = seen
    if receipt.repeated:
        wire["repeated"] = True
    if receipt.detail is not None and not receipt.accepted:
        wire["detail"] = receipt.detail
    if receipt.accepted and not seen and not receipt.repeated:
        print(
            f"note: no hook of session {args.session!r} has run against this store yet; it waits for one "
            "(a typo? see `live-steering hooks sessions`; --require-seen refuses)",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(wire))
        if receipt.reason == SESSION_ENDED:  # stdout stays one JSON object; the hint goes to stderr
            print("hint: --resume queues it for the session's next run", file=sys.stderr)
    elif receipt.accepted:
        state = "repeated, now" if receipt.repeated else "accepted,"
        disposition = receipt.disposition or "?"
        print(f"{_shown(receipt.command_id)}: {state} {disposition}")
    else:
        print(f"{_shown(receipt.command_id)}: refused {receipt.reason}: {_shown(str(receipt.detail))}")
        if receipt.reason == SESSION_ENDED:
            print("hint: --resume queues it for the session's next run", file=sys.stderr)
    return 0 if receipt.accepted else 1


def _shown(text: str) -> str:
    """An id or detail as a line people read, as ``steer`` and ``hooks events`` print them: control
    characters (a terminal escape in an ``--id``) and lone surrogates escaped. ``_output.printable``
    written out: that module imports ``typing``, which ``instruct`` does not load."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")
