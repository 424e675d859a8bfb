"""``SteeringCore._check()`` catches each corruption it claims to, with no event loop.

Each test builds a healthy core, checks it passes, corrupts exactly one thing on
purpose and expects ``InvariantError`` with that invariant's message: remove the
check and its test fails (no other check reports the same corruption in the same
words). The shell's own checks, that a ``LiveRuntime`` agrees with its core, are
at the end (they need an event loop).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import attrs
import pytest

from live_steering import (
    Disposition,
    GenerationClosedError,
    HoldReason,
    Input,
    InvariantError,
    LiveRuntime,
    Receipt,
    RuntimeClosedError,
    StopReason,
)
from live_steering._core import (
    ENDINGS,
    GENERATION_TRANSITIONS,
    Ending,
    Exit,
    GenerationAction,
    GenerationState,
    InputRecord,
    InputState,
    Phase,
    Standing,
    SteeringCore,
    exit_of,
)
from live_steering._runtime import internals

Event = dict[str, Any]


def make_core() -> tuple[SteeringCore, list[Event]]:
    events: list[Event] = []
    return SteeringCore(session_id="s", sink=events.append, clock=lambda: 0.0), events


def steer(id_: str) -> Input:
    return Input("steer", f"text of {id_}", id=id_)


def applied_then_queued() -> tuple[SteeringCore, GenerationState]:
    """A healthy core: generation g1 running, "a" applied, "b" queued; ``_check()`` passes."""
    core, _ = make_core()
    gen = core.start_generation("g1")
    core.submit(steer("a"), "g1")
    core.begin_boundary(gen)
    record = core.next_write(gen)
    assert record is not None
    core.confirm_write(gen, record)
    core.end_boundary(gen)
    core.submit(steer("b"), "g1")
    core._check()
    return core, gen


def fails(core: SteeringCore, message: str) -> None:
    with pytest.raises(InvariantError, match=message):
        core._check()


# -- the corruptions issue 10 names ---------------------------------------------------------


def test_closing_without_an_ending_is_caught() -> None:
    """A generation whose admission closed must say what it closed for."""
    core, _ = make_core()
    gen = core.start_generation("g1")
    gen.phase = Phase.CLOSING
    fails(core, "closed admission without an ending")


def test_a_closed_runtime_with_an_open_generation_is_caught() -> None:
    """Closing the runtime closes the running generation's admission in the same step."""
    core, _ = applied_then_queued()
    core.closed = True
    fails(core, "runtime is closed while a generation is open")


def test_an_identity_table_out_of_admission_order_is_caught() -> None:
    """The admitted-ids derivation reads the newest entries of the table: its order is admission order."""
    core, gen = applied_then_queued()
    core.end_generation(gen, Exit.RETURNED)  # "b" held, nothing live: only the order is wrong
    core.identities = dict(reversed(list(core.identities.items())))
    fails(core, "identity table out of admission order")


def test_applied_ids_naming_a_held_input_are_caught() -> None:
    """Every id a generation lists as applied is APPLIED (the terminal event's input_ids)."""
    core, gen = applied_then_queued()
    core.stop(gen)  # "b" is held
    gen.applied_ids.append("b")
    fails(core, "listed as applied is not applied")


def test_unknown_with_a_hold_reason_is_caught() -> None:
    """UNKNOWN carries write-interrupted, never a hold reason."""
    core, gen = applied_then_queued()
    core.begin_boundary(gen)
    record = core.next_write(gen)
    assert record is not None
    core.interrupt_write(gen, record)
    core._check()
    record.reason = HoldReason.GENERATION_STOPPED
    fails(core, "unknown input 'b' carries")


def test_admitted_before_past_the_count_is_an_invariant_error() -> None:
    """More earlier admissions than the runtime made is an InvariantError, not a ValueError."""
    core, gen = applied_then_queued()
    gen.admitted_before = 5
    fails(core, "started after more admissions than the runtime made")


# -- the corruptions found on the way ---------------------------------------------------------


