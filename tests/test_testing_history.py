"""The history checker (``live_steering.testing.check_history``) on hand-made and real histories.

Every bad history here breaks exactly one rule; the test asserts the checker names
that rule, so a checker that always passes (or always fails) is caught.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from live_steering import Disposition, Input, LiveRuntime, Receipt
from live_steering.testing import (
    History,
    HistoryViolationError,
    Operation,
    RecordingContext,
    check_history,
)

pytestmark = pytest.mark.anyio


class Log:
    """Builds an event log by hand, numbering events like a runtime does."""

    def __init__(self, start: int = 1) -> None:
        self.events: list[dict[str, Any]] = []
        self._next = start

    def add(self, type_: str, **fields: Any) -> Log:
        event = {"type": type_, "sequence": self._next, "session_id": "s", "time": 0.0, **fields}
        self._next += 1
        self.events.append(event)
        return self

    def started(self, gen: str) -> Log:
        return self.add("generation.started", generation_id=gen)

    def accepted(self, input_id: str, gen: str) -> Log:
        return self.add("steering.accepted", input_id=input_id, target_generation_id=gen)

    def applied(self, input_id: str, gen: str) -> Log:
        fields = {"input_id": input_id, "target_generation_id": gen, "delivery": "request_boundary"}
        return self.add("input.delivered", **fields).add("steering.applied", **fields)

    def held(self, input_id: str, gen: str, reason: str = "generation-stopped") -> Log:
        return self.add("steering.held", input_id=input_id, target_generation_id=gen, reason=reason)

    def unknown(self, input_id: str, gen: str) -> Log:
        return self.add(
            "steering.unknown",
            input_id=input_id,
            target_generation_id=gen,
            reason="write-interrupted",
            delivery="request_boundary",
        )

    def repeated(self, input_id: str, gen: str, disposition: str) -> Log:
        return self.add(
            "steering.repeated", input_id=input_id, target_generation_id=gen, disposition=disposition
        )

    def refused(self, input_id: str, gen: str, reason: str) -> Log:
        return self.add("steering.refused", input_id=input_id, generation_id=gen, reason=reason, detail="")

    def ended(self, gen: str, applied: list[str], not_applied: list[str], type_: str = "finished") -> Log:
        return self.add(
            f"generation.{type_}", generation_id=gen, input_ids=applied, accepted_input_ids=not_applied
        )


def rules(log: Log, operations: list[Operation] | None = None, **kwargs: Any) -> list[str]:
    return [v.rule for v in check_history(log.events, operations or [], **kwargs).violations]


def good_log() -> Log:
    log = Log().started("g1").accepted("a", "g1").accepted("b", "g1").accepted("c", "g1")
    log.applied("a", "g1").unknown("b", "g1").held("c", "g1", "generation-cancelled")
    log.ended("g1", ["a"], ["b", "c"], "cancelled").repeated("a", "g1", "applied")
    return log.started("g2").accepted("d", "g2").applied("d", "g2").ended("g2", ["d"], [])


def test_good_hand_made_history_passes() -> None:
    """A history that follows every rule has no violation and is counted correctly."""
    report = check_history(good_log().events, require_final=True).assert_ok()
    assert (report.accepted, report.applied, report.held, report.unknown) == (4, 2, 1, 1)
    assert (report.repeated, report.generations, report.queued, report.complete) == (1, 2, 0, True)


def test_input_queued_in_running_generation_is_fine_unless_final_required() -> None:
    """An input still queued in the live generation is legal; with require_final it is not."""
    log = Log().started("g1").accepted("a", "g1")
    assert rules(log) == []
    assert rules(log, require_final=True) == ["C17"]


@pytest.mark.parametrize(
    ("build", "rule"),
    [
        (lambda: Log().started("g").accepted("a", "g").accepted("a", "g"), "C10"),
        (lambda: Log().started("g").accepted("a", "g").held("a", "g").applied("a", "g"), "C18"),
        (lambda: Log().started("g").accepted("a", "g").unknown("a", "g").applied("a", "g"), "C18"),
        (lambda: Log().started("g").accepted("a", "g").applied("a", "g").applied("a", "g"), "C20"),
        (lambda: Log().started("g").accepted("a", "g").applied("a", "g").held("a", "g"), "C20"),
        (
            lambda: (
                Log().started("g").accepted("a", "g").accepted("b", "g").applied("b", "g").applied("a", "g")
            ),
            "C13",
        ),
        (lambda: Log().started("g").accepted("a", "g").ended("g", [], ["a"]), "C17"),
        (lambda: Log().started("g").accepted("a", "g").repeated("a", "g", "applied"), "C10"),
        (lambda: Log().started("g").repeated("zz", "g", "queued"), "C10"),
        (lambda: Log().started("g").accepted("a", "g").applied("a", "g").ended("g", [], []), "C19"),
        (lambda: Log().started("g").accepted("a", "g").held("a", "g").ended("g", [], []), "C19"),
        (lambda: Log().started("g").accepted("a", "other"), "C18"),
        (lambda: Log().accepted("a", "g"), "C18"),
        (lambda: Log().started("g").started("h"), "C17"),
        (lambda: Log().started("g").ended("g", [], []).started("g"), "C2"),
        (lambda: Log().started("g").ended("g", [], []).ended("g", [], []), "C19"),
        (lambda: Log().started("g").accepted("a", "g").held("a", "g", "because"), "C17"),
        (lambda: Log().started("g").accepted("a", "g").unknown("a", "g").held("zz", "g"), "C20"),
        (
            lambda: (
                Log()
                .started("g")
                .accepted("a", "g")
                .add("input.delivered", input_id="a", target_generation_id="g", delivery="request_boundary")
            ),
            "C14",
        ),
        (lambda: Log().started("g").refused("a", "g", "because-i-said-so"), "C7"),
        (lambda: Log().started("g").add("generation.continued", generation_id="h"), "C16"),
    ],
)
def test_each_broken_rule_is_reported(build: Any, rule: str) -> None:
    """A history breaking one rule is reported with that rule."""
    assert rule in rules(build())


def test_input_finalised_after_its_generation_ended_is_reported() -> None:
    """An input applied while another generation runs is reported as moved (C18)."""
    log = Log().started("g1").accepted("a", "g1")
    # a broken runtime that forgot "a" at the end of g1 and applied it in g2
    log.ended("g1", [], ["a"]).started("g2").applied("a", "g1")
    found = rules(log)
    assert "C17" in found  # left queued at g1's end
    assert "C18" in found  # applied outside its generation


def test_sequence_must_increase() -> None:
    """Events whose sequence does not strictly increase are reported (C21)."""
    log = good_log()
    log.events[3]["sequence"] = log.events[2]["sequence"]
    assert "C21" in rules(log)


def test_partial_window_of_recent_events_is_checked_without_false_alarms() -> None:
    """A log that starts after sequence 1 tolerates references to earlier inputs, not double applies."""
    full = good_log()
    window = Log(start=1)
    window.events = [dict(e) for e in full.events[5:]]
    report = check_history(window.events)
    assert not report.complete
    assert report.ok, report.violations
    window.events.append(
        {
            "type": "steering.applied",
            "sequence": 999,
            "input_id": "d",
            "target_generation_id": "g2",
            "delivery": "request_boundary",
        }
    )
    assert "C20" in [v.rule for v in check_history(window.events).violations]


def test_violation_messages_name_the_rule_the_event_and_the_input() -> None:
    """``assert_ok`` raises an AssertionError listing rule, event sequence and the input id."""
    log = Log().started("g").accepted("late-fix", "g").held("late-fix", "g").applied("late-fix", "g")
    with pytest.raises(
        HistoryViolationError, match=r"\[C18\] event #5: input 'late-fix' moved held -> applied"
    ):
        check_history(log.events).assert_ok()


# -- operations (invocation + completion) ---------------------------------------------------


def op(
    index: int, input_id: str, gen: str, at: int, done: int, receipt: Receipt | None, **kw: Any
) -> Operation:
    return Operation(index, Input("steer", kw.pop("text", "t"), id=input_id), gen, at, done, receipt, **kw)


def queued(input_id: str, gen: str) -> Receipt:
    return Receipt(True, input_id, gen, Disposition.QUEUED)


def test_operations_matched_to_their_decisions_pass() -> None:
    """Admission, repeat and refusal receipts that agree with the events pass, all claimed."""
    log = (
        Log()
        .started("g")
        .accepted("a", "g")
        .repeated("a", "g", "queued")
        .refused("a", "g", "identity-conflict")
    )
    ops = [
        op(0, "a", "g", 1, 2, queued("a", "g")),
        op(1, "a", "g", 2, 3, queued("a", "g")),
        op(2, "a", "g", 3, 4, Receipt(False, "a", "g", None, "identity-conflict"), text="other"),
    ]
    assert rules(log, ops, complete_operations=True) == []


def test_repeat_receipt_must_be_the_current_one() -> None:
    """A repeat whose receipt disagrees with the input's current disposition is reported (C10)."""
    log = Log().started("g").accepted("a", "g").applied("a", "g").repeated("a", "g", "applied")
    ops = [
        op(0, "a", "g", 1, 2, queued("a", "g")),
        op(1, "a", "g", 4, 5, queued("a", "g")),  # stale: should say applied
    ]
    assert rules(log, ops) == ["C10"]


