"""``live-steering instruct SESSION TEXT``: send one instruction to a hook-steered session.

Prints the receipt (a line, or with ``--json`` the receipt's wire shape plus ``"seen"``:
whether any hook of SESSION has run against this store; an unseen one, often a typo, is
still queued, with a one-line note on stderr). Exit 0 when accepted or an identical repeat,
1 when refused (the receipt still printed) or, with ``--require-seen``, when no hook of
SESSION has run yet (nothing queued), 2 for usage errors and an unusable store.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

VENDORS = ("claude-code", "codex", "qwen-code", "vscode", "hermes")


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
    from .hooks import store_options

    store_options(parser)
    parser.add_argument("--json", action="store_true", help="print the receipt as one JSON object")
    parser.add_argument(
        "--require-seen",
        action="store_true",
        help="queue nothing and exit 1 when no hook of SESSION has run against the store yet (a typo?)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..hooks._open import open_store
    from ..hooks._relay import instruct
    from ..hooks._store import StoreError
    from ..hooks._vendors import session_id_problem

    text = args.text
    if text == "-":  # stdin, less one trailing newline (what `echo` and heredocs add)
        text = sys.stdin.read()
        text = text[:-2] if text.endswith("\r\n") else text.removesuffix("\n")
    try:
        store = open_store(args.store, dsn=args.dsn)
        try:
            # an id outside the id rules is the ValueError instruct raises below, before any query
            seen = session_id_problem(args.session) is not None or store.seen(args.session)
            if args.require_seen and not seen:
                print(
                    f"live-steering instruct: no hook of session {args.session!r} has run against this "
                    "store; nothing was queued (see `live-steering hooks sessions`)",
                    file=sys.stderr,
                )
                return 1
            receipt = instruct(args.session, text, id=args.id, vendor=args.vendor, store=store)
        finally:
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
    elif receipt.accepted:
        state = "repeated, now" if receipt.repeated else "accepted,"
        disposition = receipt.disposition.value if receipt.disposition is not None else "?"
        print(f"{receipt.command_id}: {state} {disposition}")
    else:
        print(f"{receipt.command_id}: refused {receipt.reason}: {receipt.detail}")
    return 0 if receipt.accepted else 1