def test_an_open_generation_with_an_ending_is_caught() -> None:
    """An ending is set only when admission closes."""
    core, gen = applied_then_queued()
    gen.ending = Ending.STOPPED
    fails(core, "an open generation has an ending")


def test_a_closing_ending_that_does_not_fit_its_reason_is_caught() -> None:
    """A generation stopped with a reason no stop gives cannot be read by ENDINGS."""
    core, gen = applied_then_queued()
    core.stop(gen)
    gen.end_reason = HoldReason.GENERATION_FAILED
    fails(core, "closed for Ending.STOPPED with")


def test_a_current_generation_never_started_is_caught() -> None:
    """Generation ids are remembered so none is used twice (C18)."""
    core, _ = applied_then_queued()
    core._generation_ids.clear()
    fails(core, "current generation's id was never started")


def test_held_with_write_interrupted_is_caught() -> None:
    """HELD means never handed to a writer: its reason is a hold reason, never write-interrupted."""
    core, gen = applied_then_queued()
    core.stop(gen)
    core.identities["b"].reason = HoldReason.WRITE_INTERRUPTED
    fails(core, "held input 'b' has no hold reason")


def test_a_stale_cached_receipt_is_caught() -> None:
    """A record's cached receipt is the receipt of its current state."""
    core, _ = applied_then_queued()
    record = core.identities["a"]
    record._receipt = Receipt(True, "a", "g1", Disposition.QUEUED)
    fails(core, "cached receipt of 'a' is stale")


def test_a_queued_record_that_is_not_the_tables_is_caught() -> None:
    """The queue holds the identity table's own records: a copy would be written behind its back."""
    core, gen = applied_then_queued()
    gen.pending.appendleft(attrs.evolve(core.identities["a"], state=InputState.PENDING))
    fails(core, "a queued record is not the table's")


def test_a_written_record_that_is_not_the_tables_is_caught() -> None:
    """The record being written is the table's own: confirming a copy would apply nothing."""
    core, gen = applied_then_queued()
    core.begin_boundary(gen)
    gen.writing = attrs.evolve(core.identities["a"], state=InputState.WRITING)
    fails(core, "the record written is not the table's")


# -- the invariants checked before issue 10, each proven able to fail too ---------------------------


def _owe_b() -> tuple[SteeringCore, GenerationState]:
    core, gen = applied_then_queued()
    assert core.decide(steer("c"), "g1") is None  # "c" admitted, its acceptance owed
    return core, gen


def _write_owed_unsettled(core: SteeringCore, gen: GenerationState) -> None:
    record = gen.pending.pop()  # "c", moved to the writer by hand, skipping the settle of _move
    record.state = InputState.WRITING
    gen.writing, gen.boundary_active = record, True


def _begin_write(core: SteeringCore, gen: GenerationState) -> InputRecord:
    core.begin_boundary(gen)
    record = core.next_write(gen)
    assert record is not None
    return record


def _rekey_after_the_end(core: SteeringCore, gen: GenerationState) -> None:
    core.end_generation(gen, Exit.RETURNED)
    core.identities = {("x" if k == "a" else k): v for k, v in core.identities.items()}


def _close_with_pending(core: SteeringCore, gen: GenerationState) -> None:
    gen.phase, gen.ending, gen.end_reason = Phase.CLOSING, Ending.STOPPED, HoldReason.GENERATION_STOPPED


def _hold_in_the_queue(core: SteeringCore, gen: GenerationState) -> None:
    gen.pending[0].state, gen.pending[0].reason = InputState.HELD, HoldReason.GENERATION_STOPPED


def _unwrite(core: SteeringCore, gen: GenerationState) -> None:
    _begin_write(core, gen).state = InputState.PENDING


def _write_outside_a_boundary(core: SteeringCore, gen: GenerationState) -> None:
    _begin_write(core, gen)
    gen.boundary_active = False


def _reanchor(record_id: str) -> Callable[[SteeringCore, GenerationState], None]:
    def corrupt(core: SteeringCore, gen: GenerationState) -> None:
        core.identities[record_id].generation_id = "other"

    return corrupt