def test_refusal_that_also_admitted_is_reported() -> None:
    """A submission that was refused but also produced an admission is caught (C6)."""
    log = Log().started("g").accepted("a", "g").refused("a", "g", "invalid-input")
    ops = [op(0, "a", "g", 1, 3, Receipt(False, "a", "g", None, "invalid-input"))]
    found = rules(log, ops, complete_operations=True)
    assert "C6" in found


def test_refused_receipt_must_match_its_event() -> None:
    """A receipt claiming acceptance for a refused submission is reported (C6)."""
    log = Log().started("g").refused("a", "g", "finishing")
    assert "C6" in rules(log, [op(0, "a", "g", 1, 2, queued("a", "g"))])


def test_admission_receipt_must_be_queued() -> None:
    """An admitted submission whose receipt is not ``queued`` is reported (C9)."""
    log = Log().started("g").accepted("a", "g")
    bad = Receipt(True, "a", "g", Disposition.APPLIED)
    assert rules(log, [op(0, "a", "g", 1, 2, bad)]) == ["C9"]


def test_submission_without_decision_is_reported() -> None:
    """A submission that returned without any decision event is reported (C8)."""
    log = Log().started("g")
    assert rules(log, [op(0, "a", "g", 1, 1, queued("a", "g"))]) == ["C8"]


