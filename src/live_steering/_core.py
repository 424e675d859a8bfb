"""The sans-IO steering core: every admission, identity, generation and disposition decision.

Theory of operation
-------------------
One ``SteeringCore`` per runtime. It never awaits, never does I/O and never
looks at a clock it was not given; the anyio shell (``_runtime.py``) calls it,
then parks or wakes tasks according to what it returned. Everything a test
needs to prove a rule of the library (docs/rules.md) can be proved here without an event loop.
It must never import anything above ``_admission``, ``_rules``, ``_types``, ``_errors`` and
``_validate``.

Its decisions, each a table of ``_rules.py`` or one function here:

* admission (C6-C12): ``decide``, with the id and text rules of ``_validate``;
* an input's moves: ``INPUT_TRANSITIONS`` (C20), applied by ``_move``; the two moves
  of every input written (``next_write``, ``confirm_write``) take the table's answer,
  read off it at import, on their one legal path, and ``_move`` on any other;
* a generation's phases: ``GENERATION_TRANSITIONS``, applied by ``_advance``; the two
  moves of every generation (closing admission from OPEN, the end) take the table's
  answer, read off it at import, on their legal paths, and ``_advance`` on any other;
  admission closes in one place, ``_close_admission`` (after the checkpoint, a
  stop, the runtime's close);
* generation start: ``check_generation_id`` (id rules, never reused in a runtime);
* generation end: ``ENDINGS`` maps how the block was left (``Exit``) and where
  the generation stood (``Standing``) to its ending and hold reason (C17, C19);
* the write barrier's outcome: ``after_barrier`` (hand the input over, or hold it);
* the reasons a stop may give: ``STOP_REASONS`` (``StopReason`` -> the hold reason);
* what a boundary of a generation whose admission closed raises: ``boundary_refusal``
  (the stop signal ``GenerationStopped`` after a stop, C17);
* the check after the checkpoint: ``AFTER_CHECKPOINT`` (continue, finish, or stop
  for the budget before anything announces a continuation, C16, C17);
* a block left normally with input pending and no such check: ``UNDECIDED_EXITS``
  (its terminal event carries ``"warning": "no-checkpoint-decision"``).

State, and the invariants ``_check()`` asserts after any step:

* ``identities`` maps every accepted input id to its ``InputRecord``, in admission
  order (sequence 1, 2, ...); at most ``identity_limit`` of them, never evicted
  (C11). Refusals touch nothing (C6).
* Each record moves along ``INPUT_TRANSITIONS`` only (C20): PENDING and WRITING
  are the two halves of the public ``queued``; APPLIED, HELD and UNKNOWN are final.
  HELD carries a hold reason, UNKNOWN ``write-interrupted``, the others none.
* Only the current generation has PENDING records, in its ``pending`` deque, in
  admission order (C13); at most one record is WRITING, the boundary's. Every id
  in its ``applied_ids`` is APPLIED.
* A generation is OPEN with no ending, or CLOSING with the ending admission closed
  for; a CLOSING one has nothing pending: closing either holds what is pending
  (stop, runtime close) or happens only when nothing is pending (after the
  checkpoint, C16), in the same synchronous step as the check. A closed runtime
  has no OPEN generation.
* An ended generation has nothing PENDING or WRITING: every input it accepted
  is APPLIED, HELD or UNKNOWN (C17-C19).

Every state change is reported as a pinned event dict (C21) through ``sink``,
each built by ``_envelope``. One event may wait briefly: an admission's
``steering.accepted`` is *owed* while its awaited submit yields to the engine it
woke, so that building and fanning it out is not on the path from a submit to
that engine. The rule: an owed acceptance is published before anything could
observe its absence. ``settle()`` is that rule; the core applies it before any
other event (``_envelope``), any move of a record (``_move``) and any read that
shows an admission (``receipt``, ``generation_view``, ``pending_of``); the event
hub applies it before it shows its log or changes its consumers (``EventHub``'s
``owed`` hook, set by the shell while a generation runs); a wing reads
through ``_runtime.RuntimeInternals.settle``. At most one admission is owed at a
time, so the stream's order is the order of the changes. ``statistics()`` is a
pure read: it never publishes.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable
from typing import Any, Final

import attrs

from . import _admission as admission
from ._admission import content_digest
from ._errors import (
    GenerationClosedError,
    GenerationStateError,
    GenerationStopped,
    InvariantError,
    RuntimeClosedError,
)
from ._rules import (
    ADMITTED_STATE,
    AFTER_CHECKPOINT,
    CONTINUED_WARNING,
    DEFAULT_GENERATION_ID_LIMIT,
    DEFAULT_IDENTITY_LIMIT,
    DEFAULT_MAX_TEXT_CHARS,
    DELIVERY,
    ENDINGS,
    FOLLOW_UP,
    FOLLOW_UP_DELIVERY,
    FOLLOW_UPS_AT_END,
    GENERATION_TRANSITIONS,
    INPUT_TRANSITIONS,
    KINDS,
    MODE_QUOTA,
    STOP_REASONS,
    UNDECIDED_EXITS,
    UNDECIDED_WARNING,
    Action,
    CheckpointDecision,
    DeliveryMode,
    Ending,
    Exit,
    GenerationAction,
    InputState,
    Phase,
    Standing,
    exit_of,
)
from ._rules import CORE_EVENT_PREFIXES as _CORE_EVENT_PREFIXES
from ._rules import DISPOSITION_OF as _DISPOSITION_OF
from ._rules import DISPOSITION_VALUE as _DISPOSITION_VALUE
from ._rules import ENDING_VALUE as _ENDING_VALUE
from ._rules import HOLD_REASONS as _HOLD_REASONS
from ._rules import STANDING_OF_STOP as _STANDING_OF_STOP
from ._rules import STOP_OF_HOLD as _STOP_OF_HOLD
from ._types import Disposition, HoldReason, Input, Receipt, RefusalReason, StopReason, build_receipt
from ._validate import MAX_ID_CHARS, checked_id, event_safe, input_problem, plain_str

__all__ = [
    "AFTER_CHECKPOINT",
    "CONTINUED_WARNING",
    "DEFAULT_GENERATION_ID_LIMIT",
    "DEFAULT_IDENTITY_LIMIT",
    "DEFAULT_MAX_TEXT_CHARS",
    "DELIVERY",
    "ENDINGS",
    "GENERATION_TRANSITIONS",
    "INPUT_TRANSITIONS",
    "OPEN",
    "STOP_REASONS",
    "UNDECIDED_EXITS",
    "UNDECIDED_WARNING",
    "Action",
    "CheckpointDecision",
    "CoreStatistics",
    "Ending",
    "Exit",
    "GenerationAction",
    "GenerationState",
    "InputRecord",
    "InputState",
    "Phase",
    "RetainedIdentity",
    "Standing",
    "SteeringCore",
    "exit_of",
]

Event = dict[str, Any]
EventSink = Callable[[Event], None]


# The members the paths of every admission and every write use, bound to module names:
# reading a member off its class is slow (``EnumType`` defines ``__getattr__``, which takes
# every class attribute read off the interpreter's fast path; docs/performance.md), and
# the path from a submit to the engine has a budget of a few microseconds.
OPEN: Final = Phase.OPEN
_BEGIN_WRITE: Final = Action.BEGIN_WRITE
_CONFIRM: Final = Action.CONFIRM
_PENDING: Final = InputState.PENDING
_new: Final = object.__new__
_TAKEN: Final = INPUT_TRANSITIONS[(InputState.PENDING, Action.BEGIN_WRITE)]
"""Where ``next_write`` takes a pending input: read off the table once."""
_WRITING: Final = InputState.WRITING
_WRITTEN: Final = INPUT_TRANSITIONS[(InputState.WRITING, Action.CONFIRM)]
"""Where a confirmed write takes its input: read off the table once (``confirm_write``)."""
_APPLIED: Final = _DISPOSITION_OF[_WRITTEN]
_QUEUED: Final = Disposition.QUEUED
_ADMIT: Final = admission.ADMIT
_REPEAT: Final = admission.REPEAT
_REASON: Final = {reason.value: reason for reason in RefusalReason}
"""``_admission.decide``'s refusals as the pinned enum (its strings are the enum's values)."""
_INVALID: Final = RefusalReason.INVALID_INPUT

# The same for the path of every generation (open, the check after the checkpoint, the
# end), which runs once per agent run with cold caches (docs/performance.md, issue 14).
_ENDED: Final = Phase.ENDED
_END: Final = GenerationAction.END
_FINISHED: Final = Ending.FINISHED
_CONTINUE: Final = CheckpointDecision.CONTINUE
_STOP_BUDGET: Final = CheckpointDecision.STOP_BUDGET
_CLOSED_FROM_OPEN: Final = {
    action: target for (phase, action), target in GENERATION_TRANSITIONS.items() if phase is Phase.OPEN
}
"""Where each action takes an OPEN generation: read off the table once (``_close_admission``)."""
_FINISH_FROM_OPEN: Final = _CLOSED_FROM_OPEN[GenerationAction.FINISH]
"""Where the decision to finish takes an OPEN generation (``after_checkpoint``'s common end)."""
_FINISHING: Final = Standing.FINISHING
_ENDED_FROM: Final = {
    phase: target for (phase, action), target in GENERATION_TRANSITIONS.items() if action is _END
}
"""Where the end takes a generation from each phase it may end from: read off the table once
(``end_generation``)."""


@attrs.define(eq=False)
class InputRecord:
    """The runtime's memory of one accepted input; lives as long as the runtime."""

    input: Input
    """The input exactly as admitted."""
    generation_id: str
    """The generation it was anchored to and admitted into (never another, C18)."""
    sequence: int
    """Admission order across the runtime, starting at 1."""
    state: InputState = InputState.PENDING
    """Where it is in ``INPUT_TRANSITIONS``."""
    reason: HoldReason | None = None
    """Why it is HELD or UNKNOWN; ``None`` otherwise."""
    target: str | None = None
    """The generation a follow-up was carried into, where it is written (C29); ``None`` for a
    steer (written in ``generation_id``) and for a follow-up not carried."""
    _receipt: Receipt | None = attrs.field(default=None, init=False, repr=False)
    """The receipt of the current state, made on first use; ``SteeringCore._move`` resets it."""

    @property
    def disposition(self) -> Disposition:
        return _DISPOSITION_OF[self.state]

    @property
    def writing(self) -> bool:
        """True while it is handed to the writer and not confirmed."""
        return self.state is InputState.WRITING

    def receipt(self) -> Receipt:
        """The current receipt of this input. O(1); one ``Receipt`` per state, however often asked."""
        receipt = self._receipt
        if receipt is None:
            receipt = build_receipt(
                True, self.input.id, self.generation_id, _DISPOSITION_OF[self.state], self.reason
            )
            self._receipt = receipt
        return receipt


@attrs.frozen
class _Modes:
    """A core's delivery modes (C30) and the quota each gives a boundary."""

    steering: DeliveryMode
    follow_up: DeliveryMode
    steer_quota: int = attrs.field(init=False)
    follow_up_quota: int = attrs.field(init=False)
    counted: bool = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "steer_quota", MODE_QUOTA[self.steering])
        object.__setattr__(self, "follow_up_quota", MODE_QUOTA[self.follow_up])
        object.__setattr__(self, "counted", DeliveryMode.ONE_AT_A_TIME in (self.steering, self.follow_up))