_EARLIER_CORRUPTIONS: dict[str, tuple[Callable[[SteeringCore, GenerationState], object], str]] = {
    "over the identity limit": (
        lambda core, gen: setattr(core, "identity_limit", 1),
        "identity limit exceeded",
    ),
    "an evicted identity": (lambda core, gen: core.identities.pop("a"), "evicted or lost"),
    "an ended generation current": (
        lambda core, gen: setattr(gen, "phase", Phase.ENDED),
        "ended generation is current",
    ),
    "pending after close": (_close_with_pending, "input pending after admission closed"),
    "a held record queued": (_hold_in_the_queue, "non-pending record in the queue"),
    "a foreign record queued": (_reanchor("b"), "queued in a foreign generation"),
    "a writer holding a pending record": (_unwrite, "writer holds a non-writing record"),
    "a write outside a boundary": (_write_outside_a_boundary, "a write outside a boundary"),
    "an admitted record anchored elsewhere": (_reanchor("a"), "anchored elsewhere"),
    "applied without admission": (lambda core, gen: gen.applied_ids.append("z"), "not admitted or carried"),
    "applied twice": (lambda core, gen: gen.applied_ids.append("a"), "an input applied twice"),
    "an identity under the wrong key": (_rekey_after_the_end, "keyed under the wrong id"),
    "a drifted counter": (
        lambda core, gen: core._final_counts.__setitem__(InputState.APPLIED, 2),
        "counter drifted",
    ),
    "a queued record with a reason": (
        lambda core, gen: setattr(gen.pending[0], "reason", HoldReason.GENERATION_STOPPED),
        "'b' is pending with a reason",
    ),
    "a record outside the live generation": (
        lambda core, gen: gen.pending.clear(),
        "queued outside the live generation",
    ),
}


def _queue_out_of_order(core: SteeringCore, gen: GenerationState) -> None:
    core.submit(steer("c"), "g1")
    gen.pending.reverse()


_EARLIER_CORRUPTIONS["a queue out of admission order"] = (
    _queue_out_of_order,
    "pending queue out of admission order",
)
_OWED_CORRUPTIONS: dict[str, tuple[Callable[[SteeringCore, GenerationState], object], str]] = {
    "owed for an older admission": (
        lambda core, gen: setattr(core, "_owed", core.identities["b"]),
        "owed for an older admission",
    ),
    "moved before its acceptance": (_write_owed_unsettled, "moved before its acceptance was published"),
}


@pytest.mark.parametrize("name", sorted(_EARLIER_CORRUPTIONS))
def test_each_earlier_invariant_catches_its_corruption(name: str) -> None:
    """The checks _check() made before issue 10 each catch the corruption they name."""
    corrupt, message = _EARLIER_CORRUPTIONS[name]
    core, gen = applied_then_queued()
    corrupt(core, gen)
    fails(core, message)


@pytest.mark.parametrize("name", sorted(_OWED_CORRUPTIONS))
def test_each_owed_acceptance_invariant_catches_its_corruption(name: str) -> None:
    """An owed acceptance is the newest admission's, and nothing moves that input before it is out."""
    corrupt, message = _OWED_CORRUPTIONS[name]
    core, gen = _owe_b()
    core._check()
    corrupt(core, gen)
    fails(core, message)


# -- the tables -------------------------------------------------------------------------------


_ILLEGAL_GENERATION_MOVES = [
    (phase, action)
    for phase in Phase
    for action in GenerationAction
    if (phase, action) not in GENERATION_TRANSITIONS
]


@pytest.mark.parametrize(("phase", "action"), _ILLEGAL_GENERATION_MOVES)
def test_every_illegal_generation_transition_raises_and_changes_nothing(
    phase: Phase, action: GenerationAction
) -> None:
    """Each (phase, action) pair missing from GENERATION_TRANSITIONS raises InvariantError, no change."""
    core, _ = make_core()
    gen = GenerationState("g", phase=phase)
    with pytest.raises(InvariantError):
        core._advance(gen, action)
    assert gen.phase is phase


