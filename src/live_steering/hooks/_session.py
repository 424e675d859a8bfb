"""Hook-context delivery: steering agents whose only surface is a hook reply (C26).

Theory of operation
-------------------
Some coding agents (Claude Code, Codex, Qwen Code, the VS Code agent, Hermes) can
only be steered through the reply a hook handler returns: certain hook moments
accept a piece of extra context that the runtime adds to what the model reads on
its next request. This module owns, per live session, a bounded FIFO of accepted
instructions and decides, at each hook moment, whether they ride on its reply.

It is sans-IO: no awaits, no I/O, no clock it was not given. A hook handler (a
command hook, an HTTP hook, a daemon) calls ``HookSession.enqueue`` when a host
sends an instruction and ``HookSession.on_hook`` at every hook moment, then
writes the returned reply itself.

Invariants (``HookSession._check()`` asserts them after any step):

* At most ``capacity`` (20) instructions are queued, in arrival order.
* Every accepted instruction is QUEUED, DELIVERED or DROPPED, moves only
  QUEUED -> DELIVERED | DROPPED, and is delivered or dropped at most once.
* A reply never carries more than the vendor's cap of characters; instructions
  that do not fit stay queued, in order, for the next eligible moment.
* Only an eligible moment carries instructions: one the vendor documents as
  context-accepting, whose context the runtime really consumes, that is not a
  held loop (permission, elicitation: their replies carry decisions), and whose
  reply would otherwise be empty.
* Every delivery and every drop is one event linked to the command that caused
  it. Refusals change nothing but the refusal counter and the event stream.
* Which refusal an ``enqueue`` gets is ``_admit.decide`` on this session's facts: the
  one refusal order, the same as the relay's stores and the runtime's core (C7).

It must never redact the hook reply (the vendor must read the real text), and
never synthesise a delivery moment the vendor does not have.
"""

from __future__ import annotations

import enum
import time
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import attrs

from .._errors import InvariantError
from .._events import DEFAULT_LOG_SIZE, DEFAULT_SUBSCRIPTION_BUFFER, Event, EventHub, Listener, Subscription
from .._types import Disposition
from .._validate import checked_id, event_safe, plain_str
from . import _admit, _vendors

__all__ = [
    "DEFAULT_QUEUE_CAPACITY",
    "PROFILES",
    "REDACTED",
    "SEPARATOR",
    "EnqueueResult",
    "HookOutcome",
    "HookSession",
    "HookSessionStatistics",
    "InstructionReceipt",
    "InstructionRefusal",
    "InstructionState",
    "ReplyShape",
    "SkipReason",
    "Vendor",
    "VendorProfile",
]

DEFAULT_QUEUE_CAPACITY: Final = 20
DEFAULT_IDENTITY_LIMIT: Final = 2_000
#: Longest instruction admitted for an uncapped vendor, as C7 for steers.
DEFAULT_MAX_TEXT_CHARS: Final = _vendors.DEFAULT_MAX_TEXT_CHARS
MAX_ID_CHARS: Final = _vendors.MAX_ID_CHARS
#: Pending instructions are joined with a blank line, in arrival order.
SEPARATOR: Final = _vendors.SEPARATOR
#: What redacted text reads as on the event stream.
REDACTED: Final = "[redacted]"
DROP_SESSION_ENDED: Final = "session-ended"
DROP_CLOSED: Final = "closed"


class Vendor(enum.StrEnum):
    """The agents of the adoption map that take steering through a hook reply."""

    CLAUDE_CODE = "claude-code"
    CODEX = "codex"
    QWEN_CODE = "qwen-code"
    VSCODE = "vscode"
    HERMES = "hermes"


class ReplyShape(enum.Enum):
    """How a vendor's hook reply carries extra context."""

    HOOK_SPECIFIC_OUTPUT = "hookSpecificOutput"
    """``{"hookSpecificOutput": {"hookEventName": <moment>, "additionalContext": <text>}}``."""
    CONTEXT = "context"
    """``{"context": <text>}`` (Hermes plugin hooks)."""