def test_only_type_error_may_be_raised() -> None:
    """A submission that raised anything but TypeError is reported (C6)."""
    log = Log().started("g")
    ops = [op(0, "a", "g", 1, 1, None, error="ValueError"), op(1, "b", "g", 1, 1, None, error="TypeError")]
    assert rules(log, ops) == ["C6"]


def test_refusal_reasons_are_explained_by_the_history() -> None:
    """Capacity below the limit, conflicts for identical repeats and stale-while-running are reported."""
    capacity = Log().started("g").refused("a", "g", "capacity")
    assert rules(
        capacity, [op(0, "a", "g", 1, 2, Receipt(False, "a", "g", None, "capacity"))], identity_limit=5
    ) == ["C11"]
    conflict = Log().started("g").accepted("a", "g").refused("a", "g", "identity-conflict")
    ops = [
        op(0, "a", "g", 1, 2, queued("a", "g")),
        op(1, "a", "g", 2, 3, Receipt(False, "a", "g", None, "identity-conflict")),
    ]
    assert rules(conflict, ops) == ["C10"]
    stale = Log().started("g").refused("b", "g", "stale-generation")
    assert rules(stale, [op(0, "b", "g", 1, 2, Receipt(False, "b", "g", None, "stale-generation"))]) == ["C7"]


def test_accepting_beyond_the_identity_limit_is_reported() -> None:
    """An admission past the identity limit is reported (C11)."""
    log = Log().started("g").accepted("a", "g").accepted("b", "g")
    assert rules(log, identity_limit=1) == ["C11"]


# -- real runtimes ---------------------------------------------------------------------------


async def test_real_runtime_history_passes_and_survives_json() -> None:
    """A recorded run of a real runtime passes, and so does its event log saved as JSON."""
    runtime = LiveRuntime(identity_limit=3)
    history = History.attach(runtime)
    context = RecordingContext()
    async with runtime.open_generation("g1") as gen:
        for n in range(4):
            await history.submit(Input("steer", f"s{n}", id=f"i{n}"), "g1")
        await history.submit(Input("steer", "s0", id="i0"), "g1")
        await history.submit(Input("steer", "changed", id="i0"), "g1")
        await gen.boundary(context.add_steer)
        await history.submit(Input("steer", "s1", id="i1"), "g1")
        assert not gen.continue_after_checkpoint()
    await history.submit(Input("steer", "late", id="late"), "g1")
    with pytest.raises(TypeError):
        await history.submit("not an input", "g1")  # type: ignore[arg-type]
    report = history.check(require_final=True).assert_ok()
    assert (report.accepted, report.applied, report.repeated, report.refused) == (3, 3, 2, 3)
    assert context.steer_ids() == ["i0", "i1", "i2"]
    saved = json.loads(json.dumps(runtime.recent_events()))
    check_history(saved, identity_limit=3, require_final=True).assert_ok()
    await anyio.lowlevel.checkpoint()


def test_reliability_doc_example_runs_and_prints_what_the_doc_says(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The history-checker example in docs/reliability.md runs and prints the output shown there."""
    doc = (Path(__file__).parent.parent / "docs" / "reliability.md").read_text()
    code = doc.split("```python\n", 1)[1].split("```", 1)[0]
    shown = doc.split("It prints:\n\n```\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "docs/reliability.md", "exec"), {"__name__": "docs_example"})
    assert capsys.readouterr().out == shown
