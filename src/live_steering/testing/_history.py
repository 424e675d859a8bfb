"""A Jepsen-style history checker for steering: operations, receipts and events, checked whole.

What this module owns: ``History`` (a recorder of every submission as an invocation
plus its completion, and of every event a runtime publishes) and ``check_history``
(a pure function that replays an event log, optionally with the recorded
operations, against the library's rules (docs/rules.md) and reports every violation it
finds with the event sequence where it happened). It never touches a runtime's
state and never awaits, so it runs equally on a live recorder, on
``runtime.recent_events()`` or on a log a host saved as JSON.

>>> history = History.attach(runtime)                                # doctest: +SKIP
>>> receipt = await history.submit(Input("steer", "go left", id="a"), gen_id)   # doctest: +SKIP
>>> check_history(history.events, history.operations).assert_ok()    # doctest: +SKIP

What is checked (the library's rules, by number: docs/rules.md):

* events: ``sequence`` strictly increasing (C21); one generation at a time, each
  id started once, its terminal event last and listing exactly what was applied
  (``input_ids``) and what was accepted but not applied (``accepted_input_ids``, C19);
* every accepted input: accepted once (C10), into the running generation it was
  anchored to, ends in exactly one final disposition (applied, held or unknown)
  before its generation's terminal event, or is still queued in the generation
  that is running when the log ends (C17, C20); held and unknown are never later
  applied (C18); applied at most once, announced as ``input.delivered`` directly
  followed by ``steering.applied`` (C14), in admission order within its generation
  (C13), never in another generation than its anchor (C18);
* every repeat names an accepted input, with its anchor, and the disposition it
  reports is the input's current one (C10);
* with operations: each completed submission is matched to the decision event it
  caused (accepted, repeated or refused, for its id and anchor, between its
  invocation and completion); its receipt agrees with that event and with the
  history (a repeat returns the current receipt; a refusal has ``accepted=False``,
  no disposition and the event's reason); a refusal is explained by the history
  where the history can tell (``identity-conflict`` needs the id accepted with
  other content or anchor, ``capacity`` a full identity table, ``stale-generation``
  an anchor that is not running); a refusal or ``TypeError`` changed nothing: it
  caused no event but one ``steering.refused`` (resp. none) and no identity (C6).
  With ``complete=True`` (the default for ``History``) every decision event must
  belong to a recorded operation: an admission nobody asked for is a violation.

Follow-ups (C29): a follow-up is never written in its anchor generation. When its
anchor ends ``generation.finished`` it waits, queued, for the next generation, whose
``generation.started`` must list it in ``follow_up_ids`` (every waiting follow-up, in
admission order, nothing else); it is then finalised only in that generation (its
events name it as ``target_generation_id``; ``delivery: "follow_up"`` on its writes),
and only a ``runtime-closed`` hold may finalise it between the two. If its anchor ends
stopped, cancelled or failed it is held before that terminal event, with the ending's
reason (or, for a cancel or failure after a stop, the stop's), never delivered; a
finished anchor's follow-up is held only ``runtime-closed``. An input's kind is known
from its recorded operation; from events alone an input queued at its generation's
``generation.finished`` may be a follow-up, so it is reported (C17) only once the next
``generation.started`` does not carry it, or at the end of the history with
``require_final``.

Delivery modes (C30, ``steering_mode`` / ``follow_up_mode``; ``History.attach`` reads
them from the runtime): in ``one-at-a-time`` at most one input of that kind (a steer; a
carried follow-up) is handed to the writer (``input.delivered`` or a
``steering.unknown`` write) per boundary. No event marks a boundary, so the checker
counts between *separators*: ``generation.started``, ``generation.continued``, the
terminal event, and the points a test marked with ``History.mark_boundary()``
(``boundary_marks``). A loop that runs several boundaries between two
``generation.continued`` (tool rounds) must mark a point between each two of them (the
provider call is one), or ``one-at-a-time`` would be reported wrongly.

Tool batches (C31): ``tools.skipped`` names the running generation and a non-empty list
of its queued steers, never a follow-up.

A log that does not start at sequence 1 (the bounded ``recent_events()`` after it
dropped its oldest entries) is checked as a window: references to inputs and
generations from before the window are not violations.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from .._errors import LiveSteeringError
from .._types import Disposition, HoldReason, Input, Receipt, RefusalReason
from .._validate import event_safe

__all__ = [
    "History",
    "HistoryReport",
    "HistoryViolationError",
    "Operation",
    "Violation",
    "check_history",
]

_TERMINAL: Final = frozenset(
    {"generation.finished", "generation.stopped", "generation.cancelled", "generation.failed"}
)
_FINAL_EVENTS: Final = {
    "steering.applied": Disposition.APPLIED,
    "steering.held": Disposition.HELD,
    "steering.unknown": Disposition.UNKNOWN,
}
_DECISIONS: Final = frozenset({"steering.accepted", "steering.repeated", "steering.refused"})
_HOLD_REASONS: Final = frozenset(r.value for r in HoldReason) - {HoldReason.WRITE_INTERRUPTED.value}
_UNKNOWN_REASONS: Final = frozenset({HoldReason.WRITE_INTERRUPTED.value, HoldReason.RUNTIME_LOST.value})
_REFUSALS: Final = frozenset(r.value for r in RefusalReason)
_STEER: Final = "steer"
_FOLLOW_UP: Final = "follow_up"
_DELIVERY: Final = {_STEER: "request_boundary", _FOLLOW_UP: "follow_up"}
_MODES: Final = frozenset({"all", "one-at-a-time"})
#: The reasons admission closes for before the block is left (a stop, the budget, the close):
#: a cancel or failure after one holds nothing more, so earlier holds keep that reason.
_STOP_HOLDS: Final = frozenset(
    {HoldReason.GENERATION_STOPPED.value, HoldReason.BUDGET_EXHAUSTED.value, HoldReason.RUNTIME_CLOSED.value}
)


class HistoryViolationError(LiveSteeringError, AssertionError):
    """Raised by ``HistoryReport.assert_ok()``: the history breaks the rules (message lists how)."""


@attrs.frozen
class Violation:
    """One broken rule, located in the history."""

    rule: str
    """The rule it breaks (docs/rules.md), e.g. ``"C20"``."""
    message: str
    """What happened, naming the input or generation."""
    sequence: int | None = None
    """The ``sequence`` of the event where it was detected (``None``: end of history)."""

    def __str__(self) -> str:
        where = "end of history" if self.sequence is None else f"event #{self.sequence}"
        return f"[{self.rule}] {where}: {self.message}"


def _exact(value: object) -> object:
    """A ``str`` subclass (which may lie in ``__eq__``) as a plain ``str``; anything else unchanged."""
    return str.__str__(value) if isinstance(value, str) else value


@attrs.define(eq=False)
class Operation:
    """One submission: its invocation and, once it returned, its completion."""

    index: int
    """Invocation order within the history, from 0."""
    input: object
    """What was submitted (normally an ``Input``; anything else must raise ``TypeError``)."""
    generation_id: object = attrs.field(converter=_exact)
    """The anchor it was submitted with (a ``str`` subclass is kept as its plain value)."""
    invoked_at: int
    """How many events the history held when the submission was invoked."""
    completed_at: int | None = None
    """How many events the history held when it returned; ``None`` while in flight."""
    receipt: Receipt | None = None
    """The receipt it returned."""
    error: str | None = None
    """The type name of the exception it raised instead, if it raised."""

    @property
    def completed(self) -> bool:
        return self.completed_at is not None


@attrs.frozen
class HistoryReport:
    """What ``check_history`` found: the violations and what the history contained."""

    violations: tuple[Violation, ...]
    """Every broken rule found, in the order of the history."""
    events: int
    """Events checked."""
    operations: int
    """Recorded submissions checked."""
    generations: int
    """Generations seen (started, or ended inside a window)."""
    accepted: int
    """``steering.accepted`` events: identities admitted."""
    repeated: int
    """``steering.repeated`` events."""
    refused: int
    """``steering.refused`` events."""
    applied: int
    """Inputs that ended applied."""
    held: int
    """Inputs that ended held."""
    unknown: int
    """Inputs that ended unknown."""
    queued: int
    """Accepted inputs still queued in the generation running when the history ends."""
    complete: bool
    """True when the log starts at sequence 1 (nothing dropped before it)."""

    @property
    def ok(self) -> bool:
        return not self.violations

    def assert_ok(self) -> HistoryReport:
        """Return ``self`` if nothing is violated, else raise ``HistoryViolationError`` listing all."""
        if self.violations:
            lines = "\n".join(f"  {v}" for v in self.violations[:50])
            more = len(self.violations) - 50
            tail = f"\n  ... and {more} more" if more > 0 else ""
            raise HistoryViolationError(
                f"{len(self.violations)} contract violation(s) in a history of {self.events} events"
                f" and {self.operations} operations:\n{lines}{tail}"
            )
        return self


@attrs.define(eq=False)
class _InputModel:
    input_id: str
    generation_id: str
    admitted_at: int
    """Position in the whole log's admission order."""
    content: tuple[str, str] | None = None
    """(kind, text) when known from the operation that was admitted."""
    disposition: Disposition = Disposition.QUEUED
    reason: object = None
    """The ``reason`` of its final event."""
    waiting: str | None = None
    """A follow-up (or, from events alone, maybe one) whose anchor finished, waiting for the
    next generation: the anchor's id (C29)."""
    carried_into: str | None = None
    """The generation whose ``generation.started`` carried it (C29)."""
    stranded: bool = False
    """Reported as left queued when its generation ended (not reported again at the end)."""

    @property
    def kind(self) -> str | None:
        """``steer`` or ``follow_up``: known from its operation, or once it was carried."""
        if self.carried_into is not None:
            return _FOLLOW_UP
        return None if self.content is None else self.content[0]

    @property
    def home(self) -> str:
        """The generation it may be finalised in: its anchor, or where it was carried."""
        return self.generation_id if self.carried_into is None else self.carried_into