class SkipReason(enum.StrEnum):
    """Why a hook moment carried no instructions (``HookOutcome.skipped``)."""

    NOTHING_QUEUED = _vendors.NOTHING_QUEUED
    """The moment was eligible but the queue was empty."""
    HELD_LOOP = _vendors.HELD_LOOP
    """A permission or elicitation loop: its reply carries a decision, never steering."""
    REPLY_NOT_EMPTY = _vendors.REPLY_NOT_EMPTY
    """The handler's reply already says something (a decision, its own context)."""
    CONTEXT_NOT_CONSUMED = _vendors.CONTEXT_NOT_CONSUMED
    """The vendor parses context here but nothing reads it: not a delivery surface."""
    NO_CONTEXT_SURFACE = _vendors.NO_CONTEXT_SURFACE
    """The moment has no documented context surface on this vendor (or is unknown)."""
    SESSION_ENDED = _vendors.SESSION_ENDED
    """The session ended (or was closed); its queue was dropped."""


class InstructionRefusal(enum.StrEnum):
    """Why ``enqueue`` refused an instruction. Pinned strings, like C7's reasons."""

    INVALID_INPUT = "invalid-input"
    """Command id not 1-128 characters; text blank, over the limit, with NUL or not UTF-8."""
    QUEUE_FULL = "queue-full"
    """The session already holds ``capacity`` (20) undelivered instructions."""
    IDENTITY_CONFLICT = "identity-conflict"
    """The command id was accepted before with other text."""
    CAPACITY = "capacity"
    """The session retains ``identity_limit`` command ids already; none is evicted."""
    SESSION_ENDED = "session-ended"
    """The session's end moment has passed, or it was closed."""
    UNSUPPORTED_KIND = "unsupported-kind"
    """A follow-up for a vendor with no "do not stop yet" reply (or no vendor known to have one)."""


class InstructionState(enum.Enum):
    """Lifecycle of an accepted instruction; ``disposition`` is what hosts see."""

    QUEUED = "queued"
    DELIVERED = "delivered"
    DROPPED = "dropped"

    @property
    def disposition(self) -> Disposition:
        return _DISPOSITION_OF[self]


_DISPOSITION_OF: Final = {
    InstructionState.QUEUED: Disposition.QUEUED,
    InstructionState.DELIVERED: Disposition.APPLIED,
    InstructionState.DROPPED: Disposition.HELD,
}


