"""The sans-IO ``SteeringCore``, with no event loop at all (C6-C21).

Every test drives the core through its synchronous API and calls ``_check()``
after each step (via ``Rig``), so a broken internal invariant fails loudly even
when the asserted behaviour happens to look right.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import given, settings

from live_steering import (
    Disposition,
    GenerationClosedError,
    GenerationStateError,
    GenerationStopped,
    HoldReason,
    Input,
    InvariantError,
    Receipt,
    RefusalReason,
    RuntimeClosedError,
    StopReason,
)
from live_steering._core import (
    DEFAULT_IDENTITY_LIMIT,
    DEFAULT_MAX_TEXT_CHARS,
    INPUT_TRANSITIONS,
    Action,
    CoreStatistics,
    Exit,
    GenerationState,
    InputRecord,
    InputState,
    Phase,
    SteeringCore,
)
from strategies import hostile_inputs

Event = dict[str, Any]

#: The pinned event types and the fields each must carry beyond type/sequence/session_id/time (C21).
INPUT_EVENT_FIELDS = {"input_id", "target_generation_id"}
TERMINAL_FIELDS = {"generation_id", "input_ids", "accepted_input_ids"}
PINNED_EVENT_FIELDS: dict[str, set[str]] = {
    "generation.started": {"generation_id"},
    "generation.continued": {"generation_id"},
    "generation.finished": TERMINAL_FIELDS,
    "generation.stopped": TERMINAL_FIELDS | {"reason"},
    "generation.cancelled": TERMINAL_FIELDS | {"reason"},
    "generation.failed": TERMINAL_FIELDS | {"reason"},
    "steering.accepted": INPUT_EVENT_FIELDS,
    "steering.repeated": INPUT_EVENT_FIELDS,
    "steering.refused": {"input_id", "generation_id", "reason"},
    "input.delivered": INPUT_EVENT_FIELDS | {"delivery"},
    "steering.applied": INPUT_EVENT_FIELDS | {"delivery"},
    "steering.held": INPUT_EVENT_FIELDS | {"reason"},
    "steering.unknown": INPUT_EVENT_FIELDS | {"reason"},
}
ENVELOPE = {"type", "sequence", "session_id", "time"}


class Rig:
    """A core with a recording sink and a ticking clock; every helper runs ``_check()`` after its step."""

    def __init__(self, **config: Any) -> None:
        self.events: list[Event] = []
        self._ticks = itertools.count(1)
        self.core = SteeringCore(session_id="session-1", sink=self.events.append, clock=self._clock, **config)

    def _clock(self) -> float:
        return float(next(self._ticks))

    def check(self) -> None:
        self.core._check()

    def start(self, generation_id: str = "g1") -> GenerationState:
        gen = self.core.start_generation(generation_id)
        self.check()
        return gen

    def submit(self, id_: str, text: str = "go left", gen: str = "g1", kind: str = "steer") -> Receipt:
        receipt = self.core.submit(Input(kind, text, id=id_), gen)
        self.check()
        return receipt

    def submit_input(self, item: Input, gen: str = "g1") -> Receipt:
        receipt = self.core.submit(item, gen)
        self.check()
        return receipt

    def deliver(self, gen: GenerationState) -> list[str]:
        """One whole boundary with a writer that always returns; the ids written, in order."""
        written: list[str] = []
        self.core.begin_boundary(gen)
        while (record := self.core.next_write(gen)) is not None:
            self.check()
            written.append(record.input.id)
            self.core.confirm_write(gen, record)
            self.check()
        self.core.end_boundary(gen)
        self.check()
        return written

    def end(self, gen: GenerationState, how: Exit = Exit.RETURNED) -> Event:
        terminal = self.core.end_generation(gen, how)
        self.check()
        return terminal

    def types(self, since: int = 0) -> list[str]:
        return [e["type"] for e in self.events[since:]]

    def of_type(self, type_: str) -> list[Event]:
        return [e for e in self.events if e["type"] == type_]


@attrs.frozen
class Snapshot:
    """What a refusal must leave untouched: counters, identities (by object), queue and generation."""

    stats: CoreStatistics
    identities: tuple[tuple[str, int, InputState], ...]
    pending: tuple[int, ...]
    current: int | None
    phase: object


def snapshot(core: SteeringCore) -> Snapshot:
    gen = core.current
    return Snapshot(
        stats=attrs.evolve(core.statistics(), refused=0, events_emitted=0),
        identities=tuple((k, id(r), r.state) for k, r in core.identities.items()),
        pending=() if gen is None else tuple(id(r) for r in gen.pending),
        current=None if gen is None else id(gen),
        phase=None if gen is None else gen.phase,
    )


def assert_refused_cleanly(rig: Rig, item: Input, gen: str, reason: RefusalReason) -> Receipt:
    """Submit ``item`` and prove C6: a refusal receipt, no state change, exactly one refused event."""
    before = snapshot(rig.core)
    refused_before = rig.core.statistics().refused
    mark = len(rig.events)
    receipt = rig.submit_input(item, gen)
    assert receipt == Receipt(False, item.id, gen, None, reason.value)
    assert snapshot(rig.core) == before
    assert rig.core.statistics().refused == refused_before + 1
    assert rig.types(mark) == ["steering.refused"]
    event = rig.events[-1]
    assert event["reason"] == reason.value
    assert event["input_id"] == event_safe(item.id)
    assert event["generation_id"] == event_safe(gen)
    json.dumps(event, ensure_ascii=False).encode("utf-8")  # C21: writable as UTF-8 text, always
    return receipt


def event_safe(value: str) -> str:
    """What a refusal event carries for a hostile id: 256 characters at most, lone surrogates escaped."""
    return value[:256].encode("utf-8", "backslashreplace").decode("utf-8")


# -- C7: every refusal reason ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("id_", "text", "accepted"),
    [
        pytest.param("", "go", False, id="id-0-chars"),
        pytest.param("a", "go", True, id="id-1-char"),
        pytest.param("a" * 128, "go", True, id="id-128-chars"),
        pytest.param("a" * 129, "go", False, id="id-129-chars"),
        pytest.param("a", "", False, id="text-empty"),
        pytest.param("a", " ", False, id="text-space"),
        pytest.param("a", " \t\n\r\x0b\x0c", False, id="text-ascii-whitespace"),
        pytest.param("a", "\u3000\u00a0", False, id="text-unicode-whitespace"),
        pytest.param("a", "t" * DEFAULT_MAX_TEXT_CHARS, True, id="text-at-limit"),
        pytest.param("a", "t" * (DEFAULT_MAX_TEXT_CHARS + 1), False, id="text-over-limit"),
        pytest.param("a\ud800", "go", False, id="id-lone-surrogate"),
        pytest.param("a", "go \udfff left", False, id="text-lone-surrogate"),
        pytest.param("a\x00b", "go", False, id="id-nul"),
        pytest.param("a", "go\x00left", False, id="text-nul"),
        pytest.param("\U0001f600" * 128, "\x1b[31m go \u202e", True, id="astral-id-and-controls"),
    ],
)
def test_validation_limits_for_id_and_text(id_: str, text: str, accepted: bool) -> None:
    """C7: ids of 1-128 characters and non-blank, encodable, NUL-free text up to the limit are admitted."""
    rig = Rig()
    rig.start()
    if accepted:
        receipt = rig.submit(id_, text)
        assert receipt == Receipt(True, id_, "g1", Disposition.QUEUED)
    else:
        assert_refused_cleanly(rig, Input("steer", text, id=id_), "g1", RefusalReason.INVALID_INPUT)


def test_text_limit_is_configurable() -> None:
    """C7: ``max_text_chars`` moves the text limit; at the limit admitted, one over refused."""
    rig = Rig(max_text_chars=10)
    rig.start()
    assert rig.submit("at", "x" * 10).accepted
    assert_refused_cleanly(rig, Input("steer", "x" * 11, id="over"), "g1", RefusalReason.INVALID_INPUT)


@pytest.mark.parametrize("kind", ["prompt", "Steer", "", "steer ", "interrupt"])
def test_only_steer_kind_is_supported(kind: str) -> None:
    """C7: anything but ``steer`` through the capability is refused ``unsupported-kind``."""
    rig = Rig()
    rig.start()
    assert_refused_cleanly(rig, Input(kind, "go", id="a"), "g1", RefusalReason.UNSUPPORTED_KIND)


def test_unavailable_mode_refuses_everything() -> None:
    """C1/C7: without boundary delivery the mode is ``unavailable`` and every submit is refused."""
    rig = Rig(boundary_delivery=False)
    assert rig.core.mode == "unavailable"
    rig.start()
    assert_refused_cleanly(rig, Input("steer", "go", id="a"), "g1", RefusalReason.UNAVAILABLE)
    assert rig.core.statistics().identities == 0


def test_no_generation_is_stale() -> None:
    """C7: with no generation running a submit is refused ``stale-generation``."""
    rig = Rig()
    assert_refused_cleanly(rig, Input("steer", "go", id="a"), "g1", RefusalReason.STALE_GENERATION)


def test_wrong_generation_is_stale() -> None:
    """C7: an anchor that is not the running generation is refused ``stale-generation``."""
    rig = Rig()
    rig.start("g1")
    assert_refused_cleanly(rig, Input("steer", "go", id="a"), "g0", RefusalReason.STALE_GENERATION)


def test_ended_generation_is_stale_for_a_new_identity() -> None:
    """C7/C18: a new id anchored to an ended generation is refused, never moved to the next one."""
    rig = Rig()
    rig.end(rig.start("g1"))
    rig.start("g2")
    assert_refused_cleanly(rig, Input("steer", "go", id="a"), "g1", RefusalReason.STALE_GENERATION)
    assert rig.core.statistics().pending == 0


def test_closed_admission_is_finishing() -> None:
    """C7/C16: after the checkpoint closed admission, a submit is refused ``finishing``."""
    rig = Rig()
    gen = rig.start()
    assert rig.core.after_checkpoint(gen) is False
    rig.check()
    assert_refused_cleanly(rig, Input("steer", "go", id="a"), "g1", RefusalReason.FINISHING)


def test_stopped_generation_is_finishing() -> None:
    """C7/C17: a stopped generation that has not ended yet refuses ``finishing``."""
    rig = Rig()
    gen = rig.start()
    rig.core.stop(gen)
    rig.check()
    assert_refused_cleanly(rig, Input("steer", "go", id="a"), "g1", RefusalReason.FINISHING)


def test_closed_runtime_refuses_closed() -> None:
    """C7: after ``close()`` every submit is refused ``closed`` and the mode is ``unavailable``."""
    rig = Rig()
    rig.start()
    rig.core.close()
    rig.check()
    assert rig.core.mode == "unavailable"
    assert_refused_cleanly(rig, Input("steer", "go", id="a"), "g1", RefusalReason.CLOSED)


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param({"text": "go right"}, id="changed-text"),
        pytest.param({"gen": "g0"}, id="changed-anchor"),
    ],
)
def test_same_id_other_content_is_identity_conflict(changed: dict[str, str]) -> None:
    """C10: the same id with other text or another anchor is refused ``identity-conflict``."""
    rig = Rig()
    rig.start()
    rig.submit("a", "go left")
    values = {"text": "go left", "gen": "g1", **changed}
    assert_refused_cleanly(
        rig, Input("steer", values["text"], id="a"), values["gen"], RefusalReason.IDENTITY_CONFLICT
    )
    assert rig.core.receipt("a") == Receipt(True, "a", "g1", Disposition.QUEUED)


def test_same_id_other_kind_is_refused_and_keeps_the_original() -> None:
    """C7/C10: the same id with another kind is refused (kind is checked first) and the record is kept."""
    rig = Rig()
    rig.start()
    rig.submit("a", "go left")
    assert_refused_cleanly(rig, Input("prompt", "go left", id="a"), "g1", RefusalReason.UNSUPPORTED_KIND)
    assert rig.core.identities["a"].input == Input("steer", "go left", id="a")


def test_full_identity_table_is_capacity() -> None:
    """C7/C11: a new id when the identity table is full is refused ``capacity``."""
    rig = Rig(identity_limit=2)
    rig.start()
    rig.submit("a")
    rig.submit("b")
    assert_refused_cleanly(rig, Input("steer", "go", id="c"), "g1", RefusalReason.CAPACITY)


def test_refused_event_truncates_a_huge_id_but_the_receipt_keeps_it() -> None:
    """C6/C21: the bounded event log stays bounded in bytes; the receipt echoes the full id."""
    rig = Rig()
    rig.start()
    huge = "x" * 10_000
    receipt = assert_refused_cleanly(rig, Input("steer", "go", id=huge), huge, RefusalReason.INVALID_INPUT)
    assert receipt.input_id == huge
    assert len(rig.events[-1]["input_id"]) == 256


# -- C6: which refusal wins when several apply ----------------------------------------------------


def _precedence_rig() -> Rig:
    return Rig(identity_limit=1)


@pytest.mark.parametrize(
    ("setup", "item", "anchor", "reason"),
    [
        pytest.param(
            "closed-unavailable",
            Input("prompt", "", id=""),
            "g1",
            RefusalReason.CLOSED,
            id="closed>unavailable",
        ),
        pytest.param(
            "unavailable", Input("prompt", "", id=""), "g1", RefusalReason.UNAVAILABLE, id="unavailable>kind"
        ),
        pytest.param(
            "open", Input("prompt", "", id=""), "g1", RefusalReason.UNSUPPORTED_KIND, id="kind>invalid"
        ),
        pytest.param(
            "full", Input("steer", " ", id="taken"), "gX", RefusalReason.INVALID_INPUT, id="invalid>conflict"
        ),
        pytest.param(
            "full",
            Input("steer", "other", id="taken"),
            "gX",
            RefusalReason.IDENTITY_CONFLICT,
            id="conflict>stale",
        ),
        pytest.param(
            "full", Input("steer", "go", id="new"), "gX", RefusalReason.STALE_GENERATION, id="stale>capacity"
        ),
        pytest.param(
            "full-finishing",
            Input("steer", "go", id="new"),
            "g1",
            RefusalReason.FINISHING,
            id="finishing>capacity",
        ),
        pytest.param(
            "closed", Input("steer", "other", id="taken"), "g1", RefusalReason.CLOSED, id="closed>conflict"
        ),
        pytest.param(
            "closed",
            Input("steer", "go", id="taken"),
            "gX",
            RefusalReason.CLOSED,
            id="closed>conflict-anchor",
        ),
    ],
)
def test_refusal_precedence(setup: str, item: Input, anchor: str, reason: RefusalReason) -> None:
    """C6/C7: when several refusals apply, the pinned precedence decides, and nothing changes."""
    rig = Rig(identity_limit=1, boundary_delivery=setup not in ("unavailable", "closed-unavailable"))
    gen = rig.start()
    if setup in ("full", "full-finishing", "closed"):
        assert rig.submit("taken", "go").accepted
    if setup == "full-finishing":
        rig.core.stop(gen)
    if setup in ("closed", "closed-unavailable"):
        rig.core.close()
    assert_refused_cleanly(rig, item, anchor, reason)


# -- C6: caller type errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "anchor"),
    [
        pytest.param("go left", "g1", id="str-not-input"),
        pytest.param(None, "g1", id="none-input"),
        pytest.param({"kind": "steer", "text": "go", "id": "a"}, "g1", id="dict-input"),
        pytest.param(Input("steer", "go", id="a"), None, id="none-generation"),
        pytest.param(Input("steer", "go", id="a"), 1, id="int-generation"),
        pytest.param(Input("steer", "go", id="a"), b"g1", id="bytes-generation"),
    ],
)
def test_only_wrong_argument_types_raise(item: Any, anchor: Any) -> None:
    """C6: a non-Input or a non-str generation id raises TypeError and changes nothing, emits nothing."""
    rig = Rig()
    rig.start()
    before, mark = snapshot(rig.core), len(rig.events)
    with pytest.raises(TypeError):
        rig.core.submit(item, anchor)
    rig.check()
    assert snapshot(rig.core) == before
    assert len(rig.events) == mark
    assert rig.core.statistics().refused == 0


def test_str_subclass_generation_id_is_treated_as_plain_str() -> None:
    """C6/C10: a str-subclass anchor is accepted as its plain value; the receipt carries a plain str."""

    class Anchor(str):
        pass

    rig = Rig()
    rig.start("g1")
    receipt = rig.submit_input(Input("steer", "go", id="a"), Anchor("g1"))
    assert receipt.accepted
    assert type(receipt.generation_id) is str
    assert type(rig.core.identities["a"].generation_id) is str


# -- C9: admission ---------------------------------------------------------------------------


def test_admission_returns_queued_and_emits_accepted() -> None:
    """C9: a successful admission is ``accepted=True, disposition=queued`` with one ``steering.accepted``."""
    rig = Rig()
    rig.start()
    mark = len(rig.events)
    receipt = rig.submit("a", "go left")
    assert receipt == Receipt(True, "a", "g1", Disposition.QUEUED, None)
    assert rig.types(mark) == ["steering.accepted"]
    assert rig.events[-1]["input_id"] == "a"
    assert rig.events[-1]["target_generation_id"] == "g1"
    stats = rig.core.statistics()
    assert (stats.accepted, stats.identities, stats.pending) == (1, 1, 1)
    assert rig.core.receipt("a") == receipt


# -- C10: identity and repeats -------------------------------------------------------------------


def _record_in(rig: Rig, gen: GenerationState, state: InputState, id_: str) -> None:
    """Bring the input ``id_`` of ``gen`` into ``state`` through the public core API (DEFERRED:
    a follow-up, kept for after ``gen``; every other state: a steer)."""
    rig.submit(id_, kind="follow_up" if state is InputState.DEFERRED else "steer")
    if state in (InputState.PENDING, InputState.DEFERRED):
        return
    if state is InputState.HELD:
        rig.core.stop(gen)
        rig.check()
        return
    rig.core.begin_boundary(gen)
    record = rig.core.next_write(gen)
    assert record is not None
    assert record.input.id == id_
    if state is InputState.APPLIED:
        rig.core.confirm_write(gen, record)
    elif state is InputState.UNKNOWN:
        rig.core.interrupt_write(gen, record)
    if state is not InputState.WRITING:
        rig.core.end_boundary(gen)
    rig.check()


@pytest.mark.parametrize("state", list(InputState))
def test_identical_repeat_returns_the_current_receipt(state: InputState) -> None:
    """C10: an identical repeat answers the current receipt in any state, admits nothing, emits repeated."""
    rig = Rig()
    gen = rig.start()
    _record_in(rig, gen, state, "a")
    current = rig.core.receipt("a")
    assert current is not None
    assert current.disposition is state.disposition
    before, mark = snapshot(rig.core), len(rig.events)
    receipt = rig.submit("a", kind="follow_up" if state is InputState.DEFERRED else "steer")
    assert receipt == current
    assert snapshot(rig.core) == attrs.evolve(before, stats=attrs.evolve(before.stats, repeated=1))
    assert rig.types(mark) == ["steering.repeated"]
    assert rig.events[-1]["input_id"] == "a"
    assert rig.events[-1]["target_generation_id"] == "g1"


@pytest.mark.parametrize("how", list(Exit))
def test_repeat_after_the_generation_ended_still_answers(how: Exit) -> None:
    """C10: after its generation ended, and while another runs, a repeat answers the final receipt."""
    rig = Rig()
    gen = rig.start("g1")
    rig.submit("applied")
    rig.deliver(gen)
    rig.submit("left-over")
    if how in (Exit.RETURNED, Exit.STOP_SIGNAL):
        rig.core.stop(gen)
    rig.end(gen, how)
    rig.start("g2")
    applied = rig.submit("applied", gen="g1")
    assert applied == Receipt(True, "applied", "g1", Disposition.APPLIED)
    held = rig.submit("left-over", gen="g1")
    assert held.accepted
    assert held.disposition is Disposition.HELD
    assert rig.core.statistics().pending == 0
    assert rig.types()[-2:] == ["steering.repeated", "steering.repeated"]


def test_repeat_while_the_generation_is_finishing_answers() -> None:
    """C10: an identical repeat after admission closed still answers rather than ``finishing``."""
    rig = Rig()
    gen = rig.start()
    rig.submit("a")
    rig.deliver(gen)
    assert rig.core.after_checkpoint(gen) is False
    assert rig.submit("a") == Receipt(True, "a", "g1", Disposition.APPLIED)


def test_repeat_of_an_unknown_carries_its_reason() -> None:
    """C10/C15: the repeated receipt of an unknown input carries ``write-interrupted``."""
    rig = Rig()
    gen = rig.start()
    _record_in(rig, gen, InputState.UNKNOWN, "a")
    assert rig.submit("a") == Receipt(True, "a", "g1", Disposition.UNKNOWN, "write-interrupted")


def test_ids_are_compared_exactly() -> None:
    """C10: ids differing in case or normalisation are distinct identities."""
    rig = Rig()
    rig.start()
    for id_ in ("fix", "FIX", "caf\u00e9", "cafe\u0301"):
        assert rig.submit(id_).disposition is Disposition.QUEUED
    assert rig.core.statistics().identities == 4


# -- C11: identity capacity ----------------------------------------------------------------------


def test_default_identity_limit_boundary_without_eviction() -> None:
    """C11: 1,999 and 2,000 identities are admitted, the 2,001st is refused; none is evicted."""
    rig = Rig()
    assert rig.core.identity_limit == DEFAULT_IDENTITY_LIMIT == 2_000
    rig.start()
    for n in range(1_999):
        assert rig.core.submit(Input("steer", "go", id=f"i{n}"), "g1").accepted
    rig.check()
    assert rig.core.statistics().identities == 1_999
    assert rig.submit("i1999", "go").accepted
    assert rig.core.statistics().identities == 2_000
    assert_refused_cleanly(rig, Input("steer", "go", id="i2000"), "g1", RefusalReason.CAPACITY)
    assert all(rig.core.receipt(f"i{n}") is not None for n in range(2_000))
    repeat = rig.submit("i0", "go")
    assert repeat == Receipt(True, "i0", "g1", Disposition.QUEUED)


def test_identity_limit_counts_across_generations() -> None:
    """C11: the limit spans all generations of the runtime; ended generations keep their identities."""
    rig = Rig(identity_limit=3)
    gen = rig.start("g1")
    rig.submit("a", gen="g1")
    rig.submit("b", gen="g1")
    rig.deliver(gen)
    rig.end(gen)
    rig.start("g2")
    assert rig.submit("c", gen="g2").accepted
    assert_refused_cleanly(rig, Input("steer", "go", id="d"), "g2", RefusalReason.CAPACITY)
    assert rig.submit("a", gen="g1") == Receipt(True, "a", "g1", Disposition.APPLIED)
    assert rig.core.statistics().identities == 3


@pytest.mark.parametrize("limit", [0, -1, 2.5, "10", True])
def test_identity_limit_must_be_a_positive_int(limit: Any) -> None:
    """C11: a nonsensical identity limit is a configuration error, not a silent default."""
    with pytest.raises(ValueError, match="identity_limit"):
        SteeringCore(session_id="s", sink=lambda e: None, clock=lambda: 0.0, identity_limit=limit)


# -- C13-C15: boundaries -------------------------------------------------------------------------


def test_boundary_drains_in_admission_order() -> None:
    """C13: a boundary writes the pending batch in admission order and empties the queue."""
    rig = Rig()
    gen = rig.start()
    ids = ["c", "a", "b", "z", "y"]
    for id_ in ids:
        rig.submit(id_)
    assert rig.deliver(gen) == ids
    assert rig.core.statistics().pending == 0
    assert [e["input_id"] for e in rig.of_type("steering.applied")] == ids


def test_inputs_admitted_during_a_boundary_join_it_in_order() -> None:
    """C13: an input admitted while the boundary drains is written by the same boundary, after the rest."""
    rig = Rig()
    gen = rig.start()
    rig.submit("a")
    rig.submit("b")
    rig.core.begin_boundary(gen)
    first = rig.core.next_write(gen)
    assert first is not None
    rig.submit("late")
    rig.core.confirm_write(gen, first)
    order = [first.input.id]
    while (record := rig.core.next_write(gen)) is not None:
        order.append(record.input.id)
        rig.core.confirm_write(gen, record)
        rig.check()
    rig.core.end_boundary(gen)
    assert order == ["a", "b", "late"]


def test_confirm_write_applies_and_emits_delivered_then_applied() -> None:
    """C14: a returned write makes the input applied, with input.delivered then steering.applied."""
    rig = Rig()
    gen = rig.start()
    rig.submit("a")
    rig.core.begin_boundary(gen)
    record = rig.core.next_write(gen)
    assert record is not None
    assert rig.core.receipt("a") == Receipt(True, "a", "g1", Disposition.QUEUED)
    mark = len(rig.events)
    receipt = rig.core.confirm_write(gen, record)
    rig.check()
    assert receipt == Receipt(True, "a", "g1", Disposition.APPLIED)
    assert rig.types(mark) == ["input.delivered", "steering.applied"]
    for event in rig.events[mark:]:
        assert event["input_id"] == "a"
        assert event["target_generation_id"] == "g1"
        assert event["delivery"] == "request_boundary"
    assert rig.core.statistics().applied == 1


def test_interrupted_write_is_unknown_and_later_inputs_stay_pending() -> None:
    """C15: an interrupted write is unknown (write-interrupted); inputs not yet handed stay pending."""
    rig = Rig()
    gen = rig.start()
    for id_ in ("a", "b", "c"):
        rig.submit(id_)
    rig.core.begin_boundary(gen)
    record = rig.core.next_write(gen)
    assert record is not None
    mark = len(rig.events)
    rig.core.interrupt_write(gen, record)
    rig.core.end_boundary(gen)
    rig.check()
    assert rig.core.receipt("a") == Receipt(True, "a", "g1", Disposition.UNKNOWN, "write-interrupted")
    assert rig.types(mark) == ["steering.unknown"]
    assert rig.events[-1]["reason"] == "write-interrupted"
    assert rig.events[-1]["target_generation_id"] == "g1"
    assert rig.core.statistics().pending == 2
    for id_ in ("b", "c"):
        assert rig.core.receipt(id_) == Receipt(True, id_, "g1", Disposition.QUEUED)
    assert rig.deliver(gen) == ["b", "c"]


def test_returned_write_goes_back_to_the_head_of_the_queue() -> None:
    """C13/C15: an input taken but never handed to the writer returns to the head, order kept."""
    rig = Rig()
    gen = rig.start()
    for id_ in ("a", "b"):
        rig.submit(id_)
    rig.core.begin_boundary(gen)
    record = rig.core.next_write(gen)
    assert record is not None
    mark = len(rig.events)
    rig.core.return_write(gen, record)
    rig.core.end_boundary(gen)
    rig.check()
    assert len(rig.events) == mark
    assert rig.core.receipt("a") == Receipt(True, "a", "g1", Disposition.QUEUED)
    assert rig.deliver(gen) == ["a", "b"]


def test_two_boundaries_at_once_are_refused() -> None:
    """C13: one generation runs one boundary at a time; a second begin is a GenerationStateError."""
    rig = Rig()
    gen = rig.start()
    rig.core.begin_boundary(gen)
    with pytest.raises(GenerationStateError, match="already running"):
        rig.core.begin_boundary(gen)
    rig.check()


# -- C16: the once-more check after the checkpoint -------------------------------------------------


def test_after_checkpoint_with_pending_continues_the_same_generation() -> None:
    """C16: pending input after the checkpoint continues the same generation, no new start."""
    rig = Rig()
    gen = rig.start()
    rig.deliver(gen)
    rig.submit("a")
    mark = len(rig.events)
    assert rig.core.after_checkpoint(gen) is True
    rig.check()
    assert rig.types(mark) == ["generation.continued"]
    assert rig.events[-1]["generation_id"] == "g1"
    assert rig.core.current is gen
    assert rig.core.statistics().generations_started == 1
    assert rig.deliver(gen) == ["a"]
    assert rig.core.after_checkpoint(gen) is False
    terminal = rig.end(gen)
    assert rig.types().count("generation.started") == 1
    assert rig.events[-1]["type"] == "generation.finished"
    assert terminal["input_ids"] == ["a"]


def test_after_checkpoint_without_pending_closes_admission_synchronously() -> None:
    """C16: nothing pending: admission closes in the same call; the racing submit is refused finishing."""
    rig = Rig()
    gen = rig.start()
    mark = len(rig.events)
    assert rig.core.after_checkpoint(gen) is False
    assert len(rig.events) == mark
    assert rig.submit("racer").reason == "finishing"
    assert rig.core.receipt("racer") is None
    assert rig.core.after_checkpoint(gen) is False
    with pytest.raises(GenerationClosedError):
        rig.core.begin_boundary(gen)
    terminal = rig.end(gen)
    assert rig.events[-1]["type"] == "generation.finished"
    assert terminal["accepted_input_ids"] == []
    assert "reason" not in terminal


def test_after_checkpoint_during_a_boundary_is_misuse() -> None:
    """C16: the check belongs after the boundary and the checkpoint; during a boundary it raises."""
    rig = Rig()
    gen = rig.start()
    rig.core.begin_boundary(gen)
    with pytest.raises(GenerationStateError):
        rig.core.after_checkpoint(gen)
    rig.check()


# -- C17: endings hold what is pending ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("how", "terminal_type", "reason"),
    [
        ("stop", "generation.stopped", "generation-stopped"),
        ("budget", "generation.stopped", "budget-exhausted"),
        ("cancelled", "generation.cancelled", "generation-cancelled"),
        ("failed", "generation.failed", "generation-failed"),
        ("close", "generation.stopped", "runtime-closed"),
        ("exit-with-pending", "generation.stopped", "generation-stopped"),
    ],
)
def test_each_ending_holds_pending_with_its_reason(how: str, terminal_type: str, reason: str) -> None:
    """C17: stop, budget, cancel, failure, close and a bare exit hold every pending input with a reason."""
    rig = Rig()
    gen = rig.start()
    rig.submit("applied")
    rig.deliver(gen)
    rig.submit("p1")
    rig.submit("p2")
    if how == "stop":
        rig.core.stop(gen)
    elif how == "budget":
        rig.core.stop(gen, StopReason.BUDGET_EXHAUSTED)
    elif how == "close":
        rig.core.close()
    exit_ = {"cancelled": Exit.CANCELLED, "failed": Exit.RAISED}.get(how, Exit.RETURNED)
    terminal = rig.end(gen, exit_)
    for id_ in ("p1", "p2"):
        assert rig.core.receipt(id_) == Receipt(True, id_, "g1", Disposition.HELD, reason)
    held = rig.of_type("steering.held")
    assert [(e["input_id"], e["reason"], e["target_generation_id"]) for e in held] == [
        ("p1", reason, "g1"),
        ("p2", reason, "g1"),
    ]
    assert rig.events[-1]["type"] == terminal_type
    assert terminal["reason"] == reason
    assert rig.core.receipt("applied") == Receipt(True, "applied", "g1", Disposition.APPLIED)
    assert rig.core.statistics().held == 2


def test_stop_is_idempotent_and_the_first_reason_wins() -> None:
    """C17: a second stop changes nothing; the first reason stays on held inputs and the terminal event."""
    rig = Rig()
    gen = rig.start()
    rig.submit("a")
    rig.core.stop(gen, StopReason.BUDGET_EXHAUSTED)
    mark = len(rig.events)
    rig.core.stop(gen, StopReason.GENERATION_STOPPED)
    assert len(rig.events) == mark
    terminal = rig.end(gen)
    assert rig.events[-1]["type"] == "generation.stopped"
    assert terminal["reason"] == "budget-exhausted"
    assert rig.core.receipt("a") == Receipt(True, "a", "g1", Disposition.HELD, "budget-exhausted")


def test_stop_then_a_new_generation_in_the_same_core_works() -> None:
    """C17: stopping one generation does not close the runtime; the next generation admits and delivers."""
    rig = Rig()
    g1 = rig.start("g1")
    rig.submit("a", gen="g1")
    rig.core.stop(g1)
    rig.end(g1)
    g2 = rig.start("g2")
    assert rig.core.mode == "request_boundary"
    assert rig.submit("b", gen="g2").accepted
    assert rig.deliver(g2) == ["b"]
    assert rig.core.receipt("a") == Receipt(True, "a", "g1", Disposition.HELD, "generation-stopped")
    assert rig.core.statistics().generations_started == 2


def test_one_generation_at_a_time_and_none_after_close() -> None:
    """C17: a second generation while one runs is a GenerationStateError; after close, RuntimeClosedError."""
    rig = Rig()
    gen = rig.start("g1")
    with pytest.raises(GenerationStateError, match="still running"):
        rig.core.start_generation("g2")
    assert rig.core.current is gen
    rig.core.close()
    rig.end(gen)
    with pytest.raises(RuntimeClosedError):
        rig.core.start_generation("g3")
    rig.check()


def test_ending_with_a_write_in_flight_makes_it_unknown_not_held() -> None:
    """C15/C23: a write that was handed out but never confirmed ends unknown, never held."""
    rig = Rig()
    gen = rig.start()
    rig.submit("a")
    rig.submit("b")
    rig.core.begin_boundary(gen)
    assert rig.core.next_write(gen) is not None
    rig.end(gen, Exit.CANCELLED)
    assert rig.core.receipt("a") == Receipt(True, "a", "g1", Disposition.UNKNOWN, "write-interrupted")
    assert rig.core.receipt("b") == Receipt(True, "b", "g1", Disposition.HELD, "generation-cancelled")


def test_stop_during_a_write_holds_the_rest_and_the_write_completes() -> None:
    """C17: a stop while an input is being written holds the pending ones; the write may still confirm."""
    rig = Rig()
    gen = rig.start()
    rig.submit("a")
    rig.submit("b")
    rig.core.begin_boundary(gen)
    record = rig.core.next_write(gen)
    assert record is not None
    rig.core.stop(gen)
    rig.check()
    assert rig.core.receipt("b") == Receipt(True, "b", "g1", Disposition.HELD, "generation-stopped")
    rig.core.confirm_write(gen, record)
    assert rig.core.next_write(gen) is None
    rig.core.end_boundary(gen)
    terminal = rig.end(gen)
    assert terminal["input_ids"] == ["a"]
    assert terminal["accepted_input_ids"] == ["b"]


def test_return_write_after_stop_holds_the_returned_input() -> None:
    """C15/C17: an input returned unwritten after a stop is held like the rest, never left pending."""
    rig = Rig()
    gen = rig.start()
    rig.submit("a")
    rig.core.begin_boundary(gen)
    record = rig.core.next_write(gen)
    assert record is not None
    rig.core.stop(gen, StopReason.BUDGET_EXHAUSTED)
    rig.core.return_write(gen, record)
    rig.check()
    assert rig.core.receipt("a") == Receipt(True, "a", "g1", Disposition.HELD, "budget-exhausted")


# -- C19: terminal event fields ----------------------------------------------------------------------


def test_terminal_event_lists_applied_and_accepted_but_not_applied() -> None:
    """C19: ``input_ids`` are the applied inputs, ``accepted_input_ids`` the accepted ones not applied."""
    rig = Rig()
    gen = rig.start()
    for id_ in ("a", "b", "c", "d"):
        rig.submit(id_)
    rig.core.begin_boundary(gen)
    for _ in range(2):
        record = rig.core.next_write(gen)
        assert record is not None
        rig.core.confirm_write(gen, record)
    record = rig.core.next_write(gen)
    assert record is not None
    rig.core.interrupt_write(gen, record)
    rig.core.end_boundary(gen)
    rig.end(gen, Exit.RAISED)
    event = rig.events[-1]
    assert event["type"] == "generation.failed"
    assert event["input_ids"] == ["a", "b"]
    assert event["accepted_input_ids"] == ["c", "d"]
    assert event["generation_id"] == "g1"


def test_terminal_event_of_a_generation_after_one_with_input_lists_only_its_own() -> None:
    """C19: a generation with nothing admitted ends with empty lists, also after one that had
    inputs; the one after it lists its own inputs only."""
    rig = Rig()
    gen = rig.start()
    rig.submit("a")
    rig.end(gen, Exit.RETURNED)  # "a" held: no decision after the checkpoint
    assert rig.events[-1]["accepted_input_ids"] == ["a"]
    for generation_id in ("g2", "g3"):
        rig.end(rig.start(generation_id), Exit.RETURNED)
        assert rig.events[-1]["input_ids"] == []
        assert rig.events[-1]["accepted_input_ids"] == []
    gen = rig.start("g4")
    rig.submit("b", gen="g4")
    assert rig.deliver(gen) == ["b"]
    rig.submit("c", gen="g4")
    rig.end(gen, Exit.RAISED)
    assert rig.events[-1]["type"] == "generation.failed"
    assert rig.events[-1]["input_ids"] == ["b"]
    assert rig.events[-1]["accepted_input_ids"] == ["c"]


def test_ended_generation_refuses_further_engine_calls() -> None:
    """C19/C20: after its terminal event a generation cannot run a boundary, stop or end again."""
    rig = Rig()
    gen = rig.start()
    rig.end(gen)
    mark = len(rig.events)
    for call in (rig.core.begin_boundary, rig.core.stop, rig.core.after_checkpoint):
        with pytest.raises(GenerationClosedError):
            call(gen)
    with pytest.raises(GenerationClosedError):
        rig.core.end_generation(gen, Exit.RETURNED)
    assert len(rig.events) == mark
    rig.check()


# -- C20: the transition table -----------------------------------------------------------------------


def _record_for(rig: Rig, gen: GenerationState, state: InputState, id_: str) -> InputRecord:
    _record_in(rig, gen, state, id_)
    return rig.core.identities[id_]


ILLEGAL_MOVES = [
    (state, action) for state in InputState for action in Action if (state, action) not in INPUT_TRANSITIONS
]


def test_transition_table_moves_only_forward() -> None:
    """C20/C15: only queued states move; final ones never do; held never follows a handed-over write;
    a deferred follow-up (C29) is only ever carried into a queue or held."""
    sources = {source for source, _ in INPUT_TRANSITIONS}
    assert sources == {InputState.PENDING, InputState.WRITING, InputState.DEFERRED}
    assert all(source.disposition is Disposition.QUEUED for source in sources)
    into = {
        target: {source for (source, _), t in INPUT_TRANSITIONS.items() if t is target}
        for target in InputState
    }
    # Applied only by confirming a write, unknown only by interrupting one, held only unwritten.
    assert into[InputState.APPLIED] == {InputState.WRITING}
    assert into[InputState.UNKNOWN] == {InputState.WRITING}
    assert into[InputState.HELD] == {InputState.PENDING, InputState.DEFERRED}
    assert {t for (src, _), t in INPUT_TRANSITIONS.items() if src is InputState.DEFERRED} == {
        InputState.PENDING,
        InputState.HELD,
    }
    assert [a for (s, a), t in INPUT_TRANSITIONS.items() if t is InputState.APPLIED] == [Action.CONFIRM]
    for state in (InputState.APPLIED, InputState.HELD, InputState.UNKNOWN):
        assert state.final
        assert all((state, action) in ILLEGAL_MOVES for action in Action)


@pytest.mark.parametrize(("state", "action"), ILLEGAL_MOVES)
def test_every_illegal_transition_raises_and_changes_nothing(state: InputState, action: Action) -> None:
    """C20: each (state, action) pair missing from INPUT_TRANSITIONS raises InvariantError, no change."""
    rig = Rig()
    gen = rig.start()
    record = _record_for(rig, gen, state, "a")
    before, mark = snapshot(rig.core), len(rig.events)
    reason = record.reason
    with pytest.raises(InvariantError):
        rig.core._move(record, action, HoldReason.GENERATION_STOPPED)
    assert record.state is state
    assert record.reason is reason
    assert snapshot(rig.core) == before
    assert len(rig.events) == mark
    rig.check()


def test_applied_at_most_once() -> None:
    """C20: confirming an applied input again raises and does not apply it twice."""
    rig = Rig()
    gen = rig.start()
    rig.submit("a")
    rig.core.begin_boundary(gen)
    record = rig.core.next_write(gen)
    assert record is not None
    rig.core.confirm_write(gen, record)
    before = snapshot(rig.core)
    with pytest.raises(InvariantError):
        rig.core.confirm_write(gen, record)
    with pytest.raises(InvariantError):
        rig.core.interrupt_write(gen, record)
    assert snapshot(rig.core) == before
    assert len(rig.of_type("steering.applied")) == 1
    rig.check()


def test_next_write_while_a_write_is_unconfirmed_raises() -> None:
    """C20: the boundary writes one input at a time; asking for the next before confirming raises."""
    rig = Rig()
    gen = rig.start()
    rig.submit("a")
    rig.submit("b")
    rig.core.begin_boundary(gen)
    assert rig.core.next_write(gen) is not None
    before = snapshot(rig.core)
    with pytest.raises(InvariantError):
        rig.core.next_write(gen)
    assert snapshot(rig.core) == before
    rig.check()


# -- C21: events ----------------------------------------------------------------------------------


def _every_event_kind(rig: Rig) -> None:
    """Drive the core through a scenario that emits every pinned event type at least once."""
    g1 = rig.start("g1")
    rig.submit("a", gen="g1")
    rig.submit("a", gen="g1")  # repeated
    rig.submit("x", "", gen="g1")  # refused
    rig.deliver(g1)  # delivered, applied
    rig.submit("b", gen="g1")
    assert rig.core.after_checkpoint(g1)  # continued
    rig.core.begin_boundary(g1)
    record = rig.core.next_write(g1)
    assert record is not None
    rig.core.interrupt_write(g1, record)  # unknown
    rig.core.end_boundary(g1)
    assert not rig.core.after_checkpoint(g1)
    rig.end(g1)  # finished
    for gid, how in (("g2", Exit.STOP_SIGNAL), ("g3", Exit.CANCELLED), ("g4", Exit.RAISED)):
        gen = rig.start(gid)
        rig.submit(f"p-{gid}", gen=gid)
        if how is Exit.STOP_SIGNAL:
            rig.core.stop(gen)
        rig.end(gen, how)  # held + terminal


def test_every_event_has_the_pinned_envelope_and_fields() -> None:
    """C21: each event is a JSON dict with type/sequence/session_id/time and its pinned fields."""
    rig = Rig()
    _every_event_kind(rig)
    assert {e["type"] for e in rig.events} == set(PINNED_EVENT_FIELDS)
    for event in rig.events:
        assert json.loads(json.dumps(event)) == event
        assert event.keys() >= ENVELOPE
        assert event["session_id"] == "session-1"
        assert isinstance(event["time"], float)
        assert PINNED_EVENT_FIELDS[event["type"]] <= event.keys(), event


def test_event_sequence_is_strictly_increasing_from_one() -> None:
    """C21: ``sequence`` starts at 1 and increases by one per event, and the time is the given clock's."""
    rig = Rig()
    _every_event_kind(rig)
    assert [e["sequence"] for e in rig.events] == list(range(1, len(rig.events) + 1))
    times = [e["time"] for e in rig.events]
    assert times == sorted(times)
    assert rig.core.statistics().events_emitted == len(rig.events)


