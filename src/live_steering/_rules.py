"""The rules the sans-IO core applies, as tables: states, moves, endings and their reasons.

Every decision of ``_core.SteeringCore`` that can be a table is one, here: an input's
states and their public disposition, the only legal moves of an input
(``INPUT_TRANSITIONS``, C20) and of a generation (``GENERATION_TRANSITIONS``), how a
generation ends (``ENDINGS``: how its block was left x where it stood, C17, C19),
the reasons a stop may give (``STOP_REASONS``), the check after the checkpoint
(``AFTER_CHECKPOINT``, C16, C17) and the forgotten decision (``UNDECIDED_EXITS``).
A reader asking "where is a disposition decided?" starts here; ``_core.py`` is
the machine that applies these, and ``tests/test_core_invariants.py`` checks the
tables are complete.

It holds no state and does nothing: constants, enums and one pure function
(``exit_of``). It must never import anything above ``_types`` and ``_errors``.
"""

from __future__ import annotations

import enum
from typing import Final

from ._errors import GenerationClosedError, GenerationStopped, RuntimeClosedError
from ._types import Disposition, HoldReason, StopReason

__all__ = [
    "ADMITTED_STATE",
    "AFTER_CHECKPOINT",
    "CONTINUED_WARNING",
    "CORE_EVENT_PREFIXES",
    "DEFAULT_GENERATION_ID_LIMIT",
    "DEFAULT_IDENTITY_LIMIT",
    "DEFAULT_MAX_TEXT_CHARS",
    "DELIVERY",
    "DISPOSITION_OF",
    "DISPOSITION_VALUE",
    "FOLLOW_UP",
    "FOLLOW_UPS_AT_END",
    "FOLLOW_UP_DELIVERY",
    "KINDS",
    "MODE_QUOTA",
    "SKIPPED_TOOL_RESULT",
    "STOPPED_TOOL_RESULT",
    "STEER",
    "ENDINGS",
    "ENDING_VALUE",
    "FINAL_STATES",
    "GENERATION_TRANSITIONS",
    "HOLD_REASONS",
    "INPUT_TRANSITIONS",
    "STANDING_OF_STOP",
    "STOP_OF_HOLD",
    "STOP_REASONS",
    "UNDECIDED_EXITS",
    "UNDECIDED_WARNING",
    "Action",
    "CheckpointDecision",
    "DeliveryMode",
    "Ending",
    "Exit",
    "GenerationAction",
    "InputState",
    "Phase",
    "Standing",
    "exit_of",
]

DEFAULT_IDENTITY_LIMIT: Final = 2_000
#: Generation ids a caller may choose per runtime (``open_generation(id)``): each is
#: remembered so that none is used twice (C18); ids the runtime issues cost nothing.
DEFAULT_GENERATION_ID_LIMIT: Final = 10_000
DEFAULT_MAX_TEXT_CHARS: Final = 16_000
DELIVERY: Final = "request_boundary"
#: The ``delivery`` of a follow-up's writes (C29): written at the first boundary of the
#: generation after its anchor, not at a boundary of the anchor itself.
FOLLOW_UP_DELIVERY: Final = "follow_up"
#: The kinds the capability takes (C7, C29): a steer lands in the running generation, a
#: follow-up in the next one.
STEER: Final = "steer"
FOLLOW_UP: Final = "follow_up"
KINDS: Final = frozenset({STEER, FOLLOW_UP})
#: The result a skipped tool call gets (C31, pinned): every tool call keeps a result, so the
#: transcript stays valid for every provider.
SKIPPED_TOOL_RESULT: Final = "Skipped: a steering message arrived before this tool ran."
#: The tool result a tool call gets when the turn is cancelled (ACP's ``session/cancel``, a
#: cancelled task) before it returned: OpenAI-compatible endpoints refuse (HTTP 400) every
#: later request of a conversation in which an assistant's tool call has no tool message, so
#: every call gets one.
TOOL_CANCELLED_RESULT: Final = "Cancelled: the turn was cancelled before this tool returned a result."
#: The tool result a tool call gets when the turn fails (a tool or a hook that raised, the
#: client gone) before it returned; for the same reason as ``TOOL_CANCELLED_RESULT``.
TOOL_FAILED_RESULT: Final = "Failed: the turn ended with an error before this tool returned a result."
#: The result a tool call gets when the run was stopped (a host's stop, a cancellation the loop
#: heard of) before that tool started: every tool call keeps a result, as providers require.
STOPPED_TOOL_RESULT: Final = "Not run: the run was stopped before this tool started."