@attrs.frozen
class VendorProfile:
    """What one vendor's hooks offer for steering, as data.

    >>> PROFILES[Vendor.CLAUDE_CODE].cap
    10000
    >>> PROFILES[Vendor.VSCODE].session_end_moment is None
    True
    """

    vendor: Vendor
    """The vendor, also the ``x.{vendor}`` namespace of its instruct verb."""
    title: str
    """Human name."""
    context_moments: frozenset[str]
    """Moments whose reply accepts context that the runtime really consumes: the eligible ones."""
    held_moments: frozenset[str] = frozenset()
    """Held loops whose replies carry a decision (permission, elicitation). Never eligible."""
    unconsumed_moments: frozenset[str] = frozenset()
    """Moments that parse a context field nothing reads. Never eligible."""
    cap: int | None = None
    """Most characters one reply's context may carry; ``None`` when no cap is documented."""
    session_end_moment: str | None = None
    """The moment at which a session really ends and its queue is dropped; ``None`` if none exists."""
    reply_shape: ReplyShape = ReplyShape.HOOK_SPECIFIC_OUTPUT
    """How the reply carries context."""
    notes: str = ""
    """Where the data comes from and what it does not cover."""
    cap_counts_utf16: bool = False
    """True when the cap counts UTF-16 code units (JavaScript string length), as Claude Code's does."""
    cap_counts_utf8: bool = False
    """True when the cap counts UTF-8 bytes, as Codex's does."""

    def __attrs_post_init__(self) -> None:
        overlap = self.context_moments & (self.held_moments | self.unconsumed_moments)
        if overlap:
            raise ValueError(f"{self.vendor}: moments both eligible and not: {sorted(overlap)}")
        if self.session_end_moment in self.context_moments:
            raise ValueError(f"{self.vendor}: the session-end moment cannot carry context")
        if self.cap is not None and self.cap < 1:
            raise ValueError(f"{self.vendor}: cap must be positive")

    def ineligibility(self, moment: str, *, reply_would_be_empty: bool) -> SkipReason | None:
        """Why ``moment`` cannot carry instructions, or ``None`` when it can. O(1).

        >>> profile = PROFILES[Vendor.CLAUDE_CODE]
        >>> profile.ineligibility("PostToolUse", reply_would_be_empty=True) is None
        True
        >>> profile.ineligibility("PermissionRequest", reply_would_be_empty=True)
        <SkipReason.HELD_LOOP: 'held-loop'>
        """
        skip = _vendors.ineligibility(
            self.context_moments, self.held_moments, self.unconsumed_moments, moment, reply_would_be_empty
        )
        return None if skip is None else SkipReason(skip)

    def measure(self, text: str) -> int:
        """The length of ``text`` as the vendor's cap counts it (UTF-16 code units for Claude Code)."""
        return _vendors.measure(text, self.cap_counts_utf16, self.cap_counts_utf8)

    def build_reply(self, moment: str, context: str) -> dict[str, Any]:
        """The vendor's JSON reply carrying ``context`` at ``moment`` (never redacted).

        >>> PROFILES[Vendor.CLAUDE_CODE].build_reply("Stop", "Use the corrected path")
        {'hookSpecificOutput': {'hookEventName': 'Stop', 'additionalContext': 'Use the corrected path'}}
        >>> PROFILES[Vendor.HERMES].build_reply("pre_llm_call", "Use the corrected path")
        {'context': 'Use the corrected path'}
        """
        return _vendors.build_reply(self.reply_shape.value, moment, context)


def _profile(name: str, notes: str) -> VendorProfile:
    """A vendor's profile, built from the one table of facts in ``_vendors.py``."""
    facts = _vendors.FACTS[name]
    return VendorProfile(
        vendor=Vendor(name),
        title=facts.title,
        context_moments=facts.context_moments,
        held_moments=facts.held_moments,
        unconsumed_moments=facts.unconsumed_moments,
        cap=facts.cap,
        session_end_moment=facts.session_end_moment,
        reply_shape=ReplyShape(facts.reply_shape),
        notes=notes,
        cap_counts_utf16=facts.cap_counts_utf16,
        cap_counts_utf8=facts.cap_counts_utf8,
    )


_CLAUDE_CODE = _profile(
    "claude-code",
    "hookSpecificOutput.additionalContext on eleven moments (the SDK's hook output types); a 10,000 "
    "UTF-16-code-unit cap; drop rides SessionEnd.",
)
_CODEX = _profile(
    "codex",
    "additionalContext on five moments; no documented cap. No SessionEnd hook: nothing drops, "
    "the queue lives as long as this object, a live session delivers at latest on its next "
    "UserPromptSubmit.",
)
_QWEN_CODE = _profile(
    "qwen-code",
    "additionalContext on seven moments; no documented cap; async systemMessage unused; "
    "drop rides SessionEnd.",
)
_VSCODE = _profile(
    "vscode",
    "additionalContext on five moments; PreCompact has no output surface here. No SessionEnd on this "
    "hook target: same queue posture as Codex. A held PreToolUse (the opt-in permission gate) carries "
    "the decision: call on_hook with reply_would_be_empty=False.",
)
_HERMES = _profile(
    "hermes",
    "The pre_llm_call reply's context (joined into the user message at turn start) is the one "
    "context the runtime consumes; on_session_end fires per turn, on_session_finalize is the real end.",
)

#: Every vendor the relay knows, keyed by vendor. Read-only.
PROFILES: Final[Mapping[Vendor, VendorProfile]] = types.MappingProxyType(
    {p.vendor: p for p in (_CLAUDE_CODE, _CODEX, _QWEN_CODE, _VSCODE, _HERMES)}
)