def test_statistics_count_each_outcome() -> None:
    """C21: the statistics snapshot counts identities, outcomes and events consistently."""
    rig = Rig()
    _every_event_kind(rig)
    stats = rig.core.statistics()
    assert stats == CoreStatistics(
        identities=5,
        identity_limit=2_000,
        pending=0,
        generations_started=4,
        accepted=5,
        repeated=1,
        refused=1,
        applied=1,
        held=3,
        unknown=1,
        follow_ups=0,
        events_emitted=len(rig.events),
        closed=False,
    )


# -- _check() itself can fail -------------------------------------------------------------------------------


def _corrupt_evict(rig: Rig, gen: GenerationState) -> None:
    del rig.core.identities["a"]


def _corrupt_reorder(rig: Rig, gen: GenerationState) -> None:
    gen.pending.rotate(1)


def _corrupt_foreign(rig: Rig, gen: GenerationState) -> None:
    gen.pending[0].generation_id = "g0"


def _corrupt_counter(rig: Rig, gen: GenerationState) -> None:
    rig.core.identities["a"].state = InputState.APPLIED


def _corrupt_closed_with_pending(rig: Rig, gen: GenerationState) -> None:
    gen.phase = Phase.CLOSING


def _corrupt_reason(rig: Rig, gen: GenerationState) -> None:
    rig.core.identities["a"].reason = HoldReason.GENERATION_STOPPED