class InputState(enum.Enum):
    """Internal lifecycle of an accepted input; ``disposition`` is what hosts see."""

    PENDING = "pending"  # in the boundary queue
    DEFERRED = "deferred"  # a follow-up waiting for its anchor generation to finish (C29)
    WRITING = "writing"  # handed to the context writer, not yet confirmed
    APPLIED = "applied"
    HELD = "held"
    UNKNOWN = "unknown"

    # Members are singletons, so hash them by identity, in C: ``Enum.__hash__`` is a
    # Python call, and states key the transition table and the counters on the path of
    # every input written (docs/performance.md, "Enum members on the hot path").
    __hash__ = object.__hash__

    @property
    def disposition(self) -> Disposition:
        return DISPOSITION_OF[self]

    @property
    def final(self) -> bool:
        return self in FINAL_STATES


DISPOSITION_OF: Final = {
    InputState.PENDING: Disposition.QUEUED,
    InputState.DEFERRED: Disposition.QUEUED,
    InputState.WRITING: Disposition.QUEUED,
    InputState.APPLIED: Disposition.APPLIED,
    InputState.HELD: Disposition.HELD,
    InputState.UNKNOWN: Disposition.UNKNOWN,
}
FINAL_STATES: Final = frozenset({InputState.APPLIED, InputState.HELD, InputState.UNKNOWN})
#: The plain string a ``steering.repeated`` event carries (enum ``.value`` is slow on the hot path).
DISPOSITION_VALUE: Final = {state: disposition.value for state, disposition in DISPOSITION_OF.items()}


class Action(enum.Enum):
    """What the core may do to an accepted input."""

    BEGIN_WRITE = "begin-write"  # the boundary hands it to the writer
    RETURN = "return"  # not handed after all (cancelled before the writer ran)
    CONFIRM = "confirm"  # the writer returned: applied (C14)
    INTERRUPT = "interrupt"  # the writer was cancelled or raised: unknown (C15)
    HOLD = "hold"  # the generation ends without writing it (C17)
    CARRY = "carry"  # a follow-up's anchor finished; the next generation started: it joins its queue (C29)

    __hash__ = object.__hash__  # as InputState's: actions key the transition table


#: The only legal moves of an input (C20). Anything else raises ``InvariantError``
#: and changes nothing.
INPUT_TRANSITIONS: Final[dict[tuple[InputState, Action], InputState]] = {
    (InputState.PENDING, Action.BEGIN_WRITE): InputState.WRITING,
    (InputState.PENDING, Action.HOLD): InputState.HELD,
    (InputState.DEFERRED, Action.CARRY): InputState.PENDING,
    (InputState.DEFERRED, Action.HOLD): InputState.HELD,
    (InputState.WRITING, Action.RETURN): InputState.PENDING,
    (InputState.WRITING, Action.CONFIRM): InputState.APPLIED,
    (InputState.WRITING, Action.INTERRUPT): InputState.UNKNOWN,
}


class Phase(enum.Enum):
    """Lifecycle of a generation."""

    OPEN = "open"  # admission open
    CLOSING = "closing"  # admission closed; nothing pending; terminal event not yet published
    ENDED = "ended"  # terminal event published

    __hash__ = object.__hash__  # as InputState's: they key the generation tables


class GenerationAction(enum.Enum):
    """What may happen to a generation."""

    FINISH = "finish"  # the check after the checkpoint found nothing pending (C16)
    STOP = "stop"  # ``stop()``: a stop or an exhausted budget (C17)
    CLOSE = "close"  # the runtime closed (C17)
    END = "end"  # its block was left: the terminal event (C19)

    __hash__ = object.__hash__  # as InputState's: they key the generation tables


#: The only legal moves of a generation. Closing a generation whose admission is
#: already closed changes nothing (the first ending stands); nothing moves an ended
#: one. Anything else raises ``InvariantError`` and changes nothing.
GENERATION_TRANSITIONS: Final[dict[tuple[Phase, GenerationAction], Phase]] = {
    (Phase.OPEN, GenerationAction.FINISH): Phase.CLOSING,
    (Phase.OPEN, GenerationAction.STOP): Phase.CLOSING,
    (Phase.OPEN, GenerationAction.CLOSE): Phase.CLOSING,
    (Phase.OPEN, GenerationAction.END): Phase.ENDED,
    (Phase.CLOSING, GenerationAction.FINISH): Phase.CLOSING,
    (Phase.CLOSING, GenerationAction.STOP): Phase.CLOSING,
    (Phase.CLOSING, GenerationAction.CLOSE): Phase.CLOSING,
    (Phase.CLOSING, GenerationAction.END): Phase.ENDED,
}