@attrs.define(eq=False)
class _GenerationModel:
    id: str
    started: int | None
    accepted: list[str] = attrs.Factory(list)
    """Its inputs: the follow-ups carried into it, then its own admissions (C19, C29)."""
    applied: list[str] = attrs.Factory(list)
    ended: bool = False


class _Checker:
    def __init__(
        self,
        events: Sequence[Mapping[str, Any]],
        operations: Sequence[Operation],
        identity_limit: int | None,
        complete_operations: bool,
        require_final: bool,
        modes: Mapping[str, str] | None = None,
        boundary_marks: Iterable[int] = (),
    ) -> None:
        self.events = events
        self.operations = operations
        self.identity_limit = identity_limit
        self.complete_operations = complete_operations
        self.require_final = require_final
        self.violations: list[Violation] = []
        self.inputs: dict[str, _InputModel] = {}
        self.generations: dict[str, _GenerationModel] = {}
        self.running: _GenerationModel | None = None
        self.complete = not events or events[0].get("sequence") == 1
        self.counts = dict.fromkeys(("accepted", "repeated", "refused", "applied", "held", "unknown"), 0)
        # index of the decision event -> operation that claimed it
        self.claims: dict[int, Operation] = {}
        modes = dict(modes or {})
        for kind in (_STEER, _FOLLOW_UP):
            modes.setdefault(kind, "all")
            if modes[kind] not in _MODES:
                raise ValueError(f"a delivery mode is 'all' or 'one-at-a-time', got {modes[kind]!r}")
        self.one_at_a_time = {kind for kind, mode in modes.items() if mode == "one-at-a-time"}
        self.marks = frozenset(boundary_marks)
        # inputs of each kind handed to the writer since the last separator (C30)
        self.written = dict.fromkeys((_STEER, _FOLLOW_UP), 0)

    def fail(self, rule: str, message: str, event: Mapping[str, Any] | None = None) -> None:
        sequence = None if event is None else event.get("sequence")
        self.violations.append(Violation(rule, message, sequence if isinstance(sequence, int) else None))

    # -- operations <-> decision events ---------------------------------------------------

    def match_operations(self) -> None:
        """Give each completed operation the first unclaimed decision event for its id and anchor."""
        for op in sorted(self.operations, key=lambda o: o.index):
            if op.error is not None:
                continue
            if not isinstance(op.input, Input) or not isinstance(op.generation_id, str):
                if op.completed:
                    self.fail("C6", f"operation {op.index}: a non-Input or non-str anchor got a receipt")
                continue
            end = len(self.events) if op.completed_at is None else op.completed_at
            wanted_id = op.input.id
            for index in range(op.invoked_at, min(end, len(self.events))):
                if index in self.claims:
                    continue
                event = self.events[index]
                if event.get("type") not in _DECISIONS:
                    continue
                event_id = event.get("input_id")
                if event["type"] == "steering.refused":
                    anchor_ok = event.get("generation_id") == event_safe(op.generation_id)
                    id_ok = event_id == event_safe(wanted_id)
                else:
                    anchor_ok = event.get("target_generation_id") == op.generation_id
                    id_ok = event_id == wanted_id
                if id_ok and anchor_ok:
                    self.claims[index] = op
                    break
            else:
                if op.completed:
                    self.fail(
                        "C8",
                        f"operation {op.index} (id {wanted_id[:64]!r}) returned but caused no decision event"
                        " between its invocation and its completion",
                    )
        if self.complete_operations:
            for index, event in enumerate(self.events):
                if event.get("type") in _DECISIONS and index not in self.claims:
                    self.fail(
                        "C6",
                        f"{event['type']} for {str(event.get('input_id'))[:64]!r} matches no recorded"
                        " submission (a submission caused more than one decision, or one went unrecorded)",
                        event,
                    )
        for op in self.operations:
            if op.error is not None and op.error != "TypeError":
                self.fail("C6", f"operation {op.index} raised {op.error}; only TypeError may be raised")

    def check_receipt(self, op: Operation, event: Mapping[str, Any]) -> None:
        receipt = op.receipt
        if receipt is None or not isinstance(op.input, Input):
            return
        where = f"operation {op.index} (id {op.input.id[:64]!r})"
        if receipt.input_id != op.input.id or receipt.generation_id != op.generation_id:
            self.fail(
                "C4", f"{where}: receipt names {receipt.input_id[:64]!r}/{receipt.generation_id!r}", event
            )
        kind = event["type"]
        if kind == "steering.accepted":
            if not (
                receipt.accepted and receipt.disposition is Disposition.QUEUED and receipt.reason is None
            ):
                self.fail("C9", f"{where}: admitted but the receipt says {receipt.to_dict()}", event)
        elif kind == "steering.repeated":
            model = self.inputs.get(op.input.id)
            if not receipt.accepted or receipt.disposition is None:
                self.fail("C10", f"{where}: a repeat answered with a refusal {receipt.to_dict()}", event)
            elif receipt.disposition.value != event.get("disposition"):
                self.fail(
                    "C10",
                    f"{where}: repeat receipt says {receipt.disposition.value}, its event says"
                    f" {event.get('disposition')}",
                    event,
                )
            elif model is not None and receipt.disposition is not model.disposition:
                self.fail(
                    "C10",
                    f"{where}: repeat receipt says {receipt.disposition.value}, the input is"
                    f" {model.disposition.value}",
                    event,
                )
        elif receipt.accepted or receipt.disposition is not None or receipt.reason != event.get("reason"):
            self.fail(
                "C6",
                f"{where}: refused ({event.get('reason')}) but the receipt says {receipt.to_dict()}",
                event,
            )

    def explain_refusal(self, op: Operation, event: Mapping[str, Any]) -> None:
        """Where the history can tell, check the refusal reason fits the state it was decided in."""
        if not isinstance(op.input, Input):
            return
        reason = event.get("reason")
        model = self.inputs.get(op.input.id)
        same = (
            model is not None
            and model.generation_id == op.generation_id
            and (model.content is None or model.content == (op.input.kind, op.input.text))
        )
        where = f"operation {op.index} (id {op.input.id[:64]!r})"
        if reason == RefusalReason.IDENTITY_CONFLICT.value:
            if model is None and self.complete:
                self.fail("C10", f"{where}: refused identity-conflict but the id was never accepted", event)
            elif model is not None and same and model.content is not None:
                self.fail("C10", f"{where}: refused identity-conflict for an identical repeat", event)
        elif reason == RefusalReason.CAPACITY.value:
            if model is not None:
                self.fail("C11", f"{where}: a retained identity was refused capacity, not answered", event)
            elif self.complete and self.identity_limit is not None and len(self.inputs) < self.identity_limit:
                self.fail(
                    "C11",
                    f"{where}: refused capacity with {len(self.inputs)} of {self.identity_limit} identities",
                    event,
                )
        elif reason == RefusalReason.STALE_GENERATION.value:
            if model is not None and same:
                self.fail("C10", f"{where}: an identical repeat was refused stale-generation", event)
            elif (
                self.running is not None
                and self.running.id == op.generation_id
                and self.running.started is not None
            ):
                self.fail("C7", f"{where}: refused stale-generation while its anchor was running", event)
        elif reason == RefusalReason.FINISHING.value:
            if model is not None and same:
                self.fail("C10", f"{where}: an identical repeat was refused finishing", event)
            elif self.complete and (self.running is None or self.running.id != op.generation_id):
                self.fail("C16", f"{where}: refused finishing but its anchor was not running", event)

    # -- the replay -------------------------------------------------------------------------

    def run(self) -> HistoryReport:
        self.match_operations()
        claimed_by_index = self.claims
        last_sequence: int | None = None
        for index, event in enumerate(self.events):
            if not isinstance(event, Mapping) or not isinstance(event.get("type"), str):
                self.fail("C21", f"entry {index} is not an event dict with a 'type'")
                continue
            sequence = event.get("sequence")
            if not isinstance(sequence, int) or (last_sequence is not None and sequence <= last_sequence):
                self.fail("C21", f"sequence {sequence!r} does not increase (previous {last_sequence})", event)
            if isinstance(sequence, int):
                last_sequence = sequence
            if index in self.marks:
                self.separate()
            op = claimed_by_index.get(index)
            if op is not None and event["type"] == "steering.refused":
                self.explain_refusal(op, event)
            self.replay(index, event, op)
            if op is not None:
                self.check_receipt(op, event)
        self.finish()
        return self.report()

    def separate(self) -> None:
        """A point between two boundaries (C30): the quota of each kind is whole again."""
        self.written = dict.fromkeys(self.written, 0)

    def count_write(self, model: _InputModel, event: Mapping[str, Any]) -> None:
        """One more input handed to the writer since the last separator; at most one of a
        kind whose mode is one-at-a-time (C30)."""
        kind = _FOLLOW_UP if model.carried_into is not None else _STEER
        self.written[kind] += 1
        if kind in self.one_at_a_time and self.written[kind] > 1:
            self.fail(
                "C30",
                f"{kind} {model.input_id!r} is the second {kind} written in one boundary of"
                f" {model.home!r}, whose {kind.replace('_', '-')} mode is one-at-a-time",
                event,
            )

    def replay(self, index: int, event: Mapping[str, Any], op: Operation | None) -> None:
        kind = event["type"]
        if kind in ("generation.started", "generation.continued") or kind in _TERMINAL:
            self.separate()
        if kind == "generation.started":
            self.on_started(event)
        elif kind == "tools.skipped":
            self.on_tools_skipped(event)
        elif kind == "generation.continued":
            gen_id = event.get("generation_id")
            running = self.running
            if (running is None or running.id != gen_id) and (self.complete or running is not None):
                self.fail("C16", f"generation {gen_id!r} continued while not running", event)
        elif kind in _TERMINAL:
            self.on_terminal(event)
        elif kind == "steering.accepted":
            self.on_accepted(index, event, op)
        elif kind == "steering.repeated":
            self.counts["repeated"] += 1
            self.on_repeated(event)
        elif kind == "steering.refused":
            self.counts["refused"] += 1
            if event.get("reason") not in _REFUSALS:
                self.fail("C7", f"refusal reason {event.get('reason')!r} is not a pinned reason", event)
        elif kind == "input.delivered":
            delivered = self.inputs.get(event.get("input_id", ""))
            if delivered is not None and delivered.disposition is Disposition.QUEUED:
                self.count_write(delivered, event)
            following = self.events[index + 1] if index + 1 < len(self.events) else None
            if (
                following is None
                or following.get("type") != "steering.applied"
                or following.get("input_id") != event.get("input_id")
            ):
                self.fail(
                    "C14",
                    f"input.delivered for {event.get('input_id')!r} not followed by its steering.applied",
                    event,
                )
        elif kind in _FINAL_EVENTS:
            if kind == "steering.applied":
                previous = self.events[index - 1] if index > 0 else None
                if previous is None:
                    if self.complete:
                        self.fail("C14", "steering.applied without input.delivered before it", event)
                elif previous.get("type") != "input.delivered" or previous.get("input_id") != event.get(
                    "input_id"
                ):
                    self.fail(
                        "C14",
                        f"steering.applied for {event.get('input_id')!r} not directly after its"
                        " input.delivered",
                        event,
                    )
            self.on_final(event, _FINAL_EVENTS[kind])

    def on_started(self, event: Mapping[str, Any]) -> None:
        gen_id = event.get("generation_id")
        if not isinstance(gen_id, str):
            self.fail("C21", "generation.started without a generation_id", event)
            return
        if self.running is not None:
            self.fail("C17", f"generation {gen_id!r} started while {self.running.id!r} was running", event)
        if gen_id in self.generations:
            self.fail("C2", f"generation id {gen_id!r} started twice", event)
        gen = _GenerationModel(gen_id, event.get("sequence"))
        self.generations[gen_id] = gen
        self.running = gen
        self.carry(gen, event)

    def carry(self, gen: _GenerationModel, event: Mapping[str, Any]) -> None:
        """The follow-ups ``generation.started`` lists: every follow-up waiting for a generation,
        in admission order, and nothing else; they become its first inputs (C29)."""
        listed = event.get("follow_up_ids", [])
        if not isinstance(listed, list) or not all(isinstance(i, str) for i in listed):
            self.fail("C21", f"generation.started follow_up_ids is not a list of ids: {listed!r}", event)
            listed = []
        waiting = [m for m in self.inputs.values() if m.waiting is not None]
        for model in waiting:
            if model.input_id not in listed:
                model.waiting = None
                model.stranded = True
                what = "follow-up" if model.kind == _FOLLOW_UP else "input"
                self.fail(
                    "C29" if model.kind == _FOLLOW_UP else "C17",
                    f"{what} {model.input_id!r}, queued when {model.generation_id!r} finished, was not"
                    f" carried into the next generation {gen.id!r}",
                    event,
                )
        carried: list[_InputModel] = []
        for input_id in listed:
            found = self.inputs.get(input_id)
            if found is None:
                if self.complete:
                    self.fail("C29", f"{gen.id!r} started with follow-up {input_id!r}, never accepted", event)
                    continue
                # accepted before the window: take its word for it
                model = self.inputs[input_id] = _InputModel(input_id, "", -1)
            else:
                model = found
            if model.admitted_at < 0:
                pass  # from before the window
            elif model.waiting is None:
                self.fail(
                    "C29",
                    f"{gen.id!r} started with {input_id!r}, which is not a follow-up waiting for the"
                    f" next generation (it is {model.disposition.value}, of {model.home!r})",
                    event,
                )
                continue
            model.waiting = None
            model.carried_into = gen.id
            gen.accepted.append(input_id)
            carried.append(model)
        order = [m.admitted_at for m in carried]
        if order != sorted(order):
            self.fail("C29", f"{gen.id!r} carries its follow-ups out of admission order: {listed}", event)

    def on_tools_skipped(self, event: Mapping[str, Any]) -> None:
        """``tools.skipped`` names the running generation and some of its queued steers (C31)."""
        gen_id = event.get("generation_id")
        running = self.running
        if running is None or running.id != gen_id:
            if self.complete or running is not None:
                self.fail("C31", f"tools.skipped for {gen_id!r}, which is not running", event)
            return
        input_ids = event.get("input_ids")
        if not isinstance(input_ids, list) or not input_ids:
            self.fail("C31", f"tools.skipped in {gen_id!r} names no pending steer: {input_ids!r}", event)
            return
        for input_id in input_ids:
            model = self.inputs.get(input_id) if isinstance(input_id, str) else None
            if model is None:
                if self.complete or not running.started:
                    self.fail("C31", f"tools.skipped names {input_id!r}, never accepted", event)
            elif model.kind == _FOLLOW_UP or model.carried_into is not None:
                self.fail("C31", f"tools.skipped names the follow-up {input_id!r}: only steers skip", event)
            elif model.disposition is not Disposition.QUEUED or model.generation_id != gen_id:
                self.fail(
                    "C31",
                    f"tools.skipped names {input_id!r}, which is not pending in {gen_id!r}"
                    f" ({model.disposition.value}, of {model.generation_id!r})",
                    event,
                )

    def on_terminal(self, event: Mapping[str, Any]) -> None:
        gen_id = event.get("generation_id")
        gen = self.running
        if gen is None or gen.id != gen_id:
            known = self.generations.get(gen_id) if isinstance(gen_id, str) else None
            if known is not None and known.ended:
                self.fail("C19", f"generation {gen_id!r} ended twice", event)
                return
            if self.complete or gen is not None:
                self.fail("C19", f"terminal {event['type']} for {gen_id!r}, which is not running", event)
            if gen is None and isinstance(gen_id, str):  # started before the window
                gen = _GenerationModel(gen_id, None)
                self.generations[gen_id] = gen
            else:
                return
        gen.ended = True
        self.running = None
        finished = event["type"] == "generation.finished"
        for input_id in gen.accepted:
            model = self.inputs[input_id]
            if model.disposition is Disposition.QUEUED:
                if finished and model.carried_into is None and model.kind != _STEER:
                    # a follow-up (or maybe one): for the next generation (C29)
                    model.waiting = gen.id
                    continue
                follow_up = model.kind == _FOLLOW_UP and model.carried_into is None
                model.stranded = True
                self.fail(
                    "C29" if follow_up else "C17",
                    f"{'follow-up' if follow_up else 'input'} {input_id!r} left queued in generation"
                    f" {gen.id!r} after its terminal {event['type']}"
                    + (": a follow-up of an anchor that did not finish is held" if follow_up else ""),
                    event,
                )
            elif model.kind == _FOLLOW_UP and model.carried_into is None:
                self.check_follow_up_hold(model, event)
        if gen.started is None:
            return  # window: we did not see all its inputs
        applied = list(event.get("input_ids", ()))
        if applied != gen.applied:
            self.fail("C19", f"{event['type']} input_ids {applied} but applied were {gen.applied}", event)
        not_applied = [i for i in gen.accepted if i not in set(gen.applied)]
        listed = list(event.get("accepted_input_ids", ()))
        if listed != not_applied:
            self.fail(
                "C19",
                f"{event['type']} accepted_input_ids {listed} but not applied were {not_applied}",
                event,
            )

    def check_follow_up_hold(self, model: _InputModel, event: Mapping[str, Any]) -> None:
        """A follow-up finalised in its anchor ``event`` ended: held, with the ending's reason (C29)."""
        if model.disposition is not Disposition.HELD:
            return  # written in its anchor: reported when it happened
        kind, reason = event["type"], model.reason
        allowed: set[object]
        if kind == "generation.finished":
            allowed = {HoldReason.RUNTIME_CLOSED.value}  # the close came while it finished
        elif kind == "generation.stopped":
            allowed = {event.get("reason")}
        else:  # cancelled or failed, maybe after a stop whose reason stands for what it held
            allowed = {event.get("reason"), *_STOP_HOLDS}
        if reason not in allowed:
            self.fail(
                "C29",
                f"follow-up {model.input_id!r} of {model.generation_id!r} held {reason!r}, but the"
                f" generation ended {kind} ({event.get('reason')!r})",
                event,
            )

    def on_accepted(self, index: int, event: Mapping[str, Any], op: Operation | None) -> None:
        self.counts["accepted"] += 1
        input_id = event.get("input_id")
        target = event.get("target_generation_id")
        if not isinstance(input_id, str) or not isinstance(target, str):
            self.fail("C21", "steering.accepted without input_id/target_generation_id", event)
            return
        if input_id in self.inputs:
            self.fail("C10", f"input {input_id!r} accepted twice (an identity admitted again)", event)
            return
        if self.identity_limit is not None and self.complete and len(self.inputs) >= self.identity_limit:
            self.fail(
                "C11", f"input {input_id!r} accepted beyond the identity limit {self.identity_limit}", event
            )
        running = self.running
        if running is None or running.id != target:
            if self.complete or running is not None:
                self.fail("C18", f"input {input_id!r} accepted into {target!r}, which is not running", event)
            if running is None:
                running = self.generations.setdefault(target, _GenerationModel(target, None))
                self.running = running
            else:
                return
        content = None
        if op is not None and isinstance(op.input, Input):
            content = (op.input.kind, op.input.text)
        self.inputs[input_id] = _InputModel(input_id, target, index, content)
        running.accepted.append(input_id)

    def on_repeated(self, event: Mapping[str, Any]) -> None:
        input_id = event.get("input_id")
        model = self.inputs.get(input_id) if isinstance(input_id, str) else None
        if model is None:
            if self.complete:
                self.fail("C10", f"steering.repeated for {input_id!r}, which was never accepted", event)
            return
        if event.get("target_generation_id") != model.generation_id:
            self.fail("C10", f"repeat of {input_id!r} answered with another anchor", event)
        if event.get("disposition") != model.disposition.value:
            self.fail(
                "C10",
                f"repeat of {input_id!r} reported {event.get('disposition')!r}, current is"
                f" {model.disposition.value!r}",
                event,
            )

    def on_final(self, event: Mapping[str, Any], disposition: Disposition) -> None:
        input_id = event.get("input_id")
        model = self.inputs.get(input_id) if isinstance(input_id, str) else None
        if model is None:
            if self.complete:
                self.fail("C20", f"{event['type']} for {input_id!r}, which was never accepted", event)
            return
        if model.disposition is not Disposition.QUEUED:
            rule = "C18" if model.disposition is not Disposition.APPLIED else "C20"
            self.fail(
                rule,
                f"input {input_id!r} moved {model.disposition.value} -> {disposition.value}"
                " (dispositions are final; applied at most once)",
                event,
            )
            return
        if model.waiting is not None:
            # between its finished anchor and the next generation only the close may hold it (C29)
            if disposition is not Disposition.HELD or event.get("reason") != HoldReason.RUNTIME_CLOSED.value:
                self.fail(
                    "C29",
                    f"follow-up {input_id!r} became {disposition.value} ({event.get('reason')!r})"
                    f" after {model.waiting!r} finished, before a generation carried it",
                    event,
                )
            if event.get("target_generation_id") != model.generation_id:
                self.fail("C29", f"waiting follow-up {input_id!r} finalised as another generation's", event)
            model.waiting = None
            self.finalise(model, disposition, event)
            return
        home = model.home
        if event.get("target_generation_id") != home:
            self.fail(
                "C29" if model.carried_into is not None else "C18",
                f"input {input_id!r} of {home!r} finalised as {event.get('target_generation_id')!r}",
                event,
            )
        gen = self.generations.get(home)
        if gen is None or gen.ended or self.running is not gen:
            self.fail(
                "C18",
                f"input {input_id!r} became {disposition.value} outside its generation {home!r}",
                event,
            )
        written = disposition is not Disposition.HELD
        if written and model.carried_into is None and model.kind == _FOLLOW_UP:
            self.fail("C29", f"follow-up {input_id!r} written in its anchor generation {home!r}", event)
        if disposition is Disposition.UNKNOWN:
            if gen is not None:
                self.count_write(model, event)
            delivery = event.get("delivery")
            wanted = _DELIVERY[_FOLLOW_UP if model.carried_into is not None else _STEER]
            if delivery is not None and delivery != wanted:
                self.fail("C29", f"input {input_id!r} unknown with delivery {delivery!r}", event)
        reason = event.get("reason")
        if disposition is Disposition.HELD and reason not in _HOLD_REASONS:
            self.fail("C17", f"input {input_id!r} held with reason {reason!r}", event)
        if disposition is Disposition.UNKNOWN and reason not in _UNKNOWN_REASONS:
            self.fail("C15", f"input {input_id!r} unknown with reason {reason!r}", event)
        if disposition is Disposition.APPLIED and gen is not None:
            delivery = event.get("delivery")
            if model.carried_into is not None:
                if delivery != _DELIVERY[_FOLLOW_UP]:
                    self.fail("C29", f"follow-up {input_id!r} applied with delivery {delivery!r}", event)
            elif delivery == _DELIVERY[_FOLLOW_UP]:
                self.fail(
                    "C29",
                    f"input {input_id!r} delivered as a follow-up in {home!r}, which no"
                    " generation.started carried it into",
                    event,
                )
            elif delivery != _DELIVERY[_STEER]:
                self.fail("C14", f"input {input_id!r} applied with delivery {delivery!r}", event)
            if gen.applied:
                last = self.inputs[gen.applied[-1]]
                if last.admitted_at > model.admitted_at:
                    self.fail(
                        "C13",
                        f"input {input_id!r} applied after {last.input_id!r}, which was admitted later",
                        event,
                    )
            gen.applied.append(model.input_id)
        self.finalise(model, disposition, event)

    def finalise(self, model: _InputModel, disposition: Disposition, event: Mapping[str, Any]) -> None:
        model.disposition = disposition
        model.reason = event.get("reason")
        self.counts[disposition.value] += 1

    def finish(self) -> None:
        for model in self.inputs.values():
            if model.disposition is not Disposition.QUEUED or model.stranded:
                continue
            gen = self.generations.get(model.home)
            if self.require_final:
                self.fail("C17", f"input {model.input_id!r} is still queued at the end of the history")
            elif model.waiting is not None:
                continue  # a follow-up waiting for the next generation (C29)
            elif gen is None or gen is not self.running:
                self.fail("C17", f"input {model.input_id!r} is queued outside the running generation")

    def report(self) -> HistoryReport:
        queued = sum(1 for m in self.inputs.values() if m.disposition is Disposition.QUEUED)
        return HistoryReport(
            violations=tuple(self.violations),
            events=len(self.events),
            operations=len(self.operations),
            generations=len(self.generations),
            queued=queued,
            complete=self.complete,
            **self.counts,
        )


