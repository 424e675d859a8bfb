"""The hook relay's one admission decision: admit, repeat or refuse one instruction (C7, C26).

The in-memory ``HookSession`` (``_session.py``) and both durable stores
(``_store.py``, on SQLite and PostgreSQL) gather the facts they hold about one
``enqueue`` and call ``decide``; none of them orders a refusal itself. ``decide``
is ``_admission.decide``, the one refusal order of every surface, with the relay's
facts filled in: a hook session is always "running" and "admitting" (no generation
anchors an instruction), the kind is right for a steer and, for a follow-up, only where
the session's vendor has a "do not stop yet" reply (``unsupported-kind`` otherwise), an
ended session is the core's ``closed`` step (an identical repeat still answers with
its state, anything else is ``session-ended``), the per-session queue cap is
``queue-full`` and the command-id limit is ``capacity``.

On the hook command's path: the standard library only (``_admission`` imports
nothing of the package).
"""

from __future__ import annotations

from .. import _admission

__all__ = ["ADMIT", "REASONS", "REPEAT", "SESSION_ENDED", "UNSUPPORTED_KIND", "decide", "detail"]

ADMIT = _admission.ADMIT
REPEAT = _admission.REPEAT
UNSUPPORTED_KIND = _admission.UNSUPPORTED_KIND
#: The relay's name for the core's ``closed`` (pinned, ``InstructionRefusal.SESSION_ENDED``).
SESSION_ENDED = "session-ended"
#: Every refusal ``decide`` gives (the values of ``InstructionRefusal``), in its order.
REASONS = (
    SESSION_ENDED,
    _admission.UNSUPPORTED_KIND,
    _admission.INVALID_INPUT,
    _admission.IDENTITY_CONFLICT,
    _admission.QUEUE_FULL,
    _admission.CAPACITY,
)


def decide(
    *,
    ended: bool,
    known: bool,
    same: bool,
    problem: str | None,
    queue_full: bool,
    full: bool,
    kind_ok: bool = True,
) -> str:
    """``ADMIT``, ``REPEAT`` or a refusal reason of ``REASONS`` for one instruction. Pure, O(1).

    ``ended``: the session's end moment passed (or it was closed); ``known``: the command
    id was accepted before in this session; ``same``: with the same text (an identical
    repeat); ``problem``: why the command id or text is invalid (``None``: valid);
    ``queue_full``: the session's queue holds its cap; ``full``: the session holds its
    command-id limit; ``kind_ok``: the instruction's kind is one the session's vendor
    can deliver (a steer always; a follow-up where the vendor has a follow-up moment).

    >>> decide(ended=False, known=True, same=False, problem="text is blank", queue_full=False, full=False)
    'invalid-input'
    >>> decide(ended=True, known=True, same=True, problem=None, queue_full=False, full=False)
    'repeat'
    >>> decide(ended=True, known=False, same=False, problem="text is blank", queue_full=False, full=False)
    'session-ended'
    """
    answer = _admission.decide(
        closed=ended,
        kind_ok=kind_ok,
        known=known,
        same=same,
        problem=problem,
        queue_full=queue_full,
        full=full,
    )
    return SESSION_ENDED if answer == _admission.CLOSED else answer


def detail(reason: str, problem: str | None, capacity: int) -> str:
    """The human words a refusal carries: the validation problem for ``invalid-input``."""
    if reason == _admission.INVALID_INPUT:
        return problem or "invalid input"
    if reason == _admission.IDENTITY_CONFLICT:
        return "this command id was accepted with other text, another kind or for another agent"
    if reason == SESSION_ENDED:
        return "the session has ended"
    if reason == _admission.UNSUPPORTED_KIND:
        return problem or "this kind of instruction is not accepted"
    if reason == _admission.QUEUE_FULL:
        return f"{capacity} instructions are already queued for this session"
    return "the command-id limit is reached"
