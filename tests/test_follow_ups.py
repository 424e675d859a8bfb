"""Follow-ups (C29), delivery modes (C30) and skipped tool batches (C31) through ``LiveRuntime``.

A follow-up is submitted exactly as a steer, anchored to the running generation, and is
written at the first boundary of the *next* generation, never at its anchor's; a stop,
cancellation or failure of the anchor (or the runtime's close) holds it. Every test runs
on both anyio backends.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from live_steering import (
    Disposition,
    GenerationStateError,
    HoldReason,
    Input,
    LiveRuntime,
    Receipt,
)
from live_steering.testing import EventRecorder

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::live_steering.CheckpointDecisionWarning"),
]

Written = list[tuple[str, dict[str, Any]]]


def writer_into(written: Written) -> Any:
    def write(input: Input, metadata: dict[str, Any]) -> None:
        written.append((input.id, dict(metadata)))

    return write


def follow_up(text: str, id_: str) -> Input:
    return Input("follow_up", text, id=id_)


def events_of(runtime: LiveRuntime, *types: str) -> list[dict[str, Any]]:
    return [e for e in runtime.recent_events() if e["type"] in types]


async def test_a_follow_up_waits_for_its_anchor_to_finish_then_opens_the_next_generation() -> None:
    """Never written at its anchor's boundaries; the anchor finishes (no steer pending); the next
    generation's first boundary writes it, delivery ``follow_up``; the receipt keeps the anchor."""
    runtime = LiveRuntime()
    written: Written = []
    async with runtime:
        async with runtime.open_generation("g1") as gen:
            queued = await runtime.submit_steering(follow_up("then run the tests", "f1"), "g1")
            assert (queued.accepted, queued.disposition, queued.generation_id) == (True, "queued", "g1")
            assert await gen.boundary(writer_into(written)) == []  # not in its anchor
            assert gen.pending == 0
            assert runtime.pending_follow_ups == 1
            assert not gen.continue_after_checkpoint()  # C16: no steer pending, it finishes
        assert gen.terminal_event is not None
        assert gen.end_reason is None  # finished
        assert gen.terminal_event["accepted_input_ids"] == ["f1"]
        assert runtime.receipt("f1") == queued  # still queued between the generations
        assert runtime.pending_follow_ups == 1
        async with runtime.open_generation("g2") as gen2:
            assert runtime.pending_follow_ups == 0
            assert gen2.pending == 1
            applied = await gen2.boundary(writer_into(written))
            assert not gen2.continue_after_checkpoint()
        assert gen2.terminal_event is not None
        assert gen2.terminal_event["input_ids"] == ["f1"]
    assert applied == [Receipt(True, "f1", "g1", Disposition.APPLIED)]
    assert written == [
        ("f1", {"input_id": "f1", "target_generation_id": "g2", "delivery": "follow_up", "kind": "follow_up"})
    ]
    (started,) = [e for e in events_of(runtime, "generation.started") if e["generation_id"] == "g2"]
    assert started["follow_up_ids"] == ["f1"]
    delivered = events_of(runtime, "input.delivered", "steering.applied")
    assert [(e["type"], e["target_generation_id"], e["delivery"]) for e in delivered] == [
        ("input.delivered", "g2", "follow_up"),
        ("steering.applied", "g2", "follow_up"),
    ]
    accepted = events_of(runtime, "steering.accepted")
    assert [(e["input_id"], e["target_generation_id"]) for e in accepted] == [("f1", "g1")]