def check_history(
    events: Iterable[Mapping[str, Any]],
    operations: Iterable[Operation] = (),
    *,
    identity_limit: int | None = None,
    complete_operations: bool = False,
    require_final: bool = False,
    steering_mode: str = "all",
    follow_up_mode: str = "all",
    boundary_marks: Iterable[int] = (),
) -> HistoryReport:
    """Check a whole steering history against the rules; return every violation found.

    ``events``: the event dicts, oldest first (an ``EventRecorder``'s ``events``,
    ``runtime.recent_events()``, or a saved JSON log). ``operations``: the recorded
    submissions (``History.operations``), if any. ``identity_limit``: the runtime's
    limit, to check capacity decisions. ``complete_operations``: every decision
    event must belong to a recorded operation. ``require_final``: no input may be
    left queued (use after the last generation ended). ``steering_mode`` and
    ``follow_up_mode``: the runtime's delivery modes (C30), ``"all"`` or
    ``"one-at-a-time"``. ``boundary_marks``: indexes into ``events`` (how many events
    there were) at points between two boundaries, as ``History.mark_boundary()`` records
    them; with a one-at-a-time mode, the checker counts writes between these and the
    generation events (see the module's docstring).

    >>> report = check_history(runtime.recent_events())       # doctest: +SKIP
    >>> report.assert_ok().applied                              # doctest: +SKIP
    3

    Cost: O(events + operations x events in flight during each).
    """
    return _Checker(
        list(events),
        list(operations),
        identity_limit,
        complete_operations,
        require_final,
        {_STEER: steering_mode, _FOLLOW_UP: follow_up_mode},
        boundary_marks,
    ).run()


