"""The sans-IO steering core: every admission, identity and disposition decision.

Theory of operation
-------------------
One ``SteeringCore`` per runtime. It never awaits, never does I/O and never
looks at a clock it was not given; the anyio shell (``_runtime.py``) calls it,
then parks or wakes tasks according to what it returned. Everything a test
needs to prove a rule of CONTRACT.md can be proved here without an event loop.

State, and the invariants ``_check()`` asserts after any step:

* ``identities`` maps every accepted input id to its ``InputRecord``; at most
  ``identity_limit`` of them, never evicted (C11). Refusals touch nothing (C6).
* Each record moves along ``INPUT_TRANSITIONS`` only (C20): PENDING and WRITING
  are the two halves of the public ``queued``; APPLIED, HELD and UNKNOWN are final.
* Only the current generation has PENDING records, in its ``pending`` deque, in
  admission order (C13); at most one record is WRITING, the boundary's.
* A generation whose admission is closed (phase CLOSING) has nothing pending:
  closing either holds what is pending (stop, cancel, failure, budget) or
  happens only when nothing is pending (after the checkpoint, C16), in the same
  synchronous step as the check.
* An ended generation has nothing PENDING or WRITING: every input it accepted
  is APPLIED, HELD or UNKNOWN (C17-C19).

Every state change is reported as a pinned event dict (C21) through ``sink``.
One event may wait briefly: an admission's ``steering.accepted`` is *owed* until
the shell calls ``publish_owed()`` (after the woken engine's first step, so that
building and fanning it out is not on the path from a submit to the engine it
wakes) or until anything else is published or moves a record, whichever comes
first. At most one admission is owed at a time, so the stream's order is the
order of the changes, and ``submit`` never returns before its event is out.
"""

from __future__ import annotations

import collections
import enum
import itertools
from collections.abc import Callable
from typing import Any, Final

import attrs

from ._errors import GenerationClosedError, GenerationStateError, InvariantError, RuntimeClosedError
from ._types import Disposition, HoldReason, Input, Receipt, RefusalReason, utf8_encodable

__all__ = [
    "DEFAULT_IDENTITY_LIMIT",
    "DEFAULT_MAX_TEXT_CHARS",
    "DELIVERY",
    "Action",
    "CoreStatistics",
    "Ending",
    "GenerationState",
    "INPUT_TRANSITIONS",
    "InputRecord",
    "InputState",
    "OPEN",
    "Phase",
    "SteeringCore",
]

DEFAULT_IDENTITY_LIMIT: Final = 2_000
DEFAULT_MAX_TEXT_CHARS: Final = 16_000
MAX_ID_CHARS: Final = 128
DELIVERY: Final = "request_boundary"
#: Refusal events carry at most this much of a (possibly hostile) id, so that the
#: bounded event log stays bounded in bytes too. The receipt carries the full id.
_EVENT_ID_CHARS: Final = 256

Event = dict[str, Any]
EventSink = Callable[[Event], None]


class InputState(enum.Enum):
    """Internal lifecycle of an accepted input; ``disposition`` is what hosts see."""

    PENDING = "pending"  # in the boundary queue
    WRITING = "writing"  # handed to the context writer, not yet confirmed
    APPLIED = "applied"
    HELD = "held"
    UNKNOWN = "unknown"

    # Members are singletons, so hash them by identity, in C: ``Enum.__hash__`` is a
    # Python call (about 90 ns against 17), and states key the transition table and
    # the counters on the path of every input written.
    __hash__ = object.__hash__

    @property
    def disposition(self) -> Disposition:
        return _DISPOSITION_OF[self]

    @property
    def final(self) -> bool:
        return self in _FINAL


