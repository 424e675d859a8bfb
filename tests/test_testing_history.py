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

    def started(self, gen: str, follow_ups: list[str] | None = None) -> Log:
        if follow_ups is None:
            return self.add("generation.started", generation_id=gen)
        return self.add("generation.started", generation_id=gen, follow_up_ids=follow_ups)

    def continued(self, gen: str) -> Log:
        return self.add("generation.continued", generation_id=gen)

    def delivered(self, input_id: str, gen: str, delivery: str = "follow_up") -> Log:
        """A follow-up's write (C29), or any write with its ``delivery``."""
        fields = {"input_id": input_id, "target_generation_id": gen, "delivery": delivery}
        return self.add("input.delivered", **fields).add("steering.applied", **fields)

    def skipped(self, gen: str, input_ids: list[str]) -> Log:
        return self.add("tools.skipped", generation_id=gen, tool_call_ids=["t1"], input_ids=input_ids)

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

    def ended(
        self, gen: str, applied: list[str], not_applied: list[str], type_: str = "finished", **fields: Any
    ) -> Log:
        return self.add(
            f"generation.{type_}",
            generation_id=gen,
            input_ids=applied,
            accepted_input_ids=not_applied,
            **fields,
        )


def rules(log: Log, operations: list[Operation] | None = None, **kwargs: Any) -> list[str]:
    return [v.rule for v in check_history(log.events, operations or [], **kwargs).violations]


def with_ops(log: Log, **kinds: str) -> list[Operation]:
    """An operation for every admission of ``log``, each of the kind ``kinds`` names
    (``follow_up="f1 f2"``, ``steer="s1"``): the checker then knows each input's kind."""
    kind_of = {input_id: kind for kind, ids in kinds.items() for input_id in ids.split()}
    ops: list[Operation] = []
    for index, event in enumerate(log.events):
        if event["type"] == "steering.accepted":
            input_id, gen = event["input_id"], event["target_generation_id"]
            item = Input(kind_of.get(input_id, "steer"), "t", id=input_id)
            ops.append(Operation(len(ops), item, gen, index, index + 1, queued(input_id, gen)))
    return ops


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


def test_input_queued_after_its_generation_finished_is_reported_when_final_is_required() -> None:
    """From events alone an input queued at a finish may be a follow-up (C29); with require_final
    it is reported, and with its operation (a steer) it is reported at the terminal event (C17)."""
    log = Log().started("g").accepted("a", "g").ended("g", [], ["a"])
    assert rules(log) == []
    assert rules(log, require_final=True) == ["C17"]
    assert rules(log, with_ops(log, steer="a")) == ["C17"]


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
        # left queued at a finish: from events alone maybe a follow-up, until the next start omits it
        (lambda: Log().started("g").accepted("a", "g").ended("g", [], ["a"]).started("h"), "C17"),
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


# -- follow-ups (C29), delivery modes (C30), tool batches (C31) -------------------------------


def follow_up_log() -> Log:
    """A valid history: g1 finishes with a steer applied and two follow-ups, carried into g2 and
    written there one per boundary; g3 is cancelled and holds its follow-up with that reason."""
    log = Log().started("g1").accepted("s1", "g1").accepted("f1", "g1").accepted("f2", "g1")
    log.applied("s1", "g1").ended("g1", ["s1"], ["f1", "f2"])
    log.started("g2", ["f1", "f2"]).accepted("s2", "g2").delivered("f1", "g2").continued("g2")
    log.delivered("f2", "g2").applied("s2", "g2").ended("g2", ["f1", "f2", "s2"], [])
    log.started("g3").accepted("f3", "g3").accepted("s3", "g3").skipped("g3", ["s3"])
    log.held("f3", "g3", "generation-cancelled").held("s3", "g3", "generation-cancelled")
    return log.ended("g3", [], ["f3", "s3"], "cancelled", reason="generation-cancelled")


FOLLOW_UPS = {"follow_up": "f1 f2 f3", "steer": "s1 s2 s3"}


def test_valid_follow_up_history_passes_in_both_modes() -> None:
    """Carried, written in the next generation with delivery follow_up, held when cancelled: no
    violation, with or without the operations, in either mode (one write of a kind per boundary)."""
    log = follow_up_log()
    for mode in ("all", "one-at-a-time"):
        report = check_history(
            log.events,
            with_ops(log, **FOLLOW_UPS),
            require_final=True,
            steering_mode=mode,
            follow_up_mode=mode,
        ).assert_ok()
        assert (report.applied, report.held, report.queued) == (4, 2, 0)
    check_history(log.events, require_final=True).assert_ok()


def test_follow_ups_waiting_between_generations_are_fine_and_a_close_may_hold_them() -> None:
    """After a finish the follow-ups wait for the next generation (queued, not a violation), and
    the runtime's close holds them runtime-closed (C29)."""
    log = Log().started("g1").accepted("f1", "g1").ended("g1", [], ["f1"])
    assert rules(log, with_ops(log, follow_up="f1")) == []
    log.held("f1", "g1", "runtime-closed")
    assert rules(log, with_ops(log, follow_up="f1"), require_final=True) == []