@attrs.frozen
class InstructionReceipt:
    """The answer to one ``enqueue``, or the current state of an instruction.

    >>> InstructionReceipt(True, "cmd-1", "s1", Disposition.QUEUED).to_dict()
    {'accepted': True, 'commandId': 'cmd-1', 'sessionId': 's1', 'disposition': 'queued'}
    """

    accepted: bool
    """True when the instruction was admitted (now, or by the command this one repeats)."""
    command_id: str
    """The id of the command that carried the instruction (the audit cause)."""
    session_id: str
    """The session whose queue it is in."""
    disposition: Disposition | None
    """``queued``; ``applied`` once written into a hook reply; ``held`` once dropped; ``None`` if refused."""
    reason: str | None = None
    """An ``InstructionRefusal`` value, or the drop reason of a held instruction."""
    detail: str | None = None
    """A human explanation of a refusal."""
    repeated: bool = False
    """True when this answers an identical repeat of an accepted command (nothing admitted)."""

    def to_dict(self) -> dict[str, Any]:
        """The wire shape ``{"accepted", "commandId", "sessionId", "disposition", "reason"?}``."""
        wire: dict[str, Any] = {
            "accepted": self.accepted,
            "commandId": self.command_id,
            "sessionId": self.session_id,
            "disposition": None if self.disposition is None else self.disposition.value,
        }
        if self.reason is not None:
            wire["reason"] = str(self.reason)
        return wire


EnqueueResult = InstructionReceipt
"""What ``HookSession.enqueue`` returns (an ``InstructionReceipt``)."""


@attrs.frozen
class HookOutcome:
    """What to do at one hook moment (``HookSession.on_hook``)."""

    moment: str
    """The hook moment it answers."""
    reply: dict[str, Any] | None
    """The JSON reply carrying the instructions; ``None``: reply as you would have anyway."""
    delivered: tuple[str, ...] = ()
    """Command ids written into ``reply``, in arrival order."""
    dropped: tuple[str, ...] = ()
    """Command ids dropped at this moment (the session ended)."""
    skipped: SkipReason | None = None
    """Why nothing was attached, when nothing was."""
    pending: int = 0
    """Instructions still queued afterwards (those that did not fit under the cap, say)."""


@attrs.frozen
class HookSessionStatistics:
    """A snapshot of one session's counters; tests assert on this, not on private fields."""

    pending: int
    capacity: int
    accepted: int
    delivered: int
    dropped: int
    refused: int
    repeated: int
    replies: int
    """Hook replies that carried at least one instruction."""
    events_emitted: int
    ended: bool


@attrs.define(eq=False)
class _Instruction:
    command_id: str
    text: str
    arrival: int
    enqueued_at: float
    state: InstructionState = InstructionState.QUEUED
    reason: str | None = None

    def receipt(self, session_id: str, *, repeated: bool = False) -> InstructionReceipt:
        return InstructionReceipt(
            True, self.command_id, session_id, self.state.disposition, self.reason, repeated=repeated
        )