def _corrupt_orphan(rig: Rig, gen: GenerationState) -> None:
    gen.pending.popleft()


@pytest.mark.parametrize(
    "corrupt",
    [
        _corrupt_evict,
        _corrupt_reorder,
        _corrupt_foreign,
        _corrupt_counter,
        _corrupt_closed_with_pending,
        _corrupt_reason,
        _corrupt_orphan,
    ],
)
def test_check_detects_a_corrupted_state(corrupt: Callable[[Rig, GenerationState], None]) -> None:
    """_check() is a real guard: each kind of corruption it exists for raises InvariantError."""
    rig = Rig()
    gen = rig.start()
    rig.submit("a")
    rig.submit("b")
    corrupt(rig, gen)
    with pytest.raises(InvariantError):
        rig.core._check()


@pytest.mark.parametrize("limit", [0, -5, 1.5, "100"])
def test_text_limit_must_be_a_positive_int(limit: Any) -> None:
    """C7: a nonsensical text limit is a configuration error, not a silent default."""
    with pytest.raises(ValueError, match="max_text_chars"):
        SteeringCore(session_id="s", sink=lambda e: None, clock=lambda: 0.0, max_text_chars=limit)


def _valid_by_contract(item: Input, max_text_chars: int = DEFAULT_MAX_TEXT_CHARS) -> bool:
    """C7's content rules, written independently of the core's ``_validate``."""
    if not 1 <= len(item.id) <= 128 or len(item.text) > max_text_chars:
        return False
    if not item.text.strip() or "\x00" in item.id or "\x00" in item.text:
        return False
    try:
        item.id.encode("utf-8")
        item.text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@settings(max_examples=300)