@attrs.frozen
class RetainedIdentity:
    """An identity an earlier runtime of the session accepted (``SteeringCore.retain``)."""

    generation_id: str
    """The generation it was anchored to."""
    digest: str
    """``_admission.content_digest`` of its kind and text (the text itself is not kept)."""
    receipt: Receipt
    """Its receipt as the earlier runtime (or the recovery after it) left it."""


@attrs.define(eq=False)
class GenerationState:
    """The core's view of one generation."""

    id: str
    phase: Phase = Phase.OPEN
    pending: collections.deque[InputRecord] = attrs.Factory(collections.deque)
    """Admitted (or, for follow-ups, carried in), not yet handed to a writer, in admission order."""
    follow_ups: list[InputRecord] = attrs.Factory(list)
    """Follow-ups anchored to this generation (DEFERRED), in admission order: for after it (C29)."""
    carried_ids: list[str] = attrs.Factory(list)
    """The follow-ups of the generation before that were carried into this one, in order."""
    written_steers: int = 0
    written_follow_ups: int = 0
    """Inputs of each kind this boundary wrote so far (counted when a mode is one-at-a-time, C30)."""
    writing: InputRecord | None = None
    """The input handed to the writer right now, if any."""
    boundary_active: bool = False
    in_barrier: bool = False
    """True while ``writing`` is announced to the write barrier and not yet handed to the
    writer: if the block is left then, the writer never saw it (C15) and it is held."""
    admitted_before: int = 0
    """Admissions of the runtime before this generation started (see ``SteeringCore._admitted_into``)."""
    applied_ids: list[str] = attrs.Factory(list)
    """Every input applied in this generation, in application order."""
    applied_at_continue: int = -1
    """``len(applied_ids)`` at the last ``generation.continued``; -1 before any."""
    ending: Ending | None = None
    """``None`` while admission is open; then the ending it closed for; at the end, the ending."""
    end_reason: HoldReason | None = None


@attrs.frozen
class CoreStatistics:
    """A snapshot of the core's counters; tests assert on this, not on private fields."""

    identities: int
    """Accepted identities retained (never more than ``identity_limit``)."""
    identity_limit: int
    pending: int
    """Inputs of the current generation waiting for a boundary."""
    generations_started: int
    accepted: int
    repeated: int
    refused: int
    applied: int
    held: int
    unknown: int
    follow_ups: int
    """Follow-ups accepted and waiting for the end of their anchor generation or the start of
    the next one (C29): not yet in any boundary queue."""
    events_emitted: int
    """Events published so far (an acceptance still owed is not one yet)."""
    closed: bool


