"""Stateful Hypothesis test of the sans-IO ``SteeringCore`` against a small model (C10-C20).

The machine submits (new ids, identical repeats, conflicting repeats, stale
anchors, hostile inputs; a new id's ``steering.accepted`` is sometimes left owed,
as the runtime leaves it while the woken engine runs first), runs boundaries a
step at a time (take, then confirm, interrupt or return), checkpoints, stops,
ends generations every way, closes, and starts new generations. After every
step ``core._check()`` runs and the model's view of every input must match the
core's receipts.

Follow-ups (C29) and the delivery modes (C30): the first step draws each mode
(``all`` or ``one-at-a-time``); submissions are steers or follow-ups (new ones,
identical repeats, and repeats of an id with the other kind, refused
``identity-conflict``). The model keeps a follow-up aside while its anchor runs,
carries it when the anchor finishes, puts it at the head of the next generation's
queue (written there with ``delivery: "follow_up"`` and that generation as target,
the receipt keeping the anchor), and holds it with the ending's reason otherwise
(``runtime-closed`` for a close before it was carried). A boundary writes from the
head of the queue while the head's kind has quota left (one per boundary in
``one-at-a-time``). ``tools.skipped`` (C31) is allowed exactly when a steer is pending.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from live_steering import (
    Disposition,
    GenerationStateError,
    HoldReason,
    Input,
    Receipt,
    RefusalReason,
    RuntimeClosedError,
    StopReason,
)
from live_steering._core import (
    DEFAULT_IDENTITY_LIMIT,
    Ending,
    Exit,
    GenerationState,
    InputRecord,
    SteeringCore,
)
from strategies import hostile_inputs, valid_texts

Event = dict[str, Any]

MAX_TEXT = 64
"""A small text limit so that over-long texts are cheap to generate."""

KINDS = ("steer", "follow_up")
WRITE_EVENTS = ("input.delivered", "steering.applied", "steering.unknown")
MODES = ("all", "one-at-a-time")


def event_note(label: str) -> None:
    """A Hypothesis event (``--hypothesis-show-statistics``: how often each new path ran)."""
    if currently_in_test_context():
        hypothesis_event(label)


_FORWARD = {
    Disposition.QUEUED: {Disposition.QUEUED, Disposition.APPLIED, Disposition.HELD, Disposition.UNKNOWN},
    Disposition.APPLIED: {Disposition.APPLIED},
    Disposition.HELD: {Disposition.HELD},
    Disposition.UNKNOWN: {Disposition.UNKNOWN},
}


def valid_by_contract(item: Input) -> bool:
    """C7's content rules, written independently of the core."""
    if not 1 <= len(item.id) <= 128 or len(item.text) > MAX_TEXT:
        return False
    if not item.text.strip() or "\x00" in item.id + item.text:
        return False
    try:
        (item.id + item.text).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@attrs.define
class ModelInput:
    input: Input
    anchor: str
    disposition: Disposition = Disposition.QUEUED
    reason: str | None = None
    target: str | None = None
    """A follow-up's: the generation it was carried into (C29)."""

    @property
    def written_in(self) -> str:
        """The generation its writes (and a hold after it was carried) name."""
        return self.anchor if self.target is None else self.target

    @property
    def delivery(self) -> str:
        return "request_boundary" if self.target is None else "follow_up"

    @property
    def quota_kind(self) -> str:
        """What a boundary counts it as (C30): a carried follow-up, or a steer."""
        return "steer" if self.target is None else "follow_up"

    def receipt(self) -> Receipt:
        return Receipt(True, self.input.id, self.anchor, self.disposition, self.reason)


@attrs.define
class ModelGeneration:
    id: str
    state: GenerationState
    open: bool = True
    ending: Ending | None = None
    end_reason: HoldReason | None = None
    pending: list[str] = attrs.Factory(list)
    writing: InputRecord | None = None
    boundary: bool = False
    accepted: list[str] = attrs.Factory(list)
    applied: list[str] = attrs.Factory(list)
    follow_ups: list[str] = attrs.Factory(list)
    """Follow-ups anchored here, kept for after it (C29)."""
    carried: list[str] = attrs.Factory(list)
    """The follow-ups of the generation before, carried into this one."""
    written: dict[str, int] = attrs.Factory(lambda: dict.fromkeys(KINDS, 0))
    """Inputs of each kind the running boundary wrote (C30)."""


