"""The one refusal order (C7): what a submission is answered with, decided in one place.

Every surface that takes input answers it through ``decide``: the runtime's core
(``_core.SteeringCore.decide`` applies it inline on the path of an admission and of a
repeat, and calls it for everything else), the fleet store when no live owner holds a
session (``fleet/_store.py``; a live owner answers through its runtime's core), the hook
relay's in-memory session and its durable stores (through ``hooks/_admit.py``), and ACP's
idle steers (``acp/_session.py``). So the same input history gets the same reason
everywhere: a surface gathers the facts it holds (is the id known, does the content
match, what does validation say, is a generation running) and never orders them itself.
``tests/test_admission_parity.py`` and ``tests/test_hooks_parity.py`` run tables of
histories through every surface, and ``tests/test_architecture.py`` checks that no wing
writes a refusal reason of its own.

The order, first match wins:

1. ``closed``: the runtime (a hook session: the session) is closed; an identical repeat
   still answers with its receipt (C1, C10);
2. ``unavailable``: boundary delivery is off (C1);
3. ``unsupported-kind``: not a kind the capability takes (C7);
4. an identical repeat of a known identity answers with its current receipt (C10);
5. ``invalid-input``: the id and text rules of ``_validate.input_problem`` (C7);
6. ``identity-conflict``: the id is known with other content or another anchor (C10);
7. ``stale-generation``: no generation runs, or the anchor is not the running one;
8. ``finishing``: the running generation closed admission (C16);
9. ``queue-full``: the hook relay's per-session queue holds its 20 (C26);
10. ``capacity``: the identity table is full (C11).

This module is the bottom layer: it imports only the standard library (a surface
passes ``_validate``'s answer in), so that a hook command could import it on its hot
path, where even ``typing`` costs; it holds no state and does nothing but answer.
"""

from __future__ import annotations

__all__ = [
    "ADMIT",
    "CAPACITY",
    "CLOSED",
    "DETAILS",
    "FINISHING",
    "IDENTITY_CONFLICT",
    "INVALID_INPUT",
    "ORDER",
    "QUEUE_FULL",
    "REFUSALS",
    "REPEAT",
    "STALE_GENERATION",
    "UNAVAILABLE",
    "UNSUPPORTED_KIND",
    "content_digest",
    "decide",
]

#: The two answers that are not refusals.
ADMIT = "admit"
REPEAT = "repeat"

# The pinned refusal reasons (C7, and the hook relay's ``queue-full`` of C26): the same
# strings as ``_types.RefusalReason`` (``tests/test_admission_parity.py`` checks them).
CLOSED = "closed"
UNAVAILABLE = "unavailable"
UNSUPPORTED_KIND = "unsupported-kind"
INVALID_INPUT = "invalid-input"
IDENTITY_CONFLICT = "identity-conflict"
STALE_GENERATION = "stale-generation"
FINISHING = "finishing"
QUEUE_FULL = "queue-full"
CAPACITY = "capacity"

#: Every answer ``decide`` gives, in the order it tests for them.
ORDER = (
    CLOSED,
    UNAVAILABLE,
    UNSUPPORTED_KIND,
    REPEAT,
    INVALID_INPUT,
    IDENTITY_CONFLICT,
    STALE_GENERATION,
    FINISHING,
    QUEUE_FULL,
    CAPACITY,
    ADMIT,
)
REFUSALS = frozenset(ORDER) - {REPEAT, ADMIT}

#: The default words a refusal event's ``detail`` carries (a wing may name its own nouns:
#: a detail explains, the reason decides). ``invalid-input`` carries the validation problem.
DETAILS = {
    CLOSED: "the runtime is closed",
    UNAVAILABLE: "request-boundary delivery is off",
    UNSUPPORTED_KIND: "only 'steer' and 'follow_up' are accepted",
    IDENTITY_CONFLICT: "this id was accepted with other content or another generation",
    STALE_GENERATION: "not the running generation",
    FINISHING: "the generation has closed admission",
    QUEUE_FULL: "the session's queue is full",
    CAPACITY: "the identity limit is reached",
}


def decide(
    *,
    closed: bool = False,
    available: bool = True,
    kind_ok: bool = True,
    known: bool = False,
    same: bool = False,
    problem: str | None = None,
    running: bool = True,
    admitting: bool = True,
    queue_full: bool = False,
    full: bool = False,
) -> str:
    """The answer to one submission from the facts a surface holds: ``ADMIT``, ``REPEAT`` or
    a refusal reason. Pure and O(1).

    ``known``: the id is a retained identity; ``same``: with the same kind, text and
    anchor (an identical repeat, C10); ``problem``: what ``_validate.input_problem`` says
    of the id and text (``None``: valid); ``running``: the anchor is the running
    generation; ``admitting``: that generation's admission is open; ``queue_full``: the
    hook relay's queue is at its cap; ``full``: the identity table is at its limit.

    >>> decide(known=True, problem="text is blank")
    'invalid-input'
    >>> decide(known=True, same=True, closed=True)
    'repeat'
    """
    if closed:
        return REPEAT if same else CLOSED
    if not available:
        return UNAVAILABLE
    if not kind_ok:
        return UNSUPPORTED_KIND
    if same:
        return REPEAT
    if problem is not None:
        return INVALID_INPUT
    if known:
        return IDENTITY_CONFLICT
    if not running:
        return STALE_GENERATION
    if not admitting:
        return FINISHING
    if queue_full:
        return QUEUE_FULL
    if full:
        return CAPACITY
    return ADMIT


def content_digest(kind: str, text: str) -> str:
    """The digest an identity's content is compared by where the text is not kept (the
    receipt journal, the fleet store): SHA-256 of kind, NUL, text, as hex. O(len). A lone
    surrogate (an input refused ``invalid-input``, whose digest a repeat may still compute)
    is digested as it stands, never raised on."""
    import hashlib  # here: the hook command's path never digests

    return hashlib.sha256(f"{kind}\x00{text}".encode("utf-8", "surrogatepass")).hexdigest()