# Each history below breaks one rule of C29-C31 and is otherwise valid.
PLANTED: list[tuple[str, Any, dict[str, str], dict[str, Any], str]] = [
    (
        "a follow-up written in its anchor generation",
        lambda: Log().started("g1").accepted("f1", "g1").applied("f1", "g1").ended("g1", ["f1"], []),
        {"follow_up": "f1"},
        {},
        "C29",
    ),
    (
        "delivery follow_up in the generation it was admitted to",
        lambda: Log().started("g1").accepted("a", "g1").delivered("a", "g1").ended("g1", ["a"], []),
        {},
        {},
        "C29",
    ),
    (
        "a carried follow-up written as request_boundary",
        lambda: (
            Log()
            .started("g1")
            .accepted("f1", "g1")
            .ended("g1", [], ["f1"])
            .started("g2", ["f1"])
            .applied("f1", "g2")
            .ended("g2", ["f1"], [])
        ),
        {"follow_up": "f1"},
        {},
        "C29",
    ),
    (
        "a finished anchor's follow-up not carried into the next generation",
        lambda: Log().started("g1").accepted("f1", "g1").ended("g1", [], ["f1"]).started("g2"),
        {"follow_up": "f1"},
        {},
        "C29",
    ),
    (
        "a generation started with an input that is not a waiting follow-up",
        lambda: (
            Log()
            .started("g1")
            .accepted("s1", "g1")
            .applied("s1", "g1")
            .ended("g1", ["s1"], [])
            .started("g2", ["s1"])
        ),
        {},
        {},
        "C29",
    ),
    (
        "follow-ups carried out of admission order",
        lambda: (
            Log()
            .started("g1")
            .accepted("f1", "g1")
            .accepted("f2", "g1")
            .ended("g1", [], ["f1", "f2"])
            .started("g2", ["f2", "f1"])
        ),
        {"follow_up": "f1 f2"},
        {},
        "C29",
    ),
    (
        "a stopped anchor's follow-up left queued",
        lambda: (
            Log()
            .started("g1")
            .accepted("f1", "g1")
            .ended("g1", [], ["f1"], "stopped", reason="generation-stopped")
        ),
        {"follow_up": "f1"},
        {},
        "C29",
    ),
    (
        "a cancelled anchor's follow-up held with another reason",
        lambda: (
            Log()
            .started("g1")
            .accepted("f1", "g1")
            .held("f1", "g1", "generation-failed")
            .ended("g1", [], ["f1"], "cancelled", reason="generation-cancelled")
        ),
        {"follow_up": "f1"},
        {},
        "C29",
    ),
    (
        "a finished anchor's follow-up held (only a close may hold it)",
        lambda: (
            Log()
            .started("g1")
            .accepted("f1", "g1")
            .held("f1", "g1", "generation-stopped")
            .ended("g1", [], ["f1"])
        ),
        {"follow_up": "f1"},
        {},
        "C29",
    ),
    (
        "a waiting follow-up written before any generation carried it",
        lambda: Log().started("g1").accepted("f1", "g1").ended("g1", [], ["f1"]).delivered("f1", "g1"),
        {"follow_up": "f1"},
        {},
        "C29",
    ),
    (
        "a carried follow-up finalised as its anchor's",
        lambda: (
            Log()
            .started("g1")
            .accepted("f1", "g1")
            .ended("g1", [], ["f1"])
            .started("g2", ["f1"])
            .held("f1", "g1", "generation-stopped")
        ),
        {"follow_up": "f1"},
        {},
        "C29",
    ),
    (
        "two steers written in one boundary in one-at-a-time",
        lambda: (
            Log()
            .started("g1")
            .accepted("s1", "g1")
            .accepted("s2", "g1")
            .applied("s1", "g1")
            .applied("s2", "g1")
            .ended("g1", ["s1", "s2"], [])
        ),
        {},
        {"steering_mode": "one-at-a-time"},
        "C30",
    ),
    (
        "a steer written and another interrupted in one boundary in one-at-a-time",
        lambda: (
            Log()
            .started("g1")
            .accepted("s1", "g1")
            .accepted("s2", "g1")
            .applied("s1", "g1")
            .unknown("s2", "g1")
            .ended("g1", ["s1"], ["s2"], "cancelled")
        ),
        {},
        {"steering_mode": "one-at-a-time"},
        "C30",
    ),
    (
        "two follow-ups written in one boundary in one-at-a-time",
        lambda: (
            Log()
            .started("g1")
            .accepted("f1", "g1")
            .accepted("f2", "g1")
            .ended("g1", [], ["f1", "f2"])
            .started("g2", ["f1", "f2"])
            .delivered("f1", "g2")
            .delivered("f2", "g2")
            .ended("g2", ["f1", "f2"], [])
        ),
        {"follow_up": "f1 f2"},
        {"follow_up_mode": "one-at-a-time"},
        "C30",
    ),
    (
        "tools.skipped naming a follow-up",
        lambda: Log().started("g1").accepted("s1", "g1").accepted("f1", "g1").skipped("g1", ["s1", "f1"]),
        {"follow_up": "f1"},
        {},
        "C31",
    ),
    (
        "tools.skipped naming an applied steer",
        lambda: Log().started("g1").accepted("s1", "g1").applied("s1", "g1").skipped("g1", ["s1"]),
        {},
        {},
        "C31",
    ),
    ("tools.skipped naming no steer", lambda: Log().started("g1").skipped("g1", []), {}, {}, "C31"),
    (
        "tools.skipped for a generation that is not running",
        lambda: Log().started("g1").accepted("s1", "g1").skipped("g0", ["s1"]),
        {},
        {},
        "C31",
    ),
]