async def test_steers_pending_at_the_checkpoint_continue_the_anchor_first() -> None:
    """C16 still holds: a steer pending at the checkpoint continues the same generation; the
    follow-up waits through the continuation and is written only in the next generation."""
    runtime = LiveRuntime()
    written: Written = []
    async with runtime:
        async with runtime.open_generation("g1") as gen:
            await runtime.submit_steering(follow_up("later", "f1"), "g1")
            await runtime.submit_steering(Input("steer", "now", id="s1"), "g1")
            assert gen.continue_after_checkpoint()  # the steer continues g1
            await gen.boundary(writer_into(written))
            assert not gen.continue_after_checkpoint()
        async with runtime.open_generation("g2") as gen2:
            await gen2.boundary(writer_into(written))
            assert not gen2.continue_after_checkpoint()
    assert [(i, m["target_generation_id"], m["delivery"]) for i, m in written] == [
        ("s1", "g1", "request_boundary"),
        ("f1", "g2", "follow_up"),
    ]


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("stop", HoldReason.GENERATION_STOPPED),
        ("host-stop", HoldReason.GENERATION_STOPPED),
        ("budget", HoldReason.BUDGET_EXHAUSTED),
        ("cancel", HoldReason.GENERATION_CANCELLED),
        ("fail", HoldReason.GENERATION_FAILED),
        ("close", HoldReason.RUNTIME_CLOSED),
    ],
)
async def test_a_stop_of_the_anchor_holds_its_follow_ups(how: str, reason: HoldReason) -> None:
    """A stop, a host's stop, an exhausted budget, a cancellation, a failure of the anchor or the
    runtime's close discards the plan: the follow-up is held with that reason, never written."""
    runtime = LiveRuntime()
    written: Written = []
    failed: list[str] = []
    with anyio.CancelScope() as scope:
        try:
            async with runtime.open_generation("g1") as gen:
                await runtime.submit_steering(follow_up("later", "f1"), "g1")
                if how == "stop":
                    assert gen.stop()
                elif how == "host-stop":
                    assert runtime.stop("g1")
                elif how == "budget":
                    await runtime.submit_steering(Input("steer", "now", id="s1"), "g1")
                    assert not gen.continue_after_checkpoint(may_call=False)
                elif how == "cancel":
                    scope.cancel()
                    await anyio.lowlevel.checkpoint()
                elif how == "fail":
                    raise RuntimeError("the model call failed")
                else:
                    await runtime.aclose()
        except RuntimeError as error:
            failed.append(str(error))
    assert failed == (["the model call failed"] if how == "fail" else [])
    final = runtime.receipt("f1")
    assert final == Receipt(True, "f1", "g1", Disposition.HELD, reason)
    assert runtime.pending_follow_ups == 0
    (held,) = [e for e in events_of(runtime, "steering.held") if e["input_id"] == "f1"]
    assert (held["target_generation_id"], held["reason"]) == ("g1", reason.value)
    if not runtime.closed:  # the next generation starts with nothing of it
        async with runtime.open_generation("g2") as gen2:
            assert gen2.pending == 0
            await gen2.boundary(writer_into(written))
            assert not gen2.continue_after_checkpoint()
    assert written == []


async def test_a_close_after_the_anchor_finished_holds_the_carried_follow_up() -> None:
    """Carried out of a finished anchor, a follow-up no generation took yet is held at the close
    (``runtime-closed``); so is one whose anchor decided to finish when the runtime closed."""
    runtime = LiveRuntime()
    async with runtime.open_generation("g1") as gen:
        await runtime.submit_steering(follow_up("later", "f1"), "g1")
        assert not gen.continue_after_checkpoint()
    async with runtime.open_generation("g2") as gen2:
        await gen2.boundary(lambda input, metadata: None)
        await runtime.submit_steering(follow_up("and then", "f2"), "g2")
        assert not gen2.continue_after_checkpoint()  # finishing, f2 kept for after
        await runtime.aclose()
    assert runtime.receipt("f1") == Receipt(True, "f1", "g1", Disposition.APPLIED)
    assert runtime.receipt("f2") == Receipt(True, "f2", "g2", Disposition.HELD, HoldReason.RUNTIME_CLOSED)

    other = LiveRuntime()
    async with other.open_generation("g1") as gen:
        await other.submit_steering(follow_up("later", "f1"), "g1")
        assert not gen.continue_after_checkpoint()
    assert other.pending_follow_ups == 1
    await other.aclose()
    assert other.receipt("f1") == Receipt(True, "f1", "g1", Disposition.HELD, HoldReason.RUNTIME_CLOSED)
    assert other.pending_follow_ups == 0


