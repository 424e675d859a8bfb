"""What the subcommands share about output: one-line errors, a reader gone, a progress line.

A command's output may go to a pipe whose reader has left (``| head``): the first
write that fails points stdout at ``/dev/null``, so nothing more is printed and the
interpreter's final flush cannot fail again, and the command carries on (its work,
a journal for instance, is not only its output). Errors are one line on stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from typing import Any, TextIO

__all__ = [
    "Progress",
    "dsn",
    "error",
    "file_path",
    "json_line",
    "printable",
    "redacted_dsn",
    "stdout_gone",
]

_SURROGATE = re.compile("[\ud800-\udfff]")


def error(prog: str, message: object) -> None:
    """Print ``prog: message`` as one line on stderr, whatever newlines ``message`` holds."""
    text = " ".join(str(message).splitlines()) or type(message).__name__
    print(f"{prog}: {text}", file=sys.stderr)


def dsn(text: str) -> str:
    """An argparse type for ``--dsn``: a non-empty libpq connection string in valid UTF-8 (a
    byte that is not, the shell's ``$'\\xff'``, would fail inside psycopg with its codec's name)."""
    import argparse

    if not text.strip():
        raise argparse.ArgumentTypeError("an empty DSN names no server")
    if _SURROGATE.search(text):
        raise argparse.ArgumentTypeError("the DSN is not valid UTF-8")
    return text


def file_path(text: str) -> str:
    """An argparse type for a file path: not empty (SQLite reads ``""`` as a private temporary
    database, ``open("")`` as no file), valid UTF-8."""
    import argparse

    if not text:
        raise argparse.ArgumentTypeError("an empty path names no file")
    if _SURROGATE.search(text):
        raise argparse.ArgumentTypeError(f"{text!a} is not valid UTF-8")
    return text


def redacted_dsn(dsn: str) -> str:
    """A PostgreSQL DSN as a message may show it: its password never (psycopg parses it; without
    psycopg, which cannot have connected then, it is named only as "(a DSN)")."""
    try:
        from ..fleet._postgres import redact
    except ImportError:
        return "(a DSN)"
    return redact(dsn)


def json_line(value: Any) -> str:
    """``value`` as one line of JSON that is always valid UTF-8: non-ASCII text stays readable,
    and a lone surrogate (an argument that was not UTF-8, such as ``$'u\\xff'``) is written as a
    ``\\udcff`` escape rather than as the raw byte it stood for."""
    text = json.dumps(value, ensure_ascii=False)
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def printable(text: str) -> str:
    """An id or text as a line people read: control characters and lone surrogates escaped, so
    nothing moves the cursor and the line stays valid UTF-8."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def stdout_gone() -> None:
    """After a ``BrokenPipeError`` on stdout: send the rest of it to ``/dev/null``."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError):
        os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class Progress:
    """A single updating line on a terminal: ``label: done/total (pct%)``, redrawn per percent.

    Draws only when ``stream`` is a terminal (``isatty``), so a redirected stderr stays
    clean. ``clear()`` before printing another line to the same terminal; ``done()``
    at the end leaves the terminal as it was.
    """

    def __init__(self, stream: TextIO, label: str, total: int) -> None:
        self._stream = stream
        self._label = label
        self._total = total
        self._shown = -1
        self._drawn = False
        self.enabled = stream.isatty()

    def update(self, done: int) -> None:
        percent = done * 100 // self._total
        if not self.enabled or percent == self._shown:
            return
        self._shown = percent
        self._write(f"\r{self._label}: {done}/{self._total} ({percent}%)\x1b[K")
        self._drawn = True

    def clear(self) -> None:
        if self._drawn:
            self._write("\r\x1b[K")
            self._drawn = False
            self._shown = -1

    def done(self) -> None:
        self.clear()
        self.enabled = False

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # the terminal went away: progress is not worth failing for
            self.enabled = False