class CoreMachine(RuleBasedStateMachine):
    """Drives one core; the model predicts every receipt and disposition."""

    identity_limit = DEFAULT_IDENTITY_LIMIT

    def __init__(self) -> None:
        super().__init__()
        self.events: list[Event] = []
        self.modes = {"steer": "all", "follow_up": "all"}
        self.core = self.make_core()
        self.model: dict[str, ModelInput] = {}
        self.carried: list[str] = []
        """Follow-ups of the generation that finished last, for the next one (C29)."""
        self.gen: ModelGeneration | None = None
        self.ended: list[str] = []
        self.closed = False
        self.fresh = itertools.count()
        self.generations_started = 0
        self.seen_events = 0
        self.last_sequence = 0
        self.observed: dict[str, Disposition] = {}
        self.applied_events: dict[str, int] = {}
        self.accepted_events: set[str] = set()

    def make_core(self) -> SteeringCore:
        return SteeringCore(
            session_id="s",
            sink=self.events.append,
            clock=lambda: 0.0,
            identity_limit=self.identity_limit,
            max_text_chars=MAX_TEXT,
            steering_mode=self.modes["steer"],
            follow_up_mode=self.modes["follow_up"],
        )

    def quota(self, kind: str) -> int:
        return 1 if self.modes[kind] == "one-at-a-time" else 1 << 30

    # -- the model's prediction of one submission (C6-C12, precedence as C7 is implemented) ---------

    def expected(self, item: Input, anchor: str) -> Receipt:
        def refused(reason: RefusalReason) -> Receipt:
            return Receipt(False, item.id, anchor, None, reason.value)

        if self.closed:
            # C1/C10: an identical repeat still answers after the close; anything else is refused
            known = self.model.get(item.id)
            if known is not None and known.input == item and known.anchor == anchor:
                return known.receipt()
            return refused(RefusalReason.CLOSED)
        if item.kind not in KINDS:
            return refused(RefusalReason.UNSUPPORTED_KIND)
        if not valid_by_contract(item):
            return refused(RefusalReason.INVALID_INPUT)
        known = self.model.get(item.id)
        if known is not None:
            if known.input == item and known.anchor == anchor:
                return known.receipt()
            return refused(RefusalReason.IDENTITY_CONFLICT)
        if self.gen is None or self.gen.id != anchor:
            return refused(RefusalReason.STALE_GENERATION)
        if not self.gen.open:
            return refused(RefusalReason.FINISHING)
        if len(self.model) >= self.identity_limit:
            return refused(RefusalReason.CAPACITY)
        return Receipt(True, item.id, anchor, Disposition.QUEUED)

    def do_submit(self, item: Input, anchor: str, *, publish: bool = True) -> Receipt:
        """``core.submit``; with ``publish=False`` an admission's event is left owed (``decide``)."""
        want = self.expected(item, anchor)
        identities = dict(self.core.identities)
        if publish:
            got = self.core.submit(item, anchor)
        else:
            receipt = self.core.decide(item, anchor)
            got = self.core.queued_receipt(item.id) if receipt is None else receipt
        assert got == want, (item, anchor)
        new = want.accepted and item.id not in self.model
        if new:
            assert self.gen is not None
            self.model[item.id] = ModelInput(item, anchor)
            # C29: a follow-up waits for the end of its anchor; a steer for its next boundary
            (self.gen.follow_ups if item.kind == "follow_up" else self.gen.pending).append(item.id)
            self.gen.accepted.append(item.id)
        else:
            # C6/C10/C11: a refusal or a repeat never adds, evicts or replaces an identity.
            assert self.core.identities == identities
            assert all(self.core.identities[k] is v for k, v in identities.items())
        return got

    def new_id(self) -> str:
        return f"i{next(self.fresh)}"

    # -- generations --------------------------------------------------------------------------------

    @initialize(steering_mode=st.sampled_from(MODES), follow_up_mode=st.sampled_from(MODES))
    def start_first(self, steering_mode: str, follow_up_mode: str) -> None:
        self.modes = {"steer": steering_mode, "follow_up": follow_up_mode}
        self.core = self.make_core()
        self.start_generation()

    @precondition(lambda self: self.gen is None and not self.closed)
    @rule()
    def start_generation(self) -> None:
        gid = f"g{self.generations_started + 1}"
        mark = len(self.events)
        state = self.core.start_generation(gid)
        self.generations_started += 1
        self.gen = ModelGeneration(gid, state)
        # C29: the follow-ups of the generation that finished are this one's first inputs
        carried, self.carried = self.carried, []
        for input_id in carried:
            self.model[input_id].target = gid
        self.gen.pending = list(carried)
        self.gen.carried = list(carried)
        (started,) = self.events[mark:]
        assert started["type"] == "generation.started"
        assert started.get("follow_up_ids", []) == carried
        assert ("follow_up_ids" in started) == bool(carried)
        if carried:
            event_note("follow-ups carried into a new generation")

    @precondition(lambda self: self.gen is None and self.closed)
    @rule()
    def start_after_close_raises(self) -> None:
        with pytest.raises(RuntimeClosedError):
            self.core.start_generation("never")

    # -- submissions ----------------------------------------------------------------------------------

    @rule(text=valid_texts, publish=st.booleans(), kind=st.sampled_from(KINDS))
    def submit_new(self, text: str, publish: bool, kind: str) -> None:
        anchor = self.gen.id if self.gen is not None else "g0"
        self.do_submit(Input(kind, text, id=self.new_id()), anchor, publish=publish)

    @rule(text=valid_texts, publish=st.booleans())
    def submit_follow_up(self, text: str, publish: bool) -> None:
        """A follow-up for after the running generation (C29): as often as a steer of any kind."""
        self.submit_new(text, publish, "follow_up")

    @rule()
    def publish_owed(self) -> None:
        """What the runtime does once the woken engine had its first step; idempotent."""
        self.core.settle()
        assert self.core._owed is None

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def submit_identical_repeat(self, data: st.DataObject) -> None:
        known = self.model[data.draw(st.sampled_from(sorted(self.model)))]
        receipt = self.do_submit(known.input, known.anchor)
        if not self.closed:
            assert receipt == self.core.receipt(known.input.id)
            assert self.events[-1]["type"] == "steering.repeated"

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), change=st.sampled_from(["text", "anchor", "kind", "other kind"]))
    def submit_conflicting_repeat(self, data: st.DataObject, change: str) -> None:
        known = self.model[data.draw(st.sampled_from(sorted(self.model)))]
        item, anchor = known.input, known.anchor
        if change == "text":
            item = Input(item.kind, item.text + " (edited)", id=item.id)
        elif change == "kind":
            item = Input("note", item.text, id=item.id)
        elif change == "other kind":  # a steer and a follow-up of one id and text conflict (C10, C29)
            other = "steer" if item.kind == "follow_up" else "follow_up"
            item = Input(other, item.text, id=item.id)
        else:
            anchor = anchor + "-other"
        receipt = self.do_submit(item, anchor)
        assert not receipt.accepted

    @rule(text=valid_texts, anchor=st.sampled_from(["old", "future", ""]), kind=st.sampled_from(KINDS))
    def submit_stale(self, text: str, anchor: str, kind: str) -> None:
        if anchor == "old":
            anchor = self.ended[-1] if self.ended else "g0"
        receipt = self.do_submit(Input(kind, text, id=self.new_id()), anchor)
        assert not receipt.accepted

    @rule(item=hostile_inputs)
    def submit_hostile(self, item: Input) -> None:
        anchor = self.gen.id if self.gen is not None else "g0"
        self.do_submit(item, anchor)

    # -- boundaries -----------------------------------------------------------------------------------

    @precondition(lambda self: self.gen is not None and self.gen.open and not self.gen.boundary)
    @rule()
    def begin_boundary(self) -> None:
        assert self.gen is not None
        self.core.begin_boundary(self.gen.state)
        self.gen.boundary = True
        self.gen.written = dict.fromkeys(KINDS, 0)

    @precondition(lambda self: self.gen is not None and self.gen.boundary and self.gen.writing is None)
    @rule()
    def take_next(self) -> None:
        gen = self.gen
        assert gen is not None
        record = self.core.next_write(gen.state)
        if not gen.open or not gen.pending:
            assert record is None
            return
        kind = self.model[gen.pending[0]].quota_kind
        if gen.written[kind] >= self.quota(kind):
            # C30: the head's kind used its quota for this boundary: nothing more, the rest stay
            assert record is None
            event_note(f"{kind} quota used at a boundary")
            return
        assert record is not None
        # C13: the oldest pending input, in admission order (carried follow-ups first).
        assert record.input.id == gen.pending.pop(0)
        gen.written[kind] += 1
        gen.writing = record

    @precondition(lambda self: self.gen is not None and self.gen.open and not self.gen.boundary)
    @rule()
    def start_boundary(self) -> None:
        """``begin_boundary`` and the first ``take_next`` in one call (issue 25): nothing to take
        (drained, closed, or the head's quota spent) and the boundary is already over."""
        gen = self.gen
        assert gen is not None
        self.begin_boundary()
        self.core.end_boundary(gen.state)  # undo the model's step: start_boundary begins it
        head = self.model[gen.pending[0]].quota_kind if gen.pending else None
        expect_taken = head is not None and gen.written[head] < self.quota(head)
        record = self.core.start_boundary(gen.state)
        if not expect_taken:
            assert record is None
            assert not gen.state.boundary_active
            gen.boundary = False
            return
        assert record is not None
        assert record.input.id == gen.pending.pop(0)
        gen.written[self.model[record.input.id].quota_kind] += 1
        gen.writing = record
        assert gen.state.boundary_active

    @precondition(lambda self: self.gen is not None and self.gen.writing is not None)
    @rule(outcome=st.sampled_from(["confirm", "confirm, end if drained", "interrupt", "return"]))
    def resolve_write(self, outcome: str) -> None:
        gen = self.gen
        assert gen is not None
        record = gen.writing
        assert record is not None
        known = self.model[record.input.id]
        gen.writing = None
        if outcome.startswith("confirm"):
            # C18: applied only in the generation it was anchored to, which is the running one;
            # C29: a follow-up only in the generation it was carried into, never its anchor.
            assert known.written_in == gen.id == self.core.current.id  # type: ignore[union-attr]
            assert (known.input.kind == "follow_up") == (known.target is not None)
            end_if_drained = outcome == "confirm, end if drained"
            receipt = self.core.confirm_write(gen.state, record, end_if_drained)
            known.disposition = Disposition.APPLIED
            gen.applied.append(record.input.id)
            assert receipt == known.receipt()
            if end_if_drained and not gen.pending:  # the boundary ended at its last write
                assert not gen.state.boundary_active
                gen.boundary = False
                event_note("a boundary ended at its last confirmed write")
            else:
                assert gen.state.boundary_active
        elif outcome == "interrupt":
            self.core.interrupt_write(gen.state, record)
            known.disposition, known.reason = Disposition.UNKNOWN, HoldReason.WRITE_INTERRUPTED.value
        else:
            self.core.return_write(gen.state, record)
            if gen.open:  # never handed over: back at the head, its quota given back (C30)
                gen.pending.insert(0, record.input.id)
                gen.written[known.quota_kind] -= 1
            else:
                assert gen.end_reason is not None
                known.disposition, known.reason = Disposition.HELD, gen.end_reason.value

    @precondition(
        lambda self: (
            self.gen is not None and self.gen.open and (self.gen.writing is not None or not self.gen.boundary)
        )
    )
    @rule()
    def returned_then_taken_again(self) -> None:
        """The write barrier returned the input (C15) and the boundary goes on: the same input is
        taken again, its kind's quota given back (C30). Opens a boundary and takes one if need be."""
        gen = self.gen
        assert gen is not None
        if not gen.boundary:
            self.begin_boundary()
        if gen.writing is None:
            self.take_next()
        record = gen.writing
        if record is None:
            return
        event_note(f"returned and taken again ({self.modes[self.model[record.input.id].quota_kind]})")
        self.resolve_write("return")
        if gen.open:
            self.take_next()
            assert gen.writing is record

    @precondition(lambda self: self.gen is not None and self.gen.writing is not None)
    @rule()
    def barrier_returns(self) -> None:
        """The write barrier returned: hand the input over while admission is open, else hold it."""
        gen = self.gen
        assert gen is not None
        record = gen.writing
        assert record is not None
        handed = self.core.after_barrier(gen.state, record)
        assert handed == gen.open
        if not handed:  # C17: stopped or closed while the barrier ran: never handed, held
            gen.writing = None
            assert gen.end_reason is not None
            known = self.model[record.input.id]
            known.disposition, known.reason = Disposition.HELD, gen.end_reason.value

    @precondition(lambda self: self.gen is not None and not self.gen.boundary and not self.closed)
    @rule()
    def finish_and_start_next(self) -> None:
        """The reference loop's way through (C16, C29): boundaries writing every input they may,
        checkpoints, the normal end, and the next generation, which opens with the follow-ups."""
        gen = self.gen
        assert gen is not None
        for _ in range(len(gen.pending) + 1):
            self.after_checkpoint()
            if gen.ending is not None:
                break
            self.begin_boundary()
            while self.core.current is gen.state and (gen.pending and gen.writing is None):
                before = len(gen.pending)
                self.take_next()
                if gen.writing is None:
                    assert len(gen.pending) == before
                    break
                self.resolve_write("confirm")
            self.end_boundary()
        self.end_generation(Exit.RETURNED)
        self.start_generation()

    @precondition(lambda self: self.gen is not None and self.gen.boundary and self.gen.writing is None)
    @rule()
    def end_boundary(self) -> None:
        assert self.gen is not None
        self.core.end_boundary(self.gen.state)
        self.gen.boundary = False

    # -- checkpoint, stop, end, close -------------------------------------------------------------------

    @precondition(lambda self: self.gen is not None and not self.gen.boundary)
    @rule()
    def after_checkpoint(self) -> None:
        gen = self.gen
        assert gen is not None
        started = self.generations_started
        result = self.core.after_checkpoint(gen.state)
        if gen.open and gen.pending:
            assert result is True
            assert self.events[-1] == {
                **self.events[-1],
                "type": "generation.continued",
                "generation_id": gen.id,
            }
        else:
            assert result is False
            if gen.open:
                gen.open, gen.ending = False, Ending.FINISHED
        # C16: continuing never starts a new generation.
        assert self.generations_started == started

    def hold_pending(self, gen: ModelGeneration, reason: HoldReason) -> None:
        self.hold(gen.pending, reason)
        self.hold(gen.follow_ups, reason)  # C29: a stop discards the plan, never runs it

    def hold(self, ids: list[str], reason: HoldReason) -> None:
        for input_id in ids:
            self.model[input_id].disposition = Disposition.HELD
            self.model[input_id].reason = reason.value
        ids.clear()

    @precondition(lambda self: self.gen is not None)
    @rule(reason=st.sampled_from(list(StopReason)))
    def stop(self, reason: StopReason) -> None:
        gen = self.gen
        assert gen is not None
        self.core.stop(gen.state, reason)
        if gen.open:  # once admission closed, a stop changes nothing: the first ending stands
            hold = HoldReason(reason.value)
            gen.open, gen.ending, gen.end_reason = False, Ending.STOPPED, hold
            self.hold_pending(gen, hold)

    @precondition(lambda self: self.gen is not None)
    @rule(how=st.sampled_from(list(Exit)))
    def end_generation(self, how: Exit) -> None:
        gen = self.gen
        assert gen is not None
        terminal = self.core.end_generation(gen.state, how, "Boom")
        # How the block was left -> the ending, written independently of ENDINGS (C17, C19).
        by_close = gen.end_reason is HoldReason.RUNTIME_CLOSED
        stopped = gen.ending is Ending.STOPPED
        ending: Ending
        reason: HoldReason | None
        if how is Exit.CANCELLED:
            ending = Ending.CANCELLED
            reason = HoldReason.RUNTIME_CLOSED if by_close else HoldReason.GENERATION_CANCELLED
        elif how is Exit.RAISED or (how is Exit.STOP_SIGNAL and not stopped):
            ending = Ending.FAILED
            reason = HoldReason.RUNTIME_CLOSED if by_close else HoldReason.GENERATION_FAILED
        elif stopped:  # returned, or ran into the stop: the stop stands
            ending, reason = Ending.STOPPED, gen.end_reason
        elif gen.pending:  # returned with admission open and input pending
            ending, reason = Ending.STOPPED, HoldReason.GENERATION_STOPPED
        else:
            ending, reason = Ending.FINISHED, None
        assert ("error" in terminal) == (ending is Ending.FAILED)
        if gen.writing is not None:
            # C15: a write handed out and never confirmed is unknown, never held.
            known = self.model[gen.writing.input.id]
            known.disposition, known.reason = Disposition.UNKNOWN, HoldReason.WRITE_INTERRUPTED.value
        if reason is not None:
            self.hold_pending(gen, reason)
        elif gen.follow_ups:  # C29: finished: carried into the next generation (a close held them)
            assert ending is Ending.FINISHED
            assert not self.closed
            self.carried, gen.follow_ups = gen.follow_ups, []
        assert not gen.pending
        assert not gen.follow_ups
        assert self.events[-1]["type"] == ending.value
        # C19: applied ids, and accepted-but-not-applied ids (its own and those carried in).
        assert terminal["input_ids"] == gen.applied
        assert terminal["accepted_input_ids"] == [
            i for i in gen.carried + gen.accepted if i not in gen.applied
        ]
        for input_id in gen.carried + gen.accepted:
            if input_id not in self.carried:
                assert self.model[input_id].disposition is not Disposition.QUEUED
        self.ended.append(gen.id)
        self.gen = None

    @rule()
    def close(self) -> None:
        result = self.core.close()
        if self.closed:
            assert result is None
            return
        self.closed = True
        gen = self.gen
        if gen is not None:
            assert result is gen.state
        if gen is not None and gen.open:  # a generation already closing keeps its own ending
            gen.open, gen.ending, gen.end_reason = False, Ending.STOPPED, HoldReason.RUNTIME_CLOSED
            self.hold_pending(gen, HoldReason.RUNTIME_CLOSED)
        if gen is not None:  # C29: a finishing one's follow-ups will never be carried
            self.hold(gen.follow_ups, HoldReason.RUNTIME_CLOSED)
        self.hold(self.carried, HoldReason.RUNTIME_CLOSED)

    @precondition(lambda self: self.gen is not None)
    @rule()
    def skip_tools(self) -> None:
        """C31: a tool batch is skipped only for pending steers, and ``tools.skipped`` names them."""
        gen = self.gen
        assert gen is not None
        steers = [i for i in gen.pending if self.model[i].target is None]
        mark = len(self.events)
        if not steers:
            with pytest.raises(GenerationStateError):
                self.core.skip_tools(gen.state, ["t1"])
            assert all(e["type"] == "steering.accepted" for e in self.events[mark:])
            return
        assert self.core.skip_tools(gen.state, ["t1", "t2"]) == steers
        skipped = self.events[-1]
        assert skipped == {
            **skipped,
            "type": "tools.skipped",
            "generation_id": gen.id,
            "tool_call_ids": ["t1", "t2"],
            "input_ids": steers,
        }
        event_note("tools skipped")

    # -- invariants -------------------------------------------------------------------------------

    @invariant()
    def core_invariants_hold(self) -> None:
        """The core's own ``_check()`` after every step."""
        self.core._check()

    @invariant()
    def model_matches_every_receipt(self) -> None:
        """C10/C11: every accepted identity is retained, never evicted, and answers the model's receipt."""
        assert len(self.core.identities) <= self.identity_limit
        assert set(self.core.identities) == set(self.model)
        for input_id, known in self.model.items():
            assert self.core.receipt(input_id) == known.receipt()
        pending = [] if self.gen is None else self.gen.pending
        assert (
            [r.input.id for r in self.core.current.pending] == pending if self.core.current else not pending
        )
        follow_ups = [] if self.gen is None else self.gen.follow_ups
        current = self.core.current
        assert [r.input.id for r in current.follow_ups] == follow_ups if current else not follow_ups
        assert [r.input.id for r in self.core._carried] == self.carried
        assert self.core.follow_ups_pending == len(follow_ups) + len(self.carried)
        view = self.core.generation_view()
        if view is not None:
            assert (view["steering_mode"], view["follow_up_mode"]) == (
                self.modes["steer"],
                self.modes["follow_up"],
            )

    @invariant()
    def dispositions_only_move_forward(self) -> None:
        """C18/C20: queued moves once to applied/held/unknown, then never changes; applied at most once."""
        for input_id, known in self.model.items():
            before = self.observed.get(input_id, Disposition.QUEUED)
            assert known.disposition in _FORWARD[before], (input_id, before, known.disposition)
            self.observed[input_id] = known.disposition

    @invariant()
    def events_are_pinned_and_ordered(self) -> None:
        """C18/C21: events are JSON and strictly sequenced; applied once, in its anchor; no new turns."""
        for event in self.events[self.seen_events :]:
            json.dumps(event)
            assert event["sequence"] > self.last_sequence
            self.last_sequence = event["sequence"]
            input_id: str | None = event.get("input_id")
            if event["type"] == "steering.accepted":
                assert input_id is not None
                assert input_id not in self.accepted_events, "accepted published twice"
                self.accepted_events.add(input_id)
            elif event["type"] != "steering.refused" and input_id is not None:
                # Nothing about an input is published before its acceptance, owed or not.
                assert input_id in self.accepted_events, (event["type"], input_id)
            known = None if input_id is None else self.model.get(input_id)
            if known is not None and event["type"] in ("steering.accepted", "steering.repeated"):
                # the answer to a submission names its anchor, as the receipt does (C10)
                assert event["target_generation_id"] == known.anchor
            elif known is not None and event["type"] in WRITE_EVENTS:
                # C14, C29: a write names the generation it lands in, and how it was delivered
                assert event["target_generation_id"] == known.written_in
                assert event["delivery"] == known.delivery
                if known.target is not None:
                    event_note(f"follow-up {event['type']}")
            elif known is not None and event["type"] == "steering.held":
                assert event["target_generation_id"] == known.written_in
                if known.input.kind == "follow_up":
                    event_note(f"follow-up held {event['reason']}")
            if event["type"] == "steering.applied":
                input_id = event["input_id"]
                self.applied_events[input_id] = self.applied_events.get(input_id, 0) + 1
                assert self.applied_events[input_id] == 1
        self.seen_events = len(self.events)
        started = sum(1 for e in self.events if e["type"] == "generation.started")
        assert started == self.generations_started
        # Every admission's event is out, except at most the last one, while it is owed.
        owed = self.core._owed
        unpublished = set(self.model) - self.accepted_events
        assert unpublished == (set() if owed is None else {owed.input.id})