_DISPOSITION_OF: Final = {
    InputState.PENDING: Disposition.QUEUED,
    InputState.WRITING: Disposition.QUEUED,
    InputState.APPLIED: Disposition.APPLIED,
    InputState.HELD: Disposition.HELD,
    InputState.UNKNOWN: Disposition.UNKNOWN,
}
_FINAL: Final = frozenset({InputState.APPLIED, InputState.HELD, InputState.UNKNOWN})
#: The plain string a ``steering.repeated`` event carries (enum ``.value`` is slow on the hot path).
_DISPOSITION_VALUE: Final = {state: disposition.value for state, disposition in _DISPOSITION_OF.items()}


class Action(enum.Enum):
    """What the core may do to an accepted input."""

    BEGIN_WRITE = "begin-write"  # the boundary hands it to the writer
    RETURN = "return"  # not handed after all (cancelled before the writer ran)
    CONFIRM = "confirm"  # the writer returned: applied (C14)
    INTERRUPT = "interrupt"  # the writer was cancelled or raised: unknown (C15)
    HOLD = "hold"  # the generation ends without writing it (C17)

    __hash__ = object.__hash__  # as InputState's: actions key the transition table


#: The only legal moves of an input (C20). Anything else raises ``InvariantError``
#: and changes nothing.
INPUT_TRANSITIONS: Final[dict[tuple[InputState, Action], InputState]] = {
    (InputState.PENDING, Action.BEGIN_WRITE): InputState.WRITING,
    (InputState.PENDING, Action.HOLD): InputState.HELD,
    (InputState.WRITING, Action.RETURN): InputState.PENDING,
    (InputState.WRITING, Action.CONFIRM): InputState.APPLIED,
    (InputState.WRITING, Action.INTERRUPT): InputState.UNKNOWN,
}


class Phase(enum.Enum):
    """Lifecycle of a generation."""

    OPEN = "open"  # admission open
    CLOSING = "closing"  # admission closed; nothing pending; terminal event not yet published
    ENDED = "ended"  # terminal event published


# The members the paths of every admission and every write use, bound to module names:
# reading a member off its class costs about 100 ns on Python 3.11 (``EnumType`` defines
# ``__getattr__``, which takes every class attribute read off the interpreter's fast
# path), and the path from a submit to the engine has a budget of a few microseconds.
OPEN: Final = Phase.OPEN
_BEGIN_WRITE: Final = Action.BEGIN_WRITE
_CONFIRM: Final = Action.CONFIRM


class Ending(enum.Enum):
    """How a generation ended, with its terminal event type (C19)."""

    FINISHED = "generation.finished"
    STOPPED = "generation.stopped"
    CANCELLED = "generation.cancelled"
    FAILED = "generation.failed"


#: Which hold reason each ending gives the inputs it holds.
_DEFAULT_HOLD_REASON: Final = {
    Ending.STOPPED: HoldReason.GENERATION_STOPPED,
    Ending.CANCELLED: HoldReason.GENERATION_CANCELLED,
    Ending.FAILED: HoldReason.GENERATION_FAILED,
}


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
    _receipt: Receipt | None = attrs.field(default=None, init=False, repr=False)
    """The receipt of the current state, made on first use; ``SteeringCore._move`` resets it."""

    @property
    def disposition(self) -> Disposition:
        return _DISPOSITION_OF[self.state]

    def receipt(self) -> Receipt:
        """The current receipt of this input. O(1); one ``Receipt`` per state, however often asked."""
        receipt = self._receipt
        if receipt is None:
            receipt = Receipt(
                True, self.input.id, self.generation_id, _DISPOSITION_OF[self.state], self.reason
            )
            self._receipt = receipt
        return receipt


@attrs.define(eq=False)
class GenerationState:
    """The core's view of one generation."""

    id: str
    phase: Phase = Phase.OPEN
    pending: collections.deque[InputRecord] = attrs.Factory(collections.deque)
    """Admitted, not yet handed to a writer, in admission order."""
    writing: InputRecord | None = None
    """The input handed to the writer right now, if any."""
    boundary_active: bool = False
    admitted_before: int = 0
    """Admissions of the runtime before this generation started (see ``SteeringCore._admitted_into``)."""
    applied_ids: list[str] = attrs.Factory(list)
    """Every input applied in this generation, in application order."""
    continuations: int = 0
    ending: Ending | None = None
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
    events_emitted: int
    closed: bool