async def test_follow_ups_share_identity_cap_and_refusal_order_with_steers() -> None:
    """C29: the same validation, identity, cap and refusal order as a steer (C6-C12)."""
    runtime = LiveRuntime(identity_limit=2)
    async with runtime, runtime.open_generation("g1") as gen:
        first = await runtime.submit_steering(follow_up("later", "f1"), "g1")
        assert await runtime.submit_steering(follow_up("later", "f1"), "g1") == first  # repeat
        conflict = await runtime.submit_steering(Input("steer", "later", id="f1"), "g1")
        assert conflict.reason == "identity-conflict"  # same id and text, another kind
        assert (await runtime.submit_steering(follow_up("  ", "f1"), "g1")).reason == "invalid-input"
        assert (await runtime.submit_steering(follow_up("x", "f2"), "g0")).reason == "stale-generation"
        assert (await runtime.submit_steering(follow_up("x\x00", "f3"), "g1")).reason == "invalid-input"
        assert (await runtime.submit_steering(Input("steer", "s", id="s1"), "g1")).accepted
        assert (await runtime.submit_steering(follow_up("x", "f4"), "g1")).reason == "capacity"
        assert gen.continue_after_checkpoint()  # s1 pending
        await gen.boundary(lambda input, metadata: None)
        assert not gen.continue_after_checkpoint()
        assert (await runtime.submit_steering(follow_up("x", "f5"), "g1")).reason == "finishing"
    stats = runtime.statistics()
    assert (stats.identities, stats.accepted, stats.follow_ups) == (2, 2, 0)


async def test_one_at_a_time_writes_the_oldest_steer_and_continues_for_the_rest() -> None:
    """C30: ``steering_mode="one-at-a-time"``: each boundary writes one steer; the rest stay
    pending in order and, at the checkpoint, continue the same generation (C16)."""
    runtime = LiveRuntime(steering_mode="one-at-a-time")
    written: Written = []
    async with runtime, runtime.open_generation("g1") as gen:
        assert runtime.generation is not None
        assert runtime.generation["steering_mode"] == "one-at-a-time"
        assert runtime.generation["follow_up_mode"] == "all"
        for n in (1, 2, 3):
            await runtime.submit_steering(Input("steer", f"s{n}", id=f"s{n}"), "g1")
        rounds = []
        while True:
            rounds.append([r.input_id for r in await gen.boundary(writer_into(written))])
            if not gen.continue_after_checkpoint():
                break
    assert rounds == [["s1"], ["s2"], ["s3"]]


async def test_one_at_a_time_follow_ups_continue_the_generation_they_started() -> None:
    """C30: with ``follow_up_mode="one-at-a-time"`` the first boundary of the next generation writes
    one follow-up; the ones left over continue that generation, one per boundary."""
    runtime = LiveRuntime(follow_up_mode="one-at-a-time")
    written: Written = []
    async with runtime:
        async with runtime.open_generation("g1") as gen:
            for n in (1, 2, 3):
                await runtime.submit_steering(follow_up(f"then {n}", f"f{n}"), "g1")
            await runtime.submit_steering(Input("steer", "now", id="s1"), "g1")
            await gen.boundary(writer_into(written))  # steers are "all": s1, no follow-up
            assert not gen.continue_after_checkpoint()
        async with runtime.open_generation("g2") as gen2:
            rounds = []
            while True:
                rounds.append([r.input_id for r in await gen2.boundary(writer_into(written))])
                if not gen2.continue_after_checkpoint():
                    break
    assert [i for i, _ in written] == ["s1", "f1", "f2", "f3"]
    assert rounds == [["f1"], ["f2"], ["f3"]]


