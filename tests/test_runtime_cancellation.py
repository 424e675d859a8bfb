"""Cancellation (and stop, and failure) at every await point, enumerated deterministically (C15-C20).

The reference loop runs on instrumented fixtures: every await of the provider, the
tools, the context writer (before and after its effect) and the durable checkpoint
goes through ``Points``, which numbers it. A first, undisturbed run counts the
points; then, for every point k, the same script is run again and disturbed at k:

* ``cancel-here``: the loop's scope is cancelled and the point awaits, so the
  cancellation lands exactly at await k;
* ``cancel-next``: the scope is cancelled but the point returns without awaiting,
  so the cancellation lands at whatever await comes next, including the runtime's
  own (``Generation.boundary``'s checkpoint, ``wait_for_input``);
* ``stop``: ``AgentLoop.stop()`` is called at k (from inside the loop's own task);
* ``fail``: the awaited call raises at k (a provider, tool, writer or checkpoint error).

Hosts submit steers at the first points, so inputs are pending, being written or
arriving during the checkpoint when the disturbance hits. After each run: the
runtime's ``_check()``, the whole-history check (nothing queued in an ended
generation, each input final once), the per-input evidence (applied means in the
context exactly once; held means never handed to the writer; unknown means the
write started and was not confirmed), the hold reason that fits the ending, and a
next generation that still delivers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from live_steering import Disposition, Input, LiveRuntime, Receipt
from live_steering.loop import AgentLoop, Context, ContextEntry, Reply, ToolCall
from live_steering.testing import History

pytestmark = pytest.mark.anyio

MODES = ("cancel-here", "cancel-next", "stop", "fail")


def steers_at(name: str, seen: list[str]) -> bool:
    """A host steers during the first two provider calls, every tool call, the first write barrier,
    the first write and the first checkpoint."""
    if name in seen or name in ("provider-2", "provider-3"):
        return False  # only the first visit: the second checkpoint must be able to finish
    for first_only in ("write-before", "barrier"):
        if name.startswith(first_only):
            return not any(n.startswith(first_only) for n in seen)
    return not name.startswith("write-after")


class Injected(Exception):
    """The failure injected at an await point."""


class Points:
    """Numbers every await point of the instrumented fixtures and disturbs the chosen one."""

    def __init__(self, runtime: LiveRuntime, history: History, at: int | None, mode: str) -> None:
        self.runtime = runtime
        self.history = history
        self.at = at
        self.mode = mode
        self.names: list[str] = []
        self.scope: anyio.CancelScope | None = None
        self.loop: AgentLoop | None = None
        self.generation_id = ""
        self.hit: str | None = None

    async def __call__(self, name: str) -> None:
        k = len(self.names)
        first = steers_at(name, self.names)
        self.names.append(name)
        if first and self.runtime.generation is not None:
            # a host steers while this await is in flight; admission is synchronous (C8)
            input = Input("steer", f"steer at {name}", id=f"in-{k}")
            op = self.history.invoke(input, self.generation_id)
            self.history.complete(op, self.runtime.submit_steering_nowait(input, self.generation_id))
        if k == self.at:
            self.hit = name
            assert self.scope is not None
            assert self.loop is not None
            if self.mode == "fail":
                raise Injected(name)
            if self.mode == "stop":
                self.loop.stop()
                # C17: the stop holds what is pending in the stop call itself, not later
                generation = self.runtime.generation
                assert generation is None or generation["pending"] == 0
            else:
                self.scope.cancel()
                if self.mode == "cancel-next":
                    return  # the cancellation lands at the next await, wherever it is
        await anyio.lowlevel.checkpoint()


class Provider:
    def __init__(self, points: Points, replies: Sequence[Reply]) -> None:
        self.points = points
        self.replies = list(replies)
        self.calls = 0

    async def complete(self, request: Sequence[ContextEntry]) -> Reply:
        index = self.calls
        self.calls += 1
        await self.points(f"provider-{index}")
        return self.replies[min(index, len(self.replies) - 1)]


class Tools:
    def __init__(self, points: Points) -> None:
        self.points = points

    async def run(self, call: ToolCall) -> str:
        await self.points(f"tool-{call.id}")
        return "ok"


class InstrumentedContext(Context):
    """A writer with an await before its effect and one after it (both can be interrupted)."""

    def __init__(self, points: Points) -> None:
        super().__init__()
        self.points = points
        self.started: list[str] = []

    async def add_steer(self, input: Input, metadata: Mapping[str, Any]) -> None:
        self.started.append(input.id)
        await self.points(f"write-before-{input.id}")
        self.add("steer", input.text, metadata)
        await self.points(f"write-after-{input.id}")

    def steer_ids(self) -> list[str]:
        return [str(e.metadata["input_id"]) for e in self.entries if e.role == "steer"]


SCRIPT = (
    Reply("reading", (ToolCall("t1", "read"),)),
    Reply("editing", (ToolCall("t2", "edit"), ToolCall("t3", "test"))),
    Reply("done"),
)

HOLD_REASON = {
    "generation.cancelled": "generation-cancelled",
    "generation.failed": "generation-failed",
}


async def run_disturbed(
    at: int | None, mode: str, barrier: bool = False
) -> tuple[Points, LiveRuntime, History, InstrumentedContext]:
    runtime = LiveRuntime(session_id="cancel")
    history = History.attach(runtime)
    points = Points(runtime, history, at, mode)
    context = InstrumentedContext(points)
    if barrier:

        async def write_ahead(generation_id: str, inputs: Sequence[Input]) -> None:
            # a write-ahead hook (e.g. the receipt journal): its inputs are not handed over yet
            await points(f"barrier-{inputs[0].id}")

        runtime.set_write_barrier(write_ahead)

    async def checkpoint(ctx: Context) -> None:
        await points("checkpoint")

    loop = AgentLoop(
        runtime,
        Provider(points, SCRIPT),
        Tools(points),
        context=context,
        call_budget=5,
        checkpoint=checkpoint,
        run_follow_ups=False,  # the host's follow-up stays for gen-2, which the test opens itself
    )
    points.loop = loop
    points.generation_id = "gen-1"
    with anyio.CancelScope() as scope:
        points.scope = scope
        with contextlib.suppress(Injected):
            await loop.run("task", generation_id="gen-1")
    return points, runtime, history, context


def assert_consistent(
    runtime: LiveRuntime, history: History, context: InstrumentedContext, mode: str
) -> None:
    runtime._check()
    assert runtime.generation is None
    report = history.check(require_final=True).assert_ok()
    terminal = [e for e in history.events if e["type"].startswith("generation.") and "input_ids" in e]
    assert len(terminal) == 1
    ending = terminal[0]
    steer_ids = context.steer_ids()
    assert len(steer_ids) == len(set(steer_ids)), "an input was written twice"
    accepted = [e["input_id"] for e in history.events if e["type"] == "steering.accepted"]
    for input_id in accepted:
        receipt = runtime.receipt(input_id)
        assert receipt is not None
        if receipt.disposition is Disposition.APPLIED:
            assert steer_ids.count(input_id) == 1
            assert input_id in ending["input_ids"]
        elif receipt.disposition is Disposition.UNKNOWN:
            assert input_id in context.started, "unknown although never handed to the writer"
            assert receipt.reason == "write-interrupted"
        else:
            assert receipt.disposition is Disposition.HELD
            assert input_id not in context.started, "held although handed to the writer (C23/C15)"
            assert input_id not in steer_ids
            expected = HOLD_REASON.get(ending["type"], ending.get("reason"))
            if ending["type"] == "generation.stopped" and mode == "stop":
                assert receipt.reason in ("generation-stopped", "budget-exhausted")
            else:
                assert receipt.reason == expected, (receipt, ending)
    if ending["type"] == "generation.finished":
        assert report.held == 0
        assert report.unknown == 0
    assert report.unknown <= 1, "at most the one write in flight can be unknown"


async def next_generation_still_delivers(runtime: LiveRuntime, history: History) -> None:
    """C17: a stop or cancel of one generation does not close the runtime."""
    written: list[str] = []
    async with runtime.open_generation("gen-2") as gen:
        assert (await history.submit(Input("steer", "again", id="next"), "gen-2")).accepted
        await gen.boundary(lambda input, metadata: written.append(input.id))
        assert not gen.continue_after_checkpoint()
    assert written == ["next"]
    history.check(require_final=True).assert_ok()


async def test_undisturbed_script_covers_every_kind_of_await() -> None:
    """The baseline run visits provider, tool, write (before/after) and checkpoint awaits, and finishes."""
    points, runtime, history, context = await run_disturbed(None, "none")
    kinds = {name.split("-")[0] for name in points.names}
    assert kinds == {"provider", "tool", "write", "checkpoint"}
    assert points.names.count("checkpoint") == 2  # a steer during the checkpoint continued the generation
    assert_consistent(runtime, history, context, "none")
    assert history.events[-1]["type"] == "generation.finished"
    assert [e["type"] for e in history.events].count("generation.continued") == 1
    assert runtime.statistics().applied == runtime.statistics().accepted


@pytest.mark.parametrize("barrier", [False, True], ids=["plain", "write-barrier"])
@pytest.mark.parametrize("mode", MODES)
async def test_disturbance_at_every_await_point_leaves_consistent_state(mode: str, barrier: bool) -> None:
    """For each await point k and each disturbance, every invariant and receipt rule still holds."""
    baseline, *_ = await run_disturbed(None, "none", barrier)
    if barrier:
        assert any(name.startswith("barrier") for name in baseline.names)
    total = len(baseline.names)
    hits: set[str] = set()
    endings: set[str] = set()
    for at in range(total):
        points, runtime, history, context = await run_disturbed(at, mode, barrier)
        assert points.hit is not None
        hits.add(points.hit)
        try:
            assert_consistent(runtime, history, context, mode)
            await next_generation_still_delivers(runtime, history)
        except AssertionError as error:
            raise AssertionError(f"{mode} at point {at} ({points.hit}): {error}") from error
        endings.add(next(e["type"] for e in history.events if "input_ids" in e))
    assert hits == set(baseline.names)  # every point was disturbed once
    expected = {
        "cancel-here": "generation.cancelled",
        "cancel-next": "generation.cancelled",
        "stop": "generation.stopped",
        "fail": "generation.failed",
    }[mode]
    assert expected in endings


async def test_submit_cancelled_at_its_await_keeps_its_admission() -> None:
    """A submit whose scope is cancelled at its only await still returns; the admission stands (C8)."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    async with runtime.open_generation("g") as gen:
        with anyio.CancelScope() as scope:
            scope.cancel()
            receipt = await history.submit(Input("steer", "x", id="cancelled-submit"), "g")
        assert receipt.accepted
        assert receipt.disposition is Disposition.QUEUED
        written: list[str] = []
        await gen.boundary(lambda input, metadata: written.append(input.id))
        assert written == ["cancelled-submit"]
        assert not gen.continue_after_checkpoint()
    history.check(require_final=True).assert_ok()