def test_closing_an_already_closed_generation_changes_nothing() -> None:
    """The self-loops of GENERATION_TRANSITIONS: the first ending and its reason stand."""
    core, gen = applied_then_queued()
    core.stop(gen, StopReason.BUDGET_EXHAUSTED)
    core.close()
    assert not core.after_checkpoint(gen)
    assert (gen.phase, gen.ending, gen.end_reason) == (
        Phase.CLOSING,
        Ending.STOPPED,
        HoldReason.BUDGET_EXHAUSTED,
    )
    core._check()


def test_endings_cover_every_exit_and_standing() -> None:
    """ENDINGS is total: every way of leaving a block, from every standing, has one ending."""
    assert set(ENDINGS) == {(how, standing) for how in Exit for standing in Standing}
    for (how, standing), (ending, reason) in ENDINGS.items():
        assert (reason is None) == (ending is Ending.FINISHED), (how, standing)


def _stand(core: SteeringCore, gen: GenerationState, standing: Standing) -> None:
    if standing is Standing.OPEN_PENDING:
        core.submit(steer("p"), gen.id)
    elif standing is Standing.FINISHING:
        assert not core.after_checkpoint(gen)
    elif standing is Standing.STOPPED:
        core.stop(gen)
    elif standing is Standing.BUDGET_EXHAUSTED:
        core.stop(gen, StopReason.BUDGET_EXHAUSTED)
    elif standing is Standing.RUNTIME_CLOSED:
        core.close()


@pytest.mark.parametrize("standing", list(Standing))
@pytest.mark.parametrize("how", list(Exit))
def test_the_core_ends_each_generation_as_endings_says(how: Exit, standing: Standing) -> None:
    """C17/C19: the terminal event and every hold follow the table, with no event loop."""
    core, events = make_core()
    gen = core.start_generation("g1")
    _stand(core, gen, standing)
    assert core.standing(gen) is standing
    terminal = core.end_generation(gen, how, "Boom")
    ending, reason = ENDINGS[how, standing]
    assert events[-1]["type"] == ending.value
    assert terminal.get("reason") == (None if reason is None else reason.value)
    assert ("error" in terminal) == (ending is Ending.FAILED)
    if standing is Standing.OPEN_PENDING:
        assert core.receipt("p") == Receipt(True, "p", "g1", Disposition.HELD, reason)
    core._check()


@pytest.mark.parametrize(
    ("exc", "cancelled", "expected"),
    [
        (None, False, Exit.RETURNED),
        (BaseException("the backend's cancellation"), True, Exit.CANCELLED),
        (GenerationClosedError("stopped"), True, Exit.CANCELLED),
        (GenerationClosedError("stopped"), False, Exit.STOP_SIGNAL),
        (RuntimeClosedError("closed"), False, Exit.STOP_SIGNAL),
        (ValueError("boom"), False, Exit.RAISED),
    ],
)
def test_exit_of_classifies_how_a_block_was_left(
    exc: BaseException | None, cancelled: bool, expected: Exit
) -> None:
    """The shell passes the exception and its cancellation verdict; the core names the exit."""
    assert exit_of(exc, cancelled=cancelled) is expected


# -- the other decisions that moved into the core ---------------------------------------------


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (7, TypeError),
        ("", ValueError),
        ("x" * 129, ValueError),
        ("a\x00b", ValueError),
        ("\ud800", ValueError),
    ],
)
def test_generation_ids_follow_the_id_rules(bad: object, error: type[Exception]) -> None:
    """A generation id is an id by C7's rules; a bad one raises and starts nothing."""
    core, events = make_core()
    with pytest.raises(error):
        core.start_generation(bad)  # type: ignore[arg-type]
    assert core.current is None
    assert events == []


def test_a_generation_id_is_never_used_twice() -> None:
    """C18: an id started once in a runtime is refused for ever after, even after its end."""
    core, _ = make_core()
    core.end_generation(core.start_generation("g1"), Exit.RETURNED)
    with pytest.raises(ValueError, match="already used"):
        core.check_generation_id("g1")
    with pytest.raises(ValueError, match="already used"):
        core.start_generation("g1")
    assert core.check_generation_id("g2") == "g2"