class Ending(enum.Enum):
    """How a generation ended, with its terminal event type (C19)."""

    FINISHED = "generation.finished"
    STOPPED = "generation.stopped"
    CANCELLED = "generation.cancelled"
    FAILED = "generation.failed"

    __hash__ = object.__hash__  # as InputState's: they key the generation tables


#: The event type of each ending (enum ``.value`` is slow: it runs once per generation).
ENDING_VALUE: Final = {ending: ending.value for ending in Ending}


class Exit(enum.Enum):
    """How the engine left a generation's block; the shell tells, ``ENDINGS`` decides."""

    RETURNED = "returned"
    """Left normally."""
    STOP_SIGNAL = "stop-signal"
    """Left by the library's own refusal of a boundary: the stop signal
    (``GenerationStopped``), ``RuntimeClosedError`` or ``GenerationClosedError``: how
    a loop runs into a stop made by another task."""
    CANCELLED = "cancelled"
    """Left by the backend's cancellation (also a group of nothing else)."""
    RAISED = "raised"
    """Left by any other exception."""

    __hash__ = object.__hash__  # as InputState's: they key the generation tables


class Standing(enum.Enum):
    """Where a generation stood when its block was left (``SteeringCore.standing``)."""

    OPEN = "open"
    """Admission open, nothing pending."""
    OPEN_PENDING = "open-pending"
    """Admission open, input pending: left without the check after the checkpoint."""
    FINISHING = "finishing"
    """The check after the checkpoint closed admission."""
    STOPPED = "stopped"
    """``stop()`` closed admission."""
    BUDGET_EXHAUSTED = "budget-exhausted"
    """``stop(HoldReason.BUDGET_EXHAUSTED)`` closed admission."""
    RUNTIME_CLOSED = "runtime-closed"
    """The runtime's close closed admission."""

    __hash__ = object.__hash__  # as InputState's: they key the generation tables


def _endings() -> dict[tuple[Exit, Standing], tuple[Ending, HoldReason | None]]:
    finished = (Ending.FINISHED, None)
    stopped = (Ending.STOPPED, HoldReason.GENERATION_STOPPED)
    budget = (Ending.STOPPED, HoldReason.BUDGET_EXHAUSTED)
    closed = (Ending.STOPPED, HoldReason.RUNTIME_CLOSED)
    failed = (Ending.FAILED, HoldReason.GENERATION_FAILED)
    failed_closed = (Ending.FAILED, HoldReason.RUNTIME_CLOSED)
    cancelled = (Ending.CANCELLED, HoldReason.GENERATION_CANCELLED)
    cancelled_closed = (Ending.CANCELLED, HoldReason.RUNTIME_CLOSED)
    rows = {
        # Standing:       OPEN       OPEN_PENDING FINISHING  STOPPED    BUDGET_EXH. RUNTIME_CLOSED
        Exit.RETURNED:    (finished,  stopped,     finished,  stopped,   budget,     closed),
        Exit.STOP_SIGNAL: (failed,    failed,      failed,    stopped,   budget,     closed),
        Exit.CANCELLED:   (cancelled, cancelled,   cancelled, cancelled, cancelled,  cancelled_closed),
        Exit.RAISED:      (failed,    failed,      failed,    failed,    failed,     failed_closed),
    }  # fmt: skip
    return {(how, standing): row[i] for how, row in rows.items() for i, standing in enumerate(Standing)}


class DeliveryMode(enum.StrEnum):
    """How much of the pending queue one boundary writes (C30), per kind of input."""

    ALL = "all"
    """The whole pending batch (the default)."""
    ONE_AT_A_TIME = "one-at-a-time"
    """Only the oldest input of that kind; the rest stay pending, in order, for the next
    boundary (and, at the checkpoint, continue the generation as C16 says)."""


#: Inputs of one kind a boundary writes in each mode (C30).
MODE_QUOTA: Final[dict[DeliveryMode, int]] = {DeliveryMode.ALL: 1 << 62, DeliveryMode.ONE_AT_A_TIME: 1}

#: Where admission puts an input of each kind (C9, C29): a steer into the running generation's
#: boundary queue, a follow-up aside until that generation finishes.
ADMITTED_STATE: Final = {STEER: InputState.PENDING, FOLLOW_UP: InputState.DEFERRED}