Submit = Callable[[Input, str], Awaitable[Receipt]]


class History:
    """Records a runtime's events and the submissions made through it, for ``check_history``.

    Attach before the first submission. Route submissions through ``submit``
    (or ``invoke`` + ``complete``/``fail`` around your own call) so that each is
    recorded as an invocation plus its completion.
    """

    def __init__(
        self,
        identity_limit: int | None = None,
        *,
        steering_mode: str | None = None,
        follow_up_mode: str | None = None,
    ) -> None:
        self.events: list[dict[str, Any]] = []
        self.operations: list[Operation] = []
        self.identity_limit = identity_limit
        self.steering_mode = steering_mode
        """The runtime's delivery modes (C30); ``None`` until known (``attach`` reads them from
        ``runtime.generation`` when a generation starts): checked as ``"all"``."""
        self.follow_up_mode = follow_up_mode
        self.boundary_marks: list[int] = []
        """``mark_boundary()``'s points, as event counts."""
        self._submit: Submit | None = None
        self._runtime: Any = None
        self.detach: Callable[[], None] = lambda: None

    @classmethod
    def attach(
        cls, runtime: Any, *, steering_mode: str | None = None, follow_up_mode: str | None = None
    ) -> History:
        """A history listening to ``runtime`` (a ``LiveRuntime``) from now on.

        The delivery modes are read from ``runtime.generation`` (C30) when one runs, now or at
        the next ``generation.started``, unless given here.
        """
        history = cls(
            runtime.statistics().identity_limit, steering_mode=steering_mode, follow_up_mode=follow_up_mode
        )
        history._runtime = runtime
        history._read_modes()
        history.detach = runtime.add_listener(history._on_event)
        history._submit = runtime.submit_steering
        return history

    def _read_modes(self) -> None:
        view = None if self._runtime is None else self._runtime.generation
        if view is not None:
            if self.steering_mode is None:
                self.steering_mode = view.get("steering_mode")
            if self.follow_up_mode is None:
                self.follow_up_mode = view.get("follow_up_mode")

    def _on_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        if event.get("type") == "generation.started" and (
            self.steering_mode is None or self.follow_up_mode is None
        ):
            # a read of the generation the core just started (nothing is owed at its start)
            self._read_modes()

    def mark_boundary(self) -> None:
        """Record a point between two boundaries of the running generation (the loop's provider
        call, say), so a one-at-a-time mode is checked per boundary (C30). O(1)."""
        self.boundary_marks.append(len(self.events))

    def invoke(self, input: object, generation_id: object) -> Operation:
        """Record the invocation of a submission; call just before submitting."""
        op = Operation(len(self.operations), input, generation_id, len(self.events))
        self.operations.append(op)
        return op

    def complete(self, op: Operation, receipt: Receipt) -> Receipt:
        """Record the receipt a submission returned."""
        op.completed_at = len(self.events)
        op.receipt = receipt
        return receipt

    def fail(self, op: Operation, error: BaseException) -> None:
        """Record that a submission raised ``error`` instead of returning."""
        op.completed_at = len(self.events)
        op.error = type(error).__name__

    async def submit(self, input: Input, generation_id: str) -> Receipt:
        """Submit through the attached runtime's capability, recording invocation and completion."""
        if self._submit is None:
            raise RuntimeError("History.submit needs History.attach(runtime)")
        op = self.invoke(input, generation_id)
        try:
            receipt = await self._submit(input, generation_id)
        except Exception as error:
            self.fail(op, error)
            raise
        return self.complete(op, receipt)

    def check(self, *, require_final: bool = False, complete_operations: bool = True) -> HistoryReport:
        """``check_history`` over what this history recorded."""
        return check_history(
            self.events,
            self.operations,
            identity_limit=self.identity_limit,
            complete_operations=complete_operations,
            require_final=require_final,
            steering_mode=self.steering_mode or "all",
            follow_up_mode=self.follow_up_mode or "all",
            boundary_marks=self.boundary_marks,
        )