async def test_modes_keep_admission_order_across_kinds() -> None:
    """A boundary writes from the head of the queue while the head's kind has quota left: a
    steer never overtakes an older follow-up (C13), whatever the modes."""
    runtime = LiveRuntime(follow_up_mode="one-at-a-time")
    written: Written = []
    async with runtime:
        async with runtime.open_generation("g1") as gen:
            await runtime.submit_steering(follow_up("a", "f1"), "g1")
            await runtime.submit_steering(follow_up("b", "f2"), "g1")
            assert not gen.continue_after_checkpoint()
        async with runtime.open_generation("g2") as gen2:
            await runtime.submit_steering(Input("steer", "c", id="s1"), "g2")
            first = await gen2.boundary(writer_into(written))
            assert [r.input_id for r in first] == ["f1"]  # f2's quota is used: s1 waits behind it
            assert gen2.continue_after_checkpoint()
            assert [r.input_id for r in await gen2.boundary(writer_into(written))] == ["f2", "s1"]
            assert not gen2.continue_after_checkpoint()


async def test_bad_modes_are_refused_at_construction() -> None:
    """A mode is ``"all"`` or ``"one-at-a-time"``: anything else is ``ValueError``, a non-string
    ``TypeError``, before a runtime exists."""
    with pytest.raises(ValueError, match="steering_mode must be one of"):
        LiveRuntime(steering_mode="some")
    with pytest.raises(ValueError, match="follow_up_mode must be one of"):
        LiveRuntime(follow_up_mode="ALL")
    with pytest.raises(TypeError, match="steering_mode must be a str"):
        LiveRuntime(steering_mode=1)  # type: ignore[arg-type]
    await anyio.lowlevel.checkpoint()


async def test_skip_tools_names_the_pending_steers_and_needs_one() -> None:
    """C31: ``gen.skip_tools(ids)`` publishes ``tools.skipped`` with the pending steers' ids; a
    pending follow-up alone justifies no skip (``GenerationStateError``, nothing published)."""
    runtime = LiveRuntime()
    async with runtime, runtime.open_generation("g1") as gen:
        await runtime.submit_steering(follow_up("later", "f1"), "g1")
        assert gen.steers_pending == []
        with pytest.raises(GenerationStateError, match="no steer is pending"):
            gen.skip_tools(["call-2"])
        await runtime.submit_steering(Input("steer", "stop that", id="s1"), "g1")
        assert gen.steers_pending == ["s1"]
        assert gen.skip_tools(["call-2", "call-3"]) == ["s1"]
        with pytest.raises(TypeError, match="tool_call_id must be a str"):
            gen.skip_tools([3])  # type: ignore[list-item]
        with pytest.raises(TypeError, match=r"pass \['call-4'\]"):  # not ['c', 'a', 'l', ...]
            gen.skip_tools("call-4")
        with pytest.raises(ValueError, match="tool_call_ids is empty"):
            gen.skip_tools([])
        await gen.boundary(lambda input, metadata: None)
        assert not gen.continue_after_checkpoint()
    (skipped,) = events_of(runtime, "tools.skipped")
    assert {k: skipped[k] for k in ("generation_id", "tool_call_ids", "input_ids")} == {
        "generation_id": "g1",
        "tool_call_ids": ["call-2", "call-3"],
        "input_ids": ["s1"],
    }


async def test_a_wing_cannot_publish_tools_skipped() -> None:
    """``tools.skipped`` is the core's event type (C21, C31): a wing's ``publish`` refuses it."""
    from live_steering._runtime import internals

    runtime = LiveRuntime()
    async with runtime, runtime.open_generation("g1"):
        with pytest.raises(ValueError, match="the core owns that event type"):
            internals(runtime).publish("tools.skipped", {})


async def test_pending_follow_ups_publishes_an_owed_acceptance_first() -> None:
    """runtime.pending_follow_ups shows an admission only once its steering.accepted is out
    (an awaited submit leaves it owed while it yields; another task may read meanwhile)."""
    runtime = LiveRuntime()
    recorder = EventRecorder.attach(runtime)  # a listener: sees what is published, settles nothing
    async with runtime.open_generation("g1"):
        assert runtime._core.decide(Input("follow_up", "then the docs", id="f1"), "g1") is None  # owed
        assert recorder.types()[-1] == "generation.started"
        assert runtime.pending_follow_ups == 1
        assert recorder.types()[-1] == "steering.accepted"
        assert runtime.statistics().follow_ups == 1