@given(item=hostile_inputs)
def test_admission_matches_the_contract_for_any_input(item: Input) -> None:
    """C7/C24: any input is admitted exactly when C7 allows it, otherwise refused cleanly with the reason."""
    rig = Rig()
    rig.start()
    if item.kind != "steer":
        assert_refused_cleanly(rig, item, "g1", RefusalReason.UNSUPPORTED_KIND)
    elif not _valid_by_contract(item):
        assert_refused_cleanly(rig, item, "g1", RefusalReason.INVALID_INPUT)
    else:
        assert rig.submit_input(item) == Receipt(True, item.id, "g1", Disposition.QUEUED)
        assert rig.core.identities[item.id].input == item


def test_repeat_of_a_carried_follow_up_names_its_anchor() -> None:
    """C10/C29: the repeat of a follow-up carried into the next generation answers with its anchor,
    in the receipt and in ``steering.repeated``, while its writes name the generation it opened."""
    rig = Rig()
    g1 = rig.start("g1")
    rig.submit("f", kind="follow_up")
    assert not rig.core.after_checkpoint(g1)
    rig.end(g1)
    g2 = rig.start("g2")
    mark = len(rig.events)
    receipt = rig.submit("f", kind="follow_up", gen="g1")
    assert receipt == Receipt(True, "f", "g1", Disposition.QUEUED)
    (repeated,) = rig.events[mark:]
    assert (repeated["type"], repeated["target_generation_id"]) == ("steering.repeated", "g1")
    assert rig.deliver(g2) == ["f"]
    assert rig.of_type("steering.applied")[-1]["target_generation_id"] == "g2"
    rig.submit("f", kind="follow_up", gen="g1")
    assert rig.events[-1]["target_generation_id"] == "g1"
    assert rig.events[-1]["disposition"] == "applied"