class SteeringCore:
    """Synchronous state machine behind one ``LiveRuntime``. No I/O, no awaits.

    >>> events = []
    >>> core = SteeringCore(session_id="s1", sink=events.append, clock=lambda: 0.0)
    >>> gen = core.start_generation("g1")
    >>> core.submit(Input("steer", "go left", id="a"), "g1").disposition
    <Disposition.QUEUED: 'queued'>
    >>> [e["type"] for e in events]
    ['generation.started', 'steering.accepted']
    """

    def __init__(
        self,
        *,
        session_id: str,
        sink: EventSink,
        clock: Callable[[], float],
        identity_limit: int = DEFAULT_IDENTITY_LIMIT,
        max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
        boundary_delivery: bool = True,
        generation_prefix: str = "gen-auto-",
        generation_id_limit: int = DEFAULT_GENERATION_ID_LIMIT,
        steering_mode: str = DeliveryMode.ALL,
        follow_up_mode: str = DeliveryMode.ALL,
    ) -> None:
        session_id = checked_id(session_id, "session_id")
        modes = {mode.value: mode for mode in DeliveryMode}
        for name, mode in (("steering_mode", steering_mode), ("follow_up_mode", follow_up_mode)):
            if not isinstance(mode, str):
                raise TypeError(f"{name} must be a str, got {type(mode).__name__}")
            if mode not in modes:
                raise ValueError(f"{name} must be one of {sorted(modes)}, got {mode!r}")
        self._modes: Final = _Modes(modes[steering_mode], modes[follow_up_mode])
        """The delivery modes (C30), in one object: every attribute of a core costs every runtime
        (past a few dozen, CPython gives the instance a dictionary of its own, 1.3 KB)."""
        self._counted: Final = self._modes.counted
        """A boundary counts what it writes only when a mode limits it (C30)."""
        if type(generation_prefix) is not str or not 1 <= len(generation_prefix) <= MAX_ID_CHARS - 20:
            raise ValueError(f"generation_prefix must be a str of 1-{MAX_ID_CHARS - 20} characters")
        checked_id(generation_prefix, "generation_prefix")
        if type(identity_limit) is not int or identity_limit < 1:
            raise ValueError(f"identity_limit must be a positive int, got {identity_limit!r}")
        if type(max_text_chars) is not int or max_text_chars < 1:
            raise ValueError(f"max_text_chars must be a positive int, got {max_text_chars!r}")
        if type(generation_id_limit) is not int or generation_id_limit < 0:
            raise ValueError(f"generation_id_limit must be an int >= 0, got {generation_id_limit!r}")
        self.generation_id_limit: Final = generation_id_limit
        self.session_id: Final = session_id
        self.identity_limit: Final = identity_limit
        self.max_text_chars: Final = max_text_chars
        self.boundary_delivery: Final = boundary_delivery
        self._sink = sink
        self._clock = clock
        self.identities: dict[str, InputRecord] = {}
        self.current: GenerationState | None = None
        self.closed = False
        self.closed_error: Callable[[], RuntimeClosedError] | None = None
        """Set by a wing that closed the runtime because it failed (a fleet owner fenced, or its
        store lost): what a boundary, a wait for input and a new generation raise after the
        close, instead of the plain ``RuntimeClosedError`` and a quiet ``False``."""
        self._generation_ids: set[str] = set()
        """Every generation id a caller chose and started in this runtime: none is used twice (C18).
        At most ``generation_id_limit`` of them, never forgotten: past the limit a caller-chosen
        id is refused (a forgotten id could be reused, and a stale anchor accepted)."""
        self._generation_prefix: Final = generation_prefix
        self._issued = 0
        """Ids ``new_generation_id`` made: ``generation_prefix`` + 1, 2, ... They are unique by
        construction, so the core remembers a counter, not the ids: a runtime that runs
        generations for ever keeps a bounded memory (issue 11)."""
        self._issued_started = 0
        """The counter of the last issued id started: issued ids start in counter order, each
        at most once (one more is started only above it), so an ended one never runs again (C18)."""
        self._event_sequence = 0
        self._admission_sequence = 0
        self._generations_started = 0
        self._repeated = 0
        self._carried: list[InputRecord] = []
        """Follow-ups of the generation that finished last, DEFERRED until the next one starts (C29)."""
        self._retained: dict[str, RetainedIdentity] | None = None
        """Identities earlier runtimes of this session accepted (``retain``): never admitted again.
        ``None`` until the first (most runtimes have none: no empty dict per runtime)."""
        self._refused = 0
        self._final_counts = {InputState.APPLIED: 0, InputState.HELD: 0, InputState.UNKNOWN: 0}
        self._owed: InputRecord | None = None
        """The last admission while its ``steering.accepted`` is unpublished (see ``settle``)."""
        self._owed_time = 0.0
        """The clock's reading at that admission: the owed event's ``time``."""
        self._last_time = 0.0
        """The ``time`` of the last event: what a fact is dated with if the clock raises."""

    # -- events ---------------------------------------------------------------------------

    def settle(self) -> None:
        """Publish the owed ``steering.accepted`` of the last admission, if any. O(1).

        The rule of the theory of operation: an owed acceptance is out before anything
        could observe its absence. The shell calls it when the submitter resumes after
        the engine an admission woke had its first step.
        """
        record = self._owed
        if record is not None:
            self._owed = None
            # dated when it was admitted: the clock was read before the admission changed anything
            self._emit_input("steering.accepted", record, self._owed_time)

    def _envelope(self, type_: str, time: float, record: InputRecord | None = None) -> Event:
        """The envelope of every event (C21), with the two fields of an input event when
        ``record`` is given: an owed acceptance first, then the next sequence number.
        One dict built at once: this runs for every event (docs/performance.md)."""
        if self._owed is not None:
            self.settle()
        self._last_time = time
        sequence = self._event_sequence = self._event_sequence + 1
        if record is None:
            return {"type": type_, "sequence": sequence, "session_id": self.session_id, "time": time}
        return {
            "type": type_,
            "sequence": sequence,
            "session_id": self.session_id,
            "time": time,
            "input_id": record.input.id,
            "target_generation_id": record.generation_id if record.target is None else record.target,
        }

    # Every decision reads the clock once, before it changes anything, and dates its
    # events with that reading: a clock that raises makes it raise with nothing changed
    # (a submit, a start, the check after the checkpoint, a stop, the close). A fact that
    # already happened (a write returned or was interrupted, a block was left) cannot be
    # refused: it is recorded with its events dated by the last reading, and then the
    # clock's error is raised (``_fact_time``). Never a change without its event (issue 11).

    def _fact_time(self) -> tuple[float, Exception | None]:
        """The clock's reading for a fact, or the last reading and the clock's error."""
        try:
            return self._clock(), None
        except Exception as error:  # raised by the caller once the fact is recorded
            return self._last_time, error

    def _emit(self, type_: str, fields: dict[str, Any], time: float) -> None:
        event = self._envelope(type_, time)
        event.update(fields)
        self._sink(event)

    def _emit_input(
        self, type_: str, record: InputRecord, time: float, extra: dict[str, Any] | None = None
    ) -> None:
        event = self._envelope(type_, time, record)
        if extra is not None:
            event.update(extra)
        self._sink(event)

    def publish(self, type_: str, fields: dict[str, Any]) -> None:
        """Publish a wing's own event (the journal's ``journal.failed``) on this stream, in sequence.

        ``ValueError`` for a type of the core's own vocabulary (C21): only the core says
        what happened to a generation or an input. ``TypeError`` for a non-string type.
        """
        if type(type_) is not str:
            raise TypeError(f"an event type is a str, got {type(type_).__name__}")
        if type_.startswith(_CORE_EVENT_PREFIXES):
            raise ValueError(f"a wing cannot publish {type_!r}: the core owns that event type")
        self._emit(type_, fields, self._clock())

    # -- admission (C6-C12) ---------------------------------------------------------------

    @property
    def mode(self) -> str:
        """``"request_boundary"``, or ``"unavailable"`` when unconfigured or closed (C1)."""
        return DELIVERY if self.boundary_delivery and not self.closed else "unavailable"

    def submit(self, input: Input, generation_id: str) -> Receipt:
        """Decide one submission, synchronously, in the caller's step (C8).

        Returns a queued receipt (new identity), the current receipt (identical
        repeat) or a refusal. O(1) plus the length of the text for validation.
        Raises ``TypeError`` only for arguments of the wrong type (C6).
        """
        receipt = self.decide(input, generation_id)
        self.settle()
        return self.queued_receipt(input.id) if receipt is None else receipt

    def decide(self, input: Input, generation_id: str) -> Receipt | None:
        """``submit``, except that an admission returns ``None``.

        A refusal or an identical repeat returns its receipt (``accepted`` tells
        them apart). An admission returns no receipt and leaves its ``steering.accepted`` owed:
        the receipt is fixed (C9) and the event is the costliest step, so the shell
        wakes the engine first, then calls ``settle`` and ``queued_receipt``
        (anything published meanwhile publishes the owed event first).

        The hot path of every submission: it runs in the submitter's step, often
        with cold caches, so it calls as few functions as it can (see
        docs/performance.md); every rule it applies is spelled out in the order
        of C6-C12.
        """
        if type(input) is not Input and not isinstance(input, Input):  # the class itself, mostly
            raise TypeError(f"submit takes an Input, got {type(input).__name__}")
        id_ = input.id  # each field read once: every test below uses these
        text = input.text
        kind = input.kind
        if type(id_) is not str or type(text) is not str or type(kind) is not str:
            # Only an Input forged past its converters (object.__setattr__) gets here.
            raise TypeError("submit takes an Input whose kind, text and id are plain str")
        if type(generation_id) is not str:
            if not isinstance(generation_id, str):
                raise TypeError(f"generation_id must be a str, got {type(generation_id).__name__}")
            generation_id = str.__str__(generation_id)
        identities = self.identities
        if not self.closed and self.boundary_delivery and kind == "steer":
            record = identities.get(id_)
            if record is not None:
                rec = record.input
                if (
                    record.generation_id == generation_id
                    # ``record.input == input`` without building two tuples: the ids are equal
                    # (the key); the class test keeps attrs' equality exact.
                    and rec.text == text
                    and rec.kind == "steer"
                    and type(rec) is type(input)
                ):
                    # An identical repeat was valid when it was admitted: a lookup and a comparison
                    # (C10). (``_repeat`` written out: the path of every polling host)
                    time = self._clock()
                    self._repeated += 1
                    event = self._envelope("steering.repeated", time, record)  # an owed acceptance first
                    event["disposition"] = _DISPOSITION_VALUE[record.state]
                    self._sink(event)
                    return record.receipt()
            else:
                gen = self.current
                # Every answer of ``_admission.decide`` but ``ADMIT`` ruled out cheaply: a new id
                # (neither accepted here nor retained), the running generation open, room left,
                # and a sufficient condition for ``_validate.input_problem`` to find nothing,
                # which a plain ASCII input of the right size passes. Anything else is decided
                # (and explained) by the one order, below.
                if (
                    gen is not None
                    and gen.id == generation_id
                    and gen.phase is OPEN
                    and len(identities) < self.identity_limit
                    and id_
                    and len(id_) <= MAX_ID_CHARS
                    and text
                    and len(text) <= self.max_text_chars
                    and id_.isascii()
                    and text.isascii()
                    and "\x00" not in id_
                    and "\x00" not in text
                    and not text.isspace()
                    and not (self._retained and id_ in self._retained)
                ):
                    # ``_admit``, written out: the path of every admission. The one place an
                    # acceptance becomes owed: the previous one is out first, so at most one is
                    # owed and the stream keeps the order of the admissions. The clock is read
                    # first: if it raises, nothing was admitted.
                    time = self._clock()
                    if self._owed is not None:
                        self.settle()
                    self._admission_sequence += 1
                    # ``InputRecord(input, generation_id, sequence)`` through its slots, without
                    # the frame of attrs' ``__init__`` (the wake path): every field, its default.
                    record = _new(InputRecord)
                    record.input = input
                    record.generation_id = generation_id
                    record.sequence = self._admission_sequence
                    record.state = _PENDING
                    record.reason = None
                    record.target = None
                    record._receipt = None
                    identities[id_] = record
                    gen.pending.append(record)
                    self._owed = record
                    self._owed_time = time
                    return None
        return self._decide_in_order(input, generation_id)

    def _admit(self, input: Input, generation_id: str, gen: GenerationState) -> None:
        """Admit ``input`` into ``gen``, leaving its ``steering.accepted`` owed (see ``decide``):
        the slow path's admission, as ``decide``'s fast path makes it inline (and the only other
        place an acceptance becomes owed)."""
        time = self._clock()
        if self._owed is not None:
            self.settle()
        self._admission_sequence += 1
        record = InputRecord(input, generation_id, self._admission_sequence)
        self.identities[input.id] = record
        if input.kind == FOLLOW_UP:  # for after this generation (C29)
            record.state = ADMITTED_STATE[FOLLOW_UP]
            gen.follow_ups.append(record)
        else:
            gen.pending.append(record)
        self._owed = record
        self._owed_time = time

    def _decide_in_order(self, input: Input, generation_id: str) -> Receipt | None:
        """Every submission the fast paths of ``decide`` did not answer: the facts, then
        ``_admission.decide``, the one refusal order every surface shares (C7)."""
        id_ = input.id
        record = self.identities.get(id_)
        retained = self._retained.get(id_) if record is None and self._retained else None
        if record is not None:
            same = record.generation_id == generation_id and record.input == input
        elif retained is not None:
            same = retained.generation_id == generation_id and retained.digest == content_digest(
                input.kind, input.text
            )
        else:
            same = False
        gen = self.current
        running = gen is not None and gen.id == generation_id
        answer = admission.decide(
            closed=self.closed,
            available=self.boundary_delivery,
            kind_ok=input.kind in KINDS,
            known=record is not None or retained is not None,
            same=same,
            problem=None if same else input_problem(id_, input.text, self.max_text_chars),
            running=running,
            admitting=running and gen is not None and gen.phase is OPEN,
            full=len(self.identities) >= self.identity_limit,
        )
        if answer is _ADMIT and gen is not None:
            self._admit(input, generation_id, gen)
            return None
        if answer is _REPEAT:
            if record is not None:
                return self._repeat(record)
            if retained is not None:
                return self._repeat_retained(id_, retained)
        reason = _REASON[answer]
        detail = input_problem(id_, input.text, self.max_text_chars) if reason is _INVALID else None
        return self._refuse(input, generation_id, reason, detail or admission.DETAILS[answer])

    def _repeat(self, record: InputRecord) -> Receipt:
        """Answer an identical repeat of ``record`` with its current receipt (C10)."""
        time = self._clock()
        self._repeated += 1
        # (an owed acceptance, maybe of this very input, is published first)
        event = self._envelope("steering.repeated", time, record)
        # The answer to a submission names its anchor, as its receipt does (C10): a carried
        # follow-up's input events name the generation it was carried into, its repeats do not.
        event["target_generation_id"] = record.generation_id
        event["disposition"] = _DISPOSITION_VALUE[record.state]
        self._sink(event)
        return record.receipt()

    def _repeat_retained(self, input_id: str, retained: RetainedIdentity) -> Receipt:
        """Answer an identical repeat of an identity an earlier runtime accepted (``retain``)."""
        time = self._clock()
        self._repeated += 1
        event = self._envelope("steering.repeated", time)
        event["input_id"] = input_id
        event["target_generation_id"] = retained.generation_id
        disposition = retained.receipt.disposition
        event["disposition"] = None if disposition is None else str(disposition)
        self._sink(event)
        return retained.receipt

    def retain(self, input_id: str, generation_id: str, digest: str, receipt: Receipt) -> None:
        """Remember an identity an earlier runtime of this session accepted (the fleet's earlier
        owners, C27): from now on a submission of ``input_id`` is answered as if it had been
        accepted here, in the one order (C7): an identical repeat (same kind and text, by
        ``digest`` = ``_admission.content_digest``, and anchor) gets ``receipt``; other content
        is ``invalid-input`` if invalid, else ``identity-conflict``. A retained identity is never
        admitted again and does not count toward ``identity_limit``. Publishes nothing. O(1).

        ``ValueError``, changing nothing, for an id this runtime accepted itself or a receipt
        that is not an accepted one of ``input_id`` anchored to ``generation_id``.
        """
        input_id = plain_str(input_id, "input_id")
        if input_id in self.identities:
            raise ValueError(f"input {input_id!r} was accepted by this runtime: it cannot be retained")
        if not (receipt.accepted and receipt.input_id == input_id and receipt.generation_id == generation_id):
            raise ValueError(
                f"a retained identity needs the accepted receipt of {input_id!r}, got {receipt!r}"
            )
        if self._retained is None:
            self._retained = {}
        self._retained[input_id] = RetainedIdentity(generation_id, digest, receipt)

    def queued_receipt(self, input_id: str) -> Receipt:
        """The answer to the admission of ``input_id`` (C9): queued, whatever happened since. O(1)."""
        record = self.identities[input_id]
        state = record.state
        if state is _PENDING or state is _WRITING:
            return record.receipt()  # queued still: built once, and the same object for its repeats
        return build_receipt(True, input_id, record.generation_id, _QUEUED, None)

    def _refuse(self, input: Input, generation_id: str, reason: RefusalReason, detail: str) -> Receipt:
        time = self._clock()
        self._refused += 1
        self._emit(
            "steering.refused",
            {
                "input_id": event_safe(input.id),
                "generation_id": event_safe(generation_id),
                "reason": reason.value,
                "detail": detail,
            },
            time,
        )
        return Receipt(False, input.id, generation_id, None, reason.value)

    # -- reads that show an admission (each settles first) --------------------------------

    def receipt(self, input_id: str, *, settle: bool = True) -> Receipt | None:
        """The current receipt of an accepted input id, or ``None`` if never accepted. O(1).
        ``settle=False``: publish no owed acceptance first (a read from another thread)."""
        if self._owed is not None and settle:
            self.settle()
        record = self.identities.get(input_id)
        return None if record is None else record.receipt()

    def generation_view(self, *, settle: bool = True) -> dict[str, Any] | None:
        """``{"id", "phase", "pending"}`` of the running generation, or ``None`` (C2). O(1).
        ``settle=False``: publish no owed acceptance first (a read from another thread)."""
        if self._owed is not None and settle:
            self.settle()
        gen = self.current
        if gen is None:
            return None
        return {
            "id": gen.id,
            "phase": gen.phase.value,
            "pending": len(gen.pending),
            "steering_mode": self._modes.steering.value,
            "follow_up_mode": self._modes.follow_up.value,
        }

    def pending_of(self, gen: GenerationState) -> int:
        """Inputs admitted into ``gen`` and waiting for its next boundary. O(1)."""
        if self._owed is not None:
            self.settle()
        return len(gen.pending)

    # -- transitions ----------------------------------------------------------------------

    def _move(self, record: InputRecord, action: Action, reason: HoldReason | None = None) -> None:
        if self._owed is not None:  # nothing happens to an input before its acceptance is out
            self.settle()
        target = INPUT_TRANSITIONS.get((record.state, action))
        if target is None:
            raise InvariantError(f"input {record.input.id!r}: {action.value} from {record.state.value}")
        record.state = target
        record.reason = reason
        record._receipt = None
        if target in self._final_counts:
            self._final_counts[target] += 1

    def _hold_pending(self, gen: GenerationState, reason: HoldReason, time: float) -> None:
        while gen.pending:
            record = gen.pending.popleft()
            self._move(record, Action.HOLD, reason)
            self._emit_input("steering.held", record, time, {"reason": reason.value})

    def _hold_follow_ups(self, queue: list[InputRecord], reason: HoldReason, time: float) -> None:
        """Hold the DEFERRED follow-ups of ``queue``, in order (C29: a stop discards the plan)."""
        held, queue[:] = list(queue), []
        for record in held:
            self._move(record, Action.HOLD, reason)
            self._emit_input("steering.held", record, time, {"reason": reason.value})

    def _advance(self, gen: GenerationState, action: GenerationAction) -> Phase:
        """Move ``gen`` along ``GENERATION_TRANSITIONS``; the only writer of ``gen.phase`` but for
        the two moves of every generation, which take the table's answer read off it at import
        (``_close_admission`` from OPEN, ``end_generation``)."""
        target = GENERATION_TRANSITIONS.get((gen.phase, action))
        if target is None:
            raise InvariantError(f"generation {gen.id!r}: {action.value} from {gen.phase.value}")
        gen.phase = target
        return target

    def _close_admission(
        self,
        gen: GenerationState,
        action: GenerationAction,
        ending: Ending,
        reason: HoldReason | None,
        time: float,
    ) -> bool:
        """Close admission of ``gen`` for ``ending``, holding what is pending with ``reason``.

        The one place admission closes (C16, C17). Returns False, changing nothing,
        when it was closed already: the first ending and its reason stand.
        """
        if gen.phase is not OPEN:
            self._advance(gen, action)  # a legal no-op, or InvariantError for an ended one
            return False
        if reason is None and gen.pending:
            raise InvariantError(f"generation {gen.id!r} would close with input pending and no reason")
        # ``_advance(gen, action)`` from OPEN, its legal path: the table's answer, read off it at import.
        gen.phase = _CLOSED_FROM_OPEN[action]
        gen.ending = ending
        gen.end_reason = reason
        if reason is not None:
            self._hold_pending(gen, reason, time)
            self._hold_follow_ups(gen.follow_ups, reason, time)
        return True

    # -- generations (C13-C19) ------------------------------------------------------------

    def new_generation_id(self) -> str:
        """A generation id no generation of this runtime used: ``generation_prefix`` and a counter.

        Start it with ``start_generation(id, issued=True)``. O(1), and nothing is
        remembered per id: the counter says which ids were made.
        """
        self._issued += 1
        return f"{self._generation_prefix}{self._issued}"

    def _was_issued(self, generation_id: str) -> bool:
        """True for an id ``new_generation_id`` made (the prefix, then 1..the counter)."""
        prefix = self._generation_prefix
        if not generation_id.startswith(prefix):
            return False
        tail = generation_id[len(prefix) :]
        return tail.isascii() and tail.isdigit() and tail[0] != "0" and int(tail) <= self._issued

    def check_generation_id(self, generation_id: object) -> str:
        """Check an engine's generation id: the id rules (C7) and never used in this runtime.

        Returns it as a plain ``str``; ``TypeError`` for a non-string, ``ValueError``
        for a bad or reused id, or one of the ids this runtime makes itself (they start
        with ``generation_prefix``). Changes nothing.
        """
        checked = checked_id(generation_id, "generation_id")
        if checked in self._generation_ids:
            raise ValueError(f"generation id {checked!r} was already used in this runtime")
        if len(self._generation_ids) >= self.generation_id_limit:
            raise ValueError(
                f"this runtime already ran {self.generation_id_limit} generations with ids of the caller's "
                "choosing (generation_id_limit), each remembered so that none runs twice: open a "
                "generation without an id (the runtime issues one), or use a new runtime"
            )
        if checked.startswith(self._generation_prefix):
            raise ValueError(
                f"generation id {checked!r} is reserved: this runtime makes the ids that start with "
                f"{self._generation_prefix!r} itself (open a generation without an id to get one)"
            )
        return checked

    def start_generation(self, generation_id: str, *, issued: bool = False) -> GenerationState:
        """Open admission for a new generation. One at a time per runtime; an id only once.

        ``issued=True`` for an id ``new_generation_id`` made: issued ids start in the
        order they were made, each once (``ValueError`` for one already started, or
        made before the last one started); any other id is checked with
        ``check_generation_id`` and remembered.
        """
        number = 0
        if issued:
            latest = self._issued
            prefix = self._generation_prefix
            if latest and type(generation_id) is str and generation_id == f"{prefix}{latest}":
                # The id made last (``open_generation()``, then entering it): the prefix and the
                # counter, so ``_was_issued`` holds and its number is the counter. One string
                # built and compared instead of a parse; nothing more kept per runtime.
                number = latest
            elif type(generation_id) is not str or not self._was_issued(generation_id):
                raise ValueError(f"generation id {generation_id!r} was not made by new_generation_id()")
            else:
                number = int(generation_id[len(self._generation_prefix) :])
            if number <= self._issued_started:
                raise ValueError(
                    f"generation id {generation_id!r} was already started, or made before the last "
                    "one started: an issued id runs once, in the order the ids were made"
                )
        else:
            generation_id = self.check_generation_id(generation_id)
        if self.closed:
            raise (
                self.closed_error()
                if self.closed_error is not None
                else RuntimeClosedError("the runtime is closed")
            )
        if self.current is not None:
            raise GenerationStateError(
                f"generation {self.current.id!r} is still running; end it before starting another"
            )
        time = self._clock()
        gen = GenerationState(generation_id, admitted_before=self._admission_sequence)
        self.current = gen
        if issued:
            self._issued_started = number
        else:
            self._generation_ids.add(generation_id)
        self._generations_started += 1
        event = self._envelope("generation.started", time)  # ``_emit``, written out: once per generation
        event["generation_id"] = generation_id
        carried = self._carried
        if carried:  # the follow-ups of the generation before: this one's first inputs (C29)
            self._carried = []
            for record in carried:
                self._move(record, Action.CARRY)
                record.target = generation_id
                gen.pending.append(record)
                gen.carried_ids.append(record.input.id)
            event["follow_up_ids"] = list(gen.carried_ids)
        self._sink(event)
        return gen

    def _require_current(self, gen: GenerationState, doing: str) -> None:
        if gen.phase is Phase.ENDED or self.current is not gen:
            raise GenerationClosedError(f"generation {gen.id!r} has ended; cannot {doing}")

    def begin_boundary(self, gen: GenerationState) -> None:
        """Start a boundary: the caller will drain with ``next_write`` until it returns None.

        One test on the path of every boundary (an open generation is neither ended nor
        closing; ``OPEN`` is the module's name, not a read off the class); the reason
        for a refusal is found only when there is one.
        """
        if gen.phase is not OPEN or self.current is not gen or gen.boundary_active:
            self._require_current(gen, "run a boundary")
            if gen.phase is not OPEN:
                raise self.boundary_refusal(gen)
            raise GenerationStateError(f"a boundary of generation {gen.id!r} is already running")
        gen.boundary_active = True
        if self._counted:
            gen.written_steers = gen.written_follow_ups = 0

    def start_boundary(self, gen: GenerationState) -> InputRecord | None:
        """``begin_boundary`` and the first ``next_write`` in one call: the path of every boundary.

        Returns the oldest pending input to hand to the writer, the boundary running; or
        ``None`` when there is nothing to write, and then the boundary is already over (it
        began and ended in this call: no ``end_boundary`` to make). Refuses as
        ``begin_boundary`` does. On the common path (an open generation, nothing owed, no write
        unconfirmed) it is those two calls written out; any other path goes through them.
        """
        if gen.phase is not OPEN or self.current is not gen or gen.boundary_active or gen.writing is not None:
            self.begin_boundary(gen)  # raises
            record = None
            try:
                record = self.next_write(gen)  # raises on a write still unconfirmed
            finally:
                if record is None:
                    gen.boundary_active = False  # nothing taken: the boundary is over
            return record
        pending = gen.pending
        if not pending:
            return None  # begun and ended: nothing to write
        if self._counted:
            # a mode is one-at-a-time (C30): ``begin_boundary``'s reset and ``next_write``'s count.
            # Every quota is at least 1 (``MODE_QUOTA``), so a boundary's first write always fits.
            if pending[0].target is None:
                gen.written_steers, gen.written_follow_ups = 1, 0
            else:
                gen.written_steers, gen.written_follow_ups = 0, 1
        record = pending.popleft()
        if record.state is _PENDING and self._owed is None:
            record.state = _TAKEN  # as in ``next_write``: its one legal path
        else:
            self._move(record, _BEGIN_WRITE)  # publishes an owed acceptance first, or raises
        gen.boundary_active = True
        gen.writing = record
        return record

    def boundary_refusal(self, gen: GenerationState) -> Exception:
        """What a boundary of ``gen``, whose admission closed, raises.

        After a stop, the stop signal ``GenerationStopped`` (C17): the loop ends and
        leaving the block absorbs it. After the runtime's close, ``RuntimeClosedError``;
        after the check after the checkpoint closed admission, ``GenerationClosedError``
        (a boundary after ``continue_after_checkpoint()`` returned False is a misuse).
        """
        reason = gen.end_reason
        stop = _STOP_OF_HOLD.get(reason) if gen.ending is Ending.STOPPED and reason is not None else None
        if stop is not None:
            signal = GenerationStopped(gen.id, stop.value)
            signal._origin = gen
            return signal
        if self.closed:
            if self.closed_error is not None:
                return self.closed_error()
            return RuntimeClosedError(f"the runtime is closed; generation {gen.id!r} must end")
        return GenerationClosedError(f"generation {gen.id!r} has closed admission; no boundary")

    def next_write(self, gen: GenerationState) -> InputRecord | None:
        """Hand the oldest pending input to the writer, or ``None`` when drained. O(1)."""
        if gen.writing is not None:
            raise InvariantError("next_write while a write is unconfirmed")
        if not gen.pending or gen.phase is not OPEN:
            return None
        if self._counted:  # a mode is one-at-a-time (C30): the head's kind must have quota left
            modes = self._modes
            if gen.pending[0].target is None:
                if gen.written_steers >= modes.steer_quota:
                    return None  # the rest stay, in order, for the next boundary
                gen.written_steers += 1
            else:
                if gen.written_follow_ups >= modes.follow_up_quota:
                    return None
                gen.written_follow_ups += 1
        record = gen.pending.popleft()
        if record.state is _PENDING and self._owed is None:
            # ``_move(record, _BEGIN_WRITE)`` on its one legal path, as in ``confirm_write``;
            # both states are ``queued`` with no reason, so a cached receipt stays true.
            record.state = _TAKEN
        else:
            self._move(record, _BEGIN_WRITE)  # publishes an owed acceptance first, or raises
        gen.writing = record
        return record

    def _give_back_quota(self, gen: GenerationState, record: InputRecord) -> None:
        if self._counted:
            if record.target is None:
                gen.written_steers -= 1
            else:
                gen.written_follow_ups -= 1

    def announce(self, gen: GenerationState, record: InputRecord) -> None:
        """The shell awaits the write barrier for ``record`` (the one ``next_write`` returned):
        until ``after_barrier`` or ``return_write``, it is not handed to the writer (C15)."""
        if gen.writing is not record:
            raise InvariantError(f"input {record.input.id!r} announced but not the one taken to write")
        gen.in_barrier = True

    def return_write(self, gen: GenerationState, record: InputRecord) -> None:
        """The input was never handed to the writer: back to the head of the queue (C15)."""
        self._take_writing(gen, record)
        gen.in_barrier = False
        self._move(record, Action.RETURN)
        self._give_back_quota(gen, record)
        gen.pending.appendleft(record)
        if gen.phase is not Phase.OPEN:  # stopped or closed meanwhile: held like the rest (C17)
            if gen.end_reason is None:  # only a stop or a close closes admission mid-boundary
                raise InvariantError(f"generation {gen.id!r} closed mid-boundary without a reason")
            time, clock_error = self._fact_time()
            self._hold_pending(gen, gen.end_reason, time)
            if clock_error is not None:
                raise clock_error

    def after_barrier(self, gen: GenerationState, record: InputRecord) -> bool:
        """The write barrier returned for ``record``: True means hand it to the writer now.

        False means admission closed while the barrier ran (a stop, the runtime's
        close): the input was not handed over and is held with the rest (C17), and
        the boundary ends.
        """
        if gen.phase is OPEN and gen.writing is record:
            gen.in_barrier = False
            return True
        self.return_write(gen, record)  # raises if the block was left meanwhile
        return False

    def confirm_write(
        self, gen: GenerationState, record: InputRecord, end_if_drained: bool = False
    ) -> Receipt:
        """The writer returned: the input is applied (C14).

        The write happened, so if the clock raises the input is still applied with
        its two events (dated by the last reading), and then the clock's error is
        raised: never applied without its events.

        ``end_if_drained``: when nothing is left pending once the two events are out, the
        boundary ends here (``end_boundary``, in the same step: nothing can be admitted
        between this call and the next ``next_write``, which would answer ``None``). The
        shell passes True and stops when ``gen.boundary_active`` turned False; with input
        still pending, or quota counting (C30) left to ``next_write``, the boundary goes on.
        """
        # The two events of C14, with one clock reading: this runs once per input written.
        try:
            time = self._clock()
            clock_error = None
        except Exception as error:  # as _fact_time, inline: this runs for every input written
            time, clock_error = self._last_time, error
        if gen.writing is record:  # ``_take_writing``, whose checks run only when it is not
            gen.writing = None
        else:
            self._take_writing(gen, record)  # raises
        if record.state is _WRITING and self._owed is None:
            # ``_move(record, _CONFIRM)`` on its one legal path (nothing owed, so nothing to
            # publish first): the table's answer is ``_WRITTEN``, read off it at import. A
            # writing input has no reason, nor has a written one.
            record.state = _WRITTEN
            self._final_counts[_WRITTEN] += 1
        else:
            self._move(record, _CONFIRM)  # publishes an owed acceptance first, or raises
        # ``record.receipt()`` written out, and kept before any event shows the change
        receipt = record._receipt = build_receipt(True, record.input.id, record.generation_id, _APPLIED, None)
        gen.applied_ids.append(record.input.id)
        # ``_envelope("input.delivered", time, record)`` written out, with its ``delivery``
        if self._owed is not None:
            self.settle()
        self._last_time = time
        target = record.target
        delivered: Event = {
            "type": "input.delivered",
            "sequence": self._event_sequence + 1,
            "session_id": self.session_id,
            "time": time,
            "input_id": record.input.id,
            "target_generation_id": record.generation_id if target is None else target,
            "delivery": DELIVERY if target is None else FOLLOW_UP_DELIVERY,
        }
        self._event_sequence += 1
        # The second event differs from the first only in its type and sequence number;
        # copied before the first is published, so a listener's change cannot leak into it.
        applied = delivered.copy()
        self._sink(delivered)
        applied["type"] = "steering.applied"
        applied["sequence"] = self._event_sequence = self._event_sequence + 1
        self._last_time = time  # as ``_envelope``: a wing may have published in between
        self._sink(applied)
        if end_if_drained and not gen.pending:
            gen.boundary_active = False  # drained: the boundary ends at its last confirmed write
        if clock_error is not None:
            raise clock_error
        return receipt

    def interrupt_write(self, gen: GenerationState, record: InputRecord) -> None:
        """The writer was cancelled or raised: the effect is unknown (C15). A fact (``_fact_time``)."""
        time, clock_error = self._fact_time()
        self._interrupt(gen, record, time)
        if clock_error is not None:
            raise clock_error

    def _interrupt(self, gen: GenerationState, record: InputRecord, time: float) -> None:
        self._take_writing(gen, record)
        self._move(record, Action.INTERRUPT, HoldReason.WRITE_INTERRUPTED)
        self._emit_input(
            "steering.unknown",
            record,
            time,
            {
                "reason": HoldReason.WRITE_INTERRUPTED.value,
                "delivery": DELIVERY if record.target is None else FOLLOW_UP_DELIVERY,
            },
        )

    def _take_writing(self, gen: GenerationState, record: InputRecord) -> None:
        if gen.writing is not record:
            if gen.phase is Phase.ENDED and record.state is InputState.UNKNOWN:
                # The block was left (by another task) while this boundary was writing:
                # the end made the write unknown (C15); its boundary must not carry on.
                raise GenerationStateError(
                    f"the block of generation {gen.id!r} was left while a boundary was writing "
                    f"input {record.input.id!r}, which is now unknown (write-interrupted): "
                    "leave the block only after its boundaries have returned"
                )
            if gen.phase is Phase.ENDED and record.state is InputState.HELD:
                # Left while the write barrier ran: never handed to the writer, so held (C15).
                raise GenerationStateError(
                    f"the block of generation {gen.id!r} was left while a boundary awaited the write "
                    f"barrier for input {record.input.id!r}, which was never handed to the writer and "
                    f"is held ({record.reason.value if record.reason else 'held'}): leave the block "
                    "only after its boundaries have returned"
                )
            raise InvariantError(f"input {record.input.id!r} is not the one being written")
        gen.writing = None

    def end_boundary(self, gen: GenerationState) -> None:
        """The boundary is over (idempotent): ``start_boundary`` answering ``None`` and
        ``confirm_write(..., end_if_drained=True)`` leaving ``boundary_active`` False end it themselves."""
        gen.boundary_active = False

    def after_checkpoint(self, gen: GenerationState, may_call: bool = True) -> bool:
        """The once-more check after the durable checkpoint (C16, C17): ``AFTER_CHECKPOINT``.

        ``may_call``: whether the loop may still make a model call (False once its
        call budget is spent). Pending input and ``may_call``: the same generation
        continues (``generation.continued``), returns True. Pending input and no call
        left: stopped ``budget-exhausted`` (the input is held), returns False, and
        nothing announced a continuation. Nothing pending: admission closes in this
        same synchronous step, returns False; a later submit is refused ``finishing``.
        """
        if type(may_call) is not bool:
            raise TypeError(f"may_call must be a bool, got {type(may_call).__name__}")
        if gen.phase is _ENDED or self.current is not gen:  # ``_require_current``'s test first
            self._require_current(gen, "check after the checkpoint")
        if gen.boundary_active:
            raise GenerationStateError("continue_after_checkpoint() while a boundary is running")
        time = self._clock()
        decision = AFTER_CHECKPOINT[gen.phase is OPEN and bool(gen.pending), may_call]
        if decision is _CONTINUE:
            gen.applied_at_continue = len(gen.applied_ids)
            self._emit("generation.continued", {"generation_id": gen.id}, time)
            return True
        if decision is _STOP_BUDGET:
            self._close_admission(
                gen, GenerationAction.STOP, Ending.STOPPED, HoldReason.BUDGET_EXHAUSTED, time
            )
        elif gen.phase is OPEN:
            # ``_close_admission(gen, FINISH, FINISHED, None, time)`` from OPEN with nothing
            # pending (the decision says so), its one legal path: the end of most generations.
            gen.phase = _FINISH_FROM_OPEN
            gen.ending = _FINISHED
            gen.end_reason = None
        else:
            self._close_admission(gen, GenerationAction.FINISH, _FINISHED, None, time)
        return False

    def stop(self, gen: GenerationState, reason: StopReason = StopReason.GENERATION_STOPPED) -> bool:
        """Close admission and hold every pending input (C17).

        ``reason`` is a ``StopReason`` (``TypeError`` otherwise, changing nothing).
        Once admission is closed (an earlier stop, the runtime's close, or the
        after-checkpoint decision to finish) there is nothing left to stop: the call
        changes nothing, so the first ending and its reason stand. Returns True if this
        call closed admission, False if it changed nothing.
        """
        hold = STOP_REASONS.get(reason) if type(reason) is StopReason else None
        if hold is None:
            raise TypeError(
                f"a stop reason is a StopReason ({', '.join(r.value for r in STOP_REASONS)}), got {reason!r}"
            )
        self._require_current(gen, "stop")
        return self._close_admission(gen, GenerationAction.STOP, Ending.STOPPED, hold, self._clock())

    def standing(self, gen: GenerationState) -> Standing:
        """Where ``gen`` stands, as ``ENDINGS`` reads it."""
        if gen.phase is OPEN:
            return Standing.OPEN_PENDING if gen.pending else Standing.OPEN
        if gen.ending is Ending.FINISHED:
            return Standing.FINISHING
        reason = gen.end_reason
        standing = None if reason is None else _STANDING_OF_STOP.get(reason)
        if gen.ending is not Ending.STOPPED or standing is None:
            raise InvariantError(f"generation {gen.id!r} closed for {gen.ending} with {gen.end_reason}")
        return standing

    def end_generation(self, gen: GenerationState, how: Exit, error: str | None = None) -> Event:
        """Publish the terminal event of ``gen`` and forget it as current (C17, C19).

        ``how`` is how the block around the generation was left; ``ENDINGS`` decides
        the ending. A write left unconfirmed is unknown; anything still pending is held.
        ``error`` (the exception's type name) rides on a ``generation.failed``.
        """
        if gen.phase is _ENDED or self.current is not gen:  # ``_require_current``'s test first
            self._require_current(gen, "end")
        record = gen.writing
        if record is not None and gen.in_barrier:
            # Left while the write barrier ran (another task left the block): the writer never
            # saw it (C15), so it is pending again and ends as the rest of the queue does.
            gen.writing, gen.in_barrier = None, False
            self._move(record, Action.RETURN)
            gen.pending.appendleft(record)
        # ``standing(gen)``, its commonest answer written out: a generation that decided to finish
        standing = _FINISHING if gen.ending is _FINISHED and gen.phase is not OPEN else self.standing(gen)
        ending, reason = ENDINGS[how, standing]
        # A fact: the block was left. If the clock raises, the generation still ends
        # (``_fact_time``, written out: once per generation) and then the clock's error is raised.
        try:
            time = self._clock()
            clock_error = None
        except Exception as raised:  # (not ``error``: that is the argument, the block's exception)
            time, clock_error = self._last_time, raised
        if gen.writing is not None:
            self._interrupt(gen, gen.writing, time)
        if reason is not None:
            self._hold_pending(gen, reason, time)
        if gen.follow_ups:  # C29: carried into the next generation when this one finished, else held
            if reason is None and FOLLOW_UPS_AT_END[ending] is Action.CARRY and not self.closed:
                self._carried.extend(gen.follow_ups)
                gen.follow_ups.clear()
            else:
                self._hold_follow_ups(
                    gen.follow_ups, HoldReason.RUNTIME_CLOSED if reason is None else reason, time
                )
        phase = gen.phase
        if phase in _ENDED_FROM:  # ``_advance(gen, END)`` on its legal paths: the table's answer
            gen.phase = _ENDED_FROM[phase]
        else:
            self._advance(gen, _END)  # raises
        gen.ending = ending
        gen.end_reason = reason
        gen.boundary_active = False
        self.current = None
        if self._admission_sequence == gen.admitted_before and not gen.applied_ids and not gen.carried_ids:
            # Nothing was admitted into it (most generations): no ids to list.
            terminal: dict[str, Any] = {"generation_id": gen.id, "input_ids": [], "accepted_input_ids": []}
        else:
            applied = set(gen.applied_ids)
            terminal = {
                "generation_id": gen.id,
                "input_ids": list(gen.applied_ids),
                # its own admissions and the follow-ups carried into it (C19, C29), not applied
                "accepted_input_ids": [
                    i for i in [*gen.carried_ids, *self._admitted_into(gen)] if i not in applied
                ],
            }
        if reason is not None:
            terminal["reason"] = reason.value
        if error is not None and ending is Ending.FAILED:
            terminal["error"] = error
        if (how, standing) in UNDECIDED_EXITS:
            # Continued, and nothing delivered since: a boundary with input pending applies
            # at least one input or raises, so the loop left before running the continuation.
            continued = gen.applied_at_continue == len(gen.applied_ids)
            terminal["warning"] = CONTINUED_WARNING if continued else UNDECIDED_WARNING
        event = self._envelope(_ENDING_VALUE[ending], time)  # ``_emit``, written out: once per generation
        event.update(terminal)
        self._sink(event)
        if clock_error is not None:
            raise clock_error
        return terminal

    def _admitted_into(self, gen: GenerationState) -> list[str]:
        """The ids admitted into the current generation ``gen``, in admission order. O(their number).

        Admission only ever goes to the running generation and identities are never
        evicted (C11), so they are the newest entries of the insertion-ordered table:
        no per-admission list to keep.
        """
        count = self._admission_sequence - gen.admitted_before
        if not 0 <= count <= len(self.identities):
            raise InvariantError(f"generation {gen.id!r} counts {count} admissions; the runtime has fewer")
        newest = itertools.islice(reversed(self.identities.values()), count)
        ids = [record.input.id for record in newest]
        ids.reverse()  # oldest first
        return ids

    def close(self) -> GenerationState | None:
        """Close the runtime: refuse every later submit, hold what is pending (C17).

        The running generation, if any, is stopped with ``runtime-closed`` and is
        returned so the shell can wake its engine; it still publishes its terminal
        event when its block is left. Idempotent.
        """
        if self.closed:
            return None
        time = self._clock()  # before any change: a raising clock leaves the runtime open
        self.closed = True
        gen = self.current
        if gen is not None:  # a closing one keeps its own ending
            self._close_admission(
                gen, GenerationAction.CLOSE, Ending.STOPPED, HoldReason.RUNTIME_CLOSED, time
            )
            # a generation that decided to finish keeps its ending, but no next one will start
            self._hold_follow_ups(gen.follow_ups, HoldReason.RUNTIME_CLOSED, time)
        self._hold_follow_ups(self._carried, HoldReason.RUNTIME_CLOSED, time)  # C29
        return gen

    # -- introspection --------------------------------------------------------------------

    def statistics(self) -> CoreStatistics:
        """A snapshot of the counters. A pure read: it publishes nothing, not even an owed event."""
        gen = self.current
        return CoreStatistics(
            identities=len(self.identities),
            identity_limit=self.identity_limit,
            pending=0 if gen is None else len(gen.pending),
            generations_started=self._generations_started,
            accepted=self._admission_sequence,
            repeated=self._repeated,
            refused=self._refused,
            applied=self._final_counts[InputState.APPLIED],
            held=self._final_counts[InputState.HELD],
            unknown=self._final_counts[InputState.UNKNOWN],
            follow_ups=self.follow_ups_pending,
            events_emitted=self._event_sequence,
            closed=self.closed,
        )

    @property
    def steering_mode(self) -> DeliveryMode:
        """How much of the pending steers one boundary writes (C30)."""
        return self._modes.steering

    @property
    def follow_up_mode(self) -> DeliveryMode:
        """How much of the pending follow-ups one boundary writes (C30)."""
        return self._modes.follow_up

    @property
    def follow_ups_pending(self) -> int:
        """Follow-ups waiting for their anchor to finish or for the next generation (C29). O(1)."""
        gen = self.current
        return len(self._carried) + (0 if gen is None else len(gen.follow_ups))

    def steers_pending(self, gen: GenerationState) -> list[str]:
        """The ids of the steers (not follow-ups) pending in ``gen``, in order (C31). O(pending)."""
        if self._owed is not None:
            self.settle()
        return [r.input.id for r in gen.pending if r.target is None]

    def skip_tools(self, gen: GenerationState, tool_call_ids: list[str]) -> list[str]:
        """The loop skips ``tool_call_ids``, the rest of a tool batch, because steers are pending
        (C31): publishes ``tools.skipped {generation_id, tool_call_ids, input_ids}`` and returns
        the pending steers' ids. ``GenerationStateError``, changing nothing, when none is pending
        (a skip needs a steer to justify it) or the generation ended."""
        self._require_current(gen, "skip tools")
        input_ids = self.steers_pending(gen)
        if not input_ids:
            raise GenerationStateError("no steer is pending: a tool batch is skipped only for a steer (C31)")
        self._emit(
            "tools.skipped",
            {"generation_id": gen.id, "tool_call_ids": list(tool_call_ids), "input_ids": input_ids},
            self._clock(),
        )
        return input_ids

    @property
    def events_published(self) -> int:
        """Events handed to the sink so far (the sequence of the last one). O(1)."""
        return self._event_sequence

    def _check(self) -> None:
        """Assert every invariant of the theory of operation; raise ``InvariantError``."""

        def require(condition: bool, message: str) -> None:
            if not condition:
                raise InvariantError(message)

        identities = self.identities
        require(len(identities) <= self.identity_limit, "identity limit exceeded")
        require(len(identities) == self._admission_sequence, "an identity was evicted or lost")
        require(
            all(record.sequence == n for n, record in enumerate(identities.values(), 1)),
            "identity table out of admission order",
        )
        gen = self.current
        live: set[int] = set()
        if gen is not None:
            require(gen.phase is not Phase.ENDED, "an ended generation is current")
            require(
                gen.id in self._generation_ids or self._was_issued(gen.id),
                "the current generation's id was never started",
            )
            if gen.phase is Phase.OPEN:
                require(gen.ending is None and gen.end_reason is None, "an open generation has an ending")
                require(not self.closed, "the runtime is closed while a generation is open")
            else:
                require(gen.ending is not None, "a generation closed admission without an ending")
                require(not gen.pending, "input pending after admission closed")
                require(
                    not gen.follow_ups or gen.ending is Ending.FINISHED,
                    "follow-ups kept by a generation that closed admission to stop",
                )
                self.standing(gen)  # raises for an ending that does not fit its reason
            require(
                0 <= gen.admitted_before <= self._admission_sequence,
                "a generation started after more admissions than the runtime made",
            )
            sequences = [r.sequence for r in gen.pending]
            require(sequences == sorted(sequences), "pending queue out of admission order")
            for record in gen.pending:
                require(record.state is InputState.PENDING, "non-pending record in the queue")
                require(
                    record.generation_id == gen.id
                    if record.target is None
                    else record.target == gen.id and record.input.id in gen.carried_ids,
                    "input queued in a foreign generation",
                )
                require(identities.get(record.input.id) is record, "a queued record is not the table's")
                live.add(id(record))
            for record in gen.follow_ups:
                require(record.state is InputState.DEFERRED, "a follow-up kept for later is not deferred")
                require(
                    record.generation_id == gen.id, "a follow-up kept by a generation it is not anchored to"
                )
                require(identities.get(record.input.id) is record, "a kept follow-up is not the table's")
                live.add(id(record))
            require(not self._carried, "follow-ups left uncarried while a generation runs")
            writing = gen.writing
            require(not gen.in_barrier or writing is not None, "in the write barrier with nothing to write")
            if writing is not None:
                require(writing.state is InputState.WRITING, "writer holds a non-writing record")
                require(gen.boundary_active, "a write outside a boundary")
                require(identities.get(writing.input.id) is writing, "the record written is not the table's")
                live.add(id(writing))
            require(len(gen.applied_ids) == len(set(gen.applied_ids)), "an input applied twice")
            admitted = self._admitted_into(gen)
            require(
                all(identities[i].generation_id == gen.id for i in admitted),
                "an input admitted into this generation is anchored elsewhere",
            )
            require(
                set(gen.applied_ids) <= set(admitted) | set(gen.carried_ids),
                "an input applied in a generation it was not admitted or carried to",
            )
            require(
                all(identities[i].target == gen.id for i in gen.carried_ids),
                "a follow-up listed as carried into this generation was carried elsewhere",
            )
            require(
                all(identities[i].state is InputState.APPLIED for i in gen.applied_ids),
                "an input listed as applied is not applied",
            )
        require(not self.closed or not self._carried, "follow-ups carried past the runtime's close")
        for record in self._carried:
            require(record.state is InputState.DEFERRED, "a carried follow-up is not deferred")
            require(identities.get(record.input.id) is record, "a carried follow-up is not the table's")
            live.add(id(record))
        counts = {state: 0 for state in InputState}
        for input_id, record in identities.items():
            require(record.input.id == input_id, "identity keyed under the wrong id")
            state = record.state
            counts[state] += 1
            if state in (InputState.PENDING, InputState.WRITING, InputState.DEFERRED):
                require(id(record) in live, f"input {input_id!r} queued outside the live generation")
            if record.input.kind == FOLLOW_UP:  # written only once carried into the next generation
                require(
                    state in (InputState.DEFERRED, InputState.HELD) or record.target is not None,
                    f"follow-up {input_id!r} is {state.value} without being carried (C29)",
                )
            else:
                require(
                    state is not InputState.DEFERRED and record.target is None,
                    f"steer {input_id!r} was deferred or carried as a follow-up",
                )
            if state is InputState.HELD:
                require(record.reason in _HOLD_REASONS, f"held input {input_id!r} has no hold reason")
            elif state is InputState.UNKNOWN:
                require(
                    record.reason is HoldReason.WRITE_INTERRUPTED,
                    f"unknown input {input_id!r} carries {record.reason} instead of write-interrupted",
                )
            else:
                require(record.reason is None, f"input {input_id!r} is {state.value} with a reason")
            cached = record._receipt
            if cached is not None:
                require(
                    cached.disposition is record.disposition and cached.reason == record.reason,
                    f"the cached receipt of {input_id!r} is stale",
                )
        for state, count in self._final_counts.items():
            require(counts[state] == count, f"{state.value} counter drifted")
        for input_id, retained in (self._retained or {}).items():
            require(input_id not in identities, f"retained identity {input_id!r} was admitted again")
            require(
                retained.receipt.accepted and retained.receipt.input_id == input_id,
                f"retained identity {input_id!r} carries another input's receipt",
            )
        owed = self._owed
        if owed is not None:
            require(owed.sequence == self._admission_sequence, "an event is owed for an older admission")
            require(
                owed.state is ADMITTED_STATE[owed.input.kind],
                "an input moved before its acceptance was published",
            )