def test_stop_refuses_a_reason_no_stop_gives() -> None:
    """Only a StopReason is a stop reason (a HoldReason is a TypeError); anything else changes nothing."""
    core, gen = applied_then_queued()
    with pytest.raises(TypeError, match="stop reason"):
        core.stop(gen, HoldReason.RUNTIME_CLOSED)  # type: ignore[arg-type]
    assert gen.phase is Phase.OPEN
    assert core.identities["b"].state is InputState.PENDING


def _barrier_record(core: SteeringCore, gen: GenerationState) -> InputRecord:
    core.begin_boundary(gen)
    record = core.next_write(gen)
    assert record is not None
    return record


def test_after_the_barrier_an_open_generation_hands_the_input_over() -> None:
    """The barrier returned and admission is still open: the input goes to the writer."""
    core, gen = applied_then_queued()
    record = _barrier_record(core, gen)
    assert core.after_barrier(gen, record)
    assert record.state is InputState.WRITING


def test_after_the_barrier_a_stopped_generation_holds_the_input() -> None:
    """C17: stopped while the barrier ran, the input was never handed over: held, not unknown."""
    core, gen = applied_then_queued()
    record = _barrier_record(core, gen)
    core.stop(gen)
    assert not core.after_barrier(gen, record)
    assert record.receipt() == Receipt(True, "b", "g1", Disposition.HELD, "generation-stopped")
    core._check()


def test_statistics_is_a_pure_read() -> None:
    """Reading the counters publishes nothing, not even an owed acceptance."""
    core, events = make_core()
    core.start_generation("g1")
    assert core.decide(steer("a"), "g1") is None  # admitted, its steering.accepted owed
    published = len(events)
    stats = core.statistics()
    assert (stats.accepted, stats.pending, stats.events_emitted) == (1, 1, published)
    assert len(events) == published
    core._check()


@pytest.mark.parametrize("read", ["receipt", "generation_view", "pending_of"])
def test_a_read_that_shows_an_admission_publishes_its_acceptance_first(read: str) -> None:
    """The owed-acceptance rule: whoever sees the input queued can find its steering.accepted."""
    core, events = make_core()
    gen = core.start_generation("g1")
    assert core.decide(steer("a"), "g1") is None
    assert [e["type"] for e in events] == ["generation.started"]
    if read == "receipt":
        core.receipt("a")
    elif read == "generation_view":
        core.generation_view()
    else:
        core.pending_of(gen)
    assert [e["type"] for e in events] == ["generation.started", "steering.accepted"]


def test_a_wing_publishes_its_own_events_in_sequence_but_not_the_cores() -> None:
    """A wing's event is numbered with the core's; a type of the core's vocabulary is refused."""
    core, events = make_core()
    core.start_generation("g1")
    core.publish("journal.failed", {"path": "x"})
    assert events[-1]["type"] == "journal.failed"
    assert events[-1]["sequence"] == 2
    for type_ in ("steering.applied", "generation.finished", "input.delivered"):
        with pytest.raises(ValueError, match="owns that event type"):
            core.publish(type_, {})
    with pytest.raises(TypeError):
        core.publish(5, {})  # type: ignore[arg-type]
    assert len(events) == 2


# -- the shell agrees with its core -------------------------------------------------------------


def _admit_behind_the_shells_back(runtime: LiveRuntime) -> None:
    runtime._core.submit(steer("a"), "g1")  # the core admits; nobody wakes the engine


def _rename_in_the_core(runtime: LiveRuntime) -> None:
    state = runtime._core.current
    assert state is not None
    state.id = "renamed"
    runtime._core._generation_ids.add("renamed")


def _forge_an_event(runtime: LiveRuntime) -> None:
    runtime._hub.publish({"type": "forged", "sequence": 99})


def _renumber_the_last_event(runtime: LiveRuntime) -> None:
    runtime._hub.log[-1]["sequence"] = 42