class HookSession:
    """One live session's instruction queue for one vendor. Sans-IO; not thread-safe.

    >>> now = [0.0]
    >>> session = HookSession(Vendor.CLAUDE_CODE, "s1", clock=lambda: 0.0, monotonic=lambda: now[0])
    >>> session.enqueue("cmd-1", "Use the corrected path").disposition
    <Disposition.QUEUED: 'queued'>
    >>> now[0] = 1.5
    >>> outcome = session.on_hook("PostToolUse", reply_would_be_empty=True)
    >>> outcome.reply
    {'hookSpecificOutput': {'hookEventName': 'PostToolUse', 'additionalContext': 'Use the corrected path'}}
    >>> [(e["type"], e.get("queued_ms")) for e in session.recent_events()]
    [('instruction.accepted', None), ('instruction.delivered', 1500)]
    """

    def __init__(
        self,
        vendor: Vendor | str | VendorProfile,
        session_id: str,
        *,
        capacity: int = DEFAULT_QUEUE_CAPACITY,
        max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
        identity_limit: int = DEFAULT_IDENTITY_LIMIT,
        redact_text: bool = False,
        event_log_size: int = DEFAULT_LOG_SIZE,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """Configure a session.

        ``vendor``: a ``Vendor``, its string, or a custom ``VendorProfile``.
        ``capacity``: queued instructions at most (20). ``max_text_chars``: the longest
        instruction (16,000, and never more than the vendor's cap). ``identity_limit``:
        command ids retained for repeat detection. ``redact_text``: events carry
        ``"[redacted]"`` instead of the text (the hook reply never is). ``clock``: the
        ``time`` of events; ``monotonic``: the clock ``queued_ms`` is measured on.
        """
        profile = vendor if isinstance(vendor, VendorProfile) else PROFILES[Vendor(vendor)]
        session_id = checked_id(session_id, "session_id")  # the runtime's rules for its ids
        for name, value in (
            ("capacity", capacity),
            ("max_text_chars", max_text_chars),
            ("identity_limit", identity_limit),
        ):
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if type(redact_text) is not bool:
            raise TypeError("redact_text must be a bool")
        self.profile: Final = profile
        self.session_id: Final = session_id
        self.capacity: Final = capacity
        self.max_text_chars: Final = (
            max_text_chars if profile.cap is None else min(max_text_chars, profile.cap)
        )
        self.identity_limit: Final = identity_limit
        self.redact_text: Final = redact_text
        self._clock = clock
        self._monotonic = monotonic
        self._hub = EventHub(event_log_size)
        self._queue: list[_Instruction] = []
        self._identities: dict[str, _Instruction] = {}
        self._ended = False
        self._sequence = 0
        self._arrivals = 0
        self._delivered = 0
        self._dropped = 0
        self._refused = 0
        self._repeated = 0
        self._replies = 0

    # -- events ---------------------------------------------------------------------------

    def _emit(self, type_: str, fields: dict[str, Any], at: float) -> None:
        # ``at`` is read from ``clock`` before the step changes any state: a raising clock
        # must leave the session as it was (an instruction marked delivered with no reply
        # returned would be a lie).
        self._sequence += 1
        event: Event = {
            "type": type_,
            "sequence": self._sequence,
            "session_id": self.session_id,
            "time": at,
            "vendor": self.profile.vendor.value,
        }
        event.update(fields)
        self._hub.publish(event)

    def _text(self, text: str) -> str:
        return REDACTED if self.redact_text else text

    def subscribe(self, max_buffer: int = DEFAULT_SUBSCRIPTION_BUFFER) -> Subscription:
        """Receive every event published from now on, as an async iterator (either anyio backend)."""
        return self._hub.subscribe(max_buffer)

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event)`` synchronously for every event; returns a remover."""
        return self._hub.add_listener(listener)

    def recent_events(self) -> list[Event]:
        """The bounded log of recent events, oldest first."""
        return list(self._hub.log)

    # -- admission ------------------------------------------------------------------------

    @property
    def ended(self) -> bool:
        """True once the session's end moment passed or ``close()`` ran."""
        return self._ended

    @property
    def pending(self) -> int:
        """Instructions queued now. O(1)."""
        return len(self._queue)

    def pending_command_ids(self) -> list[str]:
        """The queued command ids, in arrival order."""
        return [i.command_id for i in self._queue]

    def enqueue(self, command_id: str, text: str) -> InstructionReceipt:
        """Queue one instruction for the next eligible hook reply. O(1) plus validation.

        Returns a receipt: ``queued`` when admitted, the current receipt for an
        identical repeat of an accepted command id, or a refusal (``accepted=False``)
        with an ``InstructionRefusal`` reason; a refusal changes nothing. Raises
        ``TypeError`` only when an argument is not a string.
        """
        command_id = plain_str(command_id, "command_id")
        text = plain_str(text, "text")
        at, now = self._clock(), self._monotonic()  # both before any state changes (see _emit)
        # The facts this session holds; ``_admit.decide`` orders them (C7's one order).
        known = self._identities.get(command_id)
        problem = self._validate(command_id, text)
        answer = _admit.decide(
            ended=self._ended,
            known=known is not None,
            same=known is not None and known.text == text,
            problem=problem,
            queue_full=len(self._queue) >= self.capacity,
            full=len(self._identities) >= self.identity_limit,
        )
        if known is not None and answer == _admit.REPEAT:  # a repeat is of a known identity
            self._repeated += 1
            self._emit(
                "instruction.repeated",
                {"command_id": command_id, "cause": command_id, "disposition": known.state.disposition.value},
                at,
            )
            return known.receipt(self.session_id, repeated=True)
        if answer != _admit.ADMIT:
            reason = InstructionRefusal(answer)
            return self._refuse(command_id, reason, _admit.detail(answer, problem, self.capacity), at)
        self._arrivals += 1
        record = _Instruction(command_id, text, self._arrivals, now)
        self._identities[command_id] = record
        self._queue.append(record)
        self._emit(
            "instruction.accepted",
            {
                "command_id": command_id,
                "cause": command_id,
                "text": self._text(text),
                "pending": len(self._queue),
            },
            at,
        )
        return record.receipt(self.session_id)

    def _validate(self, command_id: str, text: str) -> str | None:
        profile = self.profile
        return _vendors.command_id_problem(command_id) or _vendors.text_problem(
            text,
            max_chars=self.max_text_chars,
            cap=profile.cap,
            cap_counts_utf16=profile.cap_counts_utf16,
            title=profile.title,
            cap_counts_utf8=profile.cap_counts_utf8,
        )

    def _refuse(
        self, command_id: str, reason: InstructionRefusal, detail: str, at: float
    ) -> InstructionReceipt:
        self._refused += 1
        self._emit(
            "instruction.refused",
            {"command_id": event_safe(command_id), "reason": reason.value, "detail": detail},
            at,
        )
        return InstructionReceipt(False, command_id, self.session_id, None, reason.value, detail)

    def receipt(self, command_id: str) -> InstructionReceipt | None:
        """The current receipt of an accepted command id, or ``None``. O(1)."""
        record = self._identities.get(plain_str(command_id, "command_id"))
        return None if record is None else record.receipt(self.session_id)

    # -- hook moments ---------------------------------------------------------------------

    def on_hook(self, moment: str, *, reply_would_be_empty: bool) -> HookOutcome:
        """Decide what the reply at ``moment`` carries; call it at every hook moment.

        ``reply_would_be_empty``: True when the handler has nothing else to say at
        this moment (no decision, no context of its own). At an eligible moment the
        queued instructions are joined in arrival order, as many as fit the vendor's
        cap, into ``outcome.reply``; each emits ``instruction.delivered``. At the
        vendor's session-end moment every queued instruction is dropped
        (``instruction.dropped {reason: "session-ended"}``). O(delivered).
        """
        moment = plain_str(moment, "moment")
        if type(reply_would_be_empty) is not bool:
            raise TypeError("reply_would_be_empty must be a bool")
        if self._ended:
            return HookOutcome(moment, None, skipped=SkipReason.SESSION_ENDED, pending=0)
        if moment == self.profile.session_end_moment:
            dropped = self._drop_all(DROP_SESSION_ENDED, moment, self._clock(), self._monotonic())
            return HookOutcome(moment, None, dropped=dropped, skipped=SkipReason.SESSION_ENDED, pending=0)
        skip = self.profile.ineligibility(moment, reply_would_be_empty=reply_would_be_empty)
        if skip is None and not self._queue:
            skip = SkipReason.NOTHING_QUEUED
        if skip is not None:
            return HookOutcome(moment, None, skipped=skip, pending=len(self._queue))
        at, now = self._clock(), self._monotonic()  # before the queue changes (see _emit)
        batch = self._take_batch()
        context = SEPARATOR.join(i.text for i in batch)
        for record in batch:
            record.state = InstructionState.DELIVERED
            self._delivered += 1
            self._emit(
                "instruction.delivered",
                {
                    "command_id": record.command_id,
                    "cause": record.command_id,
                    "moment": moment,
                    "queued_ms": max(0, round((now - record.enqueued_at) * 1000)),
                    "text": self._text(record.text),
                },
                at,
            )
        self._replies += 1
        return HookOutcome(
            moment,
            self.profile.build_reply(moment, context),
            delivered=tuple(i.command_id for i in batch),
            pending=len(self._queue),
        )

    def _take_batch(self) -> list[_Instruction]:
        """Pop the longest prefix of the queue whose joined text fits the cap (at least one)."""
        cap = self.profile.cap
        if cap is None:
            batch, self._queue = self._queue, []
            return batch
        count = _vendors.fit_count((self.profile.measure(r.text) for r in self._queue), cap)
        if count == 0:  # enqueue refuses any text over the cap, so the head always fits
            raise InvariantError(f"queued instruction over the {cap}-character cap")
        batch = self._queue[:count]
        del self._queue[:count]
        return batch

    def _drop_all(self, reason: str, moment: str | None, at: float, now: float) -> tuple[str, ...]:
        self._ended = True
        queue, self._queue = self._queue, []
        for record in queue:
            record.state = InstructionState.DROPPED
            record.reason = reason
            self._dropped += 1
            fields: dict[str, Any] = {
                "command_id": record.command_id,
                "cause": record.command_id,
                "reason": reason,
                "queued_ms": max(0, round((now - record.enqueued_at) * 1000)),
                "text": self._text(record.text),
            }
            if moment is not None:
                fields["moment"] = moment
            self._emit("instruction.dropped", fields, at)
        return tuple(i.command_id for i in queue)

    def close(self) -> tuple[str, ...]:
        """End the session without its end moment (the adapter stops). Idempotent.

        Every queued instruction is dropped with ``reason: "closed"`` so nothing
        accepted disappears unaudited; later ``enqueue`` calls are refused
        ``session-ended``. Returns the dropped command ids. Subscriptions end.
        """
        dropped = () if self._ended else self._drop_all(DROP_CLOSED, None, self._clock(), self._monotonic())
        self._hub.close()
        return dropped

    # -- introspection --------------------------------------------------------------------

    def statistics(self) -> HookSessionStatistics:
        """A frozen snapshot of this session's counters."""
        return HookSessionStatistics(
            pending=len(self._queue),
            capacity=self.capacity,
            accepted=self._arrivals,
            delivered=self._delivered,
            dropped=self._dropped,
            refused=self._refused,
            repeated=self._repeated,
            replies=self._replies,
            events_emitted=self._sequence,
            ended=self._ended,
        )

    def _check(self) -> None:
        """Check every invariant of the theory of operation; raises ``InvariantError``."""

        def require(condition: bool, message: str) -> None:
            if not condition:
                raise InvariantError(f"hook session {self.session_id!r}: {message}")

        queue = self._queue
        require(len(queue) <= self.capacity, "queue over capacity")
        require(all(i.state is InstructionState.QUEUED for i in queue), "non-queued record in the queue")
        arrivals = [i.arrival for i in queue]
        require(arrivals == sorted(arrivals), "queue out of arrival order")
        require(not (self._ended and queue), "an ended session still queues instructions")
        states = _count(i.state for i in self._identities.values())
        require(states[InstructionState.QUEUED] == len(queue), "a queued record is missing from the queue")
        require(states[InstructionState.DELIVERED] == self._delivered, "delivered count drifted")
        require(states[InstructionState.DROPPED] == self._dropped, "dropped count drifted")
        require(len(self._identities) == self._arrivals, "an identity was lost or evicted")
        require(len(self._identities) <= self.identity_limit, "identity limit exceeded")


def _count(states: Iterable[InstructionState]) -> dict[InstructionState, int]:
    counts = dict.fromkeys(InstructionState, 0)
    for state in states:
        counts[state] += 1
    return counts