@pytest.mark.parametrize(
    ("build", "kinds", "options", "rule"),
    [pytest.param(build, kinds, options, rule, id=name) for name, build, kinds, options, rule in PLANTED],
)
def test_each_planted_follow_up_mode_or_skip_violation_is_reported(
    build: Any, kinds: dict[str, str], options: dict[str, Any], rule: str
) -> None:
    """A history breaking one rule of C29-C31 is reported with that rule, and only that rule."""
    log = build()
    assert rules(log, with_ops(log, **kinds), **options) == [rule]


def test_the_same_writes_pass_in_all_mode_or_with_a_boundary_mark_between_them() -> None:
    """C30 counts per boundary: two steers written in one boundary are fine in ``all``, and in
    one-at-a-time once a mark (a point between two boundaries) separates them."""
    log = Log().started("g1").accepted("s1", "g1").accepted("s2", "g1").applied("s1", "g1")
    mark = len(log.events)
    log.applied("s2", "g1").ended("g1", ["s1", "s2"], [])
    assert rules(log) == []
    assert rules(log, steering_mode="one-at-a-time") == ["C30"]
    assert rules(log, steering_mode="one-at-a-time", boundary_marks=[mark]) == []
    assert rules(log, follow_up_mode="one-at-a-time") == []  # steers are not follow-ups
    with pytest.raises(ValueError, match="one-at-a-time"):
        check_history(log.events, steering_mode="one")


@pytest.mark.parametrize("mode", ["all", "one-at-a-time"])
async def test_real_runtime_follow_up_history_passes_in_each_mode(mode: str) -> None:
    """A real runtime's follow-ups (carried, written at the next generation's first boundaries, one
    per boundary in one-at-a-time; held when stopped; held runtime-closed at the close) pass, with
    the modes read from the runtime by ``History.attach``."""
    runtime = LiveRuntime(steering_mode=mode, follow_up_mode=mode)
    history = History.attach(runtime)
    context = RecordingContext()
    async with runtime.open_generation("g1") as gen:
        assert (history.steering_mode, history.follow_up_mode) == (mode, mode)
        for n in range(2):
            await history.submit(Input("follow_up", f"then {n}", id=f"f{n}"), "g1")
        await history.submit(Input("steer", "now", id="s0"), "g1")
        assert gen.skip_tools(["t1"]) == ["s0"]
        await gen.boundary(context.add_steer)
        assert not gen.continue_after_checkpoint()
    async with runtime.open_generation("g2") as gen:
        await history.submit(Input("follow_up", "then 0", id="f0"), "g1")  # a repeat: its anchor
        while True:
            await gen.boundary(context.add_steer)
            history.mark_boundary()
            if not gen.continue_after_checkpoint():
                break
    async with runtime.open_generation("g3") as gen:
        await history.submit(Input("follow_up", "never", id="f2"), "g3")
        gen.stop()
    async with runtime.open_generation("g4") as gen:
        await history.submit(Input("follow_up", "never", id="f3"), "g4")
        assert not gen.continue_after_checkpoint()
    await runtime.aclose()
    report = history.check(require_final=True).assert_ok()
    assert context.steer_ids() == ["s0"]
    # the follow-ups are the next turn's request, as the reference loop's Context writes them
    assert [(e.role, e.metadata["input_id"]) for e in context.entries] == [
        ("steer", "s0"),
        ("user", "f0"),
        ("user", "f1"),
    ]
    assert (runtime.receipt("f2"), runtime.receipt("f3")) == (
        Receipt(True, "f2", "g3", Disposition.HELD, "generation-stopped"),
        Receipt(True, "f3", "g4", Disposition.HELD, "runtime-closed"),
    )
    assert (report.applied, report.held) == (3, 2)
    saved = json.loads(json.dumps(runtime.recent_events()))
    check_history(saved, require_final=True, steering_mode=mode, follow_up_mode=mode).assert_ok()


def test_a_window_that_starts_with_a_carrying_generation_is_checked_without_false_alarms() -> None:
    """A window opening at ``generation.started`` with follow-ups from before it takes their word;
    a carried follow-up's later write with the wrong delivery is still reported (C29)."""
    full = follow_up_log()
    start = next(i for i, e in enumerate(full.events) if e.get("follow_up_ids"))
    window = [dict(e) for e in full.events[start:]]
    assert check_history(window, follow_up_mode="one-at-a-time").ok
    bad = [dict(e) for e in window]
    for event in bad:
        if event.get("input_id") == "f2" and "delivery" in event:
            event["delivery"] = "request_boundary"
    assert "C29" in [v.rule for v in check_history(bad).violations]