@pytest.mark.parametrize("kind", ["steer", "follow_up"])
def test_a_returned_write_gives_its_one_at_a_time_quota_back(kind: str) -> None:
    """C15/C30: an input the write barrier returns was not written: in one-at-a-time the same
    boundary may take it again (its kind's quota given back), and only it."""
    rig = Rig(steering_mode="one-at-a-time", follow_up_mode="one-at-a-time")
    anchor = rig.start("g0" if kind == "follow_up" else "g1")
    for id_ in ("a", "b"):
        rig.submit(id_, kind=kind, gen=anchor.id)
    if kind == "follow_up":
        assert not rig.core.after_checkpoint(anchor)
        rig.end(anchor)
        gen = rig.start("g1")
    else:
        gen = anchor
    rig.core.begin_boundary(gen)
    record = rig.core.next_write(gen)
    assert record is not None
    assert record.input.id == "a"
    rig.core.announce(gen, record)
    rig.core.return_write(gen, record)
    rig.check()
    again = rig.core.next_write(gen)
    assert again is record
    rig.core.confirm_write(gen, again)
    assert rig.core.next_write(gen) is None  # "b" waits for the next boundary
    rig.core.end_boundary(gen)
    assert rig.deliver(gen) == ["b"]


# -- issue 25: one call to begin a boundary, and a boundary that ends at its last write ----------


