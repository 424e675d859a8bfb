"""Value objects hosts code against: ``Input``, ``Receipt`` and the closed vocabularies.

Everything here is immutable and pinned by the library's rules (C3, C4, C7, C17; docs/rules.md): the
names, the wire shape of ``Receipt.to_dict()`` and the string values of the enums
are what hosts persist and compare, so none of them may change.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from typing import Any, Final

import attrs

from ._validate import plain_str

__all__ = [
    "Disposition",
    "HoldReason",
    "Input",
    "Receipt",
    "RefusalReason",
    "StopReason",
]


def _new_input_id() -> str:
    return uuid.uuid4().hex


# One converter per field, so that a wrong type names the field (``Input.text must be a str``).
def _kind(value: object) -> str:
    return value if type(value) is str else plain_str(value, "Input.kind")


def _text(value: object) -> str:
    return value if type(value) is str else plain_str(value, "Input.text")


def _id(value: object) -> str:
    return value if type(value) is str else plain_str(value, "Input.id")


@attrs.frozen
class Input:
    """One piece of input for a running generation.

    >>> Input("steer", "Use the corrected path", id="fix-1")
    Input(kind='steer', text='Use the corrected path', id='fix-1')

    Construction only checks types (``TypeError`` for a non-string); content
    rules (length, blank text, NUL, UTF-8) are decided at admission and answered
    with a refusal receipt, so that a host always gets a receipt it can persist.
    """

    kind: str = attrs.field(converter=_kind)
    """What the input is. The steering capability accepts ``"steer"`` and ``"follow_up"`` (C29)."""
    text: str = attrs.field(converter=_text)
    """The text written into the generation's context."""
    id: str = attrs.field(converter=_id, factory=_new_input_id, kw_only=True)
    """The stable identity (1-128 characters). Repeats with the same id are deduplicated (C10).

    Compared exactly: ids differing only in case or Unicode normalisation are distinct.
    Defaults to a random id, which makes every such input unique; hosts that may retry
    should always pass their own stable id.
    """


class Disposition(enum.StrEnum):
    """What happened to an accepted input (C4). Moves only forward (C20)."""

    QUEUED = "queued"
    """Admitted into the running generation's boundary queue; proves admission only."""
    APPLIED = "applied"
    """Written into the generation's context. Does not prove the model read or obeyed it."""
    HELD = "held"
    """Never written, and never will be: no later turn is started with it. Final."""
    UNKNOWN = "unknown"
    """The context write was interrupted and its effect cannot be established. Final."""


class RefusalReason(enum.StrEnum):
    """Why a submission was refused before admission (C7). Pinned strings."""

    INVALID_INPUT = "invalid-input"
    UNSUPPORTED_KIND = "unsupported-kind"
    UNAVAILABLE = "unavailable"
    STALE_GENERATION = "stale-generation"
    FINISHING = "finishing"
    IDENTITY_CONFLICT = "identity-conflict"
    CAPACITY = "capacity"
    CLOSED = "closed"


class HoldReason(enum.StrEnum):
    """Why an accepted input ended ``held`` or ``unknown`` (C15, C17, C23). Pinned strings."""

    GENERATION_STOPPED = "generation-stopped"
    GENERATION_CANCELLED = "generation-cancelled"
    GENERATION_FAILED = "generation-failed"
    BUDGET_EXHAUSTED = "budget-exhausted"
    RUNTIME_CLOSED = "runtime-closed"
    WRITE_INTERRUPTED = "write-interrupted"
    """Reason of an ``unknown`` input whose context write was interrupted."""
    RUNTIME_LOST = "runtime-lost"
    """Set by the receipt journal's recovery after process loss (C23)."""


class StopReason(enum.StrEnum):
    """Why an engine or a host stops a generation (``Generation.stop``, C17). Pinned strings.

    Each is also the ``HoldReason`` its pending inputs are held with, and the
    ``reason`` of its ``generation.stopped``: the values are the same strings.
    """

    GENERATION_STOPPED = "generation-stopped"
    """Stopped on purpose (by the engine, or by a host)."""
    BUDGET_EXHAUSTED = "budget-exhausted"
    """The loop may make no further model call (its call budget is spent)."""

    @property
    def hold_reason(self) -> HoldReason:
        """The ``HoldReason`` the generation's pending inputs are held with."""
        return HoldReason(self.value)


@attrs.frozen
class Receipt:
    """The answer to one submission (C4).

    >>> Receipt(accepted=True, input_id="fix-1", generation_id="g1",
    ...         disposition=Disposition.QUEUED).to_dict()
    {'accepted': True, 'inputId': 'fix-1', 'generationId': 'g1', 'disposition': 'queued'}
    """

    accepted: bool
    """True when the input was admitted (now, or by the submission this one repeats)."""
    input_id: str
    """The id the submission carried."""
    generation_id: str
    """The generation the submission was anchored to."""
    disposition: Disposition | None
    """Current disposition of an accepted input; ``None`` for a refusal."""
    reason: str | None = None
    """Refusal reason (``RefusalReason``) or the reason of a held/unknown input (``HoldReason``)."""

    def to_dict(self) -> dict[str, Any]:
        """The wire shape ``{"accepted", "inputId", "generationId", "disposition", "reason"}``.

        ``reason`` is omitted when it is ``None``; enums become their plain strings.
        """
        wire: dict[str, Any] = {
            "accepted": self.accepted,
            "inputId": self.input_id,
            "generationId": self.generation_id,
            "disposition": None if self.disposition is None else self.disposition.value,
        }
        if self.reason is not None:
            wire["reason"] = str(self.reason)
        return wire


def _receipt_builder() -> Callable[[bool, str, str, Disposition | None, str | None], Receipt]:
    new = object.__new__
    set_accepted, set_input_id, set_generation_id, set_disposition, set_reason = (
        Receipt.__dict__[field.name].__set__ for field in attrs.fields(Receipt)
    )

    def build_receipt(
        accepted: bool, input_id: str, generation_id: str, disposition: Disposition | None, reason: str | None
    ) -> Receipt:
        receipt: Receipt = new(Receipt)
        set_accepted(receipt, accepted)
        set_input_id(receipt, input_id)
        set_generation_id(receipt, generation_id)
        set_disposition(receipt, disposition)
        set_reason(receipt, reason)
        return receipt

    return build_receipt


#: ``Receipt(accepted, input_id, generation_id, disposition, reason)`` for the library's own
#: hot paths (a receipt per input written): the same object, built through its slots in
#: well under half the time of the frozen class's ``__init__`` (docs/performance.md).
build_receipt: Final = _receipt_builder()