async def test_cancel_while_parked_for_input_holds_what_just_arrived() -> None:
    """An input admitted in the same step the parked engine is cancelled is held, not lost (C17)."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    with anyio.CancelScope() as scope:
        async with runtime.open_generation("g") as gen, anyio.create_task_group() as tg:
            tg.start_soon(gen.wait_for_input)
            await anyio.wait_all_tasks_blocked()
            op = history.invoke(Input("steer", "x", id="just-in-time"), "g")
            history.complete(op, runtime.submit_steering_nowait(Input("steer", "x", id="just-in-time"), "g"))
            scope.cancel()
            await anyio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    receipt = runtime.receipt("just-in-time")
    assert receipt is not None
    assert receipt.disposition is Disposition.HELD
    assert receipt.reason == "generation-cancelled"
    history.check(require_final=True).assert_ok()
    await next_generation_still_delivers(runtime, history)


@pytest.mark.parametrize("at", range(6))
async def test_direct_boundary_cancelled_at_each_writer_await(at: int) -> None:
    """``Generation.boundary`` with an async writer (2 awaits per input), cancelled at await k."""
    runtime = LiveRuntime()
    history = History.attach(runtime)
    count = 0
    started: list[str] = []
    confirmed: list[str] = []
    with anyio.CancelScope() as scope:
        async with runtime.open_generation("g") as gen:
            for n in range(3):
                await history.submit(Input("steer", f"s{n}", id=f"s{n}"), "g")

            async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
                nonlocal count
                started.append(input.id)
                for _ in range(2):
                    if count == at:
                        scope.cancel()
                    count += 1
                    await anyio.lowlevel.checkpoint()
                confirmed.append(input.id)

            await gen.boundary(writer)
            raise AssertionError("the boundary should have been cancelled")
    dispositions = [r.disposition if (r := runtime.receipt(f"s{n}")) else None for n in range(3)]
    interrupted = at // 2
    assert dispositions[:interrupted] == [Disposition.APPLIED] * interrupted
    assert dispositions[interrupted] is Disposition.UNKNOWN
    assert dispositions[interrupted + 1 :] == [Disposition.HELD] * (2 - interrupted)
    assert started == [f"s{n}" for n in range(interrupted + 1)]
    runtime._check()
    history.check(require_final=True).assert_ok()


# -- the new write paths: carried follow-ups (C29) and one-at-a-time boundaries (C30) ----------

DELIVERY_MODES = ("all", "one-at-a-time")

#: What each run queues for generation g1: follow-ups anchored to g0 (which finished) and
#: carried into g1, steers admitted into g1, or both (the carried follow-ups come first).
QUEUES = {
    "follow_up": ("f0", "f1", "f2"),
    "steer": ("s0", "s1", "s2"),
    "mixed": ("f0", "f1", "s0"),
}


def kind_of(input_id: str) -> str:
    return "follow_up" if input_id.startswith("f") else "steer"


async def finish_with_follow_ups(runtime: LiveRuntime, history: History, ids: Sequence[str]) -> None:
    """Admit the follow-ups ``ids`` in g0 and finish it: they wait for the next generation (C29)."""
    async with runtime.open_generation("g0") as gen:
        for input_id in ids:
            item = Input("follow_up", f"then {input_id}", id=input_id)
            assert (await history.submit(item, "g0")).accepted
        assert not gen.continue_after_checkpoint()
    assert runtime.pending_follow_ups == len(ids)


class CancellingWriter:
    """An async writer with two awaits per input; at await ``at`` it cancels ``scope``: ``here``
    awaits there (the cancellation lands at await ``at``), ``next`` does not (it lands at the
    next await: the writer's, or the runtime's own at the next boundary)."""

    def __init__(self, at: int, how: str) -> None:
        self.at = at
        self.how = how
        self.awaits = 0
        self.scope: anyio.CancelScope | None = None
        self.started: list[str] = []
        self.confirmed: list[str] = []
        self.boundaries: list[list[str]] = []
        self.metadata: dict[str, Mapping[str, Any]] = {}

    async def __call__(self, input: Input, metadata: Mapping[str, Any]) -> None:
        self.started.append(input.id)
        self.boundaries[-1].append(input.id)
        self.metadata[input.id] = dict(metadata)
        for _ in range(2):
            k = self.awaits
            self.awaits += 1
            if k == self.at:
                assert self.scope is not None
                self.scope.cancel()
                if self.how == "next":
                    continue
            await anyio.lowlevel.checkpoint()
        self.confirmed.append(input.id)


@pytest.mark.parametrize("how", ["here", "next"])
@pytest.mark.parametrize("mode", DELIVERY_MODES)
@pytest.mark.parametrize("queue", sorted(QUEUES))
@pytest.mark.parametrize("at", range(6))
async def test_cancelled_write_of_a_carried_follow_up_or_a_one_at_a_time_boundary(
    queue: str, mode: str, how: str, at: int
) -> None:
    """C15/C29/C30: cancelled at each writer await of g1, whose inputs are carried follow-ups, steers
    or both, written all at once or one of each kind per boundary: the interrupted one is unknown
    (write-interrupted, with its delivery), the ones before applied, the rest held; a boundary
    never writes two of a one-at-a-time kind; receipts keep their anchor; the next generation runs."""
    ids = QUEUES[queue]
    runtime = LiveRuntime(steering_mode=mode, follow_up_mode=mode)
    history = History.attach(runtime)
    await finish_with_follow_ups(runtime, history, [i for i in ids if kind_of(i) == "follow_up"])
    writer = CancellingWriter(at, how)
    with anyio.CancelScope() as scope:
        writer.scope = scope
        async with runtime.open_generation("g1") as gen:
            for input_id in ids:
                if kind_of(input_id) == "steer":
                    assert (
                        await history.submit(Input("steer", f"now {input_id}", id=input_id), "g1")
                    ).accepted
            while True:
                writer.boundaries.append([])
                await gen.boundary(writer)
                history.mark_boundary()
                if not gen.continue_after_checkpoint():
                    break
    runtime._check()
    report = history.check(require_final=True).assert_ok()
    unknown = [i for i in writer.started if i not in writer.confirmed]
    assert len(unknown) <= 1
    if how == "here":
        assert scope.cancelled_caught
        assert writer.confirmed == list(ids[: at // 2])
        assert unknown == [ids[at // 2]]
    assert report.unknown == len(unknown)
    terminal = next(e for e in reversed(history.events) if e["type"].startswith("generation."))
    for input_id in ids:
        receipt = runtime.receipt(input_id)
        assert receipt is not None
        assert receipt.generation_id == ("g0" if kind_of(input_id) == "follow_up" else "g1")
        delivery = "follow_up" if kind_of(input_id) == "follow_up" else "request_boundary"
        events = [e for e in history.events if e.get("input_id") == input_id and "delivery" in e]
        assert all(e["delivery"] == delivery and e["target_generation_id"] == "g1" for e in events)
        if input_id in writer.started:
            assert writer.metadata[input_id]["delivery"] == delivery
            assert writer.metadata[input_id]["target_generation_id"] == "g1"
        if input_id in writer.confirmed:
            assert receipt.disposition is Disposition.APPLIED
        elif input_id in unknown:
            assert (receipt.disposition, receipt.reason) == (Disposition.UNKNOWN, "write-interrupted")
            (event,) = [e for e in events if e["type"] == "steering.unknown"]
            assert event["reason"] == "write-interrupted"
        else:
            assert terminal["type"] == "generation.cancelled"
            assert (receipt.disposition, receipt.reason) == (Disposition.HELD, "generation-cancelled")
    for written in writer.boundaries:
        kinds = [kind_of(i) for i in written]
        assert written == [i for i in ids if i in written]  # admission order, carried ones first
        if mode == "one-at-a-time":
            assert kinds.count("steer") <= 1
            assert kinds.count("follow_up") <= 1
    await next_generation_still_delivers(runtime, history)


@pytest.mark.parametrize("mode", DELIVERY_MODES)
@pytest.mark.parametrize("at", range(3))
async def test_write_barrier_cancelled_on_a_carried_follow_up_returns_it_to_the_head(
    mode: str, at: int
) -> None:
    """C15/C29/C30: the write barrier cancelled on the carried follow-up ``f{at}``: never handed to
    the writer, so queued again at the head of the queue (not unknown); the next boundary writes it
    first (in one-at-a-time, it alone), and everything ends applied with delivery follow_up."""
    ids = ("f0", "f1", "f2")
    runtime = LiveRuntime(follow_up_mode=mode)
    history = History.attach(runtime)
    await finish_with_follow_ups(runtime, history, ids)
    barrier_calls: list[tuple[str, str]] = []
    scopes: list[anyio.CancelScope] = []
    boundaries: list[list[str]] = []

    async def barrier(generation_id: str, inputs: Sequence[Input]) -> None:
        (input,) = inputs
        barrier_calls.append((generation_id, input.id))
        if len(barrier_calls) == at + 1:
            scopes[-1].cancel()
        await anyio.lowlevel.checkpoint()

    async def writer(input: Input, metadata: Mapping[str, Any]) -> None:
        boundaries[-1].append(input.id)
        await anyio.lowlevel.checkpoint()

    runtime.set_write_barrier(barrier)
    after_cancel: int | None = None
    async with runtime.open_generation("g1") as gen:
        while True:
            boundaries.append([])
            with anyio.CancelScope() as scope:
                scopes.append(scope)
                await gen.boundary(writer)
            history.mark_boundary()
            if scope.cancelled_caught:
                assert after_cancel is None
                after_cancel = len(boundaries)
                receipt = runtime.receipt(f"f{at}")
                assert receipt is not None
                assert receipt.disposition is Disposition.QUEUED
                generation = runtime.generation
                assert generation is not None
                assert generation["pending"] == len(ids) - at  # back in the queue, at its head
                assert [i for b in boundaries for i in b] == list(ids[:at])
                runtime._check()
                continue
            if not gen.continue_after_checkpoint():
                break
    assert after_cancel is not None
    first_after = boundaries[after_cancel]
    assert first_after[0] == f"f{at}"
    if mode == "one-at-a-time":
        assert first_after == [f"f{at}"]
        assert all(len(b) <= 1 for b in boundaries)
    else:
        assert first_after == list(ids[at:])
    assert [i for b in boundaries for i in b] == list(ids)
    # the barrier announced the cancelled one twice: before the cancel, and before its write
    assert [i for _, i in barrier_calls] == [*ids[: at + 1], *ids[at:]]
    runtime._check()
    report = history.check(require_final=True).assert_ok()
    assert (report.applied, report.unknown, report.held) == (3, 0, 0)
    for input_id in ids:
        assert runtime.receipt(input_id) == Receipt(True, input_id, "g0", Disposition.APPLIED)
    applied = [e for e in history.events if e["type"] == "steering.applied"]
    assert {(e["target_generation_id"], e["delivery"]) for e in applied} == {("g1", "follow_up")}


class Collect(list[str]):
    """A writer that returns at once, keeping the ids it was given, in order."""

    def __call__(self, input: Input, metadata: Mapping[str, Any]) -> None:
        self.append(input.id)


class FollowUpPoints(Points):
    """``Points`` for a generation that opens with carried follow-ups: a host also queues a
    follow-up of its own at the first provider call, and every provider call marks a point
    between two boundaries for the history checker (C30)."""

    async def __call__(self, name: str) -> None:
        if name.startswith("provider"):
            self.history.mark_boundary()
        if name == "provider-0" and self.runtime.generation is not None:
            input = Input("follow_up", "and then", id="fu-host")
            op = self.history.invoke(input, self.generation_id)
            self.history.complete(op, self.runtime.submit_steering_nowait(input, self.generation_id))
        await super().__call__(name)


async def run_disturbed_with_follow_ups(
    at: int | None, mode: str, delivery_mode: str, barrier: bool
) -> tuple[Points, LiveRuntime, History, InstrumentedContext]:
    """gen-0 queues three follow-ups and finishes; the reference loop runs gen-1, which writes
    them first (one per boundary in one-at-a-time), disturbed at await ``at``."""
    runtime = LiveRuntime(session_id="cancel", steering_mode=delivery_mode, follow_up_mode=delivery_mode)
    history = History.attach(runtime)
    async with runtime.open_generation("gen-0") as gen:
        for n in range(3):
            assert (await history.submit(Input("follow_up", f"then {n}", id=f"fu-{n}"), "gen-0")).accepted
        assert not gen.continue_after_checkpoint()
    points = FollowUpPoints(runtime, history, at, mode)
    context = InstrumentedContext(points)
    if barrier:

        async def write_ahead(generation_id: str, inputs: Sequence[Input]) -> None:
            await points(f"barrier-{inputs[0].id}")

        runtime.set_write_barrier(write_ahead)

    async def checkpoint(ctx: Context) -> None:
        await points("checkpoint")

    loop = AgentLoop(
        runtime,
        Provider(points, SCRIPT),
        Tools(points),
        context=context,
        call_budget=5,
        checkpoint=checkpoint,
        run_follow_ups=False,  # the host's follow-up stays for gen-2, which the test opens itself
    )
    points.loop = loop
    points.generation_id = "gen-1"
    with anyio.CancelScope() as scope:
        points.scope = scope
        with contextlib.suppress(Injected):
            await loop.run("task", generation_id="gen-1")
    return points, runtime, history, context


@pytest.mark.parametrize("barrier", [False, True], ids=["plain", "write-barrier"])
@pytest.mark.parametrize("delivery_mode", DELIVERY_MODES)
@pytest.mark.parametrize("mode", MODES)
async def test_disturbance_at_every_await_of_a_generation_opened_by_follow_ups(
    mode: str, delivery_mode: str, barrier: bool
) -> None:
    """C15/C17/C29/C30: the reference loop's generation that writes carried follow-ups, disturbed
    at each await point: applied ones are in the context once with delivery follow_up, the one in
    the writer unknown, the rest held with the ending's reason; the host's own follow-up is carried
    on a finish and held otherwise; the next generation writes what was carried, then its own."""
    baseline, *_ = await run_disturbed_with_follow_ups(None, "none", delivery_mode, barrier)
    assert sum(name.startswith("write-before-fu-") for name in baseline.names) == 3
    for at in range(len(baseline.names)):
        points, runtime, history, context = await run_disturbed_with_follow_ups(
            at, mode, delivery_mode, barrier
        )
        try:
            runtime._check()
            history.check().assert_ok()
            ending = next(e for e in reversed(history.events) if "input_ids" in e)
            assert ending["generation_id"] == "gen-1"
            written = context.steer_ids()
            assert len(written) == len(set(written)), "an input was written twice"
            for entry in context.entries:
                if entry.role == "steer":
                    follow_up = str(entry.metadata["input_id"]).startswith("fu-")
                    assert entry.metadata["delivery"] == ("follow_up" if follow_up else "request_boundary")
                    assert entry.metadata["target_generation_id"] == "gen-1"
            for n in range(3):
                receipt = runtime.receipt(f"fu-{n}")
                assert receipt is not None
                assert receipt.generation_id == "gen-0"
                if receipt.disposition is Disposition.APPLIED:
                    assert written.count(f"fu-{n}") == 1
                elif receipt.disposition is Disposition.UNKNOWN:
                    assert f"fu-{n}" in context.started
                else:
                    assert receipt.disposition is Disposition.HELD
                    assert f"fu-{n}" not in context.started
                    if not (ending["type"] == "generation.stopped" and mode == "stop"):
                        assert receipt.reason == HOLD_REASON.get(ending["type"], ending.get("reason"))
            host = runtime.receipt("fu-host")
            carried: list[str] = []
            if host is not None:  # accepted at provider-0 (not if the disturbance came first)
                if ending["type"] == "generation.finished":
                    assert host.disposition is Disposition.QUEUED
                    carried = ["fu-host"]
                else:
                    assert host.disposition is Disposition.HELD
            assert runtime.pending_follow_ups == len(carried)
            seen = Collect()
            async with runtime.open_generation("gen-2") as gen:
                assert (await history.submit(Input("steer", "again", id="next"), "gen-2")).accepted
                while True:
                    await gen.boundary(seen)
                    history.mark_boundary()
                    if not gen.continue_after_checkpoint():
                        break
            assert seen == [*carried, "next"]
            history.check(require_final=True).assert_ok()
        except AssertionError as error:
            raise AssertionError(f"{mode} at point {at} ({points.hit}): {error}") from error