def test_start_boundary_takes_the_oldest_input_and_a_drained_confirm_ends_the_boundary() -> None:
    rig = Rig()
    gen = rig.start()
    rig.submit("a")
    rig.submit("b")
    since = len(rig.events)
    record = rig.core.start_boundary(gen)
    rig.check()
    assert record is not None
    assert record.input.id == "a"
    assert gen.boundary_active
    assert gen.writing is record
    rig.core.confirm_write(gen, record, True)  # "b" still pending: the boundary goes on
    rig.check()
    assert gen.boundary_active
    record = rig.core.next_write(gen)
    assert record is not None
    assert record.input.id == "b"
    receipt = rig.core.confirm_write(gen, record, True)  # drained: ended here
    rig.check()
    assert not gen.boundary_active
    assert gen.writing is None
    assert receipt.disposition is Disposition.APPLIED
    assert rig.types(since) == ["input.delivered", "steering.applied"] * 2
    rig.core.begin_boundary(gen)  # the next boundary begins: the last one is over
    rig.core.end_boundary(gen)


def test_start_boundary_with_nothing_pending_begins_and_ends_in_one_call() -> None:
    rig = Rig()
    gen = rig.start()
    assert rig.core.start_boundary(gen) is None
    assert not gen.boundary_active
    rig.check()
    assert rig.core.after_checkpoint(gen) is False  # not refused as "while a boundary is running"


