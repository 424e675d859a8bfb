"""The rules for ids and texts, in one place: input ids, engine and session ids, command ids, texts.

Every wing validates with these functions (the runtime's core, the hook session
machine, the ACP adapter), so an id the runtime refuses is refused everywhere, for
the same reason and with the same words (C7, C24). The rules exist because ids
and texts ride in events, receipts, journals and vendors' replies, all written as
UTF-8: an id is 1-128 characters, neither it nor a text holds a NUL or a lone
surrogate, a text is not blank and not over its limit.

This module imports nothing from the package and decides nothing else: it is the
bottom layer, below ``_types`` and ``_core``. The ``*_problem`` functions return a
short description of what is wrong (``None`` when nothing is), for refusal
receipts; ``checked_id`` raises, for ids a caller chooses (``TypeError`` for a
non-string, ``ValueError`` for a bad one).
"""

from __future__ import annotations

# The hook command imports this module on its hot path, where even ``typing`` costs:
# with postponed annotations, ``Final`` is needed by the type checker only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = [
    "EVENT_ID_CHARS",
    "MAX_ID_CHARS",
    "checked_id",
    "event_safe",
    "id_problem",
    "optional_id",
    "origin_problem",
    "input_problem",
    "plain_str",
    "utf8_encodable",
]

#: The longest id (input, generation, session, command, ACP steer id) admitted (C7).
MAX_ID_CHARS: Final = 128
#: Refusal events carry at most this much of a (possibly hostile) id, so that a bounded
#: event log stays bounded in bytes too. The receipt carries the full id.
EVENT_ID_CHARS: Final = 256


def plain_str(value: object, name: str | None = None) -> str:
    """Return ``value`` as an exact ``str``; refuse anything that is not a string.

    A ``str`` subclass may override ``__eq__``/``__hash__``; identity decisions
    must never run through user code, so subclasses are copied to a plain ``str``.
    ``name`` names the argument in the ``TypeError``.

    >>> plain_str("a")
    'a'
    """
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if name is None:
        raise TypeError(f"expected str, got {type(value).__name__}")
    raise TypeError(f"{name} must be a str, got {type(value).__name__}")


def utf8_encodable(value: str) -> bool:
    """True when ``value`` can be stored as UTF-8 (no lone surrogate). O(n), fast for ASCII."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def id_problem(value: str, what: str = "id") -> str | None:
    """What is wrong with an id (``what`` names it in the answer), or ``None``. O(len).

    >>> id_problem("fix-1") is None
    True
    >>> id_problem("")
    'id must be 1-128 characters'
    """
    if not 1 <= len(value) <= MAX_ID_CHARS:
        return f"{what} must be 1-{MAX_ID_CHARS} characters"
    if "\x00" in value:
        return "NUL character"
    if not utf8_encodable(value):
        return "not encodable as UTF-8"
    return None


def input_problem(id_: str, text: str, max_chars: int, what: str = "id") -> str | None:
    """What is wrong with an id and its text together, or ``None``; the order of C7. O(len).

    Lengths first, then NUL, then UTF-8, so the answer names the cheapest problem.

    >>> input_problem("a", "", 100)
    'text is blank'
    """
    if not 1 <= len(id_) <= MAX_ID_CHARS:
        return f"{what} must be 1-{MAX_ID_CHARS} characters"
    if len(text) > max_chars:
        return f"text is over {max_chars} characters"
    if not text or text.isspace():
        return "text is blank"
    if "\x00" in id_ or "\x00" in text:
        return "NUL character"
    # ASCII, the common case, is always encodable: skip two calls.
    if not ((id_.isascii() and text.isascii()) or (utf8_encodable(id_) and utf8_encodable(text))):
        return "not encodable as UTF-8"
    return None


def checked_id(value: object, name: str) -> str:
    """An id a caller chooses (a session or generation id), checked by the rules of input ids.

    These ids ride in every event and in the receipt journal, so they must be as
    clean as an admitted input id. Returns it as a plain ``str``; ``TypeError``
    for a non-string, ``ValueError`` for a bad one (``name`` names it).

    >>> checked_id("g1", "generation_id")
    'g1'
    """
    value = plain_str(value, name)
    problem = id_problem(value, name)
    if problem is not None:
        if value and len(value) <= MAX_ID_CHARS:
            raise ValueError(f"{name} must be valid UTF-8 text without NUL, got {value!r}")
        raise ValueError(f"{name} must be a non-empty str of at most {MAX_ID_CHARS} characters")
    return value


def optional_id(value: object, name: str) -> str | None:
    """A read's optional filter on an id (``None``: no filter), checked as ``checked_id`` checks
    an id: a caller's type error is a ``TypeError`` and an id nothing can have a ``ValueError``,
    before any store is read, instead of an empty answer or an encoding error from the store."""
    return None if value is None else checked_id(value, name)


def event_safe(value: str) -> str:
    """A refused (possibly hostile) id as events carry it: bounded, and valid UTF-8.

    At most ``EVENT_ID_CHARS`` characters; lone surrogates become ``\\udcxx``
    escapes, so a host writing events as UTF-8 text never fails on one.
    """
    value = value if len(value) <= EVENT_ID_CHARS else value[:EVENT_ID_CHARS]
    if utf8_encodable(value):
        return value
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def origin_problem(origin: object) -> str | None:
    """Why ``origin`` is not a browser origin CORS can allow, or ``None``: ``scheme://host[:port]``
    as a browser sends it in ``Origin`` (``https://app.example``, ``chrome-extension://ID``,
    ``tauri://localhost``; no path, query or user), or ``*``."""
    if not isinstance(origin, str):
        return f"an origin is a string, got {type(origin).__name__}"
    if origin == "*":
        return None
    import urllib.parse  # here, not at the top: the hook command imports this module (ipaddress, 2 ms)

    try:
        parts = urllib.parse.urlsplit(origin)
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        parts = None
    if (
        parts is None
        or not parts.scheme
        or not parts.netloc
        or not parts.hostname
        or parts.path
        or parts.query
        or parts.fragment
        or parts.username is not None
        or not origin.isprintable()
    ):
        shown = origin if origin.isprintable() else ascii(origin)
        return f"{shown!r} is not an origin: scheme://host[:port], as a browser sends it, e.g. https://app.example"
    return None
