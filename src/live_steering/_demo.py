"""``live-steering demo``: placeholder until the demo lands (being written now)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("demo", help="run the reference loop through the interesting cases")
    parser.add_argument("--json", action="store_true", help="print the event stream, one event per line")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    return 0