class SmallCapacityMachine(CoreMachine):
    """The same machine with room for five identities, so ``capacity`` is reached often (C11)."""

    identity_limit = 5


class FollowUpMachine(CoreMachine):
    """The same machine without hostile and stale submissions and without the close (the first
    machine's: a close early in an example leaves nothing but refusals), so that follow-ups are
    carried, written one per boundary and returned to the queue in most examples."""

    def close(self) -> None:  # not a rule of this machine
        raise NotImplementedError

    @precondition(lambda self: self.gen is not None and self.gen.open and not self.gen.boundary)
    @rule(kinds=st.lists(st.sampled_from(KINDS), max_size=4), publish=st.booleans())
    def a_round(self, kinds: list[str], publish: bool) -> None:
        """Valid inputs of the kinds drawn, then the generation's normal end and the next one.
        (First by name: Hypothesis's simplest choice of rule, so that it is a productive one.)"""
        for kind in kinds:
            self.submit_new(f"text {len(self.model)}", publish, kind)
        self.finish_and_start_next()

    def submit_hostile(self, item: Input) -> None:  # not a rule of this machine
        raise NotImplementedError

    def submit_stale(self, text: str, anchor: str, kind: str) -> None:  # not a rule of this machine
        raise NotImplementedError


_settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

TestCoreMachine = CoreMachine.TestCase
TestCoreMachine.settings = _settings
TestSmallCapacityMachine = SmallCapacityMachine.TestCase
TestSmallCapacityMachine.settings = settings(_settings, max_examples=100)
TestFollowUpMachine = FollowUpMachine.TestCase
TestFollowUpMachine.settings = settings(_settings, max_examples=100)


@pytest.mark.slow
def test_core_machine_long() -> None:
    """The same machine, many more examples (``--runslow``)."""
    run_state_machine_as_test(CoreMachine, settings=settings(_settings, max_examples=3_000))