#: What becomes of the follow-ups admitted into a generation when it ends (C29): carried into
#: the next generation when it finished, else held with the generation's hold reason (the
#: ``ENDINGS`` row's): a stop, a cancellation or a failure discards the plan, never runs it.
FOLLOW_UPS_AT_END: Final[dict[Ending, Action]] = {
    Ending.FINISHED: Action.CARRY,
    Ending.STOPPED: Action.HOLD,
    Ending.CANCELLED: Action.HOLD,
    Ending.FAILED: Action.HOLD,
}

#: How a generation ends (C17, C19): how its block was left and where it stood then ->
#: its terminal event and the reason the inputs still pending are held with (``None``:
#: nothing can be pending, and the terminal event carries no reason). A stop stands
#: when the loop returns or runs into it; a cancellation or an error says how the
#: generation ended, except that a runtime's close keeps its reason.
ENDINGS: Final = _endings()

#: The reasons ``stop()`` may give (C17) -> the reason the pending inputs are held with
#: (the same string); ``runtime-closed`` is the runtime's close, not a stop.
STOP_REASONS: Final[dict[StopReason, HoldReason]] = {
    StopReason.GENERATION_STOPPED: HoldReason.GENERATION_STOPPED,
    StopReason.BUDGET_EXHAUSTED: HoldReason.BUDGET_EXHAUSTED,
}
STOP_OF_HOLD: Final = {hold: stop for stop, hold in STOP_REASONS.items()}

#: How the block was left x where it stood, for the endings that mean the loop forgot
#: the after-checkpoint decision: it returned with input pending, so that input is
#: held (``generation-stopped``) rather than continued. The terminal event says so
#: (``"warning": "no-checkpoint-decision"``) and the shell warns
#: (``CheckpointDecisionWarning``).
UNDECIDED_EXITS: Final = frozenset({(Exit.RETURNED, Standing.OPEN_PENDING)})
UNDECIDED_WARNING: Final = "no-checkpoint-decision"
#: The same exit, but the last decision was to continue and no boundary delivered
#: anything since: the loop announced a continuation it did not run.
CONTINUED_WARNING: Final = "left-after-continue"


class CheckpointDecision(enum.Enum):
    """What the check after the checkpoint decides (``AFTER_CHECKPOINT``)."""

    CONTINUE = "continue"
    """Input is pending and a model call may still be made: ``generation.continued``."""
    FINISH = "finish"
    """Nothing is pending: admission closes, the generation finishes."""
    STOP_BUDGET = "stop-budget"
    """Input is pending but no model call may be made: stopped ``budget-exhausted``,
    decided before any ``generation.continued`` (C17)."""

    __hash__ = object.__hash__  # as InputState's: they key the generation tables


#: The check after the checkpoint (C16, C17): (input pending, a model call may still be
#: made) -> the decision. Nothing is ever announced as continued that then cannot run.
AFTER_CHECKPOINT: Final[dict[tuple[bool, bool], CheckpointDecision]] = {
    (True, True): CheckpointDecision.CONTINUE,
    (True, False): CheckpointDecision.STOP_BUDGET,
    (False, True): CheckpointDecision.FINISH,
    (False, False): CheckpointDecision.FINISH,
}

STANDING_OF_STOP: Final = {
    HoldReason.GENERATION_STOPPED: Standing.STOPPED,
    HoldReason.BUDGET_EXHAUSTED: Standing.BUDGET_EXHAUSTED,
    HoldReason.RUNTIME_CLOSED: Standing.RUNTIME_CLOSED,
}
#: Reasons a HELD record may carry in a runtime (``runtime-lost`` is the journal's, C23).
HOLD_REASONS: Final = frozenset(
    {
        HoldReason.GENERATION_STOPPED,
        HoldReason.GENERATION_CANCELLED,
        HoldReason.GENERATION_FAILED,
        HoldReason.BUDGET_EXHAUSTED,
        HoldReason.RUNTIME_CLOSED,
    }
)
#: Event types only the core publishes; a wing's own events (``publish``) take other names.
CORE_EVENT_PREFIXES: Final = ("generation.", "steering.", "input.", "tools.")


def exit_of(exc: BaseException | None, *, cancelled: bool) -> Exit:
    """How a block was left, from the exception leaving it. ``cancelled``: the shell's verdict
    that ``exc`` is the backend's cancellation (the core knows no backend)."""
    if exc is None:
        return Exit.RETURNED
    if cancelled:
        return Exit.CANCELLED
    if isinstance(exc, (GenerationStopped, GenerationClosedError, RuntimeClosedError)):
        return Exit.STOP_SIGNAL
    return Exit.RAISED