def test_start_boundary_refuses_as_begin_boundary_does() -> None:
    rig = Rig()
    gen = rig.start()
    rig.submit("a")
    rig.core.begin_boundary(gen)
    with pytest.raises(GenerationStateError, match="already running"):
        rig.core.start_boundary(gen)
    rig.core.end_boundary(gen)
    rig.core.stop(gen)
    with pytest.raises(GenerationStopped):
        rig.core.start_boundary(gen)
    assert not gen.boundary_active
    rig.check()


def test_start_boundary_publishes_an_owed_acceptance_before_taking_its_input() -> None:
    rig = Rig()
    gen = rig.start()
    assert rig.core.decide(Input("steer", "go left", id="a"), "g1") is None  # its event owed
    assert rig.types()[-1] == "generation.started"
    record = rig.core.start_boundary(gen)
    assert record is not None
    assert rig.types()[-1] == "steering.accepted"
    rig.core.confirm_write(gen, record, True)
    assert rig.types()[-3:] == ["steering.accepted", "input.delivered", "steering.applied"]
    rig.check()


@pytest.mark.parametrize("kind", ["steer", "follow_up"])
def test_reads_that_show_an_owed_admission_publish_its_acceptance_first(kind: str) -> None:
    """An admission whose steering.accepted is owed: a read that shows it (the pending steers,
    the pending follow-ups) publishes the acceptance first, so no reader sees an input the
    stream has not announced."""
    rig = Rig()
    gen = rig.start()
    assert rig.core.decide(Input(kind, "then the docs", id="a"), "g1") is None  # its event owed
    assert rig.types()[-1] == "generation.started"
    if kind == "steer":
        assert rig.core.steers_pending(gen) == ["a"]
    else:  # the runtime's read (the core's own count stays a pure read, for statistics())
        assert rig.core.follow_ups_pending == 1
        assert rig.types()[-1] == "generation.started"
        rig.core.settle()
    assert rig.types()[-1] == "steering.accepted"
    rig.check()