def _settle_for_another_runtime(runtime: LiveRuntime) -> None:
    runtime._hub.owed = LiveRuntime()._settle


def _forget_the_generation(runtime: LiveRuntime) -> None:
    runtime._active = None


def _swap_the_handles_state(runtime: LiveRuntime) -> None:
    assert runtime._active is not None
    runtime._active._state = GenerationState("g1")


def _break_the_barrier(runtime: LiveRuntime) -> None:
    runtime._write_barrier = 5  # type: ignore[assignment]


#: Each way a shell can disagree with its core, with the words of the check that reports it.
_SHELL_CORRUPTIONS: dict[str, tuple[Callable[[LiveRuntime], None], str]] = {
    "a lost wake-up": (_admit_behind_the_shells_back, "sleeps through pending input"),
    "a forgotten generation": (_forget_the_generation, "the core runs a generation the shell does not know"),
    "a handle on a copy of the generation": (_swap_the_handles_state, "running generation is not the core's"),
    "a generation renamed in the core": (_rename_in_the_core, "generation id is not the core's"),
    "an event the core never published": (_forge_an_event, "does not count every event"),
    "a renumbered event": (_renumber_the_last_event, "last event is not the core's last"),
    "a hub closed under a running generation": (lambda runtime: runtime._hub.close(), "hub closed before"),
    "a hub settling for another runtime": (_settle_for_another_runtime, "settles for another runtime"),
    "a write barrier that is not callable": (_break_the_barrier, "write barrier is not callable"),
}


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(_SHELL_CORRUPTIONS))
async def test_the_shell_check_catches_a_shell_that_disagrees_with_its_core(name: str) -> None:
    """With an engine of g1 parked in wait_for_input, each corruption is reported in its own words."""
    corrupt, message = _SHELL_CORRUPTIONS[name]
    runtime = LiveRuntime()

    async def engine() -> None:
        async with runtime.open_generation("g1") as gen:
            while await gen.wait_for_input():
                await gen.boundary(lambda item, metadata: None)

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine)
        await anyio.wait_all_tasks_blocked()
        runtime._check()
        handle = runtime._active
        assert handle is not None
        state = handle._state
        corrupt(runtime)
        with pytest.raises(InvariantError, match=message):
            runtime._check()
        runtime._active, handle._state = handle, state  # so that the engine can leave its block
        tg.cancel_scope.cancel()


def test_a_hub_hook_left_after_the_generation_is_caught() -> None:
    """The hub holds its core only while a generation runs: leaving the block removes the hook."""
    runtime = LiveRuntime()
    runtime._check()
    runtime._hub.owed = runtime._settle
    with pytest.raises(InvariantError, match="still settles for a generation that ended"):
        runtime._check()


@pytest.mark.anyio
async def test_wings_see_live_read_only_views_of_accepted_inputs() -> None:
    """``RuntimeInternals``: a wing sees each input as it moves, and publishes only its own events."""
    runtime = LiveRuntime()
    access = internals(runtime)
    seen: list[tuple[Disposition, bool]] = []

    def writer(item: Input, metadata: object) -> None:
        record = access.accepted(item.id)
        assert record is not None
        seen.append((record.disposition, record.writing))

    async with runtime.open_generation("g1") as gen:
        runtime.submit_steering_nowait(steer("a"), "g1")
        record = access.accepted("a")
        assert record is not None
        assert (record.disposition, record.writing, record.sequence) == (Disposition.QUEUED, False, 1)
        await gen.boundary(writer)
        assert (record.disposition, record.writing) == (Disposition.APPLIED, False)
        assert [r.input.id for r in access.accepted_inputs()] == ["a"]
        assert access.accepted("never") is None
        access.publish("wing.note", {"n": 1})
        with pytest.raises(ValueError, match="owns that event type"):
            access.publish("steering.held", {})
    assert seen == [(Disposition.QUEUED, True)]
    assert [e["type"] for e in runtime.recent_events()][-2:] == ["wing.note", "generation.finished"]
    with pytest.raises(TypeError):
        internals(object())  # type: ignore[arg-type]