def event_safe(value: str) -> str:
    """A refused (possibly hostile) id as events carry it: bounded, and valid UTF-8.

    At most ``_EVENT_ID_CHARS`` characters; lone surrogates become ``\\udcxx``
    escapes, so a host writing events as UTF-8 text never fails on one.
    """
    value = value if len(value) <= _EVENT_ID_CHARS else value[:_EVENT_ID_CHARS]
    if utf8_encodable(value):
        return value
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


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
    ) -> None:
        if type(identity_limit) is not int or identity_limit < 1:
            raise ValueError(f"identity_limit must be a positive int, got {identity_limit!r}")
        if type(max_text_chars) is not int or max_text_chars < 1:
            raise ValueError(f"max_text_chars must be a positive int, got {max_text_chars!r}")
        self.session_id: Final = session_id
        self.identity_limit: Final = identity_limit
        self.max_text_chars: Final = max_text_chars
        self.boundary_delivery: Final = boundary_delivery
        self._sink = sink
        self._clock = clock
        self.identities: dict[str, InputRecord] = {}
        self.current: GenerationState | None = None
        self.closed = False
        self._event_sequence = 0
        self._admission_sequence = 0
        self._generations_started = 0
        self._repeated = 0
        self._refused = 0
        self._final_counts = {InputState.APPLIED: 0, InputState.HELD: 0, InputState.UNKNOWN: 0}
        self._owed: InputRecord | None = None
        """The last admission while its ``steering.accepted`` is unpublished (see ``publish_owed``)."""

    # -- events ---------------------------------------------------------------------------

    def publish_owed(self) -> None:
        """Publish the owed ``steering.accepted`` of the last admission, if any. O(1).

        The shell calls it when the submitter resumes after the engine an admission
        woke had its first step, and before any read that shows the admission or any
        change of the event's consumers; every other publication and every move of a
        record calls it first.
        """
        record = self._owed
        if record is not None:
            self._owed = None
            self._emit_input("steering.accepted", record)

    def _emit(self, type_: str, fields: dict[str, Any]) -> None:
        if self._owed is not None:
            self.publish_owed()
        self._event_sequence += 1
        event = {
            "type": type_,
            "sequence": self._event_sequence,
            "session_id": self.session_id,
            "time": self._clock(),
        }
        event.update(fields)
        self._sink(event)

    def _emit_input(self, type_: str, record: InputRecord, extra: dict[str, Any] | None = None) -> None:
        # The envelope and fields of every input event (C21), as one dict built in place.
        if self._owed is not None:
            self.publish_owed()
        self._event_sequence += 1
        event = {
            "type": type_,
            "sequence": self._event_sequence,
            "session_id": self.session_id,
            "time": self._clock(),
            "input_id": record.input.id,
            "target_generation_id": record.generation_id,
        }
        if extra is not None:
            event.update(extra)
        self._sink(event)

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
        self.publish_owed()
        return self.queued_receipt(input.id) if receipt is None else receipt

    def decide(self, input: Input, generation_id: str) -> Receipt | None:
        """``submit``, except that an admission returns ``None``.

        A refusal or an identical repeat returns its receipt (``accepted`` tells
        them apart). An admission returns no receipt and leaves its ``steering.accepted`` owed:
        the receipt is fixed (C9) and the event is the costliest step, so the shell
        wakes the engine first, then calls ``publish_owed`` and ``queued_receipt``
        (anything published meanwhile publishes the owed event first).

        The hot path of every submission: it runs in the submitter's step, often
        with cold caches, so it calls as few functions as it can (see
        docs/performance.md); every rule it applies is spelled out in the order
        of C6-C12.
        """
        if not isinstance(input, Input):
            raise TypeError(f"submit takes an Input, got {type(input).__name__}")
        if type(input.id) is not str or type(input.text) is not str or type(input.kind) is not str:
            # Only an Input forged past its converters (object.__setattr__) gets here.
            raise TypeError("submit takes an Input whose kind, text and id are plain str")
        if type(generation_id) is not str:
            if not isinstance(generation_id, str):
                raise TypeError(f"generation_id must be a str, got {type(generation_id).__name__}")
            generation_id = str.__str__(generation_id)
        if self.closed:
            return self._refuse(input, generation_id, RefusalReason.CLOSED, "the runtime is closed")
        if not self.boundary_delivery:
            return self._refuse(
                input, generation_id, RefusalReason.UNAVAILABLE, "request-boundary delivery is off"
            )
        if input.kind != "steer":
            return self._refuse(
                input, generation_id, RefusalReason.UNSUPPORTED_KIND, "only 'steer' is accepted"
            )
        id_ = input.id
        record = self.identities.get(id_)
        if (
            record is not None
            and record.generation_id == generation_id
            # ``record.input == input`` without building two tuples: the ids are equal
            # (the key), both kinds are "steer"; the class test keeps attrs' equality exact.
            and record.input.text == input.text
            and type(record.input) is type(input)
        ):
            # An identical repeat was valid when it was admitted: a lookup and a comparison (C10).
            self._repeated += 1
            # (an owed acceptance, maybe of this very input, is published first)
            self._emit_input("steering.repeated", record, {"disposition": _DISPOSITION_VALUE[record.state]})
            return record.receipt()
        text = input.text
        # What a plain ASCII input of the right size passes cheaply; anything else is
        # decided (and explained) by ``_validate``.
        if not (
            id_
            and len(id_) <= MAX_ID_CHARS
            and text
            and len(text) <= self.max_text_chars
            and id_.isascii()
            and text.isascii()
            and "\x00" not in id_
            and "\x00" not in text
            and not text.isspace()
        ):
            problem = self._validate(input)
            if problem is not None:
                return self._refuse(input, generation_id, RefusalReason.INVALID_INPUT, problem)
        if record is not None:
            return self._refuse(
                input,
                generation_id,
                RefusalReason.IDENTITY_CONFLICT,
                "this id was accepted with other content or another generation",
            )
        gen = self.current
        if gen is None or gen.id != generation_id:
            return self._refuse(
                input, generation_id, RefusalReason.STALE_GENERATION, "not the running generation"
            )
        if gen.phase is not OPEN:
            return self._refuse(
                input, generation_id, RefusalReason.FINISHING, "the generation has closed admission"
            )
        identities = self.identities
        if len(identities) >= self.identity_limit:
            return self._refuse(input, generation_id, RefusalReason.CAPACITY, "the identity limit is reached")
        if self._owed is not None:  # one owed admission at a time keeps the stream in order
            self.publish_owed()
        self._admission_sequence += 1
        record = InputRecord(input, generation_id, self._admission_sequence)
        identities[id_] = record
        gen.pending.append(record)
        self._owed = record  # its steering.accepted: see publish_owed
        return None

    def queued_receipt(self, input_id: str) -> Receipt:
        """The answer to the admission of ``input_id`` (C9): queued, whatever happened since. O(1)."""
        record = self.identities[input_id]
        return Receipt(True, input_id, record.generation_id, Disposition.QUEUED)

    def _validate(self, input: Input) -> str | None:
        id_, text = input.id, input.text
        if not 1 <= len(id_) <= MAX_ID_CHARS:
            return f"id must be 1-{MAX_ID_CHARS} characters"
        if len(text) > self.max_text_chars:
            return f"text is over {self.max_text_chars} characters"
        if not text or text.isspace():
            return "text is blank"
        if "\x00" in id_ or "\x00" in text:
            return "NUL character"
        # ASCII, the common case, is always encodable: skip two calls on the hot path.
        if not ((id_.isascii() and text.isascii()) or (utf8_encodable(id_) and utf8_encodable(text))):
            return "not encodable as UTF-8"
        return None

    def _refuse(self, input: Input, generation_id: str, reason: RefusalReason, detail: str) -> Receipt:
        self._refused += 1
        self._emit(
            "steering.refused",
            {
                "input_id": event_safe(input.id),
                "generation_id": event_safe(generation_id),
                "reason": reason.value,
                "detail": detail,
            },
        )
        return Receipt(False, input.id, generation_id, None, reason.value)

    def receipt(self, input_id: str) -> Receipt | None:
        """The current receipt of an accepted input id, or ``None`` if never accepted. O(1)."""
        record = self.identities.get(input_id)
        return None if record is None else record.receipt()

    # -- transitions ----------------------------------------------------------------------

    def _move(self, record: InputRecord, action: Action, reason: HoldReason | None = None) -> None:
        if self._owed is not None:  # nothing happens to an input before its acceptance is out
            self.publish_owed()
        target = INPUT_TRANSITIONS.get((record.state, action))
        if target is None:
            raise InvariantError(f"input {record.input.id!r}: {action.value} from {record.state.value}")
        record.state = target
        record.reason = reason
        record._receipt = None
        if target in self._final_counts:
            self._final_counts[target] += 1

    def _hold_pending(self, gen: GenerationState, reason: HoldReason) -> None:
        while gen.pending:
            record = gen.pending.popleft()
            self._move(record, Action.HOLD, reason)
            self._emit_input("steering.held", record, {"reason": reason.value})

    # -- generations (C13-C19) ------------------------------------------------------------

    def start_generation(self, generation_id: str) -> GenerationState:
        """Open admission for a new generation. One at a time per runtime."""
        if self.closed:
            raise RuntimeClosedError("the runtime is closed")
        if self.current is not None:
            raise GenerationStateError(
                f"generation {self.current.id!r} is still running; end it before starting another"
            )
        gen = GenerationState(generation_id, admitted_before=self._admission_sequence)
        self.current = gen
        self._generations_started += 1
        self._emit("generation.started", {"generation_id": generation_id})
        return gen

    def _require_current(self, gen: GenerationState, doing: str) -> None:
        if gen.phase is Phase.ENDED or self.current is not gen:
            raise GenerationClosedError(f"generation {gen.id!r} has ended; cannot {doing}")

    def begin_boundary(self, gen: GenerationState) -> None:
        """Start a boundary: the caller will drain with ``next_write`` until it returns None."""
        self._require_current(gen, "run a boundary")
        if gen.phase is not Phase.OPEN:
            if self.closed:
                raise RuntimeClosedError(f"the runtime is closed; generation {gen.id!r} must end")
            raise GenerationClosedError(f"generation {gen.id!r} has closed admission; no boundary")
        if gen.boundary_active:
            raise GenerationStateError(f"a boundary of generation {gen.id!r} is already running")
        gen.boundary_active = True

    def next_write(self, gen: GenerationState) -> InputRecord | None:
        """Hand the oldest pending input to the writer, or ``None`` when drained. O(1)."""
        if gen.writing is not None:
            raise InvariantError("next_write while a write is unconfirmed")
        if not gen.pending or gen.phase is not OPEN:
            return None
        record = gen.pending.popleft()
        self._move(record, _BEGIN_WRITE)
        gen.writing = record
        return record

    def return_write(self, gen: GenerationState, record: InputRecord) -> None:
        """The input was never handed to the writer: back to the head of the queue (C15)."""
        self._take_writing(gen, record)
        self._move(record, Action.RETURN)
        gen.pending.appendleft(record)
        if gen.phase is not Phase.OPEN:  # stopped or closed meanwhile: held like the rest (C17)
            if gen.end_reason is None:  # only a stop or a close closes admission mid-boundary
                raise InvariantError(f"generation {gen.id!r} closed mid-boundary without a reason")
            self._hold_pending(gen, gen.end_reason)

    def confirm_write(self, gen: GenerationState, record: InputRecord) -> Receipt:
        """The writer returned: the input is applied (C14)."""
        self._take_writing(gen, record)
        self._move(record, _CONFIRM)  # publishes an owed acceptance first
        input_id = record.input.id
        gen.applied_ids.append(input_id)
        # The two events of C14, as ``_emit_input`` would build them with the delivery
        # field, in place and with one clock reading: this runs once per input written.
        time = self._clock()
        for type_ in ("input.delivered", "steering.applied"):
            self._event_sequence += 1
            self._sink(
                {
                    "type": type_,
                    "sequence": self._event_sequence,
                    "session_id": self.session_id,
                    "time": time,
                    "input_id": input_id,
                    "target_generation_id": record.generation_id,
                    "delivery": DELIVERY,
                }
            )
        return record.receipt()

    def interrupt_write(self, gen: GenerationState, record: InputRecord) -> None:
        """The writer was cancelled or raised: the effect is unknown (C15)."""
        self._take_writing(gen, record)
        self._move(record, Action.INTERRUPT, HoldReason.WRITE_INTERRUPTED)
        self._emit_input(
            "steering.unknown", record, {"reason": HoldReason.WRITE_INTERRUPTED.value, "delivery": DELIVERY}
        )

    def _take_writing(self, gen: GenerationState, record: InputRecord) -> None:
        if gen.writing is not record:
            raise InvariantError(f"input {record.input.id!r} is not the one being written")
        gen.writing = None

    def end_boundary(self, gen: GenerationState) -> None:
        gen.boundary_active = False

    def after_checkpoint(self, gen: GenerationState) -> bool:
        """The once-more check after the durable checkpoint (C16).

        Pending input: the same generation continues (``generation.continued``),
        returns True. Nothing pending: admission closes in this same synchronous
        step, returns False; a later submit is refused ``finishing``.
        """
        self._require_current(gen, "check after the checkpoint")
        if gen.boundary_active:
            raise GenerationStateError("continue_after_checkpoint() while a boundary is running")
        if gen.phase is not Phase.OPEN:
            return False
        if gen.pending:
            gen.continuations += 1
            self._emit("generation.continued", {"generation_id": gen.id})
            return True
        gen.phase = Phase.CLOSING
        gen.ending = Ending.FINISHED
        return False

    def stop(self, gen: GenerationState, reason: HoldReason = HoldReason.GENERATION_STOPPED) -> None:
        """Close admission and hold every pending input (C17).

        Once admission is closed (an earlier stop, the runtime's close, or the
        after-checkpoint decision to finish) there is nothing left to stop: the call
        changes nothing, so the first ending and its reason stand.
        """
        self._require_current(gen, "stop")
        if gen.phase is not Phase.OPEN:
            return
        gen.phase = Phase.CLOSING
        gen.ending = Ending.STOPPED
        gen.end_reason = reason
        self._hold_pending(gen, reason)

    def end_generation(
        self, gen: GenerationState, ending: Ending, reason: HoldReason | None = None, **fields: Any
    ) -> Event:
        """Publish the terminal event of ``gen`` and forget it as current (C17, C19).

        ``ending`` is how the block around the generation was left; an earlier
        ``stop`` or a closed admission decides for a normal exit. A write left
        unconfirmed is unknown; anything still pending is held.
        """
        self._require_current(gen, "end")
        if ending is Ending.FINISHED:
            if gen.ending is not None:
                ending, reason = gen.ending, gen.end_reason
            elif gen.pending:  # left without the after-checkpoint decision, with input pending
                ending, reason = Ending.STOPPED, HoldReason.GENERATION_STOPPED
        elif gen.ending is Ending.STOPPED and gen.end_reason is HoldReason.RUNTIME_CLOSED:
            reason = HoldReason.RUNTIME_CLOSED
        if ending is not Ending.FINISHED and reason is None:
            reason = _DEFAULT_HOLD_REASON[ending]
        if gen.writing is not None:
            self.interrupt_write(gen, gen.writing)
        if reason is not None:
            self._hold_pending(gen, reason)
        gen.phase = Phase.ENDED
        gen.ending = ending
        gen.end_reason = reason
        gen.boundary_active = False
        self.current = None
        applied = set(gen.applied_ids)
        terminal: dict[str, Any] = {
            "generation_id": gen.id,
            "input_ids": list(gen.applied_ids),
            "accepted_input_ids": [i for i in self._admitted_into(gen) if i not in applied],
        }
        if reason is not None:
            terminal["reason"] = reason.value
        terminal.update(fields)
        self._emit(ending.value, terminal)
        return terminal

    def _admitted_into(self, gen: GenerationState) -> list[str]:
        """The ids admitted into the current generation ``gen``, in admission order. O(their number).

        Admission only ever goes to the running generation and identities are never
        evicted (C11), so they are the newest entries of the insertion-ordered table:
        no per-admission list to keep.
        """
        count = self._admission_sequence - gen.admitted_before
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
        self.closed = True
        gen = self.current
        if gen is not None and gen.phase is Phase.OPEN:  # a closing one keeps its own ending
            gen.phase = Phase.CLOSING
            gen.ending = Ending.STOPPED
            gen.end_reason = HoldReason.RUNTIME_CLOSED
            self._hold_pending(gen, HoldReason.RUNTIME_CLOSED)
        return gen

    # -- introspection --------------------------------------------------------------------

    def statistics(self) -> CoreStatistics:
        self.publish_owed()  # events_emitted counts it
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
            events_emitted=self._event_sequence,
            closed=self.closed,
        )

    def _check(self) -> None:
        """Assert every invariant of the theory of operation; raise ``InvariantError``."""

        def require(condition: bool, message: str) -> None:
            if not condition:
                raise InvariantError(message)

        require(len(self.identities) <= self.identity_limit, "identity limit exceeded")
        require(len(self.identities) == self._admission_sequence, "an identity was evicted or lost")
        gen = self.current
        live: set[int] = set()
        if gen is not None:
            require(gen.phase is not Phase.ENDED, "an ended generation is current")
            require(not gen.pending or gen.phase is Phase.OPEN, "input pending after admission closed")
            sequences = [r.sequence for r in gen.pending]
            require(sequences == sorted(sequences), "pending queue out of admission order")
            for record in gen.pending:
                require(record.state is InputState.PENDING, "non-pending record in the queue")
                require(record.generation_id == gen.id, "input queued in a foreign generation")
                live.add(id(record))
            if gen.writing is not None:
                require(gen.writing.state is InputState.WRITING, "writer holds a non-writing record")
                require(gen.boundary_active, "a write outside a boundary")
                live.add(id(gen.writing))
            require(len(gen.applied_ids) == len(set(gen.applied_ids)), "an input applied twice")
            admitted = self._admitted_into(gen)
            require(
                all(self.identities[i].generation_id == gen.id for i in admitted),
                "an input admitted into this generation is anchored elsewhere",
            )
            require(
                set(gen.applied_ids) <= set(admitted),
                "an input applied in a generation it was not admitted to",
            )
        counts = {state: 0 for state in InputState}
        for input_id, record in self.identities.items():
            require(record.input.id == input_id, "identity keyed under the wrong id")
            counts[record.state] += 1
            if record.state in (InputState.PENDING, InputState.WRITING):
                require(id(record) in live, f"input {input_id!r} queued outside the live generation")
            final_with_reason = record.state in (InputState.HELD, InputState.UNKNOWN)
            require((record.reason is not None) == final_with_reason, "reason does not fit the state")
        for state, count in self._final_counts.items():
            require(counts[state] == count, f"{state.value} counter drifted")
        owed = self._owed
        if owed is not None:
            require(owed.sequence == self._admission_sequence, "an event is owed for an older admission")
            require(owed.state is InputState.PENDING, "an input moved before its acceptance was published")