def test_one_at_a_time_start_boundary_counts_and_a_confirm_with_input_left_does_not_end() -> None:
    rig = Rig(steering_mode="one-at-a-time")
    gen = rig.start()
    rig.submit("a")
    rig.submit("b")
    record = rig.core.start_boundary(gen)
    assert record is not None
    assert record.input.id == "a"
    rig.core.confirm_write(gen, record, True)
    assert gen.boundary_active  # "b" is pending: the quota, not the queue, ends this boundary
    assert rig.core.next_write(gen) is None
    rig.core.end_boundary(gen)
    rig.check()
    record = rig.core.start_boundary(gen)  # the next boundary: counted afresh
    assert record is not None
    assert record.input.id == "b"
    rig.core.confirm_write(gen, record, True)
    assert not gen.boundary_active
    rig.check()


def test_an_admission_on_the_fast_path_makes_the_record_its_constructor_makes() -> None:
    rig = Rig()
    rig.start()
    # a plain ASCII steer: ``decide``'s fast path, which builds the record through its slots
    assert rig.core.decide(Input("steer", "go left", id="a"), "g1") is None
    made = rig.core.identities["a"]
    built = InputRecord(made.input, "g1", made.sequence)
    for field in attrs.fields(InputRecord):
        assert getattr(made, field.name) == getattr(built, field.name), field.name
